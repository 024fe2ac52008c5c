"""job_outputs (the slurm_job action plugin's collect): a finished job's outputs written on the
controller from the module's last answer (a file it did not return is never fetched instead),
job.json and summary.txt made there, 0700/0600, the summary shown, and a job that did not
succeed given its failure message; check mode writes nothing; a rerun changes nothing.

The submit host is a stand-in: its fetch_file copies a file of this machine, as the ssh
connection's sftp transfer does (following links), so that a fetch would show."""

import base64
import errno
import json
import shutil
from types import SimpleNamespace

import pytest
from ansible.errors import AnsibleError

from conftest import PROJECT_ROOT

from ansible_collections.hpc.slurm_train.plugins.plugin_utils import job_outputs


class SubmitHost:
    become = None

    def __init__(self):
        self.fetched = []

    def fetch_file(self, remote, local):
        self.fetched.append(remote)
        try:
            shutil.copyfile(remote, local)
        except OSError as error:
            raise AnsibleError(f"failed to transfer file to {local}: {error}") from None


class Shown:
    def __init__(self):
        self.lines = []

    def display(self, line):
        self.lines.append(line)


def no_module(*_, **__):
    raise AssertionError("collecting ran a module")


@pytest.fixture
def nas(tmp_path):
    run = tmp_path / "nas" / "jobs" / "alice" / "train" / "runs" / "1"
    run.mkdir(parents=True)
    (run / "train-7.out").write_text("[rank0] training complete\n")
    (run / "train-7.sbatch").write_text("#!/bin/bash\n")
    return run


def finished(run, **overrides):
    """The slurm_job module's answer for job 7, final."""
    job = {"job_id": 7, "name": "train", "user": "alice", "partition": "gpu", "state": "COMPLETED",
           "outcome": "succeeded", "exit_code": 0, "exit_signal": 0, "reason": None, "nodes": ["node110", "node111"],
           "elapsed_seconds": 12, "restarts": 0, "stdout_path": str(run / "train-7.out"),
           "stderr_path": str(run / "train-7.out"), "log_tail": ["[rank0] training complete"], "final": True,
           "submitted": True, "found_existing": False, "tasks": None, "tasks_done": None, "tasks_total": None,
           "node_states": None, "collected_files": {}}
    job.update(overrides)
    return job


STAGED = {"run_id": 1, "resumed": False, "code": {"hash": "abc123", "files": 3, "copied": True, "git_commit": ""}}


def collect(tmp_path, job, check_mode=False, **options):
    host, shown = SubmitHost(), Shown()
    action = SimpleNamespace(_connection=host, _task=SimpleNamespace(check_mode=check_mode), _execute_module=no_module)
    options = {"outputs_dir": str(tmp_path / "outputs"), "jobs_dir": str(tmp_path / "nas" / "jobs"), "points": [],
               "cancelled": False, "private": False, **options}
    collected, failure = job_outputs.collect(action, job, options, STAGED, {}, shown)
    return collected, failure, host, shown


def test_the_files_the_module_returned_are_written_with_no_transfer_and_the_summaries_made(tmp_path, nas):
    job = finished(nas, collected_files={str(nas / name): base64.b64encode((nas / name).read_bytes()).decode()
                                         for name in ("train-7.out", "train-7.sbatch")})
    (nas / "train-7.out").write_text("changed on the NAS since the module read it\n")
    collected, failure, host, shown = collect(tmp_path, job)
    outputs = tmp_path / "outputs" / "train-7"
    assert (collected["dest"], collected["changed"], failure, host.fetched) == (str(outputs), True, None, [])
    assert sorted(p.name for p in outputs.iterdir()) == ["job.json", "summary.txt", "train-7.out", "train-7.sbatch"]
    assert (outputs / "train-7.out").read_text() == "[rank0] training complete\n", "what the module read"
    record = json.loads((outputs / "job.json").read_text())
    assert (record["state"], record["run"], record["run_line"], record["failed_nodes"]) == ("COMPLETED", 1, "fresh run 1", "")
    assert record["code"]["hash"] == "abc123" and "collected_files" not in record and "final" not in record
    summary = (outputs / "summary.txt").read_text()
    assert summary == "\n".join(shown.lines) + "\n"
    assert shown.lines[:4] == ["job        7 (train)", "run        fresh run 1", "state      COMPLETED, exit code 0",
                               "nodes      node110,node111"]
    assert "code       code abc123 (3 files) copied to the NAS" in shown.lines
    assert outputs.stat().st_mode & 0o777 == 0o700
    assert {path.name: path.stat().st_mode & 0o777 for path in outputs.iterdir()} == dict.fromkeys(
        ["job.json", "summary.txt", "train-7.out", "train-7.sbatch"], 0o600)
    again, _, _, _ = collect(tmp_path, job)
    assert again["changed"] is False, "a rerun changes nothing"


