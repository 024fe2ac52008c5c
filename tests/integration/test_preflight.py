"""The preflight on the default local cluster: it passes on a provisioned cluster and prints the
all-reduce's figures; it fails, naming the node and the setting, and submits nothing, when one
node's interface setting is wrong, when a node lacks its NCCL configuration, or when a node is
drained; it refuses a bad NCCL setting of its own, naming it, before it writes or submits anything."""

import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from cluster import REPO
from launch import TRAINER, next_job_id, unique_job_name

NODES = "nodes=node110,node111"
SYSFS = REPO / "tests" / "unit" / "fixtures" / "sysfs"


def preflight(outputs_dir, *extra_vars, playbook="preflight.yml", inventory=None):
    argv = ["ansible-playbook", playbook, "-e", f"slurm_launch_outputs_dir={outputs_dir}", "-e", "nproc_per_node=1"]
    argv += ["-i", str(inventory)] if inventory else []
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


def test_a_hand_edited_nccl_conf_naming_a_missing_hca_names_that_node_alone(cluster, node111_nccl_conf, tmp_path):
    # node111's /etc/nccl.conf edited by hand: IB enabled and an HCA it does not have (the local
    # nodes have none); node110's is what provision.yml wrote.
    edited = node111_nccl_conf.replace("NCCL_IB_DISABLE=1", "NCCL_IB_DISABLE=0") + "NCCL_IB_HCA==mlx5_0:1\n"
    assert "NCCL_IB_DISABLE=0" in edited
    cluster.ssh("node111", f"printf %s {shlex.quote(edited)} > /etc/nccl.conf")
    proc = preflight(tmp_path, NODES)
    assert proc.returncode != 0, proc.stdout[-3000:]
    summary = (tmp_path / "preflight-gpu_A6000.txt").read_text()
    problems = [line.split(None, 1)[1] for line in summary.splitlines() if line.startswith("problem")]
    assert len(problems) == 3, summary
    assert problems[0] == ("node111: NCCL_IB_HCA names mlx5_0:1, which node111 does not have as an active port "
                           "(active: none; HCAs: none) (in /etc/nccl.conf; provision.yml writes it anew)"), summary
    # The nodes are listed in the order Slurm gave them.
    pairs = {"NCCL_IB_DISABLE": ("node110=1", "node111=0", "its own check failed on NCCL_IB_HCA"),
             "NCCL_IB_HCA": ("node110=(unset)", "node111==mlx5_0:1", "its own check of NCCL_IB_HCA failed, above")}
    for problem, (key, (healthy, edited, why)) in zip(problems[1:], pairs.items()):
        listing = re.search(rf"^group gpu_A6000: {key} differs between its nodes \((.*?)\); (.*)$", problem)
        assert listing and sorted(listing.group(1).split(", ")) == [healthy, edited], problem
        assert listing.group(2) == f"node111 is the odd one: {why} (in /etc/nccl.conf; provision.yml writes it anew)"
    assert "every side" not in proc.stdout and "node110 is the odd one" not in proc.stdout


@pytest.mark.parametrize("bad, problem", [
    # A bare string for one interface: the node check would read it character by character.
    ({"nccl_env_ipv4_addresses": {"eth0": "10.77.0.110"}},
     "nccl_env_ipv4_addresses['eth0']='10.77.0.110' is not a list of IPv4 addresses; "
     'give a list, as {"eth0": ["10.77.0.110"]}'),
    ({"nccl_env_cluster_cidr": "10.77.0.0/33"},
     "nccl_env_cluster_cidr='10.77.0.0/33' is no IPv4 network; give it empty or as 10.77.0.0/24"),
], ids=["ipv4-string", "cidr"])
def test_a_bad_nccl_env_setting_is_refused_before_anything_is_written_or_submitted(cluster, tmp_path, bad, problem):
    # Set where a site sets them: the submit host's variables in the inventory (-e takes no nccl_env_ keys).
    inventory = tmp_path / "inventory"
    shutil.copytree(cluster.inventory, inventory)
    with open(inventory / "group_vars" / "login.yml", "a") as login:
        login.write("".join(f"\n{key}: {json.dumps(value)}\n" for key, value in bad.items()))
    # A jobs directory of this test's own, shared as provision.yml makes <nas>/jobs (1777): the node
    # check's directory would be made in it.
    jobs = Path(tempfile.mkdtemp(prefix="test-preflight-settings-", dir=cluster.nas))
    jobs.chmod(0o1777)
    outputs = tmp_path / "not-made-yet"
    try:
        before = next_job_id(cluster)
        proc = preflight(outputs, NODES, f"slurm_launch_jobs_dir={jobs}", inventory=inventory)
        output = proc.stdout + proc.stderr
        assert proc.returncode != 0, output[-3000:]
        assert f"[ERROR]: Task failed: Action failed: {problem}\n" in output, output[-3000:]
        assert "TASK [hpc.slurm_train.nccl_env : Check the NCCL settings the preflight's node check applies.]" in output
        # Refused before Slurm is asked about the nodes, and before anything is made or submitted.
        assert "Look up the nodes" not in output and "Make the node check's directory" not in output, output[-3000:]
        assert list(jobs.iterdir()) == [], "no node-check directory is made"
        assert not outputs.exists(), "no outputs are written"
        assert next_job_id(cluster) == before, "nothing is submitted"
    finally:
        shutil.rmtree(jobs)


