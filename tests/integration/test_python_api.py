"""slurm_train, the Python API, on the default local cluster: a launch that trains on two nodes
and returns its result with the progress lines as they came; a wrong argument refused before
anything is submitted; a failed job raised with its collected result; and a job launched without
waiting, listed by jobs(), followed live by logs() while cancel() ends it and collects it."""

import json
import queue
import re
import sys
import threading
import time

import pytest

from cluster import REPO, eventually
from launch import TRAINER, next_job_id, unique_job_name

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import slurm_train  # noqa: E402


def scontrol_state(cluster, job_id):
    """Slurm's own word on the job, read apart from the API's parsing."""
    shown = cluster.slurm("scontrol", "show", "job", "-o", str(job_id), check=False).stdout
    match = re.search(r"\bJobState=(\S+)", shown)
    return match.group(1) if match else None


def test_launch_trains_and_returns_the_result_a_bad_argument_submits_nothing_a_failure_raises(cluster, tmp_path):
    before = next_job_id(cluster)
    with pytest.raises(ValueError, match=r"^time_limit='soon' is not allowed: "):
        slurm_train.launch(script=TRAINER, nodes="node110,node111", time_limit="soon",
                           slurm_launch_outputs_dir=str(tmp_path))
    with pytest.raises(ValueError, match=r"^Unknown -e key: -e nproc_per_nod \(did you mean 'nproc_per_node'\?\)"):
        slurm_train.launch(script=TRAINER, nodes="node110,node111", nproc_per_nod=1)
    assert next_job_id(cluster) == before, "a refused argument must submit nothing"

    name = unique_job_name("api")
    lines = []
    result = slurm_train.launch(script=TRAINER, nodes="node110,node111", nproc_per_node=1, job_name=name,
                                script_args="--steps 3", slurm_launch_outputs_dir=str(tmp_path),
                                on_progress=lines.append)
    assert (result.state, result.exit_code, result.outcome, result.final) == ("COMPLETED", 0, "succeeded", True)
    assert result.succeeded and result.name == name and result.job_id >= before
    assert scontrol_state(cluster, result.job_id) == "COMPLETED"
    assert result.outputs == tmp_path / f"{name}-{result.job_id}"
    assert json.loads((result.outputs / "job.json").read_text()) == result.job
    assert result.job["nodes"] == ["node110", "node111"] and result.run_line == "fresh run 1"
    assert result.summary == (result.outputs / "summary.txt").read_text().rstrip("\n")
    assert "fresh run 1" in result.summary
    log = (result.outputs / f"{name}-{result.job_id}.out").read_text().splitlines()
    assert "[rank0] training complete steps=3 " in "\n".join(log) + " "
    # The progress lines, as the playbook prints them: the job's state, then lines of its log (at
    # most the 5 newest of each slice, so which ones depends on timing), in the log's order, the
    # last of them the log's own last line.
    assert f"job {result.job_id} ({name}): RUNNING on node110,node111" in lines, lines
    shown = [line.split(" | ", 1)[1] for line in lines if line.startswith(f"  {result.job_id} | ")]
    assert shown and shown[-1] == log[-1], (shown, log)
    positions = [log.index(line) for line in shown]
    assert positions == sorted(positions), (shown, log)

    failing = unique_job_name("api-fail")
    with pytest.raises(slurm_train.JobFailed) as raised:
        slurm_train.launch(script=TRAINER, nodes="node110", nproc_per_node=1, job_name=failing,
                           script_args="--steps 4 --fail-rank 0 --fail-at-step 2",
                           slurm_launch_outputs_dir=str(tmp_path))
    failed = raised.value.result
    assert (failed.state, failed.exit_code, failed.outcome) == ("FAILED", 3, "failed")
    assert scontrol_state(cluster, failed.job_id) == "FAILED"
    assert raised.value.message.startswith(f"job {failed.job_id} ({failing}) ended FAILED, exit code 3"), raised.value
    assert json.loads((failed.outputs / "job.json").read_text())["state"] == "FAILED"


def test_jobs_logs_and_cancel_of_a_job_launched_without_waiting(cluster, tmp_path):
    name = unique_job_name("api-long")
    submitted = slurm_train.launch(script=TRAINER, nodes="node110", nproc_per_node=1, job_name=name, wait=False,
                                   script_args="--steps 600 --step-sleep 0.5 --log-every 1",
                                   slurm_launch_outputs_dir=str(tmp_path))
    job_id = submitted.job_id
    try:
        assert not submitted.final and submitted.outputs is None
        assert submitted.state in ("PENDING", "CONFIGURING", "RUNNING"), submitted
        assert eventually(lambda: scontrol_state(cluster, job_id) == "RUNNING", 60)

        rows = {row["job"]: row for row in slurm_train.jobs(slurm_launch_outputs_dir=str(tmp_path))}
        assert rows[str(job_id)]["name"] == name and rows[str(job_id)]["state"] == "RUNNING", rows
        assert (rows[str(job_id)]["run"], rows[str(job_id)]["nodes"]) == ("1", "node110")

        # logs() follows until the job ends: in a thread, read live, while cancel() ends it.
        log_path = cluster.nas / "jobs" / "alice" / name / "runs" / "1" / f"{name}-{job_id}.out"
        before = max(map(int, re.findall(r"\[rank0\] step=(\d+) ", log_path.read_text())), default=0)
        lines, followed = queue.Queue(), {}

        def follow():
            try:
                followed["result"] = slurm_train.logs(job_id, on_line=lines.put, slurm_launch_logs_every=1)
            except Exception as error:  # noqa: BLE001 - the test reports it below
                followed["error"] = error
        follower = threading.Thread(target=follow, daemon=True)
        follower.start()
        steps, deadline = [], time.monotonic() + 120
        while not (steps and steps[-1] > before + 4) and time.monotonic() < deadline:
            try:
                line = lines.get(timeout=5)
            except queue.Empty:
                continue
            assert not line.startswith(f"  {job_id} |"), "on_line gets the log's own line, without the prefix"
            match = re.search(r"\[rank0\] step=(\d+) ", line)
            if match:
                steps.append(int(match.group(1)))
        assert steps and steps[-1] > before + 4, f"no live log lines of job {job_id} after step {before}: {steps}"
        assert steps == sorted(steps)
        assert scontrol_state(cluster, job_id) == "RUNNING", "the lines came while the job ran"

        with pytest.raises(slurm_train.LaunchError, match=rf"job {job_id} belongs to alice, not to bob"):
            slurm_train.cancel(job_id, user="bob", slurm_launch_outputs_dir=str(tmp_path))
        assert scontrol_state(cluster, job_id) == "RUNNING"

        cancelled = slurm_train.cancel(job_id, slurm_launch_outputs_dir=str(tmp_path))
        assert (cancelled.job_id, cancelled.state, cancelled.final) == (job_id, "CANCELLED", True)
        assert scontrol_state(cluster, job_id) == "CANCELLED"
        assert cancelled.outputs == tmp_path / f"{name}-{job_id}"
        assert "[rank0] step=" in (cancelled.outputs / f"{name}-{job_id}.out").read_text(), "the log was collected"
        assert "CANCELLED" in cancelled.summary

        follower.join(timeout=120)
        assert not follower.is_alive(), "logs() returns once the job has ended"
        assert "error" not in followed, followed.get("error")
        assert (followed["result"].job_id, followed["result"].final) == (job_id, True)
        assert followed["result"].state == "CANCELLED" and followed["result"].outputs is None
    finally:
        cluster.slurm("scancel", str(job_id), check=False)