def test_a_file_the_module_did_not_return_is_never_fetched_and_the_summary_says_why(tmp_path, nas):
    (tmp_path / "canary").write_text("root's alone\n")
    (nas / "train-7.sbatch").unlink()
    (nas / "train-7.sbatch").symlink_to(tmp_path / "canary")
    log = nas / "train-7.out"
    job = finished(nas, collected_files={str(log): base64.b64encode(b"complete\n").decode()},
                   collected_truncated={str(log): 70000000},
                   collected_skipped={str(nas / "train-7.sbatch"): "a link or not a directory on the way"})
    collected, _, host, shown = collect(tmp_path, job)
    outputs = tmp_path / "outputs" / "train-7"
    assert host.fetched == [] and collected["not_fetched"] == [str(nas / "train-7.sbatch")]
    assert sorted(path.name for path in outputs.iterdir()) == ["job.json", "summary.txt", "train-7.out"]
    assert "cut        train-7.out: its last part only, 70000000 bytes on the NAS (over what a collect brings back)" \
        in shown.lines
    assert f"left out   {nas / 'train-7.sbatch'}: a link or not a directory on the way" in shown.lines


def test_an_existing_folder_is_narrowed_and_a_link_in_it_replaced_not_followed(tmp_path, nas):
    outputs = tmp_path / "outputs" / "train-7"
    outputs.mkdir(parents=True, mode=0o755)
    outputs.chmod(0o755)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("not to be written\n")
    (outputs / "summary.txt").symlink_to(elsewhere)
    collect(tmp_path, finished(nas))
    assert outputs.stat().st_mode & 0o777 == 0o700
    assert not (outputs / "summary.txt").is_symlink() and elsewhere.read_text() == "not to be written\n"


def test_an_outputs_folder_that_is_a_link_is_refused(tmp_path, nas):
    (tmp_path / "outputs").mkdir()
    (tmp_path / "outputs" / "train-7").symlink_to(tmp_path)
    with pytest.raises(AnsibleError, match="is not a directory \\(a link or a file is there\\)"):
        collect(tmp_path, finished(nas))


def test_only_the_jobs_own_directory_under_the_users_jobs_comes_back(tmp_path, nas):
    elsewhere = tmp_path / "etc" / "shadow.out"
    assert job_outputs._rules.collected_paths(finished(nas, stdout_path=str(elsewhere)), str(tmp_path / "nas" / "jobs")) == []
    sneaky = finished(nas, tasks=[{"task": 0, "stdout_path": str(nas / ".." / ".." / "other.out")}])
    assert str(nas.parents[1] / "other.out") not in job_outputs._rules.collected_paths(sneaky, str(tmp_path / "nas" / "jobs"))
    assert job_outputs._rules.collected_paths(finished(nas, user="bob"), str(tmp_path / "nas" / "jobs")) == []


def test_a_failed_job_gets_its_message_with_failed_nodes_and_log_tail(tmp_path, nas):
    job = finished(nas, state="NODE_FAIL", outcome="node_failure", exit_code=0, reason="NodeDown",
                   node_states={"node110": {"state": "allocated", "markers": ""}, "node111": {"state": "down", "markers": "*"}},
                   log_tail=["step=5", "srun: error: node111: task 1: Killed"])
    collected, failure, _, shown = collect(tmp_path, job)
    outputs = tmp_path / "outputs" / "train-7"
    assert failure == (f"job 7 (train) ended NODE_FAIL, exit code 0, reason NodeDown; failed nodes: node111 (down*); "
                       f"outputs in {outputs}\nlast lines of {nas / 'train-7.out'}:\nstep=5\nsrun: error: node111: task 1: Killed")
    assert json.loads((outputs / "job.json").read_text())["failed_nodes"] == "node111 (down*)"
    assert "failed     node111 (down*)" in shown.lines


