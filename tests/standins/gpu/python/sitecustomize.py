"""STAND-IN "CUDA torch" of the local cluster, whose nodes have no GPUs and whose env holds a CPU
build of torch. Python imports this at start-up only because bin/local-cluster puts its
directory on PYTHONPATH of every Slurm task on the cluster's nodes (a TaskProlog); no product path.

Inert unless the node's own /etc/local-cluster/standin-gpus.json exists (bin/local-cluster
writes it on GPU nodes only). There, once torch is imported, torch.cuda.is_available(),
torch.cuda.device_count(), torch.version.cuda and torch.cuda.nccl.version() report the node's
stand-in GPUs as a CUDA build of torch would: the count of the fake devices, at most as many as
CUDA_VISIBLE_DEVICES lists (as real CUDA hides the rest), or $LOCAL_CLUSTER_STANDIN_TORCH_GPUS
when a test sets it (a torch that sees fewer GPUs than the job got).

The GPUs are not real, so training must run on CPU: the stand-in sets TRAIN_BACKEND=gloo (the
explicit backend examples/train_ddp.py and the all-reduce check obey) for the processes it
starts in; the GPU check still judges the GPUs it reports.

Where a test puts a recorded NCCL log at the node's NCCL_LOG (NCCL's INFO lines), a process
whose NCCL_DEBUG_FILE is set gets them written there, as NCCL would write them, once
torch.distributed.init_process_group returns: the network NCCL "used" is the recorded one.
"""
import importlib.abc
import importlib.util
import json
import os
import re
import sys

MARKER = "/etc/local-cluster/standin-gpus.json"
NCCL_LOG = "/etc/local-cluster/standin-nccl.log"


def _config():
    try:
        with open(MARKER) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def _gpus(config):
    found = sum(1 for name in os.listdir(config["devices"]) if re.fullmatch(r"nvidia[0-9]+", name))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        found = min(found, len([d for d in visible.split(",") if d.strip()]))
    override = os.environ.get("LOCAL_CLUSTER_STANDIN_TORCH_GPUS")
    return int(override) if override else found


def _patch(torch, config):
    count = _gpus(config)
    torch.version.cuda = config["cuda"]
    torch.cuda.is_available = lambda: count > 0
    torch.cuda.device_count = lambda: count
    import torch.cuda.nccl
    nccl = tuple(int(part) for part in config["nccl"].split("."))
    torch.cuda.nccl.version = lambda: nccl
    import torch.distributed
    init = torch.distributed.init_process_group

    def init_and_log(*args, **kwargs):
        result = init(*args, **kwargs)
        target = os.environ.get("NCCL_DEBUG_FILE")
        if target and os.path.exists(NCCL_LOG):
            with open(NCCL_LOG) as recorded, open(target.replace("%h", os.uname().nodename)
                                                   .replace("%p", str(os.getpid())), "a") as log:
                log.write(recorded.read())
        return result
    torch.distributed.init_process_group = init_and_log


class _AfterTorch(importlib.abc.MetaPathFinder):
    """Lets torch import as it is, then patches it."""

    def __init__(self, config):
        self.config = config

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        exec_module, config = spec.loader.exec_module, self.config

        def exec_and_patch(module):
            exec_module(module)
            _patch(module, config)
        spec.loader.exec_module = exec_and_patch
        return spec


_CONFIG = _config()
if _CONFIG:
    os.environ.setdefault("TRAIN_BACKEND", "gloo")
    sys.meta_path.insert(0, _AfterTorch(_CONFIG))
