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

PyTorch's NCCL flight recorder (its last collectives per rank) is dumped on demand through a named
pipe that the rank's NCCL heartbeat monitor reads; the job script's torchrun wrapper names the pipe
and the dump file of each worker (TORCH_NCCL_DEBUG_INFO_PIPE_FILE, TORCH_NCCL_DEBUG_INFO_TEMP_FILE)
in a private folder of the node. A worker without a pipe (gloo, CPU, torch < 2.2, the recorder off)
is not waited for. A dump a worker wrote itself, on an NCCL timeout, is kept by the same rules when
torchrun ends: the wrapper imports this file from the run's directory (keep_own_timeout_dumps).
Standard library only: it runs with the training env's python, whatever that env holds.
"""

import argparse
import collections
import os
import re
import shutil
import stat
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
# How long the workers' flight recorders have, together, to write their dumps once asked: PyTorch
# gives its own dump on a timeout as long (TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC, 15 s by default).
FLIGHT_RECORDER_SECONDS = 15
FLIGHT_RECORDER_POLL = 0.2
# A flight-recorder dump in the run's directory, of both kinds: one the hang watchdog asked for, and
# one a worker wrote itself on an NCCL timeout (TORCH_NCCL_DUMP_ON_TIMEOUT), kept by the job script's
# torchrun wrapper under $TRAINING_FLIGHT_RECORDER_KEEP (<run dir>/nccl-<job>-<restart>) when
# torchrun ends. torchfrtrace reads the rank from the name's end.
FLIGHT_RECORDER_NAME = "hang-{job}-{restart}-{node}-nccl-rank{rank}"
OWN_TIMEOUT_NAME = "{keep}-{node}-rank{rank}"
# Each worker's dump file in the wrapper's private folder of the node (its
# TORCH_NCCL_DEBUG_INFO_TEMP_FILE), to which PyTorch adds the global rank.
TRACE_PREFIX = "trace-"


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


def _in_worker(pid, path):
    """A path from a worker's environment as this process reaches it (a relative one from its cwd)."""
    return path if os.path.isabs(path) else os.path.join(f"/proc/{pid}/cwd", path)


def flight_recorder_files(pid, env):
    """(its dump pipe, the file it dumps to) of a worker, as PyTorch 2.13 names them; None without a
    pipe's name. ProcessGroupNCCL.hpp:199-242 (DumpPipe): the pipe is TORCH_NCCL_DEBUG_INFO_PIPE_FILE +
    global rank + '.pipe'. FlightRecorder.cpp (DebugInfoWriter::getWriter, ::write): the dump is
    TORCH_FR_DUMP_TEMP_FILE, else TORCH_NCCL_DEBUG_INFO_TEMP_FILE, else $XDG_CACHE_HOME (or
    $HOME/.cache) + /torch/comm_lib_trace_rank_, + the global rank; TORCH_FR_DUMP_TEMP_FILE as it is
    with TORCH_FR_DUMP_DYNAMIC_FILE_NAME true. A variable set empty counts as set, a true one is
    y/yes/1/t/true in any case (getCvarString, getCvarBool: c10d/Utils.hpp:95-189)."""
    stem, rank = env.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE"), env["RANK"]
    if not stem:
        return None
    dynamic = env.get("TORCH_FR_DUMP_DYNAMIC_FILE_NAME", "").lower() in ("y", "yes", "1", "t", "true")
    if "TORCH_FR_DUMP_TEMP_FILE" in env:
        target = env["TORCH_FR_DUMP_TEMP_FILE"] + ("" if dynamic else rank)
    elif "TORCH_NCCL_DEBUG_INFO_TEMP_FILE" in env:
        target = env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] + rank
    else:
        cache = env.get("XDG_CACHE_HOME") or os.path.join(env.get("HOME", "/tmp"), ".cache")
        target = os.path.join(cache, "torch", "comm_lib_trace_rank_" + rank)
    return _in_worker(pid, f"{stem}{rank}.pipe"), _in_worker(pid, target)


def _state(path):
    """(size, mtime) of a regular file, or None."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return (info.st_size, info.st_mtime_ns) if stat.S_ISREG(info.st_mode) else None


def _ask(pipe):
    """Ask a worker's flight recorder for a dump: a byte into its pipe. '' when asked, else why not."""
    try:
        if not stat.S_ISFIFO(os.lstat(pipe).st_mode):
            return "not a named pipe"
        # Non-blocking: a pipe its rank no longer reads (the process gone) fails at once (ENXIO).
        fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError as error:
        return error.strerror or str(error)
    try:
        os.write(fd, b"1")
    except OSError as error:
        return error.strerror or str(error)
    finally:
        os.close(fd)
    return ""


