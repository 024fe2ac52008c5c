"""Unit tests of the slurm_job action plugin: the slices it runs the module in, and what the
task's result keeps of them. The module's own runs are scripted results here."""

import base64
import json
from types import SimpleNamespace
from unittest import mock

import pytest

from conftest import PROJECT_ROOT, init_plugin_loader

from ansible_collections.hpc.slurm_train.plugins.action import slurm_job as action


def run_slices(slices, connection=None, **args):
    """The action's result when the module's successive runs return `slices`; and those runs' args."""
    task = SimpleNamespace(args={"script": "/nas/train.sbatch", "progress_every": 5, **args}, async_val=0,
                           check_mode=False, action="slurm_job")
    plugin = action.ActionModule(task, connection or mock.MagicMock(), mock.MagicMock(), None, None, None)
    answers = iter(slices)
    calls = []

    def execute_module(module_name, module_args, task_vars):
        calls.append(flat(module_args))
        return dict(next(answers))

    with mock.patch.object(plugin, "_execute_module", side_effect=execute_module), \
            mock.patch.object(action.display, "display"):
        result = plugin.run(task_vars={})
    return result, calls


def flat(module_args):
    """A module run's arguments with its `internal` ones (the action's protocol) beside the others."""
    assert set(module_args.get("internal", {})) <= set(action.INTERNAL_SPEC)
    assert not set(module_args) & set(action.INTERNAL_SPEC), "the protocol goes under internal"
    return {**{key: value for key, value in module_args.items() if key != "internal"}, **module_args.get("internal", {})}


def slice_result(state, final, **extra):
    return {"job_id": 7, "name": "train", "state": state, "final": final, "restarts": 0, "queries": 2,
            "controller_outage_seconds": 0, "progress": {"log_lines": []}, **extra}


def test_a_warning_of_an_earlier_slice_reaches_the_task_result():
    outage = "slurmctld did not answer for 25 s while job 7 was followed; it answers again and the job was found"
    result, calls = run_slices([
        slice_result("RUNNING", False, changed=True, submitted=True),
        slice_result("RUNNING", False, warnings=[outage], controller_outage_seconds=25.0),
        slice_result("COMPLETED", True, warnings=["the last slice's own"]),
    ])
    assert result["warnings"] == [outage, "the last slice's own"]
    assert result["controller_outage_seconds"] == 25.0
    assert result["queries"] == 6
    assert (result["changed"], result["submitted"]) == (True, True)


def test_later_slices_follow_the_job_by_id_and_do_not_submit_again():
    _, calls = run_slices([slice_result("PENDING", False, submitted=True), slice_result("COMPLETED", True)])
    assert "script" in calls[0]
    assert "script" not in calls[1] and calls[1]["job_id"] == 7
    assert calls[1]["progress_from"] == {"log_lines": []}


def test_later_slices_watch_the_end_marker_of_the_run_the_staging_slice_took_and_keep_what_it_staged():
    """A launch's task names no end marker: only the first slice, which takes the run, knows where
    the job will mark its end (its end_marker result)."""
    staged = {"run_id": 2, "run_dir": "/nas/jobs/alice/train/runs/2"}
    result, calls = run_slices(
        [slice_result("RUNNING", False, submitted=True, end_marker="/nas/jobs/alice/train/runs/2/.%j.ended", staged=staged),
         slice_result("COMPLETED", True, end_marker="/nas/jobs/alice/train/runs/2/.%j.ended", staged=None)])
    assert "end_marker" not in calls[0]
    assert calls[1]["end_marker"] == "/nas/jobs/alice/train/runs/2/.%j.ended" and "stage" not in calls[1]
    assert result["staged"] == staged


def test_a_slice_without_warnings_adds_no_warnings_key():
    result, _ = run_slices([slice_result("RUNNING", False), slice_result("COMPLETED", True)])
    assert "warnings" not in result


