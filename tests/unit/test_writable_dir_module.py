"""library/writable_dir.py run in-process as a task runs it: which paths it refuses and what it
says, with the filesystem's answers (statvfs, access, a failed write) as the kernel gives them."""

import errno
import json
import os

import ansible.module_utils._internal
import pytest
from ansible_collections.hpc.slurm_train.plugins.module_utils import job_dirs as writable
from ansible_collections.hpc.slurm_train.plugins.modules import writable_dir
from ansible.module_utils.testing import patch_module_args

MB = 1024 * 1024


@pytest.fixture(autouse=True)
def module_side(monkeypatch):
    monkeypatch.setattr(ansible.module_utils._internal, "is_controller", False)


def run(capsys, check_mode=False, **args):
    if check_mode:
        args["_ansible_check_mode"] = True
    with patch_module_args(args), pytest.raises(SystemExit):
        writable_dir.main()
    return json.loads(capsys.readouterr().out)


def statvfs(free_mb, read_only=False, frsize=4096):
    """os.statvfs's answer for a filesystem with `free_mb` MB available to the user."""
    blocks = free_mb * MB // frsize
    return os.statvfs_result((frsize, frsize, blocks * 4, blocks + 100, blocks, 1000, 900, 900,
                              os.ST_RDONLY if read_only else 0, 255))


def test_a_writable_directory_with_room_passes_and_reports_its_free_space(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(writable_dir.os, "statvfs", lambda path: statvfs(80371))
    result = run(capsys, paths=[str(tmp_path)], min_free_mb=1024)
    assert result.get("failed") is None, result.get("msg")
    assert (result["changed"], result["free_mb"], result["checked"]) == (False, {str(tmp_path): 80371},
                                                                         {str(tmp_path): str(tmp_path)})
    assert list(tmp_path.iterdir()) == []  # the write test leaves nothing behind


def test_a_path_not_made_yet_is_checked_at_its_nearest_existing_directory(capsys, tmp_path):
    wanted = tmp_path / "cuda" / "cuda-11.8" / "lib64"
    result = run(capsys, paths=[str(wanted) + "/"])
    assert result["checked"] == {str(wanted) + "/": str(tmp_path)}
    assert result["free_mb"][str(wanted) + "/"] == os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize // MB


def test_a_file_where_a_directory_should_be_is_named(capsys, tmp_path):
    (tmp_path / "nas").write_text("not a mount\n")
    result = run(capsys, paths=[str(tmp_path / "nas" / "jobs")])
    assert result["failed"] is True
    assert result["msg"] == f"{tmp_path}/nas/jobs: {tmp_path}/nas is not a directory"
    assert result["free_mb"] == {f"{tmp_path}/nas/jobs": None}


@pytest.mark.parametrize("read_only, said", [(True, " (read-only filesystem)"), (False, "")])
def test_a_directory_the_user_cannot_write_is_named(capsys, tmp_path, monkeypatch, read_only, said):
    # The tests run as root, for whom access() allows everything; a user's answer is scripted.
    asked, real_access = [], os.access

    def access(path, mode):
        if path != str(tmp_path):
            return real_access(path, mode)
        asked.append(mode)
        return False

    monkeypatch.setattr(writable_dir.os, "access", access)
    monkeypatch.setattr(writable_dir.os, "statvfs", lambda path: statvfs(500, read_only=read_only))
    result = run(capsys, paths=[str(tmp_path)])
    assert result["msg"] == f"{tmp_path}: {tmp_path} is not writable{said}"
    assert result["free_mb"] == {str(tmp_path): 500}
    # Writing a file in it needs both; a read-only filesystem is said before access() is asked.
    assert asked == ([] if read_only else [os.W_OK | os.X_OK])


def test_a_read_only_filesystem_is_said_where_others_make_the_directories_below(tmp_path, monkeypatch):
    """The launch checks the 0711 jobs root without writing in it (writes_here=False): a read-only
    filesystem is still named as such, not taken for a full one."""
    from ansible_collections.hpc.slurm_train.plugins.module_utils import job_dirs as writable
    monkeypatch.setattr(writable.os, "statvfs", lambda path: statvfs(4, read_only=True))
    assert writable.problem_with(str(tmp_path), 1024, try_write=True, writes_here=False) == (
        f"{tmp_path} is not writable (read-only filesystem)", 4)
    monkeypatch.setattr(writable.os, "statvfs", lambda path: statvfs(4))
    assert writable.problem_with(str(tmp_path), 1024, try_write=True, writes_here=False) == (
        f"{tmp_path} has 4 MB free, 1024 MB are needed (is the filesystem full?)", 4)


def test_a_write_that_fails_is_named_with_the_kernels_reason(capsys, tmp_path, monkeypatch):
    def over_quota(**kwargs):
        raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))

    monkeypatch.setattr(writable.tempfile, "mkstemp", over_quota)
    result = run(capsys, paths=[str(tmp_path)])
    assert result["msg"] == f"{tmp_path}: {tmp_path} cannot be written: Disk quota exceeded"
    # Check mode writes nothing, so it cannot find this out; it still checks the rest.
    checked = run(capsys, check_mode=True, paths=[str(tmp_path)])
    assert (checked.get("failed"), checked.get("skipped"), checked["checked"]) == (None, None,
                                                                                  {str(tmp_path): str(tmp_path)})


