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
