#!/usr/bin/env python3
"""The job's health gate (docs/resilience.md): before every attempt trains, each node proves it
computes, at the speed of the others, and the nodes prove they reach each other.

On every node, by one srun step (one task a node, in the training env), beside gpu_check.py and
allreduce_check.py:

    python health_check.py --dir RUN_DIR --tag JOB_ID --gpus-per-node 8 --cuda-home /nas/cuda/cuda-11.8

the GPU check (gpu_check.py) where the job has GPUs, a timed matmul on each GPU (on CPU where the
job trains on CPU), then, once every node has its time, one timed all-reduce across the nodes. The
nodes meet at a TCP store that node rank 0 opens on a port the kernel gives it (written to the
run's private directory for the others): a node that fails still says so there, so no node waits
for one that will never come, and one that never answers is waited for --timeout seconds at most.
Each node writes what it found to RUN_DIR/.JOB_ID.health.<node>.

Then once, in the batch shell (standard library only, no torch):

    python health_check.py --judge --dir RUN_DIR --tag JOB_ID --nodes node110,node111 --slow-factor 1.5 ...

names each node that failed or is slow (its matmul time over --slow-factor times the median of the
OTHER nodes' times), decides (pass; requeue without the named nodes; fail naming them), appends the
attempt's record to RUN_DIR/health-JOB_ID.jsonl, prints what it found (stderr: the job's log) and
one line for the job script (stdout): ``ACTION EXCLUDE NODE:REASON...``.
"""

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time

# What a named node is marked bad for (the job script's mark_bad_node).
HEALTH, GPU_CHECK = "HEALTH", "GPU_CHECK"
# Matmul side when not given: big enough that a GPU's time is not launch overhead, and that on a
# few CPUs each repetition outlasts a CFS period (100 ms), so a cgroup's CPU quota shows in each.
AUTO_SIZE = {"cuda": 8192, "cpu": 2048}
# Timed matmuls per device after one untimed; a node's time is its slowest device's best one, so a
# moment's contention does not name a node, and a node slow all the time is named.
REPEATS = 3
# The all-reduce: one message, as the preflight's table measures one (allreduce_check.py).
ALLREDUCE_BYTES = 1 << 20
ALLREDUCE_ITERS, ALLREDUCE_WARMUP = 3, 1


def result_path(directory, tag, node):
    return os.path.join(directory, f".{tag}.health.{node}")


def port_path(directory, tag):
    return os.path.join(directory, f".{tag}.health-port")


def record_path(directory, tag):
    """The attempts' gate records (one JSON line each), beside attempts-<job id>.tsv."""
    return os.path.join(directory, f"health-{tag}.jsonl")


def _write(path, text):
    """Write-then-rename: a reader on another node never sees half of it."""
    partial = f"{path}.{os.getpid()}"
    with open(partial, "w", encoding="utf-8") as out:
        out.write(text)
    os.replace(partial, path)


# ---- on each node -------------------------------------------------------------------------

def _imports():
    """gpu_check and allreduce_check: beside this file where the job stages them, else the collection's."""
    try:
        import allreduce_check
        import gpu_check
    except ImportError:
        from ansible_collections.hpc.slurm_train.roles.slurm_launch.files import allreduce_check, gpu_check
    return gpu_check, allreduce_check


def connect(directory, tag, rank, world, master, deadline):
    """The gate's TCP store: node rank 0 serves it on a free port and writes the port where only
    the job's user can write; the others read it and connect."""
    from datetime import timedelta

    from torch.distributed import TCPStore
    timeout = timedelta(seconds=max(deadline - time.monotonic(), 1))
    if rank == 0:
        store = TCPStore(master, 0, world, True, timeout=timeout, wait_for_workers=False)
        _write(port_path(directory, tag), f"{store.port}\n")
        return store
    while True:
        try:
            with open(port_path(directory, tag), encoding="utf-8") as handle:
                port = int(handle.read().strip() or "0")
            if port:
                return TCPStore(master, port, world, False, timeout=timeout)
        except (OSError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"node rank 0 ({master}) opened no store within the gate's time")
        time.sleep(0.2)