def test_a_job_cancelled_as_asked_is_no_failure(tmp_path, nas):
    _, failure, _, _ = collect(tmp_path, finished(nas, state="CANCELLED", outcome="cancelled"), cancelled=True)
    assert failure is None


def test_check_mode_predicts_and_writes_nothing(tmp_path, nas):
    collected, _, _, _ = collect(tmp_path, finished(nas), check_mode=True)
    assert collected["changed"] is True and not (tmp_path / "outputs").exists()


def test_a_link_where_the_outputs_folder_goes_is_refused(tmp_path, nas):
    target = tmp_path / "someone-elses"
    target.mkdir()
    (tmp_path / "outputs").mkdir()
    (tmp_path / "outputs" / "train-7").symlink_to(target)
    with pytest.raises(AnsibleError, match=r"is not a directory \(a link or a file is there\)"):
        collect(tmp_path, finished(nas))
    assert list(target.iterdir()) == []


def test_a_job_name_from_slurm_makes_one_path_component(tmp_path, nas):
    assert job_outputs.outputs_folder("/out", {"name": "../x y", "job_id": 7}) == "/out/.._x_y-7"


def test_a_job_not_final_yet_and_check_modes_prediction_are_one_line_each(nas):
    job = finished(nas, final=False, state="PENDING", outcome=None)
    assert job_outputs.report_line(job, STAGED, False) == (
        "Job 7 (train) submitted, state PENDING, code abc123 (3 files) copied to the NAS. "
        "Follow it with: ansible-playbook launch.yml -e job_id=7")
    assert job_outputs.report_line({**job, "submitted": False, "found_existing": True}, {}, False) == (
        "Job 7 (train) already pending or running: following it, state PENDING. "
        "Follow it with: ansible-playbook launch.yml -e job_id=7")
    predicted = {"job_id": None, "test_only": {"start": "2026-12-06T03:00:00", "nodes": ["node110", "node111"],
                                               "partition": "gpu"}}
    assert job_outputs.report_line(predicted, STAGED, True) == (
        "Slurm would start the job at 2026-12-06T03:00:00 on node110,node111 in partition gpu")


RECORDED_LOGS = PROJECT_ROOT / "tests" / "unit" / "fixtures" / "logs"


def test_a_failed_job_says_which_rank_raised_what_in_its_record_summary_and_message(tmp_path, nas):
    # A real log of the local cluster (4 ranks on 2 nodes): rank 1 raised, the others then failed in all_reduce.
    log = (RECORDED_LOGS / "raise-on-rank-1.out").read_bytes()
    (nas / "train-7.out").write_bytes(log)
    job = finished(nas, state="FAILED", outcome="failed", exit_code=1, reason="NonZeroExitCode",
                   log_tail=["training step finished with exit code 1"],
                   collected_files={str(nas / "train-7.out"): base64.b64encode(log).decode()})
    collected, failure, _, shown = collect(tmp_path, job)
    outputs = tmp_path / "outputs" / "train-7"
    record = json.loads((outputs / "job.json").read_text())
    assert {key: record["failure"][key] for key in ("rank", "node", "type", "message")} == {
        "rank": 1, "node": "node110", "type": "ValueError", "message": "bad batch at step 3: 31 rows, expected 32"}
    raised = "rank 1 on node110 raised ValueError: bad batch at step 3: 31 rows, expected 32"
    assert f"failure    {raised}" in shown.lines
    assert '    raise ValueError(f"bad batch at step {step}: {batch} rows, expected 32")' in "\n".join(shown.lines)
    assert failure.splitlines()[1] == raised, "the exception comes before the log's last lines"
    assert failure.splitlines()[-1] == "training step finished with exit code 1"


def test_without_the_collected_log_the_failure_is_read_from_the_log_tail(tmp_path, nas):
    tail = (RECORDED_LOGS / "missing-import.out").read_text().splitlines()[-40:]
    job = finished(nas, state="FAILED", outcome="failed", exit_code=1, log_tail=tail)
    _, failure, _, _ = collect(tmp_path, job)
    assert "rank 0 on node110 raised ModuleNotFoundError: No module named 'numpy_not_installed_here'" in failure


