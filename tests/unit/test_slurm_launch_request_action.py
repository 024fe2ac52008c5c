"""The slurm_launch_request action plugin run as a launch runs it: the role's real defaults, argument
specs, job template and GPU check, a request as vars/main.yml's _slurm_launch_request gives it, an
inventory's groups and hostvars, and the -e values as ansible-playbook's command line hands them over."""

from types import SimpleNamespace
from unittest import mock

import pytest
import yaml
from ansible import context
from ansible.module_utils.common.collections import ImmutableDict
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar
from ansible.utils.vars import load_extra_vars

from conftest import PROJECT_ROOT, init_plugin_loader

ROLE = PROJECT_ROOT / "roles" / "slurm_launch"
from ansible_collections.hpc.slurm_train.plugins.action import slurm_launch_request as action
from ansible_collections.hpc.slurm_train.plugins.action.slurm_job import CodeToStage
plugin_loader = init_plugin_loader()

GROUPS = {"all": ["login01", "node110", "node111", "h1"], "ungrouped": [], "submit": ["login01"],
          "compute": ["node110", "node111", "h1"], "gpu_A6000": ["node110", "node111"], "gpu_H100": ["h1"]}
HOSTVARS = {"node110": {"cluster_node_cpus": 16, "cluster_node_gpus": 8},
            "node111": {"cluster_node_cpus": 16, "cluster_node_gpus": 8},
            "h1": {"cluster_node_cpus": 32, "cluster_node_gpus": 8}, "login01": {}}


@pytest.fixture
def script(tmp_path):
    trainer = tmp_path / "code" / "train.py"
    trainer.parent.mkdir()
    trainer.write_text("print('trains')\n")
    return trainer


def request(trainer, **given):
    """The role's request with its defaults' values (vars/main.yml's keys), ``given`` over them."""
    keys = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["_slurm_launch_request"]
    values = {"nodes": "node[110-111]", "group": "", "script": str(trainer), "script_args": "--steps 3",
              "job_name": "", "code_dir": "", "code_max_mb": 100, "partition": "", "account": "", "num_nodes": 0, "gpus_per_node": 0,
              "cpus_per_task": 0, "nproc_per_node": 0, "omp_num_threads": 0, "master_port": 0, "job_id": 0,
              "follow_timeout": 0, "log_tail_lines": 40, "jobs_dir": "/nas/jobs", "time_limit": "1-00:00:00",
              "warning_signal": "USR1", "warning_seconds": 120, "max_restarts": 1, "hang_minutes": 30, "extra_directives": [], "env": {},
              "cuda_home": "/nas/cuda-11.8", "replace_ld_library_path": False, "conda_root": "/nas/conda",
              "conda_env": "train", "venv": "", "nccl_env_dir": "/nas/nccl", "rendezvous": "static", "sweep": {},
              "sweep_parallel": 0, "env_from": [], "health_gate": True, "health_slow_factor": 1.5,
              "health_matmul_size": 0, "bad_node_hours": 24}
    assert set(values) == set(keys), "the test's request has the role's keys"
    return {**values, **given}


def run(the_request, extra_vars=("nodes=node[110-111]",), role_vars=None, check_mode=False, connection=None, **args):
    """The task's result for `ansible-playbook launch.yml -e EXTRA_VARS...` with ``the_request``
    (``role_vars``: more of the task's variables, as the role's defaults and -e give them)."""
    args = {"request": the_request, **args}
    task = SimpleNamespace(args=args, async_val=0, check_mode=check_mode, action="slurm_launch_request",
                           get_search_path=lambda: [str(ROLE)])
    loader = DataLoader()
    plugin = action.ActionModule(task, connection or mock.MagicMock(), mock.MagicMock(), loader, Templar(loader=loader),
                                 plugin_loader)
    task_vars = {"groups": GROUPS, "hostvars": HOSTVARS, "inventory_hostname": "login01",
                 "ansible_search_path": [str(ROLE)], **(role_vars or {})}
    with mock.patch.object(context, "CLIARGS", ImmutableDict(extra_vars=tuple(extra_vars))), \
            mock.patch.object(load_extra_vars, "extra_vars", None, create=True):
        return plugin.run(task_vars=task_vars)


