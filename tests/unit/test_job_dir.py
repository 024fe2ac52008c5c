"""The job_dir module (a user's private job directory on a shared NAS, code staged into it) and
the controller side of its action plugin (which files are staged, their hash, the size limit)."""

import importlib.util
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

import job_dir

ACTION = Path(__file__).resolve().parents[2] / "roles" / "slurm_launch" / "action_plugins" / "job_dir.py"
spec = importlib.util.spec_from_file_location("job_dir_action", ACTION)
action = importlib.util.module_from_spec(spec)
spec.loader.exec_module(action)

OTHER_UID = 4242  # a user who is not the one running the tests


class FakeModule:
    def __init__(self, check_mode=False, **params):
        self.check_mode = check_mode
        self.params = {"mode": "0700", "code_hash": None, "code_archive": None, "probe": False,
                       "expect_files": [], **params}


def run(tmp_path, **params):
    return job_dir.run(FakeModule(jobs_root=str(tmp_path / "jobs"), job_name="train", **params))


@pytest.fixture
def jobs(tmp_path):
    (tmp_path / "jobs").mkdir(mode=0o1777)
    return tmp_path / "jobs"


def user():
    return job_dir.owner_name(os.geteuid())


def test_makes_the_users_private_directories_and_reports_them(tmp_path, jobs):
    result = run(tmp_path, code_hash="ab12cd34")
    base = jobs / user() / "train"
    assert result["job_dir"] == str(base) and result["code_dir"] == str(base / "code" / "ab12cd34")
    assert result["made"] == [str(jobs / user()), str(base), str(base / "code")] and result["changed"]
    for path in (jobs / user(), base, base / "code"):
        assert path.stat().st_mode & 0o7777 == 0o700
    assert result["code_present"] is False
    again = run(tmp_path, code_hash="ab12cd34")
    assert (again["changed"], again["made"]) == (False, [])


def test_a_probe_and_check_mode_make_nothing(tmp_path, jobs):
    assert run(tmp_path, probe=True)["made"] == [str(jobs / user())]
    assert job_dir.run(FakeModule(check_mode=True, jobs_root=str(jobs), job_name="train"))["changed"]
    assert list(jobs.iterdir()) == []


def test_a_link_at_any_component_is_refused_naming_it(tmp_path, jobs):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (jobs / user()).symlink_to(elsewhere)
    with pytest.raises(job_dir.Refused, match=rf"{jobs / user()} is a symbolic link: refusing to write through it"):
        run(tmp_path)
    (jobs / user()).unlink()
    (jobs / user()).mkdir(mode=0o700)
    (jobs / user() / "train").symlink_to(elsewhere)
    with pytest.raises(job_dir.Refused, match=r"train is a symbolic link"):
        run(tmp_path)
    assert list(elsewhere.iterdir()) == []


def test_a_directory_of_another_user_is_refused_naming_its_owner(tmp_path, jobs):
    (jobs / user()).mkdir(mode=0o777)
    os.chown(jobs / user(), OTHER_UID, OTHER_UID)
    with pytest.raises(job_dir.Refused, match=rf"{jobs / user()} belongs to uid {OTHER_UID}, not to {user()}"):
        run(tmp_path)
    assert list((jobs / user()).iterdir()) == []


def test_a_file_in_place_of_a_directory_is_refused(tmp_path, jobs):
    (jobs / user()).write_text("")
    with pytest.raises(job_dir.Refused, match="is not a directory"):
        run(tmp_path)


@pytest.mark.parametrize("params, message", [
    ({"job_name": "../x"}, "job_name='../x'"),
    ({"mode": "777"}, "others may not write"),
    ({"mode": "0600"}, "the owner needs rwx"),
    ({"mode": "rwx"}, "give an octal mode"),
    ({"code_hash": "../../etc"}, "is not a hex digest"),
])
def test_bad_parameters_are_refused_before_anything_is_made(tmp_path, jobs, params, message):
    with pytest.raises(job_dir.Refused, match=message):
        job_dir.run(FakeModule(jobs_root=str(jobs), **{"job_name": "train", **params}))
    assert list(jobs.iterdir()) == []