def test_a_succeeded_job_and_a_log_without_a_traceback_have_no_failure(tmp_path, nas):
    assert job_outputs.job_failure(finished(nas, log_tail=["Traceback (most recent call last):", '  File "x.py", '
                                                           "line 1, in <module>", "ValueError: printed, not raised"])) is None
    killed = finished(nas, state="FAILED", outcome="failed", exit_code=137,
                      log_tail=["step=5", "srun: error: node111: task 1: Killed"])
    _, failure, _, shown = collect(tmp_path, killed)
    assert json.loads((tmp_path / "outputs" / "train-7" / "job.json").read_text())["failure"] is None
    assert not [line for line in shown.lines if line.startswith("failure")] and " raised " not in failure


def test_the_summary_shows_the_exception_as_python_does_under_its_own_heading(nas, monkeypatch):
    failure = {"rank": 1, "node": "node110", "type": "ValueError", "message": "bad",
               "traceback": ['File "train.py", line 3, in <module>', "main()",
                             'File "train.py", line 2, in main', 'raise ValueError("bad")']}
    monkeypatch.setattr(job_outputs, "job_failure", lambda job: failure)
    _, lines, _ = job_outputs.report(finished(nas, state="FAILED", outcome="failed", exit_code=1), STAGED, [], "/out")
    start = lines.index("failure    rank 1 on node110 raised ValueError: bad")
    assert lines[start + 1:start + 5] == ['             File "train.py", line 3, in <module>', "               main()",
                                          '             File "train.py", line 2, in main',
                                          '               raise ValueError("bad")']


@pytest.mark.parametrize("overrides, submitted", [
    ({}, "yes"),
    ({"submitted": False, "found_existing": True}, "no: found pending or running: not submitted again"),
    ({"submitted": False}, "no: followed by job id"),
])
def test_the_summary_says_whether_this_launch_submitted_the_job(nas, overrides, submitted):
    _, lines, _ = job_outputs.report(finished(nas, **overrides), STAGED, [], "/out")
    assert f"submitted  {submitted}" in lines


@pytest.mark.parametrize("stopped, words", [
    ({"step": 5, "checkpoint_step": 4}, "NO_PROGRESS: failed at step 5 without advancing its checkpoint from step 4"),
    ({"step": None, "checkpoint_step": 4}, "NO_PROGRESS: failed without advancing its checkpoint from step 4"),
])
def test_a_job_its_script_stopped_says_at_which_step(nas, stopped, words):
    job = finished(nas, state="FAILED", outcome="failed", exit_code=1, restarts=2, no_progress=stopped)
    _, lines, _ = job_outputs.report(job, STAGED, [], "/out")
    assert f"stopped    {words}: not requeued again (restart 2)" in " ".join(lines)


def test_a_sweep_reports_each_point_with_its_arguments_and_the_ones_that_did_not_complete(tmp_path, nas):
    tasks = [{"task": 0, "job_id": 8, "state": "COMPLETED", "exit_code": 0, "elapsed_seconds": 10,
              "log_last_line": "done", "stdout_path": str(nas / "train-7_0.out")},
             {"task": 1, "job_id": 9, "state": "FAILED", "exit_code": 1, "elapsed_seconds": 4,
              "log_last_line": "boom", "stdout_path": str(nas / "train-7_1.out")}]
    job = finished(nas, state="FAILED", outcome="failed", exit_code=1, tasks=tasks, tasks_done=2, tasks_total=2)
    _, failure, _, shown = collect(tmp_path, job, points=[[["lr", 0.1]], [["lr", 0.01]]])
    assert "points     2 of 2 final, 1 completed" in shown.lines
    assert [line.split() for line in shown.lines if line.startswith("  ")][1:] == [
        ["0", "lr=0.1", "COMPLETED", "0", "10", "done"], ["1", "lr=0.01", "FAILED", "1", "4", "boom"]]
    assert "\npoints that did not complete: point 1 (lr=0.01) ended FAILED, exit code 1\nlast lines of " in failure
    record = json.loads((tmp_path / "outputs" / "train-7" / "job.json").read_text())
    assert [(row["task"], row["args"]) for row in record["points"]] == [(0, "lr=0.1"), (1, "lr=0.01")]