def test_a_good_request_becomes_the_job_and_its_rendered_files(script):
    result = run(request(script, env={"WANDB_API_KEY": "secret"}, sweep={"lr": [0.1, 0.01]}), slurm_conf="/etc/s.conf")
    assert not result.get("failed"), result.get("msg")
    assert result["changed"] is False
    assert result["environment"] == {"SLURM_CONF": "/etc/s.conf"}
    assert (result["script"], result["code_dir"], result["job_name"]) == (str(script), str(script.parent), "train")
    assert "ansible_facts" not in result, "nothing a fact cache would keep"
    plan = result["node_plan"]
    assert (plan["names"], plan["node_group"], plan["num_nodes"], plan["partition"]) == (
        ["node110", "node111"], "gpu_A6000", 2, "")
    job = result["job"]
    # Named from the run's directory, where the job runs: the code by its hash, as staging lays it out.
    assert result["code_hash"] == CodeToStage({"script": str(script), "code_dir": str(script.parent)}).digest
    assert job["script"] == f"../../code/{result['code_hash']}/train.py"
    assert (job["job_dir"], job["end_marker"], job["gpu_check"], job["partition"]) == ("", ".%j.ended",
                                                                                       "gpu_check.py", "")
    assert job["script_args"] == ["--steps", "3"]
    assert (job["gpus_per_node"], job["cpus_per_task"], job["nproc_per_node"]) == (8, 16, 8)
    assert job["nccl_env_file"] == "/nas/nccl/nccl-gpu_A6000.sh"
    files = {one["name"]: one for one in result["job_files"]}
    assert set(files) == {"train.sbatch", "gpu_check.py", "hang_dump.py", "bad_nodes.py", "health_check.py",
                          "allreduce_check.py", "sweep.tsv"}
    # The job script as Ansible's template lookup renders it: only the user reads a script with env values.
    sbatch = files["train.sbatch"]
    assert sbatch["mode"] == "0600"
    assert sbatch["content"].startswith("#!/bin/bash")
    lines = sbatch["content"].splitlines()
    for line in ("#SBATCH --nodes=2", "#SBATCH --nodelist=node[110-111]", "#SBATCH --array=0-1",
                 "#SBATCH --output=%x-%A_%a.out", 'RUN_DIR="$PWD/points/$SLURM_ARRAY_TASK_ID"',
                 '  "$PWD"/../../code/' + result['code_hash'] + '/train.py'):
        assert line in lines, line
    # The partition the nodes share is the submission's to find: the script names none.
    assert not any(line.startswith("#SBATCH --partition") for line in lines)
    assert "{{" not in sbatch["content"]
    assert files["gpu_check.py"]["content"] == (ROLE / "files" / "gpu_check.py").read_text()
    assert files["hang_dump.py"]["content"] == (ROLE / "files" / "hang_dump.py").read_text()
    # The hang watchdog is on by default (hang_minutes=30), with the dumper staged beside the script.
    assert (job["hang_minutes"], job["hang_dump"]) == (30, "hang_dump.py")
    assert "HANG_SECONDS=1800" in sbatch["content"].splitlines()
    assert files["sweep.tsv"]["content"].splitlines()[0].split("\t")[-1] == "lr"
    # The job's mark_bad_node runs the record's own rules, with the launch's jobs root and hours.
    assert files["bad_nodes.py"]["content"] == (PROJECT_ROOT / "plugins" / "module_utils" / "bad_nodes.py").read_text()
    assert ('python bad_nodes.py mark /nas/jobs "$node" "$reason" 24 "$SLURM_JOB_ID"'
            in sbatch["content"])
    # The health gate: its programs beside the GPU check, its step in the job script.
    for name in ("health_check.py", "allreduce_check.py"):
        assert files[name]["content"] == (ROLE / "files" / name).read_text()
    assert job["health_check"] == "health_check.py"
    assert "python health_check.py --dir=" in sbatch["content"]
    assert "--slow-factor=1.5 " in sbatch["content"]


@pytest.mark.parametrize("gate, factor, size", [(False, 1.5, 0), ("false", "2", "512")])
def test_the_health_gate_is_switched_off_or_tuned_by_its_parameters(script, gate, factor, size):
    found = run(request(script, health_gate=gate, health_slow_factor=factor, health_matmul_size=size))
    assert not found.get("failed"), found.get("msg")
    names = {one["name"] for one in found["job_files"]}
    assert names == {"train.sbatch", "gpu_check.py", "hang_dump.py", "bad_nodes.py"}, "no gate, no gate programs"
    assert found["job"]["health_check"] == ""
    content = found["job_files"][0]["content"]
    assert "health_check.py" not in content and "python gpu_check.py" in content
    on = run(request(script, health_slow_factor=factor, health_matmul_size=size))
    assert (on["job"]["health_slow_factor"], on["job"]["health_matmul_size"]) == (float(factor), int(size))
    assert f"--slow-factor={float(factor)} " in on["job_files"][0]["content"]
    assert f"--matmul-size={int(size)}\n" in on["job_files"][0]["content"]


