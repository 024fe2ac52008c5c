#!/usr/bin/env python3
"""Small but real PyTorch DDP trainer: synthetic regression, MLP, checkpoint/resume.

Run it with torchrun, which sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
MASTER_PORT for every worker process:

    torchrun --standalone --nproc-per-node=2 examples/train_ddp.py --steps 20

On Slurm, one torchrun per node (``srun --ntasks-per-node=1``) with
``--nnodes=$SLURM_NNODES --node-rank=$SLURM_NODEID --master-addr=<first node>``.
``--backend auto`` (or $TRAIN_BACKEND) uses nccl when CUDA is available (one GPU per
LOCAL_RANK), gloo on CPU; but a job that was given GPUs (Slurm's SLURM_GPUS_ON_NODE) gets
nccl or stops, saying why: it never falls back to training on CPU. Only an explicit gloo
(``--backend gloo``, TRAIN_BACKEND=gloo) runs a GPU job on CPU. Every line is prefixed with
``[rankN]`` and flushed at once.

How a training script hears of the time limit, and what it must do
------------------------------------------------------------------
Slurm kills a job at its time limit (SIGTERM, then SIGKILL after KillWait).
Asked for it, it first sends a warning signal some time before the limit. This
project's job script asks for it on the batch shell (``--signal=B:USR1@120``),
which passes it on through srun to every process of the step -- these worker
processes included -- and requeues the job once they have checkpointed and
exited 0 (by hand: ``scancel --batch --signal=USR1 <job>``). On that signal
(``--checkpoint-signals``, default USR1,TERM):

1. the handler only sets a flag (no I/O or collectives inside a handler);
2. at the next step boundary all ranks all_reduce(MAX) the flag, so every rank
   stops at the same step even if only some of them got the signal (so the
   warning time must exceed one step plus one checkpoint save);
3. rank 0 writes the checkpoint atomically (temp file, fsync, os.replace) and
   prints ``checkpoint saved step=N reason=SIGUSR1``; all ranks wait for it;
4. the process group is destroyed and the process exits with
   ``--signal-exit-code`` (default 0); a requeued or resubmitted job with the
   same ``--checkpoint-dir`` (shared by all nodes) resumes from step N.

torchrun and signals (measured with torch 2.13): torchrun starts its workers in
their own sessions, so a signal to torchrun's process group misses them. By
default torchrun handles SIGTERM/SIGINT/SIGHUP/SIGQUIT: it forwards them to the
workers, waits for them (up to 30 s, then SIGKILL) and exits 1. SIGUSR1 kills
torchrun itself (exit 138, workers orphaned) unless it was started with
``--signals-to-handle=SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1`` (then: forwarded,
exit 1). A signal that reaches only the workers ends the job with their code.
torchrun also exits 1, not with the worker's code, when a worker fails.
"""
import argparse
import json
import os
import signal
import socket
import sys
import time
from itertools import islice

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

RANK = int(os.environ.get("RANK", "0"))
_stop_signal = 0  # set by the signal handler, read at step boundaries


def log(msg, err=False):
    stream = sys.stderr if err else sys.stdout
    stream.write(f"[rank{RANK}] {msg}\n")  # one write per line: ranks do not interleave
    stream.flush()


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=50, help="total optimizer steps (default 50)")
    p.add_argument("--batch-size", type=int, default=32, help="samples per rank per step")
    p.add_argument("--lr", type=float, default=0.01, help="Adam learning rate")
    p.add_argument("--seed", type=int, default=1234, help="seed for data, model and sampler")
    p.add_argument("--log-every", type=int, default=10,
                   help="rank 0 logs the loss every N steps (and at the end)")
    p.add_argument("--step-sleep", type=float, default=0.0,
                   help="extra seconds per step, so a test job lasts a chosen time")
    p.add_argument("--backend", choices=["auto", "nccl", "gloo"], default=os.environ.get("TRAIN_BACKEND", "auto"),
                   help="auto (default $TRAIN_BACKEND or auto): nccl if CUDA is available, else gloo; "
                        "a job given GPUs: nccl or fail")
    p.add_argument("--checkpoint-dir", default=os.environ.get("CHECKPOINT_DIR", "./checkpoints"),
                   help="holds checkpoint.pt; must be shared by all nodes (default $CHECKPOINT_DIR "
                        "or ./checkpoints)")
    p.add_argument("--checkpoint-every", type=int, default=0,
                   help="also save every N steps (0: only at the end and on a signal)")
    p.add_argument("--checkpoint-signals", default="USR1,TERM",
                   help="comma-separated signals that mean: checkpoint and stop ('' for none)")
    p.add_argument("--signal-exit-code", type=int, default=0,
                   help="exit code after a signal-triggered checkpoint (default 0)")
    p.add_argument("--fail-rank", type=int, default=-1, help="fault injection: rank that fails")
    p.add_argument("--fail-at-step", type=int, default=-1, help="fault injection: step it fails at")
    p.add_argument("--fail-exit-code", type=int, default=3, help="fault injection: its exit code")
    return p.parse_args(argv)


def choose_backend(requested):
    """The process group's backend; None and the reason when a GPU job cannot have nccl."""
    gpus_asked = int(os.environ.get("SLURM_GPUS_ON_NODE") or 0)
    if requested != "auto":
        return requested, ""
    cuda = torch.cuda.is_available()
    if gpus_asked and not (cuda and dist.is_nccl_available()):
        return None, (f"the job was given {gpus_asked} GPUs per node (SLURM_GPUS_ON_NODE) but torch {torch.__version__} "
                      f"cannot use them (CUDA {torch.version.cuda or 'none: a CPU build'}, is_available={cuda}, "
                      f"nccl available={dist.is_nccl_available()}): not falling back to gloo on CPU")
    return ("nccl" if cuda else "gloo"), ""


