"""The launch's parameter table against everything that lists its parameters: the role's defaults
and argument specs and the README's table (written from it), the request keys, the job's integer
keys, the API's keywords and the command's options. A drift names the parameter."""

import copy
import inspect
import subprocess
import sys

import pytest
import yaml

from conftest import PROJECT_ROOT

from ansible_collections.hpc.slurm_train.plugins.action import slurm_launch_request
from ansible_collections.hpc.slurm_train.plugins.plugin_utils import launch_request
from ansible_collections.hpc.slurm_train.plugins.plugin_utils import launch_params
from slurm_train import api, cli

ROLE = PROJECT_ROOT / "roles" / "slurm_launch"
DEFAULTS = ROLE / "defaults" / "main.yml"
SPECS = ROLE / "meta" / "argument_specs.yml"
ANSIBLE_TYPES = {"str", "int", "bool", "list", "dict", "raw", "path", "float"}


def drift(committed, generated):
    """The keys of two mappings whose values differ, or that only one has, sorted."""
    return sorted(key for key in set(committed) | set(generated) if committed.get(key) != generated.get(key))


def defaults_drift(committed_text):
    return drift(yaml.safe_load(committed_text) or {}, yaml.safe_load(launch_params.defaults_yaml()))


def specs_drift(committed_text):
    committed = (yaml.safe_load(committed_text) or {}).get("argument_specs", {})
    generated = yaml.safe_load(launch_params.argument_specs_yaml())["argument_specs"]
    found = []
    for entry in sorted(set(committed) | set(generated)):
        mine, theirs = committed.get(entry, {}), generated.get(entry, {})
        found += [f"{entry}: {key}" for key in drift(mine.get("options") or {}, theirs.get("options") or {})]
        found += [f"{entry}: {key}" for key in drift({k: v for k, v in mine.items() if k != "options"},
                                                     {k: v for k, v in theirs.items() if k != "options"})]
    return found


def test_the_defaults_are_the_tables():
    text = DEFAULTS.read_text(encoding="utf-8")
    assert defaults_drift(text) == [], "defaults/main.yml differs from the table: python scripts/launch_params.py"
    assert text == launch_params.defaults_yaml(), "defaults/main.yml's text: python scripts/launch_params.py"


def test_the_argument_specs_are_the_tables():
    text = SPECS.read_text(encoding="utf-8")
    assert specs_drift(text) == [], "argument_specs.yml differs from the table: python scripts/launch_params.py"
    assert text == launch_params.argument_specs_yaml(), "argument_specs.yml's text: python scripts/launch_params.py"


def test_the_readme_table_is_the_tables():
    text = (PROJECT_ROOT / "README.md").read_text(encoding="utf-8")
    assert launch_params.readme_table() in text, "the README's table: python scripts/launch_params.py"


def test_the_writer_reports_no_stale_file():
    done = subprocess.run([sys.executable, str(PROJECT_ROOT / "scripts" / "launch_params.py"), "--check"],
                          capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout) == (0, ""), done.stdout + done.stderr


def test_a_hand_edit_of_a_generated_file_is_named_by_its_key():
    defaults = DEFAULTS.read_text(encoding="utf-8").replace(
        "slurm_launch_log_tail_lines: 40", "slurm_launch_log_tail_lines: 41")
    assert defaults_drift(defaults) == ["slurm_launch_log_tail_lines"]
    assert defaults_drift(defaults + "slurm_launch_new_knob: 1\n") == ["slurm_launch_log_tail_lines",
                                                                       "slurm_launch_new_knob"]
    specs = yaml.safe_load(SPECS.read_text(encoding="utf-8"))
    changed = copy.deepcopy(specs)
    changed["argument_specs"]["main"]["options"]["slurm_launch_wait"]["type"] = "str"
    del changed["argument_specs"]["preflight_select"]["options"]["slurm_launch_preflight_sizes"]
    assert specs_drift(yaml.safe_dump(changed)) == ["main: slurm_launch_wait",
                                                    "preflight_select: slurm_launch_preflight_sizes"]


