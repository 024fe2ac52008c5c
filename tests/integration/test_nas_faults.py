"""A NAS that is full or read-only: provision and launch say so, naming the path, before they
write anything or submit a job. Real mounts (tmpfs) stand for the NAS here."""

import json
import pwd
import shutil
import subprocess
import uuid

import pytest

from cluster import REPO, local_cluster, play_recap
from launch import TRAINER, launch, unique_job_name


@pytest.fixture(params=["full", "read-only"])
def bad_nas(request, cluster):
    """A 4 MB filesystem on the NAS path, filled up or mounted read-only, as the login and NAS
    hosts see it (a mount in their own mount namespaces: the NAS as a site's hosts mount it)."""
    mount_point = cluster.nas / f"fault-{uuid.uuid4().hex[:8]}" / request.param
    mount_point.mkdir(parents=True)
    owner = pwd.getpwnam(cluster.report["nas_owner"])  # the NAS belongs to its service account
    options = f"size=4m,mode=1777,uid={owner.pw_uid},gid={owner.pw_gid}" + (",ro" if request.param == "read-only" else "")
    hosts = ("login01", "nas01")
    try:
        for host in hosts:
            on_host(cluster, host, "mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount_point))
            if request.param == "full":
                on_host(cluster, host, "sh", "-c", f"dd if=/dev/zero of={mount_point}/filler bs=1M count=8 2>/dev/null; true")
        yield request.param, mount_point
    finally:
        for host in hosts:
            on_host(cluster, host, "umount", str(mount_point), check=False)
        shutil.rmtree(mount_point.parent, ignore_errors=True)


def on_host(cluster, host, *argv, check=True):
    return local_cluster("exec", "-i", str(cluster.inventory), host, "--", *argv, check=check)


def expected_words(kind):
    return "MB free, 1024 MB are needed" if kind == "full" else "is not writable (read-only filesystem)"


def test_a_launch_onto_a_bad_nas_is_refused_before_submitting(cluster, tmp_path, bad_nas):
    kind, mount_point = bad_nas
    name = unique_job_name("nas")
    proc = launch(tmp_path / "outputs", "nodes=node110,node111", f"script={TRAINER}",
                  f"job_name={name}", f"slurm_launch_jobs_dir={mount_point}/jobs")
    assert proc.returncode != 0
    assert f"{mount_point}/jobs: {mount_point} " in proc.stdout and expected_words(kind) in proc.stdout
    assert f"JobName={name} " not in cluster.slurm("scontrol", "show", "job", "-o").stdout, "nothing was submitted"
    assert "jobs" not in on_host(cluster, "login01", "ls", "-A", str(mount_point)).stdout


def test_provisioning_onto_a_bad_nas_stops_before_any_change(cluster, bad_nas):
    kind, mount_point = bad_nas
    proc = subprocess.run(["ansible-playbook", "provision.yml", "-e", json.dumps({"cluster_nas_root": str(mount_point)})],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert f"{mount_point}/cuda/cuda-11.8: {mount_point} " in proc.stdout and expected_words(kind) in proc.stdout
    counts = play_recap(proc.stdout)
    # The NAS host stopped at its check; the compute nodes' play never started.
    assert set(counts) == {"localhost", "nas01"}, proc.stdout[-3000:]
    assert [c["changed"] for c in counts.values()] == [0, 0] and counts["nas01"]["failed"] == 1
    seen = on_host(cluster, "nas01", "ls", "-A", str(mount_point)).stdout.split()
    assert seen == ([] if kind == "read-only" else ["filler"])
