"""slurm_train's checks before anything runs: a wrong argument raises ValueError with the message
the playbook's own rule gives (the slurm_launch_extra_vars plugin's, the job_value_problems
filter's), and ansible-runner is never called; and what a run's events turn into."""

import json
import sys
from pathlib import Path

import pytest
import yaml

from conftest import PROJECT_ROOT

import slurm_train
from slurm_train import _playbook, _rules

ROLE = PROJECT_ROOT / "roles" / "slurm_launch"
TRAINER = str(PROJECT_ROOT / "examples" / "train_ddp.py")

# The rules as the playbook imports them.
from ansible_collections.hpc.slurm_train.plugins.plugin_utils import launch_request  # noqa: E402
from ansible_collections.hpc.slurm_train.plugins.plugin_utils import launch_params  # noqa: E402


@pytest.fixture
def nothing_runs(monkeypatch):
    """ansible_runner.run raises: a test that reaches it fails."""
    def refuse(**kwargs):
        raise AssertionError(f"ansible_runner.run was called: {kwargs.get('playbook')}")
    monkeypatch.setattr(_playbook.ansible_runner, "run", refuse)


def playbook_unknown_message(given, prefixed):
    """The slurm_launch_extra_vars task's message for these -e keys, from the launch's parameter table."""
    aliases, options = list(launch_params.ALIASES), set(launch_params.NAMES)
    unknown = launch_request.unknown_keys(sorted(given), aliases, options)
    assert unknown, "the test's keys must include an unknown one"
    return launch_request.unknown_keys_message(unknown, aliases, options, ("cluster_", "ansible_"), prefixed)


def test_a_misspelt_key_raises_the_playbooks_message_with_its_suggestion(nothing_runs):
    with pytest.raises(ValueError) as raised:
        slurm_train.launch(script=TRAINER, nodes="node110,node111", wiat=False)
    message = str(raised.value)
    assert message.startswith("Unknown -e key: -e wiat (did you mean 'wait'?). A launch reads: script, ")
    prefixed = _rules.prefixed_variables(_playbook.CHECKOUT_INVENTORY)
    assert message == playbook_unknown_message(["script", "nodes", "wiat"], prefixed)


def test_a_key_close_to_an_inventory_variable_is_pointed_to_it(nothing_runs):
    with pytest.raises(ValueError) as raised:
        slurm_train.launch(script=TRAINER, nodes="node110", nas_root="/nas")
    assert str(raised.value).startswith("Unknown -e key: -e nas_root (did you mean 'cluster_nas_root'?).")
    assert "cluster_nas_root" in _rules.prefixed_variables(_playbook.CHECKOUT_INVENTORY)


def test_several_unknown_keys_are_all_named(nothing_runs):
    with pytest.raises(ValueError, match=r"^Unknown -e keys: -e nods \(did you mean 'nodes'\?\); "
                                         r"-e scirpt \(did you mean 'script'\?\)\."):
        slurm_train.launch(nods="node110", scirpt=TRAINER)


@pytest.mark.parametrize("given, key, value", [
    ({"job_name": "a/b"}, "job_name", "a/b"),
    ({"time_limit": "1h"}, "time_limit", "1h"),
    ({"slurm_launch_time_limit": "2 hours"}, "time_limit", "2 hours"),
    ({"account": "ml team"}, "account", "ml team"),
    ({"rendezvous": "etcd"}, "rendezvous", "etcd"),
    ({"slurm_launch_extra_directives": ["--clusters=other"]}, "extra_directives", ["--clusters=other"]),
    ({"slurm_launch_env": {"1BAD": "x"}}, "env", {"1BAD": "x"}),
    # The inventory's values, given with -e: each reaches the job script, so each is checked too.
    ({"slurm_launch_cuda_home": "/x/$(id)"}, "cuda_home", "/x/$(id)"),
    ({"slurm_launch_conda_root": "conda"}, "conda_root", "conda"),
    ({"slurm_launch_conda_env": "a b"}, "conda_env", "a b"),
    ({"slurm_launch_venv": "venv"}, "venv", "venv"),
    ({"slurm_launch_nccl_env_dir": "nccl"}, "nccl_env_dir", "nccl"),
    ({"slurm_launch_jobs_dir": "jobs"}, "jobs_dir", "jobs"),
])
def test_a_bad_value_raises_the_job_value_problems_message(nothing_runs, given, key, value):
    with pytest.raises(ValueError) as raised:
        slurm_train.launch(script=TRAINER, nodes="node110", **given)
    # What derive.yml's check gives for this request: the filter's problems, joined, with a '.'.
    values = {key: value, "script": TRAINER, "job_name": given.get("job_name", "train_ddp")}
    problems = launch_request.value_problems(values)
    assert problems, "the value must be one the rule refuses"
    assert str(raised.value) == f"{'; '.join(problems)}."



