#!/usr/bin/env python3
"""A GPU job's check of its node before it trains: torch sees every GPU the job asked for, was
built for the CUDA major of the toolkit the job puts on PATH, and the driver is new enough.

Run by the job script once per node (``srun --ntasks-per-node=1``) in the training env, before the
training's srun, and by the preflight's node check (which imports the probes and rules):

    python gpu_check.py --gpus-per-node 8 --cuda-home /nas/cuda/cuda-11.8
    python gpu_check.py --facts --cuda-home /nas/cuda/cuda-11.8   # what it found, JSON

Prints one ``gpu-check <node>: ...`` line; exits 1, each failed rule on a line of its own, when
the job would train without its GPUs. Standard library at import time (torch is imported only
to ask it), so the preflight's node check can import it with the node's own python3.
"""

import argparse
import json
import os
import socket
import subprocess
import sys

# The minimum Linux driver of each toolkit, from NVIDIA's CUDA Toolkit Release Notes, table
# "CUDA Toolkit and Corresponding Driver Versions" (the GA release of each). CUDA's minor
# version compatibility would run a 12.x toolkit on any driver >= 525.60.13 (11.x: >= 450.80.02),
# but without PTX JIT, which extensions compiled with the toolkit's nvcc may need: this check
# asks for the toolkit's own driver.
DRIVER_MINIMUM = {
    (11, 0): "450.36.06", (11, 1): "455.23", (11, 2): "460.27.03", (11, 3): "465.19.01",
    (11, 4): "470.42.01", (11, 5): "495.29.05", (11, 6): "510.39.01", (11, 7): "515.43.04",
    (11, 8): "520.61.05", (12, 0): "525.60.13", (12, 1): "530.30.02", (12, 2): "535.54.03",
    (12, 3): "545.23.06", (12, 4): "550.54.14", (12, 5): "555.42.02", (12, 6): "560.28.03",
}
FAILED_EXIT = 1


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


def driver_versions():
    """The driver version nvidia-smi gives for each GPU of the node ([] and an error when it cannot answer)."""
    argv = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                              timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        return [], f"{' '.join(argv)}: {error}"
    if proc.returncode != 0:
        return [], f"{' '.join(argv)}: exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-200:]}"
    return [line.strip() for line in proc.stdout.splitlines() if line.strip()], ""


def torch_facts():
    """What torch says of CUDA, as the training will ask it."""
    import torch  # the training env's: only this probe needs it
    facts = {"torch": torch.__version__, "torch_cuda": torch.version.cuda or "", "cuda_available": False,
             "device_count": 0, "nccl": ""}
    if torch.version.cuda:
        facts["cuda_available"] = bool(torch.cuda.is_available())
        facts["device_count"] = torch.cuda.device_count() if facts["cuda_available"] else 0
        try:
            import torch.cuda.nccl
            facts["nccl"] = ".".join(str(part) for part in torch.cuda.nccl.version())
        except (AttributeError, RuntimeError, ImportError):
            facts["nccl"] = ""
    return facts


def gpu_problems(facts, gpus_asked):
    """Why a job that asked for gpus_asked GPUs per node would not train on them, one message a rule.

    facts: drivers (nvidia-smi's per GPU), driver_error, toolkit ([major, minor] or None), cuda_home,
    toolkit_error, and torch_facts()'s keys (torch_error when torch did not import).
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
        problems.append(f"torch {facts.get('torch')} (CUDA {facts['torch_cuda']}) cannot use CUDA here "
                        "(torch.cuda.is_available() is False): driver, CUDA_VISIBLE_DEVICES or device permissions")
    elif facts.get("device_count", 0) < gpus_asked:
        problems.append(f"torch sees {facts['device_count']} GPUs, the job asked for {gpus_asked} per node "
                        f"(--gres=gpu:{gpus_asked}; CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')!r})")
    toolkit = tuple(facts["toolkit"]) if facts.get("toolkit") else None
    if facts.get("cuda_home") and toolkit is None:
        problems.append(f"the toolkit's version is unknown ({facts.get('toolkit_error')})")
    torch_cuda = version_tuple(facts.get("torch_cuda") or "")
    if toolkit and torch_cuda and torch_cuda[0] != toolkit[0]:
        problems.append(f"torch was built for CUDA {facts['torch_cuda']}, the toolkit the job puts on PATH "
                        f"({facts['cuda_home']}) is CUDA {toolkit[0]}.{toolkit[1]}: the majors must match "
                        "(pin cuda-version in the env to the toolkit's major.minor)")
    minimum = DRIVER_MINIMUM.get(toolkit) if toolkit else None
    oldest = min(drivers, key=lambda text: version_tuple(text) or (0,)) if drivers else ""
    if minimum and oldest and (version_tuple(oldest) or (0,)) < version_tuple(minimum):
        problems.append(f"driver {oldest} is older than CUDA {toolkit[0]}.{toolkit[1]} needs (>= {minimum} on Linux, "
                        "NVIDIA's CUDA Toolkit release notes): update the driver or use an older toolkit")
    return problems


def gpu_facts(cuda_home):
    """Everything gpu_problems() judges, probed on this node."""
    drivers, driver_error = driver_versions()
    facts = {"drivers": drivers, "driver_error": driver_error, "cuda_home": cuda_home, "toolkit": None,
             "toolkit_error": ""}
    if cuda_home:
        toolkit, facts["toolkit_error"] = toolkit_version(cuda_home)
        facts["toolkit"] = list(toolkit) if toolkit else None
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
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    facts = gpu_facts(args.cuda_home)
    problems = gpu_problems(facts, args.gpus_per_node)
    print(f"gpu-check {node}: {'FAILED' if problems else 'ok'}: {summary(facts)}", flush=True)
    for problem in problems:
        print(f"gpu-check {node}: {problem}", file=sys.stderr, flush=True)
    return FAILED_EXIT if problems else 0


if __name__ == "__main__":
    sys.exit(main())
