"""Make the project's Ansible code importable in unit tests the way Ansible ships it.

``module_utils/NAME.py`` is importable as plain ``NAME`` and also as
``ansible.module_utils.NAME`` (one module object, so its exception classes are
the same under both names); modules in ``library/`` import as plain modules.
"""

import importlib
import sys
from pathlib import Path

import ansible.module_utils
import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[2]
MODULE_UTILS_DIR = PROJECT_ROOT / "module_utils"
LIBRARY_DIR = PROJECT_ROOT / "library"
FIXTURES_DIR = Path(__file__).resolve().parent / "fixtures"

for directory in (LIBRARY_DIR, MODULE_UTILS_DIR):
    if str(directory) not in sys.path:
        sys.path.insert(0, str(directory))

for source in sorted(MODULE_UTILS_DIR.glob("*.py")):
    shared = importlib.import_module(source.stem)
    sys.modules[f"ansible.module_utils.{source.stem}"] = shared
    setattr(ansible.module_utils, source.stem, shared)


@pytest.fixture
def slurm_output():
    """Text of a recorded Slurm command output under fixtures/slurm/."""

    def read(name):
        return (FIXTURES_DIR / "slurm" / name).read_text(encoding="utf-8")

    return read