@pytest.mark.parametrize("given", [
    {"sweep": {"lr": ["0.1", "0.1"]}},
    {"sweep": {"lr": [0.1]}, "sweep_parallel": -1},
    {"sweep_parallel": 2},
    {"sweep": {"steps": [1, 2]}, "script_args": "--steps 5"},
])
def test_a_bad_sweep_raises_the_sweep_problems_message(nothing_runs, given):
    with pytest.raises(ValueError) as raised:
        slurm_train.launch(script=TRAINER, nodes="node110", **given)
    args = given.get("script_args", "").split()
    problems = launch_request.sweep_problems(given.get("sweep", {}), given.get("sweep_parallel", 0), args)
    assert problems, "the sweep must be one the rule refuses"
    assert str(raised.value) == f"{'; '.join(problems)}."


def test_the_job_name_derived_from_the_script_is_checked_too(nothing_runs, tmp_path):
    script = tmp_path / "bad name.py"
    with pytest.raises(ValueError, match=r"^job_name='bad name' is not allowed: a job name is "):
        slurm_train.launch(script=str(script), nodes="node110")


def test_script_args_that_cannot_be_split_raise_the_filters_message(nothing_runs):
    with pytest.raises(ValueError) as raised:
        slurm_train.launch(script=TRAINER, nodes="node110", script_args='--name "a b')
    assert str(raised.value).startswith("script_args '--name \"a b' cannot be split into arguments: ")


def test_a_followed_job_has_no_values_to_check(monkeypatch):
    """-e job_id=N: derive.yml checks no values (its task has `when: not following`); the run goes ahead."""
    calls = []
    monkeypatch.setattr(_playbook.ansible_runner, "run",
                        lambda **kwargs: calls.append({**kwargs, "extravars": _written(kwargs)}) or _Finished())
    with pytest.raises(slurm_train.LaunchError):
        slurm_train.launch(job_id=12, time_limit="1h")
    assert calls and calls[0]["extravars"] == {"job_id": 12, "time_limit": "1h"}


def test_the_checked_keys_are_the_launchs_own_values():
    """_rules.GIVEN_KEYS, the request check's (slurm_launch_request's), each reads slurm_launch_<key> in the
    request the role passes it (vars/main.yml's _slurm_launch_request): a key renamed there fails this test."""
    request = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["_slurm_launch_request"]
    assert _rules.GIVEN_KEYS and set(_rules.GIVEN_KEYS) <= set(request)
    for key in _rules.GIVEN_KEYS:
        assert request[key] == f"{{{{ slurm_launch_{key} }}}}", (key, request[key])


class _Finished:
    status, rc = "failed", 2


def _written(kwargs):
    """The -e values the API wrote for ansible-runner (env/extravars), as Ansible loads them; the
    file itself goes with the run's private directory."""
    from ansible.parsing.dataloader import DataLoader

    path = Path(kwargs["private_data_dir"]) / "env" / "extravars"
    assert "extravars" not in kwargs, "no values for ansible-runner to put on the command line"
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)
    return DataLoader().load_from_file(str(path))


