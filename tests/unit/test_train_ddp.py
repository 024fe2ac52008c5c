"""Run examples/train_ddp.py under ``torchrun --standalone`` (2 CPU processes, gloo)."""
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

TRAINER = Path(__file__).resolve().parents[2] / "examples" / "train_ddp.py"
_TORCHRUN = Path(sys.executable).parent / "torchrun"
TORCHRUN = [str(_TORCHRUN)] if _TORCHRUN.exists() else [sys.executable, "-m",
                                                        "torch.distributed.run"]
TIMEOUT = 120  # generous: a 2-core machine needs about 5-8 s per run


def torchrun_cmd(ckpt_dir, *args):
    return [*TORCHRUN, "--standalone", "--nproc-per-node=2", str(TRAINER),
            "--checkpoint-dir", str(ckpt_dir), *map(str, args)]


def env():
    e = {k: v for k, v in os.environ.items()
         if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    e["OMP_NUM_THREADS"] = "1"
    return e


def run(ckpt_dir, *args):
    return subprocess.run(torchrun_cmd(ckpt_dir, *args), env=env(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=TIMEOUT)


def final_loss(output):
    return re.search(r"\[rank0\] training complete steps=(\d+) final_loss=(\S+)", output).groups()


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """One uninterrupted 6-step run, shared by the tests that compare against it."""
    return run(tmp_path_factory.mktemp("full"), "--steps", 6, "--log-every", 2)


def test_world_size_and_allreduce(full_run):
    out = full_run.stdout
    assert full_run.returncode == 0, out
    assert "[rank0] world_size=2 backend=gloo" in out
    for rank in (0, 1):
        line = rf"\[rank{rank}\] rank={rank} local_rank={rank} host=\S+ world_size=2 "
        assert re.search(line, out), out
    assert "[rank0] allreduce_check sum=1 expected=1 ok" in out
    assert re.search(r"\[rank0\] step=6 loss=\d", out)
    assert final_loss(out)[0] == "6"
    assert "destroy_process_group" not in out


def test_resume_gives_same_total_steps(tmp_path, full_run):
    first = run(tmp_path, "--steps", 3)
    assert first.returncode == 0, first.stdout
    assert (tmp_path / "checkpoint.pt").exists()
    second = run(tmp_path, "--steps", 6)
    assert second.returncode == 0, second.stdout
    assert "[rank0] resumed from step=3" in second.stdout
    # Same total steps, and (CPU, fixed seeds) the very same final loss as never stopping.
    assert final_loss(second.stdout) == final_loss(full_run.stdout)
    assert torch.load(tmp_path / "checkpoint.pt")["step"] == 6


def test_fault_injection_fails_fast(tmp_path):
    start = time.monotonic()
    res = run(tmp_path, "--steps", 200, "--step-sleep", 0.1,
              "--fail-rank", 1, "--fail-at-step", 2, "--fail-exit-code", 7)
    elapsed = time.monotonic() - start
    out = res.stdout
    assert "[rank1] rank 1 failing on purpose at step 2 with exit code 7" in out
    # torchrun itself exits 1 (not 7) on a failed worker; it reports the worker's code.
    assert res.returncode != 0, out
    assert re.search(r"exitcode\s*:\s*7 ", out), out
    assert "training complete" not in out
    assert elapsed < 60, f"took {elapsed:.1f}s: a failed rank must end the job quickly"


def test_sigusr1_saves_checkpoint_and_exits(tmp_path):
    """SIGUSR1 reaches one worker directly (as srun/scancel --signal do); all ranks stop."""
    proc = subprocess.Popen(
        torchrun_cmd(tmp_path, "--steps", 500, "--step-sleep", 0.2, "--log-every", 1),
        env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines, training = [], threading.Event()

    def reader():
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("[rank0] step="):
                training.set()

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    pids, finished = [], False
    try:
        assert training.wait(TIMEOUT), "".join(lines)
        out = "".join(lines)
        pids = [int(p) for p in re.findall(r"\] rank=\d .* pid=(\d+)", out)]
        rank1_pid = int(re.search(r"\[rank1\] rank=1 .* pid=(\d+)", out).group(1))
        os.kill(rank1_pid, signal.SIGUSR1)
        rc = proc.wait(TIMEOUT)
        thread.join(10)
        finished = True
    finally:
        if not finished:  # leave no strays: torchrun starts workers in their own sessions
            for pid in [proc.pid, *pids]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            proc.wait()
    out = "".join(lines)
    assert rc == 0, out
    saved = re.search(r"\[rank0\] checkpoint saved step=(\d+) reason=SIGUSR1", out)
    assert saved, out
    assert "training complete" not in out
    ckpt = tmp_path / "checkpoint.pt"
    assert ckpt.exists()
    assert torch.load(ckpt)["step"] == int(saved.group(1)) < 500
    assert not list(tmp_path.glob("*.tmp.*")), "temp file left behind"
