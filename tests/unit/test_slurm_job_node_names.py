"""library/slurm_job.py refusing a launch whose node list holds a name that is no node name, before
sinfo is asked or anything is staged."""

import pytest

from test_slurm_job_module import clock, nodes_request, run_module, slurm_cli  # noqa: F401


@pytest.mark.parametrize("name", ["rec 2", "rec2;reboot", "-rec2"])
def test_a_node_name_that_is_none_is_refused_before_anything_is_asked(slurm_cli, clock, tmp_path, name):
    outcome = run_module(nodes_request(tmp_path, names=["rec1", name]))
    assert (outcome.failed, outcome.result["msg"]) == (True, (
        f"nodes: invalid node name {name!r}: a node name is 1 to 63 letters, digits, '-', '_' or '.', starting "
        "with a letter or digit, without '..'"))
    assert slurm_cli.calls == [] and list((tmp_path / "jobs").iterdir()) == []


def test_a_nodes_request_without_its_node_count_is_refused(slurm_cli, clock, tmp_path):
    request = nodes_request(tmp_path)
    del request["nodes"]["num_nodes"]
    outcome = run_module(request)
    assert (outcome.failed, outcome.result["msg"]) == (True, "missing required arguments: num_nodes found in internal -> nodes")
    assert slurm_cli.calls == []


def test_a_nodes_request_without_its_names_is_refused(slurm_cli, clock, tmp_path):
    request = nodes_request(tmp_path)
    del request["nodes"]["names"]
    outcome = run_module(request)
    assert (outcome.failed, outcome.result["msg"]) == (True, "missing required arguments: names found in internal -> nodes")
    assert slurm_cli.calls == []


def test_a_sinfo_that_fails_refuses_the_launch_before_anything_is_staged(slurm_cli, clock, tmp_path):
    slurm_cli.answer(["sinfo", "-h", "-N", "-o", "%N|%P|%T|%c|%G"], rc=1, err="sinfo: error: Access/permission denied\n")
    outcome = run_module(nodes_request(tmp_path))
    assert (outcome.failed, outcome.result["msg"]) == (True, "sinfo failed: sinfo: error: Access/permission denied")
    assert list((tmp_path / "jobs").iterdir()) == []
