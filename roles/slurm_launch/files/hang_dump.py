#!/usr/bin/env python3
"""What a hung training was doing: every torchrun worker's Python stacks, and the nodes whose ranks
sit elsewhere than the rest.

Run by the job script's hang watchdog (templates/train.sbatch.j2) when neither the log nor
``$TRAINING_HEARTBEAT`` moved for ``hang_minutes``:

    srun --overlap --ntasks-per-node=1 python hang_dump.py dump --job 41 --restart 0 --dir RUN_DIR
        # on each node: hang-41-0-<node>.txt, py-spy's dump of each worker of job 41 on this node
    python hang_dump.py suspects RUN_DIR/hang-41-0-*.txt
        # two lines: the suspect nodes (space-separated, maybe none), the steps the workers ran in

A worker is a process of this job on this node that torchrun started (``RANK`` and
``TORCHELASTIC_RUN_ID`` in its environment), not one of its own children (a DataLoader worker
inherits both). Without py-spy the file says so, one header per worker, and the watchdog goes on.
Standard library only: it runs with the training env's python, whatever that env holds.
"""

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import time

# One section per worker in a dump file; py-spy's own output follows it.
HEADER = "=== rank {rank} on {node} pid {pid} step {step} ==="
HEADER_RE = re.compile(r"^=== rank (\d+) on (\S+) pid (\d+) step (\S+) ===$")
# py-spy dump: 'Thread 123 (idle): "MainThread"', then its frames, innermost first, indented.
THREAD_RE = re.compile(r'^Thread \S+(?: \([^)]*\))?: "(.*)"$')
FRAME_RE = re.compile(r"^ {4}(\S.*)$")
PY_SPY_SECONDS = 60


def _environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            items = handle.read().split(b"\0")
    except OSError:  # gone, or another user's
        return None
    env = {}
    for item in items:
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return env


def _parent(pid):
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            # 'pid (comm) state ppid ...': comm may hold spaces and parentheses.
            return int(handle.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def workers(job_id, node, own_step):
    """{pid: env} of the torchrun workers of ``job_id`` on ``node``, outside the step ``own_step``."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        env = _environ(int(name))
        if (env and env.get("SLURM_JOB_ID") == str(job_id) and env.get("SLURMD_NODENAME") == node
                and "RANK" in env and "TORCHELASTIC_RUN_ID" in env and env.get("SLURM_STEP_ID") != own_step):
            found[int(name)] = env
    return {pid: env for pid, env in found.items() if _parent(pid) not in found}


def dump(job_id, restart, directory):
    """Write hang-<job>-<restart>-<node>.txt in ``directory``: py-spy's dump of each worker here."""
    node = os.environ.get("SLURMD_NODENAME") or os.uname().nodename
    py_spy = os.environ.get("PY_SPY") or shutil.which("py-spy")
    found = workers(job_id, node, os.environ.get("SLURM_STEP_ID"))
    lines = [f"# hang of job {job_id} (restart {restart}) on {node}, {time.strftime('%F %T')}: "
             f"{len(found)} torchrun worker(s)"]
    if not py_spy:
        lines.append("# py-spy is not on this node's PATH (nor in $PY_SPY): no stacks; add py-spy to the "
                     "training env")
    for pid, env in sorted(found.items(), key=lambda item: int(item[1]["RANK"])):
        lines.append(HEADER.format(rank=env["RANK"], node=node, pid=pid, step=env.get("SLURM_STEP_ID", "-")))
        if not py_spy:
            continue
        try:
            proc = subprocess.run([py_spy, "dump", "--pid", str(pid)], capture_output=True, text=True,
                                  timeout=PY_SPY_SECONDS, check=False)
            lines.append(proc.stdout.rstrip("\n"))
            if proc.returncode != 0:
                lines.append(f"# py-spy exited {proc.returncode}: {proc.stderr.strip()}")
        except (OSError, subprocess.TimeoutExpired) as error:
            lines.append(f"# py-spy failed: {error}")
    path = os.path.join(directory, f"hang-{job_id}-{restart}-{node}.txt")
    # The run's directory is the user's own; a link planted under this name is not followed.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write("\n".join(lines) + "\n")
    print(f"hang: {len(found)} worker(s) on {node}{'' if py_spy else ' (no py-spy: no stacks)'} -> {path}")


def innermost_frames(text):
    """{rank: (node, innermost frame of its main thread or None, step)} of one dump file's text."""
    ranks, current, thread, main = {}, None, None, {}
    for line in text.splitlines():
        header = HEADER_RE.match(line)
        if header:
            current = int(header.group(1))
            ranks[current] = [header.group(2), None, header.group(4)]
            thread, main[current] = None, False
            continue
        if current is None:
            continue
        started = THREAD_RE.match(line)
        if started:
            # The main thread's frame wins; another thread's only while no main thread is seen.
            thread = started.group(1)
            if thread == "MainThread" and not main[current]:
                main[current], ranks[current][1] = True, None
            continue
        frame = FRAME_RE.match(line)
        if frame and thread is not None and ranks[current][1] is None and (thread == "MainThread" or not main[current]):
            ranks[current][1] = frame.group(1).strip()
    return {rank: tuple(values) for rank, values in ranks.items()}


def suspect_nodes(frames):
    """The nodes of the ranks whose innermost frame differs from the one a strict majority of the
    ranks share; none when fewer than two ranks have a frame, or no frame has a majority."""
    known = {rank: value for rank, value in frames.items() if value[1]}
    if len(known) < 2:
        return []
    frame, count = collections.Counter(value[1] for value in known.values()).most_common(1)[0]
    if count * 2 <= len(known):
        return []
    return sorted({value[0] for value in known.values() if value[1] != frame})


def suspects(paths):
    frames = {}
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                frames.update(innermost_frames(handle.read()))
        except OSError:
            continue
    print(" ".join(suspect_nodes(frames)))
    print(" ".join(sorted({value[2] for value in frames.values() if value[2].isdigit()}, key=int)))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("dump", help="dump this node's workers of a job")
    one.add_argument("--job", required=True, type=int)
    one.add_argument("--restart", required=True, type=int)
    one.add_argument("--dir", required=True)
    many = sub.add_parser("suspects", help="the suspect nodes and the workers' steps of dump files")
    many.add_argument("paths", nargs="*")
    args = parser.parse_args(argv)
    if args.command == "dump":
        dump(args.job, args.restart, args.dir)
    else:
        suspects(args.paths)
    return 0


if __name__ == "__main__":
    sys.exit(main())
