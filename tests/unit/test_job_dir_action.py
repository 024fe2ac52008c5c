"""The job_dir action plugin's run() as a launch runs it: the code listed and hashed on the
controller, the module asked on the submit host, the archive sent only when the code is missing.

The submit host is a stand-in on this machine: its commands (the remote temporary directory's
making and removal, as Ansible's sh shell plugin writes them) run here with /bin/sh, a file put
on it is copied, and the module is the real library/job_dir.py run in-process as
AnsibleModule runs it there."""

import base64
import io
import json
import os
import random
import shutil
import subprocess
import tarfile
from contextlib import redirect_stdout
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import ansible.module_utils._internal
import pytest
from ansible.errors import AnsibleActionFail
from ansible.module_utils.testing import patch_module_args
from ansible.plugins.loader import shell_loader

from ansible_collections.hpc.slurm_train.plugins.modules import job_dir
from ansible_collections.hpc.slurm_train.plugins.module_utils import job_dirs
from conftest import PROJECT_ROOT

from ansible_collections.hpc.slurm_train.plugins.action import job_dir as action
from ansible_collections.hpc.slurm_train.plugins.action import slurm_job as staging

MB = 1024 * 1024


class SubmitHost:
    """Stand-in for the SSH connection to the submit host (see the module docstring)."""

    def __init__(self, remote_tmp):
        self._shell = shell_loader.get("sh")
        self._shell.set_options(direct={"remote_tmp": str(remote_tmp)})
        self.become = None
        self.transport = "ssh"
        self.sent = []
        self.sizes = []

    def put_file(self, local, remote):
        self.sent.append(remote)
        self.sizes.append(os.path.getsize(local))
        shutil.copyfile(local, remote)


def sh(cmd, sudoable=True, in_data=None, **_):
    proc = subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, text=True, check=False)
    return {"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}


class Launch:
    """One run of the job_dir task with these args; what it sent and what the module was asked."""

    def __init__(self, tmp_path, monkeypatch, check_mode=False, **args):
        monkeypatch.setattr(ansible.module_utils._internal, "is_controller", False)
        (tmp_path / "remote-tmp").mkdir(exist_ok=True)
        self.jobs = tmp_path / "jobs"
        self.jobs.mkdir(mode=0o1777, exist_ok=True)
        self.host = SubmitHost(tmp_path / "remote-tmp")
        self.remote_tmp = tmp_path / "remote-tmp"
        self.asked = []
        task = SimpleNamespace(args={"jobs_root": str(self.jobs), "job_name": "train", **args}, async_val=0,
                               check_mode=check_mode, action="job_dir")
        self.plugin = action.ActionModule(task, self.host, None, None, None, None)
        self.check_mode = check_mode

    def module(self, module_name, module_args, task_vars):
        assert module_name == "job_dir"
        self.asked.append(dict(module_args))
        args = {**module_args, "_ansible_check_mode": self.check_mode}
        out = io.StringIO()
        with patch_module_args(args), redirect_stdout(out), pytest.raises(SystemExit):
            job_dir.main()
        return json.loads(out.getvalue())

    def run(self):
        with mock.patch.object(self.plugin, "_execute_module", side_effect=self.module), \
                mock.patch.object(self.plugin, "_low_level_execute_command", side_effect=sh), \
                mock.patch.object(self.plugin, "_fixup_perms2"):
            result = self.plugin.run(task_vars={})
            self.plugin.cleanup()  # as the task executor does after run()
        return result


def code_tree(tmp_path, files, executable=()):
    code = tmp_path / "code"
    code.mkdir()
    for name, content in files.items():
        (code / name).parent.mkdir(parents=True, exist_ok=True)
        (code / name).write_bytes(content if isinstance(content, bytes) else content.encode())
        (code / name).chmod(0o755 if name in executable else 0o644)
    return code


def test_small_code_goes_with_the_first_run_and_needs_no_transfer(tmp_path, monkeypatch):
    code = code_tree(tmp_path, {"train.py": "print('hi')\n", "pkg/util.py": "X = 1\n"})
    launch = Launch(tmp_path, monkeypatch, code_dir=str(code), script=str(code / "train.py"))
    result = launch.run()
    assert result.get("failed") is None, result.get("msg")
    staged = launch.jobs / job_dirs.owner_name(os.geteuid()) / "train" / "code" / result["code"]["hash"]
    assert (staged / "pkg" / "util.py").read_text() == "X = 1\n" and result["code"]["copied"]
    assert launch.host.sent == [] and len(launch.asked) == 1, "one module run, no file transfer"
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(launch.asked[0]["code_archive_inline"]))) as tar:
        assert sorted(tar.getnames()) == ["pkg/util.py", "train.py"]
    again = Launch(tmp_path, monkeypatch, code_dir=str(code), script=str(code / "train.py"))
    result = again.run()
    assert (result["changed"], result["code_present"], result["code"]["copied"]) == (False, True, False)
    assert again.host.sent == [] and len(again.asked) == 1


