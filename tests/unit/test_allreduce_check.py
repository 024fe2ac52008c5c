"""The preflight's all-reduce program (roles/slurm_launch/files/allreduce_check.py): its figures,
its input checks, and a real run under torchrun (2 CPU processes, gloo)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

PROGRAM = Path(__file__).resolve().parents[2] / "roles" / "slurm_launch" / "files" / "allreduce_check.py"
from ansible_collections.hpc.slurm_train.roles.slurm_launch.files import allreduce_check


def test_bus_bandwidth_is_nccl_tests_ring_factor():
    # 1 GB in 1 s on 8 ranks: algbw 1 GB/s, busbw 2 * 7 / 8 of it.
    assert allreduce_check.bus_bandwidth(10**9, 1.0, 8) == (1.0, 1.75)
    assert allreduce_check.bus_bandwidth(10**9, 0.5, 2) == (2.0, 2.0)


@pytest.mark.parametrize("sizes", ["1024,abc", "6", "0", ""])
def test_sizes_that_are_not_float32_multiples_are_refused(sizes, capsys):
    with pytest.raises(SystemExit):
        allreduce_check.parse_args(["--sizes", sizes])
    assert "--sizes" in capsys.readouterr().err


def test_two_ranks_sum_correctly_and_report_each_size():
    torchrun = Path(sys.executable).parent / "torchrun"
    proc = subprocess.run([str(torchrun), "--standalone", "--nproc-per-node=2", str(PROGRAM), "--sizes", "1024,65536",
                           "--iters", "2"], capture_output=True, text=True, timeout=180,
                          env={"PATH": str(torchrun.parent) + ":/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout.split("allreduce-result: ", 1)[1].splitlines()[0])
    assert (result["world_size"], result["backend"]) == (2, "gloo")
    assert [r["size"] for r in result["results"]] == [1024, 65536]
    assert all(r["wrong"] == 0 and r["busbw"] > 0 and r["time_us"] > 0 for r in result["results"])


@pytest.mark.parametrize("requested, gpus, cuda, nccl, expected", [
    ("auto", 8, True, True, "nccl"), ("auto", 0, False, False, "gloo"), ("auto", 0, True, True, "nccl"),
    ("auto", 8, False, False, None), ("auto", 8, True, False, None), ("gloo", 8, False, False, "gloo")])
def test_a_job_given_gpus_gets_nccl_or_fails_never_gloo_unasked(requested, gpus, cuda, nccl, expected):
    backend, why = allreduce_check.choose_backend(requested, gpus, cuda, nccl)
    assert backend == expected
    assert bool(why) == (expected is None)
    if expected is None:
        assert f"given {gpus} GPUs per node" in why and "not falling back to gloo" in why
