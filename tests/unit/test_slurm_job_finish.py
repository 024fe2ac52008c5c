"""What library/slurm_job.py's answer carries for a final job, read in the run that saw the end:
the job script's NO_PROGRESS record, the run's end record (and the message when it cannot be
written), the node states after a node failure, and the files its launch brings back."""

import base64
import json
import os

from ansible_collections.hpc.slurm_train.plugins.modules import slurm_job

from test_slurm_job_module import (  # noqa: F401
    INVALID_JOB_ID, SACCT, SCONTROL, answer_sacct_version, clock, job_output, run_module, run_record_job,
    sacct_output, slurm_cli, staged_request,
)

FAILED = "Slurm job 1234 ended in state FAILED (exit code 3, signal 0, reason NonZeroExitCode)"
SINFO = ["sinfo", "-h", "-N", "-o", "%N|%P|%T|%c|%G"]


def jobs(tmp_path):
    return str(tmp_path / "jobs")


def test_a_failed_job_whose_script_stopped_it_without_progress_says_at_which_step(slurm_cli, clock, tmp_path,
                                                                                  job_output):
    run_dir = run_record_job(tmp_path, job_output, slurm_cli, state="failed")
    (run_dir / "train-ddp-1234.out").write_text("step 5: loss nan\n")
    (run_dir / "run.json").write_text(json.dumps({"job_id": 1234, "state": "NO_PROGRESS", "step": 5,
                                                  "checkpoint_step": 4}))
    outcome = run_module({"job_id": 1234, "run_records": jobs(tmp_path)})
    assert (outcome.failed, outcome.result["msg"]) == (True, FAILED)
    assert outcome.result["no_progress"] == {"step": 5, "checkpoint_step": 4}
    # The end record keeps the script's word for the next launch.
    assert json.loads((run_dir / "run.json").read_text()) == {
        "job_id": 1234, "state": "NO_PROGRESS", "exit_code": 3, "restarts": 0, "step": 5, "checkpoint_step": 4,
        "log_tail": ["step 5: loss nan"]}


def test_steps_that_are_no_whole_numbers_are_not_reported_as_steps(slurm_cli, clock, tmp_path, job_output):
    run_dir = run_record_job(tmp_path, job_output, slurm_cli, state="failed")
    (run_dir / "run.json").write_text(json.dumps({"job_id": 1234, "state": "NO_PROGRESS", "step": "5",
                                                  "checkpoint_step": True}))
    assert run_module({"job_id": 1234}).result["no_progress"] == {"step": None, "checkpoint_step": None}


def test_a_run_record_of_another_kind_or_job_is_no_stop_of_this_one(slurm_cli, clock, tmp_path, job_output):
    run_dir = run_record_job(tmp_path, job_output, slurm_cli, state="failed")
    for record in ([], {"job_id": 1234, "state": "FAILED", "step": 5},
                   {"job_id": 999, "state": "NO_PROGRESS", "step": 5, "checkpoint_step": 4}):
        (run_dir / "run.json").write_text(json.dumps(record))
        assert run_module({"job_id": 1234}).result["no_progress"] is None, record
        slurm_cli.answer(SCONTROL, out=job_output("failed", run_dir=str(run_dir)))
    slurm_cli.script.clear()


def test_a_run_record_planted_as_a_link_is_not_followed(slurm_cli, clock, tmp_path, job_output):
    run_dir = run_record_job(tmp_path, job_output, slurm_cli, state="failed")
    (tmp_path / "planted.json").write_text(json.dumps({"job_id": 1234, "state": "NO_PROGRESS", "step": 5,
                                                       "checkpoint_step": 4}))
    (run_dir / "run.json").symlink_to(tmp_path / "planted.json")
    assert run_module({"job_id": 1234}).result["no_progress"] is None


def test_a_run_record_that_cannot_be_written_is_the_tasks_whole_message(slurm_cli, clock, tmp_path, job_output):
    run_dir = run_record_job(tmp_path, job_output, slurm_cli)
    (run_dir / "run.json").mkdir()
    outcome = run_module({"job_id": 1234, "run_records": jobs(tmp_path)})
    assert (outcome.failed, outcome.result["msg"]) == (
        True, f"cannot write the run's end record {run_dir}/run.json: Is a directory")


def test_a_failed_job_whose_run_record_cannot_be_written_says_both(slurm_cli, clock, tmp_path, job_output):
    run_dir = run_record_job(tmp_path, job_output, slurm_cli, state="failed")
    (run_dir / "run.json").mkdir()
    outcome = run_module({"job_id": 1234, "run_records": jobs(tmp_path)})
    assert outcome.result["msg"] == f"{FAILED}; cannot write the run's end record {run_dir}/run.json: Is a directory"


