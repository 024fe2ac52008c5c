"""Helpers for tests that drive a local cluster: the tool, its status, Slurm clients, SSH."""

import json
import os
import re
import subprocess
import sys
import textwrap
import time
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
