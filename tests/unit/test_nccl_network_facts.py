"""Unit tests for library/nccl_network_facts.py against recorded sysfs trees."""

import errno
import json
import os
import socket
import subprocess
from pathlib import Path

import ansible.module_utils._internal
import pytest
from ansible.module_utils.testing import patch_module_args

SYSFS_FIXTURES = Path(__file__).resolve().parent / "fixtures" / "sysfs"

from ansible_collections.hpc.slurm_train.plugins.modules import nccl_network_facts as nccl  # noqa: E402

DEFAULT_EXCLUDE = ["lo", "docker*", "veth*", "virbr*", "br-*"]

ENS1F0_LINK_LOCAL = "fe80:0000:0000:0000:0a0b:0cff:fe0d:0e0f"
ENS1F0_IPV4_MAPPED = "0000:0000:0000:0000:0000:ffff:0a0a:000b"  # 10.10.0.11
ENS1F1_LINK_LOCAL = "fe80:0000:0000:0000:0a0b:0cff:fe0d:0e10"
ENS1F1_IPV4_MAPPED = "0000:0000:0000:0000:0000:ffff:0a0a:010b"  # 10.10.1.11

# Addresses the role would pass from Ansible facts, per scenario.
IPV4_ADDRESSES = {
    "ib_single": {"ib0": ["10.1.0.11"], "eno1": ["192.168.1.11"], "lo": ["127.0.0.1"]},
    "roce_v1_v2": {
        "ens1f0": ["10.10.0.11"],
        "docker0": ["172.17.0.1"],
        "lo": ["127.0.0.1"],
    },
    "two_hcas_one_down": {"ens1f0": ["10.10.0.11"], "lo": ["127.0.0.1"]},
    "two_hcas": {
        "ens1f0": ["10.10.0.11"],
        "ens1f1": ["10.10.1.11"],
        "lo": ["127.0.0.1"],
    },
    "no_hca": {"eth0": ["10.0.0.5"], "lo": ["127.0.0.1"]},
}


def sysfs(scenario):
    return str(SYSFS_FIXTURES / scenario)


def roce_gids(ndev, link_local, ipv4_mapped=None):
    gids = [
        {"index": 0, "gid": link_local, "type": "IB/RoCE v1", "ndev": ndev},
        {"index": 1, "gid": link_local, "type": "RoCE v2", "ndev": ndev},
    ]
    if ipv4_mapped:
        gids += [
            {"index": 2, "gid": ipv4_mapped, "type": "IB/RoCE v1", "ndev": ndev},
            {"index": 3, "gid": ipv4_mapped, "type": "RoCE v2", "ndev": ndev},
        ]
    return gids


def active_roce_port(hca_name, ndev, link_local, ipv4_mapped=None):
    """(hca name, port 1) as active_ports() returns it, for cases no recorded tree covers."""
    return hca_name, {
        "port": 1,
        "state": "ACTIVE",
        "active": True,
        "link_layer": "Ethernet",
        "rate": "100 Gb/sec (4X EDR)",
        "gids": roce_gids(ndev, link_local, ipv4_mapped),
    }


@pytest.fixture(autouse=True)
def module_side(monkeypatch):
    """Run as a module runs on a node: once another test in this process has loaded Ansible's
    controller side (templating, say), module warnings would go to its display instead."""
    monkeypatch.setattr(ansible.module_utils._internal, "is_controller", False)


def run_module(capsys, **module_args):
    """Run main() in-process and return the JSON result it printed."""
    with patch_module_args(module_args), pytest.raises(SystemExit):
        nccl.main()
    return json.loads(capsys.readouterr().out)


# --- reading sysfs -----------------------------------------------------------------


def test_read_sysfs_value_strips_trailing_newline(tmp_path):
    (tmp_path / "state").write_text("4: ACTIVE\n")
    assert nccl.read_sysfs_value(str(tmp_path / "state")) == "4: ACTIVE"


def test_read_sysfs_value_missing_and_empty_are_none(tmp_path):
    (tmp_path / "empty").write_text("\n")
    assert nccl.read_sysfs_value(str(tmp_path / "missing")) is None
    assert nccl.read_sysfs_value(str(tmp_path / "empty")) is None


def test_read_sysfs_value_einval_is_none(tmp_path, monkeypatch):
    # The kernel answers EINVAL when reading gid_attrs/types/<i> of an unused GID.
    type_file = tmp_path / "4"
    type_file.write_text("RoCE v2\n")

    def open_failing_with_einval(*args, **kwargs):
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(nccl, "open", open_failing_with_einval, raising=False)
    assert nccl.read_sysfs_value(str(type_file)) is None


@pytest.mark.parametrize(
    ("raw", "expected"), [("4: ACTIVE", "ACTIVE"), ("1: DOWN", "DOWN"), (None, None)]
)
def test_parse_port_state(raw, expected):
    assert nccl.parse_port_state(raw) == expected


def test_read_hcas_ib_single():
    assert nccl.read_hcas(sysfs("ib_single")) == [
        {
            "name": "mlx5_0",
            "node_guid": "0c42:a103:008b:6f5c",
            "fw_ver": "20.39.1002",
            "board_id": "MT_0000000223",
            "pci_path": [],
            "numa_node": None,
            "virtual_function": False,
            "netdevs": [],
            "ports": [
                {
                    "port": 1,
                    "state": "ACTIVE",
                    "active": True,
                    "link_layer": "InfiniBand",
                    "rate": "100 Gb/sec (4X EDR)",
                    "gids": [
                        {
                            "index": 0,
                            "gid": "fe80:0000:0000:0000:0c42:a103:008b:6f5c",
                            "type": "IB/RoCE v1",
                            "ndev": None,
                        }
                    ],
                }
            ],
        }
    ]


def test_read_hcas_roce_v1_v2_keeps_only_populated_gids():
    (hca,) = nccl.read_hcas(sysfs("roce_v1_v2"))
    (port,) = hca["ports"]
    assert (port["link_layer"], port["state"], port["active"]) == (
        "Ethernet",
        "ACTIVE",
        True,
    )
    assert port["gids"] == roce_gids("ens1f0", ENS1F0_LINK_LOCAL, ENS1F0_IPV4_MAPPED)


def test_read_hcas_two_hcas_one_down():
    hcas = nccl.read_hcas(sysfs("two_hcas_one_down"))
    assert [
        (hca["name"], port["port"], port["state"], port["active"], port["rate"])
        for hca in hcas
        for port in hca["ports"]
    ] == [
        ("mlx5_0", 1, "ACTIVE", True, "100 Gb/sec (4X EDR)"),
        ("mlx5_1", 1, "DOWN", False, "40 Gb/sec (4X QDR)"),
    ]
    assert hcas[1]["ports"][0]["gids"] == roce_gids("ens1f1", ENS1F1_LINK_LOCAL)


def test_read_hcas_two_hcas_both_active_with_ipv4_mapped_gids():
    hcas = nccl.read_hcas(sysfs("two_hcas"))
    assert [
        (hca["name"], [port["active"] for port in hca["ports"]]) for hca in hcas
    ] == [
        ("mlx5_0", [True]),
        ("mlx5_1", [True]),
    ]
    assert hcas[1]["ports"][0]["gids"] == roce_gids(
        "ens1f1", ENS1F1_LINK_LOCAL, ENS1F1_IPV4_MAPPED
    )


def test_read_hcas_without_class_infiniband_is_empty():
    assert not os.path.exists(os.path.join(sysfs("no_hca"), "class", "infiniband"))
    assert nccl.read_hcas(sysfs("no_hca")) == []


