"""bin/local-cluster's planning: from `ansible-inventory --list` (fixtures/ansible_inventory_local.json,
recorded from inventory/local) to the nodes, addresses, partitions and paths it would build, and
the refusals a user gets for an inventory it cannot build. Nothing here starts a daemon."""

import copy
import hashlib
import importlib.machinery
import importlib.util
import ipaddress
import json
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import FIXTURES_DIR, PROJECT_ROOT

loader = importlib.machinery.SourceFileLoader("local_cluster", str(PROJECT_ROOT / "bin" / "local-cluster"))
spec = importlib.util.spec_from_loader("local_cluster", loader)
lc = importlib.util.module_from_spec(spec)
loader.exec_module(lc)

RECORDED = json.loads((FIXTURES_DIR / "ansible_inventory_local.json").read_text())
STATE = "/var/lib/ansible-slurm-train/local"


@pytest.fixture
def inventory(monkeypatch):
    """The recorded inventory, to change per test; Plan reads it instead of running ansible-inventory."""
    data = copy.deepcopy(RECORDED)

    def load(path):
        assert path == "inventory/local"
        return {k: v for k, v in data.items() if k != "_meta"}, data["_meta"]["hostvars"]

    monkeypatch.setattr(lc, "load_inventory", load)
    return data


def plan():
    return lc.Plan("inventory/local")


def refused(message):
    with pytest.raises(lc.ClusterError) as error:
        plan()
    assert str(error.value) == message


def test_the_recorded_inventory_plans_two_nodes_in_one_partition(inventory):
    p = plan()
    tag = hashlib.sha256(STATE.encode()).hexdigest()[:6]
    assert (p.cluster_name, str(p.state), str(p.nas_root), p.tag) == ("local", STATE, "/starmap/nas", tag)
    assert (p.network, p.bridge_address) == (ipaddress.IPv4Network("10.77.0.0/24"),
                                             ipaddress.IPv4Address("10.77.0.1"))
    assert (p.slurmctld_port, p.slurmd_port, p.slurmdbd_port, p.mariadb_port) == (16817, 16818, 16819, 13306)
    assert p.partitions == {"gpu_A6000": ["node110", "node111"]}
    assert [(n.name, str(n.address), n.gpus, n.cpus, n.memory_mb, n.partitions) for n in p.nodes] == [
        ("node110", "10.77.0.110", 8, 16, 4096, ["gpu_A6000"]),
        ("node111", "10.77.0.111", 8, 16, 4096, ["gpu_A6000"])]
    first = p.nodes[0]
    assert (first.netns, first.veth, p.bridge) == ("local-node110", f"lc{tag}0", f"lc{tag}br")
    assert p.nodes[1].veth == f"lc{tag}1"
    assert first.gpu_files == [Path(STATE, "dev", "node110", f"nvidia{i}") for i in range(8)]
    assert (first.dir, first.slurmd_pidfile) == (Path(STATE, "nodes", "node110"),
                                                Path(STATE, "run", "slurmd-node110.pid"))
    assert p.slurm_conf == Path(STATE, "etc", "slurm.conf")
    assert p.env()["SLURM_CONF"] == f"{STATE}/etc/slurm.conf" and p.env()["LC_ALL"] == "C"


def test_a_nas_root_outside_the_state_dir_is_linked_to_one_inside(inventory):
    p = plan()
    assert (p.nas_is_linked, p.nas_dir) == (True, Path(STATE, "nas"))
    for host in ("node110", "node111"):
        inventory["_meta"]["hostvars"][host]["cluster_nas_root"] = f"{STATE}/nas"
    p = plan()
    assert (p.nas_is_linked, p.nas_dir) == (False, Path(STATE, "nas"))
    for host in ("node110", "node111"):
        inventory["_meta"]["hostvars"][host]["cluster_nas_root"] = f"{STATE}/shared"
    p = plan()
    assert (p.nas_is_linked, p.nas_dir) == (False, Path(STATE, "shared"))


def test_nodes_are_in_natural_order_and_each_partition_lists_its_own(inventory):
    hostvars = inventory["_meta"]["hostvars"]
    for name, address in (("node9", "10.77.0.9"), ("node10", "10.77.0.10")):
        hostvars[name] = {**hostvars["node110"], "ansible_host": address, "cluster_node_gpus": 0}
    inventory["compute"]["children"].append("cpu")
    inventory["cpu"] = {"hosts": ["node10", "node9", "node110"]}
    p = plan()
    assert [n.name for n in p.nodes] == ["node9", "node10", "node110", "node111"]
    assert p.partitions == {"gpu_A6000": ["node110", "node111"], "cpu": ["node9", "node10", "node110"]}
    assert [n.partitions for n in p.nodes] == [["cpu"], ["cpu"], ["gpu_A6000", "cpu"], ["gpu_A6000"]]
    assert p.nodes[0].gpu_files == []