def compute_device(gpus_per_node):
    """Where the training computes, as allreduce_check chooses its backend: on each GPU, unless
    the job has none or asked for gloo (a CPU training)."""
    import torch
    import torch.distributed as dist
    _, allreduce_check = _imports()
    backend, why = allreduce_check.choose_backend(os.environ.get("TRAIN_BACKEND", "auto"), gpus_per_node,
                                                  torch.cuda.is_available(), dist.is_nccl_available())
    if backend is None:
        raise RuntimeError(why)
    return ("cuda" if backend == "nccl" else "cpu"), backend


class Waited(Exception):
    """This node stopped because another failed, or did not come: not this node's failure."""


class Lockstep:
    """A barrier of every node at the store before each timed matmul, so that every node computes
    at the same moment and what nodes share (a switch, a filesystem; on a test cluster, its CPUs)
    weighs on all alike. A node that fails says so (abort), and the others stop at their next
    barrier rather than wait out the gate's time."""

    def __init__(self, store, world, deadline):
        self.store, self.world, self.deadline, self.count = store, world, deadline, 0

    def __call__(self):
        self.count += 1
        name = f"lockstep/{self.count}"
        if self.store.add(name, 1) >= self.world:
            self.store.set(f"{name}/go", "1")
        while not self.store.check([f"{name}/go"]):
            if self.store.check(["abort"]):
                raise Waited(f"stopped: {self.store.get('abort').decode(errors='replace')} failed")
            if time.monotonic() > self.deadline:
                raise Waited("stopped: not every node came to its matmul in the gate's time")
            time.sleep(0.005)

    def abort(self, node):
        self.store.set("abort", node)


def matmul_seconds(device, size, barrier=lambda: None, repeats=REPEATS):
    """{device name: its best time of ``repeats`` float32 size x size matmuls, each after
    ``barrier()``}; on GPUs all at once."""
    import torch
    if device == "cpu":
        a, b = torch.randn(size, size), torch.randn(size, size)
        barrier()
        torch.mm(a, b)
        best = float("inf")
        for _ in range(repeats):
            barrier()
            started = time.perf_counter()
            torch.mm(a, b)
            best = min(best, time.perf_counter() - started)
        return {"cpu": best}
    gpus = [torch.device("cuda", index) for index in range(torch.cuda.device_count())]
    inputs = {gpu: (torch.randn(size, size, device=gpu), torch.randn(size, size, device=gpu)) for gpu in gpus}
    best = dict.fromkeys(gpus, float("inf"))
    for repeat in range(repeats + 1):
        barrier()
        events = {}
        for gpu, (a, b) in inputs.items():
            with torch.cuda.device(gpu):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                torch.mm(a, b)
                end.record()
                events[gpu] = (start, end)
        for gpu, (start, end) in events.items():
            end.synchronize()
            if repeat:  # the first is untimed: the kernel's choice and the clocks settle
                best[gpu] = min(best[gpu], start.elapsed_time(end) / 1000)
    return {str(gpu): seconds for gpu, seconds in best.items()}


