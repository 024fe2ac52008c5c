"""library/slurm_job.py for a user who is not root: another user's job given by id, a private
job's umask, and the bounds of what a progress slice shows.

The recorded jobs ran as root (UserId=root(0)), and root may act on any job; here the module
runs as bob (uid 2002) and the record says who owns the job the way scontrol prints it
(src/scontrol/info_job.c: "UserId=%s(%u)").
"""

import os
from types import SimpleNamespace

import pytest
from ansible_collections.hpc.slurm_train.plugins.modules import slurm_job
from test_slurm_job_module import SCONTROL, clock, job_output, run_module, sbatch_argv, script, slurm_cli  # noqa: F401

SACCTMGR = ["sacctmgr", "-n", "-P", "show", "user", "bob", "format=AdminLevel"]
SCANCEL = ["scancel", "1234"]
REFUSAL = ("job 1234 belongs to alice, not to bob: only the job's own user, root or a Slurm operator may follow, "
           "collect or cancel it")


@pytest.fixture
def as_bob(monkeypatch):
    monkeypatch.setattr(slurm_job.os, "geteuid", lambda: 2002)
    monkeypatch.setattr(slurm_job.pwd, "getpwuid", lambda uid: SimpleNamespace(pw_name={2002: "bob"}[uid]))


def owned_by(record, user, uid):
    assert "UserId=root(0) GroupId=root(0)" in record
    return record.replace("UserId=root(0) GroupId=root(0)", f"UserId={user}({uid}) GroupId={user}({uid})")


@pytest.mark.parametrize("state", ["absent", "query", "present"])
def test_another_users_job_is_refused_naming_its_owner_before_anything_is_done(
        slurm_cli, clock, as_bob, job_output, state):
    slurm_cli.answer(SCONTROL, out=owned_by(job_output("running"), "alice", 2001))
    # sacctmgr -n -P prints the AdminLevel column alone: "None" for a plain user.
    slurm_cli.answer(SACCTMGR, out="None\n")
    outcome = run_module({"state": state, "job_id": 1234})
    assert (outcome.failed, outcome.result["msg"]) == (True, REFUSAL)
    assert slurm_cli.argvs == [SCONTROL, SACCTMGR]  # no scancel, no second look


def test_an_unanswered_admin_level_question_refuses_too(slurm_cli, clock, as_bob, job_output):
    slurm_cli.answer(SCONTROL, out=owned_by(job_output("running"), "alice", 2001))
    slurm_cli.answer(SACCTMGR, rc=1, err="sacctmgr: error: Problem talking to the database: Connection refused\n")
    outcome = run_module({"state": "absent", "job_id": 1234})
    assert (outcome.failed, outcome.result["msg"]) == (True, REFUSAL)


@pytest.mark.parametrize("level", ["Operator", "Administrator"])
def test_a_slurm_operator_may_cancel_another_users_job(slurm_cli, clock, as_bob, job_output, level):
    slurm_cli.answer(SCONTROL, out=owned_by(job_output("running"), "alice", 2001))
    slurm_cli.answer(SACCTMGR, out=f"{level}\n")
    slurm_cli.answer(SCANCEL)
    slurm_cli.answer(SCONTROL, out=owned_by(job_output("cancelled"), "alice", 2001))
    slurm_cli.answer(SACCTMGR, out=f"{level}\n")  # each look at the job asks again
    outcome = run_module({"state": "absent", "job_id": 1234})
    assert outcome.failed is False, outcome.result.get("msg")
    assert (outcome.result["changed"], outcome.result["state"]) == (True, "CANCELLED")
    assert slurm_cli.argvs == [SCONTROL, SACCTMGR, SCANCEL, SCONTROL, SACCTMGR]


def test_the_users_own_job_is_acted_on_without_asking_sacctmgr(slurm_cli, clock, as_bob, job_output):
    slurm_cli.answer(SCONTROL, out=owned_by(job_output("running"), "bob", 2002))
    slurm_cli.answer(SCANCEL)
    slurm_cli.answer(SCONTROL, out=owned_by(job_output("cancelled"), "bob", 2002))
    outcome = run_module({"state": "absent", "job_id": 1234})
    assert (outcome.failed, outcome.result["state"]) == (False, "CANCELLED")
    assert slurm_cli.argvs == [SCONTROL, SCANCEL, SCONTROL]


@pytest.fixture
def umask_seen_by_sbatch(slurm_cli):
    """The umask each command ran under; the test's own umask is put back afterwards."""
    seen, run_command, before = [], slurm_cli.run_command, os.umask(0o022)

    def recording(args, **kwargs):
        current = os.umask(0)
        os.umask(current)
        seen.append((args[0], current))
        return run_command(args, **kwargs)

    slurm_cli.run_command = recording
    yield seen
    os.umask(before)


@pytest.mark.parametrize(("private", "umask"), [(True, 0o077), (False, 0o022)])
def test_a_private_jobs_output_is_created_for_its_user_alone(slurm_cli, clock, script, job_output,
                                                            umask_seen_by_sbatch, private, umask):
    # Slurm creates the job's output files with the umask sbatch ran under: 077 keeps them rw-------.
    slurm_cli.answer(["squeue"])
    slurm_cli.answer(["sbatch"], out="1234\n")
    slurm_cli.answer(SCONTROL, out=job_output("completed"))
    outcome = run_module({"script": script, "job_name": "train-ddp", "private_output": private})
    assert outcome.failed is False, outcome.result.get("msg")
    assert ("sbatch", umask) in umask_seen_by_sbatch
    assert slurm_cli.argvs[1][:2] == sbatch_argv(script, "")[:2]


def test_progress_log_lines_may_be_zero_but_not_negative(slurm_cli, clock, job_output):
    assert run_module({"state": "query", "job_id": 1234, "progress_log_lines": -1}).result["msg"] == (
        "progress_log_lines must not be negative, got -1")
    assert slurm_cli.calls == []
    slurm_cli.answer(SCONTROL, out=job_output("completed"))
    outcome = run_module({"state": "query", "job_id": 1234, "progress_log_lines": 0})
    assert (outcome.failed, outcome.result["state"]) == (False, "COMPLETED")