def shown_lines(slices, **args):
    """What a person sees on the terminal while the action follows a job through `slices`."""
    task = SimpleNamespace(args={"script": "/nas/train.sbatch", "progress_every": 5, **args}, async_val=0,
                           check_mode=False, action="slurm_job")
    plugin = action.ActionModule(task, mock.MagicMock(), mock.MagicMock(), None, None, None)
    answers = iter(slices)
    with mock.patch.object(plugin, "_execute_module", side_effect=lambda *a, **k: dict(next(answers))), \
            mock.patch.object(action.display, "display") as display:
        plugin.run(task_vars={})
    return [call.args[0] for call in display.call_args_list]


def test_each_change_of_state_is_one_line_and_log_lines_carry_the_job_id():
    lines = shown_lines([
        slice_result("PENDING", False, reason="Resources", submitted=True),
        slice_result("PENDING", False, reason="Resources"),
        slice_result("RUNNING", False, nodes=["node110", "node111"],
                     progress={"log_lines": ["step 10 loss 2.31", "step 20 loss 1.97"]}),
        slice_result("RUNNING", False, restarts=1, nodes=["node111"], reason="NodeDown"),
        slice_result("COMPLETED", True, restarts=1, exit_code=0, elapsed_seconds=312, reason="None"),
    ])
    assert lines == [
        "job 7 (train): PENDING (Resources)",
        "job 7 (train): RUNNING on node110,node111",
        "  7 | step 10 loss 2.31",
        "  7 | step 20 loss 1.97",
        "job 7 (train): RUNNING on node111, restart 1",
        "job 7 (train): COMPLETED (None), restart 1, exit code 0, 312 s",
    ]


def test_a_job_slurm_no_longer_knows_is_said_so():
    assert action.describe({"job_id": 9, "name": "train", "state": None, "final": False}) == (
        "job 9 (train): unknown to Slurm")
    assert action.describe({"job_id": 9, "name": "train", "state": "FAILED", "final": True, "exit_code": 3,
                            "elapsed_seconds": 41, "reason": "NonZeroExitCode"}) == (
        "job 9 (train): FAILED (NonZeroExitCode), exit code 3, 41 s")


def test_a_result_without_a_job_shows_nothing():
    # A refused submission (sbatch said no) has no job id; the task's error says why.
    assert shown_lines([{"failed": True, "msg": "sbatch: error: Batch job submission failed"}]) == []


def test_the_task_timeout_ends_the_following_and_says_so():
    clock = iter([100.0, 104.0, 111.0])  # started, after the first slice, after the second
    task_timeout = 10
    with mock.patch.object(action.time, "monotonic", side_effect=lambda: next(clock)):
        result, calls = run_slices([slice_result("RUNNING", False, submitted=True),
                                    slice_result("RUNNING", False)], timeout=task_timeout)
    assert result["timed_out"] is True
    assert (result["state"], result["final"]) == ("RUNNING", False)
    # Each slice asks the module for no more than what is left of the task's timeout.
    assert [call["timeout"] for call in calls] == [5, 5]
    assert calls[0]["return_on_change"] is True


def test_the_last_slice_is_cut_to_what_is_left_of_the_timeout():
    clock = iter([100.0, 107.5, 112.0])
    with mock.patch.object(action.time, "monotonic", side_effect=lambda: next(clock)):
        result, calls = run_slices([slice_result("RUNNING", False), slice_result("COMPLETED", True)], timeout=10)
    assert [call["timeout"] for call in calls] == [5, 2]
    assert "timed_out" not in result


def test_a_slice_never_asks_for_less_than_a_second():
    clock = iter([100.0, 109.8, 110.5])
    with mock.patch.object(action.time, "monotonic", side_effect=lambda: next(clock)):
        _, calls = run_slices([slice_result("RUNNING", False), slice_result("COMPLETED", True)], timeout=10)
    assert calls[1]["timeout"] == 1


def test_a_timeout_shorter_than_a_slice_is_the_first_slice():
    _, calls = run_slices([slice_result("COMPLETED", True)], timeout=3)
    assert calls[0]["timeout"] == 3