def test_a_good_request_runs_launch_yml_with_the_values_as_extra_vars(monkeypatch):
    calls = []

    def run(**kwargs):
        calls.append({**kwargs, "extravars": _written(kwargs)})
        handler = kwargs["event_handler"]
        handler({"event": "verbose", "stdout": "job 7 (train_ddp): RUNNING on node110,node111"})
        handler({"event": "verbose", "stdout": "  7 | [rank0] step=1 loss=0.5"})
        handler({"event": "runner_on_failed", "event_data": {
            "task_action": "ansible.builtin.assert", "task": "Check the counts.",
            "res": {"failed": True, "msg": "One or more items failed",
                    "results": [{"failed": False}, {"failed": True, "msg": "num_nodes=0 is not allowed: ..."}]}}})
        return _Finished()

    monkeypatch.setattr(_playbook.ansible_runner, "run", run)
    lines = []
    with pytest.raises(slurm_train.LaunchError) as raised:
        slurm_train.launch(script="examples/train_ddp.py", group="gpu_A6000", num_nodes=0, user="bob",
                           on_progress=lines.append, script_args=["--steps", "5"])
    assert raised.value.message == "num_nodes=0 is not allowed: ..."
    assert not isinstance(raised.value, slurm_train.JobFailed) and raised.value.job_id is None
    assert lines == ["job 7 (train_ddp): RUNNING on node110,node111", "  7 | [rank0] step=1 loss=0.5"]
    (call,) = calls
    assert call["playbook"] == str(PROJECT_ROOT / "launch.yml") and call["project_dir"] == str(PROJECT_ROOT)
    assert call["inventory"] == str(PROJECT_ROOT / "inventory" / "local")
    assert call["extravars"] == {"script": str(PROJECT_ROOT / "examples" / "train_ddp.py"), "group": "gpu_A6000",
                                 "num_nodes": 0, "script_args": ["--steps", "5"], "ansible_user": "bob"}
    assert call["envvars"]["ANSIBLE_HOST_KEY_CHECKING"] == "True" and call["quiet"] is True


def test_a_job_that_ran_and_failed_raises_job_failed_with_its_collected_result(monkeypatch, tmp_path):
    outputs = tmp_path / "train_ddp-9"
    outputs.mkdir()
    failure = {"rank": 1, "node": "node111", "type": "ValueError", "message": "bad batch",
               "traceback": ['File "/nas/code/train.py", line 9, in step', "raise ValueError('bad batch')"]}
    job = {"job_id": 9, "name": "train_ddp", "state": "FAILED", "exit_code": 1, "outcome": "failed",
           "run_line": "fresh run 1", "failure": failure}
    (outputs / "job.json").write_text(json.dumps(job))
    (outputs / "summary.txt").write_text("job        9 (train_ddp)\n")

    def run(**kwargs):
        handler = kwargs["event_handler"]
        # The task that followed the job wrote its outputs, and failed for it.
        handler({"event": "runner_on_failed", "event_data": {"task_action": "hpc.slurm_train.slurm_job", "res": {
            "job_id": 9, "name": "train_ddp", "state": "FAILED", "exit_code": 1, "outcome": "failed", "final": True,
            "failed": True, "msg": "job 9 (train_ddp) ended FAILED, exit code 1",
            "collected": {"dest": str(outputs), "written": ["job.json", "summary.txt"]}}}})
        return _Finished()

    monkeypatch.setattr(_playbook.ansible_runner, "run", run)
    with pytest.raises(slurm_train.JobFailed) as raised:
        slurm_train.launch(script=TRAINER, nodes="node110")
    result = raised.value.result
    assert raised.value.message == "job 9 (train_ddp) ended FAILED, exit code 1"
    assert (result.job_id, result.state, result.exit_code, result.outcome) == (9, "FAILED", 1, "failed")
    assert (result.outputs, result.job, result.run_line) == (outputs, job, "fresh run 1")
    assert result.summary == "job        9 (train_ddp)" and not result.succeeded
    assert raised.value.failure == result.failure == failure, "job.json's exception, as written"


