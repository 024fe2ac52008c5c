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


@pytest.mark.parametrize("seen, asked, failing", [(4, 8, "a GPU is missing"), (7, 8, "a GPU is missing"),
                                                  (8, 8, ""), (8, 4, "Slurm did not bind the job to its GPUs")])
def test_torch_must_see_exactly_the_gpus_asked_for(seen, asked, failing):
    problems = gpu_check.gpu_problems(facts(device_count=seen), asked)
    assert bool(problems) == bool(failing)
    if failing:
        assert problems[0].startswith(f"torch sees {seen} GPUs, the job asked for {asked} per node")
        assert failing in problems[0]


def test_mig_is_named_as_mig_not_as_cuda_visible_devices():
    (problem,) = gpu_check.gpu_problems(facts(device_count=1, mig=["Enabled"] * 8), 8)
    assert problem.startswith("MIG is enabled on this node's GPUs (nvidia-smi mig.mode.current: Enabled")
    assert "nvidia-smi -mig 0" in problem and "CUDA_VISIBLE_DEVICES" not in problem
    assert gpu_check.gpu_problems(facts(mig=["Disabled"] * 8), 8) == []


def test_cuda_unavailable_is_told_apart_from_a_cpu_build():
    (problem,) = gpu_check.gpu_problems(facts(cuda_available=False, device_count=0), 8)
    assert "cannot use CUDA here (torch.cuda.is_available() is False)" in problem


def test_an_nvswitch_node_without_fabric_manager_is_named_as_such():
    # torch's warning when cuInit returns CUDA_ERROR_SYSTEM_NOT_READY (802).
    warning = ("CUDA initialization: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions "
               "before calling NumCudaDevices() that might have already set an error? Error 802: system not yet "
               "initialized (Triggered internally at ../c10/cuda/CUDAFunctions.cpp:108.)")
    (problem,) = gpu_check.gpu_problems(facts(cuda_available=False, device_count=0, cuda_init_error=warning), 8)
    assert problem.startswith("CUDA is not ready on this node (CUDA error 802")
    assert "fabric manager is not running" in problem and "nvidia-fabricmanager" in problem


@pytest.mark.parametrize("torch_cuda, toolkit, failing", [
    ("12.1", [11, 8], True), ("11.8", [12, 1], True), ("11.7", [11, 8], False), ("12.4", [12, 1], False)])
def test_torch_and_the_toolkit_must_share_the_cuda_major(torch_cuda, toolkit, failing):
    problems = gpu_check.gpu_problems(facts(torch_cuda=torch_cuda, toolkit=toolkit, drivers=["560.28.03"]), 8)
    assert bool(problems) == failing, problems
    if failing:
        assert f"torch was built for CUDA {torch_cuda}" in problems[0]
        assert f"is CUDA {toolkit[0]}.{toolkit[1]}: the majors must match" in problems[0]


# NVIDIA's CUDA Toolkit Release Notes (13.0), Table 3 "CUDA Toolkit and Corresponding Driver
# Versions", Linux x86_64, each toolkit's GA row, copied here by hand from the notes.
RELEASE_NOTES_TABLE_3 = [
    ("CUDA 13.0 GA", "580.65.06"), ("CUDA 12.9 GA", "575.51.03"), ("CUDA 12.8 GA", "570.26"),
    ("CUDA 12.6 GA", "560.28.03"), ("CUDA 12.5 GA", "555.42.02"), ("CUDA 12.4 GA", "550.54.14"),
    ("CUDA 12.3 GA", "545.23.06"), ("CUDA 12.2 GA", "535.54.03"), ("CUDA 12.1 GA", "530.30.02"),
    ("CUDA 12.0 GA", "525.60.13"), ("CUDA 11.8 GA", "520.61.05"), ("CUDA 11.7 GA", "515.43.04"),
    ("CUDA 11.6 GA", "510.39.01"), ("CUDA 11.5 GA", "495.29.05"), ("CUDA 11.4.0 GA", "470.42.01"),
    ("CUDA 11.3.0 GA", "465.19.01"), ("CUDA 11.2.0 GA", "460.27.03"), ("CUDA 11.1 GA", "455.23"),
    ("CUDA 11.0.2 GA", "450.51.05")]
# Table 2, minimum driver for minor version compatibility, per major (CUDA 11.0: 450.36.06).
RELEASE_NOTES_TABLE_2 = {11: "450.80.02", 12: "525.60.13", 13: "580"}


