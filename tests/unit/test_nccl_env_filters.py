"""Unit tests for plugins/filter/nccl_env.py: merging and consistency checks,
on the recorded sysfs trees read by nccl_network_facts."""

from pathlib import Path

import pytest

from ansible_collections.hpc.slurm_train.plugins.filter import nccl_env
from ansible_collections.hpc.slurm_train.plugins.modules import nccl_network_facts as facts

REPO = Path(__file__).resolve().parents[2]
SYSFS = Path(__file__).resolve().parent / "fixtures" / "sysfs"


def node(name, tree, addresses, group="gpu", overrides=None, base=None, cluster_address=None):
    """A node as the role sees it after detection and merge: the module's site proposal for its
    cluster address (by default the first address of its map), and its nccl_network facts."""
    root = str(SYSFS / tree)
    hcas, gpus, interfaces = facts.read_hcas(root), facts.read_gpus(root), facts.read_interfaces(root, addresses)
    cluster_address = cluster_address or next(iter(addresses.values()))[0]
    proposed, warnings, reasons, faults = facts.propose_site_settings(
        hcas, gpus, interfaces, facts.DEFAULT_EXCLUDE_INTERFACES, "RoCE v2", cluster_address)
    settings = nccl_env.nccl_env_merge(proposed, base or {}, overrides or {})
    return name, group, settings, {"hcas": hcas, "gpus": gpus, "interfaces": interfaces, "proposed": proposed,
                                   "reasons": reasons, "faults": faults, "warnings": warnings}


def dgx(address):
    """A DGX H100's addresses (tests/unit/test_nccl_hardware_trees.py), its cluster address first."""
    return {"enp41s0f0np0": [address], "enp41s0f1np1": ["10.20.41.110"], "enp170s0f0np0": ["10.20.170.110"],
            "ibp24s0": ["10.30.0.110"], "usb0": ["169.254.3.1"], "lo": ["127.0.0.1"]}


def problems(*nodes):
    return nccl_env.nccl_env_group_problems(*[list(column) for column in zip(*nodes)])