def test_jobs_rows_are_the_tables_rows():
    runs = _rules.runs
    active = [{"job_id": 12, "name": "long", "state": "PENDING", "reason": "Priority", "nodes": "", "elapsed": "0:00",
               "work_dir": "/nas/jobs/alice/long/runs/2"}]
    finished = [{"job_id": 11, "name": "done", "state": "COMPLETED", "exit_code": 0, "nodes": ["node110"],
                 "elapsed_seconds": 65, "restarts": 0, "stdout_path": "/nas/jobs/alice/done/runs/1/done-11.out",
                 "outputs": "/out/done-11", "cost": {"hours": 0.0133, "unit": "GPU", "lost_hours": 0.0067}}]
    rows = runs.jobs_rows(active, finished)
    assert rows == [("12", "long", "2", "PENDING (Priority)", "-", "-", "0:00", "-", "-", "-"),
                    ("11", "done", "1", "COMPLETED", "0", "node110", "1:05", "0", "0.0133 GPU-h (0.0067 lost)",
                     "/out/done-11")]
    table = runs.jobs_table(active, finished)
    assert [line.split()[0] for line in table] == ["job", "12", "11"]


def test_caller_values_are_data_on_the_controller_never_templates(monkeypatch, tmp_path):
    """A service that wraps the API passes its users' values: "{{ lookup('pipe', ...) }}" stays that
    text for the playbook (!unsafe), and Ansible's own variables are refused before anything runs."""
    calls = []
    monkeypatch.setattr(_playbook.ansible_runner, "run",
                        lambda **kwargs: calls.append({**kwargs, "extravars": _written(kwargs)}) or _Finished())
    canary = tmp_path / "ran"
    hostile = "{{ lookup('pipe', 'touch " + str(canary) + "') }}{# c #}{% if 1 %}x{% endif %}"
    with pytest.raises(slurm_train.LaunchError):
        slurm_train.launch(job_id=12, job_name=hostile, slurm_launch_env={"NOTE": hostile})
    from ansible.template import Templar
    from ansible.parsing.dataloader import DataLoader

    given = calls[0]["extravars"]
    templated = Templar(loader=DataLoader(), variables={}).template(given)
    assert templated["job_name"] == hostile and templated["slurm_launch_env"] == {"NOTE": hostile}
    assert not canary.exists()
    for key in ("ansible_python_interpreter", "ansible_become_user", "ansible_ssh_common_args"):
        calls.clear()
        with pytest.raises(ValueError) as raised:
            slurm_train.launch(job_id=12, **{key: "x"})
        assert str(raised.value).startswith(f"{key}: the API takes the launch's own keys only")
        assert calls == []


def test_values_given_without_a_script_are_checked_alone():
    with pytest.raises(ValueError, match=r"time_limit"):
        _rules.check_values({"nodes": "node110", "time_limit": "soon"})
    assert _rules.check_values({"nodes": "node110"}) is None


def test_the_variables_suggested_are_the_first_submit_hosts_and_the_cluster_roles_defaults(tmp_path):
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("[submit]\nlogin-a cluster_site_a=1\nlogin-b cluster_site_b=1\n")
    names = _rules.prefixed_variables(inventory)
    assert "cluster_site_a" in names and "cluster_site_b" not in names
    assert "cluster_jobs_dir" in names, "a default of the cluster role"
    # group_vars that do not parse: the playbook says why; the suggestions keep the defaults.
    broken = tmp_path / "broken"
    (broken / "group_vars").mkdir(parents=True)
    (broken / "hosts.ini").write_text("[submit]\nlogin-a cluster_site_a=1\n")
    (broken / "group_vars" / "all.yml").write_text("cluster_x: [unclosed\n")
    names = _rules.prefixed_variables(broken / "hosts.ini")
    assert "cluster_jobs_dir" in names and "cluster_site_a" not in names