def all_reduce(store, rank, world, backend, deadline):
    """One timed all-reduce over the nodes (allreduce_check's), the slowest node's time."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    _, allreduce_check = _imports()
    dist.init_process_group(backend, store=dist.PrefixStore("allreduce", store), rank=rank, world_size=world,
                            timeout=timedelta(seconds=max(deadline - time.monotonic(), 1)))
    try:
        device = torch.device("cpu")
        if backend == "nccl":
            device = torch.device("cuda", 0)
            torch.cuda.set_device(device)
        mine = allreduce_check.timed_all_reduce(ALLREDUCE_BYTES, ALLREDUCE_ITERS, ALLREDUCE_WARMUP, device, rank, world)
        slowest = torch.tensor([mine["time_us"], mine["wrong"]], dtype=torch.float64, device=device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        time_us, wrong = slowest.tolist()
        return {"backend": backend, "bytes": ALLREDUCE_BYTES, "time_us": round(time_us, 1), "wrong": int(wrong),
                "busbw": round(allreduce_check.bus_bandwidth(ALLREDUCE_BYTES, time_us / 1e6, world)[1], 4)}
    finally:
        dist.destroy_process_group()


def node_main(args):
    """This node's part; what it found goes to its result file, whatever happened."""
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    rank = int(os.environ.get("SLURM_NODEID") or 0)
    world = int(os.environ.get("SLURM_NNODES") or os.environ.get("SLURM_JOB_NUM_NODES") or 1)
    master = os.environ.get("MASTER_ADDR") or node
    deadline = time.monotonic() + args.timeout
    found = {"node": node, "rank": rank}
    try:
        store = connect(args.dir, args.tag, rank, world, master, deadline)
    except Exception as error:  # noqa: BLE001
        # Node rank 0 opens the store: another node that cannot reach it is not to blame for it.
        found["error" if rank == 0 else "waited"] = f"no store on {master}: {type(error).__name__}: {error}"[-300:]
        _write(result_path(args.dir, args.tag, node), json.dumps(found) + "\n")
        return 0
    found.update(compute(args, node, Lockstep(store, world, deadline)))
    found.update(allreduce=meet(store, found, rank, world, deadline))
    _write(result_path(args.dir, args.tag, node), json.dumps(found) + "\n")
    store.set(f"done/{rank}", "1")
    if rank == 0:  # the store lives in this process: it stays until every node is done with it
        try:
            store.wait([f"done/{other}" for other in range(world)])
        except Exception:  # noqa: BLE001  (a node that died: the judge names it)
            pass
    return 0


def compute(args, node, lockstep):
    """This node's GPU check and timed matmul: {"seconds", "device", ...}, or {"gpu_check": problems},
    {"error": ...} (this node failed), {"waited": ...} (another did)."""
    try:
        if args.gpus_per_node:
            gpu_check, _ = _imports()
            problems = gpu_check.check_node(args.gpus_per_node, args.cuda_home)
            if problems:
                lockstep.abort(node)
                return {"gpu_check": problems}
        device, backend = compute_device(args.gpus_per_node)
        import torch
        if device == "cpu":
            # The task's CPUs, as the training's processes share them.
            torch.set_num_threads(max(1, min(int(os.environ.get("SLURM_CPUS_PER_TASK") or 1),
                                             len(os.sched_getaffinity(0)))))
        size = args.matmul_size or AUTO_SIZE[device]
        times = matmul_seconds(device, size, lockstep)
    except Waited as waited:
        return {"waited": str(waited)}
    except Exception as error:  # noqa: BLE001  (a node that cannot compute is a finding, reported)
        lockstep.abort(node)
        return {"error": f"{type(error).__name__}: {error}"[-300:]}
    seconds = round(max(times.values()), 4)
    print(f"health-check {node}: matmul {seconds:.3f} s ({device}, {size}x{size} float32, best of {REPEATS}"
          f"{', slowest of %d GPUs' % len(times) if device == 'cuda' else ''})", flush=True)
    return {"seconds": seconds, "device": device, "size": size, "backend": backend,
            "devices": {name: round(value, 4) for name, value in times.items()},
            "threads": torch.get_num_threads() if device == "cpu" else None}