@pytest.fixture
def socket_fallback(cluster):
    """Both nodes as IB nodes whose NCCL falls back to sockets: a sysfs tree with an active
    InfiniBand HCA beside the node's real eth0, a group env file that enables IB, and NCCL's own
    log lines of a fallback (NCCL 2.18, "NET/IB : No device found.") that the stand-in CUDA torch
    writes where the job's NCCL would (tests/standins/gpu/python/sitecustomize.py)."""
    # On the NAS, where the job's user (alice) reads it on every node (the nodes have /tmp of their own).
    shared = Path(tempfile.mkdtemp(prefix="test-socket-fallback-", dir=cluster.nas))
    shared.chmod(0o755)
    tree = shared / "sysfs"
    shutil.copytree(SYSFS / "ib_single", tree, symlinks=True)
    eth0 = tree / "devices" / "pci0000:00" / "0000:00:03.0" / "net" / "eth0"
    eth0.mkdir(parents=True)
    (eth0 / "operstate").write_text("up\n")
    (eth0 / "type").write_text("1\n")
    (tree / "class" / "net" / "eth0").symlink_to(os.path.relpath(eth0, tree / "class" / "net"))
    env_dir = shared / "env"
    env_dir.mkdir()
    (env_dir / "nccl-gpu_A6000.sh").write_text("export NCCL_IB_DISABLE=0\nexport NCCL_SOCKET_IFNAME='=eth0'\n")
    for path in [shared, *shared.rglob("*")]:
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)
    log = ("node110:4121:4121 [0] NCCL INFO Bootstrap : Using eth0:10.77.0.110<0>\n"
           "node110:4121:4180 [0] NCCL INFO NET/IB : No device found.\n"
           "node110:4121:4180 [0] NCCL INFO NET/Socket : Using [0]eth0:10.77.0.110<0>\n"
           "node110:4121:4180 [0] NCCL INFO Using network Socket\n")
    for node in ("node110", "node111"):
        cluster.ssh(node, f"printf %s {shlex.quote(log)} > /etc/local-cluster/standin-nccl.log")
    # The running cluster's copy of the stand-in (bin/local-cluster copies it at `up`) is this
    # checkout's for the test: inert where no recorded log is, as for any other job meanwhile.
    installed = cluster.state_dir / "standins" / "gpu" / "python" / "sitecustomize.py"
    before = installed.read_text()
    installed.write_text((REPO / "tests" / "standins" / "gpu" / "python" / "sitecustomize.py").read_text())
    # The submit host's nccl_env_sysfs_root is the one the node check reads (an inventory setting).
    inventory = shared / "inventory"
    shutil.copytree(cluster.inventory, inventory)
    with open(inventory / "group_vars" / "login.yml", "a") as login:
        login.write(f"\nnccl_env_sysfs_root: {tree}\n")
    yield inventory, {"slurm_launch_nccl_env_dir": str(env_dir)}
    for node in ("node110", "node111"):
        cluster.ssh(node, "rm -f /etc/local-cluster/standin-nccl.log")
    installed.write_text(before)
    shutil.rmtree(shared)


def test_a_gpu_preflight_whose_nccl_fell_back_to_sockets_fails_naming_the_node_and_net_socket(
        cluster, socket_fallback, tmp_path):
    inventory, extra = socket_fallback
    proc = preflight(tmp_path, NODES, json.dumps({**extra, "slurm_launch_preflight_sizes": [4096]}), inventory=inventory)
    assert proc.returncode != 0, proc.stdout[-5000:]
    assert (tmp_path / "preflight-gpu_A6000.txt").exists(), proc.stdout[-5000:]
    summary = (tmp_path / "preflight-gpu_A6000.txt").read_text()
    # The sums were right: the all-reduce completed; its network was not.
    assert re.search(r"^all-reduce\s+job \d+ COMPLETED, 2 ranks on node110,node111", summary, re.M), summary
    assert re.search(r"^nccl\s+rank 0 on node110 used network Socket$", summary, re.M), summary
    (problem,) = [line.split(None, 1)[1] for line in summary.splitlines() if line.startswith("problem")]
    assert problem.startswith("node110: the all-reduce's NCCL used NET/Socket, not NET/IB, though NCCL_IB_DISABLE=0 "
                              "and node110 has active ports (mlx5_0:1): a training would run at socket speed "
                              "(rank 0's NCCL: NCCL INFO NET/IB : No device found."), problem
    assert "node110: the all-reduce's NCCL used NET/Socket" in proc.stdout
