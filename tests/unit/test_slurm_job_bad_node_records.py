"""library/slurm_job.py reading the user's bad-node record before a launch: a user directory that
is not theirs is left for the staging to refuse with the admin's fix; a record that cannot be read
refuses the launch naming why."""

import errno
import os
import pwd

from test_slurm_job_module import SINFO, SINFO_THREE, clock, nodes_request, run_module, slurm_cli  # noqa: F401


def test_a_planted_user_directory_is_refused_by_the_staging_with_the_admins_fix(slurm_cli, clock, tmp_path):
    jobs = tmp_path / "jobs"
    jobs.mkdir(mode=0o1777)
    (tmp_path / "elsewhere").mkdir()
    (jobs / pwd.getpwuid(os.geteuid()).pw_name).symlink_to(tmp_path / "elsewhere")
    slurm_cli.answer(SINFO, out=SINFO_THREE)
    outcome = run_module(nodes_request(tmp_path, bad_nodes_root=str(jobs)))
    user_dir = jobs / pwd.getpwuid(os.geteuid()).pw_name
    assert outcome.failed is True
    assert outcome.result["msg"].startswith(f"{user_dir} is a symbolic link: refusing to write through it "), \
        outcome.result["msg"]
    assert "only an admin can fix it" in outcome.result["msg"]
    assert list((tmp_path / "elsewhere").iterdir()) == [] and slurm_cli.argvs == [SINFO]


def test_a_bad_node_record_that_cannot_be_read_refuses_the_launch_naming_why(slurm_cli, clock, tmp_path, monkeypatch):
    def unreadable(jobs_root, uid=None):
        raise OSError(errno.EIO, "Input/output error", f"{jobs_root}/root/nodes.json")

    monkeypatch.setattr("ansible_collections.hpc.slurm_train.plugins.module_utils.bad_nodes.read", unreadable)
    slurm_cli.answer(SINFO, out=SINFO_THREE)
    outcome = run_module(nodes_request(tmp_path, bad_nodes_root=str(tmp_path / "jobs")))
    assert (outcome.failed, outcome.result["msg"]) == (
        True, f"your bad nodes: [Errno 5] Input/output error: '{tmp_path}/jobs/root/nodes.json'")
    assert slurm_cli.argvs == [SINFO], "nothing staged or submitted"