def test_read_interfaces_ib_single():
    assert nccl.read_interfaces(sysfs("ib_single"), {"ib0": ["10.1.0.11"]}) == [
        {
            "name": "eno1",
            "operstate": "up",
            "type": 1,
            "virtual": False,
            "mtu": 1500,
            "address": "3c:ec:ef:12:34:56",
            "speed": None,
            "lower": [],
            "ipv4": [],
        },
        {
            "name": "ib0",
            "operstate": "up",
            "type": 32,
            "virtual": False,
            "mtu": 2044,
            "address": "00:00:10:29:fe:80:00:00:00:00:00:00:0c:42:a1:03:00:8b:6f:5c",
            "speed": None,
            "lower": [],
            "ipv4": ["10.1.0.11"],
        },
        {
            "name": "lo",
            "operstate": "unknown",
            "type": 772,
            "virtual": True,
            "mtu": 65536,
            "address": "00:00:00:00:00:00",
            "speed": None,
            "lower": [],
            "ipv4": [],
        },
    ]


def test_read_interfaces_tells_virtual_from_physical_by_symlink_target():
    interfaces = nccl.read_interfaces(sysfs("roce_v1_v2"), {})
    assert {iface["name"]: iface["virtual"] for iface in interfaces} == {
        "docker0": True,
        "ens1f0": False,
        "lo": True,
    }


def test_interface_without_symlink_is_neither_virtual_nor_physical(tmp_path):
    (tmp_path / "class" / "net" / "eth9").mkdir(parents=True)
    assert nccl.is_virtual_interface(str(tmp_path), "eth9") is None


# --- choosing -----------------------------------------------------------------------


def test_choose_gid_index_prefers_ipv4_mapped_gid_of_the_preferred_type():
    gids = roce_gids("ens1f0", ENS1F0_LINK_LOCAL, ENS1F0_IPV4_MAPPED)
    assert nccl.choose_gid_index(gids, "RoCE v2") == 3
    assert nccl.choose_gid_index(gids, "IB/RoCE v1") == 2


def test_choose_gid_index_falls_back_to_link_local_without_ipv4_mapped_gid():
    assert nccl.choose_gid_index(roce_gids("ens1f1", ENS1F1_LINK_LOCAL), "RoCE v2") == 1


def test_choose_gid_index_without_gid_of_preferred_type_is_none():
    gids = [{"index": 0, "gid": ENS1F0_LINK_LOCAL, "type": None, "ndev": "ens1f0"}]
    assert nccl.choose_gid_index(gids, "RoCE v2") is None


def test_propose_gid_index_is_not_needed_for_infiniband():
    ports = nccl.active_ports(nccl.read_hcas(sysfs("ib_single")))
    assert nccl.propose_gid_index(ports, "RoCE v2") == (None, [])


def test_propose_gid_index_reports_ports_that_disagree():
    ports = [
        active_roce_port("mlx5_0", "ens1f0", ENS1F0_LINK_LOCAL, ENS1F0_IPV4_MAPPED),
        active_roce_port("mlx5_1", "ens1f1", ENS1F1_LINK_LOCAL),
        active_roce_port("mlx5_2", "ens2f0", ENS1F0_LINK_LOCAL, ENS1F0_IPV4_MAPPED),
    ]
    assert nccl.propose_gid_index(ports, "RoCE v2") == (
        3,
        [
            "Active RoCE ports disagree on the RoCE v2 GID index (mlx5_0:1=3, mlx5_1:1=1, mlx5_2:1=3); proposing 3."
        ],
    )


def test_propose_gid_index_breaks_a_tie_with_the_lowest_index():
    ports = [
        active_roce_port("mlx5_0", "ens1f0", ENS1F0_LINK_LOCAL, ENS1F0_IPV4_MAPPED),
        active_roce_port("mlx5_1", "ens1f1", ENS1F1_LINK_LOCAL),
    ]
    assert nccl.propose_gid_index(ports, "RoCE v2") == (
        1,
        [
            "Active RoCE ports disagree on the RoCE v2 GID index (mlx5_0:1=3, mlx5_1:1=1); proposing 1."
        ],
    )


def test_propose_gid_index_warns_about_a_port_without_the_preferred_type():
    name, port = active_roce_port("mlx5_0", "ens1f0", ENS1F0_LINK_LOCAL)
    port["gids"] = [gid for gid in port["gids"] if gid["type"] != "RoCE v2"]
    assert nccl.propose_gid_index([(name, port)], "RoCE v2") == (
        None,
        ["mlx5_0:1 has no RoCE v2 GID; NCCL_IB_GID_INDEX does not fit it."],
    )


@pytest.mark.parametrize(("exclude", "cluster", "expected"), [
    # The cluster address on an excluded interface (docker* by default) is not taken.
    (DEFAULT_EXCLUDE, {"cluster_address": "172.17.0.1"}, None),
    (["ens*"], {"cluster_address": "172.17.0.1"}, "=docker0"),
    (["ens*"], {"cluster_address": "10.10.0.11"}, None),
    # A network holding both interfaces' addresses: the one the globs leave.
    (DEFAULT_EXCLUDE, {"cluster_cidr": "0.0.0.0/0"}, "=ens1f0"),
    (["ens*"], {"cluster_cidr": "0.0.0.0/0"}, "=docker0"),
])
def test_the_socket_interface_is_never_an_excluded_one(capsys, exclude, cluster, expected):
    facts = run_module(capsys, sysfs_root=sysfs("roce_v1_v2"), ipv4_addresses=IPV4_ADDRESSES["roce_v1_v2"],
                       exclude_interfaces=exclude, **cluster)["ansible_facts"]["nccl_network"]
    assert facts["proposed"].get("NCCL_SOCKET_IFNAME") == expected


def test_loopback_is_never_the_socket_interface_even_when_not_excluded(capsys):
    # lo as the kernel shows it (operstate unknown), and one whose driver says up.
    facts = run_module(capsys, sysfs_root=sysfs("no_hca"), ipv4_addresses=IPV4_ADDRESSES["no_hca"],
                       exclude_interfaces=[], cluster_address="127.0.0.1")["ansible_facts"]["nccl_network"]
    assert "NCCL_SOCKET_IFNAME" not in facts["proposed"]
    assert facts["warnings"] == ["NCCL_SOCKET_IFNAME left unset: no interface that is up holds the address 127.0.0.1."]
    loopback_up = [
        {
            "name": "lo",
            "operstate": "up",
            "type": 772,
            "virtual": True,
            "mtu": 65536,
            "address": "00:00:00:00:00:00",
            "ipv4": ["127.0.0.1"],
        }
    ]
    for cluster in ({"cluster_address": "127.0.0.1"}, {"cluster_cidr": "127.0.0.0/8"}):
        proposed = nccl.propose_site_settings([], [], loopback_up, [], "RoCE v2", **cluster)[0]
        assert "NCCL_SOCKET_IFNAME" not in proposed, cluster


@pytest.mark.parametrize(("cluster", "wanted"), [({"cluster_address": "10.10.1.11"}, "the address 10.10.1.11"),
                                             ({"cluster_cidr": "10.10.0.0/16"}, "an address in 10.10.0.0/16")])
def test_a_down_interface_holding_the_address_and_an_up_one_without_any_are_not_taken(capsys, cluster, wanted):
    # two_hcas_one_down: ens1f1 holds the address but is down; ens1f0 is up with no address.
    facts = run_module(capsys, sysfs_root=sysfs("two_hcas_one_down"), ipv4_addresses={"ens1f1": ["10.10.1.11"]},
                       nccl_version="2.21.5", **cluster)["ansible_facts"]["nccl_network"]
    assert [(iface["name"], iface["operstate"]) for iface in facts["interfaces"]][:2] == [("ens1f0", "up"),
                                                                                       ("ens1f1", "down")]
    assert "NCCL_SOCKET_IFNAME" not in facts["proposed"]
    assert facts["warnings"] == [f"NCCL_SOCKET_IFNAME left unset: no interface that is up holds {wanted}."]


