#!/usr/bin/env python3
"""The preflight's all-reduce: every rank of the job sums a tensor of each size, checks the
result and reports the bandwidth as nccl-tests' all_reduce_perf does.

Run by the preflight through the same job script as a training (one torchrun per node), so it
proves the path the training takes: rendezvous, the backend (nccl on GPUs, gloo on CPU) over
the NCCL env of the node group. A job given GPUs (SLURM_GPUS_ON_NODE) gets nccl or fails, saying
why; only an explicit gloo (--backend gloo, or $TRAIN_BACKEND=gloo) runs it on CPU. Rank 0 prints a table and one ``allreduce-result: {json}``
line that the preflight reads from the job's log.

    torchrun --standalone --nproc-per-node=2 allreduce_check.py --sizes 1024,1048576

algbw = bytes / time; busbw = algbw * 2 (n - 1) / n, the bandwidth each link carries in a
ring all-reduce (nccl-tests' definition), so figures compare across world sizes.

On nccl, NCCL logs its init and network choice (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,NET) to a
file of each rank; rank 0 reports which network its NCCL used ("Using network IB" or "Socket")
and whether its channels use GPUDirect RDMA ("via NET/IB/0/GDRDMA"), for the preflight to judge.
"""
import argparse
import glob
import json
import os
import re
import sys
import tempfile
import time

import torch
import torch.distributed as dist


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1024,65536,1048576,16777216",
                        help="message sizes in bytes, comma-separated (float32 elements: a multiple of 4)")
    parser.add_argument("--nccl-sizes", default="",
                        help="sizes added when the backend is nccl (bandwidth-bound ones, for a fabric), comma-separated")
    parser.add_argument("--iters", type=int, default=5, help="timed all-reduces per size")
    parser.add_argument("--warmup", type=int, default=2, help="untimed all-reduces per size first")
    parser.add_argument("--backend", choices=["auto", "nccl", "gloo"], default=os.environ.get("TRAIN_BACKEND", "auto"))
    args = parser.parse_args(argv)
    for option in ("sizes", "nccl_sizes"):
        text = getattr(args, option)
        try:
            sizes = [int(size) for size in text.split(",")] if text or option == "sizes" else []
        except ValueError:
            parser.error(f"--{option.replace('_', '-')} {text!r}: give whole numbers of bytes, comma-separated")
        if (option == "sizes" and not sizes) or any(size < 4 or size % 4 for size in sizes):
            parser.error(f"--{option.replace('_', '-')} {sizes}: each size must be a positive multiple of 4 bytes "
                         "(float32)")
        setattr(args, option, sizes)
    if args.iters < 1 or args.warmup < 0:
        parser.error("--iters must be at least 1 and --warmup at least 0")
    return args


def bus_bandwidth(size_bytes, seconds, world_size):
    """(algbw, busbw) in GB/s for one all-reduce of size_bytes that took seconds."""
    algbw = size_bytes / seconds / 1e9
    return algbw, algbw * 2 * (world_size - 1) / world_size


def choose_backend(requested, gpus_asked, cuda_available, nccl_available):
    """(backend, "") or (None, why): a job given GPUs never falls back to gloo unasked."""
    if requested != "auto":
        return requested, ""
    if gpus_asked and not (cuda_available and nccl_available):
        return None, (f"the job was given {gpus_asked} GPUs per node (SLURM_GPUS_ON_NODE) but torch {torch.__version__} "
                      f"cannot use them (CUDA {torch.version.cuda or 'none: a CPU build'}, is_available={cuda_available}, "
                      f"nccl available={nccl_available}): not falling back to gloo on CPU")
    return ("nccl" if cuda_available else "gloo"), ""


# NCCL's own lines (src/init.cc "Using network %s"; src/transport/net.cc "... via NET/%s/%d%s",
# "/GDRDMA" when the NIC reads GPU memory directly; net_ib/init.cc, net_socket.cc "NET/IB : ...").
USING_NETWORK_RE = re.compile(r"NCCL INFO Using network (.+?)\s*$")
NET_LINE_RE = re.compile(r"NCCL INFO (NET/|Using network)")


def nccl_log_settings(directory):
    """The environment that makes NCCL log its network choice to one file per process."""
    return {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET",
            "NCCL_DEBUG_FILE": os.path.join(directory, "nccl.%h.%p.log")}


