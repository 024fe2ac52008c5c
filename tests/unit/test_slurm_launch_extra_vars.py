"""The slurm_launch_extra_vars action plugin run as the launch runs it: the launch's parameter
table, the -e values as ansible-playbook's command line hands them over."""

from types import SimpleNamespace
from unittest import mock

import pytest
from ansible import context
from ansible.module_utils.common.collections import ImmutableDict
from ansible.parsing.dataloader import DataLoader
from ansible.utils.vars import load_extra_vars

from conftest import PROJECT_ROOT

ROLE = PROJECT_ROOT / "roles" / "slurm_launch"
from ansible_collections.hpc.slurm_train.plugins.action import slurm_launch_extra_vars as action
from ansible_collections.hpc.slurm_train.plugins.plugin_utils import launch_request


def run(extra_vars, task_vars=None, **args):
    """The task's result for `ansible-playbook ... -e EXTRA_VARS[0] -e EXTRA_VARS[1] ...`."""
    args = dict(args)
    task = SimpleNamespace(args=args, async_val=0, check_mode=False, action="slurm_launch_extra_vars")
    plugin = action.ActionModule(task, mock.MagicMock(), mock.MagicMock(), DataLoader(), None, None)
    # load_extra_vars keeps the first command line it read; each test gives its own.
    with mock.patch.object(context, "CLIARGS", ImmutableDict(extra_vars=tuple(extra_vars))), \
            mock.patch.object(load_extra_vars, "extra_vars", None, create=True):
        return plugin.run(task_vars=task_vars or {})


def test_known_short_names_long_names_and_prefixed_variables_pass():
    result = run(["nodes=node[110-111] script=/nas/train.py", "wait=false",
                  '{"slurm_launch_time_limit": "2:00:00", "cluster_account": "ml", "ansible_user": "me"}'])
    assert not result.get("failed"), result.get("msg")
    assert result["unknown"] == []
    assert result["given"] == ["ansible_user", "cluster_account", "nodes", "script", "slurm_launch_time_limit",
                               "wait"]
    assert result["changed"] is False


def test_a_misspelt_key_is_refused_with_the_closest_known_one():
    result = run(["script=/nas/train.py wiat=false"])
    assert result["failed"] is True
    assert result["unknown"] == ["wiat"]
    assert result["msg"].startswith("Unknown -e key: -e wiat (did you mean 'wait'?). A launch reads: script, ")
    assert "and any variable starting with cluster_, ansible_." in result["msg"]


def test_every_unknown_key_is_named_even_one_alone_among_known_ones():
    assert run(["nodes=n1 nodez=n2"])["unknown"] == ["nodez"]
    result = run(["nods=n1", "scirpt=/nas/t.py", "wiat=false"])
    assert result["unknown"] == ["nods", "scirpt", "wiat"]
    assert result["msg"].startswith("Unknown -e keys: -e nods (did you mean 'nodes'?); "
                                    "-e scirpt (did you mean 'script'?); -e wiat (did you mean 'wait'?).")


def test_keys_from_an_extra_vars_file_are_checked_too(tmp_path):
    given = tmp_path / "job.yml"
    given.write_text("nodes: node110\nnum_nodse: 2\n")
    result = run([f"@{given}"])
    assert result["unknown"] == ["num_nodse"]
    assert "(did you mean 'num_nodes'?)" in result["msg"]


def test_a_top_level_default_without_an_alias_is_known():
    # slurm_launch_env is in defaults/main.yml as a plain mapping, read by no short name.
    assert "slurm_launch_env: " in (ROLE / "defaults" / "main.yml").read_text()
    assert run(['{"slurm_launch_env": {"NCCL_DEBUG": "INFO"}}'])["unknown"] == []


def test_other_prefixes_can_be_given():
    result = run(["site_rack=3 cluster_account=ml"], prefixes=["site_"])
    assert result["unknown"] == ["cluster_account"]
    assert result["msg"].endswith("and any variable starting with site_.")


def test_a_set_prefixed_variable_is_suggested_for_a_misspelling_of_it():
    result = run(["clustr_nas_root=/nas"], task_vars={"cluster_nas_root": "/starmap/nas", "inventory_hostname": "x"})
    assert "-e clustr_nas_root (did you mean 'cluster_nas_root'?)" in result["msg"]


def test_without_extra_vars_nothing_is_refused():
    result = run([])
    assert (result.get("failed", False), result["given"], result["unknown"]) == (False, [], [])
    assert result["aliases"][:4] == ["script", "script_args", "job_name", "code_dir"]
    assert {"slurm_launch_nodes", "nodes", "wait"} <= set(result["known"])


def test_check_mode_refuses_the_same_keys():
    args = {}
    task = SimpleNamespace(args=args, async_val=0, check_mode=True, action="slurm_launch_extra_vars")
    plugin = action.ActionModule(task, mock.MagicMock(), mock.MagicMock(), DataLoader(), None, None)
    with mock.patch.object(context, "CLIARGS", ImmutableDict(extra_vars=("wiat=false",))), \
            mock.patch.object(load_extra_vars, "extra_vars", None, create=True):
        result = plugin.run(task_vars={})
    assert (result["failed"], result["unknown"]) == (True, ["wiat"])


