"""plugins/module_utils/slurm.py's node rules (which nodes a launch refuses, the inventory's counts against
Slurm's), from sinfo's answers as recorded (fixtures/slurm/sinfo_nodes_*.txt) and as slurm_nodes
parses them."""

import pytest
from ansible_collections.hpc.slurm_train.plugins.module_utils import slurm



def unusable(sinfo_stdout):
    return slurm.unusable_nodes(slurm.parse_sinfo_nodes(sinfo_stdout))


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


# States as `sinfo -h -N -o %T` prints them (sinfo(1) NODE STATE CODES, long form: base state and
# suffix; e.g. "idle~" for a powered-down node, "down~", "drained*"), listed literally rather than
# read from the constants under test.
@pytest.mark.parametrize(("state", "note"), [
    ("idle", None),
    ("mixed", None),
    ("allocated", "is allocated: the job waits for it"),
    ("completing", "is completing a job"),
    ("planned", "is planned by the backfill scheduler"),
    ("idle~", "is powered down: Slurm powers it up on submit, allow its ResumeTimeout"),
    ("idle#", "is powering up"),
    ("idle%", "is powering down"),
    ("idle!", "is about to power down"),
    ("idle@", "has a reboot pending"),
    ("mixed@", "has a reboot pending"),
    ("idle^", "is rebooting"),
    ("mixed-", "is planned by the backfill scheduler"),
    ("idle$", "is in a maintenance reservation"),
    ("reserved", "is reserved: the job runs there only inside the reservation"),
    ("maint", "is in a maintenance reservation"),
    ("future", "is not yet in service"),
    ("unknown", "is in state UNKNOWN"),
    ("blocked", "is blocked"),  # 24.05+
])
def test_nodes_that_only_delay_the_job_pass_with_a_note(state, note):
    line = f"node111|gpu_A6000*|{state}|16|gpu:8\n"
    nodes = slurm.parse_sinfo_nodes(line)
    assert slurm.unusable_nodes(nodes) == {}
    notes = slurm.node_messages(nodes)
    if note is None:
        assert notes == []
    else:
        assert len(notes) == 1 and notes[0].startswith(f"node111 ({state}) ") and note in notes[0], notes
    assert slurm.node_messages(nodes, True) == []


@pytest.mark.parametrize(("state", "reason"), [
    ("down", "is down"),
    ("down*", "is down"),
    ("down~", "is down"),
    ("drained", "is drained"),
    ("drained*", "is drained"),
    ("drained~", "is drained"),
    ("draining", "is draining"),
    ("draining@", "is draining"),
    ("fail", "has failed"),
    ("failing", "is failing"),
    ("inval", "is INVAL"),
    ("mixed*", "is not responding"),
    ("idle*", "is not responding"),
    ("idle~*", "is not responding"),
])
def test_down_drained_failed_and_not_responding_nodes_are_refused(state, reason):
    nodes = slurm.parse_sinfo_nodes(f"node111|gpu_A6000*|{state}|16|gpu:8\nnode110|gpu_A6000*|idle|16|gpu:8\n")
    assert slurm.unusable_nodes(nodes) == {"node111": state}
    refused = slurm.node_messages(nodes, True)
    assert len(refused) == 1 and refused[0].startswith(f"node111 ({state}) ") and reason in refused[0], refused


def test_the_recorded_states_of_each_slurm_version(slurm_output):
    # tests/unit/fixtures/slurm/<version>/sinfo_nodes.txt: mixed, planned, idle~ and drained*
    # (blocked from 24.05, external from 25.05); only the drained node is refused.
    for version in ("22.05", "23.02", "23.11", "24.05", "24.11", "25.05", "25.11"):
        nodes = slurm.parse_sinfo_nodes(slurm_output(f"{version}/sinfo_nodes.txt"))
        assert slurm.unusable_nodes(nodes) == {"rec4": "drained*"}, version
        noted = [line.split(" ", 1)[0] for line in slurm.node_messages(nodes)]
        assert noted[:2] == ["rec2", "rec3"], (version, noted)


def test_a_state_this_launch_does_not_know_passes_with_a_note_saying_so():
    nodes = slurm.parse_sinfo_nodes("n1|gpu*|someday|2|gpu:2\n")
    assert slurm.unusable_nodes(nodes) == {}
    assert slurm.node_messages(nodes) == [
        "n1 (someday) is in state 'someday', which this launch does not know: Slurm decides whether the job waits"]


