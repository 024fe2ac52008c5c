"""library/slurm_job.py for a user who is not root: another user's job given by id, a private
job's umask, and the bounds of what a progress slice shows.

The recorded jobs ran as root (UserId=root(0)), and root may act on any job; here the module
runs as bob (uid 2002). Who owns a job is squeue's numeric %U (accounting's UID once slurmctld
forgot the job); the record's UserId, which a job name can fake, is made to say otherwise.
"""

import os
from types import SimpleNamespace

import pytest
from ansible_collections.hpc.slurm_train.plugins.modules import slurm_job
from test_slurm_job_module import SCONTROL, clock, job_output, run_module, sbatch_argv, script, slurm_cli  # noqa: F401

SACCTMGR = ["sacctmgr", "-n", "-P", "show", "user", "bob", "format=AdminLevel"]
OWNER = ["squeue", "-h", "-t", "all", "-j", "1234", "-o", "%U|%j", "--local"]
ACCOUNTING_OWNER = ["sacct", "-j", "1234", "-n", "-P", "-X", "-o", "UID"]
SCANCEL = ["scancel", "1234"]
REFUSAL = ("job 1234 belongs to alice, not to bob: only the job's own user, root or a Slurm operator may follow, "
           "collect or cancel it")


@pytest.fixture
def as_bob(monkeypatch):
    monkeypatch.setattr(slurm_job.os, "geteuid", lambda: 2002)
    monkeypatch.setattr(slurm_job.pwd, "getpwuid", lambda uid: SimpleNamespace(pw_name={2001: "alice", 2002: "bob"}[uid]))


@pytest.fixture
def owners(slurm_cli):
    """Every owner question is scripted here."""
    slurm_cli.identity = None
    return slurm_cli


def owned_by(record, user, uid):
    assert "UserId=root(0) GroupId=root(0)" in record
    return record.replace("UserId=root(0) GroupId=root(0)", f"UserId={user}({uid}) GroupId={user}({uid})")


@pytest.mark.parametrize("state", ["absent", "query", "present"])
def test_another_users_job_is_refused_naming_its_owner_before_anything_is_done(
        owners, clock, as_bob, job_output, state):
    owners.answer(OWNER, out="2001|train-ddp\n")
    # The record's UserId says bob's: squeue's uid, which no job name can change, says alice's.
    owners.answer(SCONTROL, out=owned_by(job_output("running"), "bob", 2002))
    # sacctmgr -n -P prints the AdminLevel column alone: "None" for a plain user.
    owners.answer(SACCTMGR, out="None\n")
    outcome = run_module({"state": state, "job_id": 1234})
    assert (outcome.failed, outcome.result["msg"]) == (True, REFUSAL)
    assert owners.argvs == [OWNER, SCONTROL, SACCTMGR]  # no scancel, no second look


def test_a_job_only_accounting_knows_is_refused_as_its_owners_too(owners, clock, as_bob, slurm_output):
    owners.answer(OWNER, rc=1, err="slurm_load_jobs error: Invalid job id specified\n")
    owners.answer(ACCOUNTING_OWNER, out="2001\n")
    owners.answer(SCONTROL, rc=1, err="slurm_load_jobs error: Invalid job id specified\n")
    owners.answer(["sacct", "--version"], out=slurm_output("22.05/sacct_version.txt"))
    owners.answer(["sacct", "-j", "1234", "-n", "-P", "-D", "-X"],
                  out="1234|train-ddp|COMPLETED|0:0|00:00:05|rec1|None|2026-12-02T14:36:18|2026-12-02T14:36:23|"
                      "/nas/jobs/alice/train-ddp/runs/1|\n")
    owners.answer(SACCTMGR, out="None\n")
    outcome = run_module({"state": "query", "job_id": 1234})
    assert (outcome.failed, outcome.result["msg"]) == (True, REFUSAL)
    assert outcome.result["log_tail"] == []


def test_a_job_whose_owner_nobody_can_tell_is_refused(owners, clock, as_bob, job_output):
    owners.answer(OWNER, rc=1, err="slurm_load_jobs error: Invalid job id specified\n")
    owners.answer(ACCOUNTING_OWNER, rc=1, err="sacct: error: Slurm accounting storage is disabled\n")
    owners.answer(SCONTROL, out=owned_by(job_output("completed"), "bob", 2002))  # gone from squeue: a race
    owners.answer(SACCTMGR, out="None\n")
    outcome = run_module({"state": "query", "job_id": 1234})
    assert outcome.failed is True
    assert outcome.result["msg"].startswith("job 1234: neither slurmctld nor accounting says whose job it is")