def test_a_final_job_without_a_log_gets_no_run_record(slurm_cli, clock, sacct_output, slurm_output, tmp_path):
    slurm_cli.answer(SCONTROL, *INVALID_JOB_ID)
    answer_sacct_version(slurm_cli, slurm_output)
    slurm_cli.answer(SACCT, out=sacct_output("sacct_completed.txt", work_dir=str(tmp_path)))
    outcome = run_module({"state": "query", "job_id": 1234, "run_records": str(tmp_path)})
    assert (outcome.failed, outcome.result["stdout_path"], outcome.result["run_record"]) == (False, None, None)


def test_a_node_failure_whose_nodes_sinfo_cannot_show_still_reports_the_job(slurm_cli, clock, job_output):
    slurm_cli.answer(SCONTROL, out=job_output("node_fail"))
    slurm_cli.answer(SINFO, rc=1, err="sinfo: error: Access/permission denied\n")
    outcome = run_module({"job_id": 1234})
    assert outcome.result["state"] == "NODE_FAIL" and outcome.result["node_states"] == {}
    assert outcome.result["msg"].startswith("Slurm job 1234 ended in state NODE_FAIL")


def collected(result):
    return {path: base64.b64decode(text) for path, text in result["collected_files"].items()}


def test_a_missing_log_does_not_keep_the_script_from_being_collected(slurm_cli, clock, tmp_path, job_output):
    run_dir = run_record_job(tmp_path, job_output, slurm_cli)
    (run_dir / "train-ddp-1234.sbatch").write_text("#!/bin/bash\nsrun python train.py\n")
    result = run_module({"job_id": 1234, "run_records": jobs(tmp_path), "collect_files": True}).result
    assert collected(result) == {str(run_dir / "train-ddp-1234.sbatch"): b"#!/bin/bash\nsrun python train.py\n"}
    assert result["collected_skipped"] == {str(run_dir / "train-ddp-1234.out"): "No such file or directory"}


def test_collected_files_come_whole_up_to_8_mib_in_all(slurm_cli, clock, tmp_path, job_output):
    run_dir = run_record_job(tmp_path, job_output, slurm_cli)
    log = run_dir / "train-ddp-1234.out"
    log.write_bytes(b"x" * (8 << 20))
    result = run_module({"job_id": 1234, "run_records": jobs(tmp_path), "collect_files": True}).result
    assert len(collected(result)[str(log)]) == 8 << 20 and result["collected_truncated"] == {}
    log.write_bytes(b"y" + b"x" * (8 << 20))
    slurm_cli.answer(SCONTROL, out=job_output("completed", run_dir=str(run_dir)))
    os.unlink(run_dir / "run.json")
    result = run_module({"job_id": 1234, "run_records": jobs(tmp_path), "collect_files": True}).result
    assert collected(result)[str(log)] == b"x" * (8 << 20), "the last 8 MiB"
    assert result["collected_truncated"] == {str(log): (8 << 20) + 1}


def test_the_cost_joins_the_job_scripts_own_record_of_each_attempt(slurm_cli, clock, tmp_path, job_output):
    # The hang watchdog's line in attempts-<job id>.tsv beside the log: its suspects reach the ledger.
    run_dir = run_record_job(tmp_path, job_output, slurm_cli, state="failed")
    (run_dir / "attempts-1234.tsv").write_text("start\t0\t1700000000\t0\t-\t8\t16\n"
                                              "hang\t0\t1700000100\tnode111\t42\t-\n")
    cost = run_module({"job_id": 1234}).result["cost"]
    assert [attempt.get("hang") for attempt in cost["attempts"]] == [
        {"time": 1700000100, "suspect_nodes": ["node111"], "step": 42, "stack_dumps": [], "flight_recorder_dumps": []}]