# CPUs and GPUs: the inventory's cluster_node_* against Slurm's own node record.
def test_an_inventory_counting_cores_where_slurm_counts_threads_is_named_with_both_values():
    nodes = slurm.parse_sinfo_nodes("node110|gpu_A6000*|idle|32|gpu:8\nnode111|gpu_A6000*|idle|32|gpu:8\n")
    hostvars = {"node110": {"cluster_node_cpus": 16, "cluster_node_gpus": 8},
                "node111": {"cluster_node_cpus": "16", "cluster_node_gpus": "8"}}
    assert slurm.node_resource_mismatches(nodes, hostvars, "gpu_A6000") == [
        f"{name}: the inventory says 16 CPUs, Slurm says 32 (CPUTot); set cluster_node_cpus: 32 in "
        "group_vars/gpu_A6000.yml" for name in ("node110", "node111")]


def test_gpus_that_differ_are_named_and_matching_counts_pass():
    nodes = slurm.parse_sinfo_nodes("n1|gpu*|idle|64|gpu:h100:4(S:0),gpu:h100:4(S:1)\nn2|gpu*|idle|64|gpu:h100:4(S:0)\n")
    hostvars = {"n1": {"cluster_node_cpus": 64, "cluster_node_gpus": 8}, "n2": {"cluster_node_cpus": 64, "cluster_node_gpus": 8}}
    assert slurm.node_resource_mismatches(nodes, hostvars, "gpu_H100") == [
        "n2: the inventory says 8 GPUs, Slurm says 4 (Gres); set cluster_node_gpus: 4 in group_vars/gpu_H100.yml"]


def test_counts_the_inventory_does_not_set_or_slurm_does_not_give_are_not_compared():
    nodes = slurm.parse_sinfo_nodes("n1|cpu*|idle|64|(null)\nn2|gpu*|idle|64|gpu:a100:no_consume:8\n")
    assert nodes["n1"]["gpus"] == 0 and nodes["n2"]["gpus"] is None
    assert slurm.node_resource_mismatches(nodes, {"n1": {}, "n2": {"cluster_node_gpus": 2}}, "g") == []
    assert slurm.node_resource_mismatches(nodes, {"n1": {"cluster_node_gpus": 2}}, "g") == [
        "n1: the inventory says 2 GPUs, Slurm says 0 (Gres); set cluster_node_gpus: 0 in group_vars/g.yml"]


def test_sinfo_nodes_asks_once_and_says_what_failed():
    asked = []

    def answering(rc, out, err):
        return lambda argv: asked.append(argv) or (rc, out, err)

    known = slurm.sinfo_nodes(answering(0, "n1|gpu*|idle|16|gpu:8\nn1|long|idle|16|gpu:8\n", ""))
    assert asked == [["sinfo", "-h", "-N", "-o", slurm.SINFO_NODES_FORMAT]]
    assert known["n1"]["partitions"] == ["gpu", "long"]
    with pytest.raises(slurm.SinfoError) as failed:
        slurm.sinfo_nodes(answering(1, "", "slurm_load_node error: Unable to contact slurm controller (connect failure)"))
    assert (str(failed.value), failed.value.rc) == (
        "sinfo failed (the controller did not answer): slurm_load_node error: Unable to contact slurm controller "
        "(connect failure)", 1)
    with pytest.raises(slurm.SinfoError, match=r"^could not read sinfo's answer: sinfo line has 2 fields"):
        slurm.sinfo_nodes(answering(0, "n1|gpu\n", ""))


def test_the_partitions_all_nodes_share_keep_the_first_nodes_order():
    known = slurm.parse_sinfo_nodes("a|long|idle|4|(null)\na|gpu*|idle|4|(null)\nb|gpu|idle|4|(null)\n"
                                    "b|long|idle|4|(null)\nc|gpu|idle|4|(null)\n")
    assert slurm.shared_partitions({name: known[name] for name in ("a", "b")}) == ["long", "gpu"]
    assert slurm.shared_partitions(known) == ["gpu"]
    assert slurm.shared_partitions({}) == []