def _playing(monkeypatch, events, status="successful"):
    """ansible-runner as a stand-in that sends ``events`` and ends ``status``; the -e values each run was given."""
    given = []

    class Ended:
        rc = 0 if status == "successful" else 2

    Ended.status = status

    def run(**kwargs):
        given.append(_written(kwargs))
        for event in events:
            kwargs["event_handler"](event)
        return Ended()

    monkeypatch.setattr(_playbook.ansible_runner, "run", run)
    return given


def _task(kind, action, res):
    return {"event": kind, "event_data": {"task_action": action, "task": "a task", "res": res}}


def _active(job_id):
    return {"job_id": job_id, "name": f"j{job_id}", "state": "RUNNING", "reason": "", "nodes": "node110",
            "elapsed": "0:01", "work_dir": f"/nas/jobs/alice/j{job_id}/runs/1"}


def test_jobs_lists_slurms_jobs_and_the_collected_ones_newest_first(monkeypatch, tmp_path):
    done = tmp_path / "done-11"
    done.mkdir()
    (done / "job.json").write_text(json.dumps({
        "job_id": 11, "name": "done", "user": "alice", "state": "COMPLETED", "exit_code": 0, "nodes": ["node110"],
        "elapsed_seconds": 65, "restarts": 0, "stdout_path": "/nas/jobs/alice/done/runs/1/done-11.out"}))
    files = [{"path": str(done / "job.json")}, {"path": str(tmp_path / "gone-10" / "job.json")}]
    active = [_active(job_id) for job_id in range(100, 121)]  # 21 pending or running
    given = _playing(monkeypatch, [_task("runner_on_ok", "hpc.slurm_train.slurm_job", {"jobs": active, "user": "alice"}),
                                   _task("runner_on_ok", "ansible.builtin.find", {"files": files})])
    shown = slurm_train.jobs()
    assert len(shown) == _rules.runs.JOBS_SHOWN and shown[0]["job"] == "120" and given[0]["all"] is False
    every = slurm_train.jobs(all=True)
    assert [row["job"] for row in every][-2:] == ["100", "11"] and given[1]["all"] is True
    assert every[-1]["state"] == "COMPLETED" and every[-1]["outputs"] == str(done)


def test_jobs_fails_with_the_playbooks_message_or_when_nothing_was_listed(monkeypatch):
    _playing(monkeypatch, [_task("runner_on_failed", "ansible.builtin.command", {"failed": True, "msg": "squeue: no"})],
             status="failed")
    with pytest.raises(slurm_train.LaunchError, match="^squeue: no$"):
        slurm_train.jobs()
    _playing(monkeypatch, [])
    with pytest.raises(slurm_train.LaunchError, match=r"^jobs.yml listed no jobs"):
        slurm_train.jobs()


def test_logs_gives_the_jobs_own_lines_and_its_end(monkeypatch):
    _playing(monkeypatch, [{"event": "verbose", "stdout": "job 5 (t): RUNNING on node110"},
                           {"event": "verbose", "stdout": "  5 | step 1 | loss 0.5\n  6 | another job's line"},
                           _task("runner_on_ok", "hpc.slurm_train.slurm_job",
                                 {"job_id": 5, "name": "t", "state": "COMPLETED", "exit_code": 0,
                                  "outcome": "succeeded", "final": True})])
    lines = []
    result = slurm_train.logs(5, on_line=lines.append)
    assert lines == ["step 1 | loss 0.5"]
    assert (result.job_id, result.name, result.state, result.outcome, result.final) == (5, "t", "COMPLETED",
                                                                                       "succeeded", True)
    assert slurm_train.logs(5).state == "COMPLETED", "without on_line the lines are not asked for"


