"""library/slurm_job.py's SlurmClient on its own: how it asks sacct for a final job's cost (once per
look, again only while slurmdbd catches up), with a stand-in module that answers each command."""

import pytest

from ansible_collections.hpc.slurm_train.plugins.modules import slurm_job
from test_slurm_job_module import clock, job_output, run_module, slurm_cli  # noqa: F401

ATTEMPT = "7|7|{state}|30|cpu=2,gres/gpu=4|2026-12-07T10:00:00|2026-12-07T10:00:01\n"


class Answering:
    """A module whose run_command answers every command with ``answer`` (rc, out, err), recording each argv."""

    def __init__(self, answer, accounting="yes"):
        self.params = {"accounting": accounting, "environment": {}}
        self.answer, self.asked = answer, []

    def run_command(self, argv, **kwargs):
        self.asked.append(argv)
        return self.answer


def test_an_attempt_in_a_state_this_module_does_not_know_is_taken_as_sacct_has_it(clock):
    # A newer Slurm's state: not waited for as if slurmdbd had yet to record the attempt's end.
    module = Answering((0, ATTEMPT.format(state="SOMETHING_NEW"), ""))
    attempts = slurm_job.SlurmClient(module).cost_attempts(7)
    assert [a["state"] for a in attempts] == ["SOMETHING_NEW"]
    assert len(module.asked) == 1 and clock.sleeps == []


def test_in_auto_mode_an_sacct_that_does_not_answer_is_asked_once_and_the_cost_left_out(clock):
    module = Answering((1, "", "sacct: error: slurmdbd: Socket timed out on send/recv operation\n"), accounting="auto")
    client = slurm_job.SlurmClient(module)
    assert client.cost_attempts(7) is None
    assert len(module.asked) == 1 and clock.sleeps == []
    assert client.accounting_problem == "sacct failed: sacct: error: slurmdbd: Socket timed out on send/recv operation"


def test_with_accounting_yes_an_sacct_that_does_not_answer_is_retried_then_fails(clock):
    module = Answering((1, "", "sacct: error: slurmdbd: Socket timed out on send/recv operation\n"))
    with pytest.raises(slurm_job.SlurmCommandError):
        slurm_job.SlurmClient(module).cost_attempts(7)
    assert len(module.asked) > 1 and clock.sleeps


def test_an_sacct_answer_that_cannot_be_read_leaves_the_cost_out(clock):
    # Fields other than those asked for (a site's sacct wrapper, say): no cost rather than a wrong one.
    module = Answering((0, "7|COMPLETED|30\n", ""))
    assert slurm_job.SlurmClient(module).cost_attempts(7) is None
    assert len(module.asked) == 1


def test_a_federated_jobs_owner_is_asked_through_the_federation(slurm_cli, clock, job_output):
    # 2**26 and above carry a federation's cluster id: no --local, for the owner question as for scontrol.
    job_id = 1 << 26
    slurm_cli.answer(["scontrol", "show", "job", "-o", str(job_id)], out=job_output("running", job_id=job_id))
    assert run_module({"job_id": job_id, "wait": False}).result["state"] == "RUNNING"
    assert slurm_cli.identity_calls == [["squeue", "-h", "-t", "all", "-j", str(job_id), "-o", "%U|%j"]]
