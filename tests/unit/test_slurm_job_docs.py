"""Every Slurm job state is documented in slurm_job's DOCUMENTATION with the outcome the
module gives it, so a user can read what a launch does in each."""

import pytest
import yaml

from ansible_collections.hpc.slurm_train.plugins.module_utils import slurm
from ansible_collections.hpc.slurm_train.plugins.modules import slurm_job

NOTES = yaml.safe_load(slurm_job.DOCUMENTATION)["notes"]


@pytest.mark.parametrize("state", sorted(slurm.JOB_STATES))
def test_each_state_is_documented_with_its_outcome(state):
    info = slurm.JOB_STATES[state]
    kind = "final, success" if info.success else ("final, failure" if info.final else "not final, followed on")
    assert f"C({state}): RV(outcome={info.outcome}), {kind}; {info.description}." in NOTES


def test_the_documented_options_are_a_users_and_the_action_plugins_own_are_under_internal():
    options = yaml.safe_load(slurm_job.DOCUMENTATION)["options"]
    assert not set(options) & set(slurm_job.INTERNAL_SPEC)
    assert {"state", "script", "job_name", "job_id", "wait", "sbatch_args", "internal"} <= set(options)
    assert "suboptions" not in options["internal"]
    assert set(slurm_job.ARGUMENT_SPEC["internal"]["options"]) == set(slurm_job.INTERNAL_SPEC)
