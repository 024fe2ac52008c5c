"""NCCL settings proposed for stand-in sysfs trees of real GPU servers (tests/unit/fixtures/sysfs/
README.md: a DGX H100, the same with one compute rail down, an HGX with bonded RoCE v2 ports),
and how the nccl_env role's group check judges nodes that disagree."""

import json
from pathlib import Path

import ansible.module_utils._internal
import pytest
from ansible.module_utils.testing import patch_module_args

REPO = Path(__file__).resolve().parents[2]
SYSFS = Path(__file__).resolve().parent / "fixtures" / "sysfs"

from ansible_collections.hpc.slurm_train.plugins.filter import nccl_env  # noqa: E402
from ansible_collections.hpc.slurm_train.plugins.modules import nccl_network_facts as nccl  # noqa: E402

# Addresses as the role passes them from the gathered facts (sysfs holds none). On the DGX the
# in-band management port enp41s0f0np0 holds the cluster address (ansible_host); storage ports,
# IPoIB and the BMC's USB NIC (169.254.x, Redfish host interface) hold others.
DGX_ADDRESSES = {"enp41s0f0np0": ["10.77.0.110"], "enp41s0f1np1": ["10.20.41.110"],
                 "enp170s0f0np0": ["10.20.170.110"], "ibp24s0": ["10.30.0.110"],
                 "usb0": ["169.254.3.1"], "lo": ["127.0.0.1"]}
HGX_ADDRESSES = {"eno1": ["10.77.0.120"], "ens2f0np0": ["10.50.0.120"], "bond0": ["10.40.0.120"],
                 "bond1": ["10.40.1.120"], "lo": ["127.0.0.1"]}
# The DGX H100 User Guide's compute ports, in its order; mlx5_1, 2, 7, 8 are storage/in-band.
DGX_COMPUTE_HCA = "=mlx5_0:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_9:1,mlx5_10:1,mlx5_11:1"


@pytest.fixture(autouse=True)
def module_side(monkeypatch):
    monkeypatch.setattr(ansible.module_utils._internal, "is_controller", False)


def run_module(capsys, **module_args):
    with patch_module_args(module_args), pytest.raises(SystemExit):
        nccl.main()
    return json.loads(capsys.readouterr().out)


def detect(capsys, tree, addresses, cluster_address, nccl_version="2.21.5", **more):
    return run_module(capsys, sysfs_root=str(SYSFS / tree), ipv4_addresses=addresses,
                      cluster_address=cluster_address, nccl_version=nccl_version, **more)["ansible_facts"]["nccl_network"]


def test_dgx_h100_gets_the_eight_compute_rails_exactly_and_the_cluster_interface(capsys):
    facts = detect(capsys, "dgx_h100", DGX_ADDRESSES, "10.77.0.110")
    assert facts["proposed"] == {"NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": DGX_COMPUTE_HCA,
                                 "NCCL_SOCKET_IFNAME": "=enp41s0f0np0"}
    assert facts["faults"] == [] and facts["warnings"] == []
    assert len(facts["gpus"]) == 8 and {gpu["numa_node"] for gpu in facts["gpus"]} == {0, 1}
    assert facts["reasons"]["NCCL_SOCKET_IFNAME"] == "it holds the node's cluster address 10.77.0.110"
    assert "since 2.21" in facts["reasons"]["NCCL_IB_GID_INDEX"]


def test_dgx_h100_storage_ports_are_active_but_no_rail(capsys):
    facts = detect(capsys, "dgx_h100", DGX_ADDRESSES, "10.77.0.110")
    storage = {hca["name"] for hca in facts["hcas"] if hca["ports"][0]["link_layer"] == "Ethernet"}
    assert storage == {"mlx5_1", "mlx5_2", "mlx5_7", "mlx5_8"}
    assert all(hca["ports"][0]["active"] for hca in facts["hcas"])
    named = facts["proposed"]["NCCL_IB_HCA"].lstrip("=").split(",")
    assert not storage & {entry.split(":")[0] for entry in named}


