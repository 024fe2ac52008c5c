"""Sweeps: -e '{"sweep": {"lr": [0.1, 0.01], "seed": [1, 2]}}' launches the cross product of the
values as one Slurm job array of one job script, a task per point; these filters check the sweep,
lay out its points and the table written beside the script, and report the points at the end."""

import itertools
import re
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

# A key becomes the script's option --<key>; a value one argument after it, also a cell of the
# tab-separated table: nothing a shell, a line or a cell would read otherwise.
KEY_RE = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")
KEY_RULE = "a letter, then up to 63 letters, digits, '_' or '-' (the script's option --KEY)"
VALUE_RE = re.compile(r"[A-Za-z0-9_.,:+=@/-]{1,200}")
VALUE_RULE = ("a number, or text of up to 200 letters, digits and '_.,:+=@/-' (no spaces or quotes: one argument "
              "to the script)")
# Slurm's default MaxArraySize (1001) allows task ids 0 to 1000.
MAX_POINTS = 1000
TABLE_NAME = "sweep.tsv"


def _scalar_text(value):
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    text = str(value)
    return text if VALUE_RE.fullmatch(text) else None


def sweep_problems(sweep, parallel=0, script_args=()):
    """What is wrong with a sweep (and sweep_parallel), one message each; [] for none or a good one."""
    problems = []
    parallel_text = str(parallel).strip()
    if not parallel_text.isdigit() or int(parallel_text) > MAX_POINTS:
        problems.append(f"sweep_parallel={parallel!r} is not allowed: give a whole number, 0 (as many at once as "
                        f"Slurm allows) to {MAX_POINTS}")
    elif int(parallel_text) and not sweep:
        problems.append(f"sweep_parallel={parallel} is not allowed without a sweep: "
                        "-e '{\"sweep\": {\"lr\": [0.1, 0.01]}}' says which points to run")
    if sweep in (None, "", {}):
        return problems
    if not isinstance(sweep, Mapping):
        return problems + [f"sweep={sweep!r} is not allowed: give a mapping of option names to lists of values, "
                           "e.g. -e '{\"sweep\": {\"lr\": [0.1, 0.01], \"seed\": [1, 2]}}'"]
    options = {str(arg).split("=", 1)[0] for arg in script_args or [] if str(arg).startswith("--")}
    points = 1
    for key, values in sweep.items():
        if not isinstance(key, str) or not KEY_RE.fullmatch(key):
            problems.append(f"sweep key {key!r} is not allowed: {KEY_RULE}")
            continue
        if f"--{key}" in options:
            problems.append(f"sweep key {key!r} is not allowed: script_args sets --{key} too; sweep it or set it, "
                            "not both")
        if isinstance(values, (str, Mapping)) or not isinstance(values, (list, tuple)) or not values:
            problems.append(f"sweep {key}={values!r} is not allowed: give a non-empty list of values, e.g. [0.1, 0.01]")
            continue
        texts = [_scalar_text(value) for value in values]
        for value, text in zip(values, texts):
            if text is None:
                problems.append(f"sweep {key} value {value!r} is not allowed: {VALUE_RULE}")
        repeated = sorted({text for text in texts if text is not None and texts.count(text) > 1})
        if repeated:
            problems.append(f"sweep {key} lists {', '.join(repeated)} more than once: each point would run twice")
        points *= len(values)
    if points > MAX_POINTS:
        problems.append(f"sweep has {points} points, over {MAX_POINTS} (Slurm's default MaxArraySize allows task ids "
                        f"0 to {MAX_POINTS}): sweep fewer values or launch it in parts")
    return problems


def sweep_points(sweep):
    """The points of a checked sweep in task order (the last key varies fastest): each a list of
    [key, value as text]; [] for no sweep."""
    if not sweep:
        return []
    problems = sweep_problems(sweep)
    if problems:
        raise AnsibleFilterError("; ".join(problems))
    keys = list(sweep)
    return [[[key, str(value)] for key, value in zip(keys, combination)]
            for combination in itertools.product(*(sweep[key] for key in keys))]


def sweep_table(points):
    """The table written beside the job script: a header (task and the keys), a line per point."""
    if not points:
        return ""
    lines = ["\t".join(["task"] + [key for key, _ in points[0]])]
    lines += ["\t".join([str(task)] + [value for _, value in point]) for task, point in enumerate(points)]
    return "\n".join(lines) + "\n"


def point_words(point):
    return " ".join(f"{key}={value}" for key, value in point) if point else "-"


def sweep_report(tasks, points):
    """One row per point of a finished array (the slurm_job module's tasks): its arguments, state,
    exit code, elapsed seconds, last log line; and the points that did not complete, in words."""
    rows, failed = [], []
    for task in tasks or []:
        index = task.get("task")
        point = points[index] if isinstance(index, int) and 0 <= index < len(points) else None
        row = {"task": index, "args": point_words(point), "state": task.get("state"),
               "exit_code": task.get("exit_code"), "elapsed_seconds": task.get("elapsed_seconds"),
               "last_line": task.get("log_last_line") or "", "log": task.get("stdout_path")}
        rows.append(row)
        if row["state"] != "COMPLETED":
            failed.append(f"point {index} ({row['args']}) ended {row['state']}, exit code {row['exit_code']}")
    columns = ("task", "args", "state", "exit_code", "elapsed_seconds", "last_line")
    header = ("task", "arguments", "state", "exit", "elapsed", "last log line")
    cells = [header] + [tuple("-" if row[key] is None else str(row[key]) for key in columns) for row in rows]
    widths = [max(len(cell[i]) for cell in cells) for i in range(len(columns) - 1)]
    lines = ["  ".join([*(cell[i].ljust(widths[i]) for i in range(len(widths))), cell[-1]]).rstrip() for cell in cells]
    return {"rows": rows, "lines": lines, "failed": failed}


class FilterModule:
    def filters(self):
        return {"sweep_problems": sweep_problems, "sweep_points": sweep_points, "sweep_table": sweep_table,
                "sweep_report": sweep_report}