@pytest.mark.parametrize("args", [
    {"progress_every": 0}, {"wait": False}, {"wait": "no"}, {"state": "absent"},
])
def test_without_live_progress_the_module_runs_once_with_the_tasks_arguments(args):
    result, calls = run_slices([slice_result("RUNNING", False, submitted=True)], **args)
    assert len(calls) == 1
    assert "return_on_change" not in calls[0] and "progress_every" not in calls[0]
    assert calls[0]["script"] == "/nas/train.sbatch"
    assert result["state"] == "RUNNING" and "timed_out" not in result


def test_check_mode_runs_the_module_once():
    task = SimpleNamespace(args={"script": "/nas/train.sbatch", "progress_every": 5}, async_val=0,
                           check_mode=True, action="slurm_job")
    plugin = action.ActionModule(task, mock.MagicMock(), mock.MagicMock(), None, None, None)
    with mock.patch.object(plugin, "_execute_module", return_value={"changed": True}) as module:
        assert plugin.run(task_vars={}) == {"changed": True}
    assert module.call_args.kwargs["module_args"] == {"script": "/nas/train.sbatch"}


def test_a_failed_slice_ends_the_following_and_is_the_result():
    result, calls = run_slices([slice_result("RUNNING", False, changed=True, submitted=True),
                                {"failed": True, "msg": "squeue: error: Invalid user", "job_id": 7}])
    assert len(calls) == 2
    assert (result["failed"], result["msg"]) == (True, "squeue: error: Invalid user")
    assert (result["changed"], result["job_id"]) == (True, 7)


INTERNALS = {"end_marker": "/run-dir-zg2eh6udtu4uglngj4s1/.%j.ended", "progress": {"log_offset": 33982},
             "staged": {"run_dir": "/nas/jobs/alice/train/runs/1"}, "nodes_checked": {"partition": "gpu", "notes": []},
             "queries": 1, "controller_outage_seconds": 0, "submitted": False, "found_existing": False,
             "log_tail": [], "timed_out": False, "user": None}


def test_a_refused_launch_fails_with_its_sentence_and_not_the_modules_protocol():
    refused = {"failed": True, "changed": False, "msg": "resume=7: this job has no run 7 (its runs: none yet)",
               "job_id": None, "name": None, "state": None, "exit_code": None, "outcome": None, "final": None,
               **INTERNALS}
    result, _ = run_slices([refused])
    assert result == {"failed": True, "changed": False, "msg": "resume=7: this job has no run 7 (its runs: none yet)"}


def test_a_failed_job_keeps_what_became_of_it_and_where_its_outputs_are():
    ended = {**slice_result("FAILED", True, exit_code=3, outcome="failed", changed=True, failed=True,
                            msg="Slurm job 7 ended in state FAILED", warnings=["slurmctld was slow"]),
             **INTERNALS, "collected": {"changed": True, "dest": "/out/train-7", "written": ["job.json"],
                                        "summary": ["job 7 (train)"], "fetched": ["/nas/x.out"]}}
    result, _ = run_slices([ended])
    assert result == {"failed": True, "changed": True, "msg": "Slurm job 7 ended in state FAILED",
                      "warnings": ["slurmctld was slow"], "job_id": 7, "name": "train", "state": "FAILED",
                      "exit_code": 3, "outcome": "failed", "final": True,
                      "collected": {"dest": "/out/train-7", "written": ["job.json"]}}


def test_with_v_a_failed_result_is_the_modules_whole_result():
    refused = {"failed": True, "changed": False, "msg": "resume=7: this job has no run 7", **INTERNALS}
    with mock.patch.object(action.display, "verbosity", 1):
        result, _ = run_slices([refused])
    assert result["end_marker"] == INTERNALS["end_marker"] and result["staged"] == INTERNALS["staged"]


def test_a_succeeded_result_is_left_whole():
    result, _ = run_slices([slice_result("COMPLETED", True, exit_code=0, **INTERNALS)])
    assert result["end_marker"] == INTERNALS["end_marker"] and result["progress"] == INTERNALS["progress"]