def test_the_dgx_cluster_interface_follows_the_cluster_cidr_too(capsys):
    facts = detect(capsys, "dgx_h100", DGX_ADDRESSES, "", cluster_cidr="10.77.0.0/24")
    assert facts["proposed"]["NCCL_SOCKET_IFNAME"] == "=enp41s0f0np0"


def test_a_link_local_address_is_never_the_cluster_interface(capsys):
    facts = detect(capsys, "dgx_h100", DGX_ADDRESSES, "", cluster_cidr="169.254.0.0/16")
    assert "NCCL_SOCKET_IFNAME" not in facts["proposed"]


def test_dgx_h100_with_one_rail_down_lists_the_seven_and_reports_its_fault(capsys):
    addresses = dict(DGX_ADDRESSES, stor0=["192.0.2.5"])
    facts = detect(capsys, "dgx_h100_rail_down", addresses, "10.77.0.110")
    assert facts["proposed"] == {"NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": DGX_COMPUTE_HCA.replace("mlx5_5:1,", ""),
                                 "NCCL_SOCKET_IFNAME": "=enp41s0f0np0"}
    assert facts["faults"] == ["mlx5_5:1 is a compute rail (its HCA shares a PCIe switch with a GPU) but its "
                               "port is DOWN, not ACTIVE"]


@pytest.mark.parametrize("version, gid_index", [("2.21.5", None), ("2.18.3", "3"), ("", "3")])
def test_hgx_bonded_roce_gets_its_bonds_and_a_gid_index_only_for_old_nccl(capsys, version, gid_index):
    facts = detect(capsys, "hgx_roce_bond", HGX_ADDRESSES, "10.77.0.120", nccl_version=version)
    expected = {"NCCL_IB_DISABLE": "0",
                "NCCL_IB_HCA": "=mlx5_bond_0:1,mlx5_bond_1:1,mlx5_bond_2:1,mlx5_bond_3:1",
                "NCCL_SOCKET_IFNAME": "=eno1"}
    if gid_index:
        expected["NCCL_IB_GID_INDEX"] = gid_index
    assert facts["proposed"] == expected
    # The front-end mlx5_4 (RoCE too, on a CPU root port) is no rail.
    assert any(hca["name"] == "mlx5_4" and hca["ports"][0]["active"] for hca in facts["hcas"])


def test_without_gpus_or_topology_the_hca_list_is_left_to_nccl_and_the_reason_said(capsys, tmp_path):
    facts = detect(capsys, "two_hcas", {"ens1f0": ["10.10.0.11"]}, "10.10.0.11")
    assert "NCCL_IB_HCA" not in facts["proposed"]
    assert facts["reasons"]["NCCL_IB_HCA"].startswith("no NVIDIA GPU under bus/pci/devices")


def test_the_nccl_version_is_read_from_a_conda_env_or_a_pip_wheel(tmp_path):
    conda = tmp_path / "conda"
    (conda / "conda-meta").mkdir(parents=True)
    # conda-meta/<name>-<version>-<build>.json, as conda records an installed package.
    (conda / "conda-meta" / "nccl-2.21.5.1-h3a97aeb_0.json").write_text(json.dumps({"name": "nccl", "version": "2.21.5.1"}))
    venv = tmp_path / "venv"
    (venv / "lib" / "python3.11" / "site-packages" / "nvidia_nccl_cu12-2.20.5.dist-info").mkdir(parents=True)
    assert nccl.nccl_version_from_env(str(conda)) == "2.21.5.1"
    assert nccl.nccl_version_from_env(str(venv)) == "2.20.5"
    assert nccl.nccl_version_from_env(str(tmp_path / "none")) is None


def group(capsys, *members):
    """(name, tree, addresses, cluster address, host overrides) -> the role's group check."""
    names, settings, networks, overrides = [], [], [], []
    for name, tree, addresses, address, override in members:
        facts = detect(capsys, tree, addresses, address)
        names.append(name)
        settings.append(nccl_env.nccl_env_merge(facts["proposed"], {}, override))
        networks.append(facts)
        overrides.append(override)
    return nccl_env.nccl_env_group_outliers(names, ["gpu_h100"] * len(names), settings, networks, overrides)