@pytest.mark.parametrize("given, words", [
    ({"health_slow_factor": 1}, "health_slow_factor=1 is not allowed: give a number over 1"),
    ({"health_slow_factor": "fast"}, "health_slow_factor='fast' is not allowed: give a number over 1"),
    ({"health_slow_factor": True}, "health_slow_factor=True is not allowed"),
    ({"health_matmul_size": -1}, "health_matmul_size=-1 is not allowed: give a whole number, 0 or more")])
def test_a_bad_health_gate_value_is_refused_naming_it(script, given, words):
    found = run(request(script, **given))
    assert found.get("failed") and words in found["msg"], found.get("msg")


def test_the_job_script_names_the_code_it_runs_by_its_content(script):
    first, again = (run(request(script)) for _ in range(2))
    assert first["job_files"] == again["job_files"], "the same request and code render the same script"
    (script.parent / "model.py").write_text("LAYERS = 2\n")
    changed = run(request(script))
    assert changed["code_hash"] != first["code_hash"]
    assert '  "$PWD"/../../code/' + changed["code_hash"] + "/train.py" in changed["job_files"][0]["content"].splitlines()


def test_code_over_its_limit_is_refused_before_anything_is_staged(script):
    result = run(request(script, code_max_mb=0))
    assert result["failed"] is True
    assert result["msg"].startswith(f"the code to stage from {script.parent} is 0.0 MB in 1 files, over "
                                    "slurm_launch_code_max_mb=0")


def test_a_partition_given_is_the_jobs_and_a_group_names_no_nodelist(script):
    found = run(request(script, nodes="", group="gpu_A6000", num_nodes=1, partition="long"))
    assert found["node_plan"]["partition"] == "long"
    content = found["job_files"][0]["content"].splitlines()
    assert "#SBATCH --partition=long" in content and "#SBATCH --nodes=1" in content
    assert not any(line.startswith("#SBATCH --nodelist") for line in content)
    assert found["job_files"][0]["mode"] == "0644"


@pytest.mark.parametrize("given, extra_vars, words", [
    # In the order a user fixes them: the first problem found is the message.
    ({"nodes": "node110", "group": "gpu_A6000"}, ("script=x.py wiat=false",),
     "Unknown -e key: -e wiat (did you mean 'wait'?)"),
    ({"nodes": 110, "num_nodes": -1}, (), "nodes=110 is not allowed: give it as text"),
    ({"nodes": "node110", "group": "gpu_A6000", "num_nodes": -1}, (), "Say where to run: either a node list"),
    ({"num_nodes": -1, "master_port": 70000}, (), "num_nodes=-1 is not allowed: give a whole number, at least 0 "
                                                  "(with group, how many of its nodes). master_port=70000"),
    ({"nodes": "", "group": "submit", "num_nodes": 1}, (), "group=submit must be a group of compute nodes in the "
                                                           "inventory (groups of compute nodes: compute, gpu_A6000, gpu_H100)."),
    ({"job_name": "a b", "time_limit": "1 day", "nodes": "node999"}, (),
     "job_name='a b' is not allowed"),
    ({"script": "", "job_name": "x", "nodes": "node999"}, (), "Say what to run: -e script=path/to/train.py"),
    ({"nodes": "node110,node999"}, (), "Not compute nodes of the inventory: node999"),
    ({"nodes": "node110,h1"}, (), "the nodes are not of one node group"),
    ({"gpus_per_node": 9}, (), "The request does not fit: gpus_per_node=9 of 8 GPUs ("),
    ({"script_args": "--name 'a b"}, (), "script_args \"--name 'a b\" cannot be split into arguments"),
    ({"warning_signal": "USR1; id"}, (), "warning_signal='USR1; id'"),
])
def test_the_first_problem_found_fails_the_task(script, given, extra_vars, words):
    result = run(request(script, **given), extra_vars=extra_vars or ("nodes=x",))
    assert result.get("failed") is True, result
    assert words in result["msg"], result["msg"]
    assert "job" not in result