@pytest.mark.parametrize(
    ("scenario", "address", "expected"),
    [
        ("ib_single", "10.1.0.11", {"NCCL_IB_DISABLE": "0", "NCCL_SOCKET_IFNAME": "=ib0"}),
        ("roce_v1_v2", "10.10.0.11",
         {"NCCL_IB_DISABLE": "0", "NCCL_IB_GID_INDEX": "3", "NCCL_SOCKET_IFNAME": "=ens1f0"}),
        ("two_hcas_one_down", "10.10.0.11",
         {"NCCL_IB_DISABLE": "0", "NCCL_IB_GID_INDEX": "3", "NCCL_SOCKET_IFNAME": "=ens1f0"}),
        # mlx5_0's netdev holds the cluster address: the GID index is mlx5_1's alone.
        ("two_hcas", "10.10.0.11",
         {"NCCL_IB_DISABLE": "0", "NCCL_IB_GID_INDEX": "3", "NCCL_SOCKET_IFNAME": "=ens1f0"}),
        ("no_hca", "10.0.0.5", {"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "=eth0"}),
    ],
)
def test_module_proposal_per_scenario_without_gpus(capsys, scenario, address, expected):
    # No GPU: NCCL_IB_HCA is left to NCCL; the one interface holding the cluster address carries the sockets.
    facts = run_module(capsys, sysfs_root=sysfs(scenario), ipv4_addresses=IPV4_ADDRESSES[scenario],
                       cluster_address=address, nccl_version="2.18.3")["ansible_facts"]["nccl_network"]
    assert (facts["proposed"], facts["warnings"]) == (expected, [])
    assert facts["reasons"]["NCCL_IB_HCA"].startswith("no NVIDIA GPU under bus/pci/devices")


def test_module_without_a_qualifying_interface_omits_socket_ifname(capsys):
    # Only lo has an address: a cluster network taking any address still finds no interface.
    facts = run_module(capsys, sysfs_root=sysfs("no_hca"), ipv4_addresses={"lo": ["127.0.0.1"]},
                       cluster_cidr="0.0.0.0/0")["ansible_facts"]["nccl_network"]
    assert (facts["proposed"], facts["warnings"]) == (
        {"NCCL_IB_DISABLE": "1"},
        ["NCCL_SOCKET_IFNAME left unset: no interface that is up holds an address in 0.0.0.0/0."],
    )


# --- the module end to end ----------------------------------------------------------


def test_module_two_hcas_without_gpus_leaves_the_hca_list_to_nccl(capsys):
    # No GPU under bus/pci/devices: the compute fabric cannot be told from storage ports.
    result = run_module(capsys, sysfs_root=sysfs("two_hcas"), ipv4_addresses=IPV4_ADDRESSES["two_hcas"],
                        cluster_address="10.10.1.11")
    facts = result["ansible_facts"]["nccl_network"]
    assert result["changed"] is False
    assert facts["proposed"] == {"NCCL_IB_DISABLE": "0", "NCCL_IB_GID_INDEX": "3",
                                 "NCCL_SOCKET_IFNAME": "=ens1f1"}
    assert facts["reasons"]["NCCL_IB_HCA"].startswith("no NVIDIA GPU under bus/pci/devices")
    assert facts["gpus"] == [] and facts["faults"] == []
    assert [hca["name"] for hca in facts["hcas"]] == ["mlx5_0", "mlx5_1"]
    assert [iface["name"] for iface in facts["interfaces"]] == ["ens1f0", "ens1f1", "lo"]


def test_module_no_hca_in_check_mode(capsys):
    result = run_module(capsys, sysfs_root=sysfs("no_hca"), ipv4_addresses=IPV4_ADDRESSES["no_hca"],
                        cluster_address="10.0.0.5", _ansible_check_mode=True)
    assert result["changed"] is False
    assert result["ansible_facts"]["nccl_network"]["hcas"] == []
    assert result["ansible_facts"]["nccl_network"]["proposed"] == {
        "NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "=eth0"}


def test_module_without_a_cluster_address_leaves_the_socket_interface_unset_and_says_so(capsys):
    result = run_module(capsys, sysfs_root=sysfs("no_hca"), ipv4_addresses=IPV4_ADDRESSES["no_hca"])
    facts = result["ansible_facts"]["nccl_network"]
    assert "NCCL_SOCKET_IFNAME" not in facts["proposed"]
    assert facts["warnings"] == ["NCCL_SOCKET_IFNAME left unset: neither cluster_address nor cluster_cidr given."]
    # ansible-core 2.19 returns module warnings as structured summaries.
    assert facts["warnings"][0] in [warning["event"]["msg"] for warning in result["warnings"]]


def test_module_prefer_gid_type_roce_v1(capsys):
    result = run_module(capsys, sysfs_root=sysfs("roce_v1_v2"), prefer_gid_type="IB/RoCE v1",
                        ipv4_addresses=IPV4_ADDRESSES["roce_v1_v2"], nccl_version="2.18.3")
    assert result["ansible_facts"]["nccl_network"]["proposed"]["NCCL_IB_GID_INDEX"] == "2"


def test_module_fails_on_missing_sysfs_root(capsys, tmp_path):
    missing = str(tmp_path / "no-such-sys")
    result = run_module(capsys, sysfs_root=missing)
    assert result["failed"] is True
    assert result["msg"] == f"sysfs_root {missing} does not exist or is not a directory"


def test_module_rejects_an_address_string_instead_of_a_list(capsys):
    result = run_module(capsys, sysfs_root=sysfs("no_hca"), ipv4_addresses={"eth0": "10.0.0.5"})
    assert result["failed"] is True
    assert result["msg"] == ("ipv4_addresses['eth0']='10.0.0.5' is not a list of IPv4 addresses; "
                             'give a list, as {"eth0": ["10.0.0.5"]}')


@pytest.mark.parametrize("args, message", [
    ({"cluster_cidr": "10.77.0.0/33"}, "cluster_cidr='10.77.0.0/33' is no IPv4 network; give it empty or as 10.77.0.0/24"),
    ({"nccl_version": "latest"}, "nccl_version='latest' is no NCCL version; give it empty or as 2.21.5"),
    ({"ipv4_addresses": {"eth0": ["10.0.0.300"]}},
     "ipv4_addresses['eth0'] holds '10.0.0.300', which is no IPv4 address; give addresses as 10.77.0.1"),
    ({"cluster_address": "no-such-host.invalid"}, "cluster_address 'no-such-host.invalid' is neither an IPv4 address"),
])
def test_module_refuses_bad_input_naming_it(capsys, args, message):
    result = run_module(capsys, sysfs_root=sysfs("no_hca"), **args)
    assert result["failed"] is True
    assert result["msg"].startswith(message)


# The rules the module, provision.yml's validate tasks and the preflight share (input_problems).
@pytest.mark.parametrize("ipv4_addresses, cidr, version", [
    (None, "", ""),
    ({}, None, None),
    ({"eth0": ["10.77.0.1"], "ib0": ["10.10.0.1", "10.10.1.1"], "eth1": []}, "10.77.0.0/24", "2.21.5"),
    ({"eth0": ["10.77.0.1"]}, "10.77.0.5/16", "2.18"),
    ({}, "", 2.21),
])
def test_input_problems_takes_good_values(ipv4_addresses, cidr, version):
    assert nccl.input_problems(ipv4_addresses, cidr, version) == []


@pytest.mark.parametrize("ipv4_addresses, cidr, version, problem", [
    # A bare string, which would be read character by character: the fix keeps the address given.
    ({"eth0": "10.0.0.1"}, "", "",
     "ipv4_addresses['eth0']='10.0.0.1' is not a list of IPv4 addresses; give a list, as {\"eth0\": [\"10.0.0.1\"]}"),
    ({"eth0": "eth0"}, "", "",
     "ipv4_addresses['eth0']='eth0' is not a list of IPv4 addresses; give a list, as {\"eth0\": [\"10.77.0.1\"]}"),
    ({"eth0": ["10.0.0.1", "fe80::1"]}, "", "",
     "ipv4_addresses['eth0'] holds 'fe80::1', which is no IPv4 address; give addresses as 10.77.0.1"),
    ({"eth0": [167772161]}, "", "",
     "ipv4_addresses['eth0'] holds 167772161, which is no IPv4 address; give addresses as 10.77.0.1"),
    (["10.0.0.1"], "", "",
     "ipv4_addresses=['10.0.0.1'] must map each interface to a list of IPv4 addresses, as {\"eth0\": [\"10.77.0.1\"]}"),
    # ipaddress alone would take these: a network needs its prefix length, the address its four parts.
    ({}, "10.77.0.0", "", "cluster_cidr='10.77.0.0' is no IPv4 network; give it empty or as 10.77.0.0/24"),
    ({}, "10.77.0.0/255.255.255.0", "",
     "cluster_cidr='10.77.0.0/255.255.255.0' is no IPv4 network; give it empty or as 10.77.0.0/24"),
    ({}, "10.77.0.0/33", "", "cluster_cidr='10.77.0.0/33' is no IPv4 network; give it empty or as 10.77.0.0/24"),
    ({}, "10.77.0.300/24", "", "cluster_cidr='10.77.0.300/24' is no IPv4 network; give it empty or as 10.77.0.0/24"),
    ({}, "10.77.0.0/24 ", "", "cluster_cidr='10.77.0.0/24 ' is no IPv4 network; give it empty or as 10.77.0.0/24"),
    ({}, "", "2", "nccl_version='2' is no NCCL version; give it empty or as 2.21.5"),
    ({}, "", "2.21.5-1", "nccl_version='2.21.5-1' is no NCCL version; give it empty or as 2.21.5"),
    ({}, "", "v2.21", "nccl_version='v2.21' is no NCCL version; give it empty or as 2.21.5"),
    ({}, "", True, "nccl_version=True is no NCCL version; give it empty or as 2.21.5"),
])
def test_input_problems_names_each_bad_value_and_what_would_be_right(ipv4_addresses, cidr, version, problem):
    assert nccl.input_problems(ipv4_addresses, cidr, version) == [problem]
    assert nccl.input_problems(ipv4_addresses, cidr, version, prefix="nccl_env_") == ["nccl_env_" + problem]


def test_input_problems_names_every_bad_value_at_once():
    found = nccl.input_problems({"eth0": "10.0.0.1", "eth1": ["x", "10.0.0.2", "y"]}, "bad", "bad")
    assert [problem.split(" ", 1)[0] for problem in found] == [
        "ipv4_addresses['eth0']='10.0.0.1'", "ipv4_addresses['eth1']", "ipv4_addresses['eth1']",
        "cluster_cidr='bad'", "nccl_version='bad'"]


# --- every operstate the kernel documents ---------------------------------------------

# Documentation/ABI/testing/sysfs-class-net (operstate) and Documentation/networking/operstates.rst.
OPERSTATES = ["unknown", "notpresent", "down", "lowerlayerdown", "testing", "dormant", "up"]
# "unknown": drivers without carrier reporting (tun, some IPoIB, loopback) pass traffic in it.
UP_OPERSTATES = {"up", "unknown"}


@pytest.mark.parametrize("operstate", OPERSTATES)
@pytest.mark.parametrize("arphrd", [1, 32, 772])
def test_interface_is_up_over_every_documented_operstate(operstate, arphrd):
    expected = operstate in UP_OPERSTATES and arphrd != 772  # loopback never carries NCCL's sockets
    assert nccl.interface_is_up({"operstate": operstate, "type": arphrd}) is expected


def test_an_unreadable_operstate_is_not_up():
    assert nccl.interface_is_up({"operstate": None, "type": 1}) is False


def physical_interfaces(root, states):
    """A sysfs tree as the kernel lays it out: class/net/<name> links to the PCI device's net/<name>."""
    for slot, (name, operstate) in enumerate(states.items(), start=3):
        device = root / "devices" / "pci0000:00" / f"0000:00:{slot:02x}.0" / "net" / name
        device.mkdir(parents=True)
        for attribute, value in (("operstate", operstate), ("type", "1"), ("mtu", "9000"),
                                 ("address", f"52:54:00:12:34:{slot:02x}")):
            (device / attribute).write_text(value + "\n")
        (root / "class" / "net").mkdir(parents=True, exist_ok=True)
        (root / "class" / "net" / name).symlink_to(os.path.relpath(device, root / "class" / "net"))
    return str(root)


@pytest.mark.parametrize("operstate", OPERSTATES)
def test_only_an_interface_that_is_up_is_proposed_for_sockets(capsys, tmp_path, operstate):
    root = physical_interfaces(tmp_path, {"ens1f0": operstate})
    facts = run_module(capsys, sysfs_root=root, ipv4_addresses={"ens1f0": ["10.10.0.11"]},
                       cluster_address="10.10.0.11")["ansible_facts"]["nccl_network"]
    assert facts["interfaces"][0]["operstate"] == operstate
    if operstate in UP_OPERSTATES:
        assert (facts["proposed"].get("NCCL_SOCKET_IFNAME"), facts["warnings"]) == ("=ens1f0", [])
    else:
        assert "NCCL_SOCKET_IFNAME" not in facts["proposed"]
        assert facts["warnings"] == ["NCCL_SOCKET_IFNAME left unset: no interface that is up holds "
                                     "the address 10.10.0.11."]


def test_an_empty_address_map_means_no_interface_has_an_address(capsys):
    # What the role passes when the node shows no IPv4 address anywhere: known, and none; not
    # "unknown", which would take an up interface without knowing what it holds. Even a cluster
    # network that takes every address finds no interface then.
    facts = run_module(capsys, sysfs_root=sysfs("roce_v1_v2"), ipv4_addresses={}, cluster_cidr="0.0.0.0/0",
                       nccl_version="2.21.5")["ansible_facts"]["nccl_network"]
    assert [iface["ipv4"] for iface in facts["interfaces"]] == [[], [], []]
    assert "NCCL_SOCKET_IFNAME" not in facts["proposed"]
    assert facts["warnings"] == ["NCCL_SOCKET_IFNAME left unset: no interface that is up holds an address in 0.0.0.0/0."]


# --- GID tables with holes, ports of mixed kinds ------------------------------------


def roce_port_dir(root, gids):
    """ports/1 of a RoCE HCA as sysfs has it: gids/<i>, gid_attrs/types/<i>, gid_attrs/ndevs/<i>."""
    port = root / "ports" / "1"
    for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
        (port / sub).mkdir(parents=True)
    for index, (gid, kind) in enumerate(gids):
        (port / "gids" / str(index)).write_text(gid + "\n")
        if kind:  # the kernel answers EINVAL for an unused GID's attributes: no file here
            (port / "gid_attrs" / "types" / str(index)).write_text(kind + "\n")
            (port / "gid_attrs" / "ndevs" / str(index)).write_text("ens1f0\n")
    return str(port)


def test_a_gid_table_with_a_hole_keeps_the_gids_after_it(tmp_path):
    # An address removed from the interface leaves its GIDs zero; a newer one sits after them.
    zero = nccl.ZERO_GID
    port = roce_port_dir(tmp_path, [(ENS1F0_LINK_LOCAL, "IB/RoCE v1"), (ENS1F0_LINK_LOCAL, "RoCE v2"),
                                    (zero, None), (zero, None),
                                    (ENS1F0_IPV4_MAPPED, "IB/RoCE v1"), (ENS1F0_IPV4_MAPPED, "RoCE v2")])
    gids = nccl.read_gids(port)
    assert [(gid["index"], gid["type"]) for gid in gids] == [
        (0, "IB/RoCE v1"), (1, "RoCE v2"), (4, "IB/RoCE v1"), (5, "RoCE v2")]
    assert nccl.choose_gid_index(gids, "RoCE v2") == 5


def test_of_two_ipv4_mapped_gids_the_lowest_index_is_chosen():
    second = "0000:0000:0000:0000:0000:ffff:0a0a:000c"  # 10.10.0.12, a second address
    gids = roce_gids("ens1f0", ENS1F0_LINK_LOCAL, ENS1F0_IPV4_MAPPED) + [
        {"index": 4, "gid": second, "type": "IB/RoCE v1", "ndev": "ens1f0"},
        {"index": 5, "gid": second, "type": "RoCE v2", "ndev": "ens1f0"},
    ]
    assert nccl.choose_gid_index(gids, "RoCE v2") == 3
    assert nccl.choose_gid_index(list(reversed(gids)), "RoCE v2") == 5  # "lowest" is the table's order


def test_an_infiniband_port_before_a_roce_port_does_not_hide_it():
    ib_hca = nccl.active_ports(nccl.read_hcas(sysfs("ib_single")))
    roce = active_roce_port("mlx5_1", "ens1f0", ENS1F0_LINK_LOCAL, ENS1F0_IPV4_MAPPED)
    assert nccl.propose_gid_index(ib_hca + [roce], "RoCE v2") == (3, [])


def test_an_hca_without_ports_and_attributes_that_are_missing_or_garbage(tmp_path):
    (tmp_path / "class" / "infiniband" / "mlx5_0").mkdir(parents=True)
    assert nccl.read_hcas(str(tmp_path)) == [
        {"name": "mlx5_0", "node_guid": None, "fw_ver": None, "board_id": None,
         "pci_path": [], "numa_node": None, "virtual_function": False, "netdevs": [], "ports": []}]
    (tmp_path / "mtu").write_text("lots\n")
    assert nccl.read_sysfs_int(str(tmp_path / "mtu")) is None
    assert nccl.read_sysfs_int(str(tmp_path / "type")) is None
    (tmp_path / "type").write_text("32\n")
    assert nccl.read_sysfs_int(str(tmp_path / "type")) == 32


# --- PCI topology, the site proposal and its inputs (the hardware trees' rules, one at a time) ---
# Stand-in sysfs written the way the kernel lays it out (Documentation/ABI/testing/sysfs-bus-pci):
# devices/pci<domain>:<bus>/<root port>/<switch ports>.../<function>, each function with class,
# vendor and numa_node files, listed in bus/pci/devices by a symlink.

RP, SW_UP, SW_DN_A, SW_DN_B = "0000:15:01.0", "0000:16:00.0", "0000:17:00.0", "0000:17:01.0"


def pci_function(root, path, pci_class, vendor, numa_node=0):
    device = root / "devices" / "pci0000:15" / path
    device.mkdir(parents=True)
    (device / "class").write_text(pci_class + "\n")
    (device / "vendor").write_text(vendor + "\n")
    (device / "numa_node").write_text(f"{numa_node}\n")
    listed = root / "bus" / "pci" / "devices"
    listed.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(device, listed), listed / Path(path).name)
    return device


def test_read_gpus_keeps_nvidia_3d_and_vga_controllers_only(tmp_path):
    # A BMC's ASPEED VGA (vendor 0x1a03) and an NVSwitch (NVIDIA, class 0x0680 bridge) are no GPU.
    pci_function(tmp_path, "0000:02:00.0/0000:03:00.0", "0x030000", "0x1a03")
    pci_function(tmp_path, f"{RP}/{SW_UP}/{SW_DN_A}/0000:18:00.0", "0x030200", "0x10de", 0)
    pci_function(tmp_path, f"{RP}/{SW_UP}/{SW_DN_B}/0000:19:00.0", "0x068000", "0x10de", 0)
    pci_function(tmp_path, "0000:9a:01.0/0000:9b:00.0", "0x030000", "0x10DE", 1)
    assert nccl.read_gpus(str(tmp_path)) == [
        {"pci_address": "0000:18:00.0", "pci_path": [RP, SW_UP, SW_DN_A, "0000:18:00.0"], "numa_node": 0},
        {"pci_address": "0000:9b:00.0", "pci_path": ["0000:9a:01.0", "0000:9b:00.0"], "numa_node": 1},
    ]


def test_read_pci_path_is_empty_for_a_missing_link_or_one_outside_the_pci_tree(tmp_path):
    (tmp_path / "devices" / "virtual" / "net" / "lo").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    os.symlink("../devices/virtual/net/lo", tmp_path / "virtual_link")
    os.symlink("elsewhere", tmp_path / "outside_link")
    assert nccl.read_pci_path(str(tmp_path), str(tmp_path / "missing")) == []
    assert nccl.read_pci_path(str(tmp_path), str(tmp_path / "virtual_link")) == []
    assert nccl.read_pci_path(str(tmp_path), str(tmp_path / "outside_link")) == []
    # A device-tree ARM host bridge puts its PCI tree under devices/platform/: not read as a
    # PCI path (the topology is then unknown and NCCL_IB_HCA is left to NCCL).
    bridge = tmp_path / "devices" / "platform" / "soc" / "1f0000000.pcie" / "pci0000:00" / "0000:00:00.0"
    (bridge / "0000:01:00.0").mkdir(parents=True)
    os.symlink(bridge / "0000:01:00.0", tmp_path / "platform_link")
    assert nccl.read_pci_path(str(tmp_path), str(tmp_path / "platform_link")) == []


@pytest.mark.parametrize("hca_path, gpu_path, shared", [
    # PIX: the same switch's downstream port.
    ([RP, SW_UP, SW_DN_A, "0000:18:00.0"], [RP, SW_UP, SW_DN_A, "0000:18:00.1"], True),
    # PXB: two downstream ports of one switch.
    ([RP, SW_UP, SW_DN_A, "0000:18:00.0"], [RP, SW_UP, SW_DN_B, "0000:19:00.0"], True),
    # PHB: only the root port in common.
    ([RP, "0000:16:00.0"], [RP, "0000:16:00.1"], False),
    # Different root ports (NODE/SYS).
    ([RP, SW_UP, "0000:18:00.0"], ["0000:9a:01.0", "0000:9b:00.0", "0000:9c:00.0"], False),
    # A path that ends inside the other is a bridge above the device, not a sibling of it.
    ([RP, SW_UP], [RP, SW_UP, SW_DN_A, "0000:18:00.0"], False),
    ([], [RP, SW_UP, SW_DN_A, "0000:18:00.0"], False),
])
def test_shares_pcie_switch(hca_path, gpu_path, shared):
    assert nccl.shares_pcie_switch(hca_path, gpu_path) is shared


def hca(name, path, *ports):
    return {"name": name, "pci_path": path, "ports": list(ports)}


def port(link_layer, active=True, number=1, gids=()):
    return {"port": number, "state": "ACTIVE" if active else "DOWN", "active": active,
            "link_layer": link_layer, "gids": list(gids)}


GPU = {"pci_address": "0000:18:00.0", "pci_path": [RP, SW_UP, SW_DN_A, "0000:18:00.0"], "numa_node": 0}


def test_the_compute_fabric_is_the_link_layer_most_gpu_local_ports_have():
    hcas = [hca(f"mlx5_{n}", [RP, SW_UP, SW_DN_B, f"0000:19:00.{n}"], port("InfiniBand")) for n in range(3)]
    hcas.append(hca("mlx5_3", [RP, SW_UP, SW_DN_B, "0000:19:00.3"], port("Ethernet")))
    ports, reason, how = nccl.compute_fabric(hcas, [GPU])
    assert reason is None and how == "pci"
    assert [name for name, _port in ports] == ["mlx5_0", "mlx5_1", "mlx5_2"]


def test_the_compute_fabric_is_unknown_without_a_gpu_local_hca_or_a_readable_link_layer():
    far = [hca("mlx5_0", ["0000:9a:01.0", "0000:9b:00.0"], port("InfiniBand"))]
    far[0]["numa_node"] = 1  # the GPU's is 0
    assert nccl.compute_fabric(far, [GPU]) == ([], "no HCA shares a PCIe switch or a NUMA node with a GPU (or their "
                                                   "PCI paths and NUMA nodes are unreadable); NCCL_IB_HCA left unset "
                                                   "(NCCL chooses)", None)
    near = [hca("mlx5_0", [RP, SW_UP, SW_DN_B, "0000:19:00.0"], port(None))]
    assert nccl.compute_fabric(near, [GPU])[1] == ("no HCA port NCCL's IB transport can use (an InfiniBand or "
                                                   "Ethernet link layer, not an SR-IOV virtual function); "
                                                   "NCCL_IB_HCA left unset")


def roce_rail(name, function, index, active=True):
    gid = {"index": index, "gid": "0000:0000:0000:0000:0000:ffff:0a28:0078", "type": "RoCE v2",
           "ndev": "bond0"}
    return hca(name, [RP, SW_UP, SW_DN_B, f"0000:19:00.{function}"], port("Ethernet", active, gids=[gid]))


@pytest.mark.parametrize("version, gid_index", [("2.21.0", None), ("2.20.5", "3"), ("2.18.3", "3")])
def test_the_gid_index_is_forced_only_before_nccl_2_21(version, gid_index):
    proposed, _warnings, reasons, _faults = nccl.propose_site_settings(
        [roce_rail("mlx5_bond_0", 0, 3)], [GPU], [], [], "RoCE v2", nccl_version=version)
    assert proposed.get("NCCL_IB_GID_INDEX") == gid_index
    assert proposed["NCCL_IB_HCA"] == "=mlx5_bond_0:1"
    assert reasons["NCCL_IB_HCA"] == ("the Ethernet ports of the HCAs nearest each GPU below a PCIe switch "
                                      "(NCCL's PIX/PXB: the compute fabric)")
    if gid_index:
        assert reasons["NCCL_IB_GID_INDEX"] == (f"the RoCE v2 GID index every compute RoCE port has, for "
                                                f"NCCL {version}, which takes one index for all ports")


def test_an_unknown_nccl_version_gets_the_gid_index_and_says_why():
    proposed, _warnings, reasons, _faults = nccl.propose_site_settings(
        [roce_rail("mlx5_bond_0", 0, 3)], [GPU], [], [], "RoCE v2")
    assert proposed["NCCL_IB_GID_INDEX"] == "3"
    assert reasons["NCCL_IB_GID_INDEX"].endswith(
        "an NCCL of unknown version (give nccl_version: 2.21 and later choose per port)")


def test_rails_that_disagree_on_the_gid_index_leave_it_unset_with_a_warning():
    proposed, warnings, reasons, _faults = nccl.propose_site_settings(
        [roce_rail("mlx5_bond_0", 0, 3), roce_rail("mlx5_bond_1", 1, 1)], [GPU], [], [], "RoCE v2",
        nccl_version="2.18.3")
    assert "NCCL_IB_GID_INDEX" not in proposed
    assert reasons["NCCL_IB_GID_INDEX"] == ("the compute RoCE ports have no one GID index of type RoCE v2 "
                                            "and this NCCL takes one for all; left unset, so NCCL before 2.21 "
                                            "uses index 0 (its default), a RoCE v1 or link-local GID on most ports")
    assert warnings[1] == ("NCCL_IB_GID_INDEX left unset: NCCL 2.18.3 then uses GID index 0; set it in "
                           "nccl_env_overrides, or use NCCL 2.21 or later.")
    assert warnings[0].startswith("Active RoCE ports disagree on the RoCE v2 GID index")


def test_a_fabric_whose_every_port_is_down_is_said_so():
    proposed, _warnings, reasons, faults = nccl.propose_site_settings(
        [roce_rail("mlx5_bond_0", 0, 3, active=False)], [GPU], [], [], "RoCE v2", nccl_version="2.21.5")
    assert "NCCL_IB_HCA" not in proposed
    assert reasons["NCCL_IB_HCA"] == "no port of the GPU-local HCAs is active"
    assert faults == ["mlx5_bond_0:1 is a compute rail (its HCA shares a PCIe switch with a GPU) but its "
                      "port is DOWN, not ACTIVE"]


def up(name, *addresses):
    return {"name": name, "operstate": "up", "type": 1, "virtual": False, "mtu": 1500, "ipv4": list(addresses)}


def test_two_interfaces_in_the_cluster_network_leave_the_socket_interface_to_the_admin():
    interfaces = [up("eno1", "10.77.0.110"), up("eno2", "10.77.0.111")]
    assert nccl.cluster_interface(interfaces, [], None, "10.77.0.0/24") == (None, (
        "eno1, eno2 all have addresses in the cluster network 10.77.0.0/24; NCCL_SOCKET_IFNAME left "
        "unset: name one in nccl_env_overrides"))
    assert nccl.cluster_interface(interfaces[:1], [], None, "10.77.0.0/24") == (
        "eno1", "its address is in the cluster network 10.77.0.0/24")


def test_a_cluster_cidr_written_with_the_nodes_own_address_is_its_network(capsys):
    # 10.77.0.110/24 as `ip addr` prints it: the network is 10.77.0.0/24.
    facts = run_module(capsys, sysfs_root=sysfs("ib_single"), ipv4_addresses=IPV4_ADDRESSES["ib_single"],
                       cluster_cidr="10.1.0.11/24")["ansible_facts"]["nccl_network"]
    assert facts["proposed"]["NCCL_SOCKET_IFNAME"] == "=ib0"


def write_conda_record(prefix, name, content):
    (prefix / "conda-meta").mkdir(parents=True, exist_ok=True)
    (prefix / "conda-meta" / name).write_text(content)


def test_unreadable_conda_records_are_skipped_for_the_next_one(tmp_path):
    # conda-meta/<name>-<version>-<build>.json; a directory, broken JSON, a list and a record
    # without a version come first in sorted order and are passed over.
    (tmp_path / "conda-meta" / "nccl-2.1.0-a_0.json").mkdir(parents=True)
    write_conda_record(tmp_path, "nccl-2.10.0-a_0.json", "{broken")
    write_conda_record(tmp_path, "nccl-2.11.0-a_0.json", "[]")
    write_conda_record(tmp_path, "nccl-2.12.0-a_0.json", json.dumps({"name": "nccl", "version": "unknown"}))
    write_conda_record(tmp_path, "nccl-2.21.5.1-h3a97aeb_0.json", json.dumps({"name": "nccl", "version": "2.21.5.1"}))
    assert nccl.nccl_version_from_env(str(tmp_path)) == "2.21.5.1"


def test_a_pip_wheel_without_a_version_is_skipped_for_the_next_one(tmp_path):
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    (site / "nvidia_nccl_cu11-dev.dist-info").mkdir(parents=True)
    (site / "nvidia_nccl_cu12-2.18.3.dist-info").mkdir()
    assert nccl.nccl_version_from_env(str(tmp_path)) == "2.18.3"
    assert nccl.nccl_version_from_env("") is None


@pytest.mark.parametrize("text, version", [("2.21.5", (2, 21, 5)), ("2.21", (2, 21, 0)),
                                           ("2.18.3-1", (2, 18, 3)), ("cuda12", None)])
def test_parse_nccl_version(text, version):
    assert nccl.parse_nccl_version(text) == version


def test_the_module_reports_the_nccl_version_it_was_given_or_found(capsys, tmp_path):
    write_conda_record(tmp_path, "nccl-2.18.3-h1_0.json", json.dumps({"name": "nccl", "version": "2.18.3"}))
    given = run_module(capsys, sysfs_root=sysfs("roce_v1_v2"), nccl_version="2.21.5")
    found = run_module(capsys, sysfs_root=sysfs("roce_v1_v2"), env_prefix=str(tmp_path))
    assert given["ansible_facts"]["nccl_network"]["nccl_version"] == "2.21.5"
    assert found["ansible_facts"]["nccl_network"]["nccl_version"] == "2.18.3"
    # InfiniBand only: the version decides nothing, and is not looked for.
    infiniband = run_module(capsys, sysfs_root=sysfs("ib_single"), env_prefix=str(tmp_path))
    assert infiniband["ansible_facts"]["nccl_network"]["nccl_version"] is None


def test_the_nccl_version_is_the_one_the_envs_torch_loads_before_its_files(capsys, tmp_path):
    # A pytorch-channel torch links NCCL statically: torch.cuda.nccl.version() is 2.21.5 while
    # conda-meta holds a conda-forge nccl 2.18.3 that torch never loads.
    write_conda_record(tmp_path, "nccl-2.18.3-h1_0.json", json.dumps({"name": "nccl", "version": "2.18.3"}))
    (tmp_path / "bin").mkdir()
    python = tmp_path / "bin" / "python"
    python.write_text('#!/bin/sh\n[ "$1" = -c ] && case "$2" in *torch.cuda.nccl.version*) echo 2.21.5;; esac\n')
    python.chmod(0o755)
    facts = run_module(capsys, sysfs_root=sysfs("roce_v1_v2"), env_prefix=str(tmp_path))["ansible_facts"]["nccl_network"]
    assert facts["nccl_version"] == "2.21.5"
    assert "NCCL_IB_GID_INDEX" not in facts["proposed"]
    python.write_text("#!/bin/sh\necho 'AttributeError: torch._C has no _nccl_version' >&2; exit 1\n")
    facts = run_module(capsys, sysfs_root=sysfs("roce_v1_v2"), env_prefix=str(tmp_path))["ansible_facts"]["nccl_network"]
    assert facts["nccl_version"] == "2.18.3"


# Stand-in for getaddrinfo(name, None, AF_INET) (getaddrinfo(3)): without a socket type it lists
# each address once per type (stream, datagram, raw); here a name with two addresses.
def fake_getaddrinfo(host, port, family):
    assert family == socket.AF_INET
    if host != "dgx1.cluster":
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    return [(socket.AF_INET, kind, proto, "", (address, 0))
            for address in ("10.77.0.110", "10.20.41.110")
            for kind, proto in ((socket.SOCK_STREAM, 6), (socket.SOCK_DGRAM, 17), (socket.SOCK_RAW, 0))]


def test_resolve_cluster_address_takes_the_first_address_a_name_resolves_to(monkeypatch):
    monkeypatch.setattr(nccl.socket, "getaddrinfo", fake_getaddrinfo)
    assert nccl.resolve_cluster_address("dgx1.cluster") == "10.77.0.110"
    assert nccl.resolve_cluster_address("10.77.0.110") == "10.77.0.110"
    assert nccl.resolve_cluster_address("") is None
    with pytest.raises(ValueError, match="cluster_address 'dgx9' is neither an IPv4 address nor a host name"):
        nccl.resolve_cluster_address("dgx9")


# --- the node's own IPv4 addresses (detect_ipv4) -------------------------------------

# `ip -o -4 addr show` as iproute2 6.1 (Debian 12) prints it: one address a line, the primary first,
# a secondary with its label, a veth with its peer after '@'.
IP_ADDR_OUTPUT = """\
1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever
2: eth0    inet 10.0.0.5/24 brd 10.0.0.255 scope global eth0\\       valid_lft forever preferred_lft forever
2: eth0    inet 10.0.0.6/24 brd 10.0.0.255 scope global secondary eth0:1\\       valid_lft forever preferred_lft forever
7: veth3@if6    inet 172.18.0.1/16 scope global veth3\\       valid_lft forever preferred_lft forever
"""


def test_ip_output_gives_each_interfaces_addresses_primary_first():
    assert nccl.parse_ip_ipv4(IP_ADDR_OUTPUT) == {
        "lo": ["127.0.0.1"], "eth0": ["10.0.0.5", "10.0.0.6"], "veth3": ["172.18.0.1"]}
    assert nccl.parse_ip_ipv4("") == {}


@pytest.fixture
def fake_ip(tmp_path, monkeypatch):
    """A STAND-IN `ip` first on PATH, answering IP_ADDR_OUTPUT (or, given ``fail``, exiting 2 with that
    text on stderr), recording its argv."""
    def install(fail=None):
        argv_file = tmp_path / "ip.argv"
        script = tmp_path / "bin" / "ip"
        script.parent.mkdir(exist_ok=True)
        said = f"echo '{fail}' >&2; " if fail else ""
        body = f"cat <<'OUT'\n{IP_ADDR_OUTPUT}OUT" if fail is None else f"{said}exit 2"
        script.write_text(f"#!/bin/sh\necho \"$@\" > {argv_file}\n{body}\n")
        script.chmod(0o755)
        monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")
        return argv_file
    return install


def test_the_nodes_addresses_are_detected_and_the_inventorys_replace_theirs(capsys, fake_ip):
    argv = fake_ip()
    result = run_module(capsys, sysfs_root=sysfs("no_hca"), detect_ipv4=True, cluster_address="10.0.0.6")
    assert argv.read_text().split() == ["-o", "-4", "addr", "show"]
    interfaces = {iface["name"]: iface["ipv4"] for iface in result["ansible_facts"]["nccl_network"]["interfaces"]}
    assert interfaces["eth0"] == ["10.0.0.5", "10.0.0.6"]
    assert result["ansible_facts"]["nccl_network"]["proposed"]["NCCL_SOCKET_IFNAME"] == "=eth0"
    given = run_module(capsys, sysfs_root=sysfs("no_hca"), detect_ipv4=True, cluster_address="10.0.0.6",
                       ipv4_addresses={"eth0": ["10.9.9.9"]})
    interfaces = {iface["name"]: iface["ipv4"] for iface in given["ansible_facts"]["nccl_network"]["interfaces"]}
    assert interfaces["eth0"] == ["10.9.9.9"]
    assert "NCCL_SOCKET_IFNAME" not in given["ansible_facts"]["nccl_network"]["proposed"]


def test_an_ip_that_fails_is_said_and_only_the_given_addresses_count(capsys, fake_ip):
    fake_ip(fail="Error: something broke")
    result = run_module(capsys, sysfs_root=sysfs("no_hca"), detect_ipv4=True, cluster_address="10.0.0.5",
                        ipv4_addresses=IPV4_ADDRESSES["no_hca"])
    shown = [warning["event"]["msg"] for warning in result["warnings"]]
    assert ("ip -o -4 addr show failed (Error: something broke): the node's IPv4 addresses were not "
            "detected.") in shown, shown
    assert result["ansible_facts"]["nccl_network"]["proposed"]["NCCL_SOCKET_IFNAME"] == "=eth0"


def test_an_address_line_is_read_from_its_first_four_fields_and_other_lines_are_skipped():
    # The address is the fourth field whatever follows it; a line cut short, or one of another
    # family (`ip -o addr show` without -4), gives no address.
    assert nccl.parse_ip_ipv4("3: eth1    inet 10.0.1.5/24\n") == {"eth1": ["10.0.1.5"]}
    assert nccl.parse_ip_ipv4("3: eth1    inet\n"
                              "3: eth1    inet6 fe80::1/64 scope link \\       valid_lft forever\n"
                              "3: eth1    link/ether 0a:0b:0c:0d:0e:0f brd ff:ff:ff:ff:ff:ff\n") == {}


def test_an_ip_that_fails_without_a_word_is_said_with_its_exit_status(capsys, fake_ip):
    fake_ip(fail="")
    result = run_module(capsys, sysfs_root=sysfs("no_hca"), detect_ipv4=True)
    shown = [warning["event"]["msg"] for warning in result["warnings"]]
    assert "ip -o -4 addr show failed (exit 2): the node's IPv4 addresses were not detected." in shown, shown


def test_without_detect_ipv4_the_module_asks_ip_nothing(capsys, fake_ip):
    argv = fake_ip()
    result = run_module(capsys, sysfs_root=sysfs("no_hca"), ipv4_addresses={"eth0": ["10.9.9.9"]})
    assert not argv.exists()
    interfaces = {iface["name"]: iface["ipv4"] for iface in result["ansible_facts"]["nccl_network"]["interfaces"]}
    assert interfaces["eth0"] == ["10.9.9.9"]


@pytest.mark.parametrize("address, link_local", [("169.254.3.1", True), ("10.77.0.110", False),
                                                 ("fe80::1", True), ("eth0", False)])
def test_only_a_169_254_or_fe80_address_is_link_local(address, link_local):
    assert nccl.is_link_local(address) is link_local


class FakeRunner:
    """AnsibleModule.run_command, enough of it: runs argv, (rc, stdout, stderr)."""

    def run_command(self, argv, environ_update=None):
        done = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **(environ_update or {})})
        return done.returncode, done.stdout, done.stderr


