"""Helpers for tests that drive a local cluster: the tool, its status, Slurm clients, SSH."""

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "bin" / "local-cluster"


def local_cluster(*args, env=None, check=True):
    proc = subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True,
                          env=env, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"local-cluster {' '.join(args)} failed ({proc.returncode}):\n"
                             f"{proc.stdout}{proc.stderr}")
    return proc


def status(inventory):
    return json.loads(local_cluster("status", "-i", str(inventory), "--json").stdout)


class Cluster:
    """A running local cluster, seen through its status report."""

    def __init__(self, inventory):
        self.inventory = Path(inventory)
        self.report = status(inventory)
        self.env = {**os.environ, "SLURM_CONF": self.report["slurm_conf"]}
        self.nodes = {n["name"]: n for n in self.report["nodes"]}
        # Compute nodes and the login and NAS hosts.
        self.hosts = {**self.nodes, **{s["name"]: s for s in self.report.get("services", [])}}
        self.state_dir = Path(self.report["state_dir"])
        self.nas = Path(self.report["nas"])

    def slurm(self, *argv, check=True, timeout=120):
        proc = subprocess.run(list(argv), capture_output=True, text=True, env=self.env, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr}")
        return proc

    def ssh(self, node, command, check=True, user="root"):
        """Run a command on a host over SSH, as Ansible reaches it: root (the admin) or a user."""
        ssh_dir = self.state_dir / "ssh"
        key = ssh_dir / ("id_ed25519" if user == "root" else f"id_ed25519_{user}")
        proc = subprocess.run(
            ["ssh", "-i", str(key), "-o", f"UserKnownHostsFile={ssh_dir / 'known_hosts'}",
             "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
             f"{user}@{self.hosts[node]['address']}", command],
            capture_output=True, text=True, timeout=60)
        if check and proc.returncode != 0:
            raise AssertionError(f"ssh {node} {command!r} failed ({proc.returncode}): {proc.stderr}")
        return proc

    def pids(self):
        return {c["name"]: c["pid"] for c in status(self.inventory)["components"]}


def write_inventory(directory, hosts_yaml, all_vars):
    """An inventory directory like inventory/local: hosts.yml and group_vars/all.yml."""
    directory = Path(directory)
    (directory / "group_vars").mkdir(parents=True, exist_ok=True)
    (directory / "hosts.yml").write_text(textwrap.dedent(hosts_yaml))
    (directory / "group_vars" / "all.yml").write_text(
        "---\n" + "".join(f"{key}: {json.dumps(value)}\n" for key, value in all_vars.items()))
    return directory


def eventually(probe, timeout=30):
    """slurmctld hands finished jobs to slurmdbd asynchronously (seen: about 2.5 s here)."""
    deadline = time.monotonic() + timeout
    while not (value := probe()) and time.monotonic() < deadline:
        time.sleep(0.5)
    return value


def alive(pid):
    """A process that still runs: an exited one waiting for its parent to reap it does not."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def nas_without_provisioning(state, venv):
    """What a launch with cluster_venv needs on a test cluster's NAS: a jobs directory where the
    users make their own (1777, as sites provisioned before provision.yml made it 0711 with each
    user's directory: a launch works in either) and a virtualenv whose packages come from the
    cluster's channel."""
    nas = Path(state) / "nas"
    (nas / "jobs").mkdir(exist_ok=True)
    (nas / "jobs").chmod(0o1777)
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)],
                   check=True)
    site = next((Path(venv) / "lib").glob("python3*/site-packages"))
    (site / "local-cluster-channel.pth").write_text(f"{Path(state) / 'channel' / 'site-packages'}\n")


# The 3-node cluster of the tests that need a spare node beside a 2-node job (conftest's
# three_nodes): one node group, cpu_bad, one partition of the same name.
THREE_NODES_GROUP = "cpu_bad"
THREE_NODES_HOSTS = """\
    all:
      children:
        submit:
          hosts:
            localhost:
              ansible_connection: local
              ansible_python_interpreter: "{{ ansible_playbook_python }}"
        compute:
          children:
            cpu_bad:
              hosts:
                bad-n1: {ansible_host: 10.87.0.11}
                bad-n2: {ansible_host: 10.87.0.12}
                bad-n3: {ansible_host: 10.87.0.13}
              vars: {cluster_node_cpus: 2}
    """
# Where a test's own cluster keeps its state: not under /tmp, which the cluster's hosts do not see.
OWN_CLUSTERS = Path("/var/lib/ansible-slurm-train/tests")


@contextmanager
def own_cluster(base, name, hosts_yaml, network, ports, accounting=False):
    """A cluster of a test's own beside the shared one, brought up from ``hosts_yaml`` and taken
    down on leaving: ``network`` its subnet and ``ports`` its (slurmctld, slurmdbd, mariadb) ports,
    both apart from every other cluster's; ``base`` a fresh directory of the test's for its
    inventory. Not provisioned: a jobs directory and a virtualenv on its NAS, no NCCL env files
    and no CUDA toolkit, so the jobs source and check none (a launch would refuse the missing env
    file; the GPU check, the missing toolkit)."""
    state = OWN_CLUSTERS / f"{name}-{Path(base).name}"
    venv = state / "nas" / "venv"
    slurmctld, slurmdbd, mariadb = ports
    inventory = write_inventory(Path(base) / "inv", hosts_yaml, {
        "cluster_name": name, "local_cluster_state_dir": str(state), "cluster_nas_root": str(state / "nas"),
        "local_cluster_network": network, "local_cluster_slurmctld_port": slurmctld,
        "local_cluster_slurmdbd_port": slurmdbd, "local_cluster_mariadb_port": mariadb,
        "cluster_slurm_conf": str(state / "etc" / "slurm.conf"), "cluster_venv": str(venv),
        "slurm_launch_nccl_env_dir": "", "slurm_launch_cuda_home": ""})
    local_cluster("up", "-i", str(inventory), *(["--accounting"] if accounting else []))
    try:
        nas_without_provisioning(state, venv)
        yield Cluster(inventory)
    finally:
        local_cluster("down", "-i", str(inventory))


def nodes_slurm_would_pick(cluster, partition, count):
    """The ``count`` nodes Slurm would give a job of ``partition`` now, left to itself, in its order
    (the first is the batch host)."""
    answer = cluster.slurm("sbatch", "--test-only", f"-N{count}", "-p", partition, "--wrap", "true",
                           check=False).stderr
    hostlist = re.search(r" on nodes (\S+) in partition", answer)
    assert hostlist, answer
    return cluster.slurm("scontrol", "show", "hostnames", hostlist.group(1)).stdout.split()


def play_recap(stdout):
    """{host: {ok, changed, failed, ...}} from the PLAY RECAP of a run, per host."""
    hosts = {}
    for host, counts in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", stdout.rsplit("PLAY RECAP", 1)[-1], re.M):
        hosts[host] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", counts)}
    return hosts


def task_outcome(stdout, task, host):
    """How a task named `task` ended on `host` in a playbook's output: ok, changed, skipping,
    failed or fatal; None when the task did not run there."""
    block = re.search(rf"^TASK \[[^\]]*{re.escape(task)}[^\]]*\] \**\n(.*?)(?=^TASK |^PLAY |\Z)", stdout, re.M | re.S)
    if not block:
        return None
    found = re.search(rf"^(ok|changed|skipping|failed|fatal): \[{re.escape(host)}[\] ]", block.group(1), re.M)
    return found.group(1) if found else None
