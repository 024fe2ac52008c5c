"""roles/slurm_launch/files/gpu_check.py, the check a GPU job runs on every node before it trains:
its rules (driver table, CUDA majors, GPU counts), its probes of version.json and nvidia-smi, and
its exit code. nvidia-smi here is the local cluster's stand-in (tests/standins/gpu/bin/nvidia-smi,
which follows the output format of NVIDIA's nvidia-smi documentation for --query-gpu)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROGRAM = REPO / "roles" / "slurm_launch" / "files" / "gpu_check.py"
from ansible_collections.hpc.slurm_train.roles.slurm_launch.files import gpu_check
STANDIN_SMI = REPO / "tests" / "standins" / "gpu" / "bin" / "nvidia-smi"


def facts(**overrides):
    """A node where everything matches: 8 GPUs on driver 535.104.05, torch built for CUDA 11.8, toolkit 11.8."""
    base = {"drivers": ["535.104.05"] * 8, "driver_error": "", "cuda_home": "/nas/cuda/cuda-11.8", "toolkit": [11, 8],
            "toolkit_error": "", "torch": "2.1.2", "torch_cuda": "11.8", "cuda_available": True, "device_count": 8,
            "nccl": "2.18.1"}
    return {**base, **overrides}


def test_a_matching_node_has_no_problem_and_a_cpu_job_is_not_judged():
    assert gpu_check.gpu_problems(facts(), 8) == []
    assert gpu_check.gpu_problems(facts(torch_cuda="", cuda_available=False, drivers=[]), 0) == []


def test_a_cpu_build_of_torch_is_named():
    (problem,) = gpu_check.gpu_problems(facts(torch_cuda="", cuda_available=False, device_count=0), 8)
    assert "torch 2.1.2 is a CPU build (torch.version.cuda is None)" in problem


@pytest.mark.parametrize("seen, asked, failing", [(4, 8, True), (7, 8, True), (8, 8, False), (8, 4, False)])
def test_torch_must_see_every_gpu_asked_for(seen, asked, failing):
    problems = gpu_check.gpu_problems(facts(device_count=seen), asked)
    assert bool(problems) == failing
    if failing:
        assert problems[0].startswith(f"torch sees {seen} GPUs, the job asked for {asked} per node (--gres=gpu:{asked}")


def test_cuda_unavailable_is_told_apart_from_a_cpu_build():
    (problem,) = gpu_check.gpu_problems(facts(cuda_available=False, device_count=0), 8)
    assert "cannot use CUDA here (torch.cuda.is_available() is False)" in problem


@pytest.mark.parametrize("torch_cuda, toolkit, failing", [
    ("12.1", [11, 8], True), ("11.8", [12, 1], True), ("11.7", [11, 8], False), ("12.4", [12, 1], False)])
def test_torch_and_the_toolkit_must_share_the_cuda_major(torch_cuda, toolkit, failing):
    problems = gpu_check.gpu_problems(facts(torch_cuda=torch_cuda, toolkit=toolkit, drivers=["560.28.03"]), 8)
    assert bool(problems) == failing, problems
    if failing:
        assert f"torch was built for CUDA {torch_cuda}" in problems[0]
        assert f"is CUDA {toolkit[0]}.{toolkit[1]}: the majors must match" in problems[0]


@pytest.mark.parametrize("toolkit, driver, failing", [
    # NVIDIA's CUDA Toolkit release notes, "CUDA Toolkit and Corresponding Driver Versions" (Linux, GA).
    ([11, 8], "520.61.05", False), ([11, 8], "520.61.04", True), ([11, 8], "515.105.01", True),
    ([12, 0], "525.60.13", False), ([12, 0], "525.60.12", True), ([12, 1], "530.30.02", False),
    ([12, 1], "525.147.05", True), ([11, 8], "1000.1", False)])
def test_the_driver_must_be_as_new_as_the_toolkit_needs(toolkit, driver, failing):
    torch_cuda = f"{toolkit[0]}.{toolkit[1]}"
    problems = gpu_check.gpu_problems(facts(toolkit=toolkit, torch_cuda=torch_cuda, drivers=[driver] * 8), 8)
    assert bool(problems) == failing, problems
    if failing:
        minimum = gpu_check.DRIVER_MINIMUM[tuple(toolkit)]
        assert problems == [f"driver {driver} is older than CUDA {torch_cuda} needs (>= {minimum} on Linux, "
                            "NVIDIA's CUDA Toolkit release notes): update the driver or use an older toolkit"]


def test_the_oldest_driver_of_the_node_is_judged_as_numbers_not_text():
    # '99.1' sorts after '520.61.05' as text, before it as a version.
    (problem,) = gpu_check.gpu_problems(facts(drivers=["535.104.05", "99.1"]), 8)
    assert problem.startswith("driver 99.1 is older than CUDA 11.8 needs")


def test_no_driver_and_an_unreadable_toolkit_are_named():
    problems = gpu_check.gpu_problems(facts(drivers=[], driver_error="nvidia-smi: not found", toolkit=None,
                                            toolkit_error="/nas/cuda/cuda-11.8/version.json: missing"), 8)
    assert problems == ["no NVIDIA driver answers (nvidia-smi: not found)",
                        "the toolkit's version is unknown (/nas/cuda/cuda-11.8/version.json: missing)"]


def test_the_toolkit_version_comes_from_version_json(tmp_path):
    # Laid out as the CUDA runfile writes it (and tests/standins/cuda_11.8.0_520.61.05_linux.run).
    (tmp_path / "version.json").write_text(json.dumps({"cuda": {"name": "CUDA SDK", "version": "11.8.20220929"}}))
    assert gpu_check.toolkit_version(str(tmp_path)) == ((11, 8), "")
    (tmp_path / "version.json").write_text("{}")
    version, error = gpu_check.toolkit_version(str(tmp_path))
    assert version is None and "version.json" in error


@pytest.fixture
def standin_gpus(tmp_path, monkeypatch):
    """The stand-in nvidia-smi on PATH, reading a marker of 3 fake devices (its MARKER pointed here)."""
    (tmp_path / "dev").mkdir()
    for index in range(3):
        (tmp_path / "dev" / f"nvidia{index}").touch()
    marker = tmp_path / "standin-gpus.json"
    marker.write_text(json.dumps({"devices": str(tmp_path / "dev"), "driver_version": "515.105.01",
                                  "name": "stand-in", "cuda": "11.8", "nccl": "2.18.1"}))
    (tmp_path / "bin").mkdir()
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.write_text(STANDIN_SMI.read_text().replace('MARKER = "/etc/local-cluster/standin-gpus.json"',
                                                   f'MARKER = "{marker}"'))
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    return tmp_path


def test_the_driver_comes_from_nvidia_smi_one_line_per_gpu(standin_gpus):
    assert gpu_check.driver_versions() == (["515.105.01"] * 3, "")
    header = subprocess.run(["nvidia-smi", "--query-gpu=index,driver_version", "--format=csv"],
                            capture_output=True, text=True, check=True).stdout
    assert header.splitlines() == ["index, driver_version", "0, 515.105.01", "1, 515.105.01", "2, 515.105.01"]


def test_without_nvidia_smi_the_driver_is_missing(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    drivers, error = gpu_check.driver_versions()
    assert drivers == [] and "nvidia-smi" in error


def test_the_program_exits_1_naming_each_failed_rule(standin_gpus):
    # The driver (515) is too old for CUDA 11.8, and this venv's torch is a CPU build.
    pytest.importorskip("torch")
    cuda = standin_gpus / "cuda"
    cuda.mkdir()
    (cuda / "version.json").write_text(json.dumps({"cuda": {"name": "CUDA SDK", "version": "11.8.0"}}))
    proc = subprocess.run([sys.executable, str(PROGRAM), "--gpus-per-node=2", f"--cuda-home={cuda}"],
                          capture_output=True, text=True, env={**os.environ, "SLURMD_NODENAME": "node110"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.startswith("gpu-check node110: FAILED: driver 515.105.01, 3 GPUs (nvidia-smi)")
    torch_cuda = __import__("torch").version.cuda
    if torch_cuda is None:
        assert "gpu-check node110: torch" in proc.stderr and "is a CPU build" in proc.stderr
    assert "gpu-check node110: driver 515.105.01 is older than CUDA 11.8 needs (>= 520.61.05" in proc.stderr