def test_the_node_with_a_rail_down_is_named_even_in_a_group_of_two(capsys):
    found = group(capsys, ("dgx1", "dgx_h100", DGX_ADDRESSES, "10.77.0.110", {}),
                  ("dgx2", "dgx_h100_rail_down", DGX_ADDRESSES, "10.77.0.110", {}))
    assert list(found) == ["dgx2"]
    assert "dgx2 is the odd one: its own detection reports: mlx5_5:1 is a compute rail" in found["dgx2"][0]


def test_an_extra_interface_on_another_subnet_changes_nothing(capsys):
    found = group(capsys, ("dgx1", "dgx_h100", DGX_ADDRESSES, "10.77.0.110", {}),
                  ("dgx2", "dgx_h100", dict(DGX_ADDRESSES, stor0=["192.0.2.5"]), "10.77.0.110", {}))
    assert found == {}


def test_a_host_override_the_group_does_not_share_names_that_host(capsys):
    found = group(capsys, ("dgx1", "dgx_h100", DGX_ADDRESSES, "10.77.0.110", {}),
                  ("dgx2", "dgx_h100", DGX_ADDRESSES, "10.77.0.110", {"NCCL_IB_HCA": "=mlx5_0:1"}))
    assert list(found) == ["dgx2"]
    assert "its nccl_env_overrides sets NCCL_IB_HCA==mlx5_0:1, which the rest of its group" in found["dgx2"][0]


def test_a_tie_nothing_explains_names_every_side(capsys):
    found = nccl_env.nccl_env_group_outliers(["a", "b"], ["g", "g"], [{"NCCL_DEBUG": "INFO"}, {"NCCL_DEBUG": "WARN"}],
                                             [{}, {}], [{}, {}])
    assert sorted(found) == ["a", "b"]
    assert "every side (a, b) is named" in found["a"][0]


@pytest.mark.parametrize("version, warned", [("", True), ("2.18.3", False)])
def test_a_gid_index_forced_for_an_unknown_nccl_version_is_warned_about(capsys, version, warned):
    facts = detect(capsys, "hgx_roce_bond", HGX_ADDRESSES, "10.77.0.120", nccl_version=version)
    warning = ("NCCL version unknown (no nccl_version, none found in env_prefix): NCCL_IB_GID_INDEX is "
               "forced as NCCL before 2.21 needs it.")
    assert (warning in facts["warnings"]) is warned


# --- The machine kinds of docs/hardware.md: for each tree, what an admin of that machine writes
# by hand (the document it follows in a comment), which the proposal must equal. ---

def proposal(capsys, tree, addresses, cluster_address, nccl_version="2.21.5", **more):
    facts = detect(capsys, tree, addresses, cluster_address, nccl_version=nccl_version, **more)
    return facts["proposed"], facts["warnings"], facts["faults"], facts


def test_dgx_a100_takes_the_hca_of_each_gpus_level_2_switch_not_the_storage_cards(capsys):
    # DGX A100 User Guide, "Network Configuration": compute mlx5_0-3, mlx5_6-9; storage/in-band
    # mlx5_4,5,10,11 (enp97s0f0/1, enp225s0f0/1); the in-band address on enp225s0f0.
    proposed, warnings, faults, facts = proposal(
        capsys, "dgx_a100", {"enp225s0f0": ["10.77.0.101"], "enp97s0f0": ["10.20.97.101"]}, "10.77.0.101")
    assert proposed == {"NCCL_IB_DISABLE": "0",
                        "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_6:1,mlx5_7:1,mlx5_8:1,mlx5_9:1",
                        "NCCL_SOCKET_IFNAME": "=enp225s0f0"}
    assert warnings == [] and faults == []
    # NPS4: the GPU pairs sit on NUMA nodes 3, 1, 7, 5.
    assert sorted({gpu["numa_node"] for gpu in facts["gpus"]}) == [1, 3, 5, 7]
    assert facts["reasons"]["NCCL_IB_HCA"].endswith("mlx5_10 left out: its netdev holds the cluster interface "
                                                    "enp225s0f0")