def test_the_write_test_is_a_hidden_file_in_the_directory(capsys, tmp_path, monkeypatch):
    made = []
    real = writable.tempfile.mkstemp
    monkeypatch.setattr(writable.tempfile, "mkstemp", lambda **kw: made.append(kw) or real(**kw))
    run(capsys, paths=[str(tmp_path)])
    assert made == [{"prefix": ".write-test-", "dir": str(tmp_path)}]


def test_too_little_free_space_is_named_and_just_enough_passes(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(writable_dir.os, "statvfs", lambda path: statvfs(2048))
    assert run(capsys, paths=[str(tmp_path)], min_free_mb=2048).get("failed") is None
    result = run(capsys, paths=[str(tmp_path)], min_free_mb=2049)
    assert result["msg"] == (f"{tmp_path}: {tmp_path} has 2048 MB free, 2049 MB are needed "
                             "(is the filesystem full?)")


def test_free_space_counts_what_the_user_may_use_in_fragment_units(capsys, tmp_path, monkeypatch):
    # f_bavail (not f_bfree, which counts root's reserve) times f_frsize, in whole MB.
    monkeypatch.setattr(writable_dir.os, "statvfs", lambda path: statvfs(300, frsize=1024))
    assert run(capsys, paths=[str(tmp_path)])["free_mb"] == {str(tmp_path): 300}


def test_every_problem_path_is_named_in_one_message(capsys, tmp_path):
    (tmp_path / "a").write_text("")
    (tmp_path / "b").write_text("")
    result = run(capsys, paths=[str(tmp_path / "a" / "x"), str(tmp_path), str(tmp_path / "b" / "y")])
    assert result["msg"] == (f"{tmp_path}/a/x: {tmp_path}/a is not a directory; "
                             f"{tmp_path}/b/y: {tmp_path}/b is not a directory")
    assert set(result["checked"]) == {str(tmp_path / "a" / "x"), str(tmp_path), str(tmp_path / "b" / "y")}


@pytest.mark.parametrize("args", [{"paths": ["nas/jobs"]}, {"paths": ["/nas"], "min_free_mb": -1}])
def test_relative_paths_and_negative_sizes_are_refused(capsys, args):
    result = run(capsys, **args)
    relative = [p for p in args["paths"] if not p.startswith("/")]
    assert result["msg"] == (f"give absolute paths (got {relative}) and min_free_mb of 0 or more "
                             f"(got {args.get('min_free_mb', 0)})")


def test_the_paths_must_be_given(capsys):
    assert run(capsys)["msg"] == "missing required arguments: paths"