def _copy_private(source, destination):
    """Copy a dump into the run's directory, the user's only (0600); a link planted at the
    destination is not followed (OSError)."""
    src = os.open(source, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        dst = os.open(destination, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.fchmod(dst, 0o600)
            while True:
                chunk = os.read(src, 1 << 20)
                if not chunk:
                    break
                os.write(dst, chunk)
        finally:
            os.close(dst)
    finally:
        os.close(src)


def ask_flight_recorders(found):
    """Ask each worker with a dump pipe for its NCCL flight recorder's dump. Returns ({rank: (its dump
    file, that file's state before)}, lines for the dump file). No pipe (no NCCL process group) is
    nothing asked."""
    asked, lines = {}, []
    for pid, env in sorted(found.items(), key=lambda item: int(item[1]["RANK"])):
        files = flight_recorder_files(pid, env)
        if files is None or not os.path.lexists(files[0]):
            continue
        before = _state(files[1])
        why = _ask(files[0])
        if why:
            lines.append(f"# NCCL flight recorder of rank {env['RANK']}: not asked ({files[0]}: {why})")
        else:
            asked[env["RANK"]] = (files[1], before)
    return asked, lines


def keep_flight_recorders(asked, job_id, restart, node, directory, deadline):
    """Wait until ``deadline`` (time.monotonic) at most for the dumps asked for, and copy each into
    ``directory``. Returns ({rank: file name}, lines for the dump file)."""
    asked, kept, seen, lines = dict(asked), {}, {}, []
    while asked:
        for rank, (target, before) in list(asked.items()):
            now = _state(target)
            # Written since the asking and the same on two looks: PyTorch writes the whole dump at
            # once and closes it, with no mark of its end.
            if now is not None and now[0] > 0 and now != before and seen.get(rank) == now:
                name = FLIGHT_RECORDER_NAME.format(job=job_id, restart=restart, node=node, rank=rank)
                try:
                    _copy_private(target, os.path.join(directory, name))
                    kept[rank] = name
                except OSError as error:
                    lines.append(f"# NCCL flight recorder of rank {rank}: not kept ({name}: {error.strerror or error})")
                del asked[rank]
            seen[rank] = now
        if not asked or time.monotonic() >= deadline:
            break
        time.sleep(FLIGHT_RECORDER_POLL)
    lines += [f"# NCCL flight recorder of rank {rank}: no dump in time (its NCCL heartbeat monitor did not "
              "answer)" for rank in sorted(asked, key=int)]
    return kept, [f"# NCCL flight recorder of rank {rank}: {name}"
                  for rank, name in sorted(kept.items(), key=lambda item: int(item[0]))] + lines


def keep_own_timeout_dumps(folder, keep, node):
    """Copy each dump that a worker wrote itself into ``folder`` (TRACE_PREFIX + its rank) to
    OWN_TIMEOUT_NAME, as _copy_private does. Returns one line for the log per dump: where it is kept,
    or why not."""
    lines = []
    for name in sorted(os.listdir(folder)):
        rank = name[len(TRACE_PREFIX):]
        if not (name.startswith(TRACE_PREFIX) and rank.isdigit()):
            continue
        kept = OWN_TIMEOUT_NAME.format(keep=keep, node=node, rank=rank)
        try:
            _copy_private(os.path.join(folder, name), kept)
            lines.append(f"NCCL flight recorder of rank {rank} kept in {kept}")
        except OSError as error:
            lines.append(f"NCCL flight recorder of rank {rank} not kept in {kept}: {error}")
    return lines


def dump(job_id, restart, directory, flight_recorder_seconds=FLIGHT_RECORDER_SECONDS):
    """Write hang-<job>-<restart>-<node>.txt in ``directory``: py-spy's dump of each worker here; and
    the NCCL flight recorder's dump of each worker that has one, beside it."""
    node = os.environ.get("SLURMD_NODENAME") or os.uname().nodename
    py_spy = os.environ.get("PY_SPY") or shutil.which("py-spy")
    found = workers(job_id, node, os.environ.get("SLURM_STEP_ID"))
    lines = [f"# hang of job {job_id} (restart {restart}) on {node}, {time.strftime('%F %T')}: "
             f"{len(found)} torchrun worker(s)"]
    # Asked first, so that the recorders write while py-spy reads the stacks.
    asked, asking = ask_flight_recorders(found)
    deadline = time.monotonic() + flight_recorder_seconds
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
    kept, keeping = keep_flight_recorders(asked, job_id, restart, node, directory, deadline)
    lines[1:1] = asking + keeping
    path = os.path.join(directory, f"hang-{job_id}-{restart}-{node}.txt")
    # The run's directory is the user's own; a link planted under this name is not followed.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write("\n".join(lines) + "\n")
    print(f"hang: {len(found)} worker(s) on {node}{'' if py_spy else ' (no py-spy: no stacks)'} -> {path}"
          + (f"; NCCL flight recorder of {len(kept)} rank(s) beside it" if kept else ""))


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