def fake_torch(prefix, script):
    (prefix / "bin").mkdir(exist_ok=True)
    python = prefix / "bin" / "python"
    python.write_text("#!/bin/sh\n" + script)
    python.chmod(0o755)


def test_torchs_nccl_version_is_its_last_line_of_output(tmp_path):
    # torch may print a warning (a CUDA driver too old, say) on stdout before the answer.
    fake_torch(tmp_path, "echo 'UserWarning: CUDA initialization: driver too old'\necho 2.21.5\n")
    assert nccl.torch_nccl_version(FakeRunner(), str(tmp_path)) == "2.21.5"


@pytest.mark.parametrize("script", ["exit 0\n", "echo 2.21.5; exit 1\n"])
def test_a_torch_that_prints_nothing_or_fails_gives_no_version(tmp_path, script):
    fake_torch(tmp_path, script)
    assert nccl.torch_nccl_version(FakeRunner(), str(tmp_path)) is None


@pytest.mark.parametrize("hca_path, gpu_path, hops", [
    # PIX: one hop down from the shared switch port on each side.
    ([RP, SW_UP, SW_DN_A, "0000:18:00.0"], [RP, SW_UP, SW_DN_A, "0000:18:00.1"], 2),
    # PXB: parted below the switch's upstream port, two hops each side.
    ([RP, SW_UP, SW_DN_A, "0000:18:00.0"], [RP, SW_UP, SW_DN_B, "0000:19:00.0"], 4),
    # The HCA a level deeper behind its own switch: one hop more on its side only.
    ([RP, SW_UP, SW_DN_A, "0000:18:00.0", "0000:19:00.0"], [RP, SW_UP, SW_DN_B, "0000:1a:00.0"], 5),
])
def test_the_pci_distance_counts_the_hops_along_both_paths_from_where_they_part(hca_path, gpu_path, hops):
    assert nccl.pci_distance(hca_path, gpu_path) == hops
    assert nccl.pci_distance(gpu_path, hca_path) == hops


