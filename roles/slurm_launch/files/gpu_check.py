#!/usr/bin/env python3
"""A GPU job's check of its node before it trains: torch sees exactly the GPUs the job asked for,
was built for the CUDA major of the toolkit the job puts on PATH, and the driver can run that major.

Run by the job script once per node (``srun --ntasks-per-node=1``) in the training env, before the
training's srun, and by the preflight's node check (which imports the probes and rules):

    python gpu_check.py --gpus-per-node 8 --cuda-home /nas/cuda/cuda-11.8
    python gpu_check.py --facts --cuda-home /nas/cuda/cuda-11.8   # what it found, JSON

Prints one ``gpu-check <node>: ...`` line; exits 1, each failed rule on a line of its own, when
the job would train without its GPUs; a warning (``gpu-check <node>: warning: ...``) does not fail.
Standard library at import time (torch is imported only to ask it), so the preflight's node check
can import it with the node's own python3.
"""

import argparse
import ctypes
import json
import os
import re
import socket
import subprocess
import sys
import warnings

# NVIDIA's CUDA Toolkit Release Notes (13.0), section "CUDA Driver": Table 3, "CUDA Toolkit and
# Corresponding Driver Versions", the Linux x86_64 driver of each toolkit's GA release (11.0: the
# 11.0.2 GA, not the 11.0.1 RC). A driver below its toolkit's row still runs that toolkit's
# programs by minor version compatibility, but cannot JIT the toolkit's newer PTX: a warning.
TOOLKIT_DRIVER = {
    (11, 0): "450.51.05", (11, 1): "455.23", (11, 2): "460.27.03", (11, 3): "465.19.01",
    (11, 4): "470.42.01", (11, 5): "495.29.05", (11, 6): "510.39.01", (11, 7): "515.43.04",
    (11, 8): "520.61.05", (12, 0): "525.60.13", (12, 1): "530.30.02", (12, 2): "535.54.03",
    (12, 3): "545.23.06", (12, 4): "550.54.14", (12, 5): "555.42.02", (12, 6): "560.28.03",
    (12, 8): "570.26", (12, 9): "575.51.03", (13, 0): "580.65.06",
}
# The same notes, Table 2, "CUDA Toolkit and Minimum Required Driver Version for CUDA Minor Version
# Compatibility" (and NVIDIA's CUDA Compatibility guide): every toolkit of a major runs on these.
# Below it a job of that CUDA major cannot start, unless libcuda is the cuda-compat package
# (forward compatibility, data-center GPUs), whose own version then counts.
MAJOR_FLOOR = {11: "450.80.02", 12: "525.60.13", 13: "580"}
# CUDA 11.0 came before minor version compatibility: its own floor (Table 2's 11.0 row).
CUDA_11_0_FLOOR = "450.36.06"
RELEASE_NOTES = "NVIDIA's CUDA Toolkit Release Notes, Tables 2 and 3"
FAILED_EXIT = 1
# CUDA_ERROR_SYSTEM_NOT_READY: an NVSwitch system whose fabric manager is not running.
NOT_READY_RE = re.compile(r"\b802\b|system not yet initialized", re.IGNORECASE)


def version_tuple(text):
    """'520.61.05' -> (520, 61, 5); None when it is no dotted version."""
    try:
        return tuple(int(part) for part in str(text).strip().split("."))
    except ValueError:
        return None


