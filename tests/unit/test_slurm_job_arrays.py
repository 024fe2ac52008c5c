"""library/slurm_job.py following a job array (a sweep) as one job, from the recorded array of
fixtures/slurm/README.md (array 5, four tasks, at most two at once, task 2 failing)."""

import json
import os
import pwd
import pytest
from ansible_collections.hpc.slurm_train.plugins.modules import slurm_job
from test_slurm_job_module import clock, run_module, slurm_cli  # noqa: F401

RECORDED_DIR = "/var/lib/ansible-slurm-train/local/nas/jobs/alice/arrtest"
SCONTROL_5 = ["scontrol", "show", "job", "-o", "5"]
SQUEUE_SWEEP = ["squeue", "-h", "-u"]
SACCT_VERSION = ["sacct", "--version"]
SACCT_5 = ["sacct", "-j", "5", "-n", "-P", "-D", "-X", "-o",
           "JobID,JobName,State,ExitCode,Elapsed,NodeList,Reason,Start,End,WorkDir,Comment"]


@pytest.fixture
def array_output(slurm_output, tmp_path):
    """A recorded array record with its logs in tmp_path, each ending in a line naming its task."""
    for task in range(4):
        (tmp_path / f"sweep-rec-5_{task}.out").write_text(f"task {task}\ntraining step finished ({task})\n")

    def read(stage):
        return slurm_output(f"scontrol_show_job_array_{stage}.txt").replace(RECORDED_DIR, str(tmp_path))

    return read


def test_an_array_is_followed_until_every_task_is_final_and_fails_as_its_failed_task(
        slurm_cli, clock, array_output, tmp_path):
    script = tmp_path / "sweep-rec.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --array=0-3%2\n")
    slurm_cli.answer(SQUEUE_SWEEP)
    slurm_cli.answer(["sbatch"], out="5\n")
    for stage in ("pending", "pending", "running", "final"):
        slurm_cli.answer(SCONTROL_5, out=array_output(stage))

    outcome = run_module({"script": str(script), "job_name": "sweep-rec", "log_tail_lines": 1})

    result = outcome.result
    assert outcome.failed is True
    assert result["msg"] == "Slurm job 5 ended in state FAILED (exit code 1, signal 0, reason NonZeroExitCode)"
    assert (result["job_id"], result["state"], result["final"], result["tasks_done"], result["tasks_total"],
            result["log_task"]) == (5, "FAILED", True, 4, 4, 2)
    assert result["stdout_path"] == f"{tmp_path}/sweep-rec-5_2.out"
    assert result["log_tail"] == ["training step finished (2)"]
    # The user who submitted it (the module's), not the record's UserId; the nodes are every task's.
    assert result["user"] == pwd.getpwuid(os.geteuid()).pw_name and result["nodes"] == ["node110", "node111"]
    assert [(task["task"], task["job_id"], task["state"], task["exit_code"], task["final"], task["log_last_line"])
            for task in result["tasks"]] == [
        (0, 6, "COMPLETED", 0, True, "training step finished (0)"), (1, 7, "COMPLETED", 0, True, "training step finished (1)"),
        (2, 8, "FAILED", 1, True, "training step finished (2)"), (3, 5, "COMPLETED", 0, True, "training step finished (3)")]
    # Two tasks ending is a change (the schedule starts over), as a state change is.
    assert clock.sleeps == [1, 2, 1]


def test_a_task_ending_ends_a_progress_slice_and_the_next_carries_on(slurm_cli, clock, array_output):
    slurm_cli.identity = "0|sweep-rec\n0|sweep-rec\n"  # a line per task squeue lists
    slurm_cli.answer(SCONTROL_5, out=array_output("pending"))
    slurm_cli.answer(SCONTROL_5, out=array_output("running"))
    outcome = run_module({"job_id": 5, "return_on_change": True, "timeout": 30})
    result = outcome.result
    assert (outcome.failed, result["state"], result["tasks_done"], result["log_task"]) == (False, "RUNNING", 2, 2)
    assert result["progress"]["tasks_done"] == 2
    assert result["progress"]["log_path"].endswith("sweep-rec-5_2.out")
    assert [task["final"] for task in result["tasks"]] == [True, True, False, False]

    slurm_cli.answer(SCONTROL_5, out=array_output("final"))
    outcome = run_module({"job_id": 5, "return_on_change": True, "timeout": 30, "progress_from": result["progress"]})
    assert (outcome.result["state"], outcome.result["tasks_done"]) == ("FAILED", 4)


def test_a_pending_or_running_copy_of_an_array_is_followed_not_submitted_again(
        slurm_cli, clock, slurm_output, array_output, tmp_path):
    script = tmp_path / "sweep-rec.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --array=0-3%2\n")
    comment = "fingerprint:" + slurm_job.job_fingerprint("sweep-rec", script.read_bytes())
    # squeue lists the array's tasks one by one ("5_0") and its pending ones together ("5_[2-3%2]").
    slurm_cli.answer(SQUEUE_SWEEP, out=slurm_output("squeue_array.txt").replace("|(null)", f"|{comment}"))
    slurm_cli.answer(SCONTROL_5, out=array_output("final"))
    outcome = run_module({"script": str(script), "job_name": "sweep-rec", "force": False})
    assert (outcome.result["job_id"], outcome.result["found_existing"], outcome.result["submitted"]) == (5, True, False)
    assert not any(argv[0] == "sbatch" for argv in slurm_cli.argvs)


