"""launch_request.py's node_plan: a job's nodes (slurm_nodes' result, from sinfo lines as Slurm
prints them) checked against the inventory and the request, as nodes.yml asks, in one pass."""

from collections.abc import Mapping
from pathlib import Path

import pytest
from ansible_collections.hpc.slurm_train.plugins.module_utils import slurm

from ansible_collections.hpc.slurm_train.plugins.plugin_utils import launch_request

GROUPS = {"all": ["login01", "node110", "node111", "h1"], "ungrouped": [], "login": ["login01"],
          "compute": ["node110", "node111", "h1"], "gpu_A6000": ["node110", "node111"], "gpu_H100": ["h1"]}
SINFO = ("node110|gpu_A6000*|idle|16|gpu:8\nnode111|gpu_A6000*|idle|16|gpu:8\n"
         "h1|gpu_H100|idle|32|gpu:8\nlogin01|login|idle|4|(null)\n")
HOSTVARS = {"node110": {"cluster_node_cpus": 16, "cluster_node_gpus": 8},
            "node111": {"cluster_node_cpus": 16, "cluster_node_gpus": 8},
            "h1": {"cluster_node_cpus": 32, "cluster_node_gpus": 8}, "login01": {}}
REQUEST = {"group": "", "partition": "", "num_nodes": 1, "gpus_per_node": 0, "cpus_per_task": 0,
           "nproc_per_node": 0, "nccl_env": True}


def nodes_info(names, sinfo=SINFO):
    """What library/slurm_nodes.py returns for `names`, from sinfo's lines."""
    known = slurm.parse_sinfo_nodes(sinfo)
    seen = [known[name]["partitions"] for name in names if name in known]
    return {"names": names, "slurm": {name: known[name] for name in names if name in known},
            "unknown": [name for name in names if name not in known],
            "common_partitions": [p for p in seen[0] if all(p in parts for parts in seen)] if seen else []}


def plan(names, sinfo=SINFO, hostvars=HOSTVARS, **request):
    return launch_request.node_plan(nodes_info(names, sinfo), hostvars, GROUPS, {**REQUEST, **request})


def test_nodes_that_fit_give_their_group_partition_and_counts():
    found = plan(["node110", "node111"])
    assert found == {"node_group": "gpu_A6000", "partition": "gpu_A6000", "num_nodes": 2, "node_gpus": 8,
                     "node_cpus": 16, "unusable": {}, "notes": [], "problem": ""}
    # A group's job asks for num_nodes of the group's nodes.
    assert plan(["node110", "node111"], group="gpu_A6000", num_nodes="1")["num_nodes"] == 1


def test_nodes_the_inventory_or_slurm_does_not_know_are_named_first():
    assert plan(["node110", "login01"])["problem"] == (
        "Not compute nodes of the inventory: login01 (known: node110, node111, h1).")
    sinfo = "node110|gpu_A6000*|idle|16|gpu:8\n"
    assert plan(["node110", "node111"], sinfo)["problem"] == "Slurm does not know: node111 (see sinfo -N)."


def test_nodes_of_two_node_groups_are_refused_only_when_the_job_sources_an_nccl_env_file():
    assert plan(["node110", "h1"])["problem"].startswith(
        "the nodes are not of one node group, so no one NCCL env file fits them: node110 in gpu_A6000; h1 in gpu_H100")
    # Without the NCCL env file, the partition is what they must share.
    assert plan(["node110", "h1"], nccl_env=False)["problem"] == (
        "The nodes are not in one partition: node110 is in gpu_A6000; h1 is in gpu_H100; pick nodes of one "
        "partition, or -e group=<partition> -e num_nodes=N.")
    assert plan(["node110"], partition="debug")["problem"].startswith("The nodes are not in one partition debug: ")


def test_the_inventorys_counts_disagreeing_with_slurms_are_named():
    hostvars = {**HOSTVARS, "node111": {"cluster_node_cpus": 8, "cluster_node_gpus": 8}}
    assert plan(["node110", "node111"], hostvars=hostvars)["problem"] == (
        "node111: the inventory says 8 CPUs, Slurm says 16 (CPUTot); set cluster_node_cpus: 16 in "
        "group_vars/gpu_A6000.yml.")