def test_an_unanswered_admin_level_question_refuses_too(owners, clock, as_bob, job_output):
    owners.answer(OWNER, out="2001|train-ddp\n")
    owners.answer(SCONTROL, out=owned_by(job_output("running"), "alice", 2001))
    owners.answer(SACCTMGR, rc=1, err="sacctmgr: error: Problem talking to the database: Connection refused\n")
    outcome = run_module({"state": "absent", "job_id": 1234})
    assert (outcome.failed, outcome.result["msg"]) == (True, REFUSAL)


@pytest.mark.parametrize("level", ["Operator", "Administrator"])
def test_a_slurm_operator_may_cancel_another_users_job(owners, clock, as_bob, job_output, level):
    owners.answer(OWNER, out="2001|train-ddp\n")
    owners.answer(SCONTROL, out=owned_by(job_output("running"), "alice", 2001))
    owners.answer(SACCTMGR, out=f"{level}\n")
    owners.answer(SCANCEL)
    owners.answer(SCONTROL, out=owned_by(job_output("cancelled"), "alice", 2001))
    outcome = run_module({"state": "absent", "job_id": 1234})
    assert outcome.failed is False, outcome.result.get("msg")
    assert (outcome.result["changed"], outcome.result["state"], outcome.result["user"]) == (True, "CANCELLED", "alice")
    # A job's owner does not change: asked once.
    assert owners.argvs == [OWNER, SCONTROL, SACCTMGR, SCANCEL, SCONTROL]


def test_the_users_own_job_is_acted_on_without_asking_sacctmgr(owners, clock, as_bob, job_output):
    owners.answer(OWNER, out="2002|train-ddp\n")
    owners.answer(SCONTROL, out=owned_by(job_output("running"), "bob", 2002))
    owners.answer(SCANCEL)
    owners.answer(SCONTROL, out=owned_by(job_output("cancelled"), "bob", 2002))
    outcome = run_module({"state": "absent", "job_id": 1234})
    assert (outcome.failed, outcome.result["state"]) == (False, "CANCELLED")
    assert owners.argvs == [OWNER, SCONTROL, SCANCEL, SCONTROL]


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


def test_an_owner_nobody_can_tell_is_refused_saying_why_accounting_could_not(owners, clock, as_bob, job_output):
    owners.answer(OWNER, rc=1, err="slurm_load_jobs error: Invalid job id specified\n")
    owners.answer(ACCOUNTING_OWNER, rc=1, err="sacct: error: Slurm accounting storage is disabled\n")
    owners.answer(SCONTROL, out=owned_by(job_output("completed"), "bob", 2002))
    owners.answer(SACCTMGR, out="None\n")
    outcome = run_module({"state": "query", "job_id": 1234})
    assert outcome.result["msg"] == (
        "job 1234: neither slurmctld nor accounting says whose job it is (sacct failed: sacct: error: Slurm accounting "
        "storage is disabled): only root or a Slurm operator may follow, collect or cancel it")


def test_an_owner_accounting_does_not_record_is_refused_saying_so(owners, clock, as_bob, job_output):
    owners.answer(OWNER, rc=1, err="slurm_load_jobs error: Invalid job id specified\n")
    owners.answer(ACCOUNTING_OWNER, out="")
    owners.answer(SCONTROL, out=owned_by(job_output("completed"), "bob", 2002))
    owners.answer(SACCTMGR, out="None\n")
    outcome = run_module({"state": "query", "job_id": 1234})
    assert outcome.result["msg"] == (
        "job 1234: neither slurmctld nor accounting says whose job it is (no owner recorded): only root or a Slurm "
        "operator may follow, collect or cancel it")


def test_root_may_act_on_another_users_job_without_asking_sacctmgr(owners, clock, monkeypatch, job_output):
    monkeypatch.setattr(slurm_job.os, "geteuid", lambda: 0)
    monkeypatch.setattr(slurm_job.pwd, "getpwuid", lambda uid: SimpleNamespace(pw_name={0: "root", 2001: "alice"}[uid]))
    owners.answer(OWNER, out="2001|train-ddp\n")
    owners.answer(SCONTROL, out=owned_by(job_output("running"), "alice", 2001))
    owners.answer(SCANCEL)
    owners.answer(SCONTROL, out=owned_by(job_output("cancelled"), "alice", 2001))
    outcome = run_module({"state": "absent", "job_id": 1234})
    assert (outcome.failed, outcome.result["state"], outcome.result["user"]) == (False, "CANCELLED", "alice")
    assert owners.argvs == [OWNER, SCONTROL, SCANCEL, SCONTROL]


