"""The cluster role's target_python action: the command that asks a host for its Python, what the
answer means (the slurm_job action applies the same rule), and the task that refuses an old one."""

import subprocess
from types import SimpleNamespace
from unittest import mock

import pytest

from conftest import PROJECT_ROOT, init_plugin_loader

from ansible_collections.hpc.slurm_train.plugins.action import target_python
from ansible_collections.hpc.slurm_train.plugins.module_utils import cluster_rules


@pytest.mark.parametrize("version, minimum", [("2.16.3", "2.7"), ("2.17.0", "3.7"), ("2.19.14", "3.8"),
                                              ("2.20.0", "3.9"), ("2.21.1", "3.9")])
def test_each_ansible_core_has_its_oldest_python(version, minimum):
    assert cluster_rules.minimum_python(version) == minimum


@pytest.mark.parametrize("answer", ["/usr/bin/python3 Python 3.8.10\n", "/opt/py/bin/python3.12 Python 3.12.1\n",
                                    "warning: locale\n/usr/bin/python3 Python 3.11.2\n"])
def test_a_python_new_enough_is_no_problem(answer):
    assert cluster_rules.target_python_problem(answer, "login01", "2.19.14") == ""


@pytest.mark.parametrize("answer, what", [
    ("/usr/bin/python3 Python 3.6.8\n", "/usr/bin/python3 is Python 3.6."),
    ("/usr/bin/python3 Python 3.7.17\n", "/usr/bin/python3 is Python 3.7."),
    ("no Python found\n", "this host answered no Python found."),
    ("", "this host answered ."),
])
def test_an_old_or_missing_python_is_named_with_the_fix(answer, what):
    problem = cluster_rules.target_python_problem(answer, "login01", "2.19.14")
    assert problem.startswith(f"login01: ansible-core 2.19.14 needs Python 3.8 or newer on the hosts it manages, "
                              f"and {what}")
    assert "set ansible_python_interpreter to it for this host" in problem


def test_the_probe_runs_in_a_shell_and_quotes_what_it_is_given(tmp_path):
    odd = tmp_path / "a b; echo pwned"
    odd.write_text("#!/bin/sh\necho 'Python 3.6.8'\n")
    odd.chmod(0o755)
    out = subprocess.run(["sh", "-c", cluster_rules.target_python_probe(str(odd), [])],
                         capture_output=True, text=True, check=True).stdout
    assert out == f"{odd} Python 3.6.8\n"
    found = subprocess.run(["sh", "-c", cluster_rules.target_python_probe("auto", ["/nonexistent/python", "sh"])],
                           capture_output=True, text=True, check=True).stdout
    assert found.startswith(subprocess.run(["sh", "-c", "command -v sh"], capture_output=True, text=True).stdout.strip())
    none = subprocess.run(["sh", "-c", cluster_rules.target_python_probe("auto_silent", ["/nonexistent/python"])],
                          capture_output=True, text=True, check=True).stdout
    assert none == "no Python found\n"


def fresh_connection():
    """A connection as a task finds it: no temporary directory made on the host yet."""
    connection = mock.MagicMock()
    connection._shell.tmpdir = None
    return connection


