"""The slurm_collect action plugin's run(): a finished job's files brought into its outputs folder
over the open connection, and its summaries written there, with no module run; check mode
predicts and writes nothing; a rerun changes nothing.

The submit host is a stand-in: its fetch_file copies a file of this machine, as the ssh
connection's sftp transfer does, and raises as that transfer does for a file that is not there."""

import importlib.util
import shutil
from types import SimpleNamespace

import pytest
from ansible.errors import AnsibleError

from conftest import PROJECT_ROOT

PLUGIN = PROJECT_ROOT / "roles" / "slurm_launch" / "action_plugins" / "slurm_collect.py"
spec = importlib.util.spec_from_file_location("slurm_collect_action_run", PLUGIN)
action = importlib.util.module_from_spec(spec)
spec.loader.exec_module(action)


class SubmitHost:
    become = None
    _shell = SimpleNamespace(tmpdir=None)

    def __init__(self):
        self.fetched = []

    def fetch_file(self, remote, local):
        self.fetched.append(remote)
        try:
            shutil.copyfile(remote, local)
        except OSError as error:
            raise AnsibleError(f"failed to transfer file to {local}: {error}") from None


def collect(tmp_path, check_mode=False, **args):
    host = SubmitHost()
    task = SimpleNamespace(args=args, async_val=0, check_mode=check_mode, action="slurm_collect")
    plugin = action.ActionModule(task, host, None, None, None, None)

    def no_module(*_, **__):
        raise AssertionError("slurm_collect ran a module")

    plugin._execute_module = no_module
    return plugin.run(task_vars={}), host


@pytest.fixture
def job_dir(tmp_path):
    run = tmp_path / "nas" / "jobs" / "alice" / "train" / "runs" / "1"
    run.mkdir(parents=True)
    (run / "train-7.out").write_text("[rank0] training complete\n")
    (run / "train.sbatch").write_text("#!/bin/bash\n")
    return run


def test_files_come_over_the_connection_and_the_summaries_are_written(tmp_path, job_dir):
    outputs = tmp_path / "outputs" / "train-7"
    args = {"dest": str(outputs), "mode": "0700", "fetch_within": str(job_dir),
            "fetch": [str(job_dir / "train-7.out"), str(job_dir / "train.sbatch"), str(job_dir / "sweep.tsv"),
                      str(tmp_path / "elsewhere.out")],
            "files": {"job.json": '{"job_id": 7}\n', "summary.txt": "job 7 (train)\n"}}
    result, host = collect(tmp_path, **args)
    assert result["changed"] is True
    assert sorted(p.name for p in outputs.iterdir()) == ["job.json", "summary.txt", "train-7.out", "train.sbatch"]
    assert (outputs / "train-7.out").read_text() == "[rank0] training complete\n"
    assert (outputs / "job.json").read_text() == '{"job_id": 7}\n'
    assert outputs.stat().st_mode & 0o777 == 0o700
    # A file outside the job's own directory is not asked for; one that is not there is left out.
    assert str(tmp_path / "elsewhere.out") not in host.fetched
    assert result["not_fetched"] == [str(job_dir / "sweep.tsv"), str(tmp_path / "elsewhere.out")]
    again, _ = collect(tmp_path, **args)
    assert again["changed"] is False, "a rerun changes nothing"


def test_check_mode_predicts_and_writes_nothing(tmp_path, job_dir):
    outputs = tmp_path / "outputs" / "train-7"
    result, _ = collect(tmp_path, check_mode=True, dest=str(outputs), fetch=[str(job_dir / "train-7.out")],
                        files={"job.json": "{}\n"})
    assert result["changed"] is True and not outputs.exists()


def test_a_link_where_the_outputs_folder_goes_is_refused(tmp_path, job_dir):
    target = tmp_path / "someone-elses"
    target.mkdir()
    (tmp_path / "outputs").mkdir()
    (tmp_path / "outputs" / "train-7").symlink_to(target)
    with pytest.raises(AnsibleError, match=r"is not a directory \(a link or a file is there\)"):
        collect(tmp_path, dest=str(tmp_path / "outputs" / "train-7"), files={"job.json": "{}\n"})
    assert list(target.iterdir()) == []


def test_a_file_name_with_a_path_is_refused(tmp_path):
    with pytest.raises(AnsibleError, match=r"files key '../job.json' is not allowed: a plain file name"):
        collect(tmp_path, dest=str(tmp_path / "out"), files={"../job.json": "{}"})
    assert not (tmp_path / "out").exists()