def test_a_job_renamed_after_its_owner_was_asked_is_asked_about_again(owners, clock, as_bob, job_output):
    # `scontrol update JobName=` between the owner question and the look: the name no longer matches.
    owners.answer(OWNER, out="2002|train-ddp-old\n")
    owners.answer(SCONTROL, out=owned_by(job_output("running"), "bob", 2002))
    owners.answer(OWNER, out="2002|train-ddp\n")
    owners.answer(SCONTROL, out=owned_by(job_output("running"), "bob", 2002))
    outcome = run_module({"state": "query", "job_id": 1234})
    assert (outcome.failed, outcome.result["state"]) == (False, "RUNNING"), outcome.result.get("msg")
    assert owners.argvs == [OWNER, SCONTROL, OWNER, SCONTROL]


def test_in_auto_mode_an_accounting_that_does_not_answer_the_owner_question_is_asked_once(owners, clock, as_bob,
                                                                                        job_output):
    owners.answer(OWNER, rc=1, err="slurm_load_jobs error: Invalid job id specified\n")
    owners.answer(ACCOUNTING_OWNER, rc=1, err="sacct: error: slurmdbd: Socket timed out on send/recv operation\n")
    owners.answer(SCONTROL, out=owned_by(job_output("completed"), "bob", 2002))
    owners.answer(SACCTMGR, out="None\n")
    outcome = run_module({"state": "query", "job_id": 1234})
    assert outcome.result["msg"] == (
        "job 1234: neither slurmctld nor accounting says whose job it is (sacct failed: sacct: error: slurmdbd: "
        "Socket timed out on send/recv operation): only root or a Slurm operator may follow, collect or cancel it")
    assert owners.argvs == [OWNER, ACCOUNTING_OWNER, SCONTROL, SACCTMGR]


def test_an_operator_reads_another_users_log_inside_the_jobs_directory(owners, clock, as_bob, job_output, tmp_path,
                                                                      monkeypatch):
    # bob, an operator, follows alice's job: her log is read through run_records/alice/, each step hers.
    if os.getuid() != 0:  # as_bob stands in for geteuid only
        pytest.skip("making alice's files needs root")
    run_dir = tmp_path / "jobs" / "alice" / "train-ddp" / "runs" / "1"
    run_dir.mkdir(parents=True)
    (run_dir / "train-ddp-1234.out").write_text("step 1\nstep 2\n")
    for path in (tmp_path / "jobs" / "alice", run_dir.parent.parent, run_dir.parent, run_dir,
                 run_dir / "train-ddp-1234.out"):
        os.chown(path, 2001, 2001)
    owners.answer(OWNER, out="2001|train-ddp\n")
    owners.answer(SCONTROL, out=owned_by(job_output("running", run_dir=str(run_dir)), "alice", 2001))
    owners.answer(SACCTMGR, out="Operator\n")
    outcome = run_module({"state": "query", "job_id": 1234, "run_records": str(tmp_path / "jobs")})
    assert (outcome.failed, outcome.result["user"]) == (False, "alice"), outcome.result.get("msg")
    assert outcome.result["log_tail"] == ["step 1", "step 2"]


def test_a_job_whose_name_and_squeues_disagree_twice_is_not_taken_for_it(owners, clock, as_bob, job_output):
    # The id's job and its name as squeue says differ again after the second question: no job is
    # followed under a name it does not have.
    owners.answer(OWNER, out="2002|train-ddp-old\n")
    owners.answer(SCONTROL, out=owned_by(job_output("running"), "bob", 2002))
    owners.answer(OWNER, out="2002|train-ddp-other\n")
    owners.answer(SCONTROL, out=owned_by(job_output("running"), "bob", 2002))
    outcome = run_module({"state": "query", "job_id": 1234})
    assert outcome.failed is True
    assert outcome.result["msg"].endswith("is not 'train-ddp-other', the name squeue gave (renamed since?)")
