"""A NAS that is full or read-only: provision and launch say so, naming the path, before they
write anything or submit a job. Real mounts (tmpfs) stand for the NAS here."""

import json
import subprocess

import pytest

from cluster import REPO
from launch import TRAINER, launch, unique_job_name


@pytest.fixture(params=["full", "read-only"])
def bad_nas(request, tmp_path):
    """A 4 MB filesystem, filled up or mounted read-only."""
    mount_point = tmp_path / request.param
    mount_point.mkdir()
    options = "size=4m" + (",ro" if request.param == "read-only" else "")
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount_point)], check=True)
    try:
        if request.param == "full":
            subprocess.run(["dd", "if=/dev/zero", f"of={mount_point}/filler", "bs=1M", "count=8"],
                           capture_output=True)
        yield request.param, mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)


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
    assert not (mount_point / "jobs").exists()


def test_provisioning_onto_a_bad_nas_stops_before_any_change(cluster, bad_nas):
    kind, mount_point = bad_nas
    proc = subprocess.run(["ansible-playbook", "provision.yml", "-e", json.dumps({"cluster_nas_root": str(mount_point)})],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert f"{mount_point}/cuda/cuda-11.8: {mount_point} " in proc.stdout and expected_words(kind) in proc.stdout
    recap = proc.stdout.rsplit("PLAY RECAP", 1)[1]
    assert "changed=0" in recap and "changed=1" not in recap
    assert "node110" not in recap, "the compute nodes are not touched either"
    assert sorted(p.name for p in mount_point.iterdir()) == ([] if kind == "read-only" else ["filler"])