def test_an_inventory_without_compute_nodes_is_refused(inventory):
    inventory["gpu_A6000"]["hosts"] = []
    refused("inventory inventory/local: no hosts under group 'compute' (each partition is a child group of "
            "'compute')")
    del inventory["compute"]
    refused("inventory inventory/local: no hosts under group 'compute' (each partition is a child group of "
            "'compute')")


@pytest.mark.parametrize("name", ["Local", "1rec", "a" * 31, "rec.1"])
def test_a_cluster_name_that_cannot_name_namespaces_is_refused(inventory, name):
    for host in ("node110", "node111"):
        inventory["_meta"]["hostvars"][host]["cluster_name"] = name
    refused(f"cluster_name {name!r}: use lower-case letters, digits, '-' or '_', starting with a letter, "
            "at most 30 characters")


def test_the_longest_cluster_name_is_accepted(inventory):
    for host in ("node110", "node111"):
        inventory["_meta"]["hostvars"][host]["cluster_name"] = "r" * 30
    assert plan().nodes[0].netns == "r" * 30 + "-node110"


def test_a_state_dir_next_to_the_root_is_refused(inventory):
    for host in ("node110", "node111"):
        inventory["_meta"]["hostvars"][host]["local_cluster_state_dir"] = "/var"
    refused("local_cluster_state_dir /var: too close to '/'; use a dedicated directory such as "
            "/var/lib/ansible-slurm-train/local")
    for host in ("node110", "node111"):
        inventory["_meta"]["hostvars"][host]["local_cluster_state_dir"] = "/var/lc"
    assert str(plan().state) == "/var/lc"


def test_ports_must_differ(inventory):
    for host in ("node110", "node111"):
        inventory["_meta"]["hostvars"][host]["local_cluster_slurmd_port"] = 16817
    refused("local_cluster_*_port values must differ, got [16817, 16817, 16819, 13306]")


def test_two_nodes_on_one_address_are_refused(inventory):
    inventory["_meta"]["hostvars"]["node111"]["ansible_host"] = "10.77.0.110"
    refused("hosts node110 and node111 have the same ansible_host 10.77.0.110: every node needs its own address")


def test_a_node_directly_in_compute_is_refused(inventory):
    hostvars = inventory["_meta"]["hostvars"]
    hostvars["node112"] = {**hostvars["node110"], "ansible_host": "10.77.0.112"}
    inventory["compute"]["hosts"] = ["node112"]
    refused("hosts node112 sit directly in 'compute': put each node in a partition group under 'compute'")


def test_a_partition_name_slurm_cannot_take_is_refused(inventory):
    inventory["compute"]["children"] = ["gpu A6000"]
    inventory["gpu A6000"] = inventory.pop("gpu_A6000")
    refused("group 'gpu A6000': a partition name may hold letters, digits, '_', '.' and '-'")


def test_an_empty_partition_group_is_no_partition(inventory):
    inventory["compute"]["children"].append("spare")
    inventory["spare"] = {"hosts": []}
    assert plan().partitions == {"gpu_A6000": ["node110", "node111"]}


@pytest.mark.parametrize("name", ["node_110", "-node", "node-"])
def test_a_node_name_that_is_no_host_name_is_refused(inventory, name):
    hostvars = inventory["_meta"]["hostvars"]
    hostvars[name] = hostvars.pop("node111")
    inventory["gpu_A6000"]["hosts"] = ["node110", name]
    refused(f"host {name!r}: a node name must be a host name (letters, digits and '-', starting and ending "
            "with a letter or digit)")


def test_a_misspelt_cluster_variable_is_refused_naming_the_known_ones(inventory):
    inventory["_meta"]["hostvars"]["node111"]["cluster_node_gpu"] = 8
    with pytest.raises(lc.ClusterError, match=r"^host node111: unknown variable cluster_node_gpu \(known: "
                                              r"cluster_node_cpus, cluster_node_gpus, "):
        plan()


def test_a_node_variable_out_of_range_is_named_with_its_host(inventory):
    inventory["_meta"]["hostvars"]["node111"]["cluster_node_gpus"] = 65
    refused("node111: cluster_node_gpus=65 is out of range; use 0 to 64")


# --- the helpers, one by one --------------------------------------------------------


