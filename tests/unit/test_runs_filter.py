"""The runs filters: which run a launch was, in words (the summary's `run` line), and the table
of a user's jobs that jobs.yml prints (Slurm's pending/running jobs with the collected ones)."""

from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.hpc.slurm_train.plugins.filter import runs

LOG = "/nas/jobs/alice/train_ddp/runs/{run}/train_ddp-{job}.out"


def finished(job_id, run=1, state="COMPLETED", exit_code=0, **extra):
    """A job.json as collect.yml writes it, with its outputs folder."""
    return {"job_id": job_id, "name": "train_ddp", "state": state, "exit_code": exit_code, "nodes": ["node110", "node111"],
            "elapsed_seconds": 75, "restarts": 0, "stdout_path": LOG.format(run=run, job=job_id),
            "outputs": f"/ctl/outputs/train_ddp-{job_id}", **extra}


def squeued(job_id, state="RUNNING", reason=None, run=2, elapsed="1:05"):
    """A job of slurm_job state=list (parse_my_jobs)."""
    return {"job_id": job_id, "name": "train_ddp", "state": state, "reason": reason, "nodes": "node[110-111]",
            "elapsed": elapsed, "work_dir": f"/nas/jobs/alice/train_ddp/runs/{run}"}


@pytest.mark.parametrize("path, run", [(LOG.format(run=3, job=9), 3), ("/nas/jobs/alice/t/runs/12/", 12),
                                       ("/nas/jobs/alice/t/t-9.out", None), ("/x/runs/0/t.out", None), (None, None)])
def test_run_of_path(path, run):
    assert runs.run_of_path(path) == run


@pytest.mark.parametrize("staged, outcome, line", [
    ({"run_id": 3, "resumed": False}, {}, "fresh run 3"),
    ({"run_id": 2, "resumed": True, "resumed_step": 30}, {}, "resumed run 2 from its checkpoint at step 30"),
    ({"run_id": 2, "resumed": True, "resumed_step": None}, {}, "resumed run 2 (no checkpoint of it yet: it starts over)"),
    ({"run_id": 2, "resumed": True, "resumed_step": 4}, {"found_existing": True},
     "run 2, already pending or running: followed, not submitted again"),
    ({"run_id": 2, "resumed": False, "other_request": "run 1 is another request: --lr 0.1, not --lr 0.01"}, {},
     "fresh run 2 (run 1 is another request: --lr 0.1, not --lr 0.01)"),
    ({"run_id": 1, "resumed": True, "resumed_step": 22, "other_request": "run 2 is another request: --lr 0.01, not --lr 0.1"},
     {}, "resumed run 1 from its checkpoint at step 22 (run 2 is another request: --lr 0.01, not --lr 0.1)"),
    ({"run_id": 1, "resumed": True, "resumed_step": 22, "request_differences": ["--steps 150, not --steps 30", "num_nodes 2, not 1"]},
     {}, "resumed run 1 from its checkpoint at step 22 (force: it is another request: --steps 150, not --steps 30; "
         "num_nodes 2, not 1)"),
    ({}, {"stdout_path": LOG.format(run=5, job=1)}, "run 5"),  # followed by job id
    ({"skipped": True}, {"stdout_path": "/home/alice/slurm-1.out"}, "-"),
])
def test_run_line(staged, outcome, line):
    assert runs.run_line(staged, outcome) == line


def test_the_table_lists_slurms_and_collected_jobs_newest_first():
    lines = runs.jobs_table([squeued(12, "PENDING", "JobHeldUser", run=3, elapsed="0:00"), squeued(11)],
                            [finished(10, run=1), finished(9, state="TIMEOUT", exit_code=0, restarts=2, elapsed_seconds=3725)])
    assert [line.split()[:4] for line in lines] == [
        ["job", "name", "run", "state"], ["12", "train_ddp", "3", "PENDING"], ["11", "train_ddp", "2", "RUNNING"],
        ["10", "train_ddp", "1", "COMPLETED"], ["9", "train_ddp", "1", "TIMEOUT"]]
    assert "PENDING (JobHeldUser)" in lines[1]
    assert lines[3].split()[4:] == ["0", "node110,node111", "1:15", "0", "-", "/ctl/outputs/train_ddp-10"]
    assert lines[4].split()[4:7] == ["0", "node110,node111", "1:02:05"]
    # Columns line up: each row's state starts where the header's does.
    assert len({line.index(word) for line, word in zip(lines, ["state", "PENDING", "RUNNING", "COMPLETED", "TIMEOUT"])}) == 1


def test_a_job_slurm_still_has_is_shown_as_slurm_has_it():
    # A requeued job collected earlier (wait=false, then followed): its job.json is older than Slurm's word.
    lines = runs.jobs_table([squeued(10, "PENDING", "BeginTime", run=1)], [finished(10, state="TIMEOUT")])
    assert len(lines) == 2 and "PENDING (BeginTime)" in lines[1] and "TIMEOUT" not in lines[1]