def test_a_module_error_stays_with_its_own_message():
    """Ansible prints a failed result's ``exception`` (the module's error, captured as it ran) as the
    task's error line; the module's own message keeps it, with its traceback."""
    module_error = object()
    result, _ = run_slices([{"failed": True, "msg": "sbatch: error: Batch job submission failed",
                             "exception": module_error}])
    assert result["exception"] is module_error


def test_following_makes_nothing_on_the_host_before_the_module_runs():
    # The module is the only thing sent; no temporary directory is made ahead of it.
    task = SimpleNamespace(args={"script": "/nas/train.sbatch", "progress_every": 5}, async_val=0,
                           check_mode=False, action="slurm_job")
    connection = mock.MagicMock()
    connection._shell.tmpdir = None
    plugin = action.ActionModule(task, connection, mock.MagicMock(), None, None, None)
    with mock.patch.object(plugin, "_make_tmp_path", side_effect=AssertionError("made a remote tmp dir")), \
            mock.patch.object(plugin, "_execute_module", return_value=slice_result("COMPLETED", True)), \
            mock.patch.object(action.display, "display"):
        assert plugin.run(task_vars={})["state"] == "COMPLETED"


def test_without_progress_every_a_slice_is_thirty_seconds_and_without_timeout_it_is_not_cut():
    task = SimpleNamespace(args={"script": "/nas/train.sbatch"}, async_val=0, check_mode=False, action="slurm_job")
    plugin = action.ActionModule(task, mock.MagicMock(), mock.MagicMock(), None, None, None)
    answers = iter([slice_result("RUNNING", False), slice_result("COMPLETED", True)])
    calls = []
    with mock.patch.object(plugin, "_execute_module",
                           side_effect=lambda name, module_args, task_vars: calls.append(flat(module_args)) or dict(
                               next(answers))), mock.patch.object(action.display, "display"):
        plugin.run(task_vars={})
    assert [(call["timeout"], call["return_on_change"]) for call in calls] == [(30, True), (30, True)]
    _, calls = run_slices([slice_result("RUNNING", False), slice_result("COMPLETED", True)])
    assert [call["timeout"] for call in calls] == [5, 5]


def test_a_progress_every_of_one_second_is_live_and_none_is_not():
    _, calls = run_slices([slice_result("COMPLETED", True)], progress_every=1)
    assert calls[0]["return_on_change"] is True and calls[0]["timeout"] == 1
    _, calls = run_slices([slice_result("COMPLETED", True)], progress_every=None)
    assert "return_on_change" not in calls[0]


def test_counts_add_up_when_a_slice_does_not_report_them():
    first = {key: value for key, value in slice_result("RUNNING", False).items()
             if key not in ("queries", "controller_outage_seconds")}
    result, _ = run_slices([first, slice_result("RUNNING", False, controller_outage_seconds=4.5),
                            {"job_id": 7, "name": "train", "state": "COMPLETED", "final": True}])
    assert (result["queries"], result["controller_outage_seconds"]) == (2, 4.5)


def test_a_timeout_used_up_exactly_ends_the_following():
    clock = iter([100.0, 110.0])
    with mock.patch.object(action.time, "monotonic", side_effect=lambda: next(clock)):
        result, calls = run_slices([slice_result("RUNNING", False)], timeout=10)
    assert (result["timed_out"], len(calls)) == (True, 1)


def test_an_arrays_progress_says_how_many_tasks_are_final_and_each_task_that_just_ended():
    before = {"job_id": 5, "name": "sweep", "state": "RUNNING", "nodes": ["node110"], "tasks_done": 1, "tasks_total": 4,
              "tasks": [{"task": 0, "state": "COMPLETED", "final": True, "exit_code": 0},
                        {"task": 1, "state": "RUNNING", "final": False}]}
    after = {**before, "tasks_done": 2,
             "tasks": [before["tasks"][0], {"task": 1, "state": "FAILED", "final": True, "exit_code": 3,
                                             "log_last_line": "boom"}]}
    assert action.describe(after) == "job 5 (sweep): RUNNING on node110, 2 of 4 array tasks final"
    assert action.newly_final_tasks(after, before) == ["  5_1: FAILED, exit code 3 | boom"]
    assert action.newly_final_tasks(after, None) == ["  5_0: COMPLETED, exit code 0", "  5_1: FAILED, exit code 3 | boom"]