def test_descendants_follow_child_groups_once():
    groups = {"compute": {"children": ["a", "b"]}, "a": {"hosts": ["n1"], "children": ["b"]},
              "b": {"hosts": ["n2"], "children": ["a"]}}
    assert lc.descendants(groups, "compute") == {"n1", "n2"}
    assert lc.descendants(groups, "missing") == set()


@pytest.mark.parametrize("value, low, high", [(0, 0, 64), (64, 0, 64), (65535, 1024, None)])
def test_typed_var_accepts_its_bounds(value, low, high):
    assert lc.typed_var({"x": value}, "x", (int, low, high, 1), "all") == value


def test_typed_var_takes_the_default_and_refuses_what_is_no_number():
    assert lc.typed_var({}, "cluster_node_cpus", (int, 1, 4096, 1), "node110") == 1
    for value in (True, "8", 8.0, None):
        with pytest.raises(lc.ClusterError) as error:
            lc.typed_var({"cluster_node_cpus": value}, "cluster_node_cpus", (int, 1, 4096, 1), "node110")
        assert str(error.value) == (f"node110: cluster_node_cpus={value!r} is not an integer; "
                                    "set it to a number between 1 and 4096")
    with pytest.raises(lc.ClusterError, match="^node110: cluster_node_cpus=0 is out of range; use 1 to 4096$"):
        lc.typed_var({"cluster_node_cpus": 0}, "cluster_node_cpus", (int, 1, 4096, 1), "node110")


@pytest.mark.parametrize("value, path", [("/var/lib/lc/", "/var/lib/lc"), ("/a//b", "/a/b"), ("/a.b/c-d_e", "/a.b/c-d_e"),
                                          ("/nas/cuda-12.1+x", "/nas/cuda-12.1+x")])
def test_safe_path_normalises(value, path):
    assert lc.safe_path(value, "local_cluster_state_dir") == path


@pytest.mark.parametrize("value", ["var/lib", "/a/../b", "/a/..", "/a/./b", "/a/.", "/a b", "/a$b"])
def test_safe_path_refuses(value):
    with pytest.raises(lc.ClusterError) as error:
        lc.safe_path(value, "cluster_nas_root")
    assert str(error.value) == (f"cluster_nas_root={value!r}: use an absolute path of letters, digits, '_', '.', "
                                "'+', '-' and '/', without '..' or '.'")


@pytest.mark.parametrize("value", [None, ""])
def test_safe_path_says_when_it_is_not_set(value):
    with pytest.raises(lc.ClusterError, match="^cluster_nas_root is not set in the inventory: give an absolute path$"):
        lc.safe_path(value, "cluster_nas_root")


def test_parse_network_gives_the_bridge_the_first_address():
    assert lc.parse_network("10.77.0.0/30") == (ipaddress.IPv4Network("10.77.0.0/30"),
                                                ipaddress.IPv4Address("10.77.0.1"))


@pytest.mark.parametrize("value, message", [
    ("10.77.0.0/31", "local_cluster_network=10.77.0.0/31: use a private IPv4 network of at least /30"),
    ("8.8.8.0/24", "local_cluster_network=8.8.8.0/24: use a private IPv4 network of at least /30"),
])
def test_parse_network_refuses_small_and_public_networks(value, message):
    with pytest.raises(lc.ClusterError) as error:
        lc.parse_network(value)
    assert str(error.value) == message


@pytest.mark.parametrize("value", ["10.77.0.1/24", "ten", None])
def test_parse_network_refuses_what_is_no_network(value):
    with pytest.raises(lc.ClusterError, match=rf"^local_cluster_network={value!r} is not an IPv4 network such as "
                                              r"10.77.0.0/24 \("):
        lc.parse_network(value)


@pytest.mark.parametrize("value, message", [
    (None, "host n1 has no ansible_host: give each node its IPv4 address in 10.77.0.0/24"),
    ("n1.example", "host n1: ansible_host='n1.example' is not an IPv4 address"),
    ("10.78.0.5", "host n1: ansible_host 10.78.0.5 is not a host address of local_cluster_network 10.77.0.0/24"),
    ("10.77.0.0", "host n1: ansible_host 10.77.0.0 is not a host address of local_cluster_network 10.77.0.0/24"),
    ("10.77.0.255", "host n1: ansible_host 10.77.0.255 is not a host address of local_cluster_network 10.77.0.0/24"),
    ("10.77.0.1", "host n1: ansible_host 10.77.0.1 is the bridge's address (the first of 10.77.0.0/24); pick another"),
])
def test_node_address_refusals(value, message):
    network, bridge = lc.parse_network("10.77.0.0/24")
    holder = type("PlanSoFar", (), {"network": network, "bridge_address": bridge})()
    with pytest.raises(lc.ClusterError) as error:
        lc.node_address("n1", value, holder)
    assert str(error.value) == message
    assert lc.node_address("n1", "10.77.0.254", holder) == ipaddress.IPv4Address("10.77.0.254")


