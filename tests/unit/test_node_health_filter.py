"""roles/slurm_launch/filter_plugins/node_health.py: which nodes a launch refuses, from sinfo's
answers as recorded (fixtures/slurm/sinfo_nodes_*.txt) and as slurm_nodes parses them."""

import importlib.util
from pathlib import Path

import pytest
import slurm

PLUGIN = Path(__file__).resolve().parents[2] / "roles" / "slurm_launch" / "filter_plugins" / "node_health.py"
spec = importlib.util.spec_from_file_location("node_health", PLUGIN)
node_health = importlib.util.module_from_spec(spec)
spec.loader.exec_module(node_health)


def unusable(sinfo_stdout):
    return node_health.unusable_nodes(slurm.parse_sinfo_nodes(sinfo_stdout))


@pytest.mark.parametrize(("fixture", "refused"), [
    ("sinfo_nodes_busy.txt", {}),  # allocated and mixed nodes take the job when they free up
    ("sinfo_nodes_resumed.txt", {}),
    ("sinfo_nodes_down.txt", {"rec2": "down*"}),
    ("sinfo_nodes_drained.txt", {"rec2": "drained"}),
    ("sinfo_nodes_draining.txt", {"rec2": "draining"}),
    # A mixed node whose slurmd stopped answering: usable by its state, not by its marker.
    ("sinfo_nodes_not_responding.txt", {"rec2": "mixed*"}),
])
def test_recorded_sinfo_answers(slurm_output, fixture, refused):
    assert unusable(slurm_output(fixture)) == refused


@pytest.mark.parametrize("state", ["idle", "mixed", "allocated", "completing", "planned"])
def test_a_node_in_a_working_state_without_markers_is_usable(state):
    assert unusable(f"n1|gpu*|{state.upper()}|2|gpu:2\n") == {}


# sinfo(1) NODE STATE CODES, each on a node whose base state alone would be fine.
@pytest.mark.parametrize("marker", ["*", "~", "#", "!", "%", "$", "@", "^", "-"])
def test_every_trouble_marker_makes_an_idle_node_unusable(marker):
    assert unusable(f"n1|gpu*|idle{marker}|2|gpu:2\n") == {"n1": f"idle{marker}"}


@pytest.mark.parametrize("state", ["down", "drained", "draining", "fail", "failing", "future",
                                   "inval", "maint", "reboot_issued", "unknown"])
def test_a_node_in_any_other_state_is_unusable_even_without_markers(state):
    assert unusable(f"n1|gpu*|{state}|2|gpu:2\nn2|gpu*|idle|2|gpu:2\n") == {"n1": state}
