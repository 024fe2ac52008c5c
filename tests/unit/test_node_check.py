"""roles/slurm_launch/files/preflight/node_check.py's detection, staged as the preflight stages it
(beside nccl_network_facts.py, nccl_env.py and gpu_check.py) and run on the recorded sysfs trees of
real GPU servers: the preflight proposes what provision.yml's nccl_network_facts module proposes for
the same node and inputs (the site proposal: compute rails only, the cluster interface, no forced
GID index for NCCL 2.21+), faults included, so the preflight and provision agree on the odd node."""

import importlib.util
import json
import shutil
import sys

import ansible.module_utils._internal
import pytest
from ansible.module_utils.testing import patch_module_args

from conftest import PROJECT_ROOT

SYSFS = PROJECT_ROOT / "tests" / "unit" / "fixtures" / "sysfs"
STAGED = {  # what preflight_report.yml's job_dir task stages beside node_check.py
    "node_check.py": PROJECT_ROOT / "roles" / "slurm_launch" / "files" / "preflight" / "node_check.py",
    "nccl_network_facts.py": PROJECT_ROOT / "library" / "nccl_network_facts.py",
    "nccl_env.py": PROJECT_ROOT / "plugins" / "filter" / "nccl_env.py",
    "gpu_check.py": PROJECT_ROOT / "roles" / "slurm_launch" / "files" / "gpu_check.py",
}
# As in test_nccl_hardware_trees.py: the DGX's in-band management port holds the cluster address;
# storage ports, IPoIB and the BMC's USB NIC hold others.
DGX_ADDRESSES = {"enp41s0f0np0": ["10.77.0.110"], "enp41s0f1np1": ["10.20.41.110"],
                 "enp170s0f0np0": ["10.20.170.110"], "ibp24s0": ["10.30.0.110"],
                 "usb0": ["169.254.3.1"], "lo": ["127.0.0.1"]}
DGX_COMPUTE_HCA = "=mlx5_0:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_9:1,mlx5_10:1,mlx5_11:1"


