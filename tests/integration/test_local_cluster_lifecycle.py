"""Clusters of their own: other names, counts and partitions, accounting, a clean `down`,
and bad input refused before anything is made."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from cluster import Cluster, alive, eventually, local_cluster, status, write_inventory

THREE_NODES = """\
    all:
      children:
        compute:
          children:
            cpu_small:
              hosts:
                cpu-a1: {ansible_host: 10.78.0.11}
                cpu-a2: {ansible_host: 10.78.0.12}
              vars: {cluster_node_cpus: 2, cluster_node_memory_mb: 512}
            gpu_t4:
              hosts:
                gpu-b1: {ansible_host: 10.78.0.21}
              vars: {cluster_node_gpus: 2, cluster_node_cpus: 4}
    """


def cluster_vars(state_dir, **extra):
    return {"cluster_name": "alt", "local_cluster_state_dir": str(state_dir),
            "cluster_nas_root": str(state_dir / "nas"), "local_cluster_network": "10.78.0.0/24",
            "local_cluster_slurmctld_port": 26817, "local_cluster_slurmdbd_port": 26819,
            "local_cluster_mariadb_port": 23306, **extra}


def netns_names():
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


def links():
    return subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout


def test_three_node_inventory_with_accounting_builds_that_cluster_and_down_removes_it(tmp_path, state_dir):
    state = state_dir
    inventory = write_inventory(tmp_path / "inv", THREE_NODES, cluster_vars(state))
    etc_slurm = sorted(os.listdir("/etc/slurm")) if Path("/etc/slurm").exists() else None
    local_cluster("up", "-i", str(inventory), "--accounting")
    try:
        alt = Cluster(inventory)
        sinfo = alt.slurm("sinfo", "-h", "-N", "-o", "%N %P %T %G").stdout.splitlines()
        assert sinfo == ["cpu-a1 cpu_small* idle (null)", "cpu-a2 cpu_small* idle (null)",
                         "gpu-b1 gpu_t4 idle gpu:2"]
        out = alt.slurm("srun", "-N2", "-p", "cpu_small", "hostname").stdout
        assert sorted(out.split()) == ["cpu-a1", "cpu-a2"]
        gpus = alt.slurm("srun", "-p", "gpu_t4", "--gres=gpu:2", "printenv", "CUDA_VISIBLE_DEVICES").stdout
        assert gpus == "0,1\n"
        sacct = eventually(lambda: alt.slurm("sacct", "-X", "-n", "-P", "-o",
                                             "Partition,State,ExitCode,NodeList").stdout)
        assert sacct.splitlines() == ["cpu_small|COMPLETED|0:0|cpu-a[1-2]", "gpu_t4|COMPLETED|0:0|gpu-b1"]
        pids = list(alt.pids().values())
        made_links = [alt.report["bridge"]] + [node["veth"] for node in alt.report["nodes"]]
        assert all(link in links() for link in made_links)
        assert all(pids) and len(pids) == 3 * 3 + 4  # per node: namespace, sshd, slurmd
        assert "alt-cpu-a1" in netns_names()
        expected_etc_slurm = sorted(os.listdir("/etc/slurm")) if Path("/etc/slurm").exists() else None
        assert expected_etc_slurm == etc_slurm, "the local cluster must not write /etc/slurm"
    finally:
        local_cluster("down", "-i", str(inventory))
    assert not any(name.startswith("alt-") for name in netns_names().split())
    assert not any(link in links() for link in made_links)
    assert not any(map(alive, pids))
    assert not state.exists()
    assert status(inventory)["up"] is False


def one_partition(hosts, group_vars=None):
    """hosts.yml of one partition `part` holding `hosts` (name -> host vars), as JSON (which is YAML)."""
    part = {"hosts": hosts, **({"vars": group_vars} if group_vars else {})}
    return json.dumps({"all": {"children": {"compute": {"children": {"part": part}}}}})


N1 = {"n1": {"ansible_host": "10.79.0.5"}}

BAD_INVENTORIES = {
    "duplicate address": (one_partition({**N1, "n2": {"ansible_host": "10.79.0.5"}}), {},
                          "hosts n1 and n2 have the same ansible_host 10.79.0.5"),
    "host without ansible_host": (one_partition({**N1, "n2": None}), {}, "host n2 has no ansible_host"),
    "unknown value of a group var": (one_partition(N1, {"cluster_node_gpus": "eight"}), {},
                                     "n1: cluster_node_gpus='eight' is not an integer"),
    "negative count": (one_partition(N1, {"cluster_node_cpus": -4}), {}, "n1: cluster_node_cpus=-4 is out of range"),
    "misspelt group var": (one_partition(N1, {"cluster_node_gpu": 8}), {}, "host n1: unknown variable cluster_node_gpu"),
    "address outside the network": (one_partition({"n1": {"ansible_host": "192.168.200.5"}}), {},
                                    "ansible_host 192.168.200.5 is not a host address of local_cluster_network "
                                    "10.79.0.0/24"),
    "node name with shell metacharacters": (one_partition({"n1;reboot": {"ansible_host": "10.79.0.5"}}), {},
                                            "host 'n1;reboot': a node name must be a host name"),
    "node outside any partition": (json.dumps({"all": {"children": {"compute": {"hosts": N1}}}}), {},
                                   "hosts n1 sit directly in 'compute'"),
    "state dir with ..": (one_partition(N1), {"local_cluster_state_dir": "/var/lib/../../etc"}, "without '..'"),
}


@pytest.mark.parametrize("case", sorted(BAD_INVENTORIES))
def test_bad_inventory_is_refused_before_anything_is_made(tmp_path, case, state_dir):
    hosts, overrides, message = BAD_INVENTORIES[case]
    state = state_dir
    inventory = write_inventory(tmp_path / "inv", hosts, {
        **cluster_vars(state, local_cluster_network="10.79.0.0/24", cluster_name="bad"), **overrides})
    netns_before = netns_names()
    proc = local_cluster("up", "-i", str(inventory), check=False)
    assert proc.returncode == 1
    assert message in proc.stderr
    assert proc.stderr.count("\n") == 1, "one clear line"
    assert not state.exists()
    assert netns_names() == netns_before


def test_an_address_already_in_use_is_refused(cluster, tmp_path, state_dir):
    """A second cluster on the running default cluster's network would steal its addresses."""
    state = state_dir
    inventory = write_inventory(tmp_path / "inv", """\
        all:
          children:
            compute:
              children:
                part:
                  hosts:
                    other1: {ansible_host: 10.77.0.50}
        """, cluster_vars(state, local_cluster_network="10.77.0.0/24", cluster_name="clash"))
    proc = local_cluster("up", "-i", str(inventory), check=False)
    assert proc.returncode == 1
    assert "address 10.77.0.1 is already in use on" in proc.stderr
    assert not state.exists()
    assert cluster.slurm("sinfo", "-h", "-o", "%T").stdout.split() == ["idle"]