def test_dgx_h100_basepod_skips_virtual_functions_storage_ib_and_the_bond(capsys):
    # DGX BasePOD Deployment Guide: compute mlx5_0,3,4,5,6,9,10,11 (as the DGX H100 User Guide);
    # slot 1/2 port 1 InfiniBand storage (mlx5_1, mlx5_7), port 2 bonded as bond0 (the in-band
    # address). 64 SR-IOV VFs (mlx5_12-75), some DOWN: no rail, no fault.
    proposed, warnings, faults, facts = proposal(
        capsys, "dgx_h100_basepod", {"bond0": ["10.77.0.110"], "ibp41s0f0": ["10.30.41.110"]}, "10.77.0.110")
    assert proposed == {"NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": DGX_COMPUTE_HCA, "NCCL_SOCKET_IFNAME": "=bond0"}
    assert warnings == [] and faults == []
    assert sum(hca["virtual_function"] for hca in facts["hcas"]) == 64
    assert any(not hca["ports"][0]["active"] for hca in facts["hcas"] if hca["virtual_function"])
    assert facts["reasons"]["NCCL_IB_HCA"].endswith("mlx5_2, mlx5_8 left out: their netdev holds the cluster "
                                                    "interface bond0")


@pytest.mark.parametrize("version, gid_index", [("2.21.5", None), ("2.18.3", "3")])
def test_a_plain_two_nic_roce_server_is_left_to_the_admin_with_a_warning(capsys, version, gid_index):
    # No PCIe switch, one NUMA node (-1): nothing tells the lossless back-end from the front-end
    # (NCCL would use both, NCCL documentation, NCCL_IB_HCA: "all devices are used by default").
    addresses = {"eno1": ["10.77.0.120"], "ens1f0np0": ["10.10.0.111"], "ens2f0np0": ["10.11.0.111"]}
    proposed, warnings, faults, _facts = proposal(capsys, "plain_roce_2nic", addresses, "10.77.0.120", version)
    expected = {"NCCL_IB_DISABLE": "0", "NCCL_SOCKET_IFNAME": "=eno1"}
    if gid_index:
        expected["NCCL_IB_GID_INDEX"] = gid_index
    assert proposed == expected
    assert warnings == [
        "NCCL_IB_HCA left unset, and NCCL then uses every active port (mlx5_0:1, mlx5_1:1), a front-end or storage "
        "port included: the PCI topology and NUMA nodes do not tell which are the compute fabric; name them in "
        "nccl_env_overrides (NCCL_IB_HCA: =hca:port,...)."]
    assert faults == []


def test_a_plain_server_whose_roce_card_holds_the_cluster_address_gets_the_other(capsys):
    # The admin's rule: the port that carries the node's address is not for NCCL's RDMA.
    addresses = {"ens1f0np0": ["10.77.0.120"], "ens2f0np0": ["10.11.0.111"], "eno1": ["192.168.0.5"]}
    proposed, warnings, _faults, facts = proposal(capsys, "plain_roce_2nic", addresses, "10.77.0.120")
    assert "NCCL_IB_HCA" not in proposed and proposed["NCCL_SOCKET_IFNAME"] == "=ens1f0np0"
    assert facts["reasons"]["NCCL_IB_HCA"].endswith("mlx5_0 left out: its netdev holds the cluster interface ens1f0np0")
    assert warnings == []  # one port is left: nothing to choose


def test_a_cascade_servers_storage_hca_in_the_gpu_tree_is_no_rail(capsys):
    # Each GPU's own HCA is in its level-2 switch (PIX); the storage HCA mlx5_4 on the level-1
    # switch is farther (PXB) from every GPU: what NCCL's topology ranks, what an admin lists.
    proposed, warnings, faults, _facts = proposal(
        capsys, "cascade_8gpu", {"eno1": ["10.77.0.130"], "ibp58s0": ["10.30.0.130"]}, "10.77.0.130")
    assert proposed == {"NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1",
                        "NCCL_SOCKET_IFNAME": "=eno1"}
    assert warnings == [] and faults == []


