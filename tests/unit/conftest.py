"""Unit tests import the project's code as Ansible does: by its collection name,
``ansible_collections.hpc.slurm_train.plugins...``, through Ansible's own collection loader set up
as ansible-playbook sets it up (the checkout's ansible.cfg puts its collections/ link first)."""

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
