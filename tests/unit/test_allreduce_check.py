"""The preflight's all-reduce program (roles/slurm_launch/files/allreduce_check.py): its figures,
its input checks, and a real run under torchrun (2 CPU processes, gloo)."""
import json
import os
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
    assert (result["world_size"], result["backend"], result["nccl"]) == (2, "gloo", None)
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


# NCCL 2.18's INFO lines (NCCL_DEBUG_SUBSYS=INIT,NET) on a node whose IB stack finds no device,
# and on a DGX with its rails; the formats are NCCL's (src/init.cc, src/transport/net.cc,
# src/transport/net_ib/init.cc, src/transport/net_socket.cc).
SOCKET_LOG = """node110:4121:4121 [0] NCCL INFO Bootstrap : Using eth0:10.77.0.110<0>
node110:4121:4121 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation
node110:4121:4180 [0] NCCL INFO NET/IB : No device found.
node110:4121:4180 [0] NCCL INFO NET/Socket : Using [0]eth0:10.77.0.110<0>
node110:4121:4180 [0] NCCL INFO Using network Socket
node110:4121:4180 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Socket/0
""".splitlines()
IB_LOG = """dgx1:77:77 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB ; OOB enp41s0f0np0:10.77.0.110<0>
dgx1:77:77 [0] NCCL INFO Using network IB
dgx1:77:91 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IB/0/GDRDMA
""".splitlines()


def test_nccls_network_choice_is_read_from_its_log():
    socket_run = allreduce_check.nccl_network_of(SOCKET_LOG)
    assert socket_run == {"network": "Socket", "gdrdma": False, "lines": [
        "NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation",
        "NCCL INFO NET/IB : No device found.", "NCCL INFO NET/Socket : Using [0]eth0:10.77.0.110<0>",
        "NCCL INFO Using network Socket"]}
    ib_run = allreduce_check.nccl_network_of(IB_LOG)
    assert (ib_run["network"], ib_run["gdrdma"]) == ("IB", True)
    assert allreduce_check.nccl_network_of([])["network"] == ""


def test_the_log_goes_to_a_file_per_process_that_the_process_reads_back(tmp_path, monkeypatch):
    settings = allreduce_check.nccl_log_settings(str(tmp_path))
    assert settings == {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET",
                        "NCCL_DEBUG_FILE": f"{tmp_path}/nccl.%h.%p.log"}
    (tmp_path / f"nccl.node110.{os.getpid()}.log").write_text("\n".join(IB_LOG))
    (tmp_path / "nccl.node110.1.log").write_text("\n".join(SOCKET_LOG))  # another process's
    assert allreduce_check.read_nccl_log(str(tmp_path)) == IB_LOG


def test_the_nccl_sizes_are_checked_as_the_sizes_are():
    args = allreduce_check.parse_args(["--sizes", "1024", "--nccl-sizes", "268435456,1073741824"])
    assert (args.sizes, args.nccl_sizes) == ([1024], [268435456, 1073741824])
    assert allreduce_check.parse_args(["--sizes", "1024"]).nccl_sizes == []
    with pytest.raises(SystemExit):
        allreduce_check.parse_args(["--nccl-sizes", "6"])


