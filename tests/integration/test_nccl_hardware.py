"""The nccl_env role of provision.yml on nodes given stand-in sysfs trees of real machines
(tests/unit/fixtures/sysfs/README.md, docs/hardware.md): a DGX H100 as the BasePOD deploys it and a
single-root cascade server, each in a node group of its own, and an Azure NDv5 VM whose image
ships an /etc/nccl.conf. Each node's nccl.conf is what an admin of that machine writes by hand;
a second run changes nothing. Local connections (the role only reads the tree and writes files),
as test_provision.py's nccl_env cases run; then provision.yml on the local cluster's two nodes
given the BasePOD and the cascade trees: in one node group, the group check names both; each in a
group of its own, each gets its admin's settings, and the nodes are provisioned as usual after."""

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from cluster import REPO, play_recap

BIN = Path(sys.executable).parent
SYSFS = REPO / "tests" / "unit" / "fixtures" / "sysfs"
PLAY = "- name: NCCL role\n  hosts: compute\n  gather_facts: false\n  roles: [hpc.slurm_train.nccl_env]\n"
NODES = {  # name: (node group, tree, addresses: the first holds the node's cluster address)
    "basepod1": ("gpu_basepod", "dgx_h100_basepod", {"bond0": ["10.77.0.110"], "ibp41s0f0": ["10.30.41.110"]}),
    "cascade1": ("gpu_cascade", "cascade_8gpu", {"eno1": ["10.77.0.130"], "ibp58s0": ["10.30.0.130"]}),
    "az1": ("gpu_ndv5", "azure_ndv5", {"eth0": ["10.0.0.4"]}),
}
# What an admin writes by hand on each (the documents: DGX BasePOD Deployment Guide and DGX H100
# User Guide; NCCL src/graph/paths.cc for the cascade; Azure/azhpc-images customizations/ndv5.sh).
EXPECTED = {
    "basepod1": ["NCCL_IB_DISABLE=0",
                 "NCCL_IB_HCA==mlx5_0:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_9:1,mlx5_10:1,mlx5_11:1",
                 "NCCL_SOCKET_IFNAME==bond0"],
    "cascade1": ["NCCL_IB_DISABLE=0", "NCCL_IB_HCA==mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1",
                 "NCCL_SOCKET_IFNAME==eno1"],
    "az1": ["NCCL_IB_DISABLE=0", "NCCL_IB_HCA==" + ",".join(f"mlx5_ib{n}:1" for n in range(8)),
            "NCCL_SOCKET_IFNAME==eth0",
            "# Kept from the nccl.conf found on this node (keys this role does not set):",
            "NCCL_IB_PCI_RELAXED_ORDERING=1", "NCCL_IGNORE_CPU_AFFINITY=1",
            "NCCL_TOPO_FILE=/opt/microsoft/ndv5/topo.xml"],
}


def inventory(tmp_path):
    groups = {}
    for name, (group, tree, addresses) in NODES.items():
        groups.setdefault(group, {"hosts": {}})["hosts"][name] = {
            "nccl_env_sysfs_root": str(SYSFS / tree), "nccl_env_ipv4_addresses": addresses,
            "nccl_env_cluster_address": next(iter(addresses.values()))[0]}
    hosts = {"all": {"vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                              "cluster_nas_root": str(tmp_path / "nas"),
                              "nccl_env_conf_path": f"{tmp_path}/{{{{ inventory_hostname }}}}.nccl.conf",
                              # The env files as root here: the NAS owner cannot run this checkout's Python.
                              "nccl_env_nas_owner": "root", "nccl_env_nas_group": "root"},
                     "children": {"nas": {"hosts": {"localhost": {}}}, "compute": {"children": groups}}}}
    path = tmp_path / "hosts.yml"
    path.write_text(json.dumps(hosts))
    (tmp_path / "nccl.yml").write_text(PLAY)
    return path


def run(tmp_path, path):
    return subprocess.run([str(BIN / "ansible-playbook"), "-i", str(path), str(tmp_path / "nccl.yml")], cwd=REPO,
                          capture_output=True, text=True, timeout=600)


