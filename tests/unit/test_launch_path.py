"""docs/architecture.md lists one launch's path file by file: the code a launch runs, at most 13
files (about a dozen). The Python files of that list are exactly what the launch's two actions and its module
import of the collection, followed import by import, so an import added to the path shows up in
the list (and in its count) or fails here."""

import ast
import re

from conftest import PROJECT_ROOT

PACKAGE = "ansible_collections.hpc.slurm_train."
# Where the launch starts: the two tasks' actions and the module they run.
ENTRIES = ("plugins/action/slurm_launch_request.py", "plugins/action/slurm_job.py", "library/slurm_job.py")
MOST_FILES = 13


def listed_files():
    """The numbered files of the architecture's "One launch, file by file" block, in order."""
    text = (PROJECT_ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = text.split("## One launch, file by file", 1)[1].split("```")[1]
    return [match[2] for match in re.finditer(r"^\s*(\d+)\s+(\S+)", block, re.MULTILINE)]


def collection_file(module):
    """The repo path of a collection module name (plugins.modules is the library/ link)."""
    path = module.removeprefix(PACKAGE).replace(".", "/") + ".py"
    return path.replace("plugins/modules/", "library/", 1)


def imported_files(path):
    found = set()
    for node in ast.walk(ast.parse((PROJECT_ROOT / path).read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE):
            candidate = collection_file(node.module)
            if (PROJECT_ROOT / candidate).is_file():
                found.add(candidate)
            else:  # from <package> import <module>
                found |= {collection_file(f"{node.module}.{alias.name}") for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {collection_file(alias.name) for alias in node.names if alias.name.startswith(PACKAGE)}
    return found


def launch_imports():
    seen, todo = set(), list(ENTRIES)
    while todo:
        path = todo.pop()
        if path not in seen:
            seen.add(path)
            todo += sorted(imported_files(path) - seen)
    return seen


def test_the_listed_path_is_what_the_launch_imports_and_at_most_thirteen_files():
    listed = listed_files()
    assert len(listed) == len(set(listed)) <= MOST_FILES, listed
    for path in listed:
        assert (PROJECT_ROOT / path).is_file(), path
    python = {path for path in listed if path.endswith(".py") and not path.startswith("roles/")}
    assert python == launch_imports()
    # What the launch renders and writes beside the job script.
    assert {"templates/train.sbatch.j2", "roles/slurm_launch/files/gpu_check.py"} <= set(listed)


def test_both_import_forms_are_followed():
    assert "plugins/module_utils/run_cost.py" in imported_files("library/slurm_job.py")
    assert "plugins/plugin_utils/job_outputs.py" in imported_files("plugins/action/slurm_job.py")
