"""Shared test setup: the repo's virtualenv on PATH, so ansible, ansible-runner and the
local-cluster tool find the same Python and Ansible the tests run with."""

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
os.environ["PATH"] = f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"
os.environ.setdefault("ANSIBLE_CONFIG", str(REPO / "ansible.cfg"))
