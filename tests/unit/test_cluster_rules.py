"""plugins/module_utils/cluster_rules.py and its filters (plugins/filter/cluster_rules.py):
the one home of the safe-path, node-group, partition and NCCL env file rules."""

from pathlib import Path

import pytest
from ansible_collections.hpc.slurm_train.plugins.module_utils import slurm
from ansible.errors import AnsibleFilterError

ROOT = Path(__file__).resolve().parents[2]
from ansible_collections.hpc.slurm_train.plugins.filter import cluster_rules as filters
rules = filters.rules

# The local inventory's shape (inventory/local/hosts.yml) with a second node group.
GROUPS = {"all": ["login01", "nas01", "node110", "node111", "h1"], "ungrouped": [], "login": ["login01"],
          "submit": ["login01"], "nas": ["nas01"], "compute": ["node110", "node111", "h1"],
          "gpu_A6000": ["node110", "node111"], "gpu_H100": ["h1"]}


@pytest.mark.parametrize("path", [
    "/starmap/nas/cuda/cuda-11.8", "/nas/cuda/cuda-12.1+extras", "/nas/envs/torch+cu121", "/", "/a/b_c.d-e"])
def test_safe_paths(path):
    assert rules.is_safe_path(path)
    assert rules.safe_path_problem("cluster_cuda_home", path) is None


@pytest.mark.parametrize("path", [
    "", "nas/env", "/nas/../etc", "/nas/..", "/nas/a b", "/nas/$(id)", "/nas/`id`", '/nas/"x', "/nas/x\n", "/nas/x;y",
    None, 7])
def test_unsafe_paths_are_refused_naming_the_value_and_the_rule(path):
    assert not rules.is_safe_path(path)
    assert rules.safe_path_problem("cluster_cuda_home", path) == (
        f"cluster_cuda_home={path!r} is not allowed: an absolute path of letters, digits, '_', '.', '+', '-' and '/', "
        "without '..'")


def test_an_empty_path_passes_only_where_allowed():
    assert filters.path_problems({"venv": "", "cuda_home": ""}, ["venv"]) == [
        "cuda_home='' is not allowed: an absolute path of letters, digits, '_', '.', '+', '-' and '/', without '..'"]


def test_the_cuda_home_the_cuda_role_installs_is_one_the_launch_takes():
    # The cuda_toolkit role's own path rule (roles/cuda_toolkit/vars/main.yml) takes '+'; so does the launch now.
    from ansible_collections.hpc.slurm_train.plugins.plugin_utils import launch_request
    assert launch_request.value_problems({"cuda_home": "/nas/cuda/cuda-12.1+extras"}) == []


def test_node_groups_are_the_groups_of_compute_nodes_only():
    assert rules.node_groups(GROUPS) == ["gpu_A6000", "gpu_H100"]
    # A group that also holds a login host is no node group; an empty one neither.
    assert rules.node_groups({**GROUPS, "mixed": ["node110", "login01"], "empty": []}) == ["gpu_A6000", "gpu_H100"]
    # A group of every compute node is one.
    assert rules.node_groups({"all": ["n1"], "compute": ["n1", "n2"], "gpu_a": ["n1", "n2"]}) == ["gpu_a"]


def test_a_hosts_node_group():
    assert rules.node_groups_by_host(GROUPS)["node111"] == ["gpu_A6000"]
    assert rules.host_node_group("node111", GROUPS) == "gpu_A6000"
    assert rules.host_node_group("node111", GROUPS, "gpu_special") == "gpu_special"


@pytest.mark.parametrize(("groups", "message"), [
    ({**GROUPS, "gpu_A6000": []}, r"node111: node groups \[\] \(groups under `compute` holding it\): it needs exactly one"),
    ({**GROUPS, "big": ["node110", "node111"]}, r"node111: node groups \['big', 'gpu_A6000'\].*set nccl_env_group"),
])
def test_a_host_in_no_or_several_node_groups_is_refused_naming_them(groups, message):
    with pytest.raises(ValueError, match=message):
        rules.host_node_group("node111", groups)


def test_a_node_group_name_that_cannot_be_a_file_name_is_refused():
    with pytest.raises(ValueError, match=r"node group 'a/b' is not allowed"):
        rules.host_node_group("node111", GROUPS, "a/b")