def test_the_nccl_sizes_are_not_run_on_gloo():
    torchrun = Path(sys.executable).parent / "torchrun"
    proc = subprocess.run([str(torchrun), "--standalone", "--nproc-per-node=2", str(PROGRAM), "--sizes", "1024",
                           "--nccl-sizes", "268435456", "--iters", "1", "--warmup", "0"], capture_output=True,
                          text=True, timeout=180, env={"PATH": str(torchrun.parent) + ":/usr/bin:/bin",
                                                       "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout.split("allreduce-result: ", 1)[1].splitlines()[0])
    assert [r["size"] for r in result["results"]] == [1024]


STANDIN_TORCH = PROGRAM.parents[3] / "tests" / "standins" / "gpu" / "python" / "sitecustomize.py"


def test_a_gpu_job_reports_the_network_its_nccl_logged(tmp_path):
    # The local cluster's stand-in CUDA torch (gloo underneath) with a recorded NCCL log of a
    # socket fallback: the job given GPUs logs NCCL to a file per process, rank 0 reports it.
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidia0").touch()
    marker = tmp_path / "standin-gpus.json"
    marker.write_text(json.dumps({"devices": str(tmp_path / "dev"), "driver_version": "535.104.05",
                                  "name": "stand-in", "cuda": "12.4", "nccl": "2.21.5"}))
    recorded = tmp_path / "standin-nccl.log"
    recorded.write_text("\n".join(SOCKET_LOG) + "\n")
    (tmp_path / "python").mkdir()
    (tmp_path / "python" / "sitecustomize.py").write_text(
        STANDIN_TORCH.read_text().replace('MARKER = "/etc/local-cluster/standin-gpus.json"', f'MARKER = "{marker}"')
        .replace('NCCL_LOG = "/etc/local-cluster/standin-nccl.log"', f'NCCL_LOG = "{recorded}"'))
    torchrun = Path(sys.executable).parent / "torchrun"
    proc = subprocess.run([str(torchrun), "--standalone", "--nproc-per-node=1", str(PROGRAM), "--sizes", "1024",
                           "--iters", "1"], capture_output=True, text=True, timeout=180,
                          env={"PATH": str(torchrun.parent) + ":/usr/bin:/bin", "OMP_NUM_THREADS": "1",
                               "PYTHONPATH": str(tmp_path / "python"), "SLURM_GPUS_ON_NODE": "1",
                               "SLURMD_NODENAME": "node110"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout.split("allreduce-result: ", 1)[1].splitlines()[0])
    assert (result["backend"], result["node"], result["nccl"]["network"]) == ("gloo", "node110", "Socket")
    assert "# NCCL INFO NET/IB : No device found." in proc.stdout


def test_the_smallest_run_and_size_are_taken_and_one_less_is_refused(capsys):
    least = allreduce_check.parse_args(["--sizes", "4", "--iters", "1", "--warmup", "0"])
    assert (least.sizes, least.iters, least.warmup) == ([4], 1, 0)
    for argv in (["--iters", "0"], ["--warmup", "-1"], ["--iters", "0", "--warmup", "2"]):
        with pytest.raises(SystemExit):
            allreduce_check.parse_args(argv)
        assert "--iters must be at least 1 and --warmup at least 0" in capsys.readouterr().err


def test_by_default_each_size_from_1_kib_to_16_mib_is_timed_5_times_after_2(monkeypatch):
    monkeypatch.delenv("TRAIN_BACKEND", raising=False)
    args = allreduce_check.parse_args([])
    assert (args.sizes, args.nccl_sizes, args.iters, args.warmup, args.backend) == (
        [1024, 65536, 1048576, 16777216], [], 5, 2, "auto")


def test_help_opens_with_what_the_program_does(capsys):
    with pytest.raises(SystemExit):
        allreduce_check.parse_args(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "The preflight's all-reduce: every rank of the job sums a tensor of each size, checks the" in out


def test_at_most_12_of_nccls_network_lines_are_kept():
    lines = [f"node110:1:1 [0] NCCL INFO NET/IB : line {index}" for index in range(20)]
    assert allreduce_check.nccl_network_of(lines)["lines"] == [f"NCCL INFO NET/IB : line {index}" for index in range(12)]


def test_a_cpu_build_of_torch_given_gpus_says_so(monkeypatch):
    monkeypatch.setattr(allreduce_check.torch.version, "cuda", None)
    _, why = allreduce_check.choose_backend("auto", 8, False, False)
    assert "(CUDA none: a CPU build, is_available=False, nccl available=False)" in why
    monkeypatch.setattr(allreduce_check.torch.version, "cuda", "12.1")
    _, why = allreduce_check.choose_backend("auto", 8, False, False)
    assert "(CUDA 12.1, is_available=False" in why
