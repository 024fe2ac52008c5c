#!/usr/bin/env python3
"""`make mutation`: how many wrong versions of the deciding code the unit tests catch.

Runs Cosmic Ray (requirements-dev.txt) over each target file of scripts/mutation.toml, against
the unit tests named there, in a copy of the work tree under outputs/mutation/tree, so an
interrupted run never leaves a mutated file in the checkout. Prints each file's score and every
surviving mutant, and writes both to outputs/mutation/report.json.

    scripts/mutation.py                      # every target
    scripts/mutation.py library/slurm_nodes.py plugins/filter/*.py
    scripts/mutation.py --report-only        # score the last run again, after listing an equivalent

A run over some files updates their entries in the report; the others keep their last scores.
Targets run side by side, one per core (--jobs), each in its own copy of the tree: a whole run
is hours on one core.
"""

import argparse
import ast
import concurrent.futures
import glob
import json
import os
import queue
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "scripts" / "mutation.toml"
OUT = ROOT / "outputs" / "mutation"
TARGETS = ["plugins/module_utils/*.py", "library/*.py", "plugins/filter/*.py", "plugins/action/*.py",
           "plugins/plugin_utils/*.py", "roles/slurm_launch/files/*.py", "roles/slurm_launch/files/preflight/*.py",
           "slurm_train/*.py", "bin/local-cluster"]
GOAL = 90.0


def tool(name):
    """A Cosmic Ray command from the environment this script runs in."""
    path = Path(sys.executable).parent / name
    if not path.exists():
        sys.exit(f"mutation: {name} not found beside {sys.executable}; "
                 "install requirements-dev.txt (make mutation does)")
    return str(path)


def run(argv, cwd):
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=tree_environment(cwd))
    if done.returncode != 0:
        sys.exit(f"mutation: {' '.join(argv)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return done.stdout


def tree_environment(tree):
    """The environment of a command run in `tree`: its tests import the collection through the
    tree's own collections/ link, by its ansible.cfg (not the checkout's, which make exports),
    so that they see each mutant."""
    return {**os.environ, "ANSIBLE_CONFIG": str(Path(tree) / "ansible.cfg")}


def module_name(target):
    """The file Cosmic Ray mutates for `target`: itself, or for a script without .py (which
    Cosmic Ray skips) a .py twin that the original name links to, so that tests loading the
    original name see each mutant."""
    return target if target.endswith(".py") else target + ".py"


def copy_tree(tree, targets):
    """The checkout's files (tracked and untracked, not ignored) copied to `tree`, each target
    at its module_name()."""
    shutil.rmtree(tree, ignore_errors=True)
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source, copy = ROOT / name, tree / name
        if source.is_symlink():  # the sysfs fixtures are trees of links, as sysfs is
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.symlink_to(os.readlink(source))
        elif source.is_file():
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy)
    for target in targets:
        if module_name(target) != target:
            (tree / target).rename(tree / module_name(target))
            (tree / target).symlink_to(Path(module_name(target)).name)


def definition_lines(path, names):
    """Line ranges of the top-level functions and classes called `names` in `path`."""
    found = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in names:
            found[node.name] = f"{node.lineno}-{node.end_lineno}"
    missing = sorted(set(names) - set(found))
    if missing:
        print(f"mutation: {path.name} has no {', '.join(missing)} (renamed? update scripts/mutation.toml)")
    return sorted(found.values())