@pytest.mark.parametrize("version, gid_index", [("2.21.5", None), ("2.18.3", "3")])
def test_hgx_with_bluefield3_supernics_gets_one_per_gpu_not_the_dpu(capsys, version, gid_index):
    # Spectrum-X reference architecture: one SuperNIC per GPU (mlx5_0-7), the BlueField-3 DPU
    # (mlx5_8, mlx5_9) north-south, its first port the node's address.
    proposed, warnings, faults, _facts = proposal(capsys, "hgx_bf3_supernic", {"enp170s0f0np0": ["10.77.0.111"]},
                                                  "10.77.0.111", version)
    expected = {"NCCL_IB_DISABLE": "0", "NCCL_SOCKET_IFNAME": "=enp170s0f0np0",
                "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_7:1"}
    if gid_index:
        expected["NCCL_IB_GID_INDEX"] = gid_index
    assert proposed == expected
    assert warnings == [] and faults == []


def test_a_gb200_tray_pairs_gpus_and_hcas_by_numa_node(capsys):
    # GB200 NVL72 compute tray: GPUs on NVLink-C2C (no PCIe switch with a NIC); the four
    # ConnectX-7 on the Graces' root ports, two per NUMA node; the BlueField-3 is north-south.
    proposed, warnings, faults, facts = proposal(capsys, "gb200_tray", {"enP6p3s0f0np0": ["10.77.0.120"]},
                                                 "10.77.0.120")
    assert proposed == {"NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1",
                        "NCCL_SOCKET_IFNAME": "=enP6p3s0f0np0"}
    assert warnings == [] and faults == []
    assert facts["reasons"]["NCCL_IB_HCA"].startswith("the InfiniBand ports of the HCAs on each GPU's NUMA node")


def test_azure_ndv5_keeps_the_images_topology_file_and_takes_the_eight_ib_hcas(capsys):
    # Azure HPC image (azhpc-images customizations/ndv5.sh) /etc/nccl.conf: NCCL_TOPO_FILE pairs
    # GPUs and HCAs across the VMBus, where sysfs shows no PCIe switch; mlx5_an0 is eth0's
    # accelerated-networking VF, the node's address.
    proposed, warnings, faults, facts = proposal(
        capsys, "azure_ndv5", {"eth0": ["10.0.0.4"]}, "10.0.0.4",
        conf_path=str(SYSFS / "azure_ndv5" / "etc" / "nccl.conf"), role_keys=["NCCL_DEBUG"])
    assert proposed == {"NCCL_IB_DISABLE": "0", "NCCL_SOCKET_IFNAME": "=eth0",
                        "NCCL_IB_HCA": "=" + ",".join(f"mlx5_ib{n}:1" for n in range(8))}
    assert facts["kept"] == {"NCCL_IB_PCI_RELAXED_ORDERING": "1", "NCCL_TOPO_FILE": "/opt/microsoft/ndv5/topo.xml",
                             "NCCL_IGNORE_CPU_AFFINITY": "1"}
    assert warnings == [f"Kept from {SYSFS / 'azure_ndv5' / 'etc' / 'nccl.conf'}, which this role does not set: "
                        "NCCL_IB_PCI_RELAXED_ORDERING, NCCL_IGNORE_CPU_AFFINITY, NCCL_TOPO_FILE (set them in "
                        "nccl_env_overrides to manage them for the group)."]
    assert faults == []
    assert all(hca["pci_path"] == [] for hca in facts["hcas"])  # VMBus: no PCI tree to read