def test_a_sweeps_point_its_script_stopped_is_named_with_its_step_as_a_job_is(tmp_path, nas):
    """A point stopped NO_PROGRESS says so in the playbook's failure, summary.txt and job.json, in
    the words of a job stopped so; a point that failed otherwise says what it did before."""
    stopped = {"step": 5, "checkpoint_step": 4}
    tasks = [{"task": 0, "job_id": 8, "state": "FAILED", "exit_code": 1, "elapsed_seconds": 10, "restarts": 1,
              "log_last_line": "x", "stdout_path": str(nas / "train-7_0.out"), "no_progress": stopped},
             {"task": 1, "job_id": 9, "state": "FAILED", "exit_code": 1, "elapsed_seconds": 4, "restarts": 0,
              "log_last_line": "boom", "stdout_path": str(nas / "train-7_1.out"), "no_progress": None}]
    job = finished(nas, state="FAILED", outcome="failed", exit_code=1, tasks=tasks, tasks_done=2, tasks_total=2)
    _, failure, _, shown = collect(tmp_path, job, points=[[["lr", 0.1]], [["lr", 0.01]]])
    words = ("NO_PROGRESS: failed at step 5 without advancing its checkpoint from step 4: not requeued again "
             "(restart 1)")
    assert words == job_outputs.stopped_words({"no_progress": stopped, "restarts": 1}), "one home for the words"
    assert (f"\npoints that did not complete: point 0 (lr=0.1) ended FAILED, exit code 1; {words}; "
            "point 1 (lr=0.01) ended FAILED, exit code 1\nlast lines of ") in failure
    assert f"stopped    point 0 (lr=0.1): {words}" in shown.lines
    assert [line for line in shown.lines if line.startswith("stopped")] == [f"stopped    point 0 (lr=0.1): {words}"]
    record = json.loads((tmp_path / "outputs" / "train-7" / "job.json").read_text())
    assert [(row["task"], row["no_progress"]) for row in record["points"]] == [(0, stopped), (1, None)]


def test_a_plain_jobs_summary_has_no_sweep_lines(tmp_path, nas):
    _, _, _, shown = collect(tmp_path, finished(nas))
    assert not [line for line in shown.lines if line.startswith(("points", "  "))]


def test_a_file_where_the_outputs_folder_goes_is_refused_and_left_as_it_was(tmp_path, nas):
    (tmp_path / "outputs").mkdir()
    there = tmp_path / "outputs" / "train-7"
    there.write_text("someone's notes\n")
    there.chmod(0o644)
    with pytest.raises(AnsibleError, match=r"is not a directory \(a link or a file is there\)"):
        collect(tmp_path, finished(nas))
    assert (there.read_text(), there.stat().st_mode & 0o777) == ("someone's notes\n", 0o644)


def test_a_link_planted_at_the_temporary_name_is_not_written_through(tmp_path, nas, monkeypatch):
    monkeypatch.setattr(job_outputs.os, "urandom", lambda n: b"\x0a\x0b\x0c\x0d")
    outputs = tmp_path / "outputs" / "train-7"
    outputs.mkdir(parents=True, mode=0o700)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("not to be written\n")
    (outputs / ".job.json.partial-0a0b0c0d").symlink_to(elsewhere)
    with pytest.raises(FileExistsError):
        collect(tmp_path, finished(nas))
    assert elsewhere.read_text() == "not to be written\n"


def test_jobs_collected_one_after_another_share_the_outputs_directory(tmp_path, nas):
    collect(tmp_path, finished(nas))
    collect(tmp_path, finished(nas, job_id=8))
    assert sorted(p.name for p in (tmp_path / "outputs").iterdir()) == ["train-7", "train-8"]


def test_a_folder_made_at_the_same_moment_by_another_collect_is_used(tmp_path, nas, monkeypatch):
    real_mkdir = job_outputs.os.mkdir

    def racing_mkdir(path, mode=0o777):
        real_mkdir(path, mode)
        raise FileExistsError(17, "File exists", path)

    monkeypatch.setattr(job_outputs.os, "mkdir", racing_mkdir)
    collected, _, _, _ = collect(tmp_path, finished(nas))
    assert (tmp_path / "outputs" / "train-7" / "job.json").is_file() and collected["changed"] is True