def test_an_array_only_accounting_knows_is_one_job_of_its_tasks_with_their_logs(slurm_cli, clock, slurm_output, tmp_path):
    for task in (0, 1):
        (tmp_path / f"sweep-rec-5_{task}.out").write_text(f"end of {task}\n")
    # sacct -X -D names an array's tasks ARRAY_TASK (the first ran twice: requeued), 22.05's fields.
    row = "|sweep-rec|{state}|{code}|00:00:0{seconds}|node110|{reason}|2026-12-04T13:05:58|2026-12-04T13:06:06|{dir}|\n"
    sacct = (f"5_0{row.format(state='REQUEUED', code='0:0', seconds=2, reason='None', dir=tmp_path)}"
             f"5_0{row.format(state='COMPLETED', code='0:0', seconds=4, reason='None', dir=tmp_path)}"
             f"5_1{row.format(state='TIMEOUT', code='0:0', seconds=9, reason='TimeLimit', dir=tmp_path)}")
    slurm_cli.answer(SCONTROL_5, rc=1, err="slurm_load_jobs error: Invalid job id specified\n")
    slurm_cli.answer(SACCT_VERSION, out=slurm_output("22.05/sacct_version.txt"))
    slurm_cli.answer(SACCT_5, out=sacct)
    result = run_module({"state": "query", "job_id": 5}).result
    assert (result["job_id"], result["state"], result["state_source"], result["restarts"], result["elapsed_seconds"],
            result["tasks_done"], result["log_task"]) == (5, "TIMEOUT", "sacct", 1, 9, 2, 1)
    assert [(task["task"], task["state"], task["restarts"], task["stdout_path"], task["log_last_line"])
            for task in result["tasks"]] == [
        (0, "COMPLETED", 1, f"{tmp_path}/sweep-rec-5_0.out", "end of 0"),
        (1, "TIMEOUT", 0, f"{tmp_path}/sweep-rec-5_1.out", "end of 1")]


def test_one_task_asked_for_by_its_own_id_is_a_plain_job(slurm_cli, clock, array_output):
    one = next(line for line in array_output("final").splitlines() if line.startswith("JobId=8 "))
    slurm_cli.identity = "0|sweep-rec\n"
    slurm_cli.answer(["scontrol", "show", "job", "-o", "8"], out=one + "\n")
    result = run_module({"state": "query", "job_id": 8}).result
    assert (result["job_id"], result["state"], result["tasks"], result["tasks_total"]) == (8, "FAILED", None, None)


@pytest.mark.parametrize("record, stopped", [
    ({"job_id": 8, "state": "NO_PROGRESS", "exit_code": 1, "step": 5, "checkpoint_step": 4},
     {"step": 5, "checkpoint_step": 4}),
    # Another job's record (an earlier run's point, the array's own id), or another end: not this point's stop.
    ({"job_id": 5, "state": "NO_PROGRESS", "exit_code": 1, "step": 5, "checkpoint_step": 4}, None),
    ({"job_id": 8, "state": "FAILED", "exit_code": 1}, None),
])
def test_a_point_its_script_stopped_no_progress_says_so_in_its_task(slurm_cli, clock, array_output, tmp_path,
                                                                    record, stopped):
    """Each point keeps its end record in points/<task>/ (the job script's RUN_DIR of a sweep): the
    failed task's own is read, as a plain job's beside its log."""
    slurm_cli.identity = "0|sweep-rec\n" * 4
    for task in range(4):
        (tmp_path / "points" / str(task)).mkdir(parents=True)
        # A completed point's record that says NO_PROGRESS is not read: only a failed task stopped.
        (tmp_path / "points" / str(task) / "run.json").write_text(json.dumps(
            record if task == 2 else {**record, "job_id": 6 + task if task < 3 else 5}))
    slurm_cli.answer(SCONTROL_5, out=array_output("final"))
    result = run_module({"job_id": 5}).result
    assert [(task["task"], task["no_progress"]) for task in result["tasks"]] == [
        (0, None), (1, None), (2, stopped), (3, None)]
    assert result["no_progress"] is None, "the array's own: its points stop one by one"


def test_a_points_record_planted_as_a_link_is_not_read(slurm_cli, clock, array_output, tmp_path):
    slurm_cli.identity = "0|sweep-rec\n" * 4
    (tmp_path / "points" / "2").mkdir(parents=True)
    (tmp_path / "elsewhere.json").write_text(json.dumps({"job_id": 8, "state": "NO_PROGRESS", "step": 5,
                                                         "checkpoint_step": 4}))
    (tmp_path / "points" / "2" / "run.json").symlink_to(tmp_path / "elsewhere.json")
    slurm_cli.answer(SCONTROL_5, out=array_output("final"))
    assert run_module({"job_id": 5}).result["tasks"][2]["no_progress"] is None
