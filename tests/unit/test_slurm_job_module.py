"""Unit tests of library/slurm_job.py with run_command answering from a script.

The module runs in-process: its arguments come from patch_module_args and
exit_json/fail_json raise instead of exiting, carrying the result.
"""

import functools
import base64
import json
import os
import pwd
import random
import re
import time

import pytest
from ansible_collections.hpc.slurm_train.plugins.modules import slurm_job
from ansible_collections.hpc.slurm_train.plugins.module_utils import bad_nodes
from ansible_collections.hpc.slurm_train.plugins.module_utils import run_cost
import yaml
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

SQUEUE = ["squeue", "-h", "-u", str(os.geteuid()), "-n", "train-ddp", "-o", "%i|%j|%T|%r|%N|%k"]
# --local: 1234 is no federated job id (see FEDERATED_JOB_ID_MIN).
SCONTROL = ["scontrol", "show", "job", "-o", "1234", "--local"]
# The local cluster's sacct (Debian's 22.05.8): no StdOut field, so WorkDir names the job's directory.
SACCT_VERSION = ["sacct", "--version"]
SACCT = ["sacct", "-j", "1234", "-n", "-P", "-D", "-X", "-o",
         "JobID,JobName,State,ExitCode,Elapsed,NodeList,Reason,Start,End,WorkDir,Comment"]
SOCKET_TIMEOUT = (1, "", "slurm_load_jobs error: Socket timed out on send/recv operation\n")
INVALID_JOB_ID = (1, "", "slurm_load_jobs error: Invalid job id specified\n")
SCRIPT_TEXT = "#!/bin/bash\n#SBATCH --ntasks-per-node=1\nsrun python train.py\n"
# Where the recorded jobs ran (fixtures/slurm/README.md).
RECORDED_RUN_DIR = "/var/lib/ansible-slurm-train/rec/nas/runs/train-ddp"
CLUSTERS_RULE = ("the module follows jobs of the local cluster only (its queries have no -M); submit from a host "
                 "of that cluster, or set environment SLURM_CONF to its slurm.conf")


class ModuleExit(Exception):
    def __init__(self, failed, result):
        super().__init__(result.get("msg"))
        self.failed = failed
        self.result = result


# How the module asks who owns a job given by id (squeue's numeric user id and the exact name).
IDENTITY = ["squeue", "-h", "-t", "all", "-j"]
# How the module asks sacct for a final job's attempts (its cost ledger).
COST = ["sacct", "-j"]
COST_FIELDS = "JobIDRaw,JobID,State,ElapsedRaw,AllocTRES,Eligible,Start"


class ScriptedSlurm:
    """run_command stand-in: each call must start with the expected argv, and gets its answer.

    The owner question of a job given by id (IDENTITY) that no test scripted is answered with
    ``identity`` (root's job train-ddp, as the recordings' jobs are) and kept in
    ``identity_calls``, so that the scenarios about following need not script it; a test about
    owners scripts it, or sets ``identity`` to None to have it refused as unexpected."""

    def __init__(self):
        self.script = []
        self.calls = []
        self.identity = "0|train-ddp\n"
        self.identity_calls = []
        # The cost question no test scripted is answered as a cluster without accounting answers it.
        self.cost = (1, "", "sacct: error: Slurm accounting storage is disabled\n")
        self.cost_calls = []

    def answer(self, command, rc=0, out="", err=""):
        self.script.append((command, (rc, out, err)))

    def run_command(self, args, **kwargs):
        assert isinstance(args, list), f"run_command got {args!r}, not an argument list"
        if (self.identity is not None and args[:len(IDENTITY)] == IDENTITY
                and not (self.script and self.script[0][0][:len(IDENTITY)] == IDENTITY)):
            self.identity_calls.append(args)
            return 0, self.identity, ""
        if (self.cost is not None and args[:2] == COST and COST_FIELDS in args
                and not (self.script and COST_FIELDS in self.script[0][0])):
            self.cost_calls.append(args)
            return self.cost
        self.calls.append({"argv": args, **kwargs})
        assert self.script, f"unexpected command {args}"
        expected, answer = self.script.pop(0)
        assert args[:len(expected)] == expected, f"expected {expected}, got {args}"
        return answer

    @property
    def argvs(self):
        return [call["argv"] for call in self.calls]


