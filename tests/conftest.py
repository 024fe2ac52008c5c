"""Shared test setup: the repo's virtualenv on PATH, so ansible, ansible-runner and the
local-cluster tool find the same Python and Ansible the tests run with; and Ansible's collection
loader, set up once before any test module is imported (tests/unit/conftest.py's
init_plugin_loader), so that ``ansible_collections.hpc.slurm_train`` resolves whichever tests a
run collects first."""

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
os.environ["PATH"] = f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"
os.environ.setdefault("ANSIBLE_CONFIG", str(REPO / "ansible.cfg"))

# After ANSIBLE_CONFIG: the checkout's ansible.cfg puts its collections/ link on the search path.
from ansible.plugins import loader as _loader  # noqa: E402

_loader.init_plugin_loader()
