"""A launch on a shared site, attacked from the other user's side: bob against alice
(docs/hostile-input.md, "Launching on a shared site"). Each test runs as bob what bob could do,
then alice's launch, follow or cancel, and checks what bob got."""

import json
import os
import pwd
import re
import subprocess
import threading
import time
import uuid
from pathlib import Path

from cluster import REPO, eventually
from launch import TRAINER, launch, next_job_id, outputs_of, unique_job_name

QUICK = json.dumps({"script_args": "--steps 2 --log-every 1"})
# One process on two CPUs of node110: the cluster's 2 cores are shared with other tests.
SMALL = ["nodes=node110", "nproc_per_node=1", "cpus_per_task=2"]


def as_user(cluster, user, command, check=False):
    return cluster.ssh("login01", command, check=check, user=user)


def jobs_playbook(outputs_dir, *extra_vars, timeout=600):
    argv = ["ansible-playbook", "jobs.yml", "-e", f"slurm_launch_outputs_dir={outputs_dir}"]
    for item in extra_vars:
        argv += ["-e", item]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout)


def followed_job_id(stdout):
    match = re.search(r"-e job_id=(\d+)", stdout)
    assert match, stdout[-3000:]
    return int(match.group(1))


def test_bob_cannot_make_a_users_jobs_directory_and_alice_launches_in_hers(cluster, tmp_path):
    jobs = cluster.nas / "jobs"
    info = jobs.stat()
    assert (info.st_mode & 0o7777, info.st_uid) == (0o711, cluster_uid(cluster.report["nas_owner"]))
    newcomer = f"carol{uuid.uuid4().hex[:6]}"
    try:
        # A user provisioning has not reached yet: bob can neither make their directory (or a link
        # in its place) nor list whose directories there are.
        for command in (f"mkdir {jobs}/{newcomer}", f"ln -s /home/bob {jobs}/{newcomer}", f"ls {jobs}"):
            tried = as_user(cluster, "bob", command)
            assert tried.returncode != 0 and "Permission denied" in tried.stderr, (command, tried.stderr)
        assert not os.path.lexists(jobs / newcomer)
    finally:
        subprocess.run(["rm", "-rf", "--one-file-system", str(jobs / newcomer)], check=False)
    # alice's own is hers, made by provision.yml, and she launches there.
    mine = (jobs / "alice").lstat()
    assert mine.st_uid == cluster_uid("alice") and mine.st_mode & 0o777 == 0o700
    name = unique_job_name("ownroot")
    proc = launch(tmp_path, *SMALL, f"script={TRAINER}", f"job_name={name}", QUICK)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    _, job = outputs_of(tmp_path, name)
    assert (job["state"], job["user"]) == ("COMPLETED", "alice")


def cluster_uid(user):
    return pwd.getpwnam(user).pw_uid


def test_a_token_job_followed_or_cancelled_by_id_keeps_its_outputs_private(cluster, tmp_path):
    token = f"hf_follow_{uuid.uuid4().hex}"
    secrets = tmp_path / "secrets.yml"
    secrets.write_text(f"slurm_launch_env:\n  HF_TOKEN: {token}\n")
    secrets.chmod(0o600)
    name = unique_job_name("tokenfollow")
    submitted = launch(tmp_path / "launched", *SMALL, f"script={TRAINER}", f"job_name={name}", QUICK,
                       f"@{secrets}", "wait=false")
    assert submitted.returncode == 0, submitted.stdout[-3000:] + submitted.stderr
    job_id = followed_job_id(submitted.stdout)
    # The follow the launch suggests, without the env: the job's own files say it is private.
    followed = launch(tmp_path / "followed", f"job_id={job_id}")
    assert followed.returncode == 0, followed.stdout[-3000:] + followed.stderr
    folder, job = outputs_of(tmp_path / "followed", name)
    assert job["state"] == "COMPLETED"
    assert folder.stat().st_mode & 0o777 == 0o700
    modes = {path.name: path.stat().st_mode & 0o777 for path in folder.iterdir()}
    script = f"{name}-{job_id}.sbatch"
    assert script in modes and all(mode == 0o600 for mode in modes.values()), modes
    assert f"export HF_TOKEN={token}" in (folder / script).read_text(), "the token job itself"

    # Cancelled by id (jobs.yml -e cancel=N): the same.
    name = unique_job_name("tokencancel")
    submitted = launch(tmp_path / "launched2", *SMALL, f"script={TRAINER}", f"job_name={name}",
                       json.dumps({"script_args": "--steps 500 --log-every 1"}), f"@{secrets}", "wait=false")
    assert submitted.returncode == 0, submitted.stdout[-3000:] + submitted.stderr
    cancelled = jobs_playbook(tmp_path / "cancelled", f"cancel={followed_job_id(submitted.stdout)}")
    assert cancelled.returncode == 0, cancelled.stdout[-3000:] + cancelled.stderr
    folder, job = outputs_of(tmp_path / "cancelled", name)
    assert folder.stat().st_mode & 0o777 == 0o700
    modes = {path.name: path.stat().st_mode & 0o777 for path in folder.iterdir()}
    assert all(mode == 0o600 for mode in modes.values()), modes