def test_the_nodes_of_a_job_share_one_node_group():
    nodes_vars = {"node110": {}, "node111": {}, "h1": {}}
    assert rules.nodes_node_group(["node110", "node111"], nodes_vars, GROUPS) == "gpu_A6000"
    with pytest.raises(ValueError) as error:
        rules.nodes_node_group(["node110", "h1"], nodes_vars, GROUPS)
    assert str(error.value) == (
        "the nodes are not of one node group, so no one NCCL env file fits them: node110 in gpu_A6000; "
        "h1 in gpu_H100; pick nodes of one group (-e group=GROUP)")
    # The nccl_env role's per-node choice counts (what it names the file after).
    assert rules.nodes_node_group(["node110"], {"node110": {"nccl_env_group": "g2"}}, GROUPS) == "g2"


def test_a_node_of_no_node_group_is_named():
    # A node Slurm knows that the inventory puts in no node group (here the login host, as a job's
    # -e nodes=login01 would).
    with pytest.raises(ValueError) as error:
        rules.nodes_node_group(["node110", "login01"], {}, GROUPS)
    assert str(error.value) == (
        "login01: node groups [] (groups under `compute` holding it): it needs exactly one; set nccl_env_group "
        "for the node to choose")


def test_the_node_groups_of_many_hosts_are_read_once_and_give_each_hosts_group():
    by_host = rules.node_groups_by_host(GROUPS)
    assert by_host == {"node110": ["gpu_A6000"], "node111": ["gpu_A6000"], "h1": ["gpu_H100"]}
    for host in GROUPS["compute"]:
        assert rules.host_node_group(host, GROUPS, "", by_host) == rules.host_node_group(host, GROUPS)


@pytest.mark.parametrize(("given", "group", "common", "partition"), [
    ("", "gpu_A6000", ["gpu_A6000", "debug"], "gpu_A6000"),
    ("", "gpu_A6000", ["debug", "gpu_A6000"], "gpu_A6000"),  # the group's, named alike, first
    ("", "gpu_A6000", ["batch"], "batch"),  # nodes of the group in a partition named otherwise
    ("debug", "gpu_A6000", ["gpu_A6000", "debug"], "debug"),  # given wins
    ("", "", [], ""),
])
def test_the_partition_of_a_job(given, group, common, partition):
    assert slurm.job_partition(given, group, common) == partition


def test_the_nccl_env_file_of_a_node_group():
    assert rules.nccl_env_file("/starmap/nas/env", "gpu_A6000") == "/starmap/nas/env/nccl-gpu_A6000.sh"
    assert rules.nccl_env_file("/starmap/nas/env/", "gpu_A6000") == "/starmap/nas/env/nccl-gpu_A6000.sh"
    assert rules.nccl_env_file("", "") == ""
    with pytest.raises(ValueError, match="no NCCL env file for node group ''"):
        rules.nccl_env_file("/nas/env", "")
    with pytest.raises(AnsibleFilterError, match=r"no NCCL env file for node group '\.\./x'"):
        filters.FilterModule().filters()["cluster_nccl_env_file"]("/nas/env", "../x")


def test_every_role_names_the_env_file_through_the_one_filter():
    # The writer (nccl_env) and the readers (the preflight; the launch, through the train_job
    # filter's nccl_env_file, which submit.yml expects on the NAS) call the same rule.
    uses = {path.relative_to(ROOT).as_posix() for path in (ROOT / "roles").rglob("*.yml")
            if "cluster_nccl_env_file" in path.read_text()}
    assert uses == {"roles/nccl_env/tasks/deferred_node_files.yml", "roles/slurm_launch/tasks/preflight_report.yml"}
    assert "_slurm_launch_checked.job.nccl_env_file" in (ROOT / "roles/slurm_launch/tasks/submit.yml").read_text()
    for path in (ROOT / "roles").rglob("*"):
        if path.is_file() and path.suffix in (".yml", ".py", ".j2"):
            assert "/nccl-' ~" not in path.read_text() and "/nccl-{" not in path.read_text(), path


def test_a_host_whose_only_node_group_has_a_bad_name_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"^node1: node group '_h100' is not allowed: "):
        # A valid Ansible group name (a Python identifier) that no Slurm partition name rule takes.
        rules.host_node_group("node1", {"all": ["node1"], "ungrouped": [], "compute": ["node1"],
                                        "_h100": ["node1"]})


def test_a_job_outside_its_groups_partition_runs_in_the_first_partition_its_nodes_share():
    assert slurm.job_partition("", "gpu_h100", ["batch", "debug"]) == "batch"
