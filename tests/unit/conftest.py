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

# In an order where each one's imports of the others (ansible.module_utils.NAME) are registered first.
_pending = sorted(source.stem for source in MODULE_UTILS_DIR.glob("*.py"))
while _pending:
    for name in list(_pending):
        try:
            shared = importlib.import_module(name)
        except ModuleNotFoundError as error:
            if not (error.name or "").startswith("ansible.module_utils.") or len(_pending) == 1:
                raise
            sys.modules.pop(name, None)
            continue
        sys.modules[f"ansible.module_utils.{name}"] = shared
        setattr(ansible.module_utils, name, shared)
        _pending.remove(name)


def init_plugin_loader():
    """As ansible-playbook starts: ansible.builtin.* lookups resolve through the collection loader
    (once per test session; Ansible warns when it is set up twice)."""
    from ansible.plugins import loader

    if not getattr(init_plugin_loader, "done", False):
        loader.init_plugin_loader()
        init_plugin_loader.done = True
    return loader


@pytest.fixture
def slurm_output():
    """Text of a recorded Slurm command output under fixtures/slurm/."""

    def read(name):
        return (FIXTURES_DIR / "slurm" / name).read_text(encoding="utf-8")

    return read
