"""The local cluster as a real site: launches go controller -> login01 over SSH as an ordinary
user -> sbatch; the nodes do not see the controller's checkout, so the job runs the code the
launch staged onto the NAS; users have private job directories that others cannot plant or read;
compute nodes refuse SSH to a user without a job there (pam_slurm_adopt)."""

import json
import subprocess
import threading
import uuid
from pathlib import Path

import pytest

from cluster import REPO, local_cluster, write_inventory
from launch import TRAINER, launch, next_job_id, outputs_of, unique_job_name

QUICK = json.dumps({"script_args": "--steps 4 --log-every 2"})


def as_user(cluster, user, command, check=False):
    return cluster.ssh("login01", command, check=check, user=user)


def test_the_job_runs_the_staged_code_which_the_nodes_see_and_the_checkout_they_do_not(cluster, tmp_path):
    name = unique_job_name("staged")
    proc = launch(tmp_path, "nodes=node110,node111", f"script={TRAINER}", "nproc_per_node=1", f"job_name={name}", QUICK)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    folder, job = outputs_of(tmp_path, name)
    assert (job["state"], job["user"]) == ("COMPLETED", "alice")
    code = job["code"]
    staged = f"/starmap/nas/jobs/alice/{name}/code/{code['hash']}"
    assert code["source"] == "git" and len(code["git_commit"]) == 40 and code["copied"] is True
    script = (folder / f"{name}-{job['job_id']}.sbatch").read_text()
    # Named from the run's directory (runs/<id>/), which the nodes see as the login host does.
    assert f"../../code/{code['hash']}/train_ddp.py" in script and str(REPO) not in script
    assert "[rank0] training complete steps=4" in (folder / f"{name}-{job['job_id']}.out").read_text()
    for host in ("node110", "login01"):
        seen = cluster.ssh(host, f"test -e {REPO}/{TRAINER} && echo visible || echo hidden; "
                                 f"test -e {staged}/train_ddp.py && echo staged").stdout.split()
        assert seen == ["hidden", "staged"], f"{host}: {seen}"


def test_unchanged_code_is_not_copied_again_and_a_change_is(cluster, tmp_path):
    code_dir = tmp_path / "code"
    code_dir.mkdir()
    (code_dir / "train.py").write_text((REPO / TRAINER).read_text())
    (code_dir / "helper.py").write_text("VALUE = 1\n")
    name = unique_job_name("copyonce")
    request = ["nodes=node110", f"script={code_dir / 'train.py'}", "nproc_per_node=1", f"job_name={name}",
               "wait=false", "force=true"]
    first = launch(tmp_path / "o1", *request)
    assert first.returncode == 0, first.stdout + first.stderr
    again = launch(tmp_path / "o2", *request)
    assert again.returncode == 0, again.stdout + again.stderr
    code_root = cluster.nas / "jobs" / "alice" / name / "code"
    # Each hash's directory, beside its read-only manifest.
    hashes = sorted(p.name for p in code_root.iterdir() if p.is_dir())
    assert len(hashes) == 1, hashes
    # The second launch found the code there and says so; the copy on the NAS is not touched.
    assert f"code {hashes[0]} (2 files) copied to the NAS" in first.stdout, first.stdout
    assert f"code {hashes[0]} (2 files) already on the NAS, not copied" in again.stdout, again.stdout
    copy_time = (code_root / hashes[0] / "helper.py").stat().st_mtime_ns
    (code_dir / "helper.py").write_text("VALUE = 2\n")
    third = launch(tmp_path / "o3", *request)
    assert third.returncode == 0, third.stdout + third.stderr
    assert len([p for p in code_root.iterdir() if p.is_dir()]) == 2, "changed code goes to a directory of its own hash"
    assert (code_root / hashes[0] / "helper.py").stat().st_mtime_ns == copy_time
    assert {(d / "helper.py").read_text() for d in code_root.iterdir() if d.is_dir()} == {"VALUE = 1\n", "VALUE = 2\n"}
    cluster.slurm("scancel", "-n", name, check=False)