def test_nothing_is_made_on_a_host():
    # It reads the controller's files only: no temporary directory on the target first.
    args = {}
    task = SimpleNamespace(args=args, async_val=0, check_mode=False, action="slurm_launch_extra_vars")
    connection = mock.MagicMock()
    connection._shell.tmpdir = None
    plugin = action.ActionModule(task, connection, mock.MagicMock(), DataLoader(), None, None)
    with mock.patch.object(context, "CLIARGS", ImmutableDict(extra_vars=())), \
            mock.patch.object(load_extra_vars, "extra_vars", None, create=True), \
            mock.patch.object(plugin, "_make_tmp_path", side_effect=AssertionError("made a remote tmp dir")):
        assert plugin.run(task_vars={})["unknown"] == []


def test_only_prefixed_variables_are_offered_as_suggestions():
    # inventory_hostname is set for every task but is no launch key: never suggested.
    result = run(["inventory_hostnam=x"], task_vars={"inventory_hostname": "login1", "cluster_nas_root": "/nas"})
    assert result["msg"].startswith("Unknown -e key: -e inventory_hostnam. A launch reads: ")


def test_the_check_opens_no_connection_to_the_host():
    # It reads only the play's files and the command line, so Ansible's task executor (which asks
    # _requires_connection) runs it on the controller: a misspelt -e is refused even when the
    # submit host cannot be reached, instead of an SSH error hiding the typo.
    assert action.ActionModule._requires_connection is False
    assert action.ActionModule.TRANSFERS_FILES is False


@pytest.mark.parametrize(("given", "said"), [
    # Ansible reads -e "script_args=--steps 2" as script_args=--steps and a stray "2" (_raw_params).
    (["script=/nas/t.py", "script_args=--steps 2"],
     "-e 'script_args=--steps 2': Ansible splits an -e value at spaces, so script_args got only '--steps' and '2' "
     "has no key. Quote a value with spaces: -e '{\"script_args\": \"--steps 2\"}' or -e \"script_args='--steps 2'\"."),
    (["nodes=n1 script_args=--lr 0.1 --steps 3 wait=false"],
     "-e 'nodes=n1 script_args=--lr 0.1 --steps 3 wait=false': Ansible splits an -e value at spaces, so script_args "
     "got only '--lr' and '0.1 --steps 3' has no key. Quote a value with spaces: "
     "-e '{\"script_args\": \"--lr 0.1 --steps 3\"}' or -e \"script_args='--lr 0.1 --steps 3'\"."),
    # A value with quotes of its own: only the JSON form, which the shell passes as it is.
    (["job_name=x --name 'a b'"],
     "-e 'job_name=x --name '\"'\"'a b'\"'\"'': Ansible splits an -e value at spaces, so job_name got only 'x' "
     "and \"--name 'a b'\" has no key. Quote a value with spaces: -e '{\"job_name\": \"x --name '\"'\"'a b'\"'\"'\"}'."),
    (["steps 2 script=/nas/t.py"],
     "-e 'steps 2 script=/nas/t.py': 'steps' is not KEY=VALUE. Quote a value with spaces: "
     "-e '{\"KEY\": \"a b\"}' or -e \"KEY='a b'\"."),
])
def test_an_unquoted_value_with_spaces_is_told_how_to_quote_not_named_raw_params(given, said):
    result = run(given)
    assert result["failed"] is True and result["unknown"] == ["_raw_params"]
    assert result["msg"] == said
    assert "_raw_params" not in result["msg"]


def test_an_unquoted_value_and_a_misspelt_key_are_both_said():
    result = run(["script_args=--steps 2", "wiat=false"])
    assert result["unknown"] == ["_raw_params", "wiat"]
    assert result["msg"].startswith("-e 'script_args=--steps 2': Ansible splits an -e value at spaces")
    assert " Unknown -e key: -e wiat (did you mean 'wait'?). " in result["msg"]
    assert "_raw_params" not in result["msg"]


def test_the_quoted_forms_the_message_gives_are_read_as_one_value():
    for quoted in ('{"script_args": "--steps 2"}', "script_args='--steps 2'"):
        result = run([quoted])
        assert not result.get("failed"), result.get("msg")
        with mock.patch.object(context, "CLIARGS", ImmutableDict(extra_vars=(quoted,))), \
                mock.patch.object(load_extra_vars, "extra_vars", None, create=True):
            assert load_extra_vars(DataLoader()) == {"script_args": "--steps 2"}


def test_words_with_no_key_that_no_text_on_the_command_line_shows_get_the_general_advice():
    # Only -e KEY=VALUE text makes Ansible's _raw_params: from a file or JSON it is a key someone wrote.
    assert launch_request.loose_words_message(["@vars.yml", '{"_raw_params": "b c"}', "nodes=n1"]) == (
        "An -e value has words with no key (Ansible splits -e KEY=VALUE at spaces): quote it, "
        "-e '{\"KEY\": \"a b\"}' or -e \"KEY='a b'\".")


def test_only_the_words_before_the_next_key_are_said_to_have_no_key():
    assert launch_request.loose_words_message(["script_args=--lr 0.1 job_name=x extra"]) == (
        "-e 'script_args=--lr 0.1 job_name=x extra': Ansible splits an -e value at spaces, so script_args got only "
        "'--lr' and '0.1' has no key. Quote a value with spaces: -e '{\"script_args\": \"--lr 0.1\"}' or "
        "-e \"script_args='--lr 0.1'\".")