def command_lines_here():
    """Every process's command line on this machine (the controller; the hosts' namespaces share its
    process table), as text."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
            except OSError:
                continue
    return found


# As bob on the login host: every command line he can read, one a line. The token is not in it.
BOBS_LOOK = "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < \"$f\" 2>/dev/null; echo; done"


def test_the_token_is_on_no_command_line_while_the_launch_runs(cluster, tmp_path):
    token = f"hf_cmdline_{uuid.uuid4().hex}"
    name = unique_job_name("tokencmd")
    argv = ["ansible-playbook", "launch.yml", "-e", f"slurm_launch_outputs_dir={tmp_path}", "-e", f"script={TRAINER}",
            "-e", f"job_name={name}", "-e", QUICK, "-e", "env_from=HF_TOKEN"]
    for item in SMALL:
        argv[2:2] = ["-e", item]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "HF_TOKEN": token})
    seen, looks = [], {"here": 0, "bob": 0}
    stop = threading.Event()

    def bob_looks():
        while not stop.is_set():
            listing = as_user(cluster, "bob", BOBS_LOOK).stdout
            looks["bob"] += 1
            seen.extend(line for line in listing.splitlines() if token in line)

    watcher = threading.Thread(target=bob_looks)
    watcher.start()
    try:
        while proc.poll() is None:
            seen.extend(line for line in command_lines_here() if token in line)
            looks["here"] += 1
            time.sleep(0.05)
    finally:
        stop.set()
        watcher.join()
    output = proc.stdout.read()
    assert proc.returncode == 0, output[-3000:]
    assert seen == [], seen
    assert looks["here"] > 20 and looks["bob"] > 1, looks
    folder, job = outputs_of(tmp_path, name)
    assert job["state"] == "COMPLETED"
    assert f"export HF_TOKEN={token}" in (folder / f"{name}-{job['job_id']}.sbatch").read_text(), \
        "the job got the token"


def test_group_mode_refuses_staged_code_a_group_member_patched(cluster, tmp_path):
    # A group-shared site's jobs root of its own (provision.yml's layout), where alice's staged code
    # is group-writable as the old 0770 mode left it, and bob is in that group.
    # Named afresh each run: the NAS outlives a test session that was killed before its cleanup.
    jobs = cluster.nas / f"jobs-{tmp_path.name}-{uuid.uuid4().hex[:8]}"
    jobs.mkdir()
    owner = cluster.report["nas_owner"]
    subprocess.run(["chown", f"{owner}:{owner}", str(jobs)], check=True)
    jobs.chmod(0o711)
    subprocess.run(["install", "-d", "-o", "alice", "-g", "alice", "-m", "0750", str(jobs / "alice")], check=True)
    code_dir = tmp_path / "code"
    code_dir.mkdir()
    (code_dir / "train.py").write_text((REPO / TRAINER).read_text())
    name = unique_job_name("groupcode")
    request = [*SMALL, f"script={code_dir / 'train.py'}", f"job_name={name}", QUICK, f"slurm_launch_jobs_dir={jobs}",
               "slurm_launch_jobs_mode=0750"]
    try:
        first = launch(tmp_path / "o1", *request)
        assert first.returncode == 0, first.stdout[-3000:] + first.stderr
        _, job = outputs_of(tmp_path / "o1", name)
        staged = jobs / "alice" / name / "code" / job["code"]["hash"]
        for path in (jobs / "alice", jobs / "alice" / name, staged.parent, staged):
            subprocess.run(["chgrp", "bob", str(path)], check=True)
        subprocess.run(["chgrp", "bob", str(staged / "train.py")], check=True)
        (staged / "train.py").chmod(0o660)
        canary = f"/tmp/ran-as-alice-{uuid.uuid4().hex[:8]}"
        patched = as_user(cluster, "bob", f"echo 'open(\"{canary}\", \"w\")' >> {staged}/train.py")
        assert patched.returncode == 0, patched.stderr
        before = next_job_id(cluster)
        again = launch(tmp_path / "o2", *request, "force=true")
        assert again.returncode != 0, again.stdout[-3000:]
        assert (f"{staged}/train.py changed since it was staged (it no longer matches its hash "
                f"{job['code']['hash']}): not running it as yours") in again.stdout, again.stdout[-3000:]
        assert next_job_id(cluster) == before, "nothing was submitted"
    finally:
        subprocess.run(["rm", "-rf", "--one-file-system", str(jobs)], check=False)


SQUATTER = """
import socket, sys, time
held = []
for port in map(int, sys.argv[1:]):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("", port)); s.listen(); held.append(s)
    except OSError:
        pass
print("holding", len(held), flush=True)
time.sleep(600)
"""


def test_a_port_bob_holds_on_the_first_node_does_not_fail_alices_job(cluster, tmp_path):
    # bob's one-CPU job on node110 holds the ports the next job ids would have had (20000 + id % 20000).
    first = next_job_id(cluster)
    ports = " ".join(str(20000 + job_id % 20000) for job_id in range(first, first + 40))
    submitted = as_user(cluster, "bob", f"cd ~ && cat > squat.py <<'EOF'\n{SQUATTER}\nEOF\n"
                                        f"sbatch --parsable -w node110 -c 1 --mem=64M -t 15 -o squat-%j.out "
                                        f"--wrap 'python3 squat.py {ports}'", check=True)
    squatter = int(submitted.stdout.strip().split(";")[0])
    try:
        held = eventually(lambda: re.search(r"holding ([0-9]+)",
                                            as_user(cluster, "bob", f"cat ~/squat-{squatter}.out").stdout), timeout=120)
        assert held and int(held.group(1)) >= 30, "bob holds the ports"
        name = unique_job_name("squatted")
        # Not the node's whole memory (Slurm's default), which bob's job holds a little of.
        proc = launch(tmp_path, *SMALL, f"script={TRAINER}", f"job_name={name}", QUICK,
                      json.dumps({"slurm_launch_extra_directives": ["--mem=1G"]}))
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
        folder, job = outputs_of(tmp_path, name)
        assert job["state"] == "COMPLETED"
        port = int(re.search(r"master node110:([0-9]+) ", (folder / f"{name}-{job['job_id']}.out").read_text()).group(1))
        assert str(port) not in ports.split()
    finally:
        as_user(cluster, "bob", f"scancel {squatter}")