def test_a_rerun_reports_a_change_only_when_it_makes_one(tmp_path, nas):
    outputs = tmp_path / "outputs" / "train-7"
    collect(tmp_path, finished(nas))
    outputs.chmod(0o755)
    widened, _, _, _ = collect(tmp_path, finished(nas))
    assert widened["changed"] is True and outputs.stat().st_mode & 0o777 == 0o700
    predicted, _, _, _ = collect(tmp_path, finished(nas, elapsed_seconds=13), check_mode=True)
    assert predicted["changed"] is True and '"elapsed_seconds": 12' in (outputs / "job.json").read_text()
    rewritten, _, _, _ = collect(tmp_path, finished(nas, elapsed_seconds=13))
    assert rewritten["changed"] is True and '"elapsed_seconds": 13' in (outputs / "job.json").read_text()


def test_a_log_left_out_does_not_stop_the_script_coming_back(tmp_path, nas):
    script = nas / "train-7.sbatch"
    job = finished(nas, collected_files={str(script): base64.b64encode(b"#!/bin/bash\n").decode()},
                   collected_skipped={str(nas / "train-7.out"): "a link or not a directory on the way"})
    collected, _, _, _ = collect(tmp_path, job)
    assert (collected["fetched"], collected["not_fetched"]) == ([str(script)], [str(nas / "train-7.out")])
    assert (tmp_path / "outputs" / "train-7" / "train-7.sbatch").read_text() == "#!/bin/bash\n"


def test_a_write_that_fails_leaves_no_temporary_file_and_raises_its_own_error(tmp_path, nas, monkeypatch):
    outputs = tmp_path / "outputs" / "train-7"
    outputs.mkdir(parents=True, mode=0o700)
    (outputs / "summary.txt").mkdir()  # a directory where a file goes: the rename fails
    with pytest.raises(IsADirectoryError):
        collect(tmp_path, finished(nas))
    assert sorted(p.name for p in outputs.iterdir()) == ["job.json", "summary.txt"]

    def swept_then_failing(src, dst, **kwargs):
        # The NAS failed the rename, and a cleanup had removed the temporary file: the rename's own
        # error is the one raised, not the cleanup's.
        job_outputs.os.unlink(src, dir_fd=kwargs["src_dir_fd"])
        raise OSError(errno.EIO, "Input/output error")

    (outputs / "summary.txt").rmdir()
    monkeypatch.setattr(job_outputs.os, "rename", swept_then_failing)
    with pytest.raises(OSError) as raised:
        collect(tmp_path, finished(nas, elapsed_seconds=99))
    assert raised.value.errno == errno.EIO


GATE = {"restart": 0, "seconds": 9.1, "slow_factor": 1.5, "action": "fail",
        "message": "not training on node111: the node list was given, so the job cannot leave it out",
        "nodes": {"node110": {"seconds": 0.25, "device": "cpu"}, "node111": {"seconds": 2.61, "device": "cpu"}},
        "allreduce": {"backend": "gloo", "bytes": 1048576, "time_us": 3650.2, "wrong": 0},
        "named": [{"node": "node111", "reason": "HEALTH", "seconds": 2.61, "median_seconds": 0.25, "ratio": 10.44,
                   "why": "slow: matmul 2.610 s against 0.250 s, the median of the other nodes (10.44x, over 1.5x)"}],
        "summary": "restart 0: failed in 9.1 s (2 nodes, matmul 0.250-2.610 s, all-reduce 1 MiB 3.7 ms (gloo)): not "
                   "training on node111: the node list was given, so the job cannot leave it out; node111 slow: matmul "
                   "2.610 s against 0.250 s, the median of the other nodes (10.44x, over 1.5x)"}


def test_the_health_gate_is_in_the_record_the_summary_and_the_failure(tmp_path, nas):
    passed = {**GATE, "action": "pass", "message": "passed", "named": [], "seconds": 3.0,
              "summary": "restart 0: passed in 3.0 s (2 nodes, matmul 0.250-2.610 s, all-reduce 1 MiB 3.7 ms (gloo))"}
    job = finished(nas, state="FAILED", outcome="failed", exit_code=94, health=[passed, GATE],
                   log_tail=["health gate failed (the reasons above): not training"])
    _, failure, _, shown = collect(tmp_path, job)
    record = json.loads((tmp_path / "outputs" / "train-7" / "job.json").read_text())
    assert record["health"] == [passed, GATE]
    slow = ("restart 0: failed in 9.1 s (2 nodes, matmul 0.250-2.610 s, all-reduce 1 MiB 3.7 ms (gloo)): not training "
            "on node111: the node list was given, so the job cannot leave it out; node111 slow: matmul 2.610 s against "
            "0.250 s, the median of the other nodes (10.44x, over 1.5x)")
    assert [line for line in shown.lines if line.startswith("health ")] == [
        "health     restart 0: passed in 3.0 s (2 nodes, matmul 0.250-2.610 s, all-reduce 1 MiB 3.7 ms (gloo))",
        f"health     {slow}"]
    assert failure.splitlines()[0].endswith(f"exit code 94; health gate: {slow}; outputs in {tmp_path / 'outputs' / 'train-7'}")