def _below(version):
    parts = [int(p) for p in version.split(".")]
    if len(parts) == 1 or parts[-1] == 0:
        return f"{parts[0] - 1}.999"
    return ".".join(map(str, parts[:-1] + [parts[-1] - 1]))


def _toolkit(row):
    major, minor = row.split()[1].split(".")[:2]
    return int(major), int(minor)


def test_the_table_has_exactly_the_release_notes_rows():
    assert gpu_check.TOOLKIT_DRIVER == {_toolkit(row): driver for row, driver in RELEASE_NOTES_TABLE_3}
    assert gpu_check.MAJOR_FLOOR == RELEASE_NOTES_TABLE_2


@pytest.mark.parametrize("row, driver", RELEASE_NOTES_TABLE_3, ids=[row for row, _ in RELEASE_NOTES_TABLE_3])
def test_each_row_its_own_driver_passes_and_one_below_warns_above_the_floor(row, driver):
    major, minor = _toolkit(row)
    torch_cuda = f"{major}.{minor}"
    at = facts(toolkit=[major, minor], torch_cuda=torch_cuda, drivers=[driver] * 8)
    assert gpu_check.gpu_problems(at, 8) == [] and gpu_check.gpu_warnings(at, 8) == []
    below = facts(toolkit=[major, minor], torch_cuda=torch_cuda, drivers=[_below(driver)] * 8)
    floor = "450.36.06" if (major, minor) == (11, 0) else RELEASE_NOTES_TABLE_2[major]
    if gpu_check.version_tuple(_below(driver)) >= gpu_check.version_tuple(floor):
        assert gpu_check.gpu_problems(below, 8) == []
        (warning,) = gpu_check.gpu_warnings(below, 8)
        assert warning.startswith(f"driver {_below(driver)} is older than CUDA {torch_cuda}'s own ({driver}")
        assert "minor version compatibility" in warning
    else:
        (problem,) = gpu_check.gpu_problems(below, 8)
        assert problem.startswith(f"driver {_below(driver)} is below CUDA {major}.x's floor (>= {floor}")


@pytest.mark.parametrize("major, floor", sorted(RELEASE_NOTES_TABLE_2.items()))
def test_each_major_fails_just_below_its_floor(major, floor):
    torch_cuda = f"{major}.1"  # 11.0 has a floor of its own
    assert gpu_check.gpu_problems(facts(toolkit=None, cuda_home="", torch_cuda=torch_cuda, drivers=[floor]), 8) == []
    (problem,) = gpu_check.gpu_problems(facts(toolkit=None, cuda_home="", torch_cuda=torch_cuda,
                                              drivers=[_below(floor)]), 8)
    assert problem.startswith(f"driver {_below(floor)} is below CUDA {major}.x's floor (>= {floor} on Linux")


def test_an_r535_node_runs_a_12_4_toolkit_and_cu124_torch_with_a_warning():
    node = facts(toolkit=[12, 4], torch_cuda="12.4", drivers=["535.104.05"] * 8, driver_cuda="12.2")
    assert gpu_check.gpu_problems(node, 8) == []
    assert gpu_check.gpu_warnings(node, 8) == [
        "driver 535.104.05 is older than CUDA 12.4's own (550.54.14, NVIDIA's CUDA Toolkit Release Notes, Tables 2 "
        "and 3): it runs by minor version compatibility, but code that JIT-compiles the toolkit's PTX (extensions "
        "built with its nvcc) may fail"]


def test_a_450_node_cannot_run_cuda_12():
    (problem,) = gpu_check.gpu_problems(facts(toolkit=[12, 1], torch_cuda="12.1", drivers=["450.248.02"] * 8), 8)
    assert problem.startswith("driver 450.248.02 is below CUDA 12.x's floor (>= 525.60.13 on Linux")


def test_cuda_compat_lifts_the_floor_to_its_own_version():
    # The cuda-compat package of CUDA 12.4 over an R470 kernel driver (NVIDIA's CUDA Compatibility
    # guide, "Forward Compatibility"): libcuda.so.550.54.15 from /usr/local/cuda-12.4/compat.
    node = facts(toolkit=[12, 4], torch_cuda="12.4", drivers=["470.256.02"] * 8, driver_cuda="12.4",
                 libcuda="/usr/local/cuda-12.4/compat/libcuda.so.550.54.15")
    assert gpu_check.gpu_problems(node, 8) == []
    (warning,) = gpu_check.gpu_warnings(node, 8)
    assert warning.startswith("libcuda is the cuda-compat package 550.54.15 over driver 470.256.02")
    without = {**node, "libcuda": "/usr/lib/x86_64-linux-gnu/libcuda.so.470.256.02"}
    assert gpu_check.gpu_problems(without, 8)[0].startswith("driver 470.256.02 is below CUDA 12.x's floor")


