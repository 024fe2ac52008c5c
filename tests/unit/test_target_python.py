"""target_python.py: the command that asks a host for its Python and what the answer means (the
cluster role's target_python.yml and the slurm_job action apply it)."""

import importlib.util
import subprocess

import pytest

from conftest import PROJECT_ROOT

spec = importlib.util.spec_from_file_location(
    "target_python_filters", PROJECT_ROOT / "roles" / "cluster" / "filter_plugins" / "target_python.py")
target_python = importlib.util.module_from_spec(spec)
spec.loader.exec_module(target_python)


@pytest.mark.parametrize("version, minimum", [("2.16.3", "2.7"), ("2.17.0", "3.7"), ("2.19.14", "3.8"),
                                              ("2.20.0", "3.9"), ("2.21.1", "3.9")])
def test_each_ansible_core_has_its_oldest_python(version, minimum):
    assert target_python.minimum_python(version) == minimum


@pytest.mark.parametrize("answer", ["/usr/bin/python3 Python 3.8.10\n", "/opt/py/bin/python3.12 Python 3.12.1\n",
                                    "warning: locale\n/usr/bin/python3 Python 3.11.2\n"])
def test_a_python_new_enough_is_no_problem(answer):
    assert target_python.target_python_problem(answer, "login01", "2.19.14") == ""


@pytest.mark.parametrize("answer, what", [
    ("/usr/bin/python3 Python 3.6.8\n", "/usr/bin/python3 is Python 3.6."),
    ("/usr/bin/python3 Python 3.7.17\n", "/usr/bin/python3 is Python 3.7."),
    ("no Python found\n", "this host answered no Python found."),
    ("", "this host answered ."),
])
def test_an_old_or_missing_python_is_named_with_the_fix(answer, what):
    problem = target_python.target_python_problem(answer, "login01", "2.19.14")
    assert problem.startswith(f"login01: ansible-core 2.19.14 needs Python 3.8 or newer on the hosts it manages, "
                              f"and {what}")
    assert "set ansible_python_interpreter to it for this host" in problem


def test_the_probe_runs_in_a_shell_and_quotes_what_it_is_given(tmp_path):
    odd = tmp_path / "a b; echo pwned"
    odd.write_text("#!/bin/sh\necho 'Python 3.6.8'\n")
    odd.chmod(0o755)
    out = subprocess.run(["sh", "-c", target_python.target_python_probe(str(odd), [])],
                         capture_output=True, text=True, check=True).stdout
    assert out == f"{odd} Python 3.6.8\n"
    found = subprocess.run(["sh", "-c", target_python.target_python_probe("auto", ["/nonexistent/python", "sh"])],
                           capture_output=True, text=True, check=True).stdout
    assert found.startswith(subprocess.run(["sh", "-c", "command -v sh"], capture_output=True, text=True).stdout.strip())
    none = subprocess.run(["sh", "-c", target_python.target_python_probe("auto_silent", ["/nonexistent/python"])],
                          capture_output=True, text=True, check=True).stdout
    assert none == "no Python found\n"
