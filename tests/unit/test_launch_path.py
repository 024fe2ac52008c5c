"""docs/architecture.md lists one launch's path file by file: the code a launch runs, at most 12
files, and beside them the programs its job script runs on the nodes. The Python files of the
path are exactly what the launch's two actions and its module import of the collection, followed
import by import, and the node programs what the launch stages beside the job script, so an
import or a program added to the launch shows up in the list (and in its count) or fails here."""

import ast
import re

from conftest import PROJECT_ROOT
from test_slurm_launch_request_action import script  # noqa: F401  (a fixture)

PACKAGE = "ansible_collections.hpc.slurm_train."
# Where the launch starts: the two tasks' actions and the module they run.
ENTRIES = ("plugins/action/slurm_launch_request.py", "plugins/action/slurm_job.py", "library/slurm_job.py")
MOST_FILES = 12


def path_block():
    text = (PROJECT_ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    return text.split("## One launch, file by file", 1)[1].split("```")[1]


def listed_files():
    """The numbered files of the architecture's "One launch, file by file" block, in order."""
    return [match[2] for match in re.finditer(r"^\s*(\d+)\s+(\S+)", path_block(), re.MULTILINE)]


def listed_node_programs():
    """The block's files marked '-': what the job script runs on its nodes."""
    return [match[1] for match in re.finditer(r"^\s*-\s+(\S+)", path_block(), re.MULTILINE)]


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
    assert {path for path in listed if path.endswith(".py")} == launch_imports()
    assert "templates/train.sbatch.j2" in listed


def test_the_listed_node_programs_are_what_the_launch_stages_beside_the_job_script(script):
    from test_slurm_launch_request_action import request, run
    staged = {one["name"] for one in run(request(script))["job_files"] if one["name"].endswith(".py")}
    # A staged file that is also imported on the path (bad_nodes.py) is listed there, once.
    staged -= {path.rsplit("/", 1)[-1] for path in listed_files()}
    assert sorted(listed_node_programs()) == [f"roles/slurm_launch/files/{name}" for name in sorted(staged)]


def test_both_import_forms_are_followed():
    assert "plugins/module_utils/run_cost.py" in imported_files("library/slurm_job.py")
    assert "plugins/plugin_utils/job_outputs.py" in imported_files("plugins/action/slurm_job.py")