def mutate_one(target, config, tree, python, sessions):
    """Run Cosmic Ray on one file; the dumped (work item, result) pairs."""
    module = module_name(target)
    tests = [f"tests/unit/{name}" for name in config["tests"].get(target, [])
             if (tree / "tests" / "unit" / name).exists()]
    selected = config.get("select", {}).get(target)
    slug = re.sub(r"[^A-Za-z0-9]+", "_", target)
    session, cfg_path = sessions / f"{slug}.sqlite", sessions / f"{slug}.toml"
    whitelist = re.sub(r"\s+", "", config["operators"])
    lines = {}
    if target in config.get("only", {}):
        lines = {module: definition_lines(tree / module, config["only"][target])}
    cfg = {
        "module-path": module,
        "timeout": float(config.get("timeout", 60)),
        "excluded-modules": [],
        # -x: the first failing test is enough to call a mutant killed.
        "test-command": shlex.join([python, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                                    *(["-k", selected] if selected else []), *tests]),
        "distributor": {"name": "local"},
        "filters": {"operators-filter": {"exclude-operators": [f"(?!{whitelist})"]},
                    "line-filter": {"lines": lines}},
    }
    cfg_path.write_text(toml_dumps({"cosmic-ray": cfg}))
    session.unlink(missing_ok=True)
    run([tool("cosmic-ray"), "init", str(cfg_path), str(session)], tree)
    run([tool("cr-filter-operators"), str(session), str(cfg_path)], tree)
    if lines:
        run([tool("cr-filter-lines"), str(session), "--config", str(cfg_path)], tree)
    if tests:
        baseline = subprocess.run([tool("cosmic-ray"), "baseline", str(cfg_path)], cwd=tree,
                                  capture_output=True, text=True, env=tree_environment(tree))
        if baseline.returncode != 0:
            sys.exit(f"mutation: {target}: the unit tests fail on the unmutated code:\n"
                     f"{baseline.stdout}{baseline.stderr}")
        run([tool("cosmic-ray"), "exec", str(cfg_path), str(session)], tree)
    dumped = run([tool("cosmic-ray"), "dump", str(session)], tree)
    return module, tests, [json.loads(line) for line in dumped.splitlines() if line.strip()]


def toml_dumps(data, prefix=""):
    """Just enough TOML for Cosmic Ray's config (tomllib reads but cannot write)."""
    plain = {k: v for k, v in data.items() if not isinstance(v, dict)}
    tables = {k: v for k, v in data.items() if isinstance(v, dict)}
    text = "".join(f"{json.dumps(k)} = {json.dumps(v)}\n" for k, v in plain.items())
    for key, value in tables.items():
        name = f"{prefix}.{key}" if prefix else key
        text += f"\n[{name}]\n" + toml_dumps(value, name)
    return text


