"""roles/slurm_launch/filter_plugins/preflight.py: the preflight's problems and rows, gathered
from the facts each node's checks left, read through Ansible's own hostvars: a node whose
checks did not run still has every inventory variable, only not the checks' facts."""
import importlib.util
from pathlib import Path

import pytest
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.vars.hostvars import HostVars
from ansible.vars.manager import VariableManager

PLUGIN = Path(__file__).resolve().parents[2] / "roles" / "slurm_launch" / "filter_plugins" / "preflight.py"
spec = importlib.util.spec_from_file_location("preflight_filters", PLUGIN)
preflight = importlib.util.module_from_spec(spec)
spec.loader.exec_module(preflight)

INVENTORY = """\
all:
  vars:
    cluster_name: rec
    cluster_nas_root: /starmap/nas
  children:
    submit:
      hosts:
        login1: {ansible_host: 10.0.0.10}
    compute:
      children:
        gpu_A6000:
          hosts:
            n1: {ansible_host: 10.0.0.1}
            n2: {ansible_host: 10.0.0.2}
            n3: {ansible_host: 10.0.0.3}
"""

# What preflight_node.yml and nccl_env's check.yml set on a node that was checked.
CHECKED = {
    "_slurm_launch_preflight_problems": [],
    "_slurm_launch_preflight_found": {"cuda": "release 11.8", "python": "torch 2.13.0 (/nas/envs/x/bin/python)"},
    "_nccl_env_check": {"interface": "eth0", "address": "10.0.0.1"},
    "_nccl_env_check_reach": {"results": [{"item": "n2", "state": "started"}, {"item": "n3", "msg": "Timeout"}]},
    "_nccl_env_check_problems": ["n1 cannot reach n3 at its eth0 address within 5 s"],
}


@pytest.fixture
def hostvars(tmp_path):
    """hostvars as a play has them, with `set_fact(node, facts)` to leave a node's checks' facts."""
    (tmp_path / "hosts.yml").write_text(INVENTORY)
    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[str(tmp_path / "hosts.yml")])
    variables = VariableManager(loader=loader, inventory=inventory)
    real = HostVars(inventory=inventory, variable_manager=variables, loader=loader)
    real.set_fact = variables.set_nonpersistent_facts  # what ansible.builtin.set_fact does
    return real


def test_every_node_problem_is_kept_and_a_node_that_was_not_checked_is_named(hostvars):
    # The across-nodes check leaves its problems on the play's first node only.
    hostvars.set_fact("n1", {**CHECKED, "_nccl_env_check_group_problems": ["group g: NCCL_IB_HCA differs"]})
    hostvars.set_fact("n2", {**CHECKED, "_slurm_launch_preflight_problems": ["n2: CUDA: nvcc failed"],
                             "_nccl_env_check_problems": []})
    # n3 was not reachable: it has its inventory variables and nothing of the checks.
    assert hostvars["n3"]["ansible_host"] == "10.0.0.3"
    problems = preflight.preflight_problems(["n1", "n2", "n3"], hostvars)
    assert problems == ["n1 cannot reach n3 at its eth0 address within 5 s", "n2: CUDA: nvcc failed",
                        "n3: its checks did not run (not reachable over SSH, or its facts could not be gathered): "
                        "see the errors above", "group g: NCCL_IB_HCA differs"]


def test_nodes_without_problems_give_none(hostvars):
    for node in ("n1", "n2"):
        hostvars.set_fact(node, {**CHECKED, "_nccl_env_check_problems": []})
    assert preflight.preflight_problems(["n1", "n2"], hostvars) == []


def test_a_node_whose_nccl_check_did_not_run_gives_its_own_problems(hostvars):
    # preflight_node.yml ran, nccl_env's check did not (no nccl env for the group, say).
    hostvars.set_fact("n1", {"_slurm_launch_preflight_problems": ["n1: the Python env has no torch"]})
    assert preflight.preflight_problems(["n1"], hostvars) == ["n1: the Python env has no torch"]
    assert preflight.preflight_rows(["n1"], hostvars) == [{"node": "n1", "checks": "not checked"}]


def test_a_group_problem_found_on_a_node_that_also_reports_it_is_said_once(hostvars):
    hostvars.set_fact("n1", {**CHECKED, "_nccl_env_check_problems": ["group g: NCCL_IB_HCA differs"],
                             "_nccl_env_check_group_problems": ["group g: NCCL_IB_HCA differs"]})
    assert preflight.preflight_problems(["n1"], hostvars) == ["group g: NCCL_IB_HCA differs"]


def test_a_row_says_what_the_job_will_use_and_how_many_peers_answered(hostvars):
    hostvars.set_fact("n1", CHECKED)
    rows = preflight.preflight_rows(["n1", "n2", "n3"], hostvars)
    assert rows == [
        {"node": "n1", "checks": "CUDA release 11.8; torch 2.13.0 (/nas/envs/x/bin/python); "
                                 "sockets eth0 10.0.0.1; reaches 1 of 2 nodes"},
        {"node": "n2", "checks": "not checked"},
        {"node": "n3", "checks": "not checked"},
    ]


def test_a_row_without_a_socket_interface_says_nccl_chooses(hostvars):
    hostvars.set_fact("n1", {**CHECKED, "_slurm_launch_preflight_found": {"cuda": "", "python": "torch 2.13.0"},
                             "_nccl_env_check": {"interface": "", "address": "10.0.0.1"},
                             "_nccl_env_check_reach": {"results": [{"item": "n2", "state": "started"}]}})
    assert preflight.preflight_rows(["n1", "n2"], hostvars)[0] == {
        "node": "n1", "checks": "torch 2.13.0; sockets (NCCL chooses) 10.0.0.1; reaches 1 of 1 nodes"}


def test_an_unchecked_node_listed_first_does_not_hide_the_others(hostvars):
    hostvars.set_fact("n2", {**CHECKED, "_slurm_launch_preflight_problems": ["n2: CUDA: nvcc failed"],
                             "_nccl_env_check_problems": []})
    assert preflight.preflight_problems(["n1", "n2"], hostvars) == [
        "n1: its checks did not run (not reachable over SSH, or its facts could not be gathered): see the errors "
        "above", "n2: CUDA: nvcc failed"]