def test_inventory_values_win_over_detection_and_base():
    merged = nccl_env.nccl_env_merge({"NCCL_IB_HCA": "mlx5_0:1", "NCCL_IB_DISABLE": "0"},
                                     {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "NCCL_IB_HCA": "x"},
                                     {"NCCL_IB_HCA": "=mlx5_0", "NCCL_MIN_NCHANNELS": 4})
    assert merged == {"NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": "=mlx5_0", "NCCL_MIN_NCHANNELS": "4",
                      "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}


def test_sockets_only_drops_detected_ib_settings_but_keeps_inventory_ones():
    detected = {"NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": "mlx5_0:1", "NCCL_IB_GID_INDEX": "3"}
    assert nccl_env.nccl_env_merge(detected, {}, {"NCCL_IB_DISABLE": True, "NCCL_IB_GID_INDEX": 1}) == \
        {"NCCL_IB_DISABLE": "1", "NCCL_IB_GID_INDEX": "1"}


def test_different_trees_with_the_same_usable_hardware_are_consistent():
    assert problems(node("r1", "roce_v1_v2", {"ens1f0": ["10.10.0.11"]}),
                    node("r2", "two_hcas_one_down", {"ens1f0": ["10.10.0.12"]})) == []


def test_an_hca_down_on_one_node_is_refused_naming_node_and_setting():
    # NCCL_IB_HCA is proposed from the GPUs' PCI topology: on a node without GPUs it is left to
    # NCCL, a down HCA there changes no setting. A DGX with a compute rail down proposes seven.
    found = problems(node("r1", "dgx_h100", dgx("10.77.0.110")),
                     node("r2", "dgx_h100", dgx("10.77.0.111")),
                     node("r3", "dgx_h100_rail_down", dgx("10.77.0.112")))
    rails, seven = "=mlx5_0:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_9:1,mlx5_10:1,mlx5_11:1", \
        "=mlx5_0:1,mlx5_3:1,mlx5_4:1,mlx5_6:1,mlx5_9:1,mlx5_10:1,mlx5_11:1"
    assert found == [f"group gpu: NCCL_IB_HCA differs between its nodes (r1={rails}, r2={rails}, r3={seven}); r3 "
                     "is the odd one: its own detection reports: mlx5_5:1 is a compute rail (its HCA shares a PCIe "
                     "switch with a GPU) but its port is DOWN, not ACTIVE"]


def test_nodes_in_different_groups_may_differ():
    assert problems(node("i1", "ib_single", {"ib0": ["10.1.0.1"]}, group="gpu_ib"),
                    node("c1", "no_hca", {"eth0": ["10.0.0.5"]}, group="cpu")) == []


def test_a_group_override_naming_hardware_one_node_lacks_is_refused():
    override = {"NCCL_IB_HCA": "mlx5_0:1,mlx5_1:1", "NCCL_SOCKET_IFNAME": "ens1f0,ens1f1"}
    found = problems(node("r1", "two_hcas", {"ens1f0": ["10.10.0.11"]}, overrides=override),
                     node("r2", "two_hcas_one_down", {"ens1f0": ["10.10.0.12"]}, overrides=override))
    assert found == [
        "r2: NCCL_IB_HCA names mlx5_1:1, which r2 does not have as an active port (active: mlx5_0:1; "
        "HCAs: mlx5_0, mlx5_1)",
        "r2: NCCL_SOCKET_IFNAME names ens1f1, which r2 does not have up (up: ens1f0)",
    ]


def test_exact_and_prefix_matches_follow_nccl_syntax():
    n = node("i1", "ib_single", {"ib0": ["10.1.0.1"]}, overrides={"NCCL_IB_HCA": "=mlx5_0", "NCCL_SOCKET_IFNAME": "ib"})
    assert problems(n) == []
    n = node("i1", "ib_single", {"ib0": ["10.1.0.1"]}, overrides={"NCCL_SOCKET_IFNAME": "=ib"})
    assert problems(n) == ["i1: NCCL_SOCKET_IFNAME names ib, which i1 does not have up (up: eno1, ib0)"]
    n = node("i1", "ib_single", {"ib0": ["10.1.0.1"]}, overrides={"NCCL_SOCKET_IFNAME": "^docker,lo"})
    assert problems(n) == []


@pytest.mark.parametrize("settings, message", [
    ({"NCCL_SOCKET_IFNAME": "lo"}, "includes the loopback interface lo"),
    ({"NCCL_SOCKET_IFNAME": "=eth0,lo"}, "includes the loopback interface lo"),
    ({"NCCL_IB_HCA": "=mlx5_0:1, mlx5_3:1"}, "NCCL_IB_HCA==mlx5_0:1, mlx5_3:1 has a space in ' mlx5_3:1': NCCL "
                                             "splits at ',' only and keeps it, so the entry matches nothing; write "
                                             "=mlx5_0:1,mlx5_3:1"),
    ({"NCCL_IB_HCA": "mlx5_0:one"}, "mlx5_0:one is no hca:port[:rail:plane] with numbers"),
    ({"NCCL_IB_HCA": "mlx5_0:1:r0"}, "NCCL_IB_HCA=mlx5_0:1:r0: mlx5_0:1:r0 is no hca:port[:rail:plane] with numbers"),
    # Without NCCL_IB_HCA the interface list is still read entry by entry.
    ({"NCCL_SOCKET_IFNAME": "=eth0, eth1"}, "NCCL_SOCKET_IFNAME==eth0, eth1 has a space in ' eth1'"),
    ({"NCCL_IB_DISABLE": "yes"}, "NCCL_IB_DISABLE=yes; use 1 (sockets only) or 0"),
    ({"nccl_debug": "INFO"}, "'nccl_debug' is no environment variable name"),
    ({"NCCL_DEBUG": "INFO\nNCCL_IB_DISABLE=1"}, "NCCL_DEBUG holds a line break"),
])
def test_settings_nccl_would_misread_are_refused(settings, message):
    found = nccl_env.nccl_env_setting_problems(settings, "n1")
    assert any(message in p for p in found), found


def test_deprecated_names_are_read_and_warned_about_not_refused():
    settings = {"NCCL_MIN_NRINGS": "4", "NCCL_ASYNC_ERROR_HANDLING": "1"}
    assert nccl_env.nccl_env_setting_problems(settings, "n1") == []
    assert facts.setting_warnings(settings) == [
        "NCCL_ASYNC_ERROR_HANDLING is deprecated (still read, for now): use TORCH_NCCL_ASYNC_ERROR_HANDLING.",
        "NCCL_MIN_NRINGS is deprecated (still read, for now): use NCCL_MIN_NCHANNELS."]


def test_the_example_inventorys_and_field_notes_risky_settings_are_warned_about():
    warnings = facts.setting_warnings({"NCCL_IB_TIMEOUT": "22", "NCCL_NET_GDR_LEVEL": "2", "NCCL_MIN_NCHANNELS": "4",
                                       "NCCL_CROSS_NIC": "1", "NCCL_COLLNET_ENABLE": "1", "NCCL_IB_TC": "106",
                                       "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"})
    assert [w.split(":")[0].split("=")[0].split(" ")[0] for w in warnings] == [
        "NCCL_COLLNET_ENABLE", "NCCL_CROSS_NIC", "NCCL_IB_TIMEOUT", "NCCL_MIN_NCHANNELS", "NCCL_NET_GDR_LEVEL",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING"]
    assert warnings[2] == ("NCCL_IB_TIMEOUT=22: each of the 7 retries waits 17 s (4.096 us * 2^22), so a lost link "
                           "stalls the job about 2 min before NCCL reports it; NCCL's default is 20 (4.3 s).")
    assert "numeric form is deprecated" in warnings[4]
    assert facts.setting_warnings({"NCCL_IB_TIMEOUT": "20", "NCCL_NET_GDR_LEVEL": "PHB"}) == []


@pytest.mark.parametrize("value, minutes", [("24", 9), ("25", 18), ("26", 37)])
def test_a_long_ib_timeout_is_told_as_the_stall_of_all_eight_tries(value, minutes):
    # The first try and NCCL's 7 retries, each 4.096 us * 2^value.
    wait = 4.096e-6 * 2 ** int(value)
    assert facts.setting_warnings({"NCCL_IB_TIMEOUT": value}) == [
        f"NCCL_IB_TIMEOUT={value}: each of the 7 retries waits {wait:.0f} s (4.096 us * 2^{value}), so a lost link "
        f"stalls the job about {minutes} min before NCCL reports it; NCCL's default is 20 (4.3 s)."]


@pytest.mark.parametrize("key", ["NCCL_NET_GDR_LEVEL", "NCCL_P2P_LEVEL"])
def test_a_level_nccl_reads_as_an_old_number_is_warned_about(key):
    # NCCL (src/graph/paths.cc, ncclGetLevel): a value whose first character is a digit is an old
    # level, read with strtol(str, NULL, 0), so 0x2 is level 2 too.
    for value in ("2", "0x2"):
        assert facts.setting_warnings({key: value}) == [
            f"{key}={value}: the numeric form is deprecated (NCCL maps it to a path type); write LOC, NVL, PIX, PXB, "
            "PXN, PHB or SYS (NCCL documentation, Environment Variables)."]


def test_ordinary_settings_of_1_get_no_warning():
    assert facts.setting_warnings({"NCCL_IB_DISABLE": "1", "NCCL_IB_PCI_RELAXED_ORDERING": "1",
                                   "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"}) == []

def test_the_port_rail_plane_form_is_accepted_as_nccl_parses_it():
    n = node("i1", "ib_single", {"ib0": ["10.1.0.1"]}, overrides={"NCCL_IB_HCA": "=mlx5_0:1:0:0"})
    assert problems(n) == []
    n = node("i1", "ib_single", {"ib0": ["10.1.0.1"]}, overrides={"NCCL_IB_HCA": "=mlx5_0:2:0:0"})
    assert problems(n) == ["i1: NCCL_IB_HCA names mlx5_0:2, which i1 does not have as an active port "
                           "(active: mlx5_0:1; HCAs: mlx5_0)"]


def test_good_settings_pass():
    assert nccl_env.nccl_env_setting_problems({"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "eth0",
                                               "TORCH_NCCL_ASYNC_ERROR_HANDLING": 1}, "n1") == []


# The preflight's check: settings read back from the files main.yml writes.

def test_what_main_writes_reads_back_the_same():
    conf = "# NCCL settings of node110\nNCCL_IB_DISABLE=1\nNCCL_SOCKET_IFNAME=eth0\n"
    env_file = "# settings\nexport NCCL_SOCKET_IFNAME=eth0\nexport NCCL_DEBUG='INFO SUBSYS'\nexport TORCH_NCCL_ASYNC_ERROR_HANDLING=1\n"
    assert nccl_env.nccl_env_read(conf) == {"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "eth0"}
    assert nccl_env.nccl_env_read(env_file) == {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_DEBUG": "INFO SUBSYS",
                                                "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}


def test_the_socket_address_is_on_the_interface_nccl_socket_ifname_selects():
    _, _, settings, network = node("r1", "roce_v1_v2", {"ens1f0": ["10.10.0.11"], "docker0": ["172.17.0.1"]})
    assert nccl_env.nccl_env_socket_address(settings, network) == "10.10.0.11"
    assert nccl_env.nccl_env_socket_address({"NCCL_SOCKET_IFNAME": "=docker0"}, network) == "172.17.0.1"
    assert nccl_env.nccl_env_socket_address({"NCCL_SOCKET_IFNAME": "^docker"}, network) is None
    assert nccl_env.nccl_env_socket_address({"NCCL_SOCKET_IFNAME": "eth9"}, network) is None
    assert nccl_env.nccl_env_socket_address({}, network) is None


def check(nodes, confs, jobs):
    names, groups, _, networks = (list(column) for column in zip(*nodes))
    return nccl_env.nccl_env_check_problems(names, groups, confs, jobs, networks)


def test_a_node_whose_nccl_conf_names_a_missing_interface_is_named_even_when_the_env_file_hides_it():
    nodes = [node("c1", "no_hca", {"eth0": ["10.0.0.1"]}), node("c2", "no_hca", {"eth0": ["10.0.0.2"]})]
    good, bad = {"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "eth0"}, {"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "eth9"}
    found = check(nodes, [good, bad], [good, good])
    assert "c2: NCCL_SOCKET_IFNAME names eth9, which c2 does not have up (up: eth0) (in /etc/nccl.conf; provision.yml writes it anew)" in found, found
    assert any("NCCL_SOCKET_IFNAME differs between its nodes (c1=eth0, c2=eth9)" in p for p in found), found
    assert not any("as a job reads it" in p for p in found), found
    # Without the env file over it, the job reads nccl.conf: the same problem, said once.
    found = check(nodes, [good, bad], [good, bad])
    assert sum("c2: NCCL_SOCKET_IFNAME names eth9" in p for p in found) == 1, found


def test_a_node_without_nccl_conf_is_named_with_the_path():
    nodes = [node("c1", "no_hca", {"eth0": ["10.0.0.1"]}), node("c2", "no_hca", {"eth0": ["10.0.0.2"]})]
    good = {"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "eth0"}
    assert check(nodes, [good, None], [good, good]) == [
        "c2: /etc/nccl.conf is missing (NCCL reads it on every node); run provision.yml"]


def test_consistent_nodes_have_no_problems():
    nodes = [node("r1", "roce_v1_v2", {"ens1f0": ["10.10.0.11"]}), node("r2", "two_hcas_one_down", {"ens1f0": ["10.10.0.12"]})]
    settings = [n[2] for n in nodes]
    assert check(nodes, settings, settings) == []


@pytest.mark.parametrize("ifname, refused", [("^", True), ("=", True), ("^e", False), ("^=eth", False)])
def test_an_ifname_list_left_empty_by_its_prefix_is_refused(ifname, refused):
    found = nccl_env.nccl_env_setting_problems({"NCCL_SOCKET_IFNAME": ifname}, "n1")
    assert found == (["n1: NCCL_SOCKET_IFNAME is empty; name an interface or leave it unset"] if refused else [])


def test_with_ib_disabled_an_hca_setting_is_not_held_against_the_hardware():
    n = node("c1", "no_hca", {"eth0": ["10.0.0.1"]}, overrides={"NCCL_IB_HCA": "mlx5_9"})
    assert n[2]["NCCL_IB_DISABLE"] == "1"
    assert problems(n) == []


def test_with_ib_enabled_and_no_hca_setting_nccl_chooses_and_nothing_is_refused():
    # Without GPUs the module leaves NCCL_IB_HCA unset: NCCL then takes every active port.
    n = node("i1", "ib_single", {"ib0": ["10.1.0.1"]})
    assert n[2] == {"NCCL_IB_DISABLE": "0", "NCCL_SOCKET_IFNAME": "=ib0"}
    assert problems(n) == []


def test_an_exact_hca_name_must_be_the_whole_name():
    n = node("i1", "ib_single", {"ib0": ["10.1.0.1"]}, overrides={"NCCL_IB_HCA": "=mlx5"})
    assert problems(n) == ["i1: NCCL_IB_HCA names mlx5, which i1 does not have as an active port "
                           "(active: mlx5_0:1; HCAs: mlx5_0)"]
    assert problems(node("i1", "ib_single", {"ib0": ["10.1.0.1"]}, overrides={"NCCL_IB_HCA": "mlx5"})) == []


def test_a_tie_between_a_value_and_unset_names_both_sides_not_the_healthy_one_alone():
    found = nccl_env.nccl_env_group_problems(["c1", "c2"], ["gpu", "gpu"],
                                             [{"NCCL_DEBUG": "INFO"}, {}], [{}, {}])
    assert found == ["group gpu: NCCL_DEBUG differs between its nodes (c1=INFO, c2=(unset)); no node's own "
                     "check tells which is right, so every side (c1, c2) is named: check them, or set "
                     "NCCL_DEBUG for the group in nccl_env_overrides"]


def test_a_tie_made_by_a_host_override_names_the_host_with_it():
    found = nccl_env.nccl_env_group_outliers(["c1", "c2"], ["gpu", "gpu"], [{"NCCL_DEBUG": "INFO"}, {}],
                                             [{}, {}], [{"NCCL_DEBUG": "INFO"}, {}])
    assert list(found) == ["c1"]
    assert found["c1"][0].endswith("c1 is the odd one: its nccl_env_overrides sets NCCL_DEBUG=INFO, which the "
                                   "rest of its group does not share")


def test_a_group_override_all_nodes_share_blames_no_one_for_it():
    override = {"NCCL_DEBUG": "WARN"}
    found = nccl_env.nccl_env_group_outliers(["c1", "c2"], ["gpu", "gpu"], [override, override],
                                             [{}, {}], [override, override])
    assert found == {}


def test_a_line_without_a_value_is_no_setting():
    assert nccl_env.nccl_env_read("NCCL_DEBUG\nexport NCCL_IB_DISABLE\n\nNCCL_SOCKET_IFNAME=eth0\n") == {
        "NCCL_SOCKET_IFNAME": "eth0"}


def test_loopback_is_never_the_socket_address_and_the_primary_address_is():
    network = {"interfaces": [
        {"name": "lo", "operstate": "unknown", "type": 772, "ipv4": ["127.0.0.1"]},
        {"name": "eth0", "operstate": "up", "type": 1, "ipv4": ["10.0.0.5", "10.0.0.6"]}]}
    assert nccl_env.nccl_env_socket_address({"NCCL_SOCKET_IFNAME": "lo"}, network) is None
    assert nccl_env.nccl_env_socket_address({"NCCL_SOCKET_IFNAME": "lo,eth"}, network) == "10.0.0.5"


# nccl_env_host_overrides: a host's own settings, merged key by key over its group's
# nccl_env_overrides (a host_vars nccl_env_overrides would replace the group's whole dict).
GROUP_OVERRIDES = {"NCCL_IB_TC": "106", "NCCL_DEBUG": "WARN"}


def test_a_hosts_overrides_merge_over_its_groups_key_by_key():
    merged = nccl_env.nccl_env_merge({"NCCL_IB_DISABLE": "0", "NCCL_SOCKET_IFNAME": "=eth0"},
                                     {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}, GROUP_OVERRIDES,
                                     {"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "=ens1f0"})
    # The group's NCCL_IB_TC stays; the host's NCCL_DEBUG and interface win over the group and detection.
    assert merged == {"NCCL_DEBUG": "INFO", "NCCL_IB_DISABLE": "0", "NCCL_IB_TC": "106",
                      "NCCL_SOCKET_IFNAME": "=ens1f0", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}
    assert nccl_env.nccl_env_overrides_of(GROUP_OVERRIDES, None) == GROUP_OVERRIDES
    assert nccl_env.nccl_env_overrides_of(None, {"NCCL_DEBUG": "INFO"}) == {"NCCL_DEBUG": "INFO"}
    # The group's dict is not changed in place (it is every other node's too).
    assert GROUP_OVERRIDES == {"NCCL_IB_TC": "106", "NCCL_DEBUG": "WARN"}


def test_a_host_override_that_sets_what_its_group_has_leaves_no_one_out():
    # c2's detection found no cluster interface; its host override names the one the group uses.
    settings = [nccl_env.nccl_env_merge({"NCCL_SOCKET_IFNAME": "=eth0"}, {}, GROUP_OVERRIDES),
                nccl_env.nccl_env_merge({}, {}, GROUP_OVERRIDES, {"NCCL_SOCKET_IFNAME": "=eth0"})]
    assert settings[0] == settings[1] == {"NCCL_DEBUG": "WARN", "NCCL_IB_TC": "106", "NCCL_SOCKET_IFNAME": "=eth0"}
    up = {"interfaces": [{"name": "eth0", "operstate": "up", "ipv4": ["10.0.0.1"]}]}
    assert nccl_env.nccl_env_group_outliers(["c1", "c2"], ["gpu", "gpu"], settings, [up, up],
                                            [GROUP_OVERRIDES, GROUP_OVERRIDES],
                                            [{}, {"NCCL_SOCKET_IFNAME": "=eth0"}]) == {}


def test_a_host_override_its_group_lacks_names_that_host_and_the_variable():
    host = {"NCCL_DEBUG": "INFO"}
    settings = [nccl_env.nccl_env_merge({}, {}, GROUP_OVERRIDES), nccl_env.nccl_env_merge({}, {}, GROUP_OVERRIDES, host)]
    found = nccl_env.nccl_env_group_outliers(["c1", "c2"], ["gpu", "gpu"], settings, [{}, {}],
                                             [GROUP_OVERRIDES, GROUP_OVERRIDES], [{}, host])
    assert found == {"c2": ["group gpu: NCCL_DEBUG differs between its nodes (c1=WARN, c2=INFO); c2 is the odd one: "
                            "its nccl_env_host_overrides sets NCCL_DEBUG=INFO, which the rest of its group does not "
                            "share"]}
    # The group's key it shares is no suspect: NCCL_IB_TC is named nowhere.
    assert "NCCL_IB_TC" not in found["c2"][0]


def test_async_error_handling_is_left_to_pytorch_by_default():
    # PyTorch >= 2.2 defaults TORCH_NCCL_ASYNC_ERROR_HANDLING to 3; a 1 here would override it
    # in every job (ProcessGroupNCCL: mode 1's ncclCommAbort can hang, no flight recorder dump).
    import yaml
    defaults = yaml.safe_load((Path(__file__).resolve().parents[2] / "roles" / "nccl_env" / "defaults"
                               / "main.yml").read_text())
    assert defaults["nccl_env_base"] == {}
    assert "TORCH_NCCL_ASYNC_ERROR_HANDLING" not in nccl_env.nccl_env_merge({"NCCL_IB_DISABLE": "0"},
                                                                           defaults["nccl_env_base"], {})


def test_a_nodes_own_failed_check_decides_the_groups_disagreement_on_that_key():
    # c2's /etc/nccl.conf was edited by hand: an HCA it lacks, IB enabled, a debug level of its own.
    # Its own check of NCCL_IB_HCA fails: that names c2 alone for NCCL_IB_HCA, and for every other
    # key it differs on, where no one's own check tells (issue 31, item 9).
    healthy = node("i1", "ib_single", {"ib0": ["10.1.0.1"]})
    edited = dict(healthy[2], NCCL_IB_HCA="=mlx5_4:1", NCCL_DEBUG="INFO")
    found = nccl_env.nccl_env_group_outliers(["i1", "i2"], ["gpu", "gpu"], [healthy[2], edited],
                                             [healthy[3], healthy[3]])
    assert list(found) == ["i2"], found
    assert found["i2"] == [
        "i2: NCCL_IB_HCA names mlx5_4:1, which i2 does not have as an active port (active: mlx5_0:1; HCAs: mlx5_0)",
        "group gpu: NCCL_DEBUG differs between its nodes (i1=(unset), i2=INFO); i2 is the odd one: its own check "
        "failed on NCCL_IB_HCA",
        "group gpu: NCCL_IB_HCA differs between its nodes (i1=(unset), i2==mlx5_4:1); i2 is the odd one: its own "
        "check of NCCL_IB_HCA failed, above"]
    assert not any("every side" in problem for problems in found.values() for problem in problems)


def test_nccl_conf_gets_a_detected_gid_index_only_from_the_inventory():
    settings = {"NCCL_IB_DISABLE": "0", "NCCL_IB_GID_INDEX": "3", "NCCL_SOCKET_IFNAME": "=eth0",
                "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"}
    assert nccl_env.nccl_env_conf_settings(settings, {}, {}) == {"NCCL_IB_DISABLE": "0", "NCCL_SOCKET_IFNAME": "=eth0"}
    assert nccl_env.nccl_env_conf_settings(settings, {"NCCL_IB_GID_INDEX": 3}, {})["NCCL_IB_GID_INDEX"] == "3"
    assert "NCCL_IB_GID_INDEX" in nccl_env.nccl_env_conf_settings(settings, {}, {"NCCL_IB_GID_INDEX": "3"})


def test_the_templates_kept_block_is_what_the_module_reads_back_as_kept():
    template = (REPO / "roles" / "nccl_env" / "templates" / "key_value.j2").read_text()
    assert f"\n{facts.KEPT_MARKER}\n" in template
    title = (REPO / "roles" / "nccl_env" / "tasks" / "deferred_node_files.yml").read_text()
    assert f'_kv_title: "{facts.CONF_TITLE_PREFIX[2:]}{{{{ inventory_hostname }}}}' in title


def test_nodes_each_with_their_own_differing_override_are_all_named():
    # Both departures are the inventory's own: nothing tells which is right.
    found = nccl_env.nccl_env_group_problems(["c1", "c2"], ["gpu", "gpu"],
                                             [{"NCCL_DEBUG": "INFO"}, {"NCCL_DEBUG": "WARN"}], [{}, {}],
                                             [{}, {}], [{"NCCL_DEBUG": "INFO"}, {"NCCL_DEBUG": "WARN"}])
    assert found == ["group gpu: NCCL_DEBUG differs between its nodes (c1=INFO, c2=WARN); no node's own check "
                     "tells which is right, so every side (c1, c2) is named: check them, or set NCCL_DEBUG for the "
                     "group in nccl_env_overrides"]


def test_a_host_override_every_node_shares_leaves_a_nodes_own_group_override_as_the_odd_one():
    # c3's conf was left from its own nccl_env_overrides; the host overrides all agree, so they blame no one.
    host = {"NCCL_DEBUG": "WARN"}
    found = nccl_env.nccl_env_group_outliers(["c1", "c2", "c3"], ["gpu"] * 3,
                                             [{"NCCL_DEBUG": "WARN"}, {"NCCL_DEBUG": "WARN"}, {"NCCL_DEBUG": "INFO"}],
                                             [{}] * 3, [{}, {}, {"NCCL_DEBUG": "INFO"}], [host] * 3)
    assert found == {"c3": ["group gpu: NCCL_DEBUG differs between its nodes (c1=WARN, c2=WARN, c3=INFO); c3 is the "
                            "odd one: its nccl_env_overrides sets NCCL_DEBUG=INFO, which the rest of its group does "
                            "not share"]}


def test_host_overrides_that_disagree_among_every_node_blame_them_all_and_the_majority_decides():
    hosts = [{"NCCL_DEBUG": "WARN"}, {"NCCL_DEBUG": "WARN"}, {"NCCL_DEBUG": "INFO"}]
    found = nccl_env.nccl_env_group_outliers(["c1", "c2", "c3"], ["gpu"] * 3, list(hosts), [{}] * 3,
                                             [{}, {}, {"NCCL_DEBUG": "INFO"}], hosts)
    assert found == {"c3": ["group gpu: NCCL_DEBUG differs between its nodes (c1=WARN, c2=WARN, c3=INFO); check c3 "
                            "(a missing or down interface or HCA?), or set NCCL_DEBUG for the group in "
                            "nccl_env_overrides"]}


def test_once_a_host_override_names_the_odd_one_the_groups_overrides_are_not_counted():
    found = nccl_env.nccl_env_group_outliers(["c1", "c2", "c3"], ["gpu"] * 3,
                                             [{"NCCL_DEBUG": "WARN"}, {"NCCL_DEBUG": "TRACE"}, {"NCCL_DEBUG": "INFO"}],
                                             [{}] * 3, [{}, {"NCCL_DEBUG": "TRACE"}, {}],
                                             [{}, {}, {"NCCL_DEBUG": "INFO"}])
    assert sorted(found) == ["c1", "c2", "c3"], found
    assert all("every side (c1, c2, c3) is named" in problems[0] for problems in found.values()), found


def test_input_problems_names_the_roles_variables_by_the_modules_rules():
    assert nccl_env.nccl_env_input_problems({"eth0": ["10.77.0.1"]}, "10.77.0.0/24", "2.21.5") == []
    assert nccl_env.nccl_env_input_problems({"eth0": "10.77.0.1"}, "10.77.0", "") == [
        "nccl_env_" + problem for problem in facts.input_problems({"eth0": "10.77.0.1"}, "10.77.0", "")]
    assert nccl_env.nccl_env_input_problems({}, "10.77.0", "")[0].startswith("nccl_env_cluster_cidr='10.77.0' ")