class FakeClock:
    """time.sleep/time.monotonic for the module: sleeping only moves the clock."""

    def __init__(self):
        self.now = 1000.0
        self.sleeps = []

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def slurm_cli(monkeypatch):
    cli = ScriptedSlurm()
    monkeypatch.setattr(basic.AnsibleModule, "run_command", lambda module, args, **kw: cli.run_command(args, **kw))

    def exit_json(module, **result):
        raise ModuleExit(False, result)

    def fail_json(module, msg, **result):
        raise ModuleExit(True, {"msg": msg, **result})

    monkeypatch.setattr(basic.AnsibleModule, "exit_json", exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", fail_json)
    yield cli
    assert cli.script == [], "scripted answers left unused"


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(slurm_job, "time", fake)
    return fake


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train-ddp.sbatch"
    path.write_text(SCRIPT_TEXT)
    return str(path)


@pytest.fixture
def comment():
    return "fingerprint:" + slurm_job.job_fingerprint("train-ddp", SCRIPT_TEXT.encode())


@pytest.fixture
def job_output(slurm_output):
    """A recorded ``scontrol show job -o`` line as the record of job 1234 (or ``job_id``).

    The recordings come from several jobs of the local cluster; a scenario follows one job,
    so it gets one id (and, with ``run_dir``, its output files where the test can write them).
    Every other value is as recorded.
    """

    def read(state, job_id=1234, run_dir=None):
        text = slurm_output(f"scontrol_show_job_{state}.txt")
        text = re.sub(r"^JobId=\d+ ", f"JobId={job_id} ", text)
        text = re.sub(r"train-ddp-\d+\.out", f"train-ddp-{job_id}.out", text)
        return text.replace(RECORDED_RUN_DIR, run_dir) if run_dir else text

    return read


@pytest.fixture
def sacct_output(slurm_output):
    """A recorded sacct output as that of job 1234: its JobID column rewritten, and the WorkDir
    column that the module also asks for put before Comment (the recordings' -o had no WorkDir;
    each recorded job ran in RECORDED_RUN_DIR), or ``work_dir``."""

    def read(name, job_id=1234, work_dir=RECORDED_RUN_DIR):
        text = re.sub(r"^\d+\|", f"{job_id}|", slurm_output(name), flags=re.MULTILINE)
        return re.sub(r"^((?:[^|\n]*\|){9})", lambda match: f"{match.group(1)}{work_dir}|", text, flags=re.MULTILINE)

    return read


def answer_sacct_version(slurm_cli, slurm_output, version="22.05"):
    slurm_cli.answer(SACCT_VERSION, out=slurm_output(f"{version}/sacct_version.txt"))


def run_module(args, check_mode=False):
    """The module run with ``args`` as its action plugin passes them: the protocol's (INTERNAL_SPEC)
    under `internal`."""
    internal = {key: args[key] for key in slurm_job.INTERNAL_SPEC if key in args}
    args = {key: value for key, value in args.items() if key not in slurm_job.INTERNAL_SPEC}
    if internal:
        args["internal"] = internal
    if check_mode:
        args = {**args, "_ansible_check_mode": True}
    with patch_module_args(args), pytest.raises(ModuleExit) as exit_info:
        slurm_job.main()
    return exit_info.value


def sbatch_argv(script, comment, *extra, mode="--parsable"):
    return ["sbatch", mode, "--job-name=train-ddp", f"--comment={comment}", *extra, script]


def test_fingerprint_is_first_16_hex_of_sha256_of_name_and_script():
    # sha256(b"train-ddp" + b"echo hi\n")
    assert slurm_job.job_fingerprint("train-ddp", b"echo hi\n") == "cf9fe7bf478855da"
    assert slurm_job.job_fingerprint("train-ddp2", b"echo hi\n") != slurm_job.job_fingerprint("train-ddp", b"echo hi\n")


def test_submit_and_follow_to_completed(slurm_cli, clock, script, comment, tmp_path, job_output):
    log = tmp_path / "train-ddp-1234.out"
    log.write_text("".join(f"step {n}\n" for n in range(100)))
    completed = job_output("completed", run_dir=str(tmp_path))
    slurm_cli.answer(SQUEUE)
    slurm_cli.answer(["sbatch"], out="1234\n")
    for fixture in ("pending_resources", "pending_resources", "running", "running", "running"):
        slurm_cli.answer(SCONTROL, out=job_output(fixture))
    slurm_cli.answer(SCONTROL, out=completed)

    outcome = run_module({"script": script, "job_name": "train-ddp", "chdir": str(tmp_path),
                          "sbatch_args": ["--nodes=2", "--partition=gpu_A6000"], "log_tail_lines": 3})

    assert outcome.failed is False
    assert slurm_cli.argvs == [
        SQUEUE,
        sbatch_argv(script, comment, "--nodes=2", "--partition=gpu_A6000"),
        *[SCONTROL] * 6,
    ]
    # sbatch runs in chdir with PWD naming it, as a shell there would: the job's shell gets it.
    assert [call["environ_update"] for call in slurm_cli.calls] == [
        {"LC_ALL": "C"}, {"LC_ALL": "C", "PWD": str(tmp_path)}, *[{"LC_ALL": "C"}] * 6]
    assert all(call["expand_user_and_vars"] is False for call in slurm_cli.calls)
    assert slurm_cli.calls[1]["cwd"] == str(tmp_path)
    # Back-off doubles while the state holds and starts over when it changes.
    assert clock.sleeps == [1, 2, 1, 2, 4]
    result = outcome.result
    assert {key: result[key] for key in (
        "changed", "submitted", "found_existing", "timed_out", "job_id", "state", "outcome", "final",
        "exit_code", "exit_signal", "reason", "nodes", "elapsed_seconds", "restarts", "stdout_path",
        "stderr_path", "log_tail", "queries", "state_source", "name", "partition", "test_only",
    )} == {
        "changed": True, "submitted": True, "found_existing": False, "timed_out": False, "job_id": 1234,
        "state": "COMPLETED", "outcome": "succeeded", "final": True, "exit_code": 0, "exit_signal": 0,
        "reason": None, "nodes": ["rec1", "rec2"], "elapsed_seconds": 0, "restarts": 0,
        "stdout_path": str(log), "stderr_path": str(log), "log_tail": ["step 97", "step 98", "step 99"],
        "queries": 8, "state_source": "scontrol", "name": "train-ddp", "partition": "gpu",
        "test_only": None,
    }


def test_failed_job_fails_the_task_naming_exit_code_and_reason(slurm_cli, clock, script, tmp_path, job_output):
    (tmp_path / "train-ddp-1234.out").write_text("Traceback (most recent call last):\nValueError: bad lr\n")
    slurm_cli.answer(SQUEUE)
    slurm_cli.answer(["sbatch"], out="1234\n")
    slurm_cli.answer(SCONTROL, out=job_output("running"))
    slurm_cli.answer(SCONTROL, out=job_output("failed", run_dir=str(tmp_path)))

    outcome = run_module({"script": script, "job_name": "train-ddp"})

    assert outcome.failed is True
    assert outcome.result["msg"] == (
        "Slurm job 1234 ended in state FAILED (exit code 3, signal 0, reason NonZeroExitCode)"
    )
    assert (outcome.result["state"], outcome.result["outcome"], outcome.result["exit_code"]) == ("FAILED", "failed", 3)
    assert outcome.result["log_tail"] == ["Traceback (most recent call last):", "ValueError: bad lr"]
    assert (outcome.result["submitted"], outcome.result["changed"]) == (True, True)


@pytest.mark.parametrize(("fixture", "state", "reason"), [
    ("cancelled", "CANCELLED", "None"), ("timeout", "TIMEOUT", "TimeLimit"),
    ("node_fail", "NODE_FAIL", "NodeDown"), ("out_of_memory", "OUT_OF_MEMORY", "OutOfMemory"),
])
def test_every_unsuccessful_end_fails_the_task(slurm_cli, clock, fixture, state, reason, job_output, slurm_output):
    slurm_cli.answer(SCONTROL, out=job_output(fixture))
    if state == "NODE_FAIL":
        slurm_cli.answer(["sinfo", "-h", "-N", "-o", "%N|%P|%T|%c|%G"], out=slurm_output("sinfo_nodes_down.txt"))
    outcome = run_module({"job_id": 1234})
    assert outcome.failed is True
    assert outcome.result["msg"].startswith(f"Slurm job 1234 ended in state {state} (exit code ")
    assert outcome.result["msg"].endswith(f"reason {None if reason == 'None' else reason})")


def test_identical_pending_job_is_followed_not_resubmitted(slurm_cli, clock, script, comment, job_output):
    slurm_cli.answer(SQUEUE, out=(
        "1230|train-ddp|RUNNING|None|node113|fingerprint:0000000000000000\n"
        f"1234|train-ddp|PENDING|Resources||{comment}\n"
        "1236|train-ddp|PENDING|Priority||(null)\n"
    ))
    slurm_cli.answer(SCONTROL, out=job_output("running"))
    slurm_cli.answer(SCONTROL, out=job_output("completed"))

    outcome = run_module({"script": script, "job_name": "train-ddp"})

    assert outcome.failed is False
    assert slurm_cli.argvs == [SQUEUE, SCONTROL, SCONTROL]
    result = outcome.result
    assert (result["job_id"], result["submitted"], result["found_existing"], result["changed"]) == (1234, False, True, False)
    assert (result["state"], result["queries"]) == ("COMPLETED", 3)


def test_newest_active_copy_wins_and_completing_copies_count(slurm_cli, clock, script, comment, job_output):
    slurm_cli.answer(SQUEUE, out=f"1200|train-ddp|RUNNING|None|node110|{comment}\n1234|train-ddp|COMPLETING|None|node111|{comment}\n")
    slurm_cli.answer(SCONTROL, out=job_output("completed"))
    outcome = run_module({"script": script, "job_name": "train-ddp"})
    assert (outcome.result["job_id"], outcome.result["found_existing"]) == (1234, True)


def test_finished_copy_does_not_stop_a_new_submission(slurm_cli, clock, script, comment, job_output):
    slurm_cli.answer(SQUEUE, out=f"1200|train-ddp|CANCELLED|None|node110|{comment}\n")
    slurm_cli.answer(["sbatch"], out="1234\n")
    slurm_cli.answer(SCONTROL, out=job_output("completed"))
    outcome = run_module({"script": script, "job_name": "train-ddp"})
    assert (outcome.result["submitted"], outcome.result["job_id"]) == (True, 1234)


def test_changed_script_is_a_new_job(slurm_cli, clock, script, comment, job_output):
    with open(script, "a") as handle:
        handle.write("echo one more line\n")
    slurm_cli.answer(SQUEUE, out=f"1200|train-ddp|RUNNING|None|node110|{comment}\n")
    slurm_cli.answer(["sbatch"], out="1234\n")
    slurm_cli.answer(SCONTROL, out=job_output("completed"))
    outcome = run_module({"script": script, "job_name": "train-ddp"})
    assert (outcome.result["submitted"], outcome.result["found_existing"]) == (True, False)
    assert slurm_cli.argvs[1][3] != f"--comment={comment}"


def test_force_submits_a_new_copy_without_asking_squeue(slurm_cli, clock, script, comment, job_output):
    slurm_cli.answer(["sbatch"], out="1234\n")
    slurm_cli.answer(SCONTROL, out=job_output("completed"))

    outcome = run_module({"script": script, "job_name": "train-ddp", "force": True})

    assert slurm_cli.argvs == [sbatch_argv(script, comment), SCONTROL]
    assert (outcome.result["submitted"], outcome.result["found_existing"], outcome.result["changed"]) == (True, False, True)


def test_check_mode_predicts_with_test_only_and_submits_nothing(slurm_cli, clock, script, comment, slurm_output):
    slurm_cli.answer(SQUEUE)
    slurm_cli.answer(["sbatch", "--test-only"], err=slurm_output("sbatch_test_only.stderr"))

    outcome = run_module({"script": script, "job_name": "train-ddp", "sbatch_args": ["--nodes=2"]}, check_mode=True)

    assert outcome.failed is False
    assert slurm_cli.argvs == [SQUEUE, sbatch_argv(script, comment, "--nodes=2", mode="--test-only")]
    result = outcome.result
    assert (result["changed"], result["submitted"], result["job_id"], result["queries"]) == (True, False, None, 2)
    assert result["test_only"] == {"job_id": 20, "start": "2026-12-02T14:41:03", "processors": 2,
                                   "nodes": ["rec1", "rec2"], "partition": "gpu", "cluster": None}


def test_check_mode_with_an_identical_job_queued_is_unchanged(slurm_cli, clock, script, comment, job_output):
    slurm_cli.answer(SQUEUE, out=f"1234|train-ddp|PENDING|Resources||{comment}\n")
    slurm_cli.answer(SCONTROL, out=job_output("pending_resources"))

    outcome = run_module({"script": script, "job_name": "train-ddp"}, check_mode=True)

    assert slurm_cli.argvs == [SQUEUE, SCONTROL]  # looked once, did not follow
    assert (outcome.result["changed"], outcome.result["found_existing"], outcome.result["state"]) == (False, True, "PENDING")
    assert clock.sleeps == []


def test_check_mode_fails_with_the_message_of_test_only(slurm_cli, clock, script, slurm_output):
    slurm_cli.answer(SQUEUE)
    slurm_cli.answer(["sbatch", "--test-only"], rc=1, err=slurm_output("sbatch_test_only_unsatisfiable.stderr"))
    outcome = run_module({"script": script, "job_name": "train-ddp", "sbatch_args": ["--nodes=9"]}, check_mode=True)
    assert outcome.failed is True
    # Slurm 22.05 says so without the "sbatch: error:" prefix of a refused submission.
    assert outcome.result["msg"] == ("sbatch --test-only failed (rc=1): allocation failure: "
                                     "Requested node configuration is not available")


def test_transient_error_is_retried_then_succeeds(slurm_cli, clock, job_output):
    slurm_cli.answer(SCONTROL, *SOCKET_TIMEOUT)
    slurm_cli.answer(SCONTROL, *SOCKET_TIMEOUT)
    slurm_cli.answer(SCONTROL, out=job_output("completed"))

    outcome = run_module({"state": "query", "job_id": 1234})

    # The owner question (squeue), then three tries.
    assert (outcome.failed, outcome.result["state"], outcome.result["queries"]) == (False, "COMPLETED", 4)
    assert len(clock.sleeps) == 2
    assert 0.5 <= clock.sleeps[0] <= 0.55 and 1.0 <= clock.sleeps[1] <= 1.1


def test_persistent_controller_outage_fails_after_the_retries(slurm_cli, clock):
    for _ in range(5):
        slurm_cli.answer(SCONTROL, *SOCKET_TIMEOUT)
    outcome = run_module({"state": "query", "job_id": 1234})
    assert outcome.failed is True
    assert outcome.result["msg"] == ("scontrol show job failed (rc=1): "
                                     "slurm_load_jobs error: Socket timed out on send/recv operation")
    assert outcome.result["queries"] == 1 + 5


def test_following_outlives_a_controller_restart(slurm_cli, clock, job_output):
    """More failed tries than one command's retries: following keeps asking, then reports the outage."""
    slurm_cli.answer(SCONTROL, out=job_output("running"))
    for _ in range(8):
        slurm_cli.answer(SCONTROL, *SOCKET_TIMEOUT)
    slurm_cli.answer(SCONTROL, out=job_output("completed"))
    outcome = run_module({"job_id": 1234, "poll_min": 1, "poll_max": 1})
    assert (outcome.failed, outcome.result["state"], outcome.result["queries"]) == (False, "COMPLETED", 1 + 10)
    assert outcome.result["controller_outage_seconds"] > 0


def test_following_gives_up_after_the_controller_timeout(slurm_cli, clock, job_output):
    slurm_cli.answer(SCONTROL, out=job_output("running"))
    for _ in range(15):  # three commands of five tries each: 25.5 s of back-off
        slurm_cli.answer(SCONTROL, *SOCKET_TIMEOUT)
    outcome = run_module({"job_id": 1234, "poll_min": 1, "poll_max": 1, "controller_timeout": 20})
    assert outcome.failed is True
    assert "slurmctld did not answer for" in outcome.result["msg"]
    assert "controller_timeout=20" in outcome.result["msg"]


def test_lost_sbatch_reply_is_not_submitted_twice(slurm_cli, clock, script, comment, job_output):
    # The controller queued the job but the reply timed out; squeue then shows it.
    slurm_cli.answer(SQUEUE)
    slurm_cli.answer(["sbatch"], 1, "", "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation\n")
    slurm_cli.answer(SQUEUE, out=f"1234|train-ddp|PENDING|Priority||{comment}\n")
    slurm_cli.answer(SCONTROL, out=job_output("completed"))

    outcome = run_module({"script": script, "job_name": "train-ddp"})

    assert [argv[0] for argv in slurm_cli.argvs] == ["squeue", "sbatch", "squeue", "scontrol"]
    assert (outcome.result["submitted"], outcome.result["found_existing"], outcome.result["job_id"]) == (False, True, 1234)


def test_sbatch_retried_when_the_controller_did_not_queue_it(slurm_cli, clock, script, slurm_output, job_output):
    connect_failure = slurm_output("sbatch_connect_failure.stderr")
    slurm_cli.answer(SQUEUE)
    slurm_cli.answer(["sbatch"], 1, "", connect_failure)
    slurm_cli.answer(SQUEUE)
    slurm_cli.answer(["sbatch"], out="1234\n")
    slurm_cli.answer(SCONTROL, out=job_output("completed"))

    outcome = run_module({"script": script, "job_name": "train-ddp"})

    assert [argv[0] for argv in slurm_cli.argvs] == ["squeue", "sbatch", "squeue", "sbatch", "scontrol"]
    assert (outcome.result["submitted"], outcome.result["job_id"], outcome.result["queries"]) == (True, 1234, 5)


def test_sbatch_rejection_is_not_retried(slurm_cli, clock, script):
    slurm_cli.answer(SQUEUE)
    slurm_cli.answer(["sbatch"], 1, "", "sbatch: error: Batch job submission failed: Invalid account or "
                                        "account/partition combination specified\n")
    outcome = run_module({"script": script, "job_name": "train-ddp"})
    assert outcome.failed is True
    assert outcome.result["msg"] == ("sbatch failed (rc=1): sbatch: error: Batch job submission failed: "
                                     "Invalid account or account/partition combination specified")
    assert (outcome.result["changed"], outcome.result["submitted"], outcome.result["job_id"]) == (False, False, None)


def test_job_aged_out_of_scontrol_is_found_in_sacct(slurm_cli, clock, job_output, sacct_output, slurm_output,
                                                     tmp_path):
    # Its log is in its job directory (sacct's WorkDir), as templates/train.sbatch.j2 names it.
    log = tmp_path / "train-ddp-1234.out"
    log.write_text("epoch 1\ntraining done\n")
    slurm_cli.answer(SCONTROL, out=job_output("running"))
    slurm_cli.answer(SCONTROL, *INVALID_JOB_ID)
    answer_sacct_version(slurm_cli, slurm_output)
    slurm_cli.answer(SACCT, out=sacct_output("sacct_completed.txt", work_dir=str(tmp_path)))

    outcome = run_module({"job_id": 1234})

    assert outcome.failed is False
    assert slurm_cli.argvs == [SCONTROL, SCONTROL, SACCT_VERSION, SACCT]
    result = outcome.result
    assert {key: result[key] for key in ("state", "state_source", "restarts", "nodes", "elapsed_seconds",
                                          "stdout_path", "stderr_path", "log_tail", "exit_code", "submitted",
                                          "changed")} == {
        "state": "COMPLETED", "state_source": "sacct", "restarts": 0, "nodes": ["rec1", "rec2"],
        "elapsed_seconds": 0, "stdout_path": str(log), "stderr_path": str(log),
        "log_tail": ["epoch 1", "training done"], "exit_code": 0, "submitted": False, "changed": False,
    }


def test_job_in_sacct_without_a_log_in_its_directory_has_none(slurm_cli, clock, sacct_output, slurm_output, tmp_path):
    slurm_cli.answer(SCONTROL, *INVALID_JOB_ID)
    answer_sacct_version(slurm_cli, slurm_output)
    slurm_cli.answer(SACCT, out=sacct_output("sacct_completed.txt", work_dir=str(tmp_path)))
    result = run_module({"state": "query", "job_id": 1234}).result
    assert (result["state"], result["stdout_path"], result["log_tail"]) == ("COMPLETED", None, [])


def test_job_in_sacct_with_slurms_default_log_name(slurm_cli, clock, sacct_output, slurm_output, tmp_path):
    # Submitted without --output (not by a launch): sbatch's default slurm-%j.out in the job's directory.
    (tmp_path / "slurm-1234.out").write_text("done\n")
    slurm_cli.answer(SCONTROL, *INVALID_JOB_ID)
    answer_sacct_version(slurm_cli, slurm_output)
    slurm_cli.answer(SACCT, out=sacct_output("sacct_completed.txt", work_dir=str(tmp_path)))
    result = run_module({"state": "query", "job_id": 1234}).result
    assert (result["stdout_path"], result["log_tail"]) == (str(tmp_path / "slurm-1234.out"), ["done"])


def test_job_dir_log_takes_the_name_only_when_it_is_one_path_component(tmp_path):
    (tmp_path / "x-7.out").write_text("")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "x-7.out").write_text("")
    assert slurm_job.job_dir_log({"work_dir": str(tmp_path), "name": "x", "job_id": 7}) == str(tmp_path / "x-7.out")
    assert slurm_job.job_dir_log({"work_dir": str(tmp_path), "name": "sub/x", "job_id": 7}) is None
    assert slurm_job.job_dir_log({"work_dir": None, "name": "x", "job_id": 7}) is None