def meet(store, found, rank, world, deadline):
    """Tell the others this node's result, and all-reduce with them when every node computed."""
    from datetime import timedelta
    store.set(f"compute/{rank}", json.dumps(found))
    keys = [f"compute/{other}" for other in range(world)]
    try:
        store.wait(keys, timedelta(seconds=max(deadline - time.monotonic(), 1)))
    except Exception:  # noqa: BLE001  (the store's timeout)
        missing = [other for other in range(world) if not store.check([f"compute/{other}"])]
        return {"error": f"node ranks {missing} gave no matmul time in the gate's time"}
    peers = [json.loads(store.get(key)) for key in keys]
    failed = [peer["node"] for peer in peers if "seconds" not in peer]
    if failed:
        return {"skipped": f"not every node computed ({', '.join(failed)})"}
    try:
        return all_reduce(store, rank, world, found["backend"], deadline)
    except Exception as error:  # noqa: BLE001
        return {"error": f"{type(error).__name__}: {error}"[-300:]}


# ---- the judge, in the batch shell ---------------------------------------------------------

def slow_nodes(times, factor):
    """The nodes whose time is over ``factor`` times the median of the OTHER nodes' times, each
    {"node", "seconds", "median_seconds", "ratio"}. The others', not all nodes': of two nodes the
    median of both is their mean, against which even a node many times slower stays under 2x;
    against the other node alone it shows as it is. One node alone has nothing to be slow against."""
    slow = []
    for node, seconds in sorted(times.items()):
        others = [value for name, value in times.items() if name != node]
        if not others:
            continue
        median = statistics.median(others)
        if seconds > factor * median:
            slow.append({"node": node, "seconds": seconds, "median_seconds": median,
                         "ratio": round(seconds / median, 2) if median > 0 else None})
    return slow


def named_nodes(results, nodes, factor):
    """(the nodes named, each {"node", "reason", "why"...}; the all-reduce's problem or '')."""
    if not nodes:
        # The job script could not list the job's nodes: a gate that judged nothing has not passed.
        return [], "the job's node list came empty (scontrol show hostnames): nothing to judge"
    named = []
    for node in nodes:
        found = results.get(node)
        if found is None:
            named.append({"node": node, "reason": HEALTH, "why": "no result: its check did not finish"})
        elif found.get("gpu_check"):
            named.append({"node": node, "reason": GPU_CHECK, "why": "failed the GPU check: " + "; ".join(found["gpu_check"])})
        elif found.get("error"):
            named.append({"node": node, "reason": HEALTH, "why": f"failed its matmul: {found['error']}"})
    times = {node: results[node]["seconds"] for node in nodes if "seconds" in results.get(node, {})}
    for slow in slow_nodes(times, factor):
        named.append({**slow, "reason": HEALTH,
                      "why": f"slow: matmul {slow['seconds']:.3f} s against {slow['median_seconds']:.3f} s, the median of "
                             f"the other nodes ({slow['ratio']}x, over {factor}x)"})
    problem = ""
    # A node stopped by another's failure, or by one that never came, is not named for it.
    waited = sorted({found["waited"] for found in results.values() if found.get("waited")})
    if not named and waited:
        problem = f"the nodes did not time their matmuls together ({'; '.join(waited)})"
    elif not named:
        reduced = [results[node].get("allreduce") or {} for node in nodes]
        errors = sorted({one.get("error") for one in reduced if one.get("error")})
        wrong = max((one.get("wrong") or 0 for one in reduced), default=0)
        if errors:
            problem = f"the all-reduce across the nodes failed: {'; '.join(errors)}"
        elif wrong:
            problem = f"the all-reduce across the nodes summed wrong ({wrong} elements)"
        elif not all("time_us" in one for one in reduced):
            problem = "the all-reduce across the nodes did not run"
    return named, problem