def classify(target, module, tree, items, equivalents):
    """Per-file counts and the surviving and equivalent mutants, each described."""
    source = (tree / module).read_text(encoding="utf-8").splitlines()
    counts = {"killed": 0, "survived": 0, "equivalent": 0, "incompetent": 0}
    survivors, equivalent = [], []
    for item, result in items:
        if result is not None and result["worker_outcome"] in ("skipped", "no-test"):
            continue
        mutation = item["mutations"][0]
        line = mutation["start_pos"][0]
        text = source[line - 1].strip()
        diff = (result or {}).get("diff") or ""
        mutated = next((d[1:].strip() for d in diff.splitlines() if d.startswith("+") and not d.startswith("+++")),
                       None)
        described = {"file": target, "line": line, "operator": mutation["operator_name"],
                     "occurrence": mutation["occurrence"], "definition": mutation["definition_name"],
                     "code": text, "mutant": mutated, "diff": diff}
        if result is None:
            outcome = "survived"  # no unit test loads the file: nothing ran, so nothing caught it
        elif result["worker_outcome"] == "normal":
            outcome = result["test_outcome"]
        else:
            outcome = None
        if outcome == "killed":
            counts["killed"] += 1
        elif outcome == "survived":
            why = next((e["why"] for e in equivalents if e["file"] == target and e["operator"] == mutation["operator_name"]
                        and e["line"] == text and e["mutant"] == mutated), None)
            if why:
                counts["equivalent"] += 1
                equivalent.append({**described, "why": why})
            else:
                counts["survived"] += 1
                survivors.append(described)
        else:
            counts["incompetent"] += 1
    judged = counts["killed"] + counts["survived"]
    counts["score"] = round(100.0 * counts["killed"] / judged, 1) if judged else None
    return counts, survivors, equivalent


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="*", help="target files (default: all of scripts/mutation.toml's)")
    parser.add_argument("--python", default=sys.executable, help="the Python that runs the unit tests")
    parser.add_argument("--report-only", action="store_true",
                        help="run nothing: score the last run's sessions again (after editing the equivalents)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="targets mutated at once, each in its own copy of the tree (default: one per core)")
    args = parser.parse_args(argv)
    config = tomllib.loads(CONFIG.read_text(encoding="utf-8"))
    everything = sorted({name for pattern in TARGETS for name in glob.glob(pattern, root_dir=ROOT)})
    chosen = [os.path.relpath(Path(f).resolve(), ROOT) for f in args.files] or everything
    unknown = sorted(set(chosen) - set(everything))
    if unknown:
        sys.exit(f"mutation: not a target: {', '.join(unknown)} (targets: {', '.join(TARGETS)})")

    jobs = max(1, min(args.jobs, len(chosen)))
    trees = [OUT / ("tree" if n == 0 else f"tree-{n}") for n in range(jobs)]
    sessions = OUT / "sessions"
    path = OUT / "report.json"
    previous = json.loads(path.read_text()) if path.exists() else None
    if not args.report_only:
        for tree in trees:
            copy_tree(tree, chosen)
    sessions.mkdir(parents=True, exist_ok=True)
    free_trees = queue.Queue()
    for tree in trees:
        free_trees.put(tree)

    def measure(target):
        began = time.monotonic()
        if args.report_only:
            session = sessions / f"{re.sub(r'[^A-Za-z0-9]+', '_', target)}.sqlite"
            if not session.exists():
                return None
            module = target + ".py" if (trees[0] / (target + ".py")).exists() else target
            tests = [f"tests/unit/{name}" for name in config["tests"].get(target, [])
                     if (trees[0] / "tests" / "unit" / name).exists()]
            dumped = run([tool("cosmic-ray"), "dump", str(session)], trees[0])
            items = [json.loads(line) for line in dumped.splitlines() if line.strip()]
        else:
            tree = free_trees.get()
            try:
                print(f"mutation: {target} ...", flush=True)
                module, tests, items = mutate_one(target, config, tree, args.python, sessions)
            finally:
                free_trees.put(tree)
        # Every tree is a copy of the same checkout: any one has the mutated file's lines.
        counts, survivors, equivalent = classify(target, module, trees[0], items, config.get("equivalent", []))
        counts["seconds"] = round(time.monotonic() - began, 1)
        if args.report_only and previous and target in previous["files"]:
            counts["seconds"] = previous["files"][target]["seconds"]  # the run's, not this rescoring's
        counts["tests"] = tests
        return counts, survivors, equivalent

    report = {"tool": "cosmic-ray", "goal_percent": GOAL, "files": {}, "survivors": [], "equivalent": []}
    started = time.monotonic()
    # The longest targets of the last run first, so that no core is left with one at the end.
    last_seconds = {name: c["seconds"] for name, c in (previous or {}).get("files", {}).items()}
    longest_first = sorted(chosen, key=lambda target: -last_seconds.get(target, 0))
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        measured = dict(zip(longest_first, pool.map(measure, longest_first)))
    for target in chosen:
        if measured[target] is None:
            continue
        counts, survivors, equivalent = measured[target]
        report["files"][target] = counts
        report["survivors"] += survivors
        report["equivalent"] += equivalent
    report["seconds"] = round(time.monotonic() - started, 1)
    if args.report_only and previous:
        report["seconds"] = previous["seconds"]
    if args.files and previous:
        # A run over some files updates their entries; the other files keep their last scores.
        kept = {name: counts for name, counts in previous["files"].items() if name not in report["files"]}
        report["files"] = dict(sorted({**kept, **report["files"]}.items()))
        for key in ("survivors", "equivalent"):
            report[key] = [m for m in previous[key] if m["file"] in kept] + report[key]

    print("\nsurviving mutants (a wrong version of the code that every unit test passes):")
    for s in report["survivors"]:
        print(f"  {s['file']}:{s['line']} {s['operator'].removeprefix('core/')} in {s['definition']}:\n"
              f"      - {s['code']}\n      + {s.get('mutant') or '(not run: no unit test loads the file)'}")
    if not report["survivors"]:
        print("  none")
    print(f"\n{'file':64} {'killed':>7} {'total':>6} {'equiv':>6} {'score':>7} {'secs':>6}")
    for target, c in report["files"].items():
        total = c["killed"] + c["survived"]
        score = "-" if c["score"] is None else f"{c['score']:.1f}%"
        flag = "" if c["score"] is None or c["score"] >= GOAL else f"  under {GOAL:.0f}%"
        if not c["tests"]:
            flag += "  (no unit test loads it)"
        print(f"{target:64} {c['killed']:>7} {total:>6} {c['equivalent']:>6} {score:>7} {c['seconds']:>6}{flag}")
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nmutation: {report['seconds']:.0f} s; report in {os.path.relpath(path, ROOT)}")


if __name__ == "__main__":
    main()
