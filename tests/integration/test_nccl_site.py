"""NCCL settings on the default local cluster when a node is not like the others: an extra
interface up on another subnet (as a storage NIC would be) changes nothing, and a node given a
host override its group does not share is named and left out while the others are provisioned.

The extra interface is a veth pair made inside node111's network namespace; its sysfs entry
(class/net/stor0, operstate up) is the kernel's own, as the nccl_network_facts module reads it."""

import json
import shutil
import subprocess

import pytest

from cluster import REPO, local_cluster, play_recap

EXTRA = "stor0"
# Another subnet than the cluster network (10.77.0.0/24): TEST-NET-1, as a storage NIC's might be.
EXTRA_ADDRESS = "192.0.2.5/24"


def on_host(cluster, host, *argv, check=True):
    return local_cluster("exec", "-i", str(cluster.inventory), host, "--", *argv, check=check)


@pytest.fixture
def extra_interface(cluster):
    on_host(cluster, "node111", "ip", "link", "del", EXTRA, check=False)
    on_host(cluster, "node111", "ip", "link", "add", EXTRA, "type", "veth", "peer", "name", EXTRA + "p")
    try:
        on_host(cluster, "node111", "ip", "addr", "add", EXTRA_ADDRESS, "dev", EXTRA)
        for name in (EXTRA, EXTRA + "p"):
            on_host(cluster, "node111", "ip", "link", "set", name, "up")
        assert "state UP" in on_host(cluster, "node111", "ip", "-o", "link", "show", EXTRA).stdout
        yield EXTRA
    finally:
        # Deleting one end of a veth pair deletes both.
        on_host(cluster, "node111", "ip", "link", "del", EXTRA, check=False)


def provision_nodes(inventory, *extra):
    # Only the compute nodes' play: the NAS is provisioned already (the cluster fixture).
    return subprocess.run(["ansible-playbook", "-i", str(inventory), "provision.yml", "--limit", "compute", *extra],
                          cwd=REPO, capture_output=True, text=True, timeout=600)


def nccl_conf(cluster, node):
    return cluster.ssh(node, "cat /etc/nccl.conf").stdout


def env_files(cluster):
    return {path.name: path.read_text() for path in sorted((cluster.nas / "env").glob("nccl-*.sh"))}


def test_an_extra_interface_on_another_subnet_keeps_the_cluster_networks_settings(cluster, extra_interface):
    proc = provision_nodes(cluster.inventory)
    assert proc.returncode == 0, proc.stdout[-4000:]
    counts = play_recap(proc.stdout)
    assert {node: counts[node]["failed"] for node in ("node110", "node111")} == {"node110": 0, "node111": 0}
    for node in ("node110", "node111"):
        conf = nccl_conf(cluster, node)
        assert "NCCL_SOCKET_IFNAME==eth0\n" in conf, conf
        assert EXTRA not in conf
    assert any("export NCCL_SOCKET_IFNAME==eth0\n" in text for text in env_files(cluster).values())


def test_a_node_with_a_host_override_its_group_lacks_is_named_and_left_out(cluster, extra_interface, tmp_path):
    # NCCL's sockets over the storage interface on node111 alone: the others cannot reach it there.
    inventory = tmp_path / "inventory"
    shutil.copytree(cluster.inventory, inventory)
    (inventory / "host_vars").mkdir(exist_ok=True)
    (inventory / "host_vars" / "node111.yml").write_text(f"nccl_env_host_overrides:\n  NCCL_SOCKET_IFNAME: \"={EXTRA}\"\n")
    before = {node: nccl_conf(cluster, node) for node in ("node110", "node111")}
    try:
        # Drained from the controller, where this cluster's Slurm commands run (SLURM_CONF).
        proc = provision_nodes(inventory, "-e", json.dumps({"nccl_env_drain_outliers": True,
                                                            "nccl_env_slurm_host": "localhost"}))
        shown = cluster.slurm("scontrol", "show", "node", "-o").stdout
    finally:
        cluster.slurm("scontrol", "update", "nodename=node111", "state=resume", check=False)
    lines = {line.split()[0]: line for line in shown.splitlines() if line.startswith("NodeName=")}
    assert "DRAIN" in lines["NodeName=node111"].split("State=")[1].split()[0], proc.stdout[-4000:]
    assert "Reason=nccl_env: NCCL settings disagree with node group gpu_A6000" in lines["NodeName=node111"]
    assert "DRAIN" not in lines["NodeName=node110"].split("State=")[1].split()[0], lines
    assert proc.returncode != 0
    counts = play_recap(proc.stdout)
    assert (counts["node110"]["failed"], counts["node111"]["failed"]) == (0, 1), proc.stdout[-4000:]
    assert ("NCCL_SOCKET_IFNAME differs between its nodes (node110==eth0, node111==stor0); node111 is the odd "
            "one: its nccl_env_host_overrides sets NCCL_SOCKET_IFNAME==stor0, which the rest of its group does not "
            "share") in proc.stdout, proc.stdout[-4000:]
    assert "Leaving node111 out of this run" in proc.stdout
    assert "Leaving node110 out" not in proc.stdout and "node110 is the odd one" not in proc.stdout
    # node110 was provisioned (its conf and the group's env file say eth0); node111's conf is untouched.
    assert "NCCL_SOCKET_IFNAME==eth0\n" in nccl_conf(cluster, "node110")
    assert nccl_conf(cluster, "node111") == before["node111"]
    assert not any(EXTRA in text for text in env_files(cluster).values())
