"""The project's Ansible content meets ansible-lint's production profile, and every module's
documentation renders with ansible-doc."""

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
MODULES = sorted(path.stem for path in (REPO / "library").glob("*.py"))


def test_ansible_lint_production_profile_is_clean():
    proc = subprocess.run([str(BIN / "ansible-lint"), "--profile=production", "--offline", "--nocolor"],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("module", MODULES)
def test_module_documentation_renders(module):
    # By its collection name, as a site that installed the collection asks for it.
    proc = subprocess.run([str(BIN / "ansible-doc"), f"hpc.slurm_train.{module}"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "[WARNING]" not in proc.stderr, proc.stderr
    for section in ("OPTIONS", "EXAMPLES", "RETURN VALUES"):
        assert section in proc.stdout, f"{module}: no {section} in ansible-doc output"