def test_cancel_and_logs_fail_with_the_playbooks_message_and_the_job_if_one_was_found(monkeypatch):
    _playing(monkeypatch, [_task("runner_on_failed", "hpc.slurm_train.slurm_job",
                                 {"failed": True, "msg": "job 5 belongs to bob, not to alice", "job_id": 5})],
             status="failed")
    with pytest.raises(slurm_train.LaunchError) as raised:
        slurm_train.cancel(job_id=5)
    assert (raised.value.message, raised.value.job_id) == ("job 5 belongs to bob, not to alice", 5)
    _playing(monkeypatch, [_task("runner_on_failed", "ansible.builtin.assert",
                                 {"failed": True, "msg": "cancel='x' is not a job id"})], status="failed")
    with pytest.raises(slurm_train.LaunchError) as raised:
        slurm_train.cancel("x")
    assert raised.value.job_id is None
    _playing(monkeypatch, [])
    with pytest.raises(slurm_train.LaunchError, match=r"^jobs.yml -e logs=5 gave no slurm_job result$"):
        slurm_train.logs(5)


def test_preflight_returns_its_summary_or_fails_with_the_playbooks_message(monkeypatch):
    summary = ["node      cuda  python", "node110   ok    ok"]
    given = _playing(monkeypatch, [_task("runner_on_ok", "ansible.builtin.debug", {"msg": "progress"}),
                                   _task("runner_on_ok", "ansible.builtin.debug", {"msg": summary})])
    assert slurm_train.preflight(nodes="node110") == summary
    assert given[0]["preflight"] is True and given[0]["nodes"] == "node110"
    _playing(monkeypatch, [_task("runner_on_ok", "ansible.builtin.debug", {"msg": "progress"})])
    with pytest.raises(slurm_train.LaunchError, match="^preflight.yml ended without its summary$"):
        slurm_train.preflight(nodes="node110")
    _playing(monkeypatch, [_task("runner_on_failed", "ansible.builtin.assert",
                                 {"failed": True, "msg": "node111: nvcc not found"})], status="failed")
    with pytest.raises(slurm_train.LaunchError, match="^node111: nvcc not found$"):
        slurm_train.preflight(nodes="node110,node111")


def test_a_launch_without_wait_returns_the_job_as_submitted(monkeypatch):
    _playing(monkeypatch, [_task("runner_on_ok", "hpc.slurm_train.slurm_job",
                                 {"job_id": 12, "name": "train_ddp", "state": "PENDING", "final": False})])
    result = slurm_train.launch(script=TRAINER, nodes="node110", wait=False)
    assert (result.job_id, result.name, result.state, result.final, result.outputs) == (12, "train_ddp", "PENDING",
                                                                                       False, None)
    _playing(monkeypatch, [])
    with pytest.raises(slurm_train.LaunchError, match="^launch.yml succeeded without a slurm_job result"):
        slurm_train.launch(script=TRAINER, nodes="node110")


def test_where_and_as_whom_are_named_never_positional(nothing_runs):
    with pytest.raises(TypeError):
        slurm_train.launch(TRAINER, "node110", None, None, "inventory/local")
    with pytest.raises(TypeError):
        slurm_train.preflight("node110", None, None, "inventory/local")
    with pytest.raises(TypeError):
        slurm_train.jobs(False, "inventory/local")
    with pytest.raises(TypeError):
        slurm_train.cancel(5, "inventory/local")
    with pytest.raises(TypeError):
        slurm_train.logs(5, None, "inventory/local")


def test_a_job_result_is_a_value_compared_by_the_job_and_shown_without_the_tasks_result():
    import dataclasses

    one = slurm_train.JobResult(job_id=5, name="t", state="COMPLETED", exit_code=0, outcome="succeeded", final=True,
                                job={"cost": 1}, result={"token": "secret"})
    other = slurm_train.JobResult(job_id=5, name="t", state="COMPLETED", exit_code=0, outcome="succeeded", final=True)
    assert one == other and "secret" not in repr(one)
    with pytest.raises(dataclasses.FrozenInstanceError):
        one.state = "FAILED"