def test_sacct_that_cannot_tell_its_version_is_not_asked_in_auto_mode(slurm_cli, clock):
    slurm_cli.answer(SCONTROL, *INVALID_JOB_ID)
    slurm_cli.answer(SACCT_VERSION, out="sacct from the future\n")
    outcome = run_module({"state": "query", "job_id": 1234})
    assert outcome.failed is True
    assert outcome.result["msg"].endswith(
        "and sacct's version is unknown: --version printed 'sacct from the future\\n'; expected 'slurm MAJOR.MINOR.MICRO'")
    assert slurm_cli.argvs == [SCONTROL, SACCT_VERSION]


def test_requeued_job_in_sacct_reports_its_last_run_and_restarts(slurm_cli, clock, sacct_output, slurm_output):
    # Requeued once with 'scontrol requeue', run again, then cancelled: sacct -D prints both runs.
    slurm_cli.answer(SCONTROL, *INVALID_JOB_ID)
    answer_sacct_version(slurm_cli, slurm_output)
    slurm_cli.answer(SACCT, out=sacct_output("sacct_requeued.txt"))

    outcome = run_module({"state": "query", "job_id": 1234})

    assert outcome.failed is False
    result = outcome.result
    assert {key: result[key] for key in ("state", "outcome", "final", "state_source", "restarts", "nodes",
                                          "elapsed_seconds", "reason", "exit_code", "exit_signal")} == {
        "state": "CANCELLED", "outcome": "cancelled", "final": True, "state_source": "sacct", "restarts": 1,
        "nodes": ["rec1", "rec2"], "elapsed_seconds": 12, "reason": "BeginTime", "exit_code": 0, "exit_signal": 0,
    }


def test_unreachable_slurmdbd_is_asked_once_in_auto_mode(slurm_cli, clock, slurm_output):
    slurm_cli.answer(SCONTROL, *INVALID_JOB_ID)
    answer_sacct_version(slurm_cli, slurm_output)
    slurm_cli.answer(SACCT, rc=1, err=slurm_output("sacct_slurmdbd_down.stderr"))

    outcome = run_module({"state": "query", "job_id": 1234})

    assert outcome.failed is True
    assert outcome.result["msg"] == (
        "Slurm does not know job 1234: slurmctld does not list it (finished jobs are kept MinJobAge seconds) "
        "and sacct failed: sacct: error: slurm_persist_conn_open_without_init: failed to open persistent "
        "connection to host:10.86.0.1:46819: Connection refused\nsacct: error: Sending PersistInit msg: "
        "Connection refused\nsacct: error: Problem talking to the database: Connection refused"
    )
    assert clock.sleeps == []


def test_accounting_yes_retries_slurmdbd(slurm_cli, clock, slurm_output, sacct_output):
    down = slurm_output("sacct_slurmdbd_down.stderr")
    slurm_cli.answer(SCONTROL, *INVALID_JOB_ID)
    answer_sacct_version(slurm_cli, slurm_output)
    slurm_cli.answer(SACCT, rc=1, err=down)
    slurm_cli.answer(SACCT, out=sacct_output("sacct_failed.txt"))
    outcome = run_module({"state": "query", "job_id": 1234, "accounting": True})  # YAML's `yes`
    assert (outcome.failed, outcome.result["state"], outcome.result["exit_code"]) == (False, "FAILED", 3)
    assert len(clock.sleeps) == 1


def test_accounting_no_never_runs_sacct(slurm_cli, clock):
    slurm_cli.answer(SCONTROL, *INVALID_JOB_ID)
    outcome = run_module({"state": "query", "job_id": 1234, "accounting": "no"})
    assert outcome.failed is True
    assert outcome.result["msg"].endswith("and accounting=no")
    assert slurm_cli.argvs == [SCONTROL]


def test_job_unknown_everywhere(slurm_cli, clock, slurm_output):
    slurm_cli.answer(SCONTROL, *INVALID_JOB_ID)
    answer_sacct_version(slurm_cli, slurm_output)
    slurm_cli.answer(SACCT, out="")
    outcome = run_module({"state": "query", "job_id": 1234})
    assert outcome.failed is True
    assert outcome.result["msg"].endswith("and accounting has no record of it")


def test_absent_cancels_and_waits_until_final(slurm_cli, clock, job_output):
    slurm_cli.answer(SCONTROL, out=job_output("running"))
    slurm_cli.answer(["scancel"])
    slurm_cli.answer(SCONTROL, out=job_output("running").replace("JobState=RUNNING", "JobState=COMPLETING"))
    slurm_cli.answer(SCONTROL, out=job_output("cancelled"))

    outcome = run_module({"state": "absent", "job_id": 1234})

    assert outcome.failed is False
    assert slurm_cli.argvs == [SCONTROL, ["scancel", "1234"], SCONTROL, SCONTROL]
    assert (outcome.result["changed"], outcome.result["state"], outcome.result["final"]) == (True, "CANCELLED", True)


def test_absent_leaves_a_final_job_alone(slurm_cli, clock, job_output):
    slurm_cli.answer(SCONTROL, out=job_output("completed"))
    outcome = run_module({"state": "absent", "job_id": 1234})
    assert (outcome.failed, outcome.result["changed"], outcome.result["state"]) == (False, False, "COMPLETED")
    assert slurm_cli.argvs == [SCONTROL]


def test_absent_in_check_mode_cancels_nothing(slurm_cli, clock, job_output):
    slurm_cli.answer(SCONTROL, out=job_output("pending_priority"))
    outcome = run_module({"state": "absent", "job_id": 1234}, check_mode=True)
    assert (outcome.result["changed"], outcome.result["state"]) == (True, "PENDING")
    assert slurm_cli.argvs == [SCONTROL]


def test_absent_job_unknown_to_slurm_is_unchanged(slurm_cli, clock):
    slurm_cli.answer(SCONTROL, *INVALID_JOB_ID)
    outcome = run_module({"state": "absent", "job_id": 1234, "accounting": "no"})
    assert outcome.failed is False
    assert (outcome.result["changed"], outcome.result["state"], outcome.result["final"]) == (False, None, True)


def test_query_reports_a_failed_job_without_failing(slurm_cli, clock, job_output):
    slurm_cli.answer(SCONTROL, out=job_output("failed"))
    outcome = run_module({"state": "query", "job_id": 1234})
    assert (outcome.failed, outcome.result["state"], outcome.result["exit_code"]) == (False, "FAILED", 3)


def test_timeout_returns_the_current_state_without_failing(slurm_cli, clock, job_output):
    for _ in range(4):
        slurm_cli.answer(SCONTROL, out=job_output("pending_priority"))

    outcome = run_module({"job_id": 1234, "timeout": 5})

    assert outcome.failed is False
    assert clock.sleeps == [1, 2, 2]  # the last sleep ends at the deadline
    assert (outcome.result["timed_out"], outcome.result["state"], outcome.result["final"]) == (True, "PENDING", False)


def test_wait_false_looks_once_after_submitting(slurm_cli, clock, script, job_output):
    slurm_cli.answer(SQUEUE)
    slurm_cli.answer(["sbatch"], out="12\n")
    # A requeued job, as scontrol shows it after its first run: PENDING (BeginTime) with Restarts=1.
    slurm_cli.answer(["scontrol", "show", "job", "-o", "12"], out=job_output("requeued_pending", job_id=12))
    outcome = run_module({"script": script, "job_name": "train-ddp", "wait": False})
    result = outcome.result
    assert (result["job_id"], result["state"], result["outcome"], result["reason"], result["restarts"],
            result["final"]) == (12, "PENDING", "waiting", "BeginTime", 1, False)
    assert clock.sleeps == []


def test_requeued_job_is_followed_through_completing_and_pending(slurm_cli, clock, job_output):
    # What scontrol showed of job 8 around "scontrol requeue 8": no REQUEUED state, Restarts=1 throughout;
    # the end is the record of cancelled job 4 (job 8's own last record was not kept).
    for state in ("running", "requeued_completing", "requeued_pending", "running_after_requeue"):
        slurm_cli.answer(SCONTROL, out=job_output(state))
    slurm_cli.answer(SCONTROL, out=job_output("cancelled"))
    outcome = run_module({"job_id": 1234})
    assert outcome.failed is True
    assert outcome.result["msg"] == "Slurm job 1234 ended in state CANCELLED (exit code 0, signal 15, reason None)"
    assert clock.sleeps == [1, 1, 1, 1]


def test_environment_reaches_every_command_but_not_lc_all(slurm_cli, clock, job_output):
    slurm_cli.answer(SCONTROL, out=job_output("completed"))
    run_module({"state": "query", "job_id": 1234,
                "environment": {"SLURM_CONF": "/srv/cluster/slurm.conf", "LC_ALL": "de_DE.UTF-8"}})
    assert slurm_cli.calls[0]["environ_update"] == {"SLURM_CONF": "/srv/cluster/slurm.conf", "LC_ALL": "C"}


def test_unknown_state_fails_instead_of_passing(slurm_cli, clock, job_output):
    slurm_cli.answer(SCONTROL, out=job_output("running").replace("JobState=RUNNING", "JobState=EXPLODED"))
    outcome = run_module({"job_id": 1234})
    assert outcome.failed is True
    assert outcome.result["msg"].startswith("unknown Slurm job state 'EXPLODED'; known states: BOOT_FAIL,")


@pytest.mark.parametrize(("args", "message"), [
    ({"job_name": "a;rm -rf /"},
     "invalid job name 'a;rm -rf /': a job name is 1 to 128 letters, digits, '-', '_' or '.', other than '.' and '..'"),
    ({"sbatch_args": ["--job-name=other"]}, "sbatch_args must not contain '--job-name=other': use job_name"),
    ({"sbatch_args": ["--wait"]}, "sbatch_args must not contain '--wait': use wait"),
    ({"sbatch_args": ["--clusters=other"]}, f"sbatch_args must not contain '--clusters=other': {CLUSTERS_RULE}"),
    ({"sbatch_args": ["-M", "other"]}, f"sbatch_args must not contain '-M': {CLUSTERS_RULE}"),
    ({"sbatch_args": ["-Mother"]}, f"sbatch_args must not contain '-Mother': {CLUSTERS_RULE}"),
    ({"environment": {"SLURM_CLUSTERS": "other"}},
     f"environment must not set SLURM_CLUSTERS='other': {CLUSTERS_RULE}"),
    ({"environment": {"SBATCH_CLUSTERS": "other"}},
     f"environment must not set SBATCH_CLUSTERS='other': {CLUSTERS_RULE}"),
    ({"poll_min": 10, "poll_max": 5},
     ("poll_min/poll_max: invalid poll schedule: need 0 < minimum <= maximum and factor >= 1, "
      "got minimum=10.0 maximum=5.0 factor=2.0")),
    ({"timeout": -1}, "timeout must be 0 (no limit) or a number of seconds, got -1"),
    ({"log_tail_lines": -1}, "log_tail_lines must not be negative, got -1"),
    ({"controller_timeout": -1}, "controller_timeout must be 0 or more seconds, got -1"),
    # A short option with its value attached is the same option.
    ({"sbatch_args": ["-Jother"]}, "sbatch_args must not contain '-Jother': use job_name"),
    ({"sbatch_args": ["--exclusive", "-W"]}, "sbatch_args must not contain '-W': use wait"),
    ({"chdir": "/nonexistent/dir"}, "chdir /nonexistent/dir is not a directory"),
])
def test_bad_parameters_fail_before_any_command(slurm_cli, script, args, message):
    outcome = run_module({"script": script, "job_name": "train-ddp", **args})
    assert (outcome.failed, outcome.result["msg"], outcome.result["changed"]) == (True, message, False)
    assert slurm_cli.calls == []


def test_job_sent_to_another_cluster_is_reported_not_followed(slurm_cli, clock, script, slurm_output):
    # sbatch --parsable -M rec prints "12;rec" (a -M in the script, or SLURM_CLUSTERS in the module's
    # own environment): the local slurmctld would not know job 12, so it is not looked for there.
    slurm_cli.answer(SQUEUE)
    slurm_cli.answer(["sbatch"], out=slurm_output("sbatch_parsable_cluster.txt"))
    outcome = run_module({"script": script, "job_name": "train-ddp"})
    assert outcome.failed is True
    assert outcome.result["msg"] == (
        "sbatch submitted job 12 to cluster rec (a --clusters/-M in the script, or SLURM_CLUSTERS/SBATCH_CLUSTERS "
        f"in the environment); {CLUSTERS_RULE}. Cancel it with 'scancel -M rec 12' unless it is wanted there")
    assert (outcome.result["job_id"], outcome.result["submitted"], outcome.result["changed"]) == (12, True, True)
    assert [argv[0] for argv in slurm_cli.argvs] == ["squeue", "sbatch"]


def test_unreadable_script_fails_before_submitting(slurm_cli, tmp_path):
    outcome = run_module({"script": str(tmp_path / "missing.sbatch"), "job_name": "train-ddp", "force": True})
    assert outcome.result["msg"] == f"cannot read script {tmp_path / 'missing.sbatch'}: No such file or directory"
    assert slurm_cli.calls == []