def test_up_without_root_fails_with_one_line(tmp_path):
    proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           shutil.which("python3"), str(Path(__file__).parents[2] / "bin" / "local-cluster"),
                           "up"], capture_output=True, text=True, cwd="/")
    assert proc.returncode == 1
    assert proc.stderr == ("local-cluster: 'up' must run as root: it manages network namespaces and Slurm "
                           "daemons (try: sudo bin/local-cluster up ...)\n")


def test_up_with_a_missing_program_names_it_and_its_package(tmp_path, state_dir):
    """A PATH that holds every program the tool needs but slurmd, as on a machine without it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for program in ("ip", "nsenter", "unshare", "mknod", "munged", "mungekey", "sshd", "ssh-keygen",
                    "slurmctld", "sinfo", "scontrol"):
        found = shutil.which(program)
        if found:
            (bin_dir / program).symlink_to(found)
    state = state_dir
    inventory = write_inventory(tmp_path / "inv", THREE_NODES, cluster_vars(state))
    env = {**os.environ, "PATH": str(bin_dir)}
    proc = local_cluster("up", "-i", str(inventory), env=env, check=False)
    assert proc.returncode == 1
    assert "missing programs: slurmd (Debian package slurmd)" in proc.stderr
    assert not state.exists()


def failing_slurmd_path(state_dir):
    """PATH where slurmd is a stand-in that cannot start, so that `up` fails half-way. Beside the
    state dir, not under /tmp: the nodes, where slurmd starts, do not see the controller's /tmp."""
    bin_dir = state_dir.with_name(state_dir.name + "-bin")
    bin_dir.mkdir(parents=True)
    (bin_dir / "slurmd").write_text("#!/bin/sh\necho 'slurmd: fatal: stand-in refuses to start' >&2\nexit 1\n")
    (bin_dir / "slurmd").chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_a_half_failed_up_removes_what_it_made(tmp_path, state_dir):
    state = state_dir
    inventory = write_inventory(tmp_path / "inv", THREE_NODES, cluster_vars(state, cluster_name="half"))
    proc = local_cluster("up", "-i", str(inventory), env=failing_slurmd_path(state_dir), check=False)
    assert proc.returncode == 1
    assert "slurmd of cpu-a1 did not start: slurmd: fatal: stand-in refuses to start" in proc.stderr
    assert "(everything this 'up' made was removed again)" in proc.stderr
    assert not any(name.startswith("half-") for name in netns_names().split())
    assert not state.exists()


def test_down_cleans_up_after_a_failed_up_that_was_kept(tmp_path, state_dir):
    state = state_dir
    inventory = write_inventory(tmp_path / "inv", THREE_NODES, cluster_vars(state, cluster_name="kept"))
    proc = local_cluster("up", "-i", str(inventory), "--keep-failed", env=failing_slurmd_path(state_dir), check=False)
    assert proc.returncode == 1
    report = status(inventory)
    running = [c["pid"] for c in report["components"] if c["running"]]
    assert "kept-cpu-a1" in netns_names() and running, "the failed cluster was kept for its logs"
    local_cluster("down", "-i", str(inventory))
    assert not any(name.startswith("kept-") for name in netns_names().split())
    assert report["bridge"] not in links()
    assert not any(map(alive, running))
    assert not state.exists()