def test_an_hca_whose_netdev_is_bonded_into_the_cluster_interface_is_left_out():
    # IPoIB bonding (InfiniBand: no RoCE GID names the bond): the storage HCA mlx5_1's ib1 is a
    # lower device of bond0, which holds the node's address; the rail mlx5_0 stays.
    rail = dict(hca("mlx5_0", [RP, SW_UP, SW_DN_B, "0000:19:00.0"], port("InfiniBand")), netdevs=["ib0"])
    storage = dict(hca("mlx5_1", ["0000:9a:01.0", "0000:9b:00.0"], port("InfiniBand")), netdevs=["ib1"])
    bond = dict(up("bond0", "10.77.0.110"), lower=["ib1"])
    proposed, _warnings, reasons, _faults = nccl.propose_site_settings(
        [rail, storage], [GPU], [bond], [], "RoCE v2", "10.77.0.110")
    assert proposed["NCCL_IB_HCA"] == "=mlx5_0:1" and proposed["NCCL_SOCKET_IFNAME"] == "=bond0"
    assert reasons["NCCL_IB_HCA"].endswith("; mlx5_1 left out: its netdev holds the cluster interface bond0")


def test_a_gpu_of_unknown_numa_node_does_not_hide_the_next_gpus_hca():
    # No PCIe switch shared (GB200-like: each GPU its own root complex); the first GPU's NUMA node
    # is unreadable (-1), the second's is 1, where the one HCA sits.
    gpus = [{"pci_address": "0000:01:00.0", "pci_path": ["0000:00:01.0", "0000:01:00.0"], "numa_node": -1},
            {"pci_address": "0000:81:00.0", "pci_path": ["0000:80:01.0", "0000:81:00.0"], "numa_node": 1}]
    near = dict(hca("mlx5_0", ["0000:90:01.0", "0000:91:00.0"], port("InfiniBand")), numa_node=1)
    ports, reason, how = nccl.compute_fabric([near], gpus)
    assert ([name for name, _port in ports], reason, how) == (["mlx5_0"], None, "numa")
    proposed, _warnings, reasons, faults = nccl.propose_site_settings([near], gpus, [], [], "RoCE v2")
    assert proposed["NCCL_IB_HCA"] == "=mlx5_0:1"
    assert reasons["NCCL_IB_HCA"] == ("the InfiniBand ports of the HCAs on each GPU's NUMA node (no HCA shares a "
                                      "PCIe switch with a GPU)")
    assert faults == []