def test_a_gate_record_is_shown_made_visible_and_without_its_line_by_its_verdict(tmp_path, nas):
    job = finished(nas, health=[{**GATE, "summary": "restart 0: failed: node\x1b[2Jx"},
                                {**GATE, "restart": 1, "action": "pass", "summary": None}])
    assert job_outputs.health_lines(job) == ["restart 0: failed: node\\x1b[2Jx", "restart 1: pass"]


def test_a_job_without_the_gate_has_no_health_rows(tmp_path, nas):
    _, _, _, shown = collect(tmp_path, finished(nas))
    assert not [line for line in shown.lines if line.startswith("health")]


def test_a_hang_row_names_the_step_the_suspects_the_stacks_and_the_flight_recorder_where_there_are_any():
    hang = {"job_id": 41, "restart": 0, "step": 20, "suspect_nodes": ["node111", "n\x1bx"],
            "stack_dumps": ["hang-41-0-node110.txt", "hang-41-0-node111.txt"],
            "flight_recorder_dumps": ["hang-41-0-node111-nccl-rank3"]}
    assert job_outputs.hang_line(hang) == (
        "attempt 0 of job 41 HUNG at step 20: suspect node111, n\\x1bx; stacks in hang-41-0-node110.txt, "
        "hang-41-0-node111.txt; NCCL flight recorder in hang-41-0-node111-nccl-rank3 (the run's directory)")
    # Step 0 is a step; nothing known is said so, and no recorder is no recorder line.
    assert job_outputs.hang_line({"job_id": 41, "restart": 1, "step": 0}) == (
        "attempt 1 of job 41 HUNG at step 0: suspect nodes: none named (the stacks do not tell); stacks in no file "
        "(the run's directory)")
    assert job_outputs.hang_line({"job_id": 41, "restart": 1, "step": None, "suspect_nodes": None,
                                  "stack_dumps": None, "flight_recorder_dumps": None}).startswith(
        "attempt 1 of job 41 HUNG: suspect nodes: none named")


def test_the_run_line_of_a_job_followed_by_id_comes_from_its_log_path():
    assert job_outputs.run_line(None, {"stdout_path": "/nas/jobs/alice/train/runs/3/train-9.out"}) == "run 3"
    assert job_outputs.run_line({}, None) == "-"
    assert job_outputs.run_line({"run_id": 2, "resumed": True, "resumed_step": 0}, {}) == (
        "resumed run 2 from its checkpoint at step 0")


def test_the_code_line_names_the_commit_by_its_first_12_digits_and_says_whether_it_was_dirty():
    code = {"hash": "82f05475ea357120194a", "files": 3, "copied": True, "git_commit": "6fdcddbf5109abcdef0123"}
    assert job_outputs.launch_code_line(code) == (
        "code 82f05475ea357120194a (3 files) copied to the NAS, git 6fdcddbf5109")
    assert job_outputs.launch_code_line({**code, "copied": False, "git_dirty": True}) == (
        "code 82f05475ea357120194a (3 files) already on the NAS, not copied, git 6fdcddbf5109 with uncommitted changes")


def test_the_failure_names_the_last_gate_that_did_not_pass(tmp_path, nas):
    first = {**GATE, "summary": "restart 0: requeued: without node111"}
    last = {**GATE, "restart": 1, "summary": "restart 1: failed: no spare to requeue onto"}
    job = finished(nas, state="FAILED", outcome="failed", exit_code=94, health=[first, last],
                   log_tail=["health gate failed (the reasons above): not training"])
    _, failure, _, _ = collect(tmp_path, job)
    assert "; health gate: restart 1: failed: no spare to requeue onto; outputs in " in failure.splitlines()[0]
    assert "restart 0: requeued" not in failure.splitlines()[0]