def test_natural_key_sorts_numbers_as_numbers():
    assert sorted(["node100", "node9", "node10", "gpu2"], key=lc.natural_key) == ["gpu2", "node9", "node10", "node100"]


# --- reading the inventory ------------------------------------------------------------


def test_the_inventory_is_read_with_ansible_inventory():
    # The real tool on the real inventory/local: what the fixture above recorded.
    groups, hostvars = lc.load_inventory(PROJECT_ROOT / "inventory" / "local")
    assert groups["gpu_A6000"] == {"hosts": ["node110", "node111"]} and "_meta" not in groups
    assert hostvars["node110"]["ansible_host"] == "10.77.0.110"
    assert hostvars == RECORDED["_meta"]["hostvars"]


def test_a_missing_inventory_is_named():
    with pytest.raises(lc.ClusterError, match="^inventory /nonexistent/inventory does not exist$"):
        lc.load_inventory("/nonexistent/inventory")


def test_without_ansible_inventory_the_fix_is_named(monkeypatch):
    monkeypatch.setattr(lc, "find_program", lambda name, extra_dirs=(): None)
    with pytest.raises(lc.ClusterError, match=r"^ansible-inventory not found: run 'make deps'"):
        lc.load_inventory(PROJECT_ROOT / "inventory" / "local")


def test_ansible_inventory_is_looked_for_in_the_venvs_too(monkeypatch):
    asked = []
    monkeypatch.setattr(lc, "find_program", lambda name, extra_dirs=(): asked.append((name, extra_dirs)))
    with pytest.raises(lc.ClusterError):
        lc.load_inventory(PROJECT_ROOT / "inventory" / "local")
    assert asked == [("ansible-inventory", [PROJECT_ROOT / ".venv" / "bin", Path(lc.sys.executable).parent])]


def test_an_inventory_ansible_cannot_parse_is_refused_with_its_last_error_line(tmp_path):
    broken = tmp_path / "hosts.yml"
    broken.write_text("all:\n  hosts: [unclosed\n")
    with pytest.raises(lc.ClusterError) as error:
        lc.load_inventory(broken)
    # What the tool itself says last (its earlier lines are warnings about the other parsers).
    tool = lc.find_program("ansible-inventory", extra_dirs=[Path(lc.sys.executable).parent])
    said = subprocess.run([tool, "-i", str(broken), "--list"], capture_output=True, text=True,
                          env={**os.environ, "ANSIBLE_INVENTORY_UNPARSED_FAILED": "True"})
    lines = said.stderr.strip().splitlines()
    assert said.returncode != 0 and len(lines) > 1
    assert str(error.value) == f"inventory {broken} could not be read: {lines[-1]}"


def test_the_plan_takes_the_short_host_name_and_the_first_nodes_cluster_values(inventory, monkeypatch):
    monkeypatch.setattr(lc.socket, "gethostname", lambda: "login01.cluster.example.org")
    inventory["_meta"]["hostvars"]["node111"]["local_cluster_slurmctld_port"] = 17000
    p = plan()
    assert (p.hostname, p.slurmctld_port) == ("login01", 16817)
    inventory["_meta"]["hostvars"]["node110"]["local_cluster_slurmctld_port"] = 17000
    assert plan().slurmctld_port == 17000


def test_a_state_dir_reached_through_a_link_is_refused_before_anything_is_made(tmp_path, monkeypatch):
    (tmp_path / "bobs").mkdir()
    (tmp_path / "lib").symlink_to(tmp_path / "bobs")
    state = tmp_path / "lib" / "local"
    assert lc.state_dir_link(state) == tmp_path / "lib"
    assert lc.state_dir_link(tmp_path / "bobs" / "local") is None
    (tmp_path / "bobs" / "local").symlink_to(tmp_path / "bobs" / "keys")
    assert lc.state_dir_link(tmp_path / "bobs" / "local") == tmp_path / "bobs" / "local"

    def nothing_else(*_):
        raise AssertionError("up went on past the state dir")

    monkeypatch.setattr(lc, "check_prerequisites", nothing_else)
    with pytest.raises(lc.ClusterError, match=f"is reached through a link: {tmp_path / 'lib'} -> {tmp_path / 'bobs'}"):
        lc.up(SimpleNamespace(state=state), accounting=False)
    assert sorted(path.name for path in (tmp_path / "bobs").iterdir()) == ["local"]