def on_signal(signum, frame):
    global _stop_signal
    _stop_signal = signum


def save_checkpoint(path, model, optimizer, step, loss):
    """Write atomically: temp file in the same dir, fsync, os.replace, fsync dir."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    state = {"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
             "step": step, "loss": loss}
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    # The step beside it, for whoever resumes without torch (the launch's summary says it).
    with open(f"{path}.json.tmp", "w") as f:
        json.dump({"step": step}, f)
    os.replace(f"{path}.json.tmp", f"{os.path.splitext(path)[0]}.json")
    dir_fd = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def main(argv=None):
    args = parse_args(argv)
    for name in filter(None, (s.strip() for s in args.checkpoint_signals.split(","))):
        signal.signal(getattr(signal, "SIG" + name.upper().removeprefix("SIG")), on_signal)

    backend, why_not = choose_backend(args.backend)
    if backend is None:
        log(why_not, err=True)
        return 2
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if backend == "nccl":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group(backend, device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()

    def all_reduce(values, op=dist.ReduceOp.SUM, dtype=torch.int64):
        t = torch.tensor(values, dtype=dtype, device=device)
        dist.all_reduce(t, op=op)
        return t.tolist()

    # Proof that every rank joined one process group.
    if rank == 0:
        log(f"world_size={world} backend={backend}")
        log(f"training lr={args.lr} steps={args.steps}")
    log(f"rank={rank} local_rank={local_rank} host={socket.gethostname()} "
        f"world_size={world} pid={os.getpid()}")
    (total,) = all_reduce([rank])
    expected = world * (world - 1) // 2
    if total != expected:
        log(f"allreduce_check sum={total} expected={expected} FAILED: ranks do not form "
            "one process group", err=True)
        dist.destroy_process_group()
        return 1
    if rank == 0:
        log(f"allreduce_check sum={total} expected={expected} ok")

    # Synthetic regression data, identical on every rank; the sampler splits it.
    gen = torch.Generator().manual_seed(args.seed)
    x = torch.randn(4096, 16, generator=gen)
    w = torch.randn(16, 1, generator=gen) / 4
    y = torch.sin(2 * (x @ w)) + 0.05 * torch.randn(4096, 1, generator=gen)
    sampler = DistributedSampler(TensorDataset(x, y), num_replicas=world, rank=rank,
                                 shuffle=True, seed=args.seed, drop_last=True)
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, sampler=sampler,
                        drop_last=True)
    torch.manual_seed(args.seed)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                          nn.Linear(64, 1)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    # Resume: every rank loads the checkpoint (shared dir) before DDP wraps the model.
    ckpt_path = os.path.join(args.checkpoint_dir, "checkpoint.pt")
    step, loss_value = 0, float("nan")
    if os.path.exists(ckpt_path):
        state = torch.load(ckpt_path, map_location=device)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step, loss_value = state["step"], state["loss"]
    low, high = all_reduce([step, -step], op=dist.ReduceOp.MIN)
    if low != -high:
        log(f"ranks disagree on the resume step (min={low} max={-high}): is "
            f"{args.checkpoint_dir} shared by all nodes?", err=True)
        dist.destroy_process_group()
        return 1
    if step and rank == 0:
        log(f"resumed from step={step}")
    model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
    loss_fn = nn.MSELoss()

    def batches():  # endless, deterministic, and skips what a resumed run already did
        epoch, skip = divmod(step, len(loader))
        while True:
            sampler.set_epoch(epoch)
            yield from islice(loader, skip, None)
            epoch, skip = epoch + 1, 0

    data = batches()
    while step < args.steps:
        # Step boundary: all ranks agree whether any of them got a stop signal.
        (stop,) = all_reduce([_stop_signal], op=dist.ReduceOp.MAX)
        if stop:
            if rank == 0:
                save_checkpoint(ckpt_path, model, optimizer, step, loss_value)
                log(f"checkpoint saved step={step} reason={signal.Signals(stop).name}")
            dist.barrier()
            dist.destroy_process_group()
            return args.signal_exit_code
        if rank == args.fail_rank and step + 1 == args.fail_at_step:
            log(f"rank {rank} failing on purpose at step {step + 1} "
                f"with exit code {args.fail_exit_code}", err=True)
            os._exit(args.fail_exit_code)  # a crash: no cleanup

        inputs, targets = next(data)
        optimizer.zero_grad()
        loss = loss_fn(model(inputs.to(device)), targets.to(device))
        loss.backward()  # DDP averages the gradients across ranks here
        optimizer.step()
        step += 1
        if (args.log_every and step % args.log_every == 0) or step == args.steps:
            (loss_value,) = all_reduce([loss.item()], dtype=torch.float64)
            loss_value /= world
            if rank == 0:
                log(f"step={step} loss={loss_value:.6f}")
        if args.checkpoint_every and step % args.checkpoint_every == 0 and rank == 0:
            save_checkpoint(ckpt_path, model, optimizer, step, loss_value)
        if args.step_sleep:
            time.sleep(args.step_sleep)

    if rank == 0:
        save_checkpoint(ckpt_path, model, optimizer, step, loss_value)
        log(f"training complete steps={step} final_loss={loss_value:.6f}")
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    exit_code = main()
    # With gloo, torch 2.13 sometimes aborts (SIGABRT, "terminate called without an active
    # exception") while the interpreter shuts down, after destroy_process_group() returned on
    # every rank: about 1 run in 35 of 4 ranks, turning a finished training into a failed job.
    # Everything is saved and flushed by now, so skip the interpreter's teardown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)