def test_read_log_tail_reads_across_blocks(tmp_path, monkeypatch):
    monkeypatch.setattr(slurm_job, "LOG_READ_BLOCK", 7)
    log = tmp_path / "job.out"
    log.write_bytes(b"first\nsecond line\nthird \xff\nlast")
    assert slurm_job.read_log_tail(str(log), 2) == ["third \ufffd", "last"]
    assert slurm_job.read_log_tail(str(log), 10) == ["first", "second line", "third \ufffd", "last"]
    assert slurm_job.read_log_tail(str(log), 0) == []
    assert slurm_job.read_log_tail(str(tmp_path / "missing.out"), 5) == []
    assert slurm_job.read_log_tail(None, 5) == []


# ---------------------------------------------------------------------------
# Documentation
# ---------------------------------------------------------------------------


def test_documented_options_match_the_argument_spec():
    documented = yaml.safe_load(slurm_job.DOCUMENTATION)["options"]
    assert sorted(documented) == sorted(slurm_job.ARGUMENT_SPEC)
    for name, spec in slurm_job.ARGUMENT_SPEC.items():
        doc = documented[name]
        assert doc["type"] == spec["type"], name
        assert doc.get("default") == spec.get("default"), name
        assert doc.get("choices") == spec.get("choices"), name
        assert doc.get("elements") == spec.get("elements"), name


def test_documented_return_values_are_what_the_module_returns(slurm_cli, clock, job_output):
    slurm_cli.answer(SCONTROL, out=job_output("completed"))
    result = run_module({"state": "query", "job_id": 1234}).result
    documented = yaml.safe_load(slurm_job.RETURN)
    assert sorted(documented) == sorted(result)
    assert all({"description", "returned", "type", "sample"} <= set(doc) for doc in documented.values())


def test_a_slice_of_following_ends_at_the_first_change_with_where_it_got(slurm_cli, clock, job_output):
    slurm_cli.answer(SCONTROL, out=job_output("running"))
    slurm_cli.answer(SCONTROL, out=job_output("running"))
    slurm_cli.answer(SCONTROL, out=job_output("running_after_requeue"))
    outcome = run_module({"job_id": 1234, "return_on_change": True, "timeout": 60})
    progress = outcome.result["progress"]
    assert (outcome.failed, outcome.result["final"], outcome.result["timed_out"]) == (False, False, False)
    assert (progress["state"], progress["restarts"]) == ("RUNNING", 1)
    assert progress["next_look_at"] == clock.now + 1, "a change starts the schedule over"


def test_the_next_slice_carries_on_without_asking_at_once(slurm_cli, clock, job_output):
    slurm_cli.answer(SCONTROL, out=job_output("completed"))
    previous = {"state": "RUNNING", "restarts": 0, "next_poll": 8.0, "marker": None, "log_offset": None,
                "owner": {"uid": 0, "user": "root", "name": "train-ddp"}}
    outcome = run_module({"job_id": 1234, "return_on_change": True, "timeout": 60, "progress_from": previous})
    assert clock.sleeps == [8.0], "the first look waits for the interval the previous slice had reached"
    # The owner came with the previous slice: not asked again.
    assert (outcome.failed, outcome.result["state"], outcome.result["queries"]) == (False, "COMPLETED", 1)
    assert slurm_cli.identity_calls == []


def test_new_log_lines_are_the_complete_lines_since_the_offset(tmp_path):
    log = tmp_path / "job.out"
    log.write_text("one\ntwo\n")
    lines, offset = slurm_job.read_new_lines(str(log), None, 5)
    assert (lines, offset) == (["one", "two"], 8)
    with log.open("a") as handle:
        handle.write("three\nfour\nfive\nsix\nseven\neight\npart")
    lines, offset = slurm_job.read_new_lines(str(log), offset, 5)
    assert lines == ["four", "five", "six", "seven", "eight"], "the newest five, not the half line"
    assert slurm_job.read_new_lines(str(log), offset, 5) == ([], offset)
    log.write_text("new run\n")
    assert slurm_job.read_new_lines(str(log), offset, 5) == (["new run"], 8), "a file that shrank starts over"


def test_zero_log_lines_and_a_zero_controller_timeout_are_allowed(slurm_cli, clock, job_output):
    slurm_cli.answer(SCONTROL, out=job_output("running"))
    outcome = run_module({"state": "query", "job_id": 1234, "log_tail_lines": 0, "controller_timeout": 0})
    assert (outcome.failed, outcome.result["state"], outcome.result["log_tail"]) == (False, "RUNNING", [])


def test_a_query_neither_submits_nor_finds_an_existing_copy(slurm_cli, clock, job_output):
    slurm_cli.answer(SCONTROL, out=job_output("running"))
    result = run_module({"state": "query", "job_id": 1234}).result
    assert (result["changed"], result["submitted"], result["found_existing"], result["timed_out"]) == (
        False, False, False, False)
    assert result["controller_outage_seconds"] == 0


def test_the_outage_reported_is_how_long_the_controller_did_not_answer(slurm_cli, clock, job_output):
    slurm_cli.answer(SCONTROL, out=job_output("running"))
    for _ in range(8):
        slurm_cli.answer(SCONTROL, *SOCKET_TIMEOUT)
    slurm_cli.answer(SCONTROL, out=job_output("completed"))
    outcome = run_module({"job_id": 1234, "poll_min": 1, "poll_max": 1})
    # The first sleep is the poll before the first unanswered query; every later one is back-off.
    assert clock.sleeps[0] == 1
    assert outcome.result["controller_outage_seconds"] == pytest.approx(round(sum(clock.sleeps[1:]), 1))


def test_a_slice_shows_at_most_the_newest_progress_log_lines(slurm_cli, clock, tmp_path, job_output):
    (tmp_path / "train-ddp-1234.out").write_text("".join(f"step {n}\n" for n in range(12)))
    slurm_cli.answer(SCONTROL, out=job_output("running", run_dir=str(tmp_path)))
    slurm_cli.answer(SCONTROL, out=job_output("completed", run_dir=str(tmp_path)))
    result = run_module({"job_id": 1234, "return_on_change": True, "timeout": 60, "progress_log_lines": 5}).result
    assert result["progress"]["log_lines"] == ["step 7", "step 8", "step 9", "step 10", "step 11"]
    assert result["log_tail"][-1] == "step 11" and len(result["log_tail"]) == 12


def test_the_log_tail_starts_at_a_line_even_when_a_block_ends_inside_one(tmp_path, monkeypatch):
    monkeypatch.setattr(slurm_job, "LOG_READ_BLOCK", 4)
    log = tmp_path / "job.out"
    log.write_text("aa\nbb\ncc\n")
    assert slurm_job.read_log_tail(str(log), 2) == ["bb", "cc"]


def test_no_new_lines_are_read_when_none_are_wanted(tmp_path):
    log = tmp_path / "job.out"
    log.write_text("one\ntwo\n")
    assert slurm_job.read_new_lines(str(log), None, 0) == ([], None)
    assert slurm_job.read_new_lines(str(log), 4, 0) == ([], 4)
    assert slurm_job.read_new_lines(None, 4, 5) == ([], 4)


def test_sbatch_is_tried_five_times_while_the_controller_is_away(slurm_cli, clock, script, slurm_output, job_output):
    connect_failure = slurm_output("sbatch_connect_failure.stderr")
    slurm_cli.answer(SQUEUE)
    for _ in range(4):
        slurm_cli.answer(["sbatch"], 1, "", connect_failure)
        slurm_cli.answer(SQUEUE)  # did the controller queue it after all?
    slurm_cli.answer(["sbatch"], out="1234\n")
    slurm_cli.answer(SCONTROL, out=job_output("completed"))
    outcome = run_module({"script": script, "job_name": "train-ddp"})
    assert (outcome.failed, outcome.result["submitted"], outcome.result["job_id"]) == (False, True, 1234)


def test_sbatch_gives_up_after_the_fifth_try(slurm_cli, clock, script, slurm_output):
    connect_failure = slurm_output("sbatch_connect_failure.stderr")
    slurm_cli.answer(SQUEUE)
    for _ in range(4):
        slurm_cli.answer(["sbatch"], 1, "", connect_failure)
        slurm_cli.answer(SQUEUE)
    slurm_cli.answer(["sbatch"], 1, "", connect_failure)
    outcome = run_module({"script": script, "job_name": "train-ddp"})
    assert outcome.failed is True
    assert outcome.result["msg"] == ("sbatch failed (rc=1): sbatch: error: Batch job submission failed: "
                                     "Unable to contact slurm controller (connect failure)")
    assert [argv[0] for argv in slurm_cli.argvs].count("sbatch") == 5


def test_a_long_outage_is_waited_for_with_pauses_of_at_most_fifteen_seconds(slurm_cli, clock, job_output,
                                                                          monkeypatch):
    # Without jitter, so that the pauses between tries of the whole command are exact.
    monkeypatch.setattr(slurm_job, "backoff_delays", functools.partial(slurm_job.backoff_delays, jitter=0))
    slurm_cli.answer(SCONTROL, out=job_output("running"))
    for _ in range(7 * 5):  # seven commands of five tries each
        slurm_cli.answer(SCONTROL, *SOCKET_TIMEOUT)
    slurm_cli.answer(SCONTROL, out=job_output("completed"))
    outcome = run_module({"job_id": 1234, "poll_min": 1, "poll_max": 1})
    assert outcome.result["state"] == "COMPLETED"
    # After the first poll, each command's four retries are followed by one pause of the follow.
    pauses = clock.sleeps[5::5]
    assert pauses == [1.0, 2.0, 4.0, 8.0, 15.0, 15.0, 15.0]


def test_giving_up_on_the_controller_says_how_long_it_did_not_answer(slurm_cli, clock, job_output):
    slurm_cli.answer(SCONTROL, out=job_output("running"))
    for _ in range(15):
        slurm_cli.answer(SCONTROL, *SOCKET_TIMEOUT)
    outcome = run_module({"job_id": 1234, "poll_min": 1, "poll_max": 1, "controller_timeout": 20})
    unanswered = sum(clock.sleeps[1:])
    assert outcome.result["msg"].startswith(f"scontrol show job failed (rc=-): slurmctld did not answer for "
                                            f"{unanswered:.0f} s (controller_timeout=20): ")


def test_the_outage_is_reported_to_a_tenth_of_a_second(slurm_cli, clock, job_output):
    slurm_cli.answer(SCONTROL, out=job_output("running"))
    for _ in range(5):
        slurm_cli.answer(SCONTROL, *SOCKET_TIMEOUT)
    slurm_cli.answer(SCONTROL, out=job_output("completed"))
    saved = random.getstate()
    random.seed(1)  # the back-off's jitter, fixed: a sum with a second decimal
    try:
        outcome = run_module({"job_id": 1234, "poll_min": 1, "poll_max": 1})
    finally:
        random.setstate(saved)
    unanswered = sum(clock.sleeps[1:])
    assert round(unanswered, 2) != round(unanswered, 1)
    assert outcome.result["controller_outage_seconds"] == round(unanswered, 1)


def test_a_one_line_tail_is_the_last_line(tmp_path):
    log = tmp_path / "job.out"
    log.write_text("one\ntwo\nthree\n")
    assert slurm_job.read_log_tail(str(log), 1) == ["three"]
    assert slurm_job.read_new_lines(str(log), 4, 1) == (["three"], 14)


def test_no_news_when_the_log_has_not_grown(tmp_path):
    log = tmp_path / "job.out"
    log.write_text("one\ntwo\n")
    assert slurm_job.read_new_lines(str(log), 8, 5) == ([], 8)


def test_after_the_end_marker_slurm_is_asked_at_the_marker_pace(slurm_cli, clock, tmp_path, job_output):
    marker = tmp_path / ".1234.ended"
    real_sleep = clock.sleep

    def sleep(seconds):
        if not marker.exists():
            marker.write_text("0\n")  # the batch script ends during the first wait
        real_sleep(seconds)

    clock.sleep = sleep
    slurm_cli.answer(SCONTROL, out=job_output("running"))
    slurm_cli.answer(SCONTROL, out=job_output("running"))  # Slurm has not caught up yet
    slurm_cli.answer(SCONTROL, out=job_output("running"))
    slurm_cli.answer(SCONTROL, out=job_output("completed"))
    outcome = run_module({"job_id": 1234, "end_marker": str(tmp_path / ".%j.ended"), "poll_min": 5,
                          "poll_max": 30})
    assert outcome.result["state"] == "COMPLETED"
    # The first wait ends at the marker's first check; then two quick looks, not 5 s and 10 s.
    assert clock.sleeps == [slurm_job.MARKER_CHECK_INTERVAL, slurm_job.MARKER_CHECK_INTERVAL,
                            slurm_job.MARKER_CHECK_INTERVAL]


def test_a_job_that_ends_while_being_cancelled_is_no_error(slurm_cli, clock, job_output):
    slurm_cli.answer(SCONTROL, out=job_output("running"))
    slurm_cli.answer(["scancel"], 1, "", "scancel: error: Kill job error on job id 1234: "
                                         "Job/step already completing or completed\n")
    slurm_cli.answer(SCONTROL, out=job_output("completed"))
    outcome = run_module({"state": "absent", "job_id": 1234})
    assert (outcome.failed, outcome.result["state"]) == (False, "COMPLETED")


