"""The roles and templates call the collection's filters by their full names: inside a collection a
short name fails only at run time ("No filter named ..."), which neither ansible-lint nor a syntax
check sees."""

import importlib
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def collection_filters():
    names = set()
    for path in sorted((REPO / "plugins" / "filter").glob("*.py")):
        module = importlib.import_module(f"ansible_collections.hpc.slurm_train.plugins.filter.{path.stem}")
        if hasattr(module, "FilterModule"):
            names |= set(module.FilterModule().filters())
    return names


def test_yaml_and_templates_call_the_collections_filters_by_their_full_name():
    names = collection_filters()
    assert {"train_job", "run_line", "nccl_env_merge"} <= names
    files = subprocess.run(["git", "ls-files", "*.yml", "*.yaml", "*.j2"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.split()
    short = [f"{name}:{number}: | {called}"
             for name in files
             for number, line in enumerate((REPO / name).read_text(encoding="utf-8").splitlines(), 1)
             for called in re.findall(r"\|\s*([\w.]+)", line) if called in names]
    assert not short, "filters called without hpc.slurm_train.:\n" + "\n".join(short)