def decide(named, problem, explicit, restart, max_restarts, partition_nodes, excluded, num_nodes):
    """{"action": pass | requeue | fail, "exclude": the job's exclusions for a requeue, "message"}.

    Named nodes requeue the job without them when Slurm picked the nodes (a node group), restarts
    remain (docs/resilience.md's budget: every requeue counts) and the partition still has enough
    nodes outside the job's exclusions; a node list given is failed naming them, as Slurm would
    wait for the same nodes. An all-reduce that fails with no node to name fails the job."""
    names = [one["node"] for one in named]
    if not named and not problem:
        return {"action": "pass", "exclude": [], "message": "passed"}
    if not named:
        return {"action": "fail", "exclude": [], "message": f"{problem}: no node to leave out, not training"}
    bad = ", ".join(names)
    if explicit:
        return {"action": "fail", "exclude": [],
                "message": f"not training on {bad}: the node list was given, so the job cannot leave "
                           f"{'it' if len(names) == 1 else 'them'} out (launch on other nodes, or by group)"}
    if restart >= max_restarts:
        return {"action": "fail", "exclude": [],
                "message": f"not training on {bad}, and no restarts left ({max_restarts}) to requeue without it"}
    exclude = sorted(set(excluded) | set(names))
    left = sorted(set(partition_nodes) - set(exclude))
    if len(left) < num_nodes:
        return {"action": "fail", "exclude": [],
                "message": f"not training on {bad}, and the partition has {len(left)} other node(s) "
                           f"({', '.join(left) or 'none'}) for the job's {num_nodes}: no spare to requeue onto"}
    return {"action": "requeue", "exclude": exclude,
            "message": f"without {bad} (restart {restart + 1} of at most {max_restarts})"}


