"""library/slurm_nodes.py run in-process with sinfo answering as recorded (fixtures/slurm)."""

import functools
import json

import ansible.module_utils._internal
import pytest
from ansible_collections.hpc.slurm_train.plugins.modules import slurm_nodes
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

SINFO = ["sinfo", "-h", "-N", "-o", "%N|%P|%T|%c|%G"]
# What sinfo says while slurmctld restarts (Slurm 22.05).
CONNECT_FAILURE = "slurm_load_node error: Unable to contact slurm controller (connect failure)\n"
TWO_PARTITIONS = "rec1|gpu*|idle|2|gpu:2\nrec1|debug|idle|2|gpu:2\nrec2|gpu*|mixed|2|gpu:2\nrec3|debug|idle|2|(null)\n"


@pytest.fixture(autouse=True)
def module_side(monkeypatch):
    monkeypatch.setattr(ansible.module_utils._internal, "is_controller", False)


@pytest.fixture
def sinfo(monkeypatch):
    """Scripted answers of sinfo, each (rc, stdout, stderr); the calls it got."""
    answers, calls, sleeps = [], [], []

    def run_command(module, argv, **kwargs):
        calls.append({"argv": argv, **kwargs})
        return answers.pop(0)

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    # The retries' back-off, without waiting it out.
    monkeypatch.setattr(slurm_nodes, "retry_command",
                        functools.partial(slurm_nodes.retry_command, sleep=sleeps.append, jitter=0))
    return answers, calls, sleeps


def run(capsys, **args):
    with patch_module_args(args), pytest.raises(SystemExit):
        slurm_nodes.main()
    return json.loads(capsys.readouterr().out)


def test_requested_nodes_as_slurm_knows_them(capsys, sinfo, slurm_output):
    answers, calls, _ = sinfo
    answers.append((0, slurm_output("sinfo_nodes_not_responding.txt"), ""))
    result = run(capsys, nodes="rec[1-2]")
    assert result.get("failed") is None, result.get("msg")
    assert (result["names"], result["hostlist"], result["unknown"]) == (["rec1", "rec2"], "rec[1-2]", [])
    assert result["slurm"] == {
        "rec1": {"partitions": ["gpu"], "state": "mixed", "markers": "", "cpus": 2, "gres": "gpu:2", "gpus": 2},
        "rec2": {"partitions": ["gpu"], "state": "mixed", "markers": "*", "cpus": 2, "gres": "gpu:2", "gpus": 2},
    }
    assert result["common_partitions"] == ["gpu"] and result["changed"] is False
    assert calls[0]["argv"] == SINFO
    assert calls[0]["environ_update"] == {"LC_ALL": "C"} and calls[0]["expand_user_and_vars"] is False


def test_without_nodes_every_node_slurm_knows_is_listed(capsys, sinfo):
    sinfo[0].append((0, TWO_PARTITIONS, ""))
    result = run(capsys)
    assert (result["names"], result["hostlist"]) == (["rec1", "rec2", "rec3"], "rec[1-3]")
    assert result["common_partitions"] == []


def test_partitions_every_requested_node_is_in_keep_slurms_order(capsys, sinfo):
    sinfo[0].append((0, TWO_PARTITIONS, ""))
    assert run(capsys, nodes=["rec1", "rec3"])["common_partitions"] == ["debug"]
    sinfo[0].append((0, TWO_PARTITIONS, ""))
    assert run(capsys, nodes="rec1")["common_partitions"] == ["gpu", "debug"]


def test_nodes_slurm_does_not_know_are_listed_apart(capsys, sinfo, slurm_output):
    sinfo[0].append((0, slurm_output("sinfo_nodes_busy.txt"), ""))
    result = run(capsys, nodes="rec1,node110")
    assert (result["unknown"], list(result["slurm"])) == (["node110"], ["rec1"])
    assert result["common_partitions"] == ["gpu"]
    sinfo[0].append((0, slurm_output("sinfo_nodes_busy.txt"), ""))
    result = run(capsys, nodes="node[110-111]")
    assert (result["unknown"], result["slurm"], result["common_partitions"]) == (["node110", "node111"], {}, [])