@pytest.fixture(scope="module")
def node_check(tmp_path_factory):
    staged = tmp_path_factory.mktemp("preflight")
    for name, source in STAGED.items():
        shutil.copy(source, staged / name)
    spec = importlib.util.spec_from_file_location("staged_node_check", staged / "node_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    sys.path.remove(str(staged))


def config(tree, **more):
    return {"sysfs_root": str(SYSFS / tree), "exclude_interfaces": ["lo", "docker*", "veth*", "virbr*", "br-*"],
            "prefer_gid_type": "RoCE v2", "ipv4_overrides": {}, "cluster_addresses": {"dgx1": "10.77.0.110"},
            "cluster_cidr": "", "nccl_version": "2.21.5", "venv": "", "conda_root": "", "conda_env": "", **more}


def provision_facts(monkeypatch, capsys, tree, addresses, **module_args):
    """What provision.yml's nccl_env role gets from the module for the same node."""
    monkeypatch.setattr(ansible.module_utils._internal, "is_controller", False)
    facts = importlib.util.spec_from_file_location("nccl_facts_for_node_check", STAGED["nccl_network_facts.py"])
    module = importlib.util.module_from_spec(facts)
    facts.loader.exec_module(module)
    with patch_module_args({"sysfs_root": str(SYSFS / tree), "ipv4_addresses": addresses, **module_args}), \
            pytest.raises(SystemExit):
        module.main()
    return json.loads(capsys.readouterr().out)["ansible_facts"]["nccl_network"]


@pytest.mark.parametrize("tree", ["dgx_h100", "dgx_h100_rail_down"])
def test_the_preflight_proposes_what_provision_proposes_for_the_node(node_check, monkeypatch, capsys, tree):
    monkeypatch.setattr(node_check, "ipv4_addresses", lambda: dict(DGX_ADDRESSES))
    found = node_check.detect_network(config(tree), "dgx1")
    expected = provision_facts(monkeypatch, capsys, tree, DGX_ADDRESSES, cluster_address="10.77.0.110",
                               nccl_version="2.21.5")
    assert found == expected


def test_on_a_dgx_the_preflight_proposes_the_compute_rails_and_the_cluster_interface(node_check, monkeypatch):
    monkeypatch.setattr(node_check, "ipv4_addresses", lambda: dict(DGX_ADDRESSES))
    found = node_check.detect_network(config("dgx_h100"), "dgx1")
    # Not every active port and every interface with an address (the device-only proposal).
    assert found["proposed"] == {"NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": DGX_COMPUTE_HCA,
                                 "NCCL_SOCKET_IFNAME": "=enp41s0f0np0"}
    assert found["reasons"]["NCCL_SOCKET_IFNAME"] == "it holds the node's cluster address 10.77.0.110"
    assert found["faults"] == [] and found["warnings"] == []


def test_a_rail_down_is_the_nodes_own_fault_which_names_it_in_the_group_check(node_check, monkeypatch):
    monkeypatch.setattr(node_check, "ipv4_addresses", lambda: dict(DGX_ADDRESSES))
    down = node_check.detect_network(config("dgx_h100_rail_down"), "dgx1")
    assert len(down["faults"]) == 1 and "is a compute rail" in down["faults"][0], down["faults"]
    healthy = node_check.detect_network(config("dgx_h100"), "dgx1")
    # A job on both reads one env file naming all eight rails; nccl.conf on each as provisioned.
    conf = [{**healthy["proposed"]}, {**down["proposed"]}]
    problems = node_check.nccl_env.nccl_env_group_problems(["dgx1", "dgx2"], ["g", "g"], conf, [healthy, down])
    assert problems and all("dgx2" in problem and "dgx1 is the odd one" not in problem for problem in problems), \
        problems
    assert any("dgx2 is the odd one: its own detection reports" in problem for problem in problems), problems


def test_the_nccl_version_is_read_from_the_training_env_as_provision_reads_it(node_check, monkeypatch, tmp_path):
    monkeypatch.setattr(node_check, "ipv4_addresses", lambda: dict(DGX_ADDRESSES))
    env = tmp_path / "anaconda3" / "envs" / "train"
    (env / "conda-meta").mkdir(parents=True)
    (env / "conda-meta" / "nccl-2.18.3-h1234.json").write_text(json.dumps({"version": "2.18.3"}))
    found = node_check.detect_network(config("hgx_roce_bond", nccl_version="", conda_root=str(tmp_path / "anaconda3"),
                                             conda_env="train",
                                             cluster_addresses={"dgx1": "10.77.0.120"}), "dgx1")
    assert found["nccl_version"] == "2.18.3"
    # NCCL before 2.21 takes one GID index for all ports: the RoCE v2 one is proposed.
    assert "NCCL_IB_GID_INDEX" in found["proposed"], found


def test_a_cluster_address_the_node_cannot_resolve_is_a_warning_not_a_crash(node_check, monkeypatch):
    monkeypatch.setattr(node_check, "ipv4_addresses", lambda: dict(DGX_ADDRESSES))
    found = node_check.detect_network(config("dgx_h100", cluster_addresses={"dgx1": "no-such-host.invalid"}), "dgx1")
    assert "NCCL_SOCKET_IFNAME" not in found["proposed"]
    assert any("cluster_address 'no-such-host.invalid' is neither an IPv4 address" in w for w in found["warnings"])


def test_the_users_nccl_conf_is_read_as_nccl_reads_it(node_check):
    # NCCL (src/misc/param.cc): $NCCL_CONF_FILE, else ~/.nccl.conf, then /etc/nccl.conf, each only
    # setting what is not set yet; the job's environment (the group's env file) first of all.
    assert node_check.user_conf_path({"HOME": "/home/alice"}) == "/home/alice/.nccl.conf"
    assert node_check.user_conf_path({"HOME": "/home/alice", "NCCL_CONF_FILE": "/nas/x.conf"}) == "/nas/x.conf"
    assert node_check.user_conf_path({"HOME": "/home/alice", "NCCL_CONF_FILE": ""}) == "/home/alice/.nccl.conf"
    assert node_check.user_conf_path({}) == ""
    conf = {"NCCL_IB_HCA": "=mlx5_0:1", "NCCL_SOCKET_IFNAME": "=eth0", "NCCL_DEBUG": "WARN"}
    user = {"NCCL_IB_HCA": "=mlx5_9:1", "NCCL_DEBUG": "INFO"}
    env_file = {"NCCL_DEBUG": "TRACE"}
    assert node_check.job_settings(conf, user, env_file) == {"NCCL_IB_HCA": "=mlx5_9:1", "NCCL_SOCKET_IFNAME": "=eth0",
                                                             "NCCL_DEBUG": "TRACE"}
    assert node_check.job_settings(conf, None, {}) == conf


def test_the_keys_provision_kept_in_nccl_conf_are_reported(node_check, tmp_path, monkeypatch):
    monkeypatch.setattr(node_check, "ipv4_addresses", lambda: dict(DGX_ADDRESSES))
    conf = tmp_path / "nccl.conf"
    conf.write_text("# NCCL settings of dgx1 (node group g), read by NCCL at init.\nNCCL_IB_DISABLE=0\n"
                    f"{node_check.nccl_network_facts.KEPT_MARKER}\nNCCL_TOPO_FILE=/opt/microsoft/ndv5/topo.xml\n")
    found = node_check.detect_network(config("dgx_h100", nccl_conf=str(conf)), "dgx1")
    assert found["kept"] == {"NCCL_TOPO_FILE": "/opt/microsoft/ndv5/topo.xml"}


def test_the_nccl_version_torch_reports_decides_the_gid_index_as_in_provision(node_check, monkeypatch):
    # hgx_roce_bond's RoCE rails: a forced GID index for NCCL 2.18 only.
    monkeypatch.setattr(node_check, "ipv4_addresses", lambda: {"eno1": ["10.77.0.120"]})
    settings = config("hgx_roce_bond", nccl_version="", cluster_addresses={"dgx1": "10.77.0.120"})
    assert node_check.detect_network(settings, "dgx1", "2.21.5")["proposed"].get("NCCL_IB_GID_INDEX") is None
    assert node_check.detect_network(settings, "dgx1", "2.18.3")["proposed"]["NCCL_IB_GID_INDEX"] == "3"