def settings_lines(text):
    return [line for line in text.splitlines() if line and (not line.startswith("#") or line.startswith("# Kept"))]


def test_each_machine_gets_what_its_admin_would_write_and_a_second_run_changes_nothing(tmp_path):
    path = inventory(tmp_path)
    # The Azure HPC image's own /etc/nccl.conf, there before provision.yml.
    (tmp_path / "az1.nccl.conf").write_text((SYSFS / "azure_ndv5" / "etc" / "nccl.conf").read_text())
    first = run(tmp_path, path)
    assert first.returncode == 0, first.stdout[-4000:]
    for node, expected in EXPECTED.items():
        assert settings_lines((tmp_path / f"{node}.nccl.conf").read_text()) == expected, node
    # The keys kept are said (Ansible's warnings go to stderr, wrapped).
    said = " ".join((first.stdout + first.stderr).split())
    assert ("Kept from " + str(tmp_path / "az1.nccl.conf") + ", which this role does not set: "
            "NCCL_IB_PCI_RELAXED_ORDERING, NCCL_IGNORE_CPU_AFFINITY, NCCL_TOPO_FILE") in said
    env = {group: (tmp_path / "nas" / "env" / f"nccl-{group}.sh").read_text() for group, _, _ in NODES.values()}
    assert "export NCCL_SOCKET_IFNAME==bond0" in env["gpu_basepod"]
    assert "NCCL_TOPO_FILE" not in env["gpu_ndv5"] and "TORCH_NCCL_ASYNC_ERROR_HANDLING" not in env["gpu_ndv5"]
    second = run(tmp_path, path)
    assert second.returncode == 0, second.stdout[-4000:]
    counts = play_recap(second.stdout)
    assert all(counts[node]["changed"] == 0 for node in NODES), second.stdout[-4000:]
    assert settings_lines((tmp_path / "az1.nccl.conf").read_text()) == EXPECTED["az1"]


def test_provision_on_the_local_cluster_with_a_basepod_node_and_a_cascade_node(cluster, tmp_path):
    # node110 given the DGX H100 BasePOD tree, node111 the cascade tree, both in gpu_A6000: each
    # node's proposal is the one its admin writes, and as they share one node group (one env file)
    # and no node's own check tells which is right, both are named and neither is written.
    shared = Path(tempfile.mkdtemp(prefix="test-nccl-hardware-", dir=cluster.nas))
    try:
        shared.chmod(0o755)
        inventory = shared / "inventory"
        shutil.copytree(cluster.inventory, inventory)
        (inventory / "host_vars").mkdir(exist_ok=True)
        for node, tree, addresses in (("node110", "dgx_h100_basepod", {"bond0": ["10.77.0.110"]}),
                                      ("node111", "cascade_8gpu", {"eno1": ["10.77.0.111"]})):
            shutil.copytree(SYSFS / tree, shared / tree, symlinks=True)
            (inventory / "host_vars" / f"{node}.yml").write_text(json.dumps({
                "nccl_env_sysfs_root": str(shared / tree), "nccl_env_ipv4_addresses": addresses}))
        before = {node: cluster.ssh(node, "cat /etc/nccl.conf").stdout for node in ("node110", "node111")}
        proc = subprocess.run(["ansible-playbook", "-i", str(inventory), "provision.yml", "--limit", "compute"],
                              cwd=REPO, capture_output=True, text=True, timeout=600)
        after = {node: cluster.ssh(node, "cat /etc/nccl.conf").stdout for node in ("node110", "node111")}
    finally:
        shutil.rmtree(shared)
    assert proc.returncode != 0
    said = " ".join(proc.stdout.split())
    assert ("group gpu_A6000: NCCL_IB_HCA differs between its nodes (node110==mlx5_0:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,"
            "mlx5_6:1,mlx5_9:1,mlx5_10:1,mlx5_11:1, node111==mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1)") in said, said[-4000:]
    assert ("group gpu_A6000: NCCL_SOCKET_IFNAME differs between its nodes (node110==bond0, node111==eno1)") in said
    assert "Leaving node110 out of this run" in said and "Leaving node111 out of this run" in said
    assert after == before, "a node left out keeps its nccl.conf"