def test_a_sweep_only_accounting_remembers_has_each_points_own_record_in_its_cost(slurm_cli, clock, tmp_path,
                                                                                slurm_output):
    # slurmctld forgot array 5; sacct names each task (5_0, 5_1) and its own job id (6, 7), and each
    # point's job script wrote its record in points/<task>/.
    slurm_cli.answer(["scontrol", "show", "job", "-o", "5"], *INVALID_JOB_ID)
    answer_sacct_version(slurm_cli, slurm_output)
    slurm_cli.answer(["sacct", "-j", "5", "-n", "-P", "-D", "-X"], out="".join(
        f"5_{task}|train-ddp|COMPLETED|0:0|00:00:05|rec1|None|2026-12-02T14:36:18|2026-12-02T14:36:23|{tmp_path}|\n"
        for task in (0, 1)))
    slurm_cli.cost = (0, "6|5_0|COMPLETED|5|cpu=2,gres/gpu=4|2026-12-02T14:36:10|2026-12-02T14:36:18\n"
                         "7|5_1|COMPLETED|5|cpu=2,gres/gpu=4|2026-12-02T14:36:10|2026-12-02T14:36:18\n", "")
    for task in (0, 1):
        (tmp_path / f"train-ddp-5_{task}.out").write_text(f"point {task}\n")
    (tmp_path / "points" / "1").mkdir(parents=True)
    (tmp_path / "points" / "1" / "attempts-7.tsv").write_text("start\t0\t1700000000\t0\t-\t4\t2\n"
                                                              "hang\t0\t1700000100\trec1\t42\t-\n")
    cost = run_module({"state": "query", "job_id": 5}).result["cost"]
    assert [(attempt["job_id"], attempt.get("hang")) for attempt in cost["attempts"]] == [
        (6, None), (7, {"time": 1700000100, "suspect_nodes": ["rec1"], "step": 42, "stack_dumps": [],
                        "flight_recorder_dumps": []})]


def test_the_job_scripts_record_is_read_up_to_its_first_64_kib(slurm_cli, clock, tmp_path, job_output):
    # Without accounting (a requeued job: no slurmctld figures, sacct disabled) the cost is the
    # record's own; a record grown past 64 KiB is cut there, here inside its one attempt's cpus.
    run_dir = tmp_path / "jobs" / "root" / "train-ddp" / "runs" / "3"
    run_dir.mkdir(parents=True)
    slurm_cli.answer(SCONTROL, out=job_output("failed", run_dir=str(run_dir)).replace("Restarts=0", "Restarts=1"))
    line = "start\t0\t1700000000\t0\t-\t8\t16"
    (run_dir / "attempts-1234.tsv").write_text("#" * (65536 - len(line) - 1) + "\n" + line + "7\n")
    cost = run_module({"job_id": 1234}).result["cost"]
    assert [(attempt["gpus"], attempt["cpus"]) for attempt in cost["attempts"]] == [(8, 16)]


def test_a_final_record_without_a_run_time_leaves_the_last_attempt_to_sacct(slurm_cli, clock, job_output, tmp_path):
    # No RunTime in slurmctld's record: nothing to complete sacct's last attempt with, so sacct is
    # asked again while it shows it running, and its own figures stand.
    record = job_output("failed", run_dir=str(tmp_path)).replace("Restarts=0", "Restarts=1").replace(
        "RunTime=00:00:00 ", "")
    slurm_cli.answer(SCONTROL, out=record)
    slurm_cli.cost = (0, "1234|1234|REQUEUED|30|cpu=16,gres/gpu=8|2026-12-07T10:00:00|2026-12-07T10:00:02\n"
                         "1234|1234|RUNNING|3|cpu=16,gres/gpu=8|2026-12-07T10:00:40|2026-12-07T10:00:41\n", "")
    result = run_module({"job_id": 1234, "accounting": "yes"}).result
    assert result["elapsed_seconds"] is None
    assert [(a["state"], a["elapsed_seconds"]) for a in result["cost"]["attempts"]] == [("REQUEUED", 30), ("RUNNING", 3)]
    assert len(slurm_cli.cost_calls) == slurm_job.COST_SACCT_LOOKS


def test_an_array_has_no_health_record_of_its_own(slurm_cli, clock, slurm_output, tmp_path):
    # Each task of a sweep has its own gate: a health file beside the shown task's log is not the array's.
    for task in range(4):
        (tmp_path / f"sweep-rec-5_{task}.out").write_text(f"task {task}\n")
    gate = {"restart": 0, "seconds": 4.2, "action": "pass", "message": "all nodes passed",
            "nodes": {"node110": {"seconds": 0.2}, "node111": {"seconds": 0.3}}, "named": []}
    for job_id in (5, 8):  # the array's id, and the shown task's own
        (tmp_path / f"health-{job_id}.jsonl").write_text(json.dumps(gate) + "\n")
    slurm_cli.identity = "0|sweep-rec\n"
    slurm_cli.answer(["scontrol", "show", "job", "-o", "5"], out=slurm_output("scontrol_show_job_array_final.txt")
                     .replace("/var/lib/ansible-slurm-train/local/nas/jobs/alice/arrtest", str(tmp_path)))
    result = run_module({"state": "query", "job_id": 5}).result
    assert result["tasks_total"] == 4 and result["health"] is None


