"""Following another user's job: root (the admin) follows bob's job, and alice follows a job
whose name bob shaped (docs/hostile-input.md, "Following another user's job").

bob submits his own jobs with sbatch on the login host, as any user can, then swaps their
files for links to a root-only canary; what root's follow brings to the controller must hold
none of it, and bob's log must reach root's terminal with its escape sequences made visible.
"""

import json
import os
import pwd
import re
import shlex
import stat
import time
import uuid
from pathlib import Path

import pytest

from launch import launch, unique_job_name

FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")
# An OSC title change, a cursor move up and a line erase: what bob's log tried on root's terminal.
ESCAPES = r"\033]0;pwned\007\033[1A\033[2K"


def as_user(cluster, user, command):
    return cluster.ssh("login01", command, user=user)


def owned_file(path, text, user, mode=0o600):
    path.write_text(text)
    entry = pwd.getpwnam(user)
    os.chown(path, entry.pw_uid, entry.pw_gid)
    path.chmod(mode)


def user_dir(path, user):
    """``path`` and the missing directories above it, as the user would make them (0700)."""
    entry = pwd.getpwnam(user)
    missing = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    for directory in reversed(missing):
        directory.mkdir(mode=0o700)
        os.chown(directory, entry.pw_uid, entry.pw_gid)


def submit_as(cluster, user, run_dir, name, log, script):
    """sbatch as ``user`` from ``run_dir``: job ``name``, its output ``log`` (%j: the job id)."""
    out = as_user(cluster, user, f"cd {shlex.quote(str(run_dir))} && sbatch --parsable -J {shlex.quote(name)} "
                                 f"-o {shlex.quote(str(log))} {shlex.quote(str(script))}").stdout
    return int(out.strip().split(";")[0])


def wait_final(cluster, job_id, timeout=300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        record = cluster.slurm("scontrol", "show", "job", "-o", str(job_id)).stdout
        state = re.search(r"JobState=(\S+)", record).group(1)
        if state in FINAL:
            return state
        time.sleep(1)
    raise AssertionError(f"job {job_id} did not end in {timeout} s (nodes busy?)")


@pytest.fixture
def canary(cluster):
    """A root-only file every host sees, and its text."""
    text = f"CANARY-{uuid.uuid4().hex}"
    path = cluster.state_dir / f"canary-{uuid.uuid4().hex[:8]}"
    path.write_text(text + "\n")
    path.chmod(0o600)
    assert as_user(cluster, "bob", f"cat {path} 2>/dev/null || echo unreadable").stdout == "unreadable\n"
    yield path, text
    path.unlink()


def everything_under(folder):
    return b"".join(path.read_bytes() for path in Path(folder).rglob("*") if path.is_file())


def test_root_following_bobs_job_reads_nothing_bob_linked_and_shows_his_escapes_as_text(cluster, tmp_path, canary):
    canary_path, canary_text = canary
    jobs = cluster.nas / "jobs" / "bob"
    runs = {}
    for kind, body in (("escapes", f"printf '{ESCAPES}bob was here\\n'\nexit 3\n"), ("linked-log", "echo plain\n")):
        name = unique_job_name(f"follow-{kind}")
        run_dir = jobs / name / "runs" / "1"
        user_dir(run_dir, "bob")
        owned_file(run_dir / f"{name}.sbatch", f"#!/bin/bash\n{body}", "bob", 0o700)
        runs[kind] = (name, run_dir, submit_as(cluster, "bob", run_dir, name, run_dir / f"{name}-%j.out",
                                               run_dir / f"{name}.sbatch"))
    for name, run_dir, job_id in runs.values():
        wait_final(cluster, job_id)
    # The job ended: bob swaps its script (the job's own copy, cluster_rules.job_script_name, which a
    # follow collects) and, for the second, its log for links to the canary.
    name, run_dir, job_id = runs["escapes"]
    as_user(cluster, "bob", f"ln -sfn {canary_path} {run_dir}/{name}-{job_id}.sbatch")
    name, run_dir, job_id = runs["linked-log"]
    as_user(cluster, "bob", f"ln -sfn {canary_path} {run_dir}/{name}-{job_id}.sbatch && "
                            f"ln -sfn {canary_path} {run_dir}/{name}-{job_id}.out")

    for kind, (name, run_dir, job_id) in runs.items():
        outputs = tmp_path / kind
        proc = launch(outputs, f"job_id={job_id}", "ansible_user=root")
        printed = proc.stdout + proc.stderr
        assert canary_text not in printed
        folder = outputs / f"{name}-{job_id}"
        assert folder.is_dir(), printed[-3000:]
        assert canary_text.encode() not in everything_under(outputs), f"the canary came to the controller ({kind})"
        assert "\x1b" not in printed and "\x07" not in printed, "bob's escapes reached root's terminal"
        record = json.loads((folder / "job.json").read_text())
        assert record["user"] == "bob"
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        assert {path.name: stat.S_IMODE(path.stat().st_mode) for path in folder.iterdir()} == {
            path.name: 0o600 for path in folder.iterdir()}
        assert not (folder / f"{name}-{job_id}.sbatch").exists(), "the linked script is not collected"
        assert f"left out   {run_dir}/{name}-{job_id}.sbatch: a link or not a directory on the way" in proc.stdout
        if kind == "escapes":
            assert proc.returncode != 0 and "ended FAILED, exit code 3" in proc.stdout, printed[-3000:]
            shown = r"\x1b]0;pwned\x07\x1b[1A\x1b[2Kbob was here"
            assert shown in proc.stdout and record["log_tail"] == [shown]
            assert (folder / f"{name}-{job_id}.out").read_bytes().startswith(b"\x1b]0;pwned"), "the log file as written"
        else:
            assert proc.returncode == 0, printed[-3000:]
            assert record["log_tail"] == [] and not (folder / f"{name}-{job_id}.out").exists()


def test_a_job_name_shaped_like_fields_does_not_make_bobs_job_alices(cluster, tmp_path):
    alice = pwd.getpwnam("alice")
    alice_name = unique_job_name("alices")
    alice_run = cluster.nas / "jobs" / "alice" / alice_name / "runs" / "1"
    user_dir(alice_run, "alice")
    alice_log = alice_run / f"{alice_name}-1.out"
    owned_file(alice_log, "alice's training log\n", "alice")
    record = json.dumps({"job_id": 1, "state": "COMPLETED", "exit_code": 0, "restarts": 0}) + "\n"
    owned_file(alice_run / "run.json", record, "alice")

    bob_dir = cluster.nas / "jobs" / "bob" / unique_job_name("spoof")
    user_dir(bob_dir, "bob")
    owned_file(bob_dir / "job.sbatch", "#!/bin/bash\necho bob\n", "bob", 0o700)
    name = f"x UserId=alice({alice.pw_uid}) StdOut={alice_log} Comment="
    job_id = submit_as(cluster, "bob", bob_dir, name, bob_dir / "spoof-%j.out", bob_dir / "job.sbatch")
    wait_final(cluster, job_id)

    proc = launch(tmp_path, f"job_id={job_id}")
    assert proc.returncode != 0
    assert f"job {job_id} belongs to bob, not to alice" in proc.stdout, proc.stdout[-3000:]
    assert (alice_run / "run.json").read_text() == record, "bob's job wrote alice's run record"
    assert not list(tmp_path.rglob("*.out")), "alice's follow collected nothing"
