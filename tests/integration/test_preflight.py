"""The preflight on the default local cluster: it passes on a provisioned cluster and prints the
all-reduce's figures; it fails, naming the node and the setting, and submits nothing, when one
node's interface setting is wrong, when a node lacks its NCCL configuration, or when a node is
drained."""

import re
import shlex
import subprocess

import pytest

from cluster import REPO
from launch import TRAINER, next_job_id, unique_job_name

NODES = "nodes=node110,node111"


def preflight(outputs_dir, *extra_vars, playbook="preflight.yml"):
    argv = ["ansible-playbook", playbook, "-e", f"slurm_launch_outputs_dir={outputs_dir}", "-e", "nproc_per_node=1"]
    for item in extra_vars:
        argv += ["-e", item]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600)


@pytest.fixture
def node111_nccl_conf(cluster):
    """node111's own /etc/nccl.conf (its /etc overlay), put back as it was after the test."""
    original = cluster.ssh("node111", "cat /etc/nccl.conf").stdout
    yield original
    cluster.ssh("node111", f"printf %s {shlex.quote(original)} > /etc/nccl.conf")
    assert cluster.ssh("node111", "cat /etc/nccl.conf").stdout == original


def test_a_provisioned_cluster_passes_and_reports_the_all_reduce_bandwidth(cluster, tmp_path):
    proc = preflight(tmp_path, NODES, '{"slurm_launch_preflight_sizes": [4096, 1048576]}')
    out = proc.stdout
    assert proc.returncode == 0, out[-5000:] + proc.stderr
    summary = (tmp_path / "preflight-gpu_A6000.txt").read_text()
    assert re.search(r"all-reduce\s+job \d+ COMPLETED", out), "the table is printed too"
    for node, address in (("node110", "10.77.0.110"), ("node111", "10.77.0.111")):
        row = re.search(rf"^{node}\s+(.*)$", summary, re.M).group(1)
        assert "CUDA release 11.8" in row and "/envs/magicdrivedit/bin/python" in row, row
        # The interface as `ip addr` names it, then the setting as /etc/nccl.conf spells it ("="
        # asks NCCL for that name exactly).
        assert f"sockets eth0 {address} (NCCL_SOCKET_IFNAME==eth0)" in row and "reaches 1 of 1 nodes" in row, row
        assert "NCCL_SOCKET_IFNAME==eth0\n" in cluster.ssh(node, "cat /etc/nccl.conf").stdout
    assert re.search(r"^all-reduce\s+job \d+ COMPLETED, 2 ranks on node110,node111, gloo", summary, re.M), summary
    figures = re.findall(r"^\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)$", summary, re.M)
    assert [int(size) for size, *_ in figures] == [4096, 1048576], summary
    assert all(float(busbw) > 0 and wrong == "0" for _, _, _, busbw, wrong in figures), summary
    assert "problem" not in summary


@pytest.mark.parametrize("asked", ["preflight=true", "slurm_launch_preflight=true"])
def test_a_wrong_interface_on_one_node_stops_the_launch_before_it_submits(cluster, node111_nccl_conf, tmp_path, asked):
    wrong = node111_nccl_conf.replace("NCCL_SOCKET_IFNAME==eth0", "NCCL_SOCKET_IFNAME==eth9")
    assert wrong != node111_nccl_conf
    cluster.ssh("node111", f"printf %s {shlex.quote(wrong)} > /etc/nccl.conf")
    name = unique_job_name("afterpreflight")
    before = next_job_id(cluster)
    proc = preflight(tmp_path, NODES, asked, f"script={TRAINER}", f"job_name={name}", playbook="launch.yml")
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert ("node111: NCCL_SOCKET_IFNAME names eth9, which node111 does not have up (up: eth0) "
            "(in /etc/nccl.conf; provision.yml writes it anew)") in proc.stdout
    assert "node110: NCCL_SOCKET_IFNAME names" not in proc.stdout
    # One job ran: the node checks; the training was not submitted.
    assert next_job_id(cluster) == before + 1, "nothing but the node check is submitted after a failed preflight"
    assert f"JobName={name} " not in cluster.slurm("scontrol", "show", "job", "-o").stdout
    assert not (cluster.nas / "jobs" / "alice" / name).exists()
    assert "node111: NCCL_SOCKET_IFNAME names eth9" in (tmp_path / "preflight-gpu_A6000.txt").read_text()


def test_a_node_without_its_nccl_configuration_is_named(cluster, node111_nccl_conf, tmp_path):
    cluster.ssh("node111", "rm /etc/nccl.conf")
    before = next_job_id(cluster)
    outputs = tmp_path / "not-made-yet"  # as outputs/ in a fresh clone
    proc = preflight(outputs, NODES)
    assert proc.returncode != 0, proc.stdout[-3000:]
    problem = "node111: /etc/nccl.conf is missing (NCCL reads it on every node); run provision.yml"
    assert problem in proc.stdout
    assert problem in (outputs / "preflight-gpu_A6000.txt").read_text()
    assert "node110: /etc/nccl.conf" not in proc.stdout
    assert next_job_id(cluster) == before + 1, "the node check, and no all-reduce after it"


def test_a_drained_node_is_named_and_nothing_is_checked_on_it(cluster, tmp_path):
    cluster.slurm("scontrol", "update", "nodename=node111", "state=drain", "reason=preflight-test")
    try:
        before = next_job_id(cluster)
        proc = preflight(tmp_path, NODES)
    finally:
        cluster.slurm("scontrol", "update", "nodename=node111", "state=resume")
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert re.search(r"node111 \(drain\w*\) is drain\w*", proc.stdout), proc.stdout[-3000:]
    assert next_job_id(cluster) == before, proc.stdout[-6000:]