def test_an_arrays_cost_without_accounting_has_each_points_own_record(slurm_cli, clock, slurm_output, tmp_path):
    # slurmctld still lists array 5 (task 2 is job 8); sacct does not answer: each point's record
    # in points/<task>/ is the ledger.
    for task in range(4):
        (tmp_path / f"sweep-rec-5_{task}.out").write_text(f"task {task}\n")
    (tmp_path / "points" / "2").mkdir(parents=True)
    (tmp_path / "points" / "2" / "attempts-8.tsv").write_text("start\t0\t1700000000\t0\t-\t4\t2\n"
                                                              "hang\t0\t1700000100\trec1\t42\t-\n")
    slurm_cli.identity = "0|sweep-rec\n"
    slurm_cli.answer(["scontrol", "show", "job", "-o", "5"], out=slurm_output("scontrol_show_job_array_final.txt")
                     .replace("/var/lib/ansible-slurm-train/local/nas/jobs/alice/arrtest", str(tmp_path)))
    cost = run_module({"state": "query", "job_id": 5}).result["cost"]
    assert [(attempt["job_id"], attempt.get("hang")) for attempt in cost["attempts"]] == [
        (8, {"time": 1700000100, "suspect_nodes": ["rec1"], "step": 42, "stack_dumps": [],
             "flight_recorder_dumps": []})]


def test_an_arrays_cost_takes_each_tasks_end_from_slurmctld_rather_than_wait_for_slurmdbd(
        slurm_cli, clock, slurm_output, tmp_path):
    # Each task ran once (Restarts=0); sacct still shows task 2 (job 8) running: slurmctld's record
    # of it (FAILED, 4 s) completes it, and sacct is asked once.
    for task in range(4):
        (tmp_path / f"sweep-rec-5_{task}.out").write_text(f"task {task}\n")
    slurm_cli.identity = "0|sweep-rec\n"
    slurm_cli.answer(["scontrol", "show", "job", "-o", "5"], out=slurm_output("scontrol_show_job_array_final.txt")
                     .replace("/var/lib/ansible-slurm-train/local/nas/jobs/alice/arrtest", str(tmp_path)))
    slurm_cli.cost = (0, "".join(f"{job}|5_{task}|{state}|{seconds}|cpu=2,gres/gpu=4|2026-12-02T14:36:10|"
                                 "2026-12-02T14:36:18\n"
                                 for job, task, state, seconds in ((6, 0, "COMPLETED", 5), (7, 1, "COMPLETED", 5),
                                                                   (8, 2, "RUNNING", 1), (5, 3, "COMPLETED", 4))), "")
    result = run_module({"state": "query", "job_id": 5, "accounting": "yes"}).result
    assert [(a["job_id"], a["state"], a["elapsed_seconds"]) for a in result["cost"]["attempts"]] == [
        (5, "COMPLETED", 4), (6, "COMPLETED", 5), (7, "COMPLETED", 5), (8, "FAILED", 4)]
    assert len(slurm_cli.cost_calls) == 1 and clock.sleeps == []


def test_a_nas_without_hard_links_keeps_no_copy_of_the_script_and_says_so(slurm_cli, clock, tmp_path, job_output,
                                                                         monkeypatch, capsys):
    def no_links(source, target, follow_symlinks=True):
        raise OSError(1, "Operation not permitted", source)

    monkeypatch.setattr(slurm_job.os, "link", no_links)
    slurm_cli.answer(["sbatch"], out="1234\n")
    slurm_cli.answer(SCONTROL, out=job_output("pending_resources"))
    outcome = run_module(staged_request(tmp_path))
    assert (outcome.failed, outcome.result["submitted"]) == (False, True), outcome.result.get("msg")
    kept = os.path.join(outcome.result["staged"]["run_dir"], "train-ddp-1234.sbatch")
    assert f"job 1234's script is not kept as {kept}: Operation not permitted" in capsys.readouterr().err


def test_collecting_files_leaves_none_of_them_open(slurm_cli, clock, tmp_path, job_output):
    run_dir = run_record_job(tmp_path, job_output, slurm_cli)
    (run_dir / "train-ddp-1234.out").write_text("[rank0] training complete\n")
    (run_dir / "train-ddp-1234.sbatch").write_text("#!/bin/bash\n")
    before = sorted(os.listdir("/proc/self/fd"))
    result = run_module({"job_id": 1234, "run_records": jobs(tmp_path), "collect_files": True}).result
    assert len(result["collected_files"]) == 2
    assert sorted(os.listdir("/proc/self/fd")) == before