def test_the_environment_reaches_sinfo_but_not_lc_all(capsys, sinfo, slurm_output):
    answers, calls, _ = sinfo
    answers.append((0, slurm_output("sinfo_nodes_busy.txt"), ""))
    run(capsys, nodes="rec1", environment={"SLURM_CONF": "/etc/slurm/rec.conf", "LC_ALL": "de_DE.UTF-8",
                                           "SLURM_TIME_FORMAT": 1})
    assert calls[0]["environ_update"] == {"SLURM_CONF": "/etc/slurm/rec.conf", "LC_ALL": "C",
                                          "SLURM_TIME_FORMAT": "1"}


def test_a_restarting_controller_is_asked_again(capsys, sinfo, slurm_output):
    answers, calls, sleeps = sinfo
    answers += [(1, "", CONNECT_FAILURE), (1, "", CONNECT_FAILURE), (0, slurm_output("sinfo_nodes_busy.txt"), "")]
    assert run(capsys, nodes="rec1")["names"] == ["rec1"]
    assert (len(calls), sleeps) == (3, [0.5, 1.0])


def test_a_controller_that_does_not_come_back_fails_the_task_saying_so(capsys, sinfo):
    sinfo[0].extend([(1, "", CONNECT_FAILURE)] * 5)
    result = run(capsys, nodes="rec1")
    assert result["msg"] == ("sinfo failed (the controller did not answer): slurm_load_node error: Unable to "
                             "contact slurm controller (connect failure)")
    assert result["rc"] == 1


def test_another_sinfo_failure_is_reported_at_once(capsys, sinfo):
    answers, calls, _ = sinfo
    answers.append((1, "", "sinfo: error: Invalid user for SlurmUser slurm, ignored\n"))
    assert run(capsys, nodes="rec1")["msg"] == "sinfo failed: sinfo: error: Invalid user for SlurmUser slurm, ignored"
    answers.append((2, "", ""))
    assert run(capsys, nodes="rec1")["msg"] == "sinfo failed: exit 2"
    assert len(calls) == 2


def test_an_answer_that_cannot_be_read_is_said_so(capsys, sinfo):
    sinfo[0].append((0, "rec1|gpu*|idle|2\n", ""))
    assert run(capsys, nodes="rec1")["msg"] == "could not read sinfo's answer: sinfo line has 4 fields, expected 5: " \
                                               "'rec1|gpu*|idle|2'"


@pytest.mark.parametrize("nodes, why", [
    ("node[110-", "invalid node list 'node[110-': "),
    (["node110", 111], "invalid node list ['node110', 111]: invalid node list item 111"),
    ("node..1", "invalid node list 'node..1': "),
])
def test_a_bad_node_list_is_refused_before_sinfo_runs(capsys, sinfo, nodes, why):
    result = run(capsys, nodes=nodes)
    assert result["msg"].startswith(why)
    assert result["msg"].endswith("separated by commas, or a Slurm hostlist such as node[110-111]")
    assert sinfo[1] == []


def test_check_mode_looks_up_the_nodes_all_the_same(capsys, sinfo, slurm_output):
    sinfo[0].append((0, slurm_output("sinfo_nodes_busy.txt"), ""))
    result = run(capsys, nodes="rec1", _ansible_check_mode=True)
    assert (result.get("skipped"), result["names"], result["slurm"]["rec1"]["state"]) == (None, ["rec1"], "allocated")


def test_common_partitions_are_in_the_first_requested_nodes_order(capsys, sinfo):
    sinfo[0].append((0, "rec1|gpu*|idle|2|gpu:2\nrec1|debug|idle|2|gpu:2\n"
                        "rec2|debug|idle|2|gpu:2\nrec2|gpu*|idle|2|gpu:2\n", ""))
    assert run(capsys, nodes="rec1,rec2")["common_partitions"] == ["gpu", "debug"]