@pytest.mark.parametrize(("request_", "said"), [
    ({"gpus_per_node": "9"}, "gpus_per_node=9 of 8 GPUs"),
    ({"cpus_per_task": 17}, "cpus_per_task=17 of 16 CPUs per node"),
    ({"group": "gpu_A6000", "num_nodes": 3}, "num_nodes=3 of 2 nodes"),
    ({"cpus_per_task": 2, "nproc_per_node": 3}, "nproc_per_node=3 processes on 2 CPUs (one CPU each at least)"),
])
def test_a_request_that_does_not_fit_names_what_and_of_how_many(request_, said):
    problem = plan(["node110", "node111"], **request_)["problem"]
    assert problem.startswith("The request does not fit: ") and said in problem, problem
    assert problem.endswith("(gpu_A6000 nodes, from the inventory's cluster_node_* values).")


@pytest.mark.parametrize(("request_", "said"), [
    # The counts left at 0 (all of a node's GPUs and CPUs) fit, and are not named.
    ({"group": "gpu_A6000", "num_nodes": 3}, "num_nodes=3 of 2 nodes"),
    ({"gpus_per_node": 9, "cpus_per_task": 17}, "gpus_per_node=9 of 8 GPUs, cpus_per_task=17 of 16 CPUs per node"),
    ({"cpus_per_task": 4, "nproc_per_node": 5}, "nproc_per_node=5 processes on 4 CPUs (one CPU each at least)"),
])
def test_a_request_that_does_not_fit_names_only_what_does_not_fit(request_, said):
    assert plan(["node110", "node111"], **request_)["problem"] == (
        f"The request does not fit: {said} (gpu_A6000 nodes, from the inventory's cluster_node_* values).")


def test_down_nodes_are_refused_by_name_and_a_group_takes_the_usable_ones():
    sinfo = SINFO.replace("node111|gpu_A6000*|idle", "node111|gpu_A6000*|drained")
    problem = plan(["node110", "node111"], sinfo)["problem"]
    assert problem.startswith("node111 (drained) ") and "; 2 usable nodes are needed (1 of 2 are usable)." in problem
    found = plan(["node110", "node111"], sinfo, group="gpu_A6000", num_nodes=1)
    assert found["problem"] == "" and found["unusable"] == {"node111": "drained"}
    assert "2 usable nodes are needed (1 of 2" in plan(["node110", "node111"], sinfo, group="gpu_A6000", num_nodes=2)["problem"]


def test_usable_nodes_that_delay_the_job_are_noted():
    sinfo = SINFO.replace("node111|gpu_A6000*|idle", "node111|gpu_A6000*|allocated")
    found = plan(["node110", "node111"], sinfo)
    assert found["problem"] == "" and found["notes"] == ["node111 (allocated) is allocated: the job waits for it"]


class CountingHostvars(Mapping):
    """Ansible's hostvars merges all of a host's variables on each hostvars[host]: counted here."""

    def __init__(self, data):
        self.data, self.reads = data, {}

    def __getitem__(self, host):
        self.reads[host] = self.reads.get(host, 0) + 1
        return self.data[host]

    def __iter__(self):
        return iter(self.data)

    def __len__(self):
        return len(self.data)


def test_each_nodes_variables_are_read_once():
    names = [f"n{i}" for i in range(1, 201)]
    groups = {"all": names, "compute": names, "big": names}
    sinfo = "".join(f"{name}|big|idle|16|gpu:8\n" for name in names)
    hostvars = CountingHostvars({name: {"cluster_node_cpus": 16, "cluster_node_gpus": 8} for name in names})
    found = launch_request.node_plan(nodes_info(names, sinfo), hostvars, groups, {**REQUEST, "group": "big",
                                                                                  "num_nodes": 200})
    assert found["problem"] == "" and found["node_group"] == "big" and found["num_nodes"] == 200
    assert hostvars.reads == {name: 1 for name in names}