def test_aws_p5_proposes_no_efa_as_an_ib_hca_and_says_why(capsys):
    # AWS, "Get started with EFA and NCCL": EFA goes through aws-ofi-nccl; its ports read link
    # layer Unknown, which NCCL's IB transport skips.
    proposed, warnings, faults, _facts = proposal(capsys, "aws_p5", {"ens32": ["172.31.0.10"]}, "172.31.0.10")
    assert proposed == {"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "=ens32"}
    assert warnings == [
        "rdmap72s0:1, rdmap73s0:1, rdmap74s0:1, rdmap75s0:1 and 28 more: active, of link layer Unknown, which "
        "NCCL's IB transport skips (EFA and other devices without InfiniBand or Ethernet verbs go through an NCCL "
        "net plugin, such as aws-ofi-nccl): no NCCL_IB_HCA for them; check that the training env has the plugin."]
    assert faults == []


@pytest.mark.parametrize("version, gid_index", [("2.21.5", None), ("2.18.3", "7")])
def test_roce_edge_takes_the_ports_own_gid_and_names_init_and_armed_rails(capsys, version, gid_index):
    # The GID table lists link-local (0, 1), IPv6 (2, 3), the VLAN ens1f0np0.100's IPv4 (4, 5),
    # then the port's own IPv4 (6, 7): index 7 is the port's RoCE v2 GID, not 5 (the VLAN's).
    proposed, warnings, faults, _facts = proposal(capsys, "roce_edge", {"eno1": ["10.77.0.140"]}, "10.77.0.140",
                                                  version)
    expected = {"NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1", "NCCL_SOCKET_IFNAME": "=eno1"}
    if gid_index:
        expected["NCCL_IB_GID_INDEX"] = gid_index
    assert proposed == expected
    assert warnings == []
    assert faults == [
        "mlx5_2:1 is a compute rail (its HCA shares a PCIe switch with a GPU) but its port is INIT, not ACTIVE",
        "mlx5_3:1 is a compute rail (its HCA shares a PCIe switch with a GPU) but its port is ARMED, not ACTIVE"]


def test_a_slow_socket_interface_carrying_all_traffic_is_warned_about():
    gpu = {"pci_address": "0000:18:00.0", "pci_path": ["0000:15:01.0", "0000:18:00.0"], "numa_node": 0}
    slow = {"name": "eno1", "operstate": "up", "type": 1, "ipv4": ["10.77.0.5"], "speed": 1000, "lower": []}
    _proposed, warnings, _reasons, _faults = nccl.propose_site_settings([], [gpu], [slow], [], "RoCE v2", "10.77.0.5")
    assert warnings == [
        "NCCL_IB_DISABLE=1 (no usable RDMA port): all of NCCL's traffic goes over eno1, a 1 Gb/s interface, below "
        "25 Gb/s: a multi-node training will crawl; give the nodes an RDMA fabric or a faster interface "
        "(nccl_env_overrides: NCCL_SOCKET_IFNAME)."]
    fast = dict(slow, speed=100000)
    assert nccl.propose_site_settings([], [gpu], [fast], [], "RoCE v2", "10.77.0.5")[1] == []


def test_an_existing_nccl_conf_keeps_only_what_the_role_does_not_set_and_what_it_kept_before():
    foreign = "NCCL_TOPO_FILE=/opt/x.xml\nNCCL_IB_HCA=mlx5_0\n# NCCL_DEBUG=INFO\nNCCL_DEBUG=WARN\n"
    assert nccl.kept_conf_keys(foreign, ["NCCL_DEBUG"]) == {"NCCL_TOPO_FILE": "/opt/x.xml"}
    ours = ("# NCCL settings of n1 (node group g), read by NCCL at init.\nNCCL_IB_HCA==mlx5_0:1\nNCCL_DEBUG=INFO\n"
            f"{nccl.KEPT_MARKER}\nNCCL_TOPO_FILE=/opt/x.xml\n")
    assert nccl.kept_conf_keys("# Ansible managed\n" + ours, []) == {"NCCL_TOPO_FILE": "/opt/x.xml"}
    assert nccl.kept_conf_keys(None, []) == {}


@pytest.mark.parametrize("value, matched", [("mlx5_1", "mlx5_1, mlx5_10, mlx5_11"), ("=mlx5_1", None),
                                            ("mlx5_1:1,mlx5_3", "mlx5_1, mlx5_10, mlx5_11")])
def test_an_override_prefix_matching_several_hcas_is_warned_about(value, matched):
    hcas = nccl.read_hcas(str(SYSFS / "dgx_h100"))
    warnings = nccl.override_warnings({"NCCL_IB_HCA": value}, hcas, [])
    assert warnings == ([f"NCCL_IB_HCA={value}: without '=' NCCL takes mlx5_1 as a prefix, which matches {matched} "
                         "here; write =mlx5_1... for exact names."] if matched else [])


def test_a_single_roce_nic_holding_the_cluster_address_stays_the_rdma_port(capsys):
    # One NIC for everything (roce_v1_v2: mlx5_0's netdev ens1f0 holds the node's address): no
    # other port to prefer, so it is not left out, and its GID index is forced for an old NCCL.
    facts = detect(capsys, "roce_v1_v2", {"ens1f0": ["10.10.0.11"]}, "10.10.0.11", nccl_version="2.18.3")
    assert facts["proposed"] == {"NCCL_IB_DISABLE": "0", "NCCL_IB_GID_INDEX": "3", "NCCL_SOCKET_IFNAME": "=ens1f0"}
    assert "left out" not in facts["reasons"]["NCCL_IB_HCA"]


@pytest.mark.parametrize("speed, told", [(1, "0.001"), (100, "0.1"), (1000, "1"), (2500, "2.5"), (24999, "24.999")])
def test_a_slow_interfaces_speed_is_told_in_gb_s_as_the_link_runs(speed, told):
    gpu = {"pci_address": "0000:18:00.0", "pci_path": ["0000:15:01.0", "0000:18:00.0"], "numa_node": 0}
    slow = {"name": "eno1", "operstate": "up", "type": 1, "ipv4": ["10.77.0.5"], "speed": speed, "lower": []}
    warnings = nccl.propose_site_settings([], [gpu], [slow], [], "RoCE v2", "10.77.0.5")[1]
    assert warnings == [
        f"NCCL_IB_DISABLE=1 (no usable RDMA port): all of NCCL's traffic goes over eno1, a {told} Gb/s interface, "
        "below 25 Gb/s: a multi-node training will crawl; give the nodes an RDMA fabric or a faster interface "
        "(nccl_env_overrides: NCCL_SOCKET_IFNAME)."]


@pytest.mark.parametrize("speed", [25000, -1])
def test_a_25_gb_s_interface_or_one_of_unknown_speed_is_not_warned_about(speed):
    # -1: the kernel's SPEED_UNKNOWN, which a driver such as virtio_net reports when it does not know.
    gpu = {"pci_address": "0000:18:00.0", "pci_path": ["0000:15:01.0", "0000:18:00.0"], "numa_node": 0}
    iface = {"name": "eno1", "operstate": "up", "type": 1, "ipv4": ["10.77.0.5"], "speed": speed, "lower": []}
    assert nccl.propose_site_settings([], [gpu], [iface], [], "RoCE v2", "10.77.0.5")[1] == []


def efa_like(count):
    """`count` active EFA-like devices of one port each, link layer Unknown (NCCL's IB transport skips it)."""
    return [{"name": f"rdmap{n}s0", "pci_path": [], "netdevs": [],
             "ports": [{"port": 1, "state": "ACTIVE", "active": True, "link_layer": "Unknown", "gids": []}]}
            for n in range(count)]


@pytest.mark.parametrize("count, listed", [
    (4, "rdmap0s0:1, rdmap1s0:1, rdmap2s0:1, rdmap3s0:1"),
    (5, "rdmap0s0:1, rdmap1s0:1, rdmap2s0:1, rdmap3s0:1 and 1 more"),
])
def test_skipped_ports_are_named_up_to_four_then_counted(count, listed):
    warnings = nccl.propose_site_settings(efa_like(count), [], [], [], "RoCE v2")[1]
    assert warnings[0].startswith(f"{listed}: active, of link layer Unknown, which NCCL's IB transport skips")
