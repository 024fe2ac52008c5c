"""Long jobs on the default local cluster: the time-limit warning, checkpoint, requeue and
resume, and the faults a launch that follows a job must live through."""

import json
import os
import re
import signal
import subprocess
import time

from cluster import REPO, alive, eventually, local_cluster
from launch import TRAINER, forget_bad_nodes, outputs_of, unique_job_name

NODES = "nodes=node110,node111"


def start_launch(outputs_dir, *extra_vars):
    """launch.yml in the background, as a user's terminal runs it."""
    argv = ["ansible-playbook", "launch.yml", "-e", f"slurm_launch_outputs_dir={outputs_dir}"]
    for item in extra_vars:
        argv += ["-e", item]
    return subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def training(name, steps, step_sleep=0.5, max_restarts=1):
    return [NODES, f"script={TRAINER}", "nproc_per_node=1", f"job_name={name}", f"max_restarts={max_restarts}",
            json.dumps({"script_args": f"--steps {steps} --step-sleep {step_sleep} --log-every 1"})]


def job_record(cluster, name):
    """scontrol's view of the newest job of that name, as a dict; None before it is submitted."""
    ids = cluster.slurm("squeue", "-h", "-n", name, "-o", "%i").stdout.split()
    if not ids:
        return None
    out = cluster.slurm("scontrol", "show", "job", "-o", ids[-1]).stdout
    return dict(field.split("=", 1) for field in out.split() if "=" in field)


def log_of(cluster, name, job_id):
    path = cluster.nas / "jobs" / "alice" / name / "runs" / "1" / f"{name}-{job_id}.out"  # a fresh name's first run
    return path.read_text() if path.exists() else ""


def wait_for_training(cluster, name, step_line="[rank0] step=3 "):
    job = eventually(lambda: (rec := job_record(cluster, name)) and rec["JobState"] == "RUNNING" and rec, 60)
    assert job, f"job {name} never ran"
    assert eventually(lambda: step_line in log_of(cluster, name, job["JobId"]), 90), log_of(cluster, name, job["JobId"])
    return job["JobId"]


def test_the_warning_checkpoints_requeues_and_the_job_resumes_to_completed(cluster, tmp_path):
    name = unique_job_name("requeue")
    launch = start_launch(tmp_path, *training(name, steps=40))
    try:
        job_id = wait_for_training(cluster, name)
        # The warning Slurm sends before the time limit (--signal=B:USR1@...), sent now.
        cluster.slurm("scancel", "--batch", "--signal=USR1", job_id)
        requeued = eventually(lambda: (rec := job_record(cluster, name)) and rec["Restarts"] == "1"
                              and rec["JobState"] == "PENDING" and rec, 60)
        assert requeued, log_of(cluster, name, job_id)
        # Slurm lets the requeued job run again once the first run's credential has expired
        # (cred_expire, 30 s on the local cluster). Forced to start sooner (StartTime=now), it
        # failed to launch in 2 CI runs of 4: "Job credential revoked", FAILED, exit code 1.
        out, _ = launch.communicate(timeout=300)
    finally:
        launch.kill()
    assert launch.returncode == 0, out
    folder, job = outputs_of(tmp_path, name)
    assert (job["state"], job["restarts"], str(job["job_id"])) == ("COMPLETED", 1, job_id)
    log = (folder / f"{name}-{job_id}.out").read_text()
    saved = int(re.search(r"\[rank0\] checkpoint saved step=(\d+) reason=SIGUSR1", log).group(1))
    first, second = log.split(f"=== job {job_id} ({name}) restart 1 of at most 1")
    assert f"=== job {job_id} ({name}) restart 0 of at most 1" in first
    assert "requeueing: restart 1 of at most 1 resumes from the checkpoint" in first
    assert f"[rank0] resumed from step={saved}" in second and "[rank0] step=40 " in second
    assert f"[rank0] step={saved + 1} " not in first, "the first run stopped at the step it saved"
    assert "training complete steps=40" in second
    assert "restarts   1" in (folder / "summary.txt").read_text()