def nccl_network_of(lines):
    """{"network": what NCCL used ("IB", "Socket", a plugin's name; "" when it did not say),
    "gdrdma": whether a channel goes through GPUDirect RDMA, "lines": its network lines}."""
    network = ""
    for line in lines:
        match = USING_NETWORK_RE.search(line)
        if match:
            network = match.group(1)
    net_lines = [line.strip() for line in lines if NET_LINE_RE.search(line)]
    return {"network": network, "gdrdma": any("/GDRDMA" in line for line in lines if "via NET/" in line),
            "lines": [line[line.index("NCCL INFO"):] for line in net_lines if "Channel" not in line][:12]}


def read_nccl_log(directory):
    """This process's NCCL log lines (the file NCCL_DEBUG_FILE names, %p being its pid)."""
    lines = []
    for path in glob.glob(os.path.join(directory, f"nccl.*.{os.getpid()}.log")):
        with open(path, errors="replace") as handle:
            lines += handle.read().splitlines()
    return lines


def timed_all_reduce(size, iters, warmup, device, rank, world):
    """This rank's view of an all-reduce of size bytes (float32), averaged over iters after warmup
    untimed ones: {"size", "count", "time_us", "algbw", "busbw", "wrong"}; also the job's health gate's."""
    count = size // 4
    tensor = torch.empty(count, dtype=torch.float32, device=device)
    for _ in range(warmup):
        dist.all_reduce(tensor.fill_(rank + 1))
    elapsed = 0.0
    wrong = 0
    for _ in range(iters):
        tensor.fill_(rank + 1)
        dist.barrier()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        started = time.perf_counter()
        dist.all_reduce(tensor)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        elapsed += time.perf_counter() - started
        # Every element must be 1 + 2 + ... + world: nccl-tests' #wrong.
        wrong += int((tensor != world * (world + 1) / 2).sum())
    seconds = elapsed / iters
    algbw, busbw = bus_bandwidth(size, seconds, world)
    return {"size": size, "count": count, "time_us": round(seconds * 1e6, 1),
            "algbw": round(algbw, 4), "busbw": round(busbw, 4), "wrong": wrong}


def main(argv=None):
    args = parse_args(argv)
    backend, why_not = choose_backend(args.backend, int(os.environ.get("SLURM_GPUS_ON_NODE") or 0),
                                      torch.cuda.is_available(), dist.is_nccl_available())
    if backend is None:
        print(f"allreduce_check: {why_not}", file=sys.stderr, flush=True)
        return 2
    # Before NCCL starts: it reads its environment once. On a job given GPUs whatever the backend
    # (an explicit gloo has no NCCL, and so no log, to judge).
    gpus_asked = int(os.environ.get("SLURM_GPUS_ON_NODE") or 0)
    log_dir = tempfile.mkdtemp(prefix="allreduce-nccl-") if backend == "nccl" or gpus_asked else ""
    if log_dir:
        os.environ.update(nccl_log_settings(log_dir))
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    results = [timed_all_reduce(size, args.iters, args.warmup, device, rank, world)
               for size in sorted(set(args.sizes + (args.nccl_sizes if backend == "nccl" else [])))]
    # The slowest rank's time is the collective's time.
    times = torch.tensor([r["time_us"] for r in results], dtype=torch.float64)
    wrongs = torch.tensor([r["wrong"] for r in results], dtype=torch.int64)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    dist.all_reduce(wrongs)
    for result, slowest, wrong in zip(results, times.tolist(), wrongs.tolist()):
        algbw, busbw = bus_bandwidth(result["size"], slowest / 1e6, world)
        result.update(time_us=round(slowest, 1), algbw=round(algbw, 4), busbw=round(busbw, 4), wrong=wrong)
    log_lines = read_nccl_log(log_dir) if log_dir else []
    nccl = nccl_network_of(log_lines) if log_lines else None
    if rank == 0:
        for line in (nccl or {}).get("lines", []):
            print(f"# {line}", flush=True)
        print(f"# all-reduce sum float32, {world} ranks, backend {backend}, {args.iters} iterations", flush=True)
        print(f"# {'size':>12} {'count':>10} {'time(us)':>10} {'algbw(GB/s)':>12} {'busbw(GB/s)':>12} {'#wrong':>7}")
        for r in results:
            print(f"  {r['size']:>12} {r['count']:>10} {r['time_us']:>10.1f} {r['algbw']:>12.4f} "
                  f"{r['busbw']:>12.4f} {r['wrong']:>7}")
        node = os.environ.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]
        print("allreduce-result: " + json.dumps({"world_size": world, "backend": backend, "node": node,
                                                 "nccl": nccl, "results": results}), flush=True)
    dist.destroy_process_group()
    return 1 if any(r["wrong"] for r in results) else 0


if __name__ == "__main__":
    code = main()
    # As in examples/train_ddp.py: torch 2.13's gloo sometimes aborts in the interpreter's
    # teardown after destroy_process_group(); everything is printed by now.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