def _scontrol(*argv):
    proc = subprocess.run(["scontrol", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=60)
    if proc.returncode != 0:
        raise RuntimeError(f"scontrol {' '.join(argv)}: {proc.stderr.strip()[-200:]}")
    return proc.stdout


def slurm_view(job_id, partition):
    """(the partition's nodes, the job's ExcNodeList): asked only when a node group's job names a node."""
    def field(text, name):
        match = re.search(rf"(?:^|\s){name}=(\S*)", text)
        value = match.group(1) if match else ""
        return [] if value in ("", "(null)") else _scontrol("show", "hostnames", value).split()
    return (field(_scontrol("show", "partition", partition, "-o"), "Nodes"),
            field(_scontrol("show", "job", str(job_id), "-o"), "ExcNodeList"))


# How the log and summary.txt say each verdict.
DONE = {"pass": "passed", "requeue": "requeued", "fail": "failed"}


def _number(value):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def summary_line(record):
    """One line of an attempt's gate record, as the log and summary.txt say it: 'restart 0: passed
    in 3.1 s (2 nodes, matmul 0.210-0.240 s, all-reduce 1 MiB 1.2 ms (gloo))', then each node named
    ('; node111 slow: matmul ...'). A record read back from the run's directory may lack any part."""
    nodes = record.get("nodes") if isinstance(record.get("nodes"), dict) else {}
    times = [_number(found.get("seconds")) for found in nodes.values() if isinstance(found, dict)]
    times = [value for value in times if value is not None]
    parts = [f"{len(nodes)} nodes"]
    if times:
        parts.append(f"matmul {min(times):.3f}-{max(times):.3f} s")
    reduced = record.get("allreduce") if isinstance(record.get("allreduce"), dict) else {}
    if _number(reduced.get("time_us")) is not None and _number(reduced.get("bytes")) is not None:
        parts.append(f"all-reduce {reduced['bytes'] / (1 << 20):g} MiB {reduced['time_us'] / 1000:.1f} ms "
                     f"({reduced.get('backend')})")
    seconds = _number(record.get("seconds"))
    named = "; ".join(f"{one.get('node')} {one.get('why')}" for one in record.get("named") or []
                      if isinstance(one, dict))
    action = record.get("action")
    message = record.get("message") if action != "pass" else ""
    return (f"restart {record.get('restart')}: {DONE.get(action, action)}"
            f"{f' in {seconds:.1f} s' if seconds is not None else ''} ({', '.join(parts)})"
            + (f": {message}" if message else "") + (f"; {named}" if named else ""))


def judge_main(args):
    nodes = [node for node in args.nodes.split(",") if node]
    results = {}
    for node in nodes:
        try:
            with open(result_path(args.dir, args.tag, node), encoding="utf-8") as handle:
                results[node] = json.load(handle)
        except (OSError, ValueError):
            continue
    named, problem = named_nodes(results, nodes, args.slow_factor)
    partition_nodes, excluded = [], []
    if named and not args.explicit and args.restart < args.max_restarts:
        try:
            partition_nodes, excluded = slurm_view(args.tag, args.partition)
        except (OSError, RuntimeError, subprocess.SubprocessError) as error:
            problem = f"cannot ask Slurm for the partition's nodes ({error})"
            print(f"health gate: {problem}", file=sys.stderr, flush=True)
    verdict = decide(named, problem, args.explicit, args.restart, args.max_restarts, partition_nodes, excluded,
                     len(nodes))
    reduced = next((results[node]["allreduce"] for node in nodes
                    if "time_us" in (results.get(node, {}).get("allreduce") or {})), None)
    record = {"restart": args.restart, "seconds": round(time.time() - args.started, 2), "slow_factor": args.slow_factor,
              "nodes": {node: results.get(node, {"error": "no result"}) for node in nodes}, "allreduce": reduced,
              "named": named, "action": verdict["action"], "message": verdict["message"]}
    for found in record["nodes"].values():
        found.pop("allreduce", None)
    # The gate's own words for the attempt, which summary.txt shows as they are.
    record["summary"] = summary_line(record)
    try:
        with open(record_path(args.dir, args.tag), "a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")
    except OSError as error:
        print(f"health gate: cannot record the gate in {record_path(args.dir, args.tag)}: {error}", file=sys.stderr)
    for one in named:
        print(f"health gate: {one['node']} {one['why']}", file=sys.stderr, flush=True)
    if problem:
        print(f"health gate: {problem}", file=sys.stderr, flush=True)
    print(f"health gate: {summary_line({**record, 'named': []})}", file=sys.stderr, flush=True)
    print(verdict["action"], ",".join(verdict["exclude"]) or "-", *(f"{one['node']}:{one['reason']}" for one in named))
    return 0


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", required=True, help="the run's directory, seen by every node")
    parser.add_argument("--tag", required=True, help="the job id: its files' names")
    parser.add_argument("--gpus-per-node", type=int, default=0)
    parser.add_argument("--cuda-home", default="")
    parser.add_argument("--matmul-size", type=int, default=0, help="matmul side; 0: 8192 on GPUs, 2048 on CPU")
    parser.add_argument("--timeout", type=float, default=120, help="seconds a node waits for the others")
    parser.add_argument("--judge", action="store_true", help="judge the nodes' results (the batch shell's part)")
    parser.add_argument("--nodes", default="", help="the job's nodes, comma-separated, in node rank order")
    parser.add_argument("--slow-factor", type=float, default=1.5)
    parser.add_argument("--explicit", action="store_true", help="the node list was given: fail, never requeue")
    parser.add_argument("--restart", type=int, default=0)
    parser.add_argument("--max-restarts", type=int, default=0)
    parser.add_argument("--partition", default="")
    parser.add_argument("--started", type=float, default=0, help="when the gate began (epoch seconds): its cost")
    args = parser.parse_args(argv)
    if args.matmul_size < 0 or args.timeout <= 0 or args.slow_factor <= 1:
        parser.error("--matmul-size must be 0 or more, --timeout more than 0 and --slow-factor more than 1")
    return args


def main(argv=None):
    args = parse_args(argv)
    return judge_main(args) if args.judge else node_main(args)


if __name__ == "__main__":
    code = main()
    # As allreduce_check.py: gloo may abort in the interpreter's teardown; everything is written.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