def test_a_missing_script_and_a_directory_are_named_on_the_controller(script):
    missing = run(request(script.with_name("nope.py")))["msg"]
    assert missing == (f"The training script {script.with_name('nope.py')} does not exist (or is not a file) on "
                       "login01 (a path on the controller, where ansible-playbook runs; the launch copies its "
                       "directory to the NAS).")
    assert f"The training script {script.parent} is a directory" in run(request(script.parent))["msg"]


def test_following_a_job_or_a_preflight_checks_the_shape_only(script):
    following = run(request(script, job_id=12, nodes="", time_limit="nonsense"))
    assert not following.get("failed"), following.get("msg")
    assert following["following"] is True
    assert "job" not in following
    preflight = run(request(script, script="", nodes="node110,node999"), render=False)
    assert not preflight.get("failed"), preflight.get("msg")
    assert "node_plan" not in preflight and preflight["following"] is False
    assert run(request(script, nodes=7), render=False)["msg"].startswith("nodes=7 is not allowed")


def test_a_request_without_one_of_its_keys_is_a_bug_said_plainly(script):
    incomplete = request(script)
    del incomplete["sweep"]
    with pytest.raises(action.AnsibleActionFail, match="the request lacks sweep"):
        run(incomplete)


def test_each_key_of_the_request_is_the_roles_variable_of_that_name():
    """The action reads a request's KEY as the variable slurm_launch_KEY (templated already, so the
    argument specs' check does not template it again): vars/main.yml must pass each so."""
    keys = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["_slurm_launch_request"]
    assert set(keys) == set(action.REQUEST_KEYS)
    for key, value in keys.items():
        assert value == f"{{{{ {action.ROLE_PREFIX}{key} }}}}", (key, value)


def test_a_script_or_code_dir_path_with_a_control_character_is_refused_naming_it(script):
    with pytest.raises(action.AnsibleActionFail, match=r"script='tr\\nain.py' is not allowed: a path without newlines"):
        run(request(script, script="tr\nain.py"))
    with pytest.raises(action.AnsibleActionFail, match=r"script='code\\x07' is not allowed"):
        run(request(script, code_dir="code\a"))


@pytest.mark.parametrize("env_from, env, said", [
    (7, {}, "env_from=7 is not allowed: give names of variables of the controller's environment, e.g. -e env_from=HF_TOKEN"),
    (["HF_TOKEN", 7], {}, "env_from=['HF_TOKEN', 7] is not allowed: give names"),
    ("HF_TOKEN", {"HF_TOKEN": "x"}, "env_from=HF_TOKEN is not allowed: slurm_launch_env sets HF_TOKEN too; give it once"),
    # env that is no mapping: value_problems names env, not env_from.
    ("HF_TOKEN", ["HF_TOKEN=x"], "env=['HF_TOKEN=x'] is not allowed: give a mapping"),
])
def test_env_from_of_no_names_or_one_env_sets_too_is_refused(script, monkeypatch, env_from, env, said):
    monkeypatch.setenv("HF_TOKEN", "hf_from_env")
    result = run(request(script, env_from=env_from, env=env))
    assert result["failed"] is True and said in result["msg"]


def test_env_from_given_as_words_takes_each_and_none_takes_nothing(script, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "a")
    monkeypatch.setenv("WANDB_API_KEY", "b")
    assert run(request(script, env_from=" HF_TOKEN, ,WANDB_API_KEY "))["job"]["env"] == {"HF_TOKEN": "a",
                                                                                        "WANDB_API_KEY": "b"}
    assert action.env_from_environment({"env_from": "", "env": {"A": "1"}}, {"A": "2"}) == (
        {"env_from": "", "env": {"A": "1"}}, "")


def test_an_extra_vars_file_without_env_is_not_held_to_its_mode_and_one_that_is_gone_is_named():
    def load(data):
        return lambda path: data
    assert action.command_line_secret_problem(["@/nowhere.yml"], load({"nodes": "n1"}), load({})) == ""
    assert action.command_line_secret_problem(["@/nowhere.yml"], load(["env"]), load({})) == ""
    assert action.command_line_secret_problem(["@/nowhere.yml"], load({"slurm_launch_env": {"A": "1"}}), load({})) == \
        "-e @/nowhere.yml: No such file or directory"
    assert action.command_line_secret_problem(["@/nowhere.yml"], load({"env": {"A": "1"}}), load({})) == \
        "-e @/nowhere.yml: No such file or directory"


def test_a_value_given_that_is_no_plain_data_leaves_the_templated_one():
    import datetime
    given = {"slurm_launch_script_args": datetime.date(2026, 12, 7), "slurm_launch_time_limit": "a{#c#}b"}
    templated = {key: "templated" for key in action.VERBATIM_KEYS}
    result = action.verbatim_values(templated, given, (), {})
    assert result["script_args"] == "templated" and result["time_limit"] == "a{#c#}b"