def test_code_the_staging_run_finds_missing_is_sent_and_the_module_run_again_with_it(tmp_path, monkeypatch):
    """Code over the inline limit: the first run stages nothing past the code (the module's rule)
    and submits nothing; the archive goes as a file and the second run stages and submits."""
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print('hi')\n")
    monkeypatch.setattr(action, "INLINE_MAX_BYTES", 0)
    stage = {"jobs_root": "/nas/jobs", "job_name": "train", "code_dir": str(tmp_path / "code"),
             "script": str(tmp_path / "code" / "train.py"), "max_mb": 1}
    missing = {"made": ["/nas/jobs/alice/train"], "code_present": False, "code_copied": False, "missing_files": [],
               "code_dir": "/nas/jobs/alice/train/code/x"}
    copied = {**missing, "made": [], "code_copied": True}
    task = SimpleNamespace(args={"script": "/nas/train.sbatch", "progress_every": 0, "stage": stage}, async_val=0,
                           check_mode=False, action="slurm_job")
    plugin = action.ActionModule(task, mock.MagicMock(), mock.MagicMock(), None, None, None)
    answers = iter([{"job_id": None, "staged": dict(missing)}, {"job_id": 7, "submitted": True, "staged": dict(copied)}])
    calls = []

    def execute_module(module_name, module_args, task_vars):
        calls.append(flat(module_args))
        return next(answers)

    with mock.patch.object(plugin, "_execute_module", side_effect=execute_module), \
            mock.patch.object(plugin, "_make_tmp_path", return_value="/remote/tmp"), \
            mock.patch.object(plugin, "_transfer_file") as transfer, \
            mock.patch.object(plugin, "_fixup_perms2"), mock.patch.object(plugin, "_remove_tmp_path"):
        result = plugin.run(task_vars={})
    assert calls[0]["stage"]["code_archive_inline"] is None and "code_archive" not in calls[0]["stage"]
    assert calls[1]["stage"]["code_archive"] == transfer.call_args.args[1]
    assert "code_dir" not in calls[0]["stage"], "the controller's own options stay on the controller"
    assert (result["job_id"], result["changed"], result["staged"]["made"]) == (7, True, ["/nas/jobs/alice/train"])
    assert result["staged"]["code"]["copied"] and result["staged"]["script"] == "/nas/jobs/alice/train/code/x/train.py"


class NothingThere:
    """A submit host where no file can be fetched (the module returned what there was)."""
    become = None
    _shell = SimpleNamespace(tmpdir=None)

    @staticmethod
    def fetch_file(remote, local):
        raise action._job_outputs.AnsibleError(f"{remote} is not there")


def finished_job(run_dir, **extra):
    return slice_result("COMPLETED", True, user="alice", outcome="succeeded", exit_code=0, nodes=["node110"],
                        elapsed_seconds=11, stdout_path=f"{run_dir}/train-7.out", log_tail=["done"], submitted=True,
                        staged={"run_id": 1, "resumed": False}, **extra)


def test_code_changed_since_the_job_script_was_rendered_is_refused_before_the_module_runs(tmp_path):
    """The job script names the code by the hash it had when the launch rendered it: code changed
    since would run under another hash's name, or not be found."""
    (tmp_path / "train.py").write_text("print('hi')\n")
    stage = {"jobs_root": "/nas/jobs", "job_name": "train", "code_dir": str(tmp_path),
             "script": str(tmp_path / "train.py"), "max_mb": 1}
    rendered = action.CodeToStage(stage).digest
    (tmp_path / "train.py").write_text("print('changed')\n")
    task = SimpleNamespace(args={"script": "train.sbatch", "progress_every": 0, "stage": {**stage, "code_hash": rendered}},
                           async_val=0, check_mode=False, action="slurm_job")
    plugin = action.ActionModule(task, mock.MagicMock(), mock.MagicMock(), None, None, None)
    with mock.patch.object(plugin, "_execute_module") as module, \
            pytest.raises(action.AnsibleActionFail, match=f"the code in {tmp_path} changed while the job was put "
                                                          f"together \\(its hash was {rendered}, is "):
        plugin.run(task_vars={})
    assert module.call_count == 0