def test_of_two_interfaces_holding_the_cluster_address_the_first_is_taken():
    # The address on a bond and, during a migration, still on one of its ports: interfaces come in
    # the order read_interfaces lists them, and the first holding it is the one.
    interfaces = [up("bond0", "10.77.0.110"), up("eno1", "10.77.0.110")]
    assert nccl.cluster_interface(interfaces, [], "10.77.0.110", None) == (
        "bond0", "it holds the node's cluster address 10.77.0.110")


def test_a_socket_ifname_override_matching_two_interfaces_is_warned_about():
    interfaces = [up("eth0", "10.0.0.5"), up("eth1", "10.0.1.5"), up("ib0", "10.1.0.5")]
    assert nccl.override_warnings({"NCCL_SOCKET_IFNAME": "eth"}, [], interfaces) == [
        "NCCL_SOCKET_IFNAME=eth: without '=' NCCL takes eth as a prefix, which matches eth0, eth1 here; write "
        "=eth... for exact names."]
    assert nccl.override_warnings({"NCCL_SOCKET_IFNAME": "ib"}, [], interfaces) == []


def test_an_override_entry_with_a_space_does_not_hide_the_entries_after_it():
    hcas = [hca(name, [], port("InfiniBand")) for name in ("mlx5_0", "mlx5_1", "mlx5_10")]
    assert nccl.override_warnings({"NCCL_IB_HCA": "mlx5_0 ,mlx5_1"}, hcas, []) == [
        "NCCL_IB_HCA=mlx5_0 ,mlx5_1: without '=' NCCL takes mlx5_1 as a prefix, which matches mlx5_1, mlx5_10 "
        "here; write =mlx5_1... for exact names."]


def test_a_conf_path_not_written_yet_keeps_nothing(capsys, tmp_path):
    facts = run_module(capsys, sysfs_root=sysfs("ib_single"), conf_path=str(tmp_path / "nccl.conf"))
    assert facts["ansible_facts"]["nccl_network"]["kept"] == {} and not facts.get("failed")


def test_a_conf_path_that_cannot_be_read_fails_naming_it(capsys, tmp_path):
    result = run_module(capsys, sysfs_root=sysfs("ib_single"), conf_path=str(tmp_path))
    assert result["failed"] is True
    assert result["msg"] == f"conf_path {tmp_path}: [Errno 21] Is a directory: '{tmp_path}'"