def test_a_cancel_that_slurm_refuses_fails_the_task_with_its_reason(slurm_cli, clock, job_output):
    slurm_cli.answer(SCONTROL, out=job_output("running"))
    slurm_cli.answer(["scancel"], 1, "", "scancel: error: Kill job error on job id 1234: "
                                         "Access/permission denied\n")
    outcome = run_module({"state": "absent", "job_id": 1234})
    assert outcome.failed is True
    assert outcome.result["msg"] == ("scancel failed (rc=1): scancel: error: Kill job error on job id 1234: "
                                     "Access/permission denied")


def test_a_job_that_ends_at_the_timeout_is_reported_ended_not_timed_out(slurm_cli, clock, job_output):
    for _ in range(3):
        slurm_cli.answer(SCONTROL, out=job_output("running"))
    slurm_cli.answer(SCONTROL, out=job_output("completed"))  # the look at 3 s, the timeout's last
    outcome = run_module({"job_id": 1234, "poll_min": 1, "poll_max": 1, "timeout": 3})
    assert (outcome.result["state"], outcome.result["timed_out"]) == ("COMPLETED", False)
    assert clock.sleeps == [1, 1, 1]


def test_the_controller_timeout_is_reached_when_the_outage_lasts_exactly_that_long(slurm_cli, clock, job_output,
                                                                                  monkeypatch):
    # No jitter: one command's four retries take 7.5 s, then the follow pauses 1 s: 16 s after two commands.
    monkeypatch.setattr(slurm_job, "backoff_delays", functools.partial(slurm_job.backoff_delays, jitter=0))
    monkeypatch.setattr(slurm_job, "retry_command", functools.partial(slurm_job.retry_command, jitter=0))
    slurm_cli.answer(SCONTROL, out=job_output("running"))
    for _ in range(10):
        slurm_cli.answer(SCONTROL, *SOCKET_TIMEOUT)
    outcome = run_module({"job_id": 1234, "poll_min": 1, "poll_max": 1, "controller_timeout": 16})
    assert outcome.result["msg"].startswith("scontrol show job failed (rc=-): slurmctld did not answer for 16 s "
                                            "(controller_timeout=16)")


def test_the_log_tail_keeps_the_files_first_byte(tmp_path, monkeypatch):
    # The last block read back ends one byte after the start of the file.
    monkeypatch.setattr(slurm_job, "LOG_READ_BLOCK", 4)
    log = tmp_path / "job.out"
    log.write_text("a\nbc\n")
    assert slurm_job.read_log_tail(str(log), 10) == ["a", "bc"]


# state=list (jobs.yml): squeue -h -u <uid> -o MY_JOBS_FORMAT, lines as squeue 22.05 prints that
# format: a held job has no nodes ("" for %N) and 0:00 elapsed; a running one its hostlist.
MY_JOBS = ("41|hold-me|PENDING|JobHeldUser||0:00|/nas/jobs/alice/hold-me/runs/1\n"
           "40|train_ddp|RUNNING|None|node[110-111]|1:05|/nas/jobs/alice/train_ddp/runs/3\n")


def test_list_reports_the_users_pending_and_running_jobs(slurm_cli, clock):
    slurm_cli.answer(["squeue", "-h", "-u", str(os.geteuid()), "-o", slurm_job.MY_JOBS_FORMAT], out=MY_JOBS)
    outcome = run_module({"state": "list"})
    assert (outcome.failed, outcome.result["changed"]) == (False, False)
    assert outcome.result["user"] == pwd.getpwuid(os.geteuid()).pw_name
    assert outcome.result["jobs"] == [
        {"job_id": 41, "name": "hold-me", "state": "PENDING", "reason": "JobHeldUser", "nodes": "",
         "elapsed": "0:00", "work_dir": "/nas/jobs/alice/hold-me/runs/1"},
        {"job_id": 40, "name": "train_ddp", "state": "RUNNING", "reason": None, "nodes": "node[110-111]",
         "elapsed": "1:05", "work_dir": "/nas/jobs/alice/train_ddp/runs/3"},
    ]


def test_list_fails_with_squeues_message(slurm_cli, clock):
    slurm_cli.answer(["squeue"], rc=1, err="squeue: error: Invalid user: 9999\n")
    outcome = run_module({"state": "list"})
    assert outcome.failed and "squeue failed (rc=1): squeue: error: Invalid user: 9999" in outcome.result["msg"]


# Following on the end marker: Slurm asked only when the marker or the log says something changed,
# or at marked_poll_interval; a slice with no look due ends without an RPC.

def test_a_running_job_with_an_end_marker_is_asked_about_at_the_marked_interval(slurm_cli, clock, tmp_path,
                                                                                 job_output):
    slurm_cli.answer(SCONTROL, out=job_output("running"))
    slurm_cli.answer(SCONTROL, out=job_output("running"))
    slurm_cli.answer(SCONTROL, out=job_output("completed"))
    outcome = run_module({"job_id": 1234, "end_marker": str(tmp_path / ".%j.ended"), "marked_poll_interval": 45})
    assert outcome.result["state"] == "COMPLETED" and outcome.result["queries"] == 1 + 3  # the owner question first
    # Not 1, 2, 4, 8...: the marker would answer the end, so the safety looks are 45 s apart.
    assert sum(clock.sleeps) == pytest.approx(90) and max(clock.sleeps) <= slurm_job.MARKER_CHECK_INTERVAL


def test_without_an_end_marker_the_schedule_is_the_doubling_one(slurm_cli, clock, job_output):
    for state in ("running", "running", "running", "completed"):
        slurm_cli.answer(SCONTROL, out=job_output(state))
    outcome = run_module({"job_id": 1234, "marked_poll_interval": 45})
    assert outcome.result["state"] == "COMPLETED"
    assert clock.sleeps == [1, 2, 4]


def test_a_slice_with_no_look_due_carries_the_job_over_without_asking(slurm_cli, clock, tmp_path, job_output):
    slurm_cli.answer(SCONTROL, out=job_output("running"))
    first = run_module({"job_id": 1234, "return_on_change": True, "timeout": 30,
                        "end_marker": str(tmp_path / ".%j.ended")}).result
    assert (first["state"], first["queries"], first["timed_out"]) == ("RUNNING", 1 + 1, True)  # the owner, the job
    assert first["progress"]["next_look_at"] == pytest.approx(1000 + 60)
    second = run_module({"job_id": 1234, "return_on_change": True, "timeout": 20, "progress_from": first["progress"],
                         "end_marker": str(tmp_path / ".%j.ended")}).result
    assert (second["state"], second["queries"], second["nodes"]) == ("RUNNING", 0, first["nodes"])
    assert second["user"] == first["user"] and second["stdout_path"] == first["stdout_path"]
    slurm_cli.answer(SCONTROL, out=job_output("running"))
    third = run_module({"job_id": 1234, "return_on_change": True, "timeout": 30, "progress_from": second["progress"],
                        "end_marker": str(tmp_path / ".%j.ended")}).result
    # The look that was due at 60 s is made in this slice, 10 s in, and the next planned 60 s on.
    assert third["queries"] == 1 and third["progress"]["next_look_at"] == pytest.approx(1000 + 60 + 60)


def test_a_pending_jobs_log_appearing_ends_the_wait(slurm_cli, clock, tmp_path, job_output):
    run_dir = tmp_path / "runs" / "1"
    run_dir.mkdir(parents=True)
    log = run_dir / "train-ddp-1234.out"
    real_sleep = clock.sleep

    def sleep(seconds):
        if clock.now >= 1000.5 and not log.exists():
            log.write_text("=== job 1234 restart 0\n")  # the job starts half a second in
        real_sleep(seconds)

    clock.sleep = sleep
    slurm_cli.answer(SCONTROL, out=job_output("pending_priority", run_dir=str(run_dir)))
    slurm_cli.answer(SCONTROL, out=job_output("running", run_dir=str(run_dir)))
    outcome = run_module({"job_id": 1234, "return_on_change": True, "timeout": 60, "poll_min": 20, "poll_max": 20,
                          "end_marker": str(tmp_path / ".%j.ended")})
    assert outcome.result["state"] == "RUNNING"
    assert 0.5 <= sum(clock.sleeps) < 1.0, "asked as the log appeared, not after poll_min's 20 s"


def run_record_job(tmp_path, job_output, slurm_cli, user="root", state="completed"):
    run_dir = tmp_path / "jobs" / user / "train-ddp" / "runs" / "3"
    run_dir.mkdir(parents=True)
    slurm_cli.answer(SCONTROL, out=job_output(state, run_dir=str(run_dir)))
    return run_dir


def test_the_final_job_s_run_record_is_written_in_the_run_that_saw_the_end(slurm_cli, clock, tmp_path, job_output):
    run_dir = run_record_job(tmp_path, job_output, slurm_cli)
    outcome = run_module({"job_id": 1234, "run_records": str(tmp_path / "jobs")})
    record = run_dir / "run.json"
    assert outcome.result["run_record"] == str(record)
    assert json.loads(record.read_text()) == {"job_id": 1234, "state": "COMPLETED", "exit_code": 0, "restarts": 0}
    assert record.stat().st_mode & 0o777 == 0o600 and sorted(p.name for p in run_dir.iterdir()) == ["run.json"]


def test_the_final_job_carries_the_health_gate_record_of_each_attempt(slurm_cli, clock, tmp_path, job_output):
    run_dir = run_record_job(tmp_path, job_output, slurm_cli)
    gate = {"restart": 0, "seconds": 4.2, "action": "requeue", "message": "requeued without node111",
            "nodes": {"node110": {"seconds": 0.2}, "node111": {"seconds": 2.0}},
            "named": [{"node": "node111", "reason": "HEALTH", "why": "slow"}]}
    (run_dir / "health-1234.jsonl").write_text(json.dumps(gate) + "\n" + json.dumps({**gate, "restart": 1,
                                                                                     "action": "pass"}) + "\n")
    health = run_module({"job_id": 1234, "run_records": str(tmp_path / "jobs")}).result["health"]
    assert [(one["restart"], one["action"]) for one in health] == [(0, "requeue"), (1, "pass")]
    assert health[0]["named"] == gate["named"]


def test_a_job_without_the_gate_has_no_health_record(slurm_cli, clock, tmp_path, job_output):
    run_record_job(tmp_path, job_output, slurm_cli)
    assert run_module({"job_id": 1234, "run_records": str(tmp_path / "jobs")}).result["health"] is None


def test_no_run_record_in_check_mode_for_a_running_job_or_outside_the_users_runs(slurm_cli, clock, tmp_path,
                                                                                  job_output):
    run_dir = run_record_job(tmp_path, job_output, slurm_cli)
    assert run_module({"job_id": 1234, "run_records": str(tmp_path / "jobs")}, check_mode=True).result["run_record"] is None
    slurm_cli.answer(SCONTROL, out=job_output("running", run_dir=str(run_dir)))
    assert run_module({"job_id": 1234, "run_records": str(tmp_path / "jobs"), "wait": False}).result["run_record"] is None
    # The log is in root's runs, the records' root elsewhere: nothing written.
    slurm_cli.answer(SCONTROL, out=job_output("completed", run_dir=str(run_dir)))
    assert run_module({"job_id": 1234, "run_records": str(tmp_path / "other")}).result["run_record"] is None
    assert not (run_dir / "run.json").exists()


def test_another_users_run_is_never_written_into(slurm_cli, clock, tmp_path, job_output, monkeypatch):
    run_dir = run_record_job(tmp_path, job_output, slurm_cli)
    # The recorded job is root's; the module runs as someone else who may act on it (an operator).
    monkeypatch.setattr(slurm_job.SlurmClient, "user", property(lambda self: "operator1"))
    monkeypatch.setattr(slurm_job.SlurmClient, "may_act_on", lambda self, owner: True)
    outcome = run_module({"job_id": 1234, "run_records": str(tmp_path / "jobs")})
    assert outcome.result["state"] == "COMPLETED" and outcome.result["run_record"] is None
    assert not (run_dir / "run.json").exists()


def test_a_run_record_that_cannot_be_written_fails_the_task_naming_it(slurm_cli, clock, tmp_path, job_output):
    run_dir = run_record_job(tmp_path, job_output, slurm_cli)
    (run_dir / "run.json").mkdir()  # a directory where the record goes: even root cannot replace it
    outcome = run_module({"job_id": 1234, "run_records": str(tmp_path / "jobs")})
    assert [path.name for path in run_dir.iterdir()] == ["run.json"], "no temporary file left behind"
    assert outcome.failed and f"cannot write the run's end record {run_dir}/run.json" in outcome.result["msg"]