def run_action(answer, task_vars, args=None):
    """The target_python task's result on a host whose shell answers the probe with ``answer``;
    and the commands it ran there (with become or not)."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    plugin_loader = init_plugin_loader()
    task = SimpleNamespace(args=args or {}, async_val=0, check_mode=True, action="target_python")
    loader = DataLoader()
    plugin = target_python.ActionModule(task, fresh_connection(), mock.MagicMock(), loader, Templar(loader=loader),
                                        plugin_loader)
    plugin._load_name = "target_python"  # as the plugin loader names it
    ran = []
    with mock.patch.object(plugin, "_low_level_execute_command",
                           side_effect=lambda cmd, **kwargs: ran.append((cmd, kwargs)) or {"rc": 0, "stdout": answer}):
        result = plugin.run(task_vars={"inventory_hostname": "node110", **task_vars})
    assert ran, "the host was asked"
    return result, ran


def test_the_task_refuses_an_old_python_naming_the_host_and_the_fix_in_check_mode_too():
    result, ran = run_action("/opt/py/python3.6 Python 3.6.8\n", {"ansible_python_interpreter": "/opt/py/python3.6"})
    assert (result["failed"], result["changed"], result["python"]) == (True, False, "/opt/py/python3.6 Python 3.6.8")
    assert result["msg"].startswith("node110: ansible-core 2.19.")
    assert "and /opt/py/python3.6 is Python 3.6." in result["msg"]
    # One command, as the connecting account (not become: the interpreter is the same for both).
    assert ran == [("printf '%s ' /opt/py/python3.6; /opt/py/python3.6 -V 2>&1 || true", {"sudoable": False})]


def test_the_task_passes_a_python_new_enough_found_by_discovery():
    result, ran = run_action("/usr/bin/python3 Python 3.11.2\n", {})
    assert (result.get("failed", False), result["changed"], result["python"]) == (
        False, False, "/usr/bin/python3 Python 3.11.2")
    # interpreter_python = auto_silent (ansible.cfg): the fallbacks are tried in discovery's order.
    assert ran[0][0].startswith("for p in ") and "python3" in ran[0][0]


def test_the_task_takes_no_options():
    from ansible.errors import AnsibleActionFail

    with pytest.raises(AnsibleActionFail, match=r"^Unsupported parameters for \(target_python\) module: interpreter\."):
        run_action("", {}, args={"interpreter": "/usr/bin/python3"})


def run_nccl_network_facts(module_result, answer, check_mode=False):
    """The nccl_network_facts action's result when its module run returns ``module_result`` and the
    host's shell answers the Python probe with ``answer``; and the probes run."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    from ansible_collections.hpc.slurm_train.plugins.action import nccl_network_facts as action
    plugin_loader = init_plugin_loader()
    task = SimpleNamespace(args={"detect_ipv4": True}, async_val=0, check_mode=check_mode, action="nccl_network_facts")
    loader = DataLoader()
    plugin = action.ActionModule(task, fresh_connection(), mock.MagicMock(), loader, Templar(loader=loader),
                                 plugin_loader)
    probes = []
    with mock.patch.object(plugin, "_execute_module", return_value=dict(module_result)) as module, \
            mock.patch.object(plugin, "_low_level_execute_command",
                              side_effect=lambda cmd, **kwargs: probes.append(cmd) or {"rc": 0, "stdout": answer}):
        result = plugin.run(task_vars={"inventory_hostname": "node110",
                                       "ansible_python_interpreter": "/opt/py/python3.6"})
    assert module.call_args.kwargs["module_args"] == {"detect_ipv4": True}
    return result, probes


def test_the_nccl_detection_run_on_too_old_a_python_says_so_as_the_python_check_would_have():
    """provision.yml's compute play runs no Python check: its first module run explains its own failure."""
    failure = {"failed": True, "msg": "MODULE FAILURE: No start of json char found", "module_stdout": "",
               "module_stderr": "SyntaxError: invalid syntax", "rc": 1,
               "exception": "Ansible's captured error, printed as the task's error line"}
    result, probes = run_nccl_network_facts(failure, "/opt/py/python3.6 Python 3.6.8\n")
    assert result["failed"] is True and "module_stderr" not in result
    assert "exception" not in result, "Ansible's error line says the problem, not the failed deserialization"
    assert result["msg"].startswith("node110: ansible-core 2.19.")
    assert "and /opt/py/python3.6 is Python 3.6." in result["msg"]
    assert probes == ["printf '%s ' /opt/py/python3.6; /opt/py/python3.6 -V 2>&1 || true"]


def test_the_nccl_detection_asks_nothing_more_when_it_answered_or_failed_for_its_own_reasons():
    answered = {"changed": False, "ansible_facts": {"nccl_network": {"hcas": []}}}
    assert run_nccl_network_facts(answered, "unused") == ({**answered}, [])
    own = {"failed": True, "msg": "sysfs_root /sys/class/infiniband: not a directory"}
    assert run_nccl_network_facts(own, "unused") == ({**own}, [])
    # A module failure on a Python new enough is left as the module said it.
    crash = {"failed": True, "msg": "MODULE FAILURE", "module_stderr": "Traceback ...", "rc": 1}
    result, probes = run_nccl_network_facts(crash, "/usr/bin/python3 Python 3.11.2\n")
    assert result == crash and len(probes) == 1


def test_the_nccl_detection_runs_in_check_mode_too():
    """provision.yml --check reports the NCCL proposal: the detection changes nothing on the node."""
    answered = {"changed": False, "ansible_facts": {"nccl_network": {"hcas": []}}}
    assert run_nccl_network_facts(answered, "unused", check_mode=True) == ({**answered}, [])


def test_a_long_answer_is_quoted_to_its_first_200_characters():
    from ansible_collections.hpc.slurm_train.plugins.module_utils import cluster_rules

    answer = "x" * 199 + "yz" + "z" * 100
    problem = cluster_rules.target_python_problem(answer, "node110", "2.19.1")
    assert f"and this host answered {'x' * 199}y. Install" in problem