def test_with_collect_the_finished_jobs_outputs_are_written_as_the_task_ends(tmp_path):
    """The module's last answer carries the job's files; the plugin writes them and the summaries,
    keeps the files' contents out of the task's result, and asks for them in every slice."""
    run_dir = tmp_path / "jobs" / "alice" / "train" / "runs" / "1"
    log = base64.b64encode(b"[rank0] training complete\n").decode()
    collect = {"outputs_dir": str(tmp_path / "outputs"), "jobs_dir": str(tmp_path / "jobs")}
    result, calls = run_slices([slice_result("RUNNING", False, submitted=True, staged={"run_id": 1, "resumed": False}),
                                finished_job(run_dir, collected_files={f"{run_dir}/train-7.out": log})],
                               connection=NothingThere(), collect=collect)
    assert all(call["collect_files"] is True and "collect" not in call for call in calls)
    outputs = tmp_path / "outputs" / "train-7"
    assert (result["failed"], result["collected"]["dest"], "collected_files" in result) == (False, str(outputs), False)
    assert (outputs / "train-7.out").read_text() == "[rank0] training complete\n"
    assert json.loads((outputs / "job.json").read_text())["run_line"] == "fresh run 1"


def test_with_collect_a_job_that_did_not_succeed_fails_the_task_with_its_outputs(tmp_path):
    run_dir = tmp_path / "jobs" / "alice" / "train" / "runs" / "1"
    failed = finished_job(run_dir, failed=True, msg="Slurm job 7 ended in state FAILED", collected_files={},
                          exception="the module's error, which Ansible would print in place of the task's message")
    failed.update(state="FAILED", outcome="failed", exit_code=3)
    result, _ = run_slices([failed], connection=NothingThere(),
                           collect={"outputs_dir": str(tmp_path / "outputs"), "jobs_dir": str(tmp_path / "jobs")})
    assert result["failed"] is True
    assert result["msg"].startswith(f"job 7 (train) ended FAILED, exit code 3; outputs in {tmp_path}/outputs/train-7\n")
    assert "exception" not in result
    assert (tmp_path / "outputs" / "train-7" / "summary.txt").exists()


def test_collect_with_an_unknown_key_is_refused_before_the_module_runs(tmp_path):
    with pytest.raises(action.AnsibleActionFail, match=r"collect has unknown keys \['dest'\] or lacks \['jobs_dir'\]"):
        run_slices([], collect={"outputs_dir": str(tmp_path), "dest": "x"})
    with pytest.raises(action.AnsibleActionFail, match=r"collect has unknown keys \[\] or lacks \['outputs_dir'\]"):
        run_slices([], collect={"jobs_dir": str(tmp_path)})


def test_a_missing_expected_file_fails_the_task_with_the_tasks_message(tmp_path):
    (tmp_path / "train.py").write_text("print('hi')\n")
    staged = {"missing_files": ["/nas/env/nccl-gpu.sh"]}
    result, calls = run_slices([{"changed": False, "staged": staged, "job_id": None, "final": None,
                                 "exception": "the module's error"}],
                               stage={"jobs_root": "/nas/jobs", "job_name": "train", "code_dir": str(tmp_path),
                                      "script": str(tmp_path / "train.py"), "expect_files": ["/nas/env/nccl-gpu.sh"],
                                      "expect_files_message": "The NCCL env file /nas/env/nccl-gpu.sh is missing"},
                               wait=False)
    assert (result["failed"], result["msg"]) == (True, "The NCCL env file /nas/env/nccl-gpu.sh is missing")
    assert "exception" not in result
    assert "expect_files_message" not in calls[0]["stage"]


