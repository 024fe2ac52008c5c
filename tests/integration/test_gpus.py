"""GPUs proven used, on the default local cluster, whose nodes have no GPUs: with the cluster's
stand-ins, named as such (tests/standins/gpu/: an nvidia-smi on each GPU node that answers the
--query-gpu forms of NVIDIA's nvidia-smi documentation from the node's fake device files, and a
"CUDA torch" that makes the env's CPU torch report those GPUs as a CUDA 11.8 build does, and
train with gloo). A GPU job whose torch sees fewer GPUs than asked stops before training, naming
why; a matching one passes the check and trains; the preflight's table shows each node's driver,
GPU count, torch's CUDA and NCCL."""

import json
import re
import subprocess

from cluster import REPO
from launch import TRAINER, forget_bad_nodes, launch, outputs_of, unique_job_name

NODES = "nodes=node110,node111"
# What bin/local-cluster's stand-ins claim (STANDIN_GPU there) on a node of 8 GPUs (gpu_A6000.yml).
STANDIN = "driver 535.104.05, 8 GPUs (nvidia-smi), torch {torch} CUDA 11.8 sees {seen}, NCCL 2.18.1, toolkit 11.8"


def test_the_standin_nvidia_smi_is_on_gpu_nodes_only(cluster):
    lines = cluster.ssh("node110", "nvidia-smi --query-gpu=index,driver_version --format=csv,noheader").stdout
    assert lines.splitlines() == [f"{index}, 535.104.05" for index in range(8)]
    assert cluster.ssh("login01", "command -v nvidia-smi", check=False).returncode != 0


def test_a_gpu_job_whose_torch_sees_fewer_gpus_than_asked_stops_before_training(cluster, tmp_path, request):
    # Both nodes fail the check and become bad nodes of alice's: forgotten after, for the later launches.
    request.addfinalizer(lambda: forget_bad_nodes("node110", "node111"))
    name = unique_job_name("fewergpus")
    # The stand-in's knob: torch sees 4 of the 8 GPUs the job is given (--gres=gpu:8).
    env = json.dumps({"slurm_launch_env": {"LOCAL_CLUSTER_STANDIN_TORCH_GPUS": "4"}})
    proc = launch(tmp_path, NODES, f"script={TRAINER}", "nproc_per_node=1", f"job_name={name}", env)
    assert proc.returncode != 0, proc.stdout[-3000:]
    folder, job = outputs_of(tmp_path, name)
    assert (job["state"], job["exit_code"]) == ("FAILED", 91), job
    log = (folder / f"{name}-{job['job_id']}.out").read_text()
    for node in ("node110", "node111"):
        assert f"gpu-check {node}: torch sees 4 GPUs, the job asked for 8 per node (--gres=gpu:8" in log, log
    assert "GPU check failed (the reasons above, per node): not training" in proc.stdout, "the launch shows why"
    assert "world_size=" not in log and "training step finished" not in log, "nothing trained"
    marks = json.loads((cluster.nas / "jobs" / "alice" / "nodes.json").read_text())["nodes"]
    assert {node: (marks[node]["reason"], marks[node]["job_id"]) for node in ("node110", "node111")} == {
        "node110": ("GPU_CHECK", job["job_id"]), "node111": ("GPU_CHECK", job["job_id"])}


def test_a_matching_gpu_job_passes_the_check_and_trains_on_cpu_with_gloo(cluster, tmp_path):
    name = unique_job_name("matchgpus")
    proc = launch(tmp_path, NODES, f"script={TRAINER}", "nproc_per_node=1", f"job_name={name}",
                  json.dumps({"script_args": "--steps 4 --log-every 2"}))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
    folder, job = outputs_of(tmp_path, name)
    assert (job["state"], job["exit_code"]) == ("COMPLETED", 0)
    log = (folder / f"{name}-{job['job_id']}.out").read_text()
    torch_version = re.search(r"gpu-check node110: ok: .* torch (\S+) CUDA", log).group(1)
    for node in ("node110", "node111"):
        assert f"gpu-check {node}: ok: {STANDIN.format(torch=torch_version, seen=8)}" in log, log
    assert "[rank0] world_size=2 backend=gloo" in log and "[rank0] training complete steps=4" in log, log


def test_the_preflight_table_shows_each_nodes_driver_gpus_cuda_and_nccl(cluster, tmp_path):
    proc = subprocess.run(["ansible-playbook", "preflight.yml", "-e", f"slurm_launch_outputs_dir={tmp_path}",
                           "-e", "nproc_per_node=1", "-e", NODES,
                           "-e", '{"slurm_launch_preflight_sizes": [4096]}'],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr
    summary = (tmp_path / "preflight-gpu_A6000.txt").read_text()
    for node in ("node110", "node111"):
        row = re.search(rf"^{node}\s+(.*)$", summary, re.M).group(1)
        assert "driver 535.104.05, 8 GPUs, torch sees 8, CUDA 11.8, NCCL 2.18.1" in row, row
    assert re.search(r"^all-reduce\s+job \d+ COMPLETED, 2 ranks on node110,node111, gloo", summary, re.M), summary
    assert "problem" not in summary