def test_a_job_completing_after_its_marker_is_followed_to_its_end_in_the_same_slice(slurm_cli, clock, tmp_path,
                                                                                     job_output):
    marker = tmp_path / ".1234.ended"
    real_sleep = clock.sleep

    def sleep(seconds):
        if not marker.exists():
            marker.write_text("0\n")  # the batch script ends during the first wait
        real_sleep(seconds)

    clock.sleep = sleep
    # The running record as slurmctld gives it between the batch script's end and the epilogs'.
    completing = job_output("running").replace("JobState=RUNNING", "JobState=COMPLETING")
    slurm_cli.answer(SCONTROL, out=job_output("running"))
    slurm_cli.answer(SCONTROL, out=completing)
    slurm_cli.answer(SCONTROL, out=completing)
    slurm_cli.answer(SCONTROL, out=job_output("completed"))
    args = {"job_id": 1234, "return_on_change": True, "timeout": 30, "end_marker": str(tmp_path / ".%j.ended")}
    started = clock.now
    result = run_module(args).result
    # COMPLETING ends no slice: one module run answers, not a second one for the final state.
    assert (result["state"], result["final"]) == ("COMPLETED", True)
    # Quick looks from the marker's change on (one per MARKER_CHECK_INTERVAL), not the 60 s of a running job.
    assert clock.now - started <= 4 * slurm_job.MARKER_CHECK_INTERVAL + 1e-6
    assert len(slurm_cli.argvs) == 4


# stage: the job's directory made, its run taken and its script written, then submitted, in one run.
# The script as a launch renders it: its files named from the run's directory, where it runs.
STAGED_SCRIPT = "#!/bin/bash\n#SBATCH --output=%x-%j.out\nsrun python ../../code/ab12cd34/train.py\n"


def staged_request(tmp_path, **stage):
    jobs = tmp_path / "jobs"
    jobs.mkdir(mode=0o1777, exist_ok=True)
    return {"script": "train-ddp.sbatch", "job_name": "train-ddp", "wait": False,
            "stage": {"jobs_root": str(jobs), "job_name": "train-ddp", "resume": "auto",
                      "files": [{"name": "train-ddp.sbatch", "content": STAGED_SCRIPT, "mode": "0600"}], **stage}}


def test_stage_writes_the_script_for_the_run_taken_and_submits_it_in_the_same_run(slurm_cli, clock, tmp_path,
                                                                                   job_output):
    run_dir = tmp_path / "jobs" / pwd.getpwuid(os.geteuid()).pw_name / "train-ddp" / "runs" / "1"
    # No squeue first: the run was taken now, so no job can carry its script's fingerprint yet.
    slurm_cli.answer(["sbatch"], out="1234\n")
    slurm_cli.answer(SCONTROL, out=job_output("pending_resources"))

    outcome = run_module(staged_request(tmp_path))

    assert outcome.failed is False, outcome.result.get("msg")
    script = run_dir / "train-ddp.sbatch"
    assert script.read_text() == STAGED_SCRIPT
    # Run in the run's directory, by its name as staged (not as the cwd resolves links): the job's
    # working directory, which its script names its files from.
    assert slurm_cli.argvs[0][-1] == str(script) and slurm_cli.calls[0]["cwd"] == str(run_dir)
    assert slurm_cli.argvs[0][-2] == f"--chdir={run_dir}"
    assert slurm_cli.argvs[0][3] == "--comment=fingerprint:" + slurm_job.job_fingerprint("train-ddp", script.read_bytes())
    result = outcome.result
    assert (result["submitted"], result["changed"], result["job_id"]) == (True, True, 1234)
    assert (result["staged"]["run_id"], result["staged"]["files_written"]) == (1, ["train-ddp.sbatch"])
    assert result["end_marker"] == f"{run_dir}/.%j.ended"


@pytest.mark.parametrize("request_change, problem", [
    ({"script": "other.sbatch"}, "script other.sbatch is not one of stage's files"),
    ({"stage": {"resume": ""}}, "stage: resume is empty: give auto, never or a run id"),
])
def test_stage_refuses_a_script_it_does_not_write_or_no_run_before_anything_is_made(slurm_cli, clock, tmp_path,
                                                                                     request_change, problem):
    request = staged_request(tmp_path)
    request["script"] = request_change.get("script", request["script"])
    request["stage"].update(request_change.get("stage", {}))
    outcome = run_module(request)
    assert outcome.failed is True and outcome.result["msg"].startswith(problem), outcome.result["msg"]
    assert list((tmp_path / "jobs").iterdir()) == [] and slurm_cli.calls == []


def test_each_submitted_job_keeps_the_script_it_ran_and_a_later_job_of_the_run_changes_none(slurm_cli, clock,
                                                                                           tmp_path, job_output):
    """A run resumed by its own request (after its time limit) stages the run's script anew; the
    earlier job's copy, under its own name, stays as that job ran."""
    run_dir = tmp_path / "jobs" / pwd.getpwuid(os.geteuid()).pw_name / "train-ddp" / "runs" / "1"
    slurm_cli.answer(["sbatch"], out="1234\n")
    slurm_cli.answer(SCONTROL, out=job_output("pending_resources"))
    first = run_module(staged_request(tmp_path))
    assert first.failed is False, first.result
    (run_dir / "run.json").write_text(json.dumps({"job_id": 1234, "state": "TIMEOUT", "exit_code": 0}))
    later = staged_request(tmp_path)
    later["stage"]["files"][0]["content"] = STAGED_SCRIPT + "# time limit doubled\n"
    slurm_cli.answer(SQUEUE)
    slurm_cli.answer(["sbatch"], out="1240\n")
    slurm_cli.answer([*SCONTROL[:4], "1240", "--local"], out=job_output("pending_resources"))

    result = run_module(later).result

    assert (result["staged"]["run_id"], result["staged"]["resumed"], result["submitted"]) == (1, True, True)
    assert [argv[0] for argv in slurm_cli.argvs] == ["sbatch", "scontrol", "squeue", "sbatch", "scontrol"]
    first, second = (run_dir / "train-ddp-1234.sbatch").read_text(), (run_dir / "train-ddp-1240.sbatch").read_text()
    assert not first.endswith("# time limit doubled\n") and second.endswith("# time limit doubled\n")
    assert (run_dir / "train-ddp.sbatch").read_text() == second


def test_the_runs_lock_is_released_once_the_job_is_submitted(slurm_cli, clock, tmp_path, job_output):
    import fcntl
    slurm_cli.answer(["sbatch"], out="1234\n")
    slurm_cli.answer(SCONTROL, out=job_output("pending_resources"))
    result = run_module(staged_request(tmp_path)).result
    lock = os.path.join(os.path.dirname(result["staged"]["run_dir"]), ".lock")
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises BlockingIOError while it is held
    finally:
        os.close(fd)


def test_a_resumed_run_is_looked_for_in_squeue_and_its_job_followed_not_submitted_again(slurm_cli, clock, tmp_path,
                                                                                       job_output):
    """A launch cut off after its sbatch leaves a run with no end record: the next one resumes
    that run, with the same script, and finds the job that the first submitted."""
    slurm_cli.answer(["sbatch"], out="1234\n")
    slurm_cli.answer(SCONTROL, out=job_output("pending_resources"))
    first = run_module(staged_request(tmp_path)).result
    script = os.path.join(first["staged"]["run_dir"], "train-ddp.sbatch")
    comment = "fingerprint:" + slurm_job.job_fingerprint("train-ddp", open(script, "rb").read())
    slurm_cli.answer(SQUEUE, out=f"1234|train-ddp|PENDING|Resources||{comment}\n")
    slurm_cli.answer(SCONTROL, out=job_output("pending_resources"))

    again = run_module(staged_request(tmp_path)).result

    assert (again["staged"]["run_id"], again["staged"]["resumed"]) == (1, True)
    assert (again["job_id"], again["found_existing"], again["submitted"]) == (1234, True, False)
    assert [argv[0] for argv in slurm_cli.argvs] == ["sbatch", "scontrol", "squeue", "scontrol"]


def test_a_fresh_runs_lost_sbatch_reply_is_still_looked_for_before_trying_again(slurm_cli, clock, tmp_path,
                                                                                job_output):
    slurm_cli.answer(["sbatch"], 1, "", "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation\n")
    slurm_cli.answer(SQUEUE)
    slurm_cli.answer(["sbatch"], out="1234\n")
    slurm_cli.answer(SCONTROL, out=job_output("pending_resources"))

    result = run_module(staged_request(tmp_path)).result

    assert (result["staged"]["resumed"], result["submitted"], result["job_id"]) == (False, True, 1234)
    assert [argv[0] for argv in slurm_cli.argvs] == ["sbatch", "squeue", "sbatch", "scontrol"]


def test_stage_submits_nothing_while_the_expected_file_or_the_code_is_missing(slurm_cli, clock, tmp_path):
    missing = run_module(staged_request(tmp_path, expect_files=[str(tmp_path / "nccl-gpu.sh")]))
    assert (missing.failed, missing.result["submitted"], missing.result["job_id"]) == (False, False, None)
    assert missing.result["staged"]["missing_files"] == [str(tmp_path / "nccl-gpu.sh")]
    assert list((tmp_path / "jobs").iterdir()) == [], "nothing is made for a job that would not start"

    no_code = run_module(staged_request(tmp_path, code_hash="ab12cd34"))
    assert (no_code.failed, no_code.result["job_id"], no_code.result["staged"]["code_present"]) == (False, None, False)
    assert no_code.result["staged"]["run_id"] is None, "no run is taken before the code is there"
    assert slurm_cli.calls == []


def test_stage_in_check_mode_writes_nothing_and_slurm_predicts_from_the_script(slurm_cli, clock, tmp_path,
                                                                                      slurm_output):
    slurm_cli.answer(["sbatch", "--test-only"], err=slurm_output("sbatch_test_only.stderr"))
    seen = {}
    real = slurm_cli.run_command

    def reading(args, **kwargs):
        if "--test-only" in args:
            seen["script"] = open(args[-1], encoding="utf-8").read()
            seen["cwd"] = kwargs["cwd"]
        return real(args, **kwargs)
    slurm_cli.run_command = reading

    outcome = run_module(staged_request(tmp_path), check_mode=True)

    assert outcome.failed is False, outcome.result.get("msg")
    assert seen["script"] == STAGED_SCRIPT
    assert outcome.result["end_marker"] == str(tmp_path / "jobs" / pwd.getpwuid(os.geteuid()).pw_name / "train-ddp"
                                                / "runs" / "1" / ".%j.ended")
    assert not os.path.exists(seen["cwd"]), "the prediction's scratch directory is removed"
    assert list((tmp_path / "jobs").iterdir()) == [] and outcome.result["test_only"]["job_id"] == 20


@pytest.mark.parametrize("job_id, local", [(1234, True), ((1 << 26) - 1, True), (1 << 26, False), ((3 << 26) + 5, False)])
def test_a_job_of_this_cluster_alone_is_looked_up_without_the_federation(slurm_cli, job_output, job_id, local):
    """Federated job ids carry their origin cluster's id above the low 26 bits: only those need
    scontrol's federation lookup; any other is this cluster's, looked up --local."""
    slurm_cli.answer(["scontrol", "show", "job", "-o", str(job_id)], out=job_output("running", job_id=job_id))
    assert run_module({"job_id": job_id, "wait": False}).result["state"] == "RUNNING"
    assert slurm_cli.argvs == [["scontrol", "show", "job", "-o", str(job_id)] + (["--local"] if local else [])]


def test_after_a_node_failure_the_jobs_nodes_are_looked_up_to_name_the_failed_one(slurm_cli, clock, job_output,
                                                                                 slurm_output):
    """Slurm's record of a NODE_FAIL job does not say which node failed: the module asks sinfo in
    the run that saw the end, and returns the job's nodes as it shows them."""
    slurm_cli.answer(SCONTROL, out=job_output("node_fail"))
    slurm_cli.answer(["sinfo", "-h", "-N", "-o", "%N|%P|%T|%c|%G"], out=slurm_output("sinfo_nodes_down.txt"))
    states = run_module({"job_id": 1234}).result["node_states"]
    assert {name: (node["state"], node["markers"]) for name, node in states.items()} == {
        "rec1": ("idle", ""), "rec2": ("down", "*")}


def test_a_job_that_ended_otherwise_asks_sinfo_nothing(slurm_cli, clock, job_output):
    slurm_cli.answer(SCONTROL, out=job_output("failed"))
    result = run_module({"job_id": 1234}).result
    assert result["node_states"] is None and [argv[0] for argv in slurm_cli.argvs] == ["scontrol"]