def conf_and_env_settings(text):
    """The settings lines of an nccl.conf, and of a group env file as jobs source them."""
    return [line.removeprefix("export ") for line in settings_lines(text)]


def test_provision_gives_a_basepod_node_and_a_cascade_node_in_their_own_groups_what_their_admins_write(
        cluster, tmp_path):
    # node110 given the DGX H100 BasePOD tree, node111 the cascade tree, each in a node group of
    # its own (a partition per machine kind, as a site with both would have): each node's
    # nccl.conf and its group's env file hold what its admin writes (EXPECTED, as for basepod1 and
    # cascade1 above), with no warning. Then the nodes are provisioned from inventory/local again.
    nodes = {"node110": ("gpu_basepod", "dgx_h100_basepod", "basepod1", "bond0"),
             "node111": ("gpu_cascade", "cascade_8gpu", "cascade1", "eno1")}
    inventory = tmp_path / "inventory"
    shutil.copytree(cluster.inventory, inventory)
    # The local cluster's own hosts and addresses, the nodes in the groups of their machine kind.
    hosts = {"all": {"children": {
        "login": {"hosts": {"login01": {"ansible_host": cluster.hosts["login01"]["address"]}}},
        "submit": {"children": {"login": {}}},
        "nas": {"hosts": {"nas01": {"ansible_host": cluster.hosts["nas01"]["address"]}}},
        "compute": {"children": {group: {"hosts": {node: {"ansible_host": cluster.hosts[node]["address"]}}}
                                 for node, (group, _, _, _) in nodes.items()}}}}}
    (inventory / "hosts.yml").write_text(json.dumps(hosts))
    (inventory / "host_vars").mkdir()
    env_dir = cluster.nas / "env"
    before = {node: cluster.ssh(node, "cat /etc/nccl.conf").stdout for node in nodes}
    shared = Path(tempfile.mkdtemp(prefix="test-nccl-hardware-", dir=cluster.nas))
    try:
        shared.chmod(0o755)
        for node, (_group, tree, _expected, interface) in nodes.items():
            shutil.copytree(SYSFS / tree, shared / tree, symlinks=True)
            # The node's cluster address on the tree's cluster interface (sysfs holds no addresses).
            (inventory / "host_vars" / f"{node}.yml").write_text(json.dumps({
                "nccl_env_sysfs_root": str(shared / tree),
                "nccl_env_ipv4_addresses": {interface: [cluster.hosts[node]["address"]]}}))
        proc = subprocess.run(["ansible-playbook", "-i", str(inventory), "provision.yml", "--limit", "compute"],
                              cwd=REPO, capture_output=True, text=True, timeout=300)
        confs = {node: cluster.ssh(node, "cat /etc/nccl.conf").stdout for node in nodes}
        envs = {group: (env_dir / f"nccl-{group}.sh").read_text() if (env_dir / f"nccl-{group}.sh").exists() else ""
                for group, _, _, _ in nodes.values()}
    finally:
        # The usual cluster for the tests after this one: the nodes' nccl.conf from inventory/local.
        restore = subprocess.run(["ansible-playbook", "-i", str(cluster.inventory), "provision.yml",
                                  "--limit", "compute"], cwd=REPO, capture_output=True, text=True, timeout=300)
        for group, _, _, _ in nodes.values():
            (env_dir / f"nccl-{group}.sh").unlink(missing_ok=True)
        shutil.rmtree(shared)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    for node, (group, _tree, expected, _interface) in nodes.items():
        assert settings_lines(confs[node]) == EXPECTED[expected], (node, confs[node])
        assert f"node group {group}" in confs[node]
        assert conf_and_env_settings(envs[group]) == EXPECTED[expected], (group, envs[group])
    # Neither machine's proposal is warned about (no port left to the admin, no rail down).
    assert "[WARNING]" not in proc.stderr, proc.stderr
    assert restore.returncode == 0, restore.stdout[-4000:] + restore.stderr[-2000:]
    assert {node: cluster.ssh(node, "cat /etc/nccl.conf").stdout for node in nodes} == before
