"""slurm_train's one run of a playbook (_playbook.py): which playbook and inventory it picks, the
values it writes for ansible-playbook, and what it makes of the run's events; ansible-runner a
stand-in that records what it was given and plays the events a run would send."""

import os
import sys
from pathlib import Path

import pytest

from conftest import PROJECT_ROOT
from slurm_train import _playbook


class Ended:
    def __init__(self, status="successful", rc=0):
        self.status, self.rc = status, rc


def play(monkeypatch, events, status="successful", rc=0):
    """run_playbook's Run when ansible-runner sends ``events``; and what ansible-runner was given,
    with the -e file's text."""
    given = {}

    def run(**kwargs):
        given.update(kwargs, extravars_text=(Path(kwargs["private_data_dir"]) / "env" / "extravars").read_text())
        for event in events:
            kwargs["event_handler"](event)
        return Ended(status, rc)

    monkeypatch.setattr(_playbook.ansible_runner, "run", run)
    return _playbook.run_playbook("launch.yml", {"script": "/x/train.py"}), given


def result_event(kind, action, res, **data):
    return {"event": kind, "event_data": {"task_action": action, "task": "a task", "res": res, **data}}


def test_installed_the_collections_own_playbook_runs(monkeypatch):
    assert _playbook.playbook_path("launch.yml") == PROJECT_ROOT / "launch.yml"
    monkeypatch.setattr(_playbook, "CHECKOUT", None)
    assert _playbook.playbook_path("launch.yml") == _playbook.ROOT / "playbooks" / "launch.yml"


def test_the_inventory_is_the_one_ansible_playbook_would_use(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    bare = tmp_path / "bare.cfg"
    bare.write_text("[defaults]\nforks = 5\n")
    monkeypatch.delenv("ANSIBLE_INVENTORY", raising=False)
    monkeypatch.setenv("ANSIBLE_CONFIG", str(bare))
    assert _playbook.default_inventory() == str(PROJECT_ROOT / "inventory" / "local"), "a checkout's own"
    monkeypatch.setattr(_playbook, "CHECKOUT_INVENTORY", None)
    assert _playbook.default_inventory() == "/etc/ansible/hosts", "Ansible's default, installed"
    monkeypatch.setattr(_playbook, "CHECKOUT_INVENTORY", PROJECT_ROOT / "inventory" / "local")
    named = tmp_path / "site.cfg"
    named.write_text("[defaults]\ninventory = /srv/site/hosts\n")
    monkeypatch.setenv("ANSIBLE_CONFIG", str(named))
    assert _playbook.default_inventory() == "/srv/site/hosts"
    monkeypatch.setenv("ANSIBLE_INVENTORY", "/srv/a,/srv/b")
    assert _playbook.default_inventory() == "/srv/a,/srv/b"
    assert _playbook.inventory_path("hosts.ini") == str(tmp_path / "hosts.ini")


def test_the_failure_is_the_failed_tasks_then_ansibles_error_then_the_status():
    assert _playbook.Run(status="failed", rc=2).failure == "the playbook ended failed (rc 2) without a failed task"
    assert _playbook.Run(errors=["ERROR! the playbook could not be read"]).failure == \
        "ERROR! the playbook could not be read"
    assert _playbook.Run(failures=["a", "b"], errors=["c"]).failure == "a\nb"


def test_the_last_result_of_an_action_is_found():
    run = _playbook.Run(results=[("a", "t1", {"n": 1}), ("a", "t2", {"n": 2}), ("b", "t3", {"n": 3})])
    assert run.last("a") == {"n": 2}
    assert run.last("a", lambda res: res["n"] == 1) == {"n": 1}
    assert run.last("c") is None and run.last("b", lambda res: False) is None


def test_the_values_are_written_as_data_for_ansible_playbook(monkeypatch, tmp_path):
    values = {"job_name": "{{ x }}", "script_args": ["--a", "{% y %}"], "slurm_launch_env": {"K": "{# z #}"},
              "num_nodes": 2, "plain": "text"}
    _playbook.write_extravars(tmp_path, values)
    text = (tmp_path / "env" / "extravars").read_text()
    assert 'job_name: !unsafe "{{ x }}"' in text and '- !unsafe "{% y %}"' in text
    assert 'K: !unsafe "{# z #}"' in text and "num_nodes: 2" in text and "plain: text" in text


def test_the_runs_events_become_its_results_failures_and_errors(monkeypatch):
    ok = {"changed": False, "msg": "all good"}
    looped = {"failed": True, "msg": "One or more items failed",
              "results": [{"failed": False, "msg": "item fine"}, {"failed": True, "msg": "item bad"}, "x"]}
    events = [result_event("runner_on_ok", "ansible.builtin.debug", ok),
              result_event("runner_on_failed", "ansible.builtin.assert", {"failed": True, "msg": "ignored"},
                           ignore_errors=True),
              result_event("runner_on_failed", "ansible.builtin.assert", looped),
              {"event": "error", "stdout": "  [ERROR]: a task could not be templated  \n"},
              {"event": "error"}]
    run, given = play(monkeypatch, events, status="failed", rc=2)
    assert [action for action, _, _ in run.results] == ["ansible.builtin.debug", "ansible.builtin.assert",
                                                         "ansible.builtin.assert"]
    assert run.failures == ["item bad"] and run.failure == "item bad"
    assert run.errors == ["[ERROR]: a task could not be templated", ""]
    assert (run.status, run.rc) == ("failed", 2)


def test_the_run_is_from_the_checkout_with_this_pythons_ansible(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    run, given = play(monkeypatch, [])
    assert given["project_dir"] == str(PROJECT_ROOT) and given["envvars"]["PWD"] == str(PROJECT_ROOT)
    bin_dir = str(Path(sys.executable).parent)
    assert given["envvars"]["PATH"] == bin_dir + os.pathsep + "/usr/bin:/bin"
    assert not Path(given["private_data_dir"]).exists(), "the private directory goes with the run"
