"""Unit tests import the project's code as Ansible does: by its collection name,
``ansible_collections.hpc.slurm_train.plugins...``, through Ansible's own collection loader set up
as ansible-playbook sets it up (the checkout's ansible.cfg puts its collections/ link first)."""

import json
import os
import subprocess
from pathlib import Path

import pytest

FIXTURES_DIR = Path(__file__).resolve().parent / "fixtures"
# The checkout: the collection's root.
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def init_plugin_loader():
    """Ansible's plugin loader, set up as ansible-playbook sets it up (by tests/conftest.py, once
    per session: Ansible warns when it is set up twice), through which hpc.slurm_train and
    ansible.builtin.* resolve."""
    from ansible.plugins import loader

    return loader


@pytest.fixture
def slurm_output():
    """Text of a recorded Slurm command output under fixtures/slurm/."""

    def read(name):
        return (FIXTURES_DIR / "slurm" / name).read_text(encoding="utf-8")

    return read


def run_role_tasks(tmp_path, role, tasks_from=None, **extra_vars):
    """ansible-playbook on localhost of the collection's ``role`` (its ``tasks_from``, None for
    main), the values given with -e, as an admin runs a role's checks; (returncode, output)."""
    include = {"name": f"hpc.slurm_train.{role}", **({"tasks_from": tasks_from} if tasks_from else {})}
    playbook = tmp_path / "play.yml"
    playbook.write_text(json.dumps([{
        "hosts": "localhost", "gather_facts": False, "connection": "local",
        "tasks": [{"name": "Run the role.", "ansible.builtin.include_role": include}]}]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(PROJECT_ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    proc = subprocess.run([str(PROJECT_ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", "localhost,",
                           str(playbook), "-e", json.dumps(extra_vars)],
                          cwd=PROJECT_ROOT, capture_output=True, text=True, env=env, timeout=120)
    return proc.returncode, proc.stdout + proc.stderr


TASK_FAILED = "[ERROR]: Task failed: Action failed: "


def failed_task(output):
    """The task that failed and the error ansible-playbook printed for it, without Ansible's
    prefix: what the admin reads."""
    lines = output.splitlines()
    error = next(i for i, line in enumerate(lines) if line.startswith(TASK_FAILED))
    task = next(line for line in reversed(lines[:error]) if line.startswith("TASK ["))
    return task, lines[error].removeprefix(TASK_FAILED)