def test_a_missing_jobs_root_says_provision_makes_it(tmp_path):
    with pytest.raises(job_dir.Refused, match=r"jobs directory .*/jobs: No such file or directory \(provision.yml"):
        run(tmp_path)


def test_the_archive_is_extracted_into_place_with_the_directorys_permissions(tmp_path, jobs):
    source = tmp_path / "src"
    (source / "pkg").mkdir(parents=True)
    (source / "train.py").write_text("print('hi')\n")
    (source / "run.sh").write_text("#!/bin/sh\n")
    (source / "run.sh").chmod(0o755)
    (source / "pkg" / "util.py").write_text("X = 1\n")
    files, _, _ = action.list_code(str(source))
    archive = tmp_path / "code.tar.gz"
    action.pack(files, lambda name: str(source / name), str(archive))
    result = run(tmp_path, code_hash="ab12cd34", code_archive=str(archive), mode="0750")
    code = Path(result["code_dir"])
    assert result["code_copied"] and (code / "pkg" / "util.py").read_text() == "X = 1\n"
    assert (code / "train.py").stat().st_mode & 0o777 == 0o640
    assert (code / "run.sh").stat().st_mode & 0o777 == 0o750
    assert [p.name for p in code.parent.iterdir()] == ["ab12cd34"], "no partial directory left"
    again = run(tmp_path, code_hash="ab12cd34", mode="0750")
    assert again["code_present"] and not again["code_copied"]


def test_an_archive_with_a_path_outside_is_refused_and_leaves_nothing(tmp_path, jobs):
    archive = tmp_path / "evil.tar"
    with tarfile.open(archive, "w") as tar:
        member = tarfile.TarInfo("../escape.py")
        tar.addfile(member)
    with pytest.raises(job_dir.Refused, match="not a plain relative file"):
        run(tmp_path, code_hash="ab12cd34", code_archive=str(archive))
    code = jobs / user() / "train" / "code"
    assert list(code.iterdir()) == [] and not (jobs / user() / "train" / "escape.py").exists()


def git(directory, *argv):
    subprocess.run(["git", "-C", str(directory), *argv], check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@x"})


def test_in_a_git_work_tree_tracked_and_untracked_files_are_staged_but_not_ignored_ones(tmp_path):
    tree = tmp_path / "tree"
    (tree / "code").mkdir(parents=True)
    git(tree, "init", "-q")
    (tree / ".gitignore").write_text("*.ckpt\n")
    (tree / "code" / "train.py").write_text("a\n")
    (tree / "code" / "model.ckpt").write_text("big\n")
    (tree / "outside.py").write_text("not in the code dir\n")
    git(tree, "add", "-A")
    git(tree, "commit", "-q", "-m", "one")
    (tree / "code" / "new.py").write_text("untracked\n")
    (tree / "code" / "link.py").symlink_to("/etc/passwd")
    files, skipped, facts = action.list_code(str(tree / "code"))
    assert [name for name, _ in files] == ["new.py", "train.py"]
    assert skipped == ["link.py"], "a link may point outside the code: not followed"
    assert facts["source"] == "git" and len(facts["git_commit"]) == 40 and facts["git_dirty"] is True


def test_the_hash_follows_content_names_and_the_execute_bit_only(tmp_path):
    code = tmp_path / "c"
    code.mkdir()
    (code / "a.py").write_text("x\n")

    def digest():
        files, _, _ = action.list_code(str(code))
        return action.content_hash(files, lambda name: str(code / name))
    first = digest()
    os.utime(code / "a.py", (1, 1))
    assert digest() == first, "a touched file is the same code"
    (code / "a.py").chmod(0o755)
    assert digest() != first
    (code / "a.py").chmod(0o644)
    assert digest() == first
    (code / "a.py").write_text("y\n")
    assert digest() != first