def test_two_users_launch_the_same_job_name_at_once_into_their_own_private_directories(cluster, tmp_path):
    name = unique_job_name("shared-name")
    # The token from the controller's environment: never on a command line.
    request = ["nodes=node110", f"script={TRAINER}", "nproc_per_node=1", f"job_name={name}",
               json.dumps({"script_args": "--steps 4 --log-every 2"}), "env_from=HF_TOKEN"]
    procs = {}

    def run(user):
        procs[user] = launch(tmp_path / user, *request, f"ansible_user={user}", env={"HF_TOKEN": "hf_secret"})
    threads = [threading.Thread(target=run, args=(user,)) for user in ("alice", "bob")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    jobs = {}
    for user in ("alice", "bob"):
        assert procs[user].returncode == 0, procs[user].stdout + procs[user].stderr
        folder, jobs[user] = outputs_of(tmp_path / user, name)
        assert jobs[user]["user"] == user and jobs[user]["state"] == "COMPLETED"
        assert folder.stat().st_mode & 0o777 == 0o700, "the outputs carry a token: for the user alone"
        checkpoint = cluster.nas / "jobs" / user / name / "runs" / "1" / "checkpoints" / "checkpoint.pt"
        assert checkpoint.exists(), f"{user}'s own checkpoint"
    assert jobs["alice"]["job_id"] != jobs["bob"]["job_id"]
    alice_dir = f"/starmap/nas/jobs/alice/{name}/runs/1"
    assert "resumed from step" not in (cluster.nas / "jobs" / "bob" / name / "runs" / "1" / f"{name}-{jobs['bob']['job_id']}.out").read_text()
    # From bob's side, as bob: nothing of alice's job can be read.
    for path in (f"{alice_dir}/{name}.sbatch", f"{alice_dir}/{name}-{jobs['alice']['job_id']}.out"):
        seen = as_user(cluster, "bob", f"cat {path}")
        assert seen.returncode != 0 and "Permission denied" in seen.stderr, seen.stdout + seen.stderr
        assert "hf_secret" not in seen.stdout
    mode = as_user(cluster, "alice", f"stat -c %a {alice_dir}/{name}.sbatch").stdout.strip()
    assert mode == "600", "a script with env values is the user's alone, even in a group-shared directory"


@pytest.mark.parametrize("plant, refusal", [
    ("ln -s {trap} {jobs}/alice", "{jobs}/alice is a symbolic link"),
    ("mkdir -m 0777 {jobs}/alice", "{jobs}/alice belongs to bob, not to alice"),
])
def test_a_link_or_a_directory_bob_planted_at_alices_path_is_refused_before_anything_is_written(
        cluster, tmp_path, plant, refusal):
    # A jobs root of its own, as provision.yml makes one (the NAS owner's, 1777), where alice has
    # not launched yet: bob, who may write there, gets in first.
    # The run's own name: the NAS is shared with other runs of this test.
    jobs = cluster.nas / f"jobs-planted-{uuid.uuid4().hex[:8]}"
    jobs.mkdir()
    try:
        owner = cluster.report["nas_owner"]
        subprocess.run(["chown", f"{owner}:{owner}", str(jobs)], check=True)
        jobs.chmod(0o1777)
        trap = f"{jobs}/bob-trap"
        as_user(cluster, "bob", f"mkdir -m 0777 {trap} && " + plant.format(trap=trap, jobs=jobs), check=True)
        before = next_job_id(cluster)
        proc = launch(tmp_path, "nodes=node110", f"script={TRAINER}", "job_name=planted", "nproc_per_node=1",
                      f"slurm_launch_jobs_dir={jobs}", QUICK)
        assert proc.returncode != 0
        assert refusal.format(jobs=jobs) in proc.stdout, proc.stdout[-3000:]
        # Not "choose another job name": the directory is the user's, and only an admin can fix it.
        assert (f"only an admin can fix it: as root or the NAS owner, mv {jobs}/alice {jobs}/alice.planted (or "
                f"remove it), then ansible-playbook provision.yml with alice in cluster_users") in proc.stdout, \
            proc.stdout[-3000:]
        assert next_job_id(cluster) == before, "nothing was submitted"
        assert as_user(cluster, "bob", f"find {jobs} -mindepth 1 -not -user bob").stdout == "", \
            "alice wrote nothing there"
        assert list(Path(trap).iterdir()) == []
    finally:
        subprocess.run(["rm", "-rf", "--one-file-system", str(jobs)], check=False)


def test_another_users_job_given_by_id_is_refused_and_its_output_not_fetched(cluster, tmp_path):
    name = unique_job_name("notyours")
    submitted = as_user(cluster, "bob", f"cd ~ && sbatch --parsable -J {name} -o /home/bob/{name}.out "
                                        "--wrap 'echo bob-private; sleep 5'", check=True)
    job_id = int(submitted.stdout.strip().split(";")[0])
    proc = launch(tmp_path, f"job_id={job_id}")
    assert proc.returncode != 0
    assert f"job {job_id} belongs to bob, not to alice" in proc.stdout, proc.stdout[-3000:]
    assert not list(Path(tmp_path).glob("**/*.out"))


def test_ssh_to_a_compute_node_is_refused_to_a_user_without_a_job_there(cluster):
    refused = cluster.ssh("node110", "hostname", check=False, user="alice")
    assert refused.returncode != 0
    assert "Access denied by pam_slurm_adopt: you have no active jobs on this node" in refused.stderr
    assert cluster.ssh("node110", "hostname").stdout == "node110\n", "root, the admin, still gets in"
    assert cluster.ssh("login01", "hostname", user="alice").stdout == "login01\n"


def test_down_refuses_a_state_dir_without_a_cluster_record_and_removes_nothing(tmp_path, state_dir):
    state = state_dir
    state.mkdir(parents=True)
    (state / "precious.txt").write_text("not a cluster\n")
    inventory = write_inventory(tmp_path / "inv", """\
        all:
          children:
            compute:
              children:
                part:
                  hosts:
                    n1: {ansible_host: 10.79.0.5}
        """, {"cluster_name": "throwaway", "local_cluster_state_dir": str(state), "cluster_nas_root": str(state / "nas"),
              "local_cluster_network": "10.79.0.0/24"})
    proc = local_cluster("down", "-i", str(inventory), check=False)
    assert proc.returncode == 1
    assert f"{state} holds no local cluster record" in proc.stderr and "nothing removed" in proc.stderr
    assert (state / "precious.txt").read_text() == "not a cluster\n"
    up = local_cluster("up", "-i", str(inventory), check=False)
    assert up.returncode == 1 and "is not empty and holds no local cluster record" in up.stderr
    assert sorted(p.name for p in state.iterdir()) == ["precious.txt"]