def test_collect_files_returns_the_finished_jobs_log_and_script_read_in_the_run_that_saw_the_end(
        slurm_cli, clock, tmp_path, job_output, monkeypatch):
    run_dir = run_record_job(tmp_path, job_output, slurm_cli)
    (run_dir / "train-ddp-1234.out").write_text("[rank0] training complete\n")
    (tmp_path / "secret").write_text("not the job's\n")
    (run_dir / "train-ddp-1234.sbatch").symlink_to(tmp_path / "secret")  # planted: not followed
    result = run_module({"job_id": 1234, "run_records": str(tmp_path / "jobs"), "collect_files": True}).result
    assert {path: base64.b64decode(text) for path, text in result["collected_files"].items()} == {
        str(run_dir / "train-ddp-1234.out"): b"[rank0] training complete\n"}
    assert result["collected_skipped"] == {str(run_dir / "train-ddp-1234.sbatch"): "a link or not a directory on the way"}
    # A file over what is left of the budget comes as its end, and is said to be cut.
    monkeypatch.setattr(slurm_job, "COLLECT_INLINE_MAX_BYTES", 10)
    slurm_cli.answer(SCONTROL, out=job_output("completed", run_dir=str(run_dir)))
    cut = run_module({"job_id": 1234, "run_records": str(tmp_path / "jobs"), "collect_files": True}).result
    assert {path: base64.b64decode(text) for path, text in cut["collected_files"].items()} == {
        str(run_dir / "train-ddp-1234.out"): b" complete\n"}
    assert cut["collected_truncated"] == {str(run_dir / "train-ddp-1234.out"): 26}
    slurm_cli.answer(SCONTROL, out=job_output("completed", run_dir=str(run_dir)))
    assert run_module({"job_id": 1234, "run_records": str(tmp_path / "jobs")}).result["collected_files"] is None


SINFO = ["sinfo", "-h", "-N", "-o", "%N|%P|%T|%c|%G"]


def nodes_request(tmp_path, **nodes):
    request = staged_request(tmp_path)
    request["nodes"] = {"names": ["rec1", "rec2"], "num_nodes": 2, "node_group": "gpu",
                        "inventory": {"rec1": {"cluster_node_cpus": 2}, "rec2": {"cluster_node_cpus": 2}}, **nodes}
    return request


@pytest.mark.parametrize("given, option", [("", ["--partition=gpu"]), ("gpu", [])])
def test_the_nodes_are_checked_against_sinfo_and_a_script_without_a_partition_goes_to_theirs(
        slurm_cli, clock, tmp_path, slurm_output, job_output, given, option):
    """A partition given is the script's own #SBATCH line; none given, the job goes to the one its
    nodes share, as sinfo shows it."""
    slurm_cli.answer(SINFO, out=slurm_output("sinfo_nodes_busy.txt"))
    slurm_cli.answer(["sbatch"], out="1234\n")
    slurm_cli.answer(SCONTROL, out=job_output("pending_resources"))
    outcome = run_module(nodes_request(tmp_path, partition=given))
    assert outcome.failed is False, outcome.result.get("msg")
    script = tmp_path / "jobs" / pwd.getpwuid(os.geteuid()).pw_name / "train-ddp" / "runs" / "1" / "train-ddp.sbatch"
    assert slurm_cli.argvs[1][:2] == ["sbatch", "--parsable"]
    assert slurm_cli.argvs[1][4:] == [*option, f"--chdir={script.parent}", str(script)]
    assert script.read_text() == STAGED_SCRIPT
    assert outcome.result["nodes_checked"]["partition"] == "gpu" and outcome.result["submitted"] is True


@pytest.mark.parametrize(("sinfo", "nodes", "problem"), [
    ("sinfo_nodes_busy.txt", {"names": ["rec1", "rec9"]}, "Slurm does not know: rec9 (see sinfo -N)."),
    ("sinfo_nodes_busy.txt", {"inventory": {"rec1": {"cluster_node_cpus": 8}}},
     "rec1: the inventory says 8 CPUs, Slurm says 2 (CPUTot); set cluster_node_cpus: 2 in group_vars/gpu.yml."),
    ("sinfo_nodes_down.txt", {}, "rec2 (down*) "),
    ("sinfo_nodes_busy.txt", {"partition": "debug"}, "The nodes are not in one partition debug: rec1 is in gpu"),
])
def test_nodes_slurm_refuses_fail_the_task_before_anything_is_made(slurm_cli, clock, tmp_path, slurm_output,
                                                                    sinfo, nodes, problem):
    slurm_cli.answer(SINFO, out=slurm_output(sinfo))
    outcome = run_module(nodes_request(tmp_path, **nodes))
    assert outcome.failed is True and outcome.result["msg"].startswith(problem), outcome.result["msg"]
    assert list((tmp_path / "jobs").iterdir()) == [], "nothing is made for nodes Slurm refuses"
    assert slurm_cli.argvs == [SINFO]


def following_a_running_job_with_a_log(slurm_cli, clock, tmp_path, job_output, written_at, text, **args):
    """A first slice of a running job (its end marker watched: Slurm asked again 60 s on), then a
    second slice from it while ``text`` is appended to its log ``written_at`` seconds into it."""
    log = tmp_path / "train-ddp-1234.out"
    log.write_text("step 0\n")
    slurm_cli.answer(SCONTROL, out=job_output("running", run_dir=str(tmp_path)))
    common = {"job_id": 1234, "return_on_change": True, "end_marker": str(tmp_path / ".%j.ended"), **args}
    first = run_module({**common, "timeout": 30}).result
    assert first["progress"]["log_lines"] == ["step 0"] and first["progress"]["log_size"] == 7
    started, real_sleep = clock.now, clock.sleep
    clock.sleeps.clear()

    def sleep(seconds):
        if clock.now >= started + written_at and log.stat().st_size == 7:
            with log.open("a") as handle:
                handle.write(text)
        real_sleep(seconds)

    clock.sleep = sleep
    second = run_module({**common, "timeout": 25, "progress_from": first["progress"]}).result
    return first, second, clock.now - started


def test_a_slice_ends_for_new_log_lines_within_moments_without_asking_slurm(slurm_cli, clock, tmp_path, job_output):
    first, second, lasted = following_a_running_job_with_a_log(slurm_cli, clock, tmp_path, job_output, 5, "step 1\n")
    assert second["progress"]["log_lines"] == ["step 1"]
    assert 5 <= lasted <= 5 + slurm_job.LOG_CHECK_INTERVAL + 0.1, "the line was shown as it came, not at 25 s"
    assert (second["queries"], second["timed_out"], second["state"]) == (0, False, "RUNNING")
    assert second["progress"]["next_look_at"] == first["progress"]["next_look_at"], "the look at Slurm stays as planned"


def test_a_slice_waits_progress_log_every_before_it_ends_for_new_lines(slurm_cli, clock, tmp_path, job_output):
    _, second, lasted = following_a_running_job_with_a_log(slurm_cli, clock, tmp_path, job_output, 0.2, "step 1\n",
                                                           progress_log_every=3)
    assert second["progress"]["log_lines"] == ["step 1"] and 3 <= lasted < 3.2


def test_with_progress_log_every_0_new_lines_wait_for_the_slices_end(slurm_cli, clock, tmp_path, job_output):
    _, second, lasted = following_a_running_job_with_a_log(slurm_cli, clock, tmp_path, job_output, 5, "step 1\n",
                                                           progress_log_every=0)
    assert second["progress"]["log_lines"] == ["step 1"] and lasted == pytest.approx(25)


def test_a_half_written_line_ends_one_slice_not_every_one(slurm_cli, clock, tmp_path, job_output):
    _, second, lasted = following_a_running_job_with_a_log(slurm_cli, clock, tmp_path, job_output, 5, "step 1 of")
    assert second["progress"]["log_lines"] == [] and lasted < 6
    third = run_module({"job_id": 1234, "return_on_change": True, "end_marker": str(tmp_path / ".%j.ended"),
                        "timeout": 10, "progress_from": second["progress"]}).result
    assert (third["progress"]["log_lines"], third["timed_out"], third["queries"]) == ([], True, 0)


def test_progress_log_every_may_not_be_negative(slurm_cli, clock):
    assert run_module({"state": "query", "job_id": 1234, "progress_log_every": -1}).result["msg"] == (
        "progress_log_every must be 0 (off) or more seconds, got -1.0")


def test_the_cost_waits_for_slurmdbd_to_record_the_final_jobs_last_attempt(clock):
    """slurmctld hands a job's end to slurmdbd a few seconds later: sacct first shows the last
    attempt still RUNNING. The cost asks again, every 0.5 s for at most 5 s, until it has ended."""
    answers = [
        "7|7|REQUEUED|30|cpu=2,gres/gpu=4|2026-12-07T10:00:00|2026-12-07T10:00:01\n"
        "7|7|RUNNING|12|cpu=2,gres/gpu=4|2026-12-07T10:00:31|2026-12-07T10:00:33\n",
        "7|7|REQUEUED|30|cpu=2,gres/gpu=4|2026-12-07T10:00:00|2026-12-07T10:00:01\n"
        "7|7|FAILED|14|cpu=2,gres/gpu=4|2026-12-07T10:00:31|2026-12-07T10:00:33\n",
    ]
    asked = []

    class Module:
        params = {"accounting": "yes", "environment": {}}

        def run_command(self, argv, **kwargs):
            asked.append(argv)
            return 0, answers[min(len(asked), len(answers)) - 1], ""

    attempts = slurm_job.SlurmClient(Module()).cost_attempts(7)
    assert [(a["state"], a["elapsed_seconds"]) for a in attempts] == [("REQUEUED", 30), ("FAILED", 14)]
    assert len(asked) == 2 and clock.sleeps == [0.5]
    # A record that never ends (slurmdbd down) is taken as it is after the last look.
    answers[1] = answers[0]
    asked.clear()
    clock.sleeps.clear()
    assert slurm_job.SlurmClient(Module()).cost_attempts(7)[1]["state"] == "RUNNING"
    assert len(asked) == slurm_job.COST_SACCT_LOOKS and sum(clock.sleeps) == pytest.approx(5.0)


def test_the_cost_takes_the_last_attempts_end_from_slurmctld_rather_than_wait_for_slurmdbd(clock):
    """slurmctld's final record (state, RunTime) is what it hands slurmdbd: with it, one sacct
    answers, however far behind slurmdbd is; each job's own id, each with its own attempts."""
    answer = ("7|7|REQUEUED|30|cpu=2,gres/gpu=4|2026-12-07T10:00:00|2026-12-07T10:00:01\n"
              "7|7|RUNNING|12|cpu=2,gres/gpu=4|2026-12-07T10:00:31|2026-12-07T10:00:33\n"
              "8|6_1|RUNNING|5|cpu=2,gres/gpu=4|2026-12-07T10:00:31|2026-12-07T10:00:33\n")
    asked = []

    class Module:
        params = {"accounting": "yes", "environment": {}}

        def run_command(self, argv, **kwargs):
            asked.append(argv)
            return 0, answer, ""

    attempts = slurm_job.SlurmClient(Module()).cost_attempts(7, {7: ("FAILED", 14, 1), 8: ("COMPLETED", 9, 0)})
    assert [(a["job_id"], a["state"], a["elapsed_seconds"]) for a in attempts] == [
        (7, "REQUEUED", 30), (7, "FAILED", 14), (8, "COMPLETED", 9)]
    assert len(asked) == 1 and clock.sleeps == []
    # slurmctld counts a restart that sacct has no line for yet: its figures are not that line's.
    asked.clear()
    attempts = slurm_job.SlurmClient(Module()).cost_attempts(7, {7: ("FAILED", 14, 2), 8: ("COMPLETED", 9, 0)})
    assert (attempts[1]["state"], attempts[2]["state"]) == ("RUNNING", "COMPLETED")
    assert len(asked) == slurm_job.COST_SACCT_LOOKS


def test_a_requeued_jobs_cost_asks_sacct_once_with_the_controllers_figures(slurm_cli, clock, job_output, tmp_path):
    slurm_cli.answer(SCONTROL, out=job_output("failed", run_dir=str(tmp_path)).replace("Restarts=0", "Restarts=1"))
    slurm_cli.cost = (0, "1234|1234|REQUEUED|30|cpu=16,gres/gpu=8|2026-12-07T10:00:00|2026-12-07T10:00:02\n"
                         "1234|1234|RUNNING|3|cpu=16,gres/gpu=8|2026-12-07T10:00:40|2026-12-07T10:00:41\n", "")
    result = run_module({"job_id": 1234, "accounting": "yes"}).result
    assert (result["state"], result["state_source"], result["elapsed_seconds"], result["restarts"]) == (
        "FAILED", "scontrol", 0, 1)
    assert [(a["state"], a["elapsed_seconds"], a["gpus"]) for a in result["cost"]["attempts"]] == [
        ("REQUEUED", 30, 8), ("FAILED", 0, 8)]
    assert (len(slurm_cli.cost_calls), clock.sleeps, result["cost"]["source"]) == (1, [], "sacct")
    assert result["cost"]["queue_seconds"] == 2 + 1


@pytest.mark.parametrize("version", ["22.05", "25.11"])
def test_a_job_that_ran_once_costs_what_slurmctlds_record_says_without_asking_sacct(
        slurm_cli, clock, slurm_output, tmp_path, version):
    """Slurm 22.05 names the allocation TRES=, later versions AllocTRES= (beside ReqTRES=)."""
    record = re.sub(r"^JobId=\d+ ", "JobId=1234 ", slurm_output(f"{version}/scontrol_show_job.txt"))
    record = re.sub(r"JobState=\S+", "JobState=COMPLETED", record)
    record = re.sub(r"RunTime=\S+", "RunTime=00:01:40", record)
    record = re.sub(r"EligibleTime=\S+", "EligibleTime=2026-12-07T10:00:00", record)
    record = re.sub(r"StartTime=\S+", "StartTime=2026-12-07T10:00:07", record)
    slurm_cli.answer(SCONTROL, out=record)
    result = run_module({"job_id": 1234, "accounting": "yes"}).result
    assert (result["state"], result["restarts"]) == ("COMPLETED", 0)
    assert slurm_cli.cost_calls == [], "slurmdbd is not asked what slurmctld still knows"
    cost = result["cost"]
    assert (cost["source"], cost["unit"], cost["queue_seconds"]) == (run_cost.SOURCE_SLURMCTLD, "GPU", 7)
    assert [(a["state"], a["elapsed_seconds"], a["gpus"], a["cpus"]) for a in cost["attempts"]] == [
        ("COMPLETED", 100, 4, 2)]
    assert cost["hours"] == round(100 * 4 / 3600, 4)


