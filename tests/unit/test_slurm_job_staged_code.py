"""library/slurm_job.py launching a job whose code it stages (code_hash): the code sent once, then
found in place by the next launch of the job name, which is submitted without sending it again."""

from ansible_collections.hpc.slurm_train.plugins.action import slurm_job as staging
from test_slurm_job_module import (  # noqa: F401
    SCONTROL, STAGED_SCRIPT, clock, job_output, run_module, slurm_cli, staged_request,
)


def test_code_already_staged_is_not_sent_again_and_the_next_job_is_submitted(slurm_cli, clock, tmp_path,
                                                                             job_output):
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text("print('hi')\n")
    files, _, _ = staging.list_code(str(source))
    archive = tmp_path / "code.tar.gz"
    staging.pack(files, lambda name: str(source / name), str(archive))
    slurm_cli.answer(["sbatch"], out="1234\n")
    slurm_cli.answer(SCONTROL, out=job_output("pending_resources"))
    first = run_module(staged_request(tmp_path, code_hash="ab12cd34", code_archive=str(archive))).result
    assert (first["submitted"], first["staged"]["code_copied"]) == (True, True)

    later = staged_request(tmp_path, code_hash="ab12cd34")
    later["stage"]["files"][0]["content"] = STAGED_SCRIPT + "# another setting\n"
    slurm_cli.answer(["squeue"])  # the run resumed (the first job did not end): a copy is looked for first
    slurm_cli.answer(["sbatch"], out="1240\n")
    slurm_cli.answer([*SCONTROL[:4], "1240", "--local"], out=job_output("pending_resources", job_id=1240))
    outcome = run_module(later)
    staged = outcome.result["staged"]
    assert (staged["run_id"], staged["resumed"], staged["code_present"], staged["code_copied"]) == (1, True, True, False)
    assert (outcome.failed, outcome.result["submitted"], outcome.result["job_id"]) == (False, True, 1240)