def inventory_plan(nodes, hostvars=HOSTVARS, **request):
    return launch_request.node_inventory_plan(nodes, hostvars, GROUPS, {**REQUEST, **request})


def test_the_launchs_plan_from_the_inventory_asks_slurm_nothing_and_lists_what_its_module_run_checks():
    found = inventory_plan("node[110-111]")
    assert found == {"names": ["node110", "node111"], "hostlist": "node[110-111]", "node_group": "gpu_A6000",
                     "num_nodes": 2, "node_gpus": 8, "node_cpus": 16, "problem": "",
                     "inventory": {"node110": {"cluster_node_cpus": 16, "cluster_node_gpus": 8},
                                   "node111": {"cluster_node_cpus": 16, "cluster_node_gpus": 8}}}
    assert inventory_plan(["node110", "node111"], group="gpu_A6000", num_nodes="1")["num_nodes"] == 1


@pytest.mark.parametrize(("nodes", "request_", "problem"), [
    ("node[110-", {}, "invalid node list 'node[110-': "),
    (["node110", "login01"], {}, "Not compute nodes of the inventory: login01 (known: node110, node111, h1)."),
    (["node110", "h1"], {}, "the nodes are not of one node group, so no one NCCL env file fits them"),
    (["node110"], {"gpus_per_node": 9}, "The request does not fit: gpus_per_node=9 of 8 GPUs ("),
])
def test_the_launchs_plan_refuses_what_the_inventory_alone_says_is_wrong(nodes, request_, problem):
    assert inventory_plan(nodes, **request_)["problem"].startswith(problem)


@pytest.mark.parametrize("value, number", [(8, 8), ("8", 8), ("2.0", 2), (2.9, 2), ("x", 0), (None, 0), ("", 0)])
def test_an_inventory_count_is_read_as_jinjas_int_reads_it(value, number):
    assert launch_request.as_int(value) == number


def inventory_plan(nodes, hostvars=HOSTVARS, **request):
    return launch_request.node_inventory_plan(nodes, hostvars, GROUPS, {**REQUEST, **request})


def test_a_refused_node_list_plans_no_nodes_and_counts_none():
    found = inventory_plan("node[110")
    assert found == {"names": [], "hostlist": "", "node_group": "", "num_nodes": 0, "node_gpus": 0, "node_cpus": 0,
                     "inventory": {}, "problem": found["problem"]}
    assert found["problem"].startswith("invalid node list 'node[110': ")


def test_no_nodes_count_nothing_and_a_node_the_inventory_says_nothing_of_has_no_gpus_and_one_cpu():
    assert {key: inventory_plan([], nccl_env=False)[key] for key in ("num_nodes", "node_gpus", "node_cpus", "problem")} == {
        "num_nodes": 0, "node_gpus": 0, "node_cpus": 0, "problem": ""}
    bare = inventory_plan(["node110"], hostvars={"node110": {}}, nccl_env=False)
    assert (bare["node_gpus"], bare["node_cpus"], bare["inventory"]) == (0, 1, {"node110": {}})


def test_a_request_of_every_gpu_and_cpu_of_the_nodes_fits():
    found = inventory_plan(["node110", "node111"], num_nodes=2, gpus_per_node=8, cpus_per_task=16, nproc_per_node=16)
    assert found["problem"] == "" and (found["num_nodes"], found["node_gpus"], found["node_cpus"]) == (2, 8, 16)
    assert inventory_plan(["node110"], nproc_per_node=17)["problem"] == (
        "The request does not fit: nproc_per_node=17 processes on 16 CPUs (one CPU each at least) (gpu_A6000 nodes, "
        "from the inventory's cluster_node_* values).")


def test_a_misfit_of_nodes_without_a_node_group_names_the_partition_or_says_the_nodes():
    given = inventory_plan(["node110"], nccl_env=False, partition="batch", gpus_per_node=9)
    assert given["problem"].startswith("The request does not fit: gpus_per_node=9 of 8 GPUs (batch nodes, ")
    bare = inventory_plan(["node110"], nccl_env=False, gpus_per_node=9)
    assert bare["problem"].startswith("The request does not fit: gpus_per_node=9 of 8 GPUs (the nodes, ")