def test_a_driver_whose_cuda_is_of_an_older_major_fails():
    (problem,) = gpu_check.gpu_problems(facts(toolkit=[13, 0], torch_cuda="13.0", drivers=["580.65.06"],
                                              driver_cuda="12.9"), 8)
    assert problem.startswith("the driver's libcuda supports CUDA 12.9, torch needs CUDA 13.x")


def test_a_toolkit_without_a_row_is_checked_against_its_floor_and_said_so():
    assert gpu_check.gpu_problems(facts(toolkit=[12, 7], torch_cuda="12.6", drivers=["560.28.03"]), 8) == []
    (note,) = gpu_check.gpu_warnings(facts(toolkit=[12, 7], torch_cuda="12.6", drivers=["560.28.03"]), 8)
    assert note.startswith("CUDA 12.7 has no row in this check's table")


def test_the_oldest_driver_of_the_node_is_judged_as_numbers_not_text():
    # '99.1' sorts after '520.61.05' as text, before it as a version.
    (problem,) = gpu_check.gpu_problems(facts(drivers=["535.104.05", "99.1"]), 8)
    assert problem.startswith("driver 99.1 is below CUDA 11.x's floor")


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


def test_a_toolkit_of_major_minor_only_is_read_and_a_major_alone_is_not(tmp_path):
    (tmp_path / "version.json").write_text(json.dumps({"cuda": {"version": "12.4"}}))
    assert gpu_check.toolkit_version(str(tmp_path)) == ((12, 4), "")
    (tmp_path / "version.json").write_text(json.dumps({"cuda": {"version": "12"}}))
    assert gpu_check.toolkit_version(str(tmp_path)) == (None, f"{tmp_path / 'version.json'}: no major.minor CUDA "
                                                              "version in it")


def test_too_many_gpus_seen_names_the_gpus_every_job_would_share():
    (problem,) = gpu_check.gpu_problems(facts(device_count=8), 4)
    assert "so every job here would use GPUs 0-3: give gres.conf File= lines" in problem


def test_torch_built_for_cuda_11_0_has_11_0s_own_floor():
    node = facts(toolkit=None, cuda_home="", torch_cuda="11.0", drivers=["450.51.05"])
    assert gpu_check.gpu_problems(node, 8) == []
    (problem,) = gpu_check.gpu_problems({**node, "drivers": ["450.36.05"]}, 8)
    assert problem.startswith("driver 450.36.05 is below CUDA 11.x's floor (>= 450.36.06")