def test_an_interrupted_launch_run_again_follows_the_same_job(cluster, tmp_path):
    name = unique_job_name("rerun")
    # Long enough (25 s) that the job still runs when the second launch, started after the first
    # one stopped, asks for it on a loaded machine; 16 steps (8 s) ended first in 1 CI run of 3.
    request = training(name, steps=50)
    first = start_launch(tmp_path, *request)
    try:
        job_id = wait_for_training(cluster, name)
        first.send_signal(signal.SIGINT)  # Ctrl-C in the user's terminal
        first.communicate(timeout=60)
    finally:
        first.kill()
    assert job_record(cluster, name)["JobId"] == job_id, "the job runs on without its launch"
    again = start_launch(tmp_path, *request)
    out, _ = again.communicate(timeout=300)
    assert again.returncode == 0, out
    assert f"job {job_id} ({name}): COMPLETED, exit code 0" in out, out[-4000:]
    assert "found pending or running: not submitted again" in out, out[-4000:]
    _, job = outputs_of(tmp_path, name)
    assert (str(job["job_id"]), job["state"]) == (job_id, "COMPLETED")
    names = cluster.slurm("scontrol", "show", "job", "-o").stdout.count(f"JobName={name} ")
    assert names == 1, "one job, not a second copy"


def test_a_controller_restart_while_following_does_not_lose_the_job(cluster, tmp_path):
    name = unique_job_name("ctld")
    submitted = start_launch(tmp_path, *training(name, steps=70), "wait=false")
    assert submitted.wait(timeout=120) == 0, submitted.stdout.read()
    job_id = wait_for_training(cluster, name)
    # Followed by id: no end marker to watch, so Slurm is asked on the poll schedule, during the
    # outage too. (A launch that follows its own job asks only at the marker or every 60 s.)
    launch = start_launch(tmp_path, f"job_id={job_id}")
    try:
        time.sleep(5)
        pid = cluster.pids()["slurmctld"]
        os.kill(pid, signal.SIGTERM)
        assert eventually(lambda: not alive(pid), 30)
        time.sleep(25)  # the launch asks in vain meanwhile (a Slurm client alone tries for 18 s)
        local_cluster("up", "-i", str(cluster.inventory))
        out, _ = launch.communicate(timeout=300)
    finally:
        launch.kill()
    assert launch.returncode == 0, out
    _, job = outputs_of(tmp_path, name)
    assert job["state"] == "COMPLETED"
    assert "slurmctld did not answer" in out


def kill_node(cluster, node):
    """What a node's death looks like to Slurm: slurmd, the job's slurmstepd and processes gone at once
    (the node's namespace and sshd stay, so that 'up' can bring its slurmd back)."""
    netns = cluster.nodes[node]["netns"]
    pids = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True, check=True).stdout.split()
    for pid in map(int, pids):
        try:
            if open(f"/proc/{pid}/comm").read().strip() not in ("sleep", "sshd"):
                os.kill(pid, signal.SIGKILL)
        except (OSError, ProcessLookupError):
            pass


def test_a_node_that_dies_mid_job_ends_it_node_fail_named(cluster, tmp_path, request):
    name = unique_job_name("nodefail")
    # Alice's later launches on the shared cluster may pin node111 again.
    request.addfinalizer(lambda: forget_bad_nodes("node111"))
    launch = start_launch(tmp_path, *training(name, steps=300, max_restarts=0))
    try:
        wait_for_training(cluster, name)
        kill_node(cluster, "node111")
        out, _ = launch.communicate(timeout=300)  # SlurmdTimeout is 30 s on the local cluster
    finally:
        launch.kill()
        local_cluster("up", "-i", str(cluster.inventory))
        assert eventually(lambda: "idle" in cluster.slurm("sinfo", "-h", "-N", "-n", "node111", "-o", "%T").stdout, 120)
    assert launch.returncode != 0
    _, job = outputs_of(tmp_path, name)
    # Not requeued (max_restarts=0): the launch's follow kept the dead node out of alice's next jobs.
    marks = json.loads((cluster.nas / "jobs" / "alice" / "nodes.json").read_text())["nodes"]
    assert (marks["node111"]["reason"], marks["node111"]["job_id"]) == ("NODE_FAIL", job["job_id"]), marks
    assert (job["state"], job["failed_nodes"]) == ("NODE_FAIL", "node111 (down*)")
    assert "ended NODE_FAIL" in out and "failed nodes: node111 (down*)" in out