# --- login and NAS hosts ------------------------------------------------------------


def test_every_hosts_etc_hosts_names_the_nodes_then_the_login_and_nas_hosts(inventory, monkeypatch):
    monkeypatch.setattr(lc.socket, "gethostname", lambda: "controller")
    p = plan()
    assert [(n.name, str(n.address), n.netns) for n in p.services] == [
        ("login01", "10.77.0.100", "local-login01"), ("nas01", "10.77.0.101", "local-nas01")]
    for host in (p.nodes[0], p.services[0]):
        assert lc.node_etc_files(p, host)["hosts"] == (
            "127.0.0.1\tlocalhost\n10.77.0.1\tcontroller\n10.77.0.110\tnode110\n10.77.0.111\tnode111\n"
            "10.77.0.100\tlogin01\n10.77.0.101\tnas01\n")


def test_a_login_host_gets_no_stand_in_gpus_and_no_pam_slurm_adopt(inventory):
    p = plan()
    node, login = p.nodes[0], p.services[0]
    assert {"local-cluster/standin-gpus.json", "pam.d/sshd"} <= set(lc.node_etc_files(p, node))
    files = lc.node_etc_files(p, login)
    assert "local-cluster/standin-gpus.json" not in files and "pam.d/sshd" not in files
    assert (login.gpus, login.gpu_files) == (0, [])


def test_status_lists_login_and_nas_hosts_without_gpus_or_cpus(inventory):
    # A cluster never brought up: nothing runs and no record is read.
    for host in ("node110", "node111"):
        inventory["_meta"]["hostvars"][host]["local_cluster_state_dir"] = "/var/lib/ansible-slurm-train/never-up"
    report = lc.status_report(plan())
    assert report["up"] is False
    assert [(n["name"], n["gpus"], n["cpus"]) for n in report["nodes"]] == [
        ("node110", 8, 16), ("node111", 8, 16), ("login01", 0, 0), ("nas01", 0, 0)]
    assert [s["name"] for s in report["services"]] == ["login01", "nas01"]


def test_the_controller_standing_in_as_login_or_nas_host_is_not_built(inventory):
    hostvars = inventory["_meta"]["hostvars"]
    hostvars["localhost"] = {**hostvars["login01"]}
    del hostvars["localhost"]["ansible_host"]
    hostvars["controller"] = {**hostvars["nas01"], "ansible_connection": "local"}
    del hostvars["controller"]["ansible_host"]
    inventory["login"]["hosts"].append("localhost")
    inventory["nas"]["hosts"].append("controller")
    assert [n.name for n in plan().services] == ["login01", "nas01"]


@pytest.mark.parametrize("users", [["Alice"], ["alice", 7], "alice", ["alice bob"]])
def test_users_that_are_no_list_of_user_names_are_refused(inventory, users):
    for host in ("node110", "node111"):
        inventory["_meta"]["hostvars"][host]["local_cluster_users"] = users
    refused(f"local_cluster_users={users!r}: give a list of user names (lower-case letters, digits, '_' and '-', "
            "starting with a letter or '_')")


@pytest.mark.parametrize("owner", ["NAS", "nas admin", 2000])
def test_a_nas_owner_that_is_no_user_name_is_refused(inventory, owner):
    for host in ("node110", "node111"):
        inventory["_meta"]["hostvars"][host]["cluster_nas_owner"] = owner
    refused(f"cluster_nas_owner={owner!r}: give a user name (lower-case letters, digits, '_' and '-')")


@pytest.mark.parametrize("users", [["alice", "root"], ["nasadmin", "bob"]])
def test_root_or_the_nas_owner_among_the_users_is_refused(inventory, users):
    for host in ("node110", "node111"):
        inventory["_meta"]["hostvars"][host]["local_cluster_users"] = users
    refused(f"local_cluster_users={users!r}: list ordinary users only, not root or the NAS owner nasadmin")


@pytest.mark.parametrize("state", ["/tmp/lc/local", str(lc.REPO), str(lc.REPO / "state")])
def test_a_state_dir_the_hosts_cannot_see_is_refused(inventory, state):
    for host in ("node110", "node111"):
        inventory["_meta"]["hostvars"][host]["local_cluster_state_dir"] = state
    hidden = "/tmp" if state.startswith("/tmp/") else str(lc.REPO)
    refused(f"local_cluster_state_dir {state} is under {hidden}, which the cluster's hosts do not see (it is "
            "the controller's); use a directory such as /var/lib/ansible-slurm-train/<name>")