def test_each_row_is_whole():
    seen_aliases = set()
    for key, param in launch_params.PARAMS.items():
        assert param.type in ANSIBLE_TYPES, key
        assert param.description and "\n" not in param.description, key
        assert (param.elements is not None) == (param.type == "list"), key
        assert (param.default is None) == (param.from_var is not None), key
        if param.default is not None and param.type in ("int", "bool", "list", "dict", "str"):
            kind = {"int": int, "bool": bool, "list": list, "dict": dict, "str": str}[param.type]
            assert isinstance(param.default, kind) and (param.type == "bool" or not isinstance(param.default, bool)), key
        if param.choices:
            assert param.default is None or param.default in param.choices, key
        if param.alias:
            assert param.alias not in seen_aliases and param.alias not in launch_params.NAMES, key
            seen_aliases.add(param.alias)
    assert len(launch_params.TABLE) > len(launch_params.PARAMS), "the sections"


def test_the_request_keys_and_the_values_given_are_the_tables():
    assert slurm_launch_request.REQUEST_KEYS == launch_params.REQUEST_KEYS
    assert set(launch_params.GIVEN_KEYS) <= set(launch_params.REQUEST_KEYS)
    request = yaml.safe_load((ROLE / "vars" / "main.yml").read_text(encoding="utf-8"))["_slurm_launch_request"]
    assert drift(request, {key: f"{{{{ slurm_launch_{key} }}}}" for key in launch_params.REQUEST_KEYS}) == []


def test_the_jobs_whole_numbers_are_the_tables_ints():
    # The job script's values of the same name as a parameter: a whole number in one is one in both.
    shared = [key for key in launch_request.JOB_KEYS if key in launch_params.PARAMS]
    assert len(shared) > 20
    for key in shared:
        assert (launch_params.PARAMS[key].type == "int") == (key in launch_request.INTEGERS), key


@pytest.mark.parametrize("function", [api.launch, api.preflight])
def test_the_apis_named_keywords_are_launch_aliases(function):
    named = [name for name, parameter in inspect.signature(function).parameters.items()
             if parameter.kind is not inspect.Parameter.VAR_KEYWORD]
    launch_keys = [name for name in named if name not in ("inventory", "user", "on_progress", "on_line")]
    assert launch_keys and set(launch_keys) <= set(launch_params.ALIASES), launch_keys


def test_the_commands_options_are_the_tables_aliases():
    options = {key: (kind, default) for key, kind, default, _ in cli._launch_options()}
    assert set(options) == set(launch_params.ALIASES) - cli._NOT_OPTIONS
    assert cli._NOT_OPTIONS <= set(launch_params.ALIASES)
    for key, (kind, default) in options.items():
        param = next(param for param in launch_params.PARAMS.values() if param.alias == key)
        assert (kind, default) == (param.type, launch_params.shown_default(param)), key


def test_the_extra_vars_check_knows_every_name_and_alias():
    known = sorted(launch_params.NAMES) + list(launch_params.ALIASES)
    assert launch_request.unknown_keys(known, list(launch_params.ALIASES), set(launch_params.NAMES)) == []
    assert launch_request.unknown_keys(["wiat"], list(launch_params.ALIASES), set(launch_params.NAMES)) == ["wiat"]


def test_ansible_checks_the_roles_arguments_before_the_requests_check(tmp_path):
    # launch.yml imports the role with Ansible's own check of its argument specs (the table's types
    # and choices); it fails before the role's first task, on the controller, touching no host.
    env = {"PATH": f"{PROJECT_ROOT / '.venv' / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path),
           "ANSIBLE_CONFIG": str(PROJECT_ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "ansible", "playbook", str(PROJECT_ROOT / "launch.yml"), "-e", "nodes=node110",
         "-e", f"script={PROJECT_ROOT / 'examples' / 'train_ddp.py'}", "-e", "num_nodes=two",
         "-e", "rendezvous=dynamic"],
        capture_output=True, text=True, cwd=tmp_path, env=env, check=False, timeout=120)
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    assert "Validating arguments against arg spec 'main'" in output, output
    assert "Validation of arguments failed" in output, output
    assert "argument 'slurm_launch_num_nodes' is of type str" in output, output
    assert "slurm_launch_rendezvous" in output and "static, c10d" in output, output
    assert "Check the request and put the job together" not in output, output
