"""The restart budget is spent on progress only, on the default local cluster: a training that
keeps failing at the same step after its checkpoint is requeued once (that attempt advanced the
checkpoint), then stops as NO_PROGRESS with restarts to spare, and resume=auto does not resume it."""

import json

from launch import TRAINER, launch, unique_job_name
from test_runs import newest, run_dir, summary_line


def test_a_training_failing_at_the_same_step_stops_as_no_progress_with_restarts_to_spare(cluster, tmp_path):
    name = unique_job_name("noprogress")
    # Rank 0 saves at steps 2 and 4 and exits 3 at step 5, every attempt.
    request = ["nodes=node110", f"script={TRAINER}", "nproc_per_node=1", f"job_name={name}", "max_restarts=3",
               json.dumps({"script_args": "--steps 20 --log-every 1 --checkpoint-every 2 --fail-rank 0 --fail-at-step 5"})]
    proc = launch(tmp_path, *request)
    assert proc.returncode != 0, proc.stdout
    folder, job = newest(tmp_path, name)
    assert (job["state"], job["exit_code"], job["restarts"]) == ("FAILED", 3, 1), job
    assert job["no_progress"] == {"step": 5, "checkpoint_step": 4}
    log = (folder / f"{name}-{job['job_id']}.out").read_text()
    assert log.count("failing on purpose at step 5") == 2, "one attempt, one requeue, no more"
    assert "the checkpoint advanced from step none to 4: restart 1 of at most 3 resumes from it" in log
    assert ("NO_PROGRESS: failed at step 5 without advancing the checkpoint from step 4: not requeued "
            "(2 restarts left unused)") in log
    stopped = summary_line(folder, "stopped")
    assert stopped.startswith("NO_PROGRESS: failed at step 5 without advancing its checkpoint from step 4"), stopped
    assert "NO_PROGRESS: failed at step 5" in proc.stdout, "the launch's failure says it"
    record = json.loads((run_dir(cluster, name, 1) / "run.json").read_text())
    assert (record["state"], record["step"], record["checkpoint_step"], record["restarts"]) == ("NO_PROGRESS", 5, 4, 1)
    assert any("failing on purpose at step 5" in line for line in record["log_tail"]), record
    # Its cost: two attempts, step 5 trained twice; the default cluster's accounting, or the script's record.
    cost = job["cost"]
    accounting = cluster.slurm("sacct", "-n", "-X", "-j", str(job["job_id"]), check=False).returncode == 0
    assert cost["source"] == ("sacct" if accounting else
                              "the job script's own record (no accounting: sacct did not answer)"), cost
    # node110 has 8 GPUs (fake devices) and the job asks for them all.
    assert (len(cost["attempts"]), cost["steps_redone"], cost["unit"]) == (2, 1, "GPU"), cost
    assert [attempt["gpus"] for attempt in cost["attempts"]] == [8, 8], cost
    assert all(attempt["elapsed_seconds"] > 0 for attempt in cost["attempts"]), cost
    assert cost["attempts"][1]["lost_seconds"] == cost["attempts"][1]["elapsed_seconds"], "nothing of it saved"
    assert summary_line(folder, "cost").startswith(f"{cost['hours']} GPU-hours over 2 attempts, {cost['lost_hours']} lost")
    # The same request again: not resumed blindly, nothing submitted.
    again = launch(tmp_path, *request)
    assert again.returncode != 0
    assert "run 1 of this request stopped NO_PROGRESS: it failed at step 5 again" in again.stdout, again.stdout[-3000:]
    assert newest(tmp_path, name)[1]["job_id"] == job["job_id"]
