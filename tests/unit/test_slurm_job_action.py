"""Unit tests of the slurm_job action plugin: the slices it runs the module in, and what the
task's result keeps of them. The module's own runs are scripted results here."""

import importlib.util
from types import SimpleNamespace
from unittest import mock

from conftest import PROJECT_ROOT

PLUGIN = PROJECT_ROOT / "roles" / "slurm_launch" / "action_plugins" / "slurm_job.py"
spec = importlib.util.spec_from_file_location("slurm_job_action", PLUGIN)
action = importlib.util.module_from_spec(spec)
spec.loader.exec_module(action)


def run_slices(slices, **args):
    """The action's result when the module's successive runs return `slices`; and those runs' args."""
    task = SimpleNamespace(args={"script": "/nas/train.sbatch", "progress_every": 5, **args}, async_val=0,
                           check_mode=False, action="slurm_job")
    plugin = action.ActionModule(task, mock.MagicMock(), mock.MagicMock(), None, None, None)
    answers = iter(slices)
    calls = []

    def execute_module(module_name, module_args, task_vars):
        calls.append(module_args)
        return dict(next(answers))

    with mock.patch.object(plugin, "_execute_module", side_effect=execute_module), \
            mock.patch.object(action.display, "display"):
        result = plugin.run(task_vars={})
    return result, calls


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


def test_a_slice_without_warnings_adds_no_warnings_key():
    result, _ = run_slices([slice_result("RUNNING", False), slice_result("COMPLETED", True)])
    assert "warnings" not in result
