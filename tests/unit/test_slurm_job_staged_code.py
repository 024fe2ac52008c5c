"""library/slurm_job.py staging a launch: the code (code_hash) sent once, then found in place by
the next launch of the job name; a script it did not stage left alone; a staging that fails on
the NAS named."""

import pytest

from ansible_collections.hpc.slurm_train.plugins.action import slurm_job as staging
from ansible_collections.hpc.slurm_train.plugins.modules import slurm_job
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


def test_a_script_the_module_did_not_stage_gets_no_kept_copy_beside_it(slurm_cli, clock, tmp_path, job_output):
    # Only a staged run's directory keeps each job's script under the job's own name.
    script = tmp_path / "train-ddp.sbatch"
    script.write_text(STAGED_SCRIPT)
    slurm_cli.answer(["sbatch"], out="1234\n")
    slurm_cli.answer(SCONTROL, out=job_output("pending_resources"))
    outcome = run_module({"script": str(script), "job_name": "train-ddp", "force": True, "wait": False})
    assert (outcome.failed, outcome.result["submitted"]) == (False, True)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["train-ddp.sbatch"]


@pytest.mark.parametrize("filename", ["/nas/jobs/root/train-ddp/runs/1/train-ddp.sbatch", None])
def test_a_staging_that_fails_on_the_nas_names_the_file_or_the_jobs_directory(slurm_cli, clock, tmp_path,
                                                                             monkeypatch, filename):
    def full(params, check_mode, known):
        raise OSError(28, "No space left on device", filename)

    monkeypatch.setattr(slurm_job, "stage", full)
    outcome = run_module(staged_request(tmp_path))
    assert (outcome.failed, outcome.result["msg"]) == (
        True, f"{filename or tmp_path / 'jobs'}: No space left on device")
    assert slurm_cli.calls == []