def toolkit_version(cuda_home):
    """(major, minor) of the toolkit from its version.json ({"cuda": {"version": "11.8.0"}}), or an error."""
    path = os.path.join(cuda_home, "version.json")
    try:
        with open(path) as handle:
            version = version_tuple(json.load(handle)["cuda"]["version"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        return None, f"{path}: {error}"
    if not version or len(version) < 2:
        return None, f"{path}: no major.minor CUDA version in it"
    return version[:2], ""


def _smi(fields):
    argv = ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"]
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                              timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        return [], f"{' '.join(argv)}: {error}"
    if proc.returncode != 0:
        return [], f"{' '.join(argv)}: exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-200:]}"
    return [line.strip() for line in proc.stdout.splitlines() if line.strip()], ""


def driver_versions():
    """The driver version nvidia-smi gives for each GPU of the node ([] and an error when it cannot answer)."""
    return _smi("driver_version")


def mig_modes():
    """nvidia-smi's mig.mode.current per GPU ("Enabled", "Disabled", "[N/A]" where a GPU has no MIG)."""
    modes, _error = _smi("mig.mode.current")
    return modes


def libcuda_facts():
    """The user-space driver the job loads: its CUDA version (cuDriverGetVersion, 12040 -> "12.4")
    and the file it came from (the cuda-compat package lives in .../compat/, libcuda.so.<its version>)."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as error:
        return {"libcuda_error": str(error)[-200:]}
    version = ctypes.c_int(0)
    facts = {}
    if lib.cuDriverGetVersion(ctypes.byref(version)) == 0 and version.value:
        facts["driver_cuda"] = f"{version.value // 1000}.{version.value % 1000 // 10}"
    try:
        with open("/proc/self/maps") as handle:
            paths = {line.split()[-1] for line in handle if "libcuda.so" in line}
    except OSError:
        paths = set()
    if paths:
        facts["libcuda"] = os.path.realpath(sorted(paths)[0])
    return facts


def torch_facts():
    """What torch says of CUDA, as the training will ask it; CUDA's own reason when it cannot use it."""
    import torch  # the training env's: only this probe needs it
    facts = {"torch": torch.__version__, "torch_cuda": torch.version.cuda or "", "cuda_available": False,
             "device_count": 0, "nccl": "", "cuda_init_error": ""}
    if torch.version.cuda:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            facts["cuda_available"] = bool(torch.cuda.is_available())
        facts["cuda_init_error"] = " ".join(str(w.message) for w in caught)[-300:]
        facts["device_count"] = torch.cuda.device_count() if facts["cuda_available"] else 0
        try:
            import torch.cuda.nccl
            facts["nccl"] = ".".join(str(part) for part in torch.cuda.nccl.version())
        except (AttributeError, RuntimeError, ImportError):
            facts["nccl"] = ""
    return facts


def _compat_version(facts, oldest):
    """The cuda-compat package's version when libcuda is that package (its file's version is newer
    than the kernel driver's), else None."""
    match = re.search(r"libcuda\.so\.([0-9.]+)$", facts.get("libcuda") or "")
    version = version_tuple(match.group(1)) if match else None
    if version and oldest and version > oldest:
        return match.group(1)
    return None


def _count_problem(facts, gpus_asked):
    seen = facts.get("device_count", 0)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    if any(mode.strip().lower() == "enabled" for mode in facts.get("mig") or []):
        return (f"MIG is enabled on this node's GPUs (nvidia-smi mig.mode.current: {', '.join(facts['mig'])}): "
                f"torch sees {seen} MIG instances, not {gpus_asked} GPUs, and NCCL runs no collective across MIG "
                "instances: disable MIG (nvidia-smi -mig 0) on the training nodes or ask for a node without it")
    if seen < gpus_asked:
        return (f"torch sees {seen} GPUs, the job asked for {gpus_asked} per node (--gres=gpu:{gpus_asked}; "
                f"CUDA_VISIBLE_DEVICES={visible!r}): a GPU is missing or failed (nvidia-smi lists "
                f"{len(facts.get('drivers') or [])})")
    if seen > gpus_asked:
        return (f"torch sees {seen} GPUs, the job asked for {gpus_asked} per node (CUDA_VISIBLE_DEVICES="
                f"{visible!r}): Slurm did not bind the job to its GPUs (gres.conf without File=, or "
                "ConstrainDevices=no with CUDA_VISIBLE_DEVICES unset), so every job here would use GPUs "
                f"0-{gpus_asked - 1}: give gres.conf File= lines")
    return ""


def gpu_problems(facts, gpus_asked):
    """Why a job that asked for gpus_asked GPUs per node would not train on them, one message a rule.

    facts: drivers (nvidia-smi's per GPU), driver_error, mig (nvidia-smi's mig.mode.current per GPU),
    toolkit ([major, minor] or None), cuda_home, toolkit_error, driver_cuda and libcuda
    (libcuda_facts()), and torch_facts()'s keys (torch_error when torch did not import).
    """
    if not gpus_asked:
        return []
    problems = []
    drivers = facts.get("drivers") or []
    if not drivers:
        problems.append(f"no NVIDIA driver answers ({facts.get('driver_error') or 'nvidia-smi lists no GPU'})")
    if facts.get("torch_error"):
        problems.append(f"torch does not import ({facts['torch_error']})")
    elif not facts.get("torch_cuda"):
        problems.append(f"torch {facts.get('torch')} is a CPU build (torch.version.cuda is None): install a CUDA "
                        "build (conda: pytorch=*=cuda* with cuda-version pinned to the toolkit)")
    elif not facts.get("cuda_available"):
        reason = facts.get("cuda_init_error") or ""
        if NOT_READY_RE.search(reason):
            problems.append(f"CUDA is not ready on this node (CUDA error 802, system not yet initialized: {reason[-160:]}): "
                            "on an NVSwitch system (HGX/DGX) the fabric manager is not running: "
                            "systemctl enable --now nvidia-fabricmanager, its version the driver's")
        elif drivers:
            problems.append(f"torch {facts.get('torch')} (CUDA {facts['torch_cuda']}) cannot use CUDA here "
                            f"(torch.cuda.is_available() is False{': ' + reason[-160:] if reason else ''}): "
                            "the driver, the GPU device files' permissions or CUDA_VISIBLE_DEVICES="
                            f"{os.environ.get('CUDA_VISIBLE_DEVICES', '')!r}")
    else:
        count = _count_problem(facts, gpus_asked)
        if count:
            problems.append(count)
    toolkit = tuple(facts["toolkit"]) if facts.get("toolkit") else None
    if facts.get("cuda_home") and toolkit is None:
        problems.append(f"the toolkit's version is unknown ({facts.get('toolkit_error')})")
    torch_cuda = version_tuple(facts.get("torch_cuda") or "")
    if toolkit and torch_cuda and torch_cuda[0] != toolkit[0]:
        problems.append(f"torch was built for CUDA {facts['torch_cuda']}, the toolkit the job puts on PATH "
                        f"({facts['cuda_home']}) is CUDA {toolkit[0]}.{toolkit[1]}: the majors must match "
                        "(pin cuda-version in the env to the toolkit's major.minor)")
    problems.extend(_driver_judgement(facts)[0])
    return problems


def gpu_warnings(facts, gpus_asked):
    """What runs, but not as the toolkit's own driver would: minor version compatibility (no PTX JIT
    of the toolkit's newer PTX), forward compatibility through cuda-compat."""
    return _driver_judgement(facts)[1] if gpus_asked else []


def _driver_judgement(facts):
    """(problems, warnings) of the driver against torch's CUDA major and the toolkit's row."""
    problems, notes = [], []
    drivers = facts.get("drivers") or []
    oldest_text = min(drivers, key=lambda text: version_tuple(text) or (0,)) if drivers else ""
    oldest = version_tuple(oldest_text) if oldest_text else None
    if not oldest:
        return problems, notes
    toolkit = tuple(facts["toolkit"]) if facts.get("toolkit") else None
    torch_cuda = version_tuple(facts.get("torch_cuda") or "")
    major = torch_cuda[0] if torch_cuda else (toolkit[0] if toolkit else None)
    compat = _compat_version(facts, oldest)
    effective, effective_text = (version_tuple(compat), compat) if compat else (oldest, oldest_text)
    floor = CUDA_11_0_FLOOR if (torch_cuda or toolkit or ())[:2] == (11, 0) else MAJOR_FLOOR.get(major)
    driver_cuda = version_tuple(facts.get("driver_cuda") or "")
    if floor and effective < version_tuple(floor):
        problems.append(f"driver {effective_text}{' (cuda-compat)' if compat else ''} is below CUDA {major}.x's floor "
                        f"(>= {floor} on Linux for any CUDA {major}.x, minor version compatibility, {RELEASE_NOTES}): "
                        f"update the driver, install the cuda-compat package of CUDA {major} (data-center GPUs), "
                        "or use a torch built for an older CUDA major")
    elif major and driver_cuda and driver_cuda[0] < major:
        problems.append(f"the driver's libcuda supports CUDA {facts['driver_cuda']}, torch needs CUDA {major}.x "
                        f"({facts.get('libcuda') or 'libcuda.so.1'}): update the driver or the cuda-compat package")
    if compat and not problems:
        notes.append(f"libcuda is the cuda-compat package {compat} over driver {oldest_text} "
                     f"({facts.get('libcuda')}): forward compatibility, data-center GPUs only")
    row = TOOLKIT_DRIVER.get(toolkit) if toolkit else None
    if row and not problems and effective < version_tuple(row):
        notes.append(f"driver {effective_text} is older than CUDA {toolkit[0]}.{toolkit[1]}'s own ({row}, "
                     f"{RELEASE_NOTES}): it runs by minor version compatibility, but code that JIT-compiles "
                     "the toolkit's PTX (extensions built with its nvcc) may fail")
    elif toolkit and not row and toolkit[0] in MAJOR_FLOOR and not problems:
        notes.append(f"CUDA {toolkit[0]}.{toolkit[1]} has no row in this check's table ({RELEASE_NOTES} through "
                     f"13.0): only CUDA {toolkit[0]}.x's floor was checked")
    return problems, notes


def gpu_facts(cuda_home):
    """Everything gpu_problems() judges, probed on this node."""
    drivers, driver_error = driver_versions()
    facts = {"drivers": drivers, "driver_error": driver_error, "cuda_home": cuda_home, "toolkit": None,
             "toolkit_error": "", "mig": mig_modes() if drivers else []}
    if cuda_home:
        toolkit, facts["toolkit_error"] = toolkit_version(cuda_home)
        facts["toolkit"] = list(toolkit) if toolkit else None
    facts.update(libcuda_facts())
    try:
        facts.update(torch_facts())
    except Exception as error:  # noqa: BLE001  (a broken torch is a finding, reported, not a traceback)
        facts.update(torch="", torch_cuda="", cuda_available=False, device_count=0, nccl="",
                     torch_error=f"{type(error).__name__}: {error}"[-200:])
    return facts


def summary(facts):
    drivers = facts.get("drivers") or []
    return (f"driver {drivers[0] if drivers else 'none'}, {len(drivers)} GPUs (nvidia-smi), torch {facts.get('torch')} "
            f"CUDA {facts.get('torch_cuda') or 'none'} sees {facts.get('device_count', 0)}, "
            f"NCCL {facts.get('nccl') or 'none'}, toolkit "
            f"{'.'.join(map(str, facts['toolkit'])) if facts.get('toolkit') else 'none'}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus-per-node", type=int, default=0, help="GPUs the job asked for per node (--gres)")
    parser.add_argument("--cuda-home", default="", help="the toolkit the job puts on PATH (its version.json)")
    parser.add_argument("--facts", action="store_true", help="only print what was found, as JSON (the preflight's)")
    args = parser.parse_args(argv)
    if args.facts:
        print(json.dumps(gpu_facts(args.cuda_home), sort_keys=True), flush=True)
        return 0
    return FAILED_EXIT if check_node(args.gpus_per_node, args.cuda_home) else 0


def check_node(gpus_per_node, cuda_home):
    """This node's check, its lines printed; the problems found (the job's health gate runs it too)."""
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    facts = gpu_facts(cuda_home)
    problems = gpu_problems(facts, gpus_per_node)
    print(f"gpu-check {node}: {'FAILED' if problems else 'ok'}: {summary(facts)}", flush=True)
    for problem in problems:
        print(f"gpu-check {node}: {problem}", file=sys.stderr, flush=True)
    for note in gpu_warnings(facts, gpus_per_node):
        print(f"gpu-check {node}: warning: {note}", file=sys.stderr, flush=True)
    return problems


if __name__ == "__main__":
    sys.exit(main())