def test_the_newest_20_unless_all():
    jobs = [finished(job_id) for job_id in range(1, 26)]
    lines = runs.jobs_table([], jobs)
    assert len(lines) == 22 and lines[1].startswith("25 ") and lines[20].startswith("6 ")
    assert lines[-1] == "... and 5 older jobs (-e all=true shows them)"
    assert len(runs.jobs_table([], jobs, show_all=True)) == 26


def test_no_jobs_says_so_and_het_job_components_and_broken_records_are_left_out():
    lines = runs.jobs_table([{**squeued(1), "job_id": "7+1"}], [{"job_id": "x"}, "not a dict"])
    assert lines[1].startswith("(no jobs:")
    with pytest.raises(AnsibleFilterError, match="two lists"):
        runs.jobs_table({}, [])


def test_collected_jobs_are_the_users_with_their_folder(tmp_path):
    import json
    paths = [f"/ctl/outputs/train_ddp-{n}/job.json" for n in (1, 2, 3, 4)]
    texts = [json.dumps({**finished(1), "user": "alice"}), json.dumps({**finished(2), "user": "bob"}),
             "{not json", json.dumps({**finished(4), "user": None})]
    jobs = runs.collected_jobs(paths, texts, "alice")
    assert [(job["job_id"], job["outputs"]) for job in jobs] == [(1, "/ctl/outputs/train_ddp-1"), (4, "/ctl/outputs/train_ddp-4")]
    assert len(runs.collected_jobs(paths, texts)) == 3


@pytest.mark.parametrize("elapsed, shown", [("1-02:03:04", "26:03:04"), ("2:03:04", "2:03:04"), ("59:59", "59:59"),
                                            ("3:04", "3:04"), ("INVALID", "-")])
def test_squeues_elapsed_is_shown_as_hours_minutes_seconds(elapsed, shown):
    # squeue's %M: days-hours:minutes:seconds, the leading parts left out while they are zero.
    row = runs.jobs_table([squeued(11, elapsed=elapsed)], [])[1].split()
    assert row[3:6] == ["RUNNING", "-", "node[110-111]"] and row[6] == shown


def test_a_job_without_a_reason_is_shown_by_its_state_alone():
    # parse_my_jobs gives reason None where squeue prints "None" (a job that ends: COMPLETING).
    row = runs.jobs_table([squeued(11, "COMPLETING")], [])[1].split()
    assert row[3:5] == ["COMPLETING", "-"]


def test_a_finished_job_without_its_elapsed_time_shows_a_dash():
    row = runs.jobs_table([], [finished(10, elapsed_seconds=None)])[1].split()
    assert row[4:8] == ["0", "node110,node111", "-", "0"]


@pytest.mark.parametrize("cost, shown", [
    ({"hours": 0.0133, "lost_hours": 0.0067, "unit": "GPU"}, "0.0133 GPU-h (0.0067 lost)"),
    # Nothing lost is not said; a CPU job's hours are CPU-hours.
    ({"hours": 0.0889, "lost_hours": 0.0, "unit": "CPU"}, "0.0889 CPU-h"),
])
def test_a_finished_jobs_cost_is_its_hours_and_what_was_lost(cost, shown):
    row = runs.jobs_table([], [finished(10, cost=cost)])[1]
    assert f" {shown} " in row and row.count("lost") == shown.count("lost"), row


@pytest.mark.parametrize("cost", [None, {"hours": None, "lost_hours": 0.5}, "0.1"])
def test_a_finished_job_without_a_cost_shows_a_dash(cost):
    row = runs.jobs_table([], [finished(10, cost=cost)])[1].split()
    assert row[7:9] == ["0", "-"] and "-h" not in " ".join(row), row


def test_broken_records_before_good_ones_leave_the_good_ones_shown():
    lines = runs.jobs_table([{**squeued(8), "job_id": "7+1"}, squeued(11)], [{"job_id": "x"}, finished(10)])
    assert [line.split()[0] for line in lines[1:]] == ["11", "10"]


def test_a_sweeps_tasks_are_a_row_each_sorted_with_their_array():
    # squeue lists a sweep's running tasks one by one and its pending ones together.
    active = [{**squeued(12), "job_id": "12_[2-3%2]"}, {**squeued(12), "job_id": "12_0"},
              {**squeued(12), "job_id": "12_1"}, squeued(13), squeued(9)]
    lines = runs.jobs_table(active, [finished(10)])
    assert [line.split()[0] for line in lines[1:]] == ["13", "12_[2-3%2]", "12_1", "12_0", "10", "9"]