def run_failing_module(answer, task_vars):
    """The action's result when the module's first run gives no answer (as on a Python it cannot run
    on) and the host's Python answers the probe with ``answer``; and the probe commands run."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    plugin_loader = init_plugin_loader()
    task = SimpleNamespace(args={"script": "/nas/train.sbatch", "progress_every": 0}, async_val=0, check_mode=False,
                           action="slurm_job")
    loader = DataLoader()
    plugin = action.ActionModule(task, mock.MagicMock(), mock.MagicMock(), loader, Templar(loader=loader),
                                 plugin_loader)
    failure = {"failed": True, "msg": "MODULE FAILURE: No start of json char found\nSee stdout/stderr for the exact "
               "error", "module_stdout": "", "module_stderr": "python3.6 stand-in: only -V is answered", "rc": 1}
    probes = []
    with mock.patch.object(plugin, "_execute_module", return_value=dict(failure)), \
            mock.patch.object(plugin, "_low_level_execute_command",
                              side_effect=lambda cmd, **kwargs: probes.append(cmd) or {"rc": 0, "stdout": answer}), \
            mock.patch.object(action.display, "display"):
        return plugin.run(task_vars={"inventory_hostname": "login01", **task_vars}), probes


def test_a_module_run_on_too_old_a_python_is_named_for_what_it_is():
    result, probes = run_failing_module("/nas/py/python3.6 Python 3.6.8\n",
                                        {"ansible_python_interpreter": "/nas/py/python3.6"})
    assert result["failed"] is True
    assert result["msg"].startswith("login01: ansible-core 2.19.")
    assert "needs Python 3.8 or newer on the hosts it manages, and /nas/py/python3.6 is Python 3.6." in result["msg"]
    assert "set ansible_python_interpreter to it for this host" in result["msg"]
    assert "module_stderr" not in result
    assert probes == ["printf '%s ' /nas/py/python3.6; /nas/py/python3.6 -V 2>&1 || true"]


def test_a_module_failure_on_a_good_python_stays_the_modules_own():
    result, probes = run_failing_module("/usr/bin/python3 Python 3.11.2\n", {})
    assert result["msg"].startswith("MODULE FAILURE")
    assert result["module_stderr"] == "python3.6 stand-in: only -V is answered"
    # With ansible_python_interpreter unset, the probe tries the interpreters discovery would.
    assert len(probes) == 1 and probes[0].startswith("for p in ") and "/usr/bin/python3" in probes[0]


def shown_with(slices, check_mode=False, **args):
    """(the result, what a person saw) of a task with ``args`` (progress_every as given, else none)."""
    task = SimpleNamespace(args={"script": "/nas/train.sbatch", **args}, async_val=0, check_mode=check_mode,
                           action="slurm_job")
    plugin = action.ActionModule(task, NothingThere(), mock.MagicMock(), None, None, None)
    answers = iter(slices)
    with mock.patch.object(plugin, "_execute_module", side_effect=lambda *a, **k: dict(next(answers))), \
            mock.patch.object(action.display, "display") as display:
        result = plugin.run(task_vars={})
    return result, [call.args[0] for call in display.call_args_list]


COLLECT = {"outputs_dir": "/nowhere/outputs", "jobs_dir": "/nowhere/jobs"}


def test_with_collect_a_job_not_final_yet_is_one_line_and_nothing_is_collected():
    pending = slice_result("PENDING", False, submitted=True)
    result, lines = shown_with([pending], collect=COLLECT, wait=False, progress_every=0)
    assert lines == ["Job 7 (train) submitted, state PENDING. Follow it with: ansible-playbook launch.yml -e job_id=7"]
    assert "collected" not in result and not result.get("failed")
    # Refused: the task's error says it, no line besides.
    result, lines = shown_with([{"failed": True, "msg": "sbatch: error"}], collect=COLLECT, wait=False)
    assert lines == [] and result["msg"] == "sbatch: error"


def test_with_collect_check_mode_predicts_a_launch_and_says_nothing_of_a_job_followed():
    predicted = {"test_only": {"start": "2026-12-07T08:00:00", "nodes": ["node110"], "partition": "gpu"}, "final": False}
    _, lines = shown_with([predicted], check_mode=True, collect=COLLECT)
    assert lines == ["Slurm would start the job at 2026-12-07T08:00:00 on node110 in partition gpu"]
    _, lines = shown_with([slice_result("RUNNING", False)], check_mode=True, collect=COLLECT, job_id=7)
    assert lines == []


def test_collect_that_is_no_mapping_is_refused_naming_its_keys():
    with pytest.raises(action.AnsibleActionFail, match="slurm_job: collect must be a dict of outputs_dir, jobs_dir"):
        shown_with([], collect=["outputs"])


def test_the_nodes_checks_notes_are_shown_and_a_tasks_log_lines_carry_its_task_id():
    notes = ["left out, a bad node of yours: node111: HUNG in job 3 at ..."]
    _, lines = shown_with([slice_result("RUNNING", False, nodes=["node110"], submitted=True,
                                        nodes_checked={"notes": notes}, log_task=2,
                                        progress={"log_lines": ["step 1"]}),
                           slice_result("COMPLETED", True, exit_code=0, elapsed_seconds=3, nodes=["node110"],
                                        tasks=[{"task": 2, "state": "COMPLETED", "final": True, "exit_code": 0}])],
                          progress_every=5)
    assert lines == [notes[0], "job 7 (train): RUNNING on node110", "  7_2 | step 1",
                     "job 7 (train): COMPLETED, exit code 0, 3 s", "  7_2: COMPLETED, exit code 0"]


def test_an_expected_files_message_fails_the_task_only_when_a_file_is_missing(tmp_path):
    (tmp_path / "train.py").write_text("print('hi')\n")
    result, _ = run_slices([slice_result("PENDING", False, submitted=True, staged={"made": [], "code_present": True})],
                           stage={"jobs_root": "/nas/jobs", "job_name": "train", "code_dir": str(tmp_path),
                                  "script": str(tmp_path / "train.py"), "expect_files": ["/nas/env/nccl-gpu.sh"],
                                  "expect_files_message": "The NCCL env file /nas/env/nccl-gpu.sh is missing"},
                           wait=False)
    assert not result.get("failed") and result["job_id"] == 7


def test_with_collect_writing_the_outputs_is_a_change_even_of_a_job_found_running(tmp_path):
    run_dir = tmp_path / "jobs" / "alice" / "train" / "runs" / "1"
    found = {**finished_job(run_dir, changed=False, found_existing=True, collected_files={}), "submitted": False}
    result, _ = run_slices([found], connection=NothingThere(),
                           collect={"outputs_dir": str(tmp_path / "outputs"), "jobs_dir": str(tmp_path / "jobs")})
    assert result["changed"] is True and (tmp_path / "outputs" / "train-7" / "job.json").exists()


def test_with_collect_a_job_cancelled_as_asked_does_not_fail_and_a_succeeded_one_keeps_the_modules_failure(tmp_path):
    run_dir = tmp_path / "jobs" / "alice" / "train" / "runs" / "1"
    collect = {"outputs_dir": str(tmp_path / "outputs"), "jobs_dir": str(tmp_path / "jobs"), "cancelled": True}
    cancelled = finished_job(run_dir, failed=True, msg="Slurm job 7 ended in state CANCELLED", collected_files={})
    cancelled.update(state="CANCELLED", outcome="cancelled", exit_code=0)
    result, _ = run_slices([cancelled], connection=NothingThere(), collect=collect)
    assert result["failed"] is False and "msg" not in result
    unrecorded = finished_job(run_dir, failed=True, msg="cannot write the run record", collected_files={})
    result, _ = run_slices([unrecorded], connection=NothingThere(), collect={**collect, "cancelled": False})
    assert (result["failed"], result["msg"]) == (True, "cannot write the run record")