def test_check_mode_puts_the_same_job_together_and_nothing_is_made_on_a_host(script):
    # It reads the controller's files and the inventory only: no temporary directory on the target.
    connection = mock.MagicMock()
    connection._shell.tmpdir = None
    with mock.patch.object(action.ActionModule, "_make_tmp_path", side_effect=AssertionError("made a remote tmp dir")):
        checked = run(request(script), check_mode=True, connection=connection)
        assert not checked.get("failed") and checked["job"] == run(request(script))["job"]
    # So Ansible's task executor runs it on the controller: a bad request is refused even when the
    # submit host cannot be reached.
    assert action.ActionModule._requires_connection is False


@pytest.mark.parametrize("port, fits", [(65535, True), (65536, False)])
def test_master_port_goes_up_to_65535(script, port, fits):
    result = run(request(script, master_port=port))
    assert result.get("failed", False) is not fits
    if not fits:
        assert result["msg"].startswith("master_port=65536 is not allowed: give a whole number, at least 0 and at most 65535")


def test_a_request_without_its_request_is_refused_by_the_argument_spec():
    task = SimpleNamespace(args={}, async_val=0, check_mode=False, action="slurm_launch_request")
    plugin = action.ActionModule(task, mock.MagicMock(), mock.MagicMock(), DataLoader(), None, plugin_loader)
    with pytest.raises(action.AnsibleActionFail, match="missing required arguments: request"):
        plugin.run(task_vars={})


def test_a_node_list_given_as_a_list_of_one_is_where_the_job_runs(script):
    result = run(request(script, nodes=["node110"]))
    assert not result.get("failed"), result.get("msg")
    assert result["job"]["nodelist"] == "node110" and result["job"]["num_nodes"] == 1


def test_a_group_of_every_compute_node_or_of_a_one_letter_name_is_a_group_of_compute_nodes(script, monkeypatch):
    monkeypatch.setitem(GROUPS, "a", ["node110"])
    for group in ("compute", "a"):
        result = run(request(script, nodes="", group=group, num_nodes=1), render=False)
        assert not result.get("failed"), result.get("msg")


def test_a_groups_job_of_no_nodes_is_refused_and_one_followed_needs_no_count(script):
    result = run(request(script, nodes="", group="gpu_A6000", num_nodes=0))
    assert result["msg"] == ("num_nodes=0 is not allowed: give a whole number, at least 1 (with group, how many of "
                             "its nodes).")
    assert not run(request(script, nodes="", group="gpu_A6000", num_nodes=0, job_id=1)).get("failed")


def test_job_1_is_followed_and_no_log_lines_is_allowed(script):
    assert run(request(script, job_id=1, nodes=""))["following"] is True
    assert not run(request(script, log_tail_lines=0)).get("failed")


def test_a_partition_given_is_checked_with_the_values_given(script):
    assert run(request(script, partition="gpu;id"))["msg"] == (
        "partition='gpu;id' is not allowed: a Slurm partition name: letters, digits, '_', '.' and '-', starting with "
        "a letter or digit.")


def test_every_item_on_the_command_line_is_looked_at_for_secrets(script, tmp_path):
    private = tmp_path / "private.yml"
    private.write_text("slurm_launch_env:\n  HF_TOKEN: hf_file\n")
    private.chmod(0o600)
    plain = tmp_path / "plain.yml"
    plain.write_text("slurm_launch_time_limit: '60'\n")
    secret = '{"slurm_launch_env": {"HF_TOKEN": "hf_x"}}'
    for first in (f"@{plain}", f"@{private}"):
        result = run(request(script, env={"HF_TOKEN": "hf_x"}), extra_vars=(first, secret))
        assert result["msg"].startswith("slurm_launch_env HF_TOKEN given on the command line"), first


def test_a_secrets_file_with_any_permission_for_others_is_refused(script, tmp_path):
    secrets = tmp_path / "secrets.yml"
    secrets.write_text("slurm_launch_env:\n  HF_TOKEN: hf_file\n")
    secrets.chmod(0o601)
    result = run(request(script, env={"HF_TOKEN": "hf_file"}), extra_vars=(f"@{secrets}",))
    assert result["msg"].startswith(f"-e @{secrets} sets slurm_launch_env and is readable by others (mode 0601)")
