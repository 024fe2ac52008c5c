"""The default local cluster (inventory/local) is a real Slurm cluster of SSH-reachable nodes."""

import uuid
from pathlib import Path

import ansible_runner

from cluster import REPO, local_cluster

INVENTORY_ADDRESSES = {"node110": "10.77.0.110", "node111": "10.77.0.111"}


def test_sinfo_lists_both_nodes_idle_in_their_partition(cluster):
    out = cluster.slurm("sinfo", "-h", "-N", "-o", "%N %P %T").stdout
    assert out.splitlines() == ["node110 gpu_A6000* idle", "node111 gpu_A6000* idle"]


def test_two_node_batch_job_runs_srun_on_both_nodes_with_gpus(cluster, tmp_path):
    out_dir = cluster.nas / "tests" / uuid.uuid4().hex
    out_dir.mkdir(parents=True)
    proc = cluster.slurm(
        "sbatch", "--parsable", "--wait", "-N2", "--ntasks-per-node=1", "-p", "gpu_A6000", "--gres=gpu:8",
        # From a directory the nodes see: they do not see the controller's checkout or /tmp.
        f"--chdir={out_dir}", f"--output={out_dir}/%x-%j.out", "--job-name=hostname",
        "--wrap", 'srun bash -c \'echo "$(hostname) gpus=$CUDA_VISIBLE_DEVICES"\'')
    job_id = proc.stdout.strip()
    lines = sorted((out_dir / f"hostname-{job_id}.out").read_text().split("\n"))
    assert [line for line in lines if line] == ["node110 gpus=0,1,2,3,4,5,6,7", "node111 gpus=0,1,2,3,4,5,6,7"]
    job = cluster.slurm("scontrol", "show", "job", "-o", job_id).stdout
    assert "JobState=COMPLETED" in job and "ExitCode=0:0" in job


def test_ansible_setup_reports_each_nodes_own_hostname_and_address(cluster, tmp_path):
    result = ansible_runner.run(
        private_data_dir=str(tmp_path), inventory=str(REPO / "inventory" / "local"), host_pattern="compute",
        module="ansible.builtin.setup", module_args="gather_subset=!all,network", quiet=True,
        envvars={"ANSIBLE_CONFIG": str(REPO / "ansible.cfg")})
    assert result.rc == 0, result.stdout.read()
    facts = {event["event_data"]["host"]: event["event_data"]["res"]["ansible_facts"]
             for event in result.events if event["event"] == "runner_on_ok"}
    assert sorted(facts) == ["node110", "node111"]
    for node, address in INVENTORY_ADDRESSES.items():
        assert facts[node]["ansible_hostname"] == node
        assert facts[node]["ansible_default_ipv4"]["address"] == address
        assert facts[node]["ansible_default_ipv4"]["interface"] == "eth0"


def test_a_file_in_one_nodes_etc_is_not_seen_elsewhere(cluster):
    name = f"/etc/local-cluster-test-{uuid.uuid4().hex}"
    cluster.ssh("node110", f"echo node110 > {name}")
    try:
        assert cluster.ssh("node110", f"cat {name}").stdout == "node110\n"
        assert cluster.ssh("node111", f"test -e {name}", check=False).returncode == 1
        assert not Path(name).exists()
    finally:
        cluster.ssh("node110", f"rm -f {name}")


def test_each_node_resolves_every_node_and_has_its_own_hostname_file(cluster):
    for node in INVENTORY_ADDRESSES:
        assert cluster.ssh(node, "cat /etc/hostname").stdout == f"{node}\n"
        for other, address in INVENTORY_ADDRESSES.items():
            assert cluster.ssh(node, f"getent hosts {other}").stdout.split() == [address, other]


def test_a_file_on_the_nas_is_seen_by_every_node_at_the_same_path(cluster):
    path = cluster.nas / "tests" / f"shared-{uuid.uuid4().hex}"
    cluster.ssh("node110", f"mkdir -p {path.parent} && echo from-node110 > {path}")
    assert cluster.ssh("node111", f"cat {path}").stdout == "from-node110\n"
    assert path.read_text() == "from-node110\n"


def test_up_again_changes_nothing(cluster):
    before = cluster.pids()
    proc = local_cluster("up", "-i", str(cluster.inventory))
    assert "already up" in proc.stdout
    assert cluster.pids() == before
    assert all(before.values())


def test_status_reports_every_daemon_running(cluster):
    text = local_cluster("status", "-i", str(cluster.inventory)).stdout
    for component in ("munged", "slurmctld", "node110/sshd", "node110/slurmd", "node111/slurmd"):
        assert any(line.split()[0] == component and "pid" in line for line in text.splitlines())
    assert "accounting off" in text