def test_code_over_the_inline_limit_is_sent_as_a_file_only_when_missing(tmp_path, monkeypatch):
    code = code_tree(tmp_path, {"train.py": "a\n", "weights.bin": os.urandom(2048)})
    monkeypatch.setattr(staging, "INLINE_MAX_BYTES", 1024)
    launch = Launch(tmp_path, monkeypatch, code_dir=str(code), script=str(code / "train.py"))
    result = launch.run()
    assert result.get("failed") is None and result["code"]["copied"]
    assert launch.asked[0]["code_archive_inline"] is None and len(launch.host.sent) == 1 and len(launch.asked) == 2


def test_missing_code_is_sent_once_and_the_task_names_the_staged_script(tmp_path, monkeypatch):
    code = code_tree(tmp_path, {"train.py": "print('hi')\n", "run.sh": "#!/bin/sh\n", "pkg/util.py": "X = 1\n"},
                     executable={"run.sh"})
    monkeypatch.setattr(staging, "INLINE_MAX_BYTES", 0)  # the path of code too large to go inline
    launch = Launch(tmp_path, monkeypatch, code_dir=str(code), script=str(code / "train.py"), mode="0750")
    result = launch.run()
    assert result.get("failed") is None, result.get("msg")
    digest = result["code"]["hash"]
    staged = launch.jobs / job_dirs.owner_name(os.geteuid()) / "train" / "code" / digest
    assert len(digest) == 20 and result["script"] == str(staged / "train.py")
    assert (staged / "pkg" / "util.py").read_text() == "X = 1\n" and (staged / "run.sh").stat().st_mode & 0o777 == 0o750
    assert result["code"] == {"hash": digest, "files": 3, "bytes": 28, "skipped": [], "source_dir": str(code),
                              "copied": True, "git_commit": "", "git_dirty": False, "source": "directory"}
    assert result["changed"] and result["code_copied"]
    first, second = launch.asked
    assert first == {"jobs_root": str(launch.jobs), "job_name": "train", "mode": "0750", "code_hash": digest,
                     "code_archive_inline": None}
    first.pop("code_archive_inline")
    assert second == {**first, "code_archive": launch.host.sent[0]}  # the same request again, with the code
    assert list(launch.remote_tmp.iterdir()) == [], "no remote temporary directory is left behind"

    again = Launch(tmp_path, monkeypatch, code_dir=str(code), script=str(code / "train.py"), mode="0750")
    result = again.run()
    assert (result["changed"], result["code_present"], result["code"]["copied"]) == (False, True, False)
    assert again.host.sent == [] and len(again.asked) == 1, "unchanged code is not sent again"
    assert list(again.remote_tmp.iterdir()) == []


@pytest.mark.parametrize("how", [{"probe": True}, {"check_mode": True}])
def test_a_probe_and_check_mode_send_nothing(tmp_path, monkeypatch, how):
    code = code_tree(tmp_path, {"train.py": "print('hi')\n"})
    launch = Launch(tmp_path, monkeypatch, code_dir=str(code), script=str(code / "train.py"), **how)
    result = launch.run()
    assert result.get("failed") is None, result.get("msg")
    assert launch.host.sent == [] and len(launch.asked) == 1 and list(launch.jobs.iterdir()) == []
    assert result["changed"] and result["code"]["copied"] is False
    assert result["script"] == os.path.join(result["code_dir"], "train.py")