SINFO_THREE = "rec1|gpu*|idle|2|gpu:2\nrec2|gpu*|idle|2|gpu:2\nrec3|gpu*|idle|2|gpu:2\n"


def with_bad_node(tmp_path, node="rec1", reason="NODE_FAIL", hours=24):
    """The test's user has ``node`` among its bad nodes, marked by job 12."""
    (tmp_path / "jobs").mkdir(mode=0o1777, exist_ok=True)
    (tmp_path / "jobs" / pwd.getpwuid(os.geteuid()).pw_name).mkdir(exist_ok=True)
    bad_nodes.update(str(tmp_path / "jobs"), lambda records: bad_nodes.add(records, node, reason, 12, hours, time.time()))


def test_a_groups_job_leaves_the_users_bad_nodes_out(slurm_cli, clock, tmp_path, job_output):
    with_bad_node(tmp_path)
    slurm_cli.answer(SINFO, out=SINFO_THREE)
    slurm_cli.answer(["sbatch"], out="1234\n")
    slurm_cli.answer(SCONTROL, out=job_output("pending_resources"))
    outcome = run_module(nodes_request(tmp_path, names=["rec1", "rec2", "rec3"], group="gpu",
                                       bad_nodes_root=str(tmp_path / "jobs")))
    assert outcome.failed is False, outcome.result.get("msg")
    sbatch = next(argv for argv in slurm_cli.argvs if argv[0] == "sbatch")
    assert "--exclude=rec1" in sbatch and sbatch.index("--exclude=rec1") < len(sbatch) - 1, "an option, before the script"
    checked = outcome.result["nodes_checked"]
    assert checked["excluded"] == ["rec1"] and [entry["node"] for entry in checked["bad_nodes"]] == ["rec1"]
    assert checked["notes"] == [f"left out, a bad node of yours: {checked['bad_nodes'][0]['line']}"]
    assert checked["bad_nodes"][0]["line"].startswith("rec1: NODE_FAIL in job 12 at ")


def test_a_groups_job_that_bad_nodes_leave_too_few_nodes_is_refused_naming_them(slurm_cli, clock, tmp_path):
    with_bad_node(tmp_path)
    with_bad_node(tmp_path, node="rec2", reason="GPU_CHECK")
    slurm_cli.answer(SINFO, out=SINFO_THREE)
    outcome = run_module(nodes_request(tmp_path, names=["rec1", "rec2", "rec3"], group="gpu",
                                       bad_nodes_root=str(tmp_path / "jobs")))
    msg = outcome.result["msg"]
    assert outcome.failed is True and msg.startswith("2 nodes of group gpu are needed and 1 are usable: "), msg
    assert "rec1: NODE_FAIL in job 12" in msg and "rec2: GPU_CHECK in job 12" in msg
    assert "ansible-playbook jobs.yml -e forget_node=rec1 clears one" in msg
    assert slurm_cli.argvs == [SINFO], "nothing submitted"


def test_a_node_list_holding_a_bad_node_is_refused_naming_it_why_and_until_when(slurm_cli, clock, tmp_path):
    with_bad_node(tmp_path, node="rec2", reason="HUNG", hours=2)
    slurm_cli.answer(SINFO, out=SINFO_THREE)
    outcome = run_module(nodes_request(tmp_path, bad_nodes_root=str(tmp_path / "jobs")))
    msg = outcome.result["msg"]
    assert outcome.failed is True and msg.startswith("The node list holds a bad node of yours: rec2: HUNG in job 12 at ")
    record = bad_nodes.read(str(tmp_path / "jobs"))["rec2"]
    assert f"kept out until {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(record['until']))}" in msg
    assert "-e force=true submits to it anyway" in msg
    assert slurm_cli.argvs == [SINFO]
    assert not (tmp_path / "jobs" / pwd.getpwuid(os.geteuid()).pw_name / "train-ddp").exists(), "nothing made"


def test_force_submits_to_a_bad_node_with_a_warning(slurm_cli, clock, tmp_path, job_output, capsys):
    with_bad_node(tmp_path, node="rec2")
    slurm_cli.answer(SINFO, out=SINFO_THREE)
    slurm_cli.answer(["sbatch"], out="1234\n")
    slurm_cli.answer(SCONTROL, out=job_output("pending_resources"))
    outcome = run_module(nodes_request(tmp_path, bad_nodes_root=str(tmp_path / "jobs"), force_bad_nodes=True))
    assert outcome.failed is False and outcome.result["submitted"] is True, outcome.result.get("msg")
    assert "submitting to a bad node of yours, as asked (force): rec2: NODE_FAIL in job 12" in capsys.readouterr().err
    assert not any(arg.startswith("--exclude") for argv in slurm_cli.argvs for arg in argv)


def test_an_expired_bad_node_is_used_again(slurm_cli, clock, tmp_path, job_output):
    (tmp_path / "jobs").mkdir(mode=0o1777)
    (tmp_path / "jobs" / pwd.getpwuid(os.geteuid()).pw_name).mkdir()
    record = tmp_path / "jobs" / pwd.getpwuid(os.geteuid()).pw_name / "nodes.json"
    record.write_text(json.dumps({"nodes": bad_nodes.add({}, "rec2", "HEALTH", 3, 1, time.time() - 2 * 3600)}))
    slurm_cli.answer(SINFO, out=SINFO_THREE)
    slurm_cli.answer(["sbatch"], out="1234\n")
    slurm_cli.answer(SCONTROL, out=job_output("pending_resources"))
    outcome = run_module(nodes_request(tmp_path, bad_nodes_root=str(tmp_path / "jobs")))
    assert outcome.failed is False and outcome.result["nodes_checked"]["bad_nodes"] == []


def node_failed_job(tmp_path, job_output, slurm_cli, sinfo="rec1|gpu*|idle|2|gpu:2\nrec2|gpu*|down*|2|gpu:2\n"):
    """Job 1234 of root's run directory final in NODE_FAIL (Slurm did not requeue it) on rec1 and
    rec2, and sinfo's view of them then; the jobs root."""
    run_record_job(tmp_path, job_output, slurm_cli, state="node_fail")
    slurm_cli.answer(SINFO, out=sinfo)
    return tmp_path / "jobs"


@pytest.mark.parametrize("result, marked", [
    ({"final": True, "outcome": "node_failure",
      "node_states": {"rec1": {"state": "idle", "markers": ""}, "rec2": {"state": "down", "markers": "*"},
                      "rec3": {"state": "drained", "markers": ""}, "rec4": {"state": "mixed", "markers": "*"},
                      "rec5": {"state": "allocated", "markers": ""}}}, ["rec2", "rec3", "rec4"]),
    # Slurm's view said nothing (sinfo failed): no node is guessed.
    ({"final": True, "outcome": "node_failure", "node_states": None}, []),
    ({"final": True, "outcome": "failed", "node_states": {"rec2": {"state": "down", "markers": "*"}}}, []),
    ({"final": False, "outcome": "node_failure", "node_states": {"rec2": {"state": "down", "markers": "*"}}}, []),
])
def test_the_nodes_recorded_after_a_node_failure_are_those_slurm_has_down(result, marked):
    assert slurm_job.failed_job_nodes(result) == marked


def test_a_node_failure_slurm_did_not_requeue_records_the_down_node_alone(slurm_cli, clock, tmp_path, job_output):
    """The job script's EXIT trap never ran on the dead node, and no next attempt will: the follow
    that sees the job end records the node, not the job's node that is well."""
    jobs = node_failed_job(tmp_path, job_output, slurm_cli)
    before = time.time()
    outcome = run_module({"job_id": 1234, "run_records": str(jobs), "bad_node_hours": 24})
    assert outcome.result["outcome"] == "node_failure" and outcome.result["msg"].startswith(
        "Slurm job 1234 ended in state NODE_FAIL"), outcome.result.get("msg")
    record = jobs / "root" / "nodes.json"
    marks = json.loads(record.read_text())["nodes"]
    assert list(marks) == ["rec2"] and (marks["rec2"]["reason"], marks["rec2"]["job_id"]) == ("NODE_FAIL", 1234)
    assert before - 1 <= marks["rec2"]["since"] <= time.time()
    assert marks["rec2"]["until"] - marks["rec2"]["since"] == 24 * 3600
    assert record.stat().st_mode & 0o777 == 0o600
    (listed,) = outcome.result["marked_bad_nodes"]
    assert listed["node"] == "rec2" and listed["line"].startswith("rec2: NODE_FAIL in job 1234 at ")

    # Followed again later (jobs.yml, a second launch of the id): the mark stays as it was.
    (jobs / "root" / "nodes.json").write_text(json.dumps({"nodes": {"rec2": {**marks["rec2"], "since": 100,
                                                                            "until": int(time.time()) + 60}}}))
    slurm_cli.answer(SCONTROL, out=job_output("node_fail", run_dir=str(jobs / "root" / "train-ddp" / "runs" / "3")))
    slurm_cli.answer(SINFO, out="rec1|gpu*|idle|2|gpu:2\nrec2|gpu*|down*|2|gpu:2\n")
    run_module({"job_id": 1234, "run_records": str(jobs), "bad_node_hours": 24})
    assert json.loads(record.read_text())["nodes"]["rec2"]["since"] == 100


@pytest.mark.parametrize("args", [{"bad_node_hours": 0}, {"bad_node_hours": -0.5}, {"run_records": None}])
def test_without_hours_or_a_jobs_root_a_node_failure_records_nothing(slurm_cli, clock, tmp_path, job_output, args):
    jobs = node_failed_job(tmp_path, job_output, slurm_cli)
    outcome = run_module({"job_id": 1234, "run_records": str(jobs), "bad_node_hours": 24, **args})
    assert outcome.result["marked_bad_nodes"] is None and not (jobs / "root" / "nodes.json").exists()


@pytest.mark.parametrize("args, check_mode", [
    ({"job_id": 1234}, False),  # the module's own default: a user of the module records nothing unasked
    ({"job_id": 1234, "bad_node_hours": 24}, True),  # --check predicts; it writes no record
])
def test_a_node_failure_records_nothing_by_the_modules_default_or_in_check_mode(slurm_cli, clock, tmp_path,
                                                                                 job_output, args, check_mode):
    jobs = node_failed_job(tmp_path, job_output, slurm_cli)
    outcome = run_module({**args, "run_records": str(jobs)}, check_mode=check_mode)
    assert outcome.result["outcome"] == "node_failure", outcome.result.get("msg")
    assert outcome.result["marked_bad_nodes"] is None and not (jobs / "root" / "nodes.json").exists()


def test_a_node_failure_is_recorded_for_part_of_an_hour(slurm_cli, clock, tmp_path, job_output):
    jobs = node_failed_job(tmp_path, job_output, slurm_cli)
    run_module({"job_id": 1234, "run_records": str(jobs), "bad_node_hours": 0.5})
    mark = json.loads((jobs / "root" / "nodes.json").read_text())["nodes"]["rec2"]
    assert mark["until"] - mark["since"] == 1800


def test_a_job_that_completed_leaves_the_users_bad_nodes_alone(slurm_cli, clock, tmp_path, job_output):
    run_record_job(tmp_path, job_output, slurm_cli)
    outcome = run_module({"job_id": 1234, "run_records": str(tmp_path / "jobs"), "bad_node_hours": 24})
    assert outcome.result["state"] == "COMPLETED" and outcome.result["marked_bad_nodes"] is None
    assert not (tmp_path / "jobs" / "root" / "nodes.json").exists()


def test_a_planted_bad_nodes_record_is_refused_and_the_jobs_result_stands(slurm_cli, clock, tmp_path, job_output,
                                                                          capsys):
    jobs = node_failed_job(tmp_path, job_output, slurm_cli)
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text("{}\n")
    (jobs / "root" / "nodes.json").symlink_to(elsewhere)
    outcome = run_module({"job_id": 1234, "run_records": str(jobs), "bad_node_hours": 24})
    assert outcome.result["msg"].startswith("Slurm job 1234 ended in state NODE_FAIL"), "the job's own end, no other"
    assert outcome.result["marked_bad_nodes"] is None
    assert elsewhere.read_text() == "{}\n" and (jobs / "root" / "nodes.json").is_symlink()
    warned = capsys.readouterr().err
    assert "job 1234 ended in a node failure on rec2, not recorded as your bad node(s): " in warned
    assert "is a symbolic link: refusing" in warned
