"""launch.yml on the default local cluster: real multi-node torchrun jobs, end to end."""

import json
import re
from pathlib import Path

import pytest

from launch import TRAINER, launch, next_job_id, outputs_of, submitted_job_id, unique_job_name

def script_args(text):
    """-e as JSON: Ansible's own key=value form would split the value at its spaces."""
    return json.dumps({"script_args": text})


TRAIN_ARGS = script_args("--steps 6 --log-every 2")


def test_static_rendezvous_job_trains_four_ranks_and_collects_its_outputs(cluster, tmp_path):
    name = unique_job_name("static")
    proc = launch(tmp_path, "nodes=node110,node111", f"script={TRAINER}", "nproc_per_node=2",
                  f"job_name={name}", TRAIN_ARGS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    folder, job = outputs_of(tmp_path, name)
    assert (job["state"], job["exit_code"], job["nodes"]) == ("COMPLETED", 0, ["node110", "node111"])
    log = (folder / f"{name}-{job['job_id']}.out").read_text()
    assert "[rank0] world_size=4 backend=gloo" in log
    assert "[rank0] allreduce_check sum=6 expected=6 ok" in log
    # Each rank's line says its host, and the job script's prefix says the same node.
    hosts = re.findall(r"^\[rank\d+@(\S+)\] .* local_rank=\d+ host=(\S+)", log, re.M)
    assert sorted(hosts) == [("node110", "node110")] * 2 + [("node111", "node111")] * 2, log
    assert "[rank0] training complete steps=6" in log
    # What provision.yml put on the NAS is what the job ran with.
    # The env's versioned prefix that <envs>/magicdrivedit linked to when the job started.
    assert re.search(r"^.*python /starmap/nas/anaconda3/envs/\.magicdrivedit-[0-9a-f]{16}/bin/python$", log, re.M), log
    assert "CUDA_HOME=/starmap/nas/cuda/cuda-11.8" in log
    assert "env: NCCL_SOCKET_IFNAME==eth0" in log and "env: NCCL_IB_DISABLE=1" in log
    script = (folder / f"{name}-{job['job_id']}.sbatch").read_text()
    for directive in ("--nodes=2", "--nodelist=node[110-111]", "--gres=gpu:8", "--ntasks-per-node=1",
                      "--cpus-per-task=16", "--open-mode=append", f"--job-name={name}", "--output=%x-%j.out"):
        assert f"#SBATCH {directive}\n" in script
    # No partition was given: the job went to the one its nodes share, which the submission found.
    assert job["partition"] == "gpu_A6000" and "#SBATCH --partition" not in script
    assert f"job {job['job_id']} ({name}): COMPLETED, exit code 0" in proc.stdout


def test_c10d_rendezvous_on_a_node_group_and_count(cluster, tmp_path):
    name = unique_job_name("c10d")
    proc = launch(tmp_path, "group=gpu_A6000", "num_nodes=2", "rendezvous=c10d", f"script={TRAINER}",
                  "nproc_per_node=2", f"job_name={name}", TRAIN_ARGS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    folder, job = outputs_of(tmp_path, name)
    assert (job["state"], job["exit_code"], sorted(job["nodes"])) == ("COMPLETED", 0, ["node110", "node111"])
    log = (folder / f"{name}-{job['job_id']}.out").read_text()
    assert "rendezvous c10d" in log and "[rank0] allreduce_check sum=6 expected=6 ok" in log
    assert "--nodelist" not in (folder / f"{name}-{job['job_id']}.sbatch").read_text(), "Slurm picks the group's nodes"


def test_one_failing_rank_fails_the_job_fast_with_its_exit_code(cluster, tmp_path):
    name = unique_job_name("fail")
    proc = launch(tmp_path, "nodes=node[110-111]", f"script={TRAINER}", "nproc_per_node=1", f"job_name={name}",
                  script_args("--steps 50 --step-sleep 1 --fail-rank 1 --fail-at-step 2 --fail-exit-code 7"))
    assert proc.returncode != 0
    folder, job = outputs_of(tmp_path, name)
    assert (job["state"], job["exit_code"]) == ("FAILED", 7)
    assert job["elapsed_seconds"] < 45, "the job fails when the rank does, not at a timeout"
    assert f"ended FAILED, exit code 7" in proc.stdout
    assert "training step finished with exit code 7" in proc.stdout, "the log tail is in the failure"
    assert "rank 1 failing on purpose at step 2 with exit code 7" in \
        (folder / f"{name}-{job['job_id']}.out").read_text()


def test_no_wait_then_rerun_finds_the_job_and_job_id_collects_it(cluster, tmp_path):
    name = unique_job_name("nowait")
    request = ["nodes=node110,node111", f"script={TRAINER}", "nproc_per_node=1", f"job_name={name}",
               script_args("--steps 4 --step-sleep 2")]
    first = launch(tmp_path, *request, "wait=false")
    assert first.returncode == 0, first.stdout + first.stderr
    job_id = submitted_job_id(first.stdout)
    assert "submitted" in first.stdout
    again = launch(tmp_path, *request, "wait=false")
    assert again.returncode == 0, again.stdout + again.stderr
    assert submitted_job_id(again.stdout) == job_id
    assert "already pending or running: following it" in again.stdout
    follow = launch(tmp_path, f"job_id={job_id}")
    assert follow.returncode == 0, follow.stdout + follow.stderr
    _, job = outputs_of(tmp_path, name)
    assert (job["job_id"], job["state"]) == (job_id, "COMPLETED")
    assert next_job_id(cluster) == job_id + 1, "the rerun submitted no second copy"


def test_check_mode_asks_slurm_for_a_prediction_and_changes_nothing(cluster, tmp_path):
    name = unique_job_name("check")
    proc = launch(tmp_path, "nodes=node110,node111", f"script={TRAINER}", f"job_name={name}", check=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Slurm would start the job at " in proc.stdout and " on node110,node111 in partition gpu_A6000" in proc.stdout
    # sbatch --test-only uses up a job id (seen on Slurm 22.05), but queues no job.
    assert cluster.slurm("squeue", "-h", "-n", name).stdout == ""
    assert not (cluster.nas / "jobs" / "alice" / name).exists(), "nothing is written on the NAS"
    assert not list(Path(tmp_path).iterdir()), "no outputs"


BAD_REQUESTS = {
    "unknown node": (["nodes=node110,node999"], "Not compute nodes of the inventory: node999"),
    "zero nodes": (["group=gpu_A6000", "num_nodes=0"], "num_nodes=0 is not allowed"),
    "negative nodes": (["group=gpu_A6000", "num_nodes=-2"], "num_nodes=-2 is not allowed"),
    "more GPUs than a node has": (["nodes=node110", "gpus_per_node=9"], "gpus_per_node=9 of 8 GPUs"),
    "more nodes than the group has": (["group=gpu_A6000", "num_nodes=3"], "num_nodes=3 of 2 nodes"),
    "missing script": (["nodes=node110", "script=examples/no_such_trainer.py"], "no_such_trainer.py does not exist"),
    "shell metacharacters in a node name": ([json.dumps({"nodes": "node110;touch /tmp/launch-pwned"})],
                                            "invalid node list 'node110;touch /tmp/launch-pwned'"),
    "nodes and group together": (["nodes=node110", "group=gpu_A6000", "num_nodes=1"], "not both"),
    "unknown group": (["group=gpu_H100", "num_nodes=1"], "group=gpu_H100 must be a group of compute nodes"),
    "bad rendezvous": (["nodes=node110", "rendezvous=etcd"], "slurm_launch_rendezvous must be one of: static, c10d, got: etcd"),
    # Cores counted where Slurm counts threads (slurm.conf gives the local nodes 16 CPUs, 8 GPUs).
    "inventory CPUs that Slurm does not count": (
        ["nodes=node110", "cluster_node_cpus=8"],
        "node110: the inventory says 8 CPUs, Slurm says 16 (CPUTot); set cluster_node_cpus: 16 in group_vars/gpu_A6000.yml"),
    "inventory GPUs that Slurm does not count": (
        ["nodes=node110", "cluster_node_gpus=4"],
        "node110: the inventory says 4 GPUs, Slurm says 8 (Gres); set cluster_node_gpus: 8 in group_vars/gpu_A6000.yml"),
}


@pytest.mark.parametrize("case", sorted(BAD_REQUESTS))
def test_bad_request_is_refused_before_anything_is_submitted(cluster, tmp_path, case):
    extra, message = BAD_REQUESTS[case]
    before = next_job_id(cluster)
    script = [] if any(item.startswith("script=") for item in extra) else [f"script={TRAINER}"]
    proc = launch(tmp_path, *script, *extra)
    assert proc.returncode != 0
    assert message in proc.stdout + proc.stderr
    assert next_job_id(cluster) == before
    assert not Path("/tmp/launch-pwned").exists()


def test_a_drained_node_is_refused_by_name(cluster, tmp_path):
    cluster.slurm("scontrol", "update", "nodename=node111", "state=drain", "reason=launch-test")
    try:
        before = next_job_id(cluster)
        proc = launch(tmp_path, "nodes=node110,node111", f"script={TRAINER}")
        assert proc.returncode != 0
        assert "node111 (drained) is drained" in proc.stdout, proc.stdout[-3000:]
        assert "scontrol update nodename=NODE state=resume" in proc.stdout
        assert next_job_id(cluster) == before
    finally:
        cluster.slurm("scontrol", "update", "nodename=node111", "state=resume")


def test_a_missing_nccl_env_file_stops_the_launch_naming_it_and_the_fix(cluster, tmp_path):
    env_file = cluster.nas / "env" / "nccl-gpu_A6000.sh"
    aside = env_file.with_name(env_file.name + ".aside")
    env_file.rename(aside)
    try:
        before = next_job_id(cluster)
        proc = launch(tmp_path, "nodes=node110,node111", f"script={TRAINER}")
    finally:
        aside.rename(env_file)
    assert proc.returncode != 0
    assert (f"The NCCL env file {env_file} of node group gpu_A6000 is missing (or unreadable) on the NAS, "
            "and the job sources it: run provision.yml for that group") in proc.stdout, proc.stdout[-3000:]
    assert next_job_id(cluster) == before


def test_a_submit_host_with_too_old_a_python_is_named_at_the_first_module_run_with_nothing_made(cluster, tmp_path):
    # tests/standins/python3.6: a STAND-IN for EL8's Python 3.6 (answers -V, refuses the rest), where
    # the submit host sees it (the NAS; the controller's /tmp is hidden from the hosts). A launch pays
    # no round trip to ask first: the staging module run fails there, and its failure says why.
    standin_dir = cluster.nas / f"python-standin-{tmp_path.name[-8:]}"
    standin_dir.mkdir(mode=0o755)
    standin = standin_dir / "python3.6"
    standin.write_text((Path(__file__).resolve().parents[1] / "standins" / "python3.6").read_text())
    standin.chmod(0o755)
    name = unique_job_name("oldpython")
    try:
        before = next_job_id(cluster)
        proc = launch(tmp_path, "nodes=node110,node111", f"script={TRAINER}", f"job_name={name}",
                      f"ansible_python_interpreter={standin}")
    finally:
        standin.unlink()
        standin_dir.rmdir()
    assert proc.returncode != 0
    output = proc.stdout + proc.stderr
    assert (f"login01: ansible-core 2.19" in output and f"needs Python 3.8 or newer on the hosts it manages, and "
            f"{standin} is Python 3.6." in output), output[-3000:]
    assert "set ansible_python_interpreter to it for this host" in output
    # The stand-in's refusal of the module is what the message explains: not shown as well.
    assert "only -V is answered" not in output
    assert next_job_id(cluster) == before
    assert not (cluster.nas / "jobs" / "alice" / name).exists(), "nothing is written on the NAS"