def test_the_preflights_programs_are_staged_side_by_side(tmp_path, monkeypatch):
    programs = code_tree(tmp_path, {"node_check.py": "print(1)\n", "lib/probe.py": "print(2)\n"})
    launch = Launch(tmp_path, monkeypatch, script=str(programs / "node_check.py"),
                    code_files=[str(programs / "node_check.py"), str(programs / "lib" / "probe.py")])
    result = launch.run()
    assert result.get("failed") is None, result.get("msg")
    staged = Path(result["code_dir"])
    assert sorted(p.name for p in staged.iterdir()) == ["node_check.py", "probe.py"]
    assert result["script"] == str(staged / "node_check.py")
    assert {k: result["code"][k] for k in ("files", "source", "git_dirty", "source_dir")} == \
        {"files": 2, "source": "files", "git_dirty": False, "source_dir": str(programs)}


def test_two_code_files_of_one_name_or_a_directory_are_refused(tmp_path, monkeypatch):
    programs = code_tree(tmp_path, {"check.py": "a\n", "other/check.py": "b\n"})
    launch = Launch(tmp_path, monkeypatch, script=str(programs / "check.py"),
                    code_files=[str(programs / "check.py"), str(programs / "other" / "check.py")])
    with pytest.raises(AnsibleActionFail, match=rf"code_files: {programs}/other/check.py is not a regular file of"):
        launch.run()
    launch = Launch(tmp_path, monkeypatch, script=str(programs / "check.py"),
                    code_files=[str(programs / "check.py"), str(programs / "other")])
    with pytest.raises(AnsibleActionFail, match=rf"code_files: {programs}/other is not a regular file"):
        launch.run()
    assert launch.asked == [] and list(launch.jobs.iterdir()) == []


def test_a_code_dir_that_is_missing_or_does_not_hold_the_script_is_refused(tmp_path, monkeypatch):
    code = code_tree(tmp_path, {"train.py": "a\n"})
    with pytest.raises(AnsibleActionFail, match=rf"code_dir {tmp_path}/nowhere is not a directory on the controller"):
        Launch(tmp_path, monkeypatch, code_dir=str(tmp_path / "nowhere"), script=str(code / "train.py")).run()
    (tmp_path / "elsewhere.py").write_text("b\n")
    with pytest.raises(AnsibleActionFail, match=rf"the script {tmp_path}/elsewhere.py is not inside code_dir {code}"):
        Launch(tmp_path, monkeypatch, code_dir=str(code), script=str(tmp_path / "elsewhere.py")).run()


def test_a_script_git_ignores_is_refused_as_not_staged(tmp_path, monkeypatch):
    code = code_tree(tmp_path, {"train.py": "a\n", ".gitignore": "train.py\n"})
    subprocess.run(["git", "init", "-q", str(code)], check=True)
    launch = Launch(tmp_path, monkeypatch, code_dir=str(code), script=str(code / "train.py"))
    with pytest.raises(AnsibleActionFail, match=rf"the script {code}/train.py is not among the files staged"):
        launch.run()
    assert launch.asked == []