def test_a_failing_nvidia_smi_is_named_with_the_end_of_what_it_said(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\necho '{'x' * 300}driver gone' >&2\nexit 9\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    drivers, error = gpu_check.driver_versions()
    assert drivers == [] and error == ("nvidia-smi --query-gpu=driver_version --format=csv,noheader: exit 9: "
                                       + "x" * 189 + "driver gone")
    assert gpu_check.mig_modes() == []


class FakeLibcuda:
    def __init__(self, version, rc=0):
        self.version, self.rc = version, rc

    def cuDriverGetVersion(self, pointer):  # noqa: N802  (CUDA's name)
        pointer._obj.value = self.version
        return self.rc


@pytest.mark.parametrize("version, driver_cuda", [(12040, "12.4"), (11080, "11.8"), (12090, "12.9"), (13000, "13.0")])
def test_libcudas_cuda_version_and_file_are_read(monkeypatch, version, driver_cuda):
    import io

    monkeypatch.setattr(gpu_check.ctypes, "CDLL", lambda name: FakeLibcuda(version))
    maps = ("7f0000000000-7f0000100000 r-xp 00000000 08:01 1234 /usr/lib/x86_64-linux-gnu/libc.so.6\n"
            "7f1000000000-7f1000200000 r-xp 00000000 08:01 5678 /usr/local/cuda-12.4/compat/libcuda.so.550.54.15\n")
    monkeypatch.setattr(gpu_check, "open", lambda path: io.StringIO(maps), raising=False)
    assert gpu_check.libcuda_facts() == {"driver_cuda": driver_cuda,
                                         "libcuda": "/usr/local/cuda-12.4/compat/libcuda.so.550.54.15"}


def test_without_libcuda_or_its_answer_the_error_or_nothing_is_said(monkeypatch):
    def missing(name):
        raise OSError(f"{name}: cannot open shared object file: No such file or directory")

    monkeypatch.setattr(gpu_check.ctypes, "CDLL", missing)
    assert gpu_check.libcuda_facts() == {
        "libcuda_error": "libcuda.so.1: cannot open shared object file: No such file or directory"}
    monkeypatch.setattr(gpu_check.ctypes, "CDLL", lambda name: FakeLibcuda(12040, rc=3))

    def unreadable(path):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(gpu_check, "open", unreadable, raising=False)
    assert gpu_check.libcuda_facts() == {}


def fake_torch(monkeypatch, cuda="12.4", available=True, count=8, nccl=(2, 21, 5), warning=""):
    """A torch as the training env's would answer (sys.modules, where `import torch` finds it)."""
    import types
    import warnings as warnings_module

    torch = types.ModuleType("torch")
    torch.__version__ = "2.3.0"
    torch.version = types.SimpleNamespace(cuda=cuda)
    torch_cuda = types.ModuleType("torch.cuda")

    def is_available():
        if warning:
            warnings_module.warn(warning)
        return available

    torch_cuda.is_available = is_available
    torch_cuda.device_count = lambda: count
    torch_nccl = types.ModuleType("torch.cuda.nccl")
    if nccl is None:
        def version():
            raise RuntimeError("NCCL Error 1: unhandled cuda error")
    else:
        def version():
            return nccl
    torch_nccl.version = version
    torch_cuda.nccl = torch_nccl
    torch.cuda = torch_cuda
    for name, module in (("torch", torch), ("torch.cuda", torch_cuda), ("torch.cuda.nccl", torch_nccl)):
        monkeypatch.setitem(sys.modules, name, module)


def test_torch_is_asked_as_the_training_will_ask_it(monkeypatch):
    fake_torch(monkeypatch)
    assert gpu_check.torch_facts() == {"torch": "2.3.0", "torch_cuda": "12.4", "cuda_available": True,
                                       "device_count": 8, "nccl": "2.21.5", "cuda_init_error": ""}
    fake_torch(monkeypatch, available=False, warning="CUDA initialization: " + "w" * 400)
    unavailable = gpu_check.torch_facts()
    assert (unavailable["cuda_available"], unavailable["device_count"]) == (False, 0)
    assert unavailable["cuda_init_error"] == "w" * 300
    fake_torch(monkeypatch, nccl=None)
    assert gpu_check.torch_facts()["nccl"] == ""
    fake_torch(monkeypatch, cuda=None)
    assert gpu_check.torch_facts() == {"torch": "2.3.0", "torch_cuda": "", "cuda_available": False,
                                       "device_count": 0, "nccl": "", "cuda_init_error": ""}


def test_torch_without_nccl_has_none(monkeypatch):
    fake_torch(monkeypatch)
    del sys.modules["torch.cuda"].nccl.version
    assert gpu_check.torch_facts()["nccl"] == ""


def node_facts(monkeypatch, drivers=("535.104.05",) * 2, torch=None):
    monkeypatch.setattr(gpu_check, "driver_versions", lambda: (list(drivers), "" if drivers else "nvidia-smi: none"))
    monkeypatch.setattr(gpu_check, "mig_modes", lambda: ["Disabled"] * len(drivers))
    monkeypatch.setattr(gpu_check, "libcuda_facts", lambda: {"driver_cuda": "12.2"})
    monkeypatch.setattr(gpu_check, "torch_facts", torch or (lambda: {
        "torch": "2.3.0", "torch_cuda": "12.1", "cuda_available": True, "device_count": len(drivers), "nccl": "2.18.1",
        "cuda_init_error": ""}))


def test_the_facts_are_each_probes_and_a_broken_torch_is_one_of_them(monkeypatch, tmp_path):
    (tmp_path / "version.json").write_text(json.dumps({"cuda": {"version": "12.1.1"}}))
    node_facts(monkeypatch)
    found = gpu_check.gpu_facts(str(tmp_path))
    assert (found["drivers"], found["mig"], found["toolkit"], found["driver_cuda"], found["nccl"]) == (
        ["535.104.05"] * 2, ["Disabled"] * 2, [12, 1], "12.2", "2.18.1")
    node_facts(monkeypatch, drivers=())
    assert gpu_check.gpu_facts("")["mig"] == [] and gpu_check.gpu_facts("")["toolkit"] is None

    def broken():
        raise ImportError("libcudnn.so.8: cannot open shared object file " + "y" * 300)

    node_facts(monkeypatch, torch=broken)
    found = gpu_check.gpu_facts("")
    assert found["torch_error"] == ("ImportError: libcudnn.so.8: cannot open shared object file " + "y" * 300)[-200:]
    assert (found["torch"], found["cuda_available"], found["device_count"]) == ("", False, 0)


def test_the_program_prints_one_line_its_problems_and_warnings_and_exits_by_them(monkeypatch, capsys, tmp_path):
    (tmp_path / "version.json").write_text(json.dumps({"cuda": {"version": "12.4.0"}}))
    node_facts(monkeypatch)
    monkeypatch.delenv("SLURMD_NODENAME", raising=False)
    monkeypatch.setattr(gpu_check.socket, "gethostname", lambda: "gpu07.cluster.example")
    assert gpu_check.main(["--gpus-per-node", "2", "--cuda-home", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert out == ("gpu-check gpu07: ok: driver 535.104.05, 2 GPUs (nvidia-smi), torch 2.3.0 CUDA 12.1 sees 2, "
                   "NCCL 2.18.1, toolkit 12.4\n")
    assert err.startswith("gpu-check gpu07: warning: driver 535.104.05 is older than CUDA 12.4's own")
    monkeypatch.setenv("SLURMD_NODENAME", "node110")
    assert gpu_check.main(["--gpus-per-node", "4", "--cuda-home", str(tmp_path)]) == gpu_check.FAILED_EXIT == 1
    out, err = capsys.readouterr()
    assert out.startswith("gpu-check node110: FAILED: driver 535.104.05, 2 GPUs")
    assert err.splitlines()[0].startswith("gpu-check node110: torch sees 2 GPUs, the job asked for 4 per node")


def test_a_cpu_job_is_not_judged_and_facts_are_json(monkeypatch, capsys):
    node_facts(monkeypatch, drivers=())
    monkeypatch.setenv("SLURMD_NODENAME", "node111")
    assert gpu_check.main([]) == 0
    out, err = capsys.readouterr()
    assert out == ("gpu-check node111: ok: driver none, 0 GPUs (nvidia-smi), torch 2.3.0 CUDA 12.1 sees 0, "
                   "NCCL 2.18.1, toolkit none\n") and err == ""
    assert gpu_check.main(["--facts"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert (found["drivers"], found["driver_error"], found["torch_cuda"]) == ([], "nvidia-smi: none", "12.1")


def test_long_reasons_are_cut_to_their_ends():
    reason = "r" * 200 + "the end of CUDA's own reason"
    (problem,) = gpu_check.gpu_problems(facts(cuda_available=False, device_count=0, cuda_init_error=reason), 8)
    assert f"(torch.cuda.is_available() is False: {reason[-160:]}): " in problem
    assert ("r" * 133 + "the end") not in problem


def test_a_toolkit_without_a_row_names_its_major_in_the_note():
    (note,) = gpu_check.gpu_warnings(facts(toolkit=[12, 7], torch_cuda="12.6", drivers=["560.28.03"]), 8)
    assert note.endswith("through 13.0): only CUDA 12.x's floor was checked")


def test_libcudas_error_is_kept_to_its_last_200_characters(monkeypatch):
    def missing(name):
        raise OSError("p" * 300 + "libcuda.so.1: cannot open shared object file")

    monkeypatch.setattr(gpu_check.ctypes, "CDLL", missing)
    assert gpu_check.libcuda_facts() == {"libcuda_error": ("p" * 300 + "libcuda.so.1: cannot open shared object file")[-200:]}


class Stream:
    """A stream as a pipe to the job's log is: what was written, and what of it was flushed."""

    def __init__(self, log):
        self.log, self.pending = log, ""

    def write(self, text):
        self.pending += text

    def flush(self):
        self.log.append(self.pending)
        self.pending = ""


def test_the_summary_line_reaches_the_log_before_the_problems(monkeypatch):
    node_facts(monkeypatch)
    monkeypatch.setenv("SLURMD_NODENAME", "node110")
    log = []
    monkeypatch.setattr(sys, "stdout", Stream(log))
    monkeypatch.setattr(sys, "stderr", Stream(log))
    assert gpu_check.main(["--gpus-per-node", "4"]) == 1
    assert log[0].startswith("gpu-check node110: FAILED: ") and log[1].startswith("gpu-check node110: torch sees 2")


def test_a_long_802_reason_is_cut_to_its_end():
    reason = "w" * 200 + "Error 802: system not yet initialized"
    (problem,) = gpu_check.gpu_problems(facts(cuda_available=False, device_count=0, cuda_init_error=reason), 8)
    assert f"system not yet initialized: {reason[-160:]}): " in problem


def test_a_missing_gpu_says_how_many_nvidia_smi_lists():
    (problem,) = gpu_check.gpu_problems(facts(device_count=7), 8)
    assert problem.endswith("a GPU is missing or failed (nvidia-smi lists 8)")


def test_the_summary_names_the_first_gpus_driver(monkeypatch, capsys):
    node_facts(monkeypatch, drivers=("535.104.05", "550.54.14"))
    monkeypatch.setenv("SLURMD_NODENAME", "node110")
    gpu_check.main([])
    assert capsys.readouterr().out.startswith("gpu-check node110: ok: driver 535.104.05, 2 GPUs (nvidia-smi)")


def test_help_opens_with_what_the_check_does(capsys):
    with pytest.raises(SystemExit):
        gpu_check.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "A GPU job's check of its node before it trains: torch sees exactly the GPUs the job asked for" in out


def test_without_torchs_cuda_the_toolkits_major_sets_the_floor():
    broken = dict(torch_error="ImportError: libcudnn.so.8", torch_cuda="", torch="")
    (_, problem) = gpu_check.gpu_problems(facts(toolkit=[12, 4], drivers=["450.248.02"], **broken), 8)
    assert problem.startswith("driver 450.248.02 is below CUDA 12.x's floor (>= 525.60.13")
    assert gpu_check.gpu_problems(facts(toolkit=[11, 0], drivers=["450.51.05"], **broken), 8) == [
        "torch does not import (ImportError: libcudnn.so.8)"], "CUDA 11.0's own floor, 450.36.06"


def test_a_driver_of_an_older_cuda_names_the_libcuda_it_loaded():
    node = facts(toolkit=[13, 0], torch_cuda="13.0", drivers=["580.65.06"], driver_cuda="12.9")
    assert gpu_check.gpu_problems(node, 8)[0].endswith("(libcuda.so.1): update the driver or the cuda-compat package")
    compat = {**node, "libcuda": "/usr/local/cuda-13.0/compat/libcuda.so.580.65.06"}
    assert "(/usr/local/cuda-13.0/compat/libcuda.so.580.65.06): " in gpu_check.gpu_problems(compat, 8)[0]


def test_a_warning_reaches_the_log_after_the_summary(monkeypatch, tmp_path):
    (tmp_path / "version.json").write_text(json.dumps({"cuda": {"version": "12.4.0"}}))
    node_facts(monkeypatch)
    monkeypatch.setenv("SLURMD_NODENAME", "node110")
    log = []
    monkeypatch.setattr(sys, "stdout", Stream(log))
    monkeypatch.setattr(sys, "stderr", Stream(log))
    assert gpu_check.main(["--gpus-per-node", "2", "--cuda-home", str(tmp_path)]) == 0
    assert log[0].startswith("gpu-check node110: ok: ")
    assert log[1].startswith("gpu-check node110: warning: driver 535.104.05 is older than CUDA 12.4's own")


# The program run as the job runs it, with this venv's torch (a second or two each): last, as the
# slowest.
STANDIN_TORCH = REPO / "tests" / "standins" / "gpu" / "python" / "sitecustomize.py"


@pytest.fixture
def standin_gpus(tmp_path, monkeypatch):
    """The stand-in nvidia-smi on PATH and the stand-in CUDA torch (sitecustomize) on PYTHONPATH,
    reading a marker of 3 fake devices (their MARKER pointed here); the test sets the marker."""
    (tmp_path / "dev").mkdir()
    for index in range(3):
        (tmp_path / "dev" / f"nvidia{index}").touch()
    marker = tmp_path / "standin-gpus.json"
    marker.write_text(json.dumps({"devices": str(tmp_path / "dev"), "driver_version": "515.105.01",
                                  "name": "stand-in", "cuda": "11.8", "nccl": "2.18.1"}))
    (tmp_path / "bin").mkdir()
    (tmp_path / "python").mkdir()
    for standin, target in ((STANDIN_SMI, tmp_path / "bin" / "nvidia-smi"),
                            (STANDIN_TORCH, tmp_path / "python" / "sitecustomize.py")):
        target.write_text(standin.read_text().replace('MARKER = "/etc/local-cluster/standin-gpus.json"',
                                                      f'MARKER = "{marker}"'))
        target.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    return tmp_path


def _node(standin_gpus, driver, cuda):
    """The stand-in node with this driver, torch built for CUDA `cuda`, the toolkit of that version."""
    marker = standin_gpus / "standin-gpus.json"
    marker.write_text(json.dumps({**json.loads(marker.read_text()), "driver_version": driver, "cuda": cuda}))
    toolkit = standin_gpus / f"cuda-{cuda}"
    toolkit.mkdir()
    (toolkit / "version.json").write_text(json.dumps({"cuda": {"name": "CUDA SDK", "version": f"{cuda}.0"}}))
    return toolkit


def _check(standin_gpus, toolkit, gpus=3, torch=True):
    pytest.importorskip("torch")
    env = {**os.environ, "SLURMD_NODENAME": "node110", "CUDA_VISIBLE_DEVICES": "0,1,2"}
    if torch:
        env["PYTHONPATH"] = str(standin_gpus / "python")
    return subprocess.run([sys.executable, str(PROGRAM), f"--gpus-per-node={gpus}", f"--cuda-home={toolkit}"],
                          capture_output=True, text=True, env=env)


def test_the_driver_comes_from_nvidia_smi_one_line_per_gpu(standin_gpus):
    assert gpu_check.driver_versions() == (["515.105.01"] * 3, "")
    assert gpu_check.mig_modes() == ["[N/A]"] * 3
    header = subprocess.run(["nvidia-smi", "--query-gpu=index,driver_version", "--format=csv"],
                            capture_output=True, text=True, check=True).stdout
    assert header.splitlines() == ["index, driver_version", "0, 515.105.01", "1, 515.105.01", "2, 515.105.01"]


def test_without_nvidia_smi_the_driver_is_missing(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    drivers, error = gpu_check.driver_versions()
    assert drivers == [] and "nvidia-smi" in error


def test_an_r535_node_with_a_12_4_toolkit_and_cu124_torch_trains(standin_gpus):
    proc = _check(standin_gpus, _node(standin_gpus, "535.104.05", "12.4"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("gpu-check node110: ok: driver 535.104.05, 3 GPUs (nvidia-smi), torch ")
    assert "CUDA 12.4 sees 3" in proc.stdout
    assert proc.stderr.splitlines() == [
        "gpu-check node110: warning: driver 535.104.05 is older than CUDA 12.4's own (550.54.14, NVIDIA's CUDA "
        "Toolkit Release Notes, Tables 2 and 3): it runs by minor version compatibility, but code that "
        "JIT-compiles the toolkit's PTX (extensions built with its nvcc) may fail"]


def test_a_450_node_with_cuda_12_exits_1(standin_gpus):
    proc = _check(standin_gpus, _node(standin_gpus, "450.248.02", "12.1"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.startswith("gpu-check node110: FAILED: driver 450.248.02, 3 GPUs (nvidia-smi)")
    assert proc.stderr.startswith("gpu-check node110: driver 450.248.02 is below CUDA 12.x's floor (>= 525.60.13")


def test_the_program_exits_1_naming_each_failed_rule(standin_gpus):
    # This venv's torch without the stand-in: a CPU build (where it is one), the 515 driver below 11.8's row.
    proc = _check(standin_gpus, _node(standin_gpus, "515.105.01", "11.8"), gpus=2, torch=False)
    if __import__("torch").version.cuda is not None:
        pytest.skip("this venv's torch is a CUDA build")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.startswith("gpu-check node110: FAILED: driver 515.105.01, 3 GPUs (nvidia-smi)")
    assert "gpu-check node110: torch" in proc.stderr and "is a CPU build" in proc.stderr
    assert "gpu-check node110: warning: driver 515.105.01 is older than CUDA 11.8's own (520.61.05" in proc.stderr

