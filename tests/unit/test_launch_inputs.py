"""How a launch reads what users type: node lists and script arguments."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.hpc.slurm_train.plugins.modules import slurm_nodes
from ansible_collections.hpc.slurm_train.plugins.plugin_utils import job_outputs
from ansible_collections.hpc.slurm_train.plugins.plugin_utils.launch_request import shell_words


@pytest.mark.parametrize("given, names", [
    ("node110,node111", ["node110", "node111"]),
    ("node[110-111]", ["node110", "node111"]),
    (["node[110-111]", "node110", "gpu07"], ["node110", "node111", "gpu07"]),
    ("", []),
])
def test_node_lists_expand_in_order_without_repeats(given, names):
    assert slurm_nodes.requested_names(given) == names


@pytest.mark.parametrize("given", ["node110;reboot", "node[111-110]", "node$(id)", [3], "node 110", "node..1", "-x",
                                   "../x"])
def test_unsafe_or_malformed_node_lists_are_refused(given):
    with pytest.raises(ValueError):
        slurm_nodes.requested_names(given)


@pytest.mark.parametrize("given, words", [
    ("--steps 20 --lr 0.1", ["--steps", "20", "--lr", "0.1"]),
    ("--name 'a b' --note \"it's\"", ["--name", "a b", "--note", "it's"]),
    (["--name", "a b"], ["--name", "a b"]),
    ("", []),
])
def test_script_args_split_as_a_shell_would(given, words):
    assert shell_words(given) == words


def test_numbers_become_arguments_and_nested_values_are_refused():
    assert shell_words(["--steps", 20, 0.5]) == ["--steps", "20", "0.5"]
    for bad in ([["--lr"]], [{"lr": 1}], [None]):
        with pytest.raises(AnsibleFilterError, match="is not allowed: give each argument as text"):
            shell_words(bad)
    with pytest.raises(AnsibleFilterError, match="script_args must be a list or a string, got a mapping"):
        shell_words({"lr": 1})


def test_unbalanced_quotes_are_refused_with_the_value():
    with pytest.raises(AnsibleFilterError, match="cannot be split into arguments"):
        shell_words("--name 'a b")


def test_the_code_line_says_whether_the_code_was_copied_and_from_which_commit():
    launch_code_line = job_outputs.launch_code_line
    code = {"hash": "9f86a16e3280b3e10aa3", "files": 3, "copied": False, "git_commit": "0123456789abcdef" * 2 + "01234567",
            "git_dirty": True}
    assert launch_code_line(code) == ("code 9f86a16e3280b3e10aa3 (3 files) already on the NAS, not copied, "
                                      "git 0123456789ab with uncommitted changes")
    assert launch_code_line({**code, "copied": True, "git_commit": ""}) == \
        "code 9f86a16e3280b3e10aa3 (3 files) copied to the NAS"