def test_code_over_the_limit_is_refused_naming_its_size_and_the_largest_files(tmp_path, monkeypatch):
    # Sizes on the 0.05 MB roundings, so that the MB shown are exactly the byte counts / 1048576.
    sizes = {"train.py": MB // 4, "data.bin": 3 * MB, "weights.pt": 11 * MB // 4, "vocab.txt": 5 * MB // 4,
             "extra.bin": MB // 2}
    code = code_tree(tmp_path, {name: b"x" * size for name, size in sizes.items()})
    launch = Launch(tmp_path, monkeypatch, code_dir=str(code), script=str(code / "train.py"), max_mb=5)
    with pytest.raises(AnsibleActionFail) as refused:
        launch.run()
    assert str(refused.value) == (
        f"the code to stage from {code} is 7.8 MB in 5 files, over slurm_launch_code_max_mb=5 (largest: "
        "data.bin 3.0 MB, weights.pt 2.8 MB, vocab.txt 1.2 MB); point -e code_dir= at the training code only, "
        "add data to .gitignore, or raise the limit")
    assert launch.asked == []


def test_code_of_exactly_the_limit_passes_and_one_byte_more_does_not(tmp_path, monkeypatch):
    code = code_tree(tmp_path, {"train.py": b"x" * (MB - 1000), "a.py": b"y" * 1000})
    result = Launch(tmp_path, monkeypatch, code_dir=str(code), script=str(code / "train.py"), max_mb=1).run()
    assert result.get("failed") is None and result["code"]["bytes"] == MB
    (code / "a.py").write_bytes(b"y" * 1001)
    with pytest.raises(AnsibleActionFail, match="is 1.0 MB in 2 files, over slurm_launch_code_max_mb=1 "):
        Launch(tmp_path, monkeypatch, code_dir=str(code), script=str(code / "train.py"), max_mb=1).run()
    (code / "a.py").write_bytes(b"y" * (MB // 4 + 1000))
    with pytest.raises(AnsibleActionFail, match=r"is 1.2 MB in 2 files, .* \(largest: train.py 1.0 MB, a.py 0.3 MB\)"):
        Launch(tmp_path, monkeypatch, code_dir=str(code), script=str(code / "train.py"), max_mb=1).run()


def test_the_default_limit_is_100_mb(tmp_path, monkeypatch):
    code = code_tree(tmp_path, {"train.py": b""})
    os.truncate(code / "train.py", 100 * MB)  # sparse: its size is what counts
    launch = Launch(tmp_path, monkeypatch, code_dir=str(code), script=str(code / "train.py"), probe=True)
    assert launch.run().get("failed") is None
    os.truncate(code / "train.py", 100 * MB + 1)
    with pytest.raises(AnsibleActionFail, match="over slurm_launch_code_max_mb=100 "):
        Launch(tmp_path, monkeypatch, code_dir=str(code), script=str(code / "train.py"), probe=True).run()


def test_a_refusal_of_the_module_is_the_tasks_failure_and_nothing_is_sent(tmp_path, monkeypatch):
    code = code_tree(tmp_path, {"train.py": "a\n"})
    launch = Launch(tmp_path, monkeypatch, code_dir=str(code), script=str(code / "train.py"))
    (launch.jobs / job_dirs.owner_name(os.geteuid())).symlink_to(tmp_path)
    result = launch.run()
    assert result["failed"] and "is a symbolic link: refusing to write through it" in result["msg"]
    assert launch.host.sent == [] and len(launch.asked) == 1


def test_a_refusal_of_the_extraction_is_the_tasks_failure(tmp_path, monkeypatch):
    code = code_tree(tmp_path, {"train.py": "a\n"})
    monkeypatch.setattr(staging, "INLINE_MAX_BYTES", 0)  # the file transfer is where the plant happens
    launch = Launch(tmp_path, monkeypatch, code_dir=str(code), script=str(code / "train.py"))
    put = launch.host.put_file
    job = launch.jobs / job_dirs.owner_name(os.geteuid()) / "train"

    def put_and_plant(local, remote):
        # While the archive travels, code/ is swapped for a link (another user racing the launch).
        put(local, remote)
        (job / "code").rename(job / "moved")
        (job / "code").symlink_to(job / "moved")
    launch.host.put_file = put_and_plant
    result = launch.run()
    assert result["failed"] and result["msg"].startswith(f"{job}/code is a symbolic link: refusing to write")
    assert len(launch.asked) == 2 and "code" not in result
    assert list((job / "moved").iterdir()) == [] and list(launch.remote_tmp.iterdir()) == []


def git(directory, *argv):
    subprocess.run(["git", "-C", str(directory), *argv], check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@x"})


def test_the_hash_of_a_tree_is_the_same_as_in_earlier_releases(tmp_path):
    # Pinned: a change of the hash's make-up would copy every user's unchanged code again. It is the
    # first 20 hex digits of sha256 over "<name>\0<x or ->\0<sha256 of the content>\n" per file.
    code = code_tree(tmp_path, {"train.py": "print('hi')\n", "run.sh": "#!/bin/sh\n"}, executable={"run.sh"})
    files, _, _ = staging.list_code(str(code))
    assert staging.content_hash(files, lambda name: str(code / name)) == "13c4c11459f0953fd18f"


def test_the_archive_holds_plain_files_and_scripts_with_the_modes_tar_shows_for_them(tmp_path):
    code = code_tree(tmp_path, {"train.py": "a\n", "run.sh": "#!/bin/sh\n"}, executable={"run.sh"})
    files, _, _ = staging.list_code(str(code))
    staging.pack(files, lambda name: str(code / name), str(tmp_path / "code.tar.gz"))
    with tarfile.open(tmp_path / "code.tar.gz") as tar:
        assert {m.name: (m.mode, m.isfile()) for m in tar.getmembers()} == \
            {"run.sh": (0o755, True), "train.py": (0o644, True)}


def test_the_archive_sent_is_compressed(tmp_path, monkeypatch):
    code = code_tree(tmp_path, {"train.py": "print('hi')\n" * 100_000})
    launch = Launch(tmp_path, monkeypatch, code_dir=str(code), script=str(code / "train.py"))
    assert launch.run().get("failed") is None
    assert launch.host.sizes[0] < 100_000 < (code / "train.py").stat().st_size


def test_skipped_directories_and_deleted_files_of_a_work_tree_are_not_staged(tmp_path):
    code = code_tree(tmp_path, {"a_gone.py": "1\n", "train.py": "2\n", "outputs/log.txt": "3\n",
                                "pkg/__pycache__/m.pyc": "4\n", "pkg/m.py": "5\n"})
    git(code, "init", "-q")
    git(code, "add", "-f", "-A")
    git(code, "commit", "-q", "-m", "one")
    (code / "a_gone.py").unlink()
    files, skipped, facts = staging.list_code(str(code))
    assert ([name for name, _ in files], skipped, facts["source"]) == (["pkg/m.py", "train.py"], [], "git")


def test_outside_a_work_tree_skipped_directories_and_a_stale_git_file_are_not_staged(tmp_path):
    # A .git file is what a worktree leaves; once its repository is gone, git answers nothing.
    code = code_tree(tmp_path, {".git": "gitdir: /nowhere/.git/worktrees/x\n", "train.py": "2\n",
                                ".venv/lib.py": "3\n", "outputs/log.txt": "4\n", "pkg/m.py": "5\n"})
    files, skipped, facts = staging.list_code(str(code))
    assert ([name for name, _ in files], skipped, facts) == \
        (["pkg/m.py", "train.py"], [], {"git_commit": "", "git_dirty": False, "source": "directory"})


def archive_of(tmp_path, content):
    """The CodeToStage of a code directory holding train.py and data.bin of ``content``."""
    shutil.rmtree(tmp_path / "code", ignore_errors=True)
    code = code_tree(tmp_path, {"train.py": "print(1)\n"})
    (code / "data.bin").write_bytes(content)
    for name in ("train.py", "data.bin"):
        os.utime(code / name, (1_800_000_000, 1_800_000_000))  # the same tar headers every time
    return staging.CodeToStage({"code_dir": str(code), "script": str(code / "train.py")})


def test_code_whose_archive_is_256_kib_goes_inline_and_one_byte_more_is_sent_as_a_file(tmp_path):
    data = random.Random(0).randbytes(300 * 1024)  # does not compress: the archive grows with it

    def archive_size(size):
        code = archive_of(tmp_path, data[:size])
        buffer = io.BytesIO()
        staging.pack(code.files, code.source, buffer)
        return code, len(buffer.getvalue())

    # The data size where the archive passes 256 KiB: at most 256 KiB with it, over with one byte more.
    low, high = 200 * 1024, 300 * 1024
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if archive_size(middle)[1] <= 256 * 1024 else (low, middle)
    (inside, inside_size), (over, over_size) = archive_size(low), archive_size(high)
    assert 256 * 1024 - 64 < inside_size <= 256 * 1024 < over_size < 256 * 1024 + 64
    assert len(base64.b64decode(inside.inline(False))) == inside_size, "an archive of up to 256 KiB goes inline"
    assert over.inline(False) is None
    assert inside.inline(True) is None, "a dry run extracts nothing"


def test_code_that_compresses_goes_inline_up_to_a_mebibyte_and_larger_is_not_even_packed(tmp_path, monkeypatch):
    # Files of exactly a mebibyte in all (train.py's 9 bytes with the data) are packed.
    assert archive_of(tmp_path, bytes(1024 * 1024 - len("print(1)\n"))).inline(False) is not None
    packed = []
    monkeypatch.setattr(staging, "pack", lambda *args: packed.append(args))
    assert archive_of(tmp_path, bytes(1024 * 1024)).inline(False) is None and packed == []
