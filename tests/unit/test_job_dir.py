"""The job_dir module (a user's private job directory on a shared NAS, code staged into it) and
the controller side of its action plugin (which files are staged, their hash, the size limit)."""

import base64
import errno
import json
import os
import shutil
import stat
import subprocess
import tarfile
from pathlib import Path

import ansible.module_utils._internal
import pytest
import yaml
from ansible.module_utils.testing import patch_module_args

from ansible_collections.hpc.slurm_train.plugins.modules import job_dir
from ansible_collections.hpc.slurm_train.plugins.module_utils import job_dirs

from ansible_collections.hpc.slurm_train.plugins.action import slurm_job as staging

OTHER_UID = 4242  # a user who is not the one running the tests


class FakeModule:
    def __init__(self, check_mode=False, **params):
        self.check_mode = check_mode
        # The module's own defaults, as AnsibleModule fills them in.
        self.params = {name: spec.get("default") for name, spec in job_dir.ARGUMENT_SPEC.items()}
        self.params.update(params)


def run(tmp_path, **params):
    return job_dir.run(FakeModule(jobs_root=str(tmp_path / "jobs"), job_name="train", **params))


@pytest.fixture
def jobs(tmp_path):
    (tmp_path / "jobs").mkdir(mode=0o1777)
    return tmp_path / "jobs"


def user():
    return job_dirs.owner_name(os.geteuid())


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
    with pytest.raises(job_dirs.Refused, match=rf"{jobs / user()} is a symbolic link: refusing to write through it"):
        run(tmp_path)
    (jobs / user()).unlink()
    (jobs / user()).mkdir(mode=0o700)
    (jobs / user() / "train").symlink_to(elsewhere)
    with pytest.raises(job_dirs.Refused, match=r"train is a symbolic link"):
        run(tmp_path)
    assert list(elsewhere.iterdir()) == []


def test_a_directory_of_another_user_is_refused_naming_its_owner(tmp_path, jobs):
    (jobs / user()).mkdir(mode=0o777)
    os.chown(jobs / user(), OTHER_UID, OTHER_UID)
    with pytest.raises(job_dirs.Refused, match=rf"{jobs / user()} belongs to uid {OTHER_UID}, not to {user()}"):
        run(tmp_path)
    assert list((jobs / user()).iterdir()) == []


def test_a_file_in_place_of_a_directory_is_refused(tmp_path, jobs):
    (jobs / user()).write_text("")
    with pytest.raises(job_dirs.Refused, match="is not a directory"):
        run(tmp_path)


@pytest.mark.parametrize("params, message", [
    ({"job_name": "../x"}, "job_name='../x'"),
    ({"mode": "777"}, "at most 0750"),
    ({"mode": "0702"}, "at most 0750"),
    ({"mode": "0600"}, "the owner needs rwx"),
    ({"mode": "rwx"}, "give an octal mode"),
    ({"code_hash": "../../etc"}, "is not a hex digest"),
])
def test_bad_parameters_are_refused_before_anything_is_made(tmp_path, jobs, params, message):
    with pytest.raises(job_dirs.Refused, match=message):
        job_dir.run(FakeModule(jobs_root=str(jobs), **{"job_name": "train", **params}))
    assert list(jobs.iterdir()) == []


def test_a_missing_jobs_root_says_provision_makes_it(tmp_path):
    with pytest.raises(job_dirs.Refused, match=r"jobs directory .*/jobs: No such file or directory \(provision.yml"):
        run(tmp_path)


def test_the_archive_is_extracted_into_place_with_the_directorys_permissions(tmp_path, jobs):
    source = tmp_path / "src"
    (source / "pkg").mkdir(parents=True)
    (source / "train.py").write_text("print('hi')\n")
    (source / "run.sh").write_text("#!/bin/sh\n")
    (source / "run.sh").chmod(0o755)
    (source / "pkg" / "util.py").write_text("X = 1\n")
    files, _, _ = staging.list_code(str(source))
    archive = tmp_path / "code.tar.gz"
    staging.pack(files, lambda name: str(source / name), str(archive))
    result = run(tmp_path, code_hash="ab12cd34", code_archive=str(archive), mode="0750")
    code = Path(result["code_dir"])
    assert result["code_copied"] and (code / "pkg" / "util.py").read_text() == "X = 1\n"
    assert (code / "train.py").stat().st_mode & 0o777 == 0o640
    assert (code / "run.sh").stat().st_mode & 0o777 == 0o750
    assert sorted(p.name for p in code.parent.iterdir()) == ["ab12cd34", "ab12cd34.manifest"], \
        "no partial directory left"
    again = run(tmp_path, code_hash="ab12cd34", mode="0750")
    assert again["code_present"] and not again["code_copied"]


def test_an_archive_with_a_path_outside_is_refused_and_leaves_nothing(tmp_path, jobs):
    archive = tmp_path / "evil.tar"
    with tarfile.open(archive, "w") as tar:
        member = tarfile.TarInfo("../escape.py")
        tar.addfile(member)
    with pytest.raises(job_dirs.Refused, match="not a plain relative file"):
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
    files, skipped, facts = staging.list_code(str(tree / "code"))
    assert [name for name, _ in files] == ["new.py", "train.py"]
    assert skipped == ["link.py"], "a link may point outside the code: not followed"
    assert facts["source"] == "git" and len(facts["git_commit"]) == 40 and facts["git_dirty"] is True


def test_the_hash_follows_content_names_and_the_execute_bit_only(tmp_path):
    code = tmp_path / "c"
    code.mkdir()
    (code / "a.py").write_text("x\n")

    def digest():
        files, _, _ = staging.list_code(str(code))
        return staging.content_hash(files, lambda name: str(code / name))
    first = digest()
    os.utime(code / "a.py", (1, 1))
    assert digest() == first, "a touched file is the same code"
    (code / "a.py").chmod(0o755)
    assert digest() != first
    (code / "a.py").chmod(0o644)
    assert digest() == first
    (code / "a.py").write_text("y\n")
    assert digest() != first


def main_result(capsys, monkeypatch, check_mode=False, **args):
    """What the task reports when the module runs on the submit host with these arguments."""
    monkeypatch.setattr(ansible.module_utils._internal, "is_controller", False)
    if check_mode:
        args["_ansible_check_mode"] = True
    with patch_module_args(args), pytest.raises(SystemExit):
        job_dir.main()
    return json.loads(capsys.readouterr().out)


def test_the_task_reports_the_directories_it_made_and_in_check_mode_only_predicts_them(capsys, monkeypatch, jobs):
    predicted = main_result(capsys, monkeypatch, check_mode=True, jobs_root=str(jobs), job_name="train")
    assert (predicted["changed"], predicted["made"]) == (True, [str(jobs / user())])
    assert list(jobs.iterdir()) == []
    made = main_result(capsys, monkeypatch, jobs_root=str(jobs), job_name="train", code_hash="ab12cd34")
    assert made.get("failed") is None, made.get("msg")
    assert made["made"] == [str(jobs / user()), str(jobs / user() / "train"), str(jobs / user() / "train" / "code")]
    assert (jobs / user() / "train" / "code").is_dir() and made["code_present"] is False


def test_the_task_fails_unchanged_naming_the_refused_path_or_the_missing_argument(capsys, monkeypatch, jobs):
    (jobs / user()).symlink_to(jobs)
    refused = main_result(capsys, monkeypatch, jobs_root=str(jobs), job_name="train")
    assert (refused["failed"], refused["changed"]) == (True, False)
    assert refused["msg"].startswith(f"{jobs / user()} is a symbolic link: refusing to write through it")
    missing = main_result(capsys, monkeypatch, job_name="train")
    assert missing["failed"] and missing["msg"] == "missing required arguments: jobs_root"
    missing = main_result(capsys, monkeypatch, jobs_root=str(jobs))
    assert missing["failed"] and missing["msg"] == "missing required arguments: job_name"


def test_a_failing_write_is_reported_unchanged_with_the_path_it_failed_on(capsys, monkeypatch, tmp_path, jobs):
    archive = pack_tree(tmp_path, {"train.py": "print('hi')\n"})
    victim = plant_link_while_extracting(monkeypatch, tmp_path, "train.py")
    failed = main_result(capsys, monkeypatch, jobs_root=str(jobs), job_name="train", code_hash="ab12cd34",
                         code_archive=str(archive))
    assert (failed["failed"], failed["changed"]) == (True, False)
    assert failed["msg"].endswith("/train.py: File exists") and ".ab12cd34.partial-" in failed["msg"]
    assert victim.read_text() == "the other user's\n"


def test_the_documented_options_are_the_argument_spec():
    documented = yaml.safe_load(job_dir.DOCUMENTATION)["options"]
    assert sorted(documented) == sorted(job_dir.ARGUMENT_SPEC)
    for name, spec in job_dir.ARGUMENT_SPEC.items():
        doc = documented[name]
        assert (doc["type"], doc.get("default"), doc.get("required", False), doc.get("elements")) == \
            (spec["type"], spec.get("default"), spec.get("required", False), spec.get("elements")), name


def test_a_jobs_root_that_is_a_file_is_refused_as_not_a_directory(tmp_path):
    (tmp_path / "jobs").write_text("")
    with pytest.raises(job_dirs.Refused, match=r"jobs directory .*/jobs: Not a directory \(provision.yml makes it\)"):
        run(tmp_path)


def test_a_directory_of_the_wrong_mode_is_set_right_and_a_probe_only_reports_it(tmp_path, jobs):
    run(tmp_path, code_hash="ab12cd34")
    base = jobs / user() / "train"
    base.chmod(0o755)
    probed = run(tmp_path, code_hash="ab12cd34", probe=True)
    assert (probed["changed"], probed["made"]) == (True, []) and base.stat().st_mode & 0o7777 == 0o755
    fixed = run(tmp_path, code_hash="ab12cd34")
    assert (fixed["changed"], fixed["made"]) == (True, []) and base.stat().st_mode & 0o7777 == 0o700


@pytest.mark.parametrize("mode", ["0770", "0755", "0775", "0751"])
def test_a_mode_over_0750_is_refused_before_anything_is_made(tmp_path, jobs, mode):
    archive = pack_tree(tmp_path, {"train.py": "print('hi')\n"})
    with pytest.raises(job_dirs.Refused, match=rf"^mode={mode}: at most 0750 and the owner needs rwx"):
        run(tmp_path, code_hash="ab12cd34", code_archive=str(archive), mode=mode)
    assert list(jobs.iterdir()) == []


def test_staged_directories_get_the_mode_whatever_the_umask(tmp_path, jobs):
    source = tmp_path / "src"
    (source / "pkg" / "data").mkdir(parents=True)
    (source / "train.py").write_text("a\n")
    (source / "pkg" / "util.py").write_text("b\n")
    archive = tmp_path / "code.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(source, arcname=".")  # members ".", "./pkg", "./pkg/data" (empty), ...: as tar -c . lists them
    old = os.umask(0o022)
    try:
        result = run(tmp_path, code_hash="ab12cd34", code_archive=str(archive), mode="0750")
    finally:
        os.umask(old)
    code = Path(result["code_dir"])
    assert (code / "pkg" / "util.py").read_text() == "b\n" and (code / "train.py").read_text() == "a\n"
    for directory in (code, code / "pkg", code / "pkg" / "data"):
        assert directory.stat().st_mode & 0o7777 == 0o750, directory
    assert (code / "pkg" / "util.py").stat().st_mode & 0o777 == 0o640


def pack_tree(tmp_path, files, executable=()):
    """The archive the action plugin sends for a code directory holding `files`."""
    source = tmp_path / "src"
    source.mkdir()
    for name, text in files.items():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_text(text)
        (source / name).chmod(0o755 if name in executable else 0o644)
    listed, _, _ = staging.list_code(str(source))
    archive = tmp_path / "code.tar.gz"
    staging.pack(listed, lambda name: str(source / name), str(archive))
    return archive


def plant_link_while_extracting(monkeypatch, tmp_path, name):
    """Another member of a group-writable job directory's group plants `name` in the partial
    directory as a link to a file of theirs, between its making and the extraction."""
    victim = tmp_path / "victim.txt"
    victim.write_text("the other user's\n")
    real = job_dirs.extract

    def planting(archive, destination, file_mode):
        os.symlink(victim, os.path.join(destination, name))
        real(archive, destination, file_mode)
    monkeypatch.setattr(job_dirs, "extract", planting)
    return victim


def test_a_link_planted_in_the_partial_directory_is_not_written_through(monkeypatch, tmp_path, jobs):
    archive = pack_tree(tmp_path, {"train.py": "print('hi')\n"})
    victim = plant_link_while_extracting(monkeypatch, tmp_path, "train.py")
    with pytest.raises(FileExistsError):
        run(tmp_path, code_hash="ab12cd34", code_archive=str(archive), mode="0750")
    assert victim.read_text() == "the other user's\n"
    assert list((jobs / user() / "train" / "code").iterdir()) == [], "the partial directory is removed"
    assert not archive.exists()


def test_a_copy_is_reported_changed_and_the_archive_removed(tmp_path, jobs):
    run(tmp_path, code_hash="ab12cd34")
    archive = pack_tree(tmp_path, {"train.py": "print('hi')\n"})
    result = run(tmp_path, code_hash="ab12cd34", code_archive=str(archive))
    assert (result["changed"], result["made"], result["code_copied"]) == (True, [], True)
    assert not archive.exists(), "the archive is removed once extracted"


def test_an_archive_already_gone_is_no_failure_when_the_code_is_there(tmp_path, jobs):
    archive = pack_tree(tmp_path, {"train.py": "print('hi')\n"})
    run(tmp_path, code_hash="ab12cd34", code_archive=str(archive))
    again = run(tmp_path, code_hash="ab12cd34", code_archive=str(archive))
    assert (again["changed"], again["code_present"], again["code_copied"]) == (False, True, False)


def test_every_directory_it_opened_is_closed_again(tmp_path, jobs):
    before = sorted(os.listdir("/proc/self/fd"))
    run(tmp_path, code_hash="ab12cd34")
    run(tmp_path, code_hash="ab12cd34", probe=True)
    assert sorted(os.listdir("/proc/self/fd")) == before


def another_copy_lands_while_extracting(monkeypatch, owner=None):
    """A second launch of the same code renames its copy into code/<hash> first (or, with owner,
    another user makes that directory), while this run is still extracting."""
    real = job_dirs.extract

    def racing(archive, destination, file_mode):
        real(archive, destination, file_mode)
        theirs = os.path.join(os.path.dirname(destination), "ab12cd34")
        os.mkdir(theirs, 0o700)
        Path(theirs, "train.py").write_text("print('hi')\n")
        if owner is not None:
            os.chown(theirs, owner, owner)
    monkeypatch.setattr(job_dirs, "extract", racing)


def test_a_launch_of_the_same_code_that_got_there_first_is_kept(monkeypatch, tmp_path, jobs):
    archive = pack_tree(tmp_path, {"train.py": "print('hi')\n"})
    another_copy_lands_while_extracting(monkeypatch)
    result = run(tmp_path, code_hash="ab12cd34", code_archive=str(archive))
    code = jobs / user() / "train" / "code"
    assert (result["changed"], result["code_copied"]) == (True, True)
    assert sorted(p.name for p in code.iterdir()) == ["ab12cd34", "ab12cd34.manifest"]
    assert (code / "ab12cd34" / "train.py").exists()


def test_a_directory_another_user_made_in_its_place_meanwhile_is_refused(monkeypatch, tmp_path, jobs):
    archive = pack_tree(tmp_path, {"train.py": "print('hi')\n"})
    another_copy_lands_while_extracting(monkeypatch, owner=OTHER_UID)
    with pytest.raises(job_dirs.Refused, match=rf"code/ab12cd34 belongs to uid {OTHER_UID}, not to {user()}"):
        run(tmp_path, code_hash="ab12cd34", code_archive=str(archive))
    assert [p.name for p in (jobs / user() / "train" / "code").iterdir()] == ["ab12cd34"], "no partial left"


# Runs: a job name is an experiment, each launch a run in runs/<id>/. The records are written
# as templates/train.sbatch.j2 writes them at the job's end (and collect.yml with Slurm's state).
# A run's request.json as a launch of run()'s request records it (code_hash added by the staging).
LAUNCH_REQUEST = {"code_hash": ""}


def ended(jobs, run_id, state, exit_code=0, step=None, request=LAUNCH_REQUEST):
    run_dir = jobs / user() / "train" / "runs" / str(run_id)
    run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    (run_dir / "run.json").write_text(json.dumps({"job_id": 100 + run_id, "state": state, "exit_code": exit_code}))
    if request is not None:
        (run_dir / "request.json").write_text(json.dumps(request))
    if step is not None:
        (run_dir / "checkpoints").mkdir(exist_ok=True)
        (run_dir / "checkpoints" / "checkpoint.json").write_text(json.dumps({"step": step}))
    return run_dir


def test_the_first_launch_is_a_fresh_run_1_made_with_its_directory(tmp_path, jobs):
    planned = run(tmp_path, resume="auto", probe=True)
    assert (planned["run_id"], planned["resumed"], list(jobs.iterdir())) == (1, False, [])
    made = run(tmp_path, resume="auto")
    assert made["run_dir"] == str(jobs / user() / "train" / "runs" / "1") and not made["resumed"]
    assert (jobs / user() / "train" / "runs" / "1").is_dir()
    # No end recorded yet (pending or running): the next launch is that run again, not run 2.
    again = run(tmp_path, resume="auto")
    assert (again["run_id"], again["resumed"]) == (1, True) and "recorded no end" in again["run_reason"]


@pytest.mark.parametrize("state, exit_code", [("COMPLETED", 0), ("FAILED", 1), ("CANCELLED by 2001", 0),
                                              ("OUT_OF_MEMORY", 0)])
def test_a_finished_run_is_not_resumed_the_next_is_fresh(tmp_path, jobs, state, exit_code):
    ended(jobs, 1, "COMPLETED")
    ended(jobs, 2, state, exit_code, step=30)
    result = run(tmp_path, resume="auto")
    assert (result["run_id"], result["resumed"], result["resumed_step"]) == (3, False, None)
    assert result["run_reason"] == f"run 2 of this request ended {state.split()[0]}"
    assert (jobs / user() / "train" / "runs" / "3").is_dir()


@pytest.mark.parametrize("state, exit_code", [("TIMEOUT", 0), ("PREEMPTED", 0), ("NODE_FAIL", 1),
                                              ("REQUEUE_LIMIT", 75), ("FAILED", 75)])
def test_a_run_stopped_short_is_resumed_from_its_checkpoint_step(tmp_path, jobs, state, exit_code):
    ended(jobs, 1, "COMPLETED")
    ended(jobs, 2, state, exit_code, step=30)
    result = run(tmp_path, resume="auto")
    assert (result["run_id"], result["resumed"], result["resumed_step"]) == (2, True, 30)
    assert not (jobs / user() / "train" / "runs" / "3").exists()


def test_resume_never_and_a_run_id_choose_themselves(tmp_path, jobs):
    ended(jobs, 1, "COMPLETED", step=50)
    ended(jobs, 2, "TIMEOUT", step=10)
    assert (run(tmp_path, resume="never")["run_id"], run(tmp_path, resume="1")["run_id"]) == (3, 1)
    assert run(tmp_path, resume="1")["resumed_step"] == 50
    with pytest.raises(job_dirs.Refused, match=r"resume=7: this job has no run 7 \(its runs: 1, 2, 3\)"):
        run(tmp_path, resume="7")
    with pytest.raises(job_dirs.Refused, match=r"resume='latest' is not allowed: give auto"):
        run(tmp_path, resume="latest")


def test_a_fresh_run_id_already_taken_by_a_concurrent_launch_goes_to_the_next(tmp_path, jobs, monkeypatch):
    ended(jobs, 1, "COMPLETED")
    real_mkdir = os.mkdir

    def racing_mkdir(path, mode=0o777, *, dir_fd=None):
        if path == "2" and not (jobs / user() / "train" / "runs" / "2").exists():
            real_mkdir(jobs / user() / "train" / "runs" / "2")  # the other launch, first
        return real_mkdir(path, mode, dir_fd=dir_fd)

    monkeypatch.setattr(job_dirs.os, "mkdir", racing_mkdir)
    assert run(tmp_path, resume="auto")["run_id"] == 3


# A run belongs to one request: the script, its arguments, the sweep, env names, shape, code.
VARIANT = {"script": "train.py", "script_args": ["--steps", "40", "--lr", "0.1"], "sweep": [], "env_names": [],
           "num_nodes": 2, "nproc_per_node": 1, "gpus_per_node": 0}
OTHER = {**VARIANT, "script_args": ["--steps", "40", "--lr", "0.01"]}


def recorded(request, code_hash=""):
    return {**request, "code_hash": code_hash}


def test_a_fresh_run_records_its_request_and_a_second_variant_launched_meanwhile_gets_its_own_run(tmp_path, jobs):
    first = run(tmp_path, resume="auto", request=VARIANT)
    runs = jobs / user() / "train" / "runs"
    assert json.loads((runs / "1" / "request.json").read_text()) == recorded(VARIANT)
    assert (runs / "1" / "request.json").stat().st_mode & 0o777 == 0o600
    # Run 1 has recorded no end (its job pending or running): another request does not take it.
    second = run(tmp_path, resume="auto", request=OTHER)
    assert (second["run_id"], second["resumed"]) == (2, False)
    assert second["other_request"] == second["run_reason"] == "run 1 is another request: --lr 0.1, not --lr 0.01"
    assert json.loads((runs / "2" / "request.json").read_text()) == recorded(OTHER)
    # The same request again while its job runs: that run, whose job the launch then finds.
    again = run(tmp_path, resume="auto", request=VARIANT)
    assert (first["run_id"], again["run_id"], again["resumed"]) == (1, 1, True)
    assert again["other_request"] == "run 2 is another request: --lr 0.01, not --lr 0.1"


@pytest.mark.parametrize("change, said", [
    ({"script_args": ["--steps", "40", "--lr", "0.1", "--seed", "2"]}, "(none), not --seed 2"),
    ({"script": "other.py"}, "script train.py, not other.py"),
    ({"sweep": [[["lr", "0.1"]], [["lr", "0.2"]]]}, 'sweep (none), not [[["lr", "0.1"]], [["lr", "0.2"]]]'),
    ({"env_names": ["HF_TOKEN"]}, "env_names (none), not HF_TOKEN"),
    ({"num_nodes": 4}, "num_nodes 2, not 4"),
    ({"nproc_per_node": 2}, "nproc_per_node 1, not 2"),
])
def test_each_part_of_the_request_makes_another_run_and_is_named(tmp_path, jobs, change, said):
    ended(jobs, 1, "TIMEOUT", step=22, request=recorded(VARIANT))
    result = run(tmp_path, resume="auto", request={**VARIANT, **change})
    assert (result["run_id"], result["resumed"]) == (2, False)
    assert result["run_reason"] == f"run 1 is another request: {said}"


def test_other_code_is_another_request(tmp_path, jobs):
    ended(jobs, 1, "TIMEOUT", step=22, request=recorded(VARIANT, code_hash="ab12cd34"))
    (jobs / user() / "train" / "code" / "ef56ab78").mkdir(parents=True)
    # Staged as a launch stages code: with its (here empty) read-only manifest beside it.
    (jobs / user() / "train" / "code" / "ef56ab78.manifest").write_text("")
    (jobs / user() / "train" / "code" / "ef56ab78.manifest").chmod(0o400)
    result = run(tmp_path, resume="auto", request=VARIANT, code_hash="ef56ab78")
    assert (result["run_id"], result["run_reason"]) == (2, "run 1 is another request: code_hash ab12cd34, not ef56ab78")


def test_a_variant_stopped_short_is_resumed_by_its_own_request_after_another_variants_run(tmp_path, jobs):
    ended(jobs, 1, "TIMEOUT", step=22, request=recorded(VARIANT))
    ended(jobs, 2, "COMPLETED", step=40, request=recorded(OTHER))
    result = run(tmp_path, resume="auto", request=VARIANT)
    assert (result["run_id"], result["resumed"], result["resumed_step"]) == (1, True, 22)
    assert result["other_request"] == "run 2 is another request: --lr 0.01, not --lr 0.1"
    # The other variant's run completed: a launch of it is a fresh run, which says so.
    fresh = run(tmp_path, resume="auto", request=OTHER)
    assert (fresh["run_id"], fresh["resumed"], fresh["run_reason"]) == (3, False, "run 2 of this request ended COMPLETED")


def test_a_run_without_a_recorded_request_is_not_resumed_by_auto(tmp_path, jobs):
    ended(jobs, 1, "TIMEOUT", step=22, request=None)
    result = run(tmp_path, resume="auto", request=VARIANT)
    assert (result["run_id"], result["run_reason"]) == (2, "run 1 is another request: it recorded no request")


def test_resume_of_a_run_of_another_request_is_refused_naming_the_difference_unless_forced(tmp_path, jobs):
    ended(jobs, 1, "TIMEOUT", step=22, request=recorded(VARIANT))
    with pytest.raises(job_dirs.Refused, match=r"^resume=1: run 1 is another request: --lr 0\.1, not --lr 0\.01\. "
                                               r"Launch it as it was, .* or force=true to resume run 1 with this request$"):
        run(tmp_path, resume="1", request=OTHER)
    assert sorted(p.name for p in (jobs / user() / "train" / "runs").iterdir()) == [".lock", "1"], "nothing made"
    forced = run(tmp_path, resume="1", request=OTHER, force=True)
    assert (forced["run_id"], forced["resumed"], forced["resumed_step"]) == (1, True, 22)
    assert forced["request_differences"] == ["--lr 0.1, not --lr 0.01"]
    assert json.loads((jobs / user() / "train" / "runs" / "1" / "request.json").read_text()) == recorded(VARIANT)
    assert run(tmp_path, resume="1", request=VARIANT)["request_differences"] == []


def test_the_runs_lock_is_held_until_released_and_another_process_waits_for_it(tmp_path, jobs):
    stage = {name: spec.get("default") for name, spec in job_dir.ARGUMENT_SPEC.items()}
    stage.update(jobs_root=str(jobs), job_name="train", resume="auto", request=VARIANT)
    job_dirs.stage(stage, False)
    lock = jobs / user() / "train" / "runs" / ".lock"
    probe = ["python3", "-c", "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR); "
             "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)", str(lock)]
    try:
        held = subprocess.run(probe, capture_output=True, text=True)
        assert held.returncode != 0 and "BlockingIOError" in held.stderr, "another launch must wait"
    finally:
        job_dirs.release_runs_lock()
    assert subprocess.run(probe).returncode == 0, "released: the next launch goes on"
    assert lock.stat().st_mode & 0o777 == 0o600


def test_a_planted_runs_lock_of_another_user_is_refused(tmp_path, jobs):
    if os.geteuid() != 0:
        pytest.skip("needs root to plant another user's file")
    ended(jobs, 1, "COMPLETED")
    lock = jobs / user() / "train" / "runs" / ".lock"
    lock.write_text("")
    os.chown(lock, OTHER_UID, OTHER_UID)
    with pytest.raises(job_dirs.Refused, match=r"runs/\.lock belongs to another user: remove it"):
        run(tmp_path, resume="auto")


SCRIPT = {"name": "train.sbatch", "content": "#!/bin/bash\necho hi\n", "mode": "0600"}
CHECK = {"name": "gpu_check.py", "content": "print('ok')\n", "mode": "0644"}


def test_the_job_files_are_written_into_the_run_with_their_modes_and_not_rewritten_unchanged(tmp_path, jobs):
    result = run(tmp_path, resume="auto", files=[SCRIPT, CHECK])
    run_dir = jobs / user() / "train" / "runs" / "1"
    assert (result["run_dir"], result["files_written"]) == (str(run_dir), ["gpu_check.py", "train.sbatch"])
    assert (run_dir / "train.sbatch").read_text() == SCRIPT["content"]
    assert [(run_dir / name).stat().st_mode & 0o777 for name in ("train.sbatch", "gpu_check.py")] == [0o600, 0o644]
    assert sorted(p.name for p in run_dir.iterdir()) == ["gpu_check.py", "request.json", "train.sbatch"], \
        "no partial file is left"
    again = run(tmp_path, resume="1", files=[SCRIPT, CHECK])
    assert (again["changed"], again["files_written"]) == (False, [])
    changed = run(tmp_path, resume="1", files=[{**SCRIPT, "content": "#!/bin/bash\necho new\n"}, {**CHECK, "mode": "0600"}])
    assert changed["changed"] and changed["files_written"] == ["gpu_check.py", "train.sbatch"]
    assert (run_dir / "train.sbatch").read_text().endswith("new\n") and (run_dir / "gpu_check.py").stat().st_mode & 0o777 == 0o600


def test_without_resume_the_files_go_into_the_jobs_directory(tmp_path, jobs):
    assert run(tmp_path, files=[CHECK])["files_written"] == ["gpu_check.py"]
    assert (jobs / user() / "train" / "gpu_check.py").read_text() == CHECK["content"]


def test_a_link_in_place_of_a_job_file_is_replaced_not_followed(tmp_path, jobs):
    run(tmp_path, resume="auto", files=[CHECK])
    run_dir = jobs / user() / "train" / "runs" / "1"
    target = tmp_path / "elsewhere.sbatch"
    target.write_text("theirs\n")
    (run_dir / "train.sbatch").symlink_to(target)
    assert run(tmp_path, resume="1", files=[SCRIPT])["files_written"] == ["train.sbatch"]
    assert target.read_text() == "theirs\n" and not (run_dir / "train.sbatch").is_symlink()
    assert (run_dir / "train.sbatch").read_text() == SCRIPT["content"]


def test_check_mode_and_a_probe_predict_the_files_and_write_none(tmp_path, jobs):
    predicted = job_dir.run(FakeModule(check_mode=True, jobs_root=str(jobs), job_name="train", resume="auto",
                                       files=[SCRIPT, CHECK]))
    assert (predicted["changed"], predicted["files_written"]) == (True, ["gpu_check.py", "train.sbatch"])
    assert list(jobs.iterdir()) == []
    run(tmp_path, resume="auto", files=[SCRIPT])
    probed = run(tmp_path, resume="1", probe=True, files=[SCRIPT, CHECK])
    assert probed["files_written"] == ["gpu_check.py"]
    assert not (jobs / user() / "train" / "runs" / "1" / "gpu_check.py").exists()


# A job script as a launch renders it, before its run is known: its files named from the run's
# directory it runs in, the code by its hash from there.
PLACED = {"name": "train.sbatch", "mode": "0600",
          "content": f"#SBATCH --output=%x-%j.out\npython {job_dirs.code_dir_from_run('ab12cd34')}/train.py > "
                     f"{job_dirs.END_MARKER_NAME}\n"}


def test_a_launchs_script_goes_into_the_run_a_concurrent_launch_left_over_and_finds_its_code(tmp_path, jobs,
                                                                                              monkeypatch):
    """Another launch takes run 2 between this one's look at the runs and its mkdir: this one's
    script is written into run 3, as it was rendered, and names the code staged from there."""
    ended(jobs, 1, "COMPLETED")
    real_mkdir = os.mkdir

    def racing_mkdir(path, mode=0o777, *, dir_fd=None):
        if path == "2" and not (jobs / user() / "train" / "runs" / "2").exists():
            real_mkdir(jobs / user() / "train" / "runs" / "2")  # the other launch, first
        return real_mkdir(path, mode, dir_fd=dir_fd)

    monkeypatch.setattr(job_dirs.os, "mkdir", racing_mkdir)
    result = run(tmp_path, resume="auto", code_hash="ab12cd34", code_archive=str(pack_tree(tmp_path, {"train.py": "x\n"})),
                 files=[PLACED])
    run_dir = jobs / user() / "train" / "runs" / "3"
    assert (result["run_id"], result["run_dir"], result["files_written"]) == (3, str(run_dir), ["train.sbatch"])
    assert (run_dir / "train.sbatch").read_text() == PLACED["content"]
    assert (run_dir / job_dirs.code_dir_from_run("ab12cd34") / "train.py").resolve() == \
        Path(result["code_dir"], "train.py").resolve()
    assert list((jobs / user() / "train" / "runs" / "2").iterdir()) == []


def test_check_mode_compares_the_script_with_what_the_planned_run_has(tmp_path, jobs):
    run(tmp_path, resume="auto", files=[PLACED])
    predicted = job_dir.run(FakeModule(check_mode=True, jobs_root=str(jobs), job_name="train", resume="1",
                                       files=[PLACED]))
    assert (predicted["run_id"], predicted["files_written"]) == (1, []), "the same script"


def test_missing_code_without_its_archive_stops_before_a_run_is_taken(tmp_path, jobs):
    """The action plugin sends the archive and runs the module again: the first run must not have
    taken a run (the second would then resume it as unfinished) nor written a script."""
    first = run(tmp_path, resume="auto", code_hash="ab12cd34", files=[PLACED])
    assert (first["code_present"], first["run_id"], first["files_written"]) == (False, None, [])
    assert not (jobs / user() / "train" / "runs").exists()
    second = run(tmp_path, resume="auto", code_hash="ab12cd34", files=[PLACED],
                 code_archive=str(pack_tree(tmp_path, {"train.py": "x\n"})))
    assert (second["code_copied"], second["run_id"], second["resumed"], second["files_written"]) == \
        (True, 1, False, ["train.sbatch"])


def test_a_missing_expected_file_makes_nothing(tmp_path, jobs):
    result = run(tmp_path, resume="auto", files=[PLACED],
                 expect_files=[str(tmp_path / "nccl-gpu.sh")])
    assert (result["missing_files"], result["changed"], result["made"]) == ([str(tmp_path / "nccl-gpu.sh")], False, [])
    assert list(jobs.iterdir()) == []


@pytest.mark.parametrize("spec, message", [
    ({**SCRIPT, "name": "../x.sbatch"}, r"files: '\.\./x\.sbatch' is not a file name of one path component"),
    ({**SCRIPT, "name": ".hidden"}, r"files: '\.hidden' is not a file name"),
    ({**SCRIPT, "mode": "rw"}, r"files: train.sbatch has mode='rw': give an octal string such as 0644"),
])
def test_a_bad_file_name_or_mode_is_refused_before_anything_is_made(tmp_path, jobs, spec, message):
    with pytest.raises(job_dirs.Refused, match=message):
        run(tmp_path, resume="auto", files=[spec])
    assert list(jobs.iterdir()) == []


def test_the_jobs_directory_is_checked_for_room_before_anything_is_made(tmp_path, jobs, monkeypatch):
    assert run(tmp_path, probe=True, min_free_mb=1)["free_mb"] > 0
    with pytest.raises(job_dirs.Refused, match=rf"^{jobs}: {jobs} has \d+ MB free, 10000000000 MB are needed"):
        run(tmp_path, min_free_mb=10**10)
    assert list(jobs.iterdir()) == []
    missing = tmp_path / "not-yet" / "jobs"  # checked at its nearest existing directory, as writable_dir does
    with pytest.raises(job_dirs.Refused, match=rf"^{missing}: {tmp_path} has \d+ MB free"):
        job_dir.run(FakeModule(jobs_root=str(missing), job_name="train", min_free_mb=10**10))


def test_a_run_stopped_for_no_progress_is_not_resumed_by_auto_and_is_by_its_id(tmp_path, jobs):
    run_dir = ended(jobs, 1, "NO_PROGRESS", 1, step=0)
    record = {"job_id": 101, "state": "NO_PROGRESS", "exit_code": 1, "step": 5, "checkpoint_step": 0}
    (run_dir / "run.json").write_text(json.dumps(record))
    with pytest.raises(job_dirs.Refused, match=r"^run 1 of this request stopped NO_PROGRESS: it failed at step 5 again "
                                               r"without advancing its checkpoint \(step 0\), so resume=auto does not "
                                               r"resume it\. Give resume=1 .* or resume=never for a fresh run"):
        run(tmp_path, resume="auto")
    assert sorted(p.name for p in (jobs / user() / "train" / "runs").iterdir()) == [".lock", "1"], "nothing made"
    again = run(tmp_path, resume="1")
    assert (again["run_id"], again["resumed"], again["resumed_step"]) == (1, True, 0)
    assert run(tmp_path, resume="never")["run_id"] == 2


def test_a_link_to_a_file_of_the_same_content_is_still_replaced(tmp_path, jobs):
    run(tmp_path, resume="auto", files=[CHECK])
    run_dir = jobs / user() / "train" / "runs" / "1"
    target = tmp_path / "same-for-now.py"
    target.write_text(CHECK["content"])
    target.chmod(0o644)
    (run_dir / "gpu_check.py").unlink()
    (run_dir / "gpu_check.py").symlink_to(target)
    assert run(tmp_path, resume="1", files=[CHECK])["files_written"] == ["gpu_check.py"]
    assert not (run_dir / "gpu_check.py").is_symlink(), "the job would read whatever the link's owner puts there"


def test_a_file_that_cannot_be_renamed_into_place_leaves_no_temporary_file(tmp_path, jobs, monkeypatch):
    run(tmp_path, files=[CHECK])
    job = jobs / user() / "train"
    (job / "gpu_check.py").unlink()
    (job / "gpu_check.py").mkdir()  # a directory where the file goes
    with pytest.raises(IsADirectoryError):
        run(tmp_path, files=[CHECK])
    assert sorted(p.name for p in job.iterdir()) == ["code", "gpu_check.py"]
    (job / "gpu_check.py").rmdir()

    def swept_then_failing(src, dst, **kwargs):
        # The NAS failed the rename after a cleanup removed the temporary file: its own error is raised.
        job_dirs.os.unlink(src, dir_fd=kwargs["src_dir_fd"])
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(job_dirs.os, "rename", swept_then_failing)
    with pytest.raises(OSError) as raised:
        run(tmp_path, files=[CHECK])
    assert raised.value.errno == errno.EIO


def test_staging_leaves_no_descriptor_open(tmp_path, jobs):
    before = len(os.listdir("/proc/self/fd"))
    run(tmp_path, resume="auto", files=[SCRIPT])
    run(tmp_path, resume="1", files=[SCRIPT, CHECK])
    run(tmp_path, resume="1", files=[SCRIPT], probe=True)
    assert len(os.listdir("/proc/self/fd")) == before


def test_a_new_run_in_an_existing_job_is_a_change(tmp_path, jobs):
    run(tmp_path, resume="auto")
    ended(jobs, 1, "COMPLETED")
    again = run(tmp_path, resume="never")
    assert (again["run_id"], again["changed"]) == (2, True)


def test_a_run_taken_over_by_another_user_is_not_resumed_into(tmp_path, jobs):
    run_dir = ended(jobs, 1, "TIMEOUT", step=5)
    os.chown(run_dir, OTHER_UID, OTHER_UID)
    with pytest.raises(job_dirs.Refused, match=rf"runs/1 belongs to uid {OTHER_UID}, not to {user()}"):
        run(tmp_path, resume="auto")


@pytest.mark.parametrize("step", ["5", True, 5.0])
def test_a_checkpoint_step_that_is_no_whole_number_is_not_reported(tmp_path, jobs, step):
    ended(jobs, 1, "TIMEOUT", step=step)
    result = run(tmp_path, resume="auto")
    assert (result["run_id"], result["resumed"], result["resumed_step"]) == (1, True, None)


def test_the_users_own_directory_planted_by_another_says_only_an_admin_can_fix_it(tmp_path, jobs):
    (jobs / user()).mkdir()
    os.chown(jobs / user(), OTHER_UID, OTHER_UID)
    with pytest.raises(job_dirs.Refused) as refused:
        run(tmp_path)
    assert refused.value.args[0].endswith(job_dirs.user_dir_remedy(str(jobs / user()), user()))
    os.chown(jobs / user(), os.geteuid(), os.getegid())
    (jobs / user() / "train").mkdir()
    os.chown(jobs / user() / "train", OTHER_UID, OTHER_UID)
    with pytest.raises(job_dirs.Refused, match="choose another job name or ask them to remove it$"):
        run(tmp_path)


def test_check_mode_before_the_code_is_staged_plans_around_the_jobs_runs_and_files(tmp_path, jobs):
    # The job's directory is there with an unfinished run 1 of this code and its script; code/ is not yet.
    run_dir = jobs / user() / "train" / "runs" / "1"
    run_dir.mkdir(parents=True, mode=0o700)
    (run_dir / "request.json").write_text(json.dumps({"code_hash": "ab12cd34"}))
    (run_dir / "train.sbatch").write_text(SCRIPT["content"])
    (run_dir / "train.sbatch").chmod(0o600)
    predicted = job_dir.run(FakeModule(check_mode=True, jobs_root=str(jobs), job_name="train", resume="auto",
                                       code_hash="ab12cd34", files=[SCRIPT]))
    assert (predicted["run_id"], predicted["resumed"], predicted["files_written"]) == (1, True, [])
    # Only the user's directory there: the job's run 1 is planned.
    shutil.rmtree(jobs / user() / "train")
    planned = job_dir.run(FakeModule(check_mode=True, jobs_root=str(jobs), job_name="train", resume="auto",
                                     files=[SCRIPT]))
    assert (planned["run_id"], planned["resumed"], planned["files_written"]) == (1, False, ["train.sbatch"])


def test_an_inline_archive_that_is_not_base64_is_refused(tmp_path, jobs):
    with pytest.raises(job_dirs.Refused, match="^code_archive_inline is not base64 text$"):
        run(tmp_path, code_hash="ab12cd34", code_archive_inline="QU JD")  # "ABC" once the space is dropped


def test_a_staged_file_whose_name_has_spaces_is_checked_as_staged(tmp_path, jobs):
    archive = pack_tree(tmp_path, {"my model.py": "a\n", "train.py": "b\n"})
    first = run(tmp_path, code_hash="ab12cd34", code_archive=str(archive))
    assert first["code_copied"]
    assert run(tmp_path, code_hash="ab12cd34")["code_present"], "unchanged code passes its manifest"


def test_a_manifest_that_is_not_the_users_own_is_not_trusted(tmp_path, jobs):
    archive = pack_tree(tmp_path, {"train.py": "b\n"})
    run(tmp_path, code_hash="ab12cd34", code_archive=str(archive))
    code = jobs / user() / "train" / "code"
    os.chown(code / "ab12cd34.manifest", OTHER_UID, OTHER_UID)
    # Without the user's manifest, the hash decides: this code's is not "ab12cd34".
    with pytest.raises(job_dirs.Refused, match=rf"^the code in {code / 'ab12cd34'} changed since it was staged"):
        run(tmp_path, code_hash="ab12cd34")


@pytest.mark.parametrize("swap", ["directory", "file"])
def test_code_swapped_for_a_link_after_it_was_looked_at_is_not_followed(tmp_path, monkeypatch, swap):
    code = tmp_path / "code"
    (code / "pkg").mkdir(parents=True)
    (code / "pkg" / "util.py").write_text("ours\n")
    (code / "train.py").write_text("ours\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "util.py").write_text("theirs\n")
    name = "pkg" if swap == "directory" else "train.py"
    real_stat = os.stat

    def swapping_stat(path, *args, **kwargs):
        info = real_stat(path, *args, **kwargs)
        if path == name:
            dir_fd = kwargs["dir_fd"]
            os.rename(name, f"{name}.moved", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            os.symlink(str(elsewhere if swap == "directory" else elsewhere / "util.py"), name, dir_fd=dir_fd)
        return info

    monkeypatch.setattr(job_dirs.os, "stat", swapping_stat)
    fd = os.open(code, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(OSError) as raised:
            job_dirs.code_manifest(fd)
    finally:
        os.close(fd)
    assert raised.value.errno in (errno.ELOOP, errno.ENOTDIR)  # O_NOFOLLOW's refusal of a link


def test_the_tasks_log_shows_neither_the_files_nor_the_inline_code(capsys, monkeypatch, jobs):
    archive = base64.b64encode(b"SECRET-ARCHIVE-BYTES").decode()
    shown = main_result(capsys, monkeypatch, check_mode=True, jobs_root=str(jobs), job_name="train",
                        code_hash="ab12cd34", code_archive_inline=archive,
                        files=[{"name": "train.sbatch", "content": "export HF_TOKEN=hf_secret\n", "mode": "0600"}])
    assert "hf_secret" not in json.dumps(shown) and archive not in json.dumps(shown)


def test_a_file_without_a_name_is_refused_in_ansibles_words(capsys, monkeypatch, jobs):
    refused = main_result(capsys, monkeypatch, jobs_root=str(jobs), job_name="train",
                          files=[{"content": "x\n", "mode": "0600"}])
    assert refused["failed"] and "missing required arguments: name" in refused["msg"]


def test_a_request_that_differs_in_a_mapping_names_it_with_its_keys_in_order(tmp_path, jobs):
    ended(jobs, 1, "TIMEOUT", request={"code_hash": "", "env_names": {"A": "1", "B": "2"}})
    with pytest.raises(job_dirs.Refused) as refused:
        run(tmp_path, resume="1", request={"env_names": {"B": "3", "A": "1"}})
    assert 'env_names {"A": "1", "B": "2"}, not {"A": "1", "B": "3"}' in str(refused.value)


def test_a_link_in_place_of_the_job_says_how_to_get_past_it(tmp_path, jobs):
    (jobs / user()).mkdir()
    (jobs / user() / "train").symlink_to(tmp_path)
    with pytest.raises(job_dirs.Refused, match=r"is a symbolic link: .*; remove it, or choose another job name$"):
        run(tmp_path)


def test_a_link_among_the_runs_is_not_taken_for_a_run(tmp_path, jobs):
    run(tmp_path, resume="auto")
    ended(jobs, 1, "COMPLETED")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "request.json").write_text(json.dumps(LAUNCH_REQUEST))  # unfinished, this request
    (jobs / user() / "train" / "runs" / "2").symlink_to(elsewhere)
    result = run(tmp_path, resume="auto")
    assert (result["run_id"], result["resumed"]) == (3, False)


def test_the_directories_made_are_reported_and_a_resumed_run_makes_none(tmp_path, jobs):
    job = jobs / user() / "train"
    first = run(tmp_path, resume="auto")
    assert first["made"] == [str(jobs / user()), str(job), str(job / "code"), str(job / "runs"), str(job / "runs" / "1")]
    again = run(tmp_path, resume="auto")
    assert (again["run_id"], again["resumed"], again["made"]) == (1, True, [])


def test_only_the_files_that_changed_are_written(tmp_path, jobs):
    run(tmp_path, files=[CHECK, SCRIPT])
    changed = {**SCRIPT, "content": "#!/bin/bash\necho changed\n"}
    assert run(tmp_path, files=[CHECK, changed])["files_written"] == ["train.sbatch"]
    assert (jobs / user() / "train" / "train.sbatch").read_text() == changed["content"]


def test_the_nas_is_tried_with_a_real_write_but_not_in_check_mode(tmp_path, jobs, monkeypatch):
    import tempfile

    def over_quota(*args, **kwargs):
        raise OSError(errno.EDQUOT, "Disk quota exceeded")

    (jobs / user()).mkdir()
    monkeypatch.setattr(tempfile, "mkstemp", over_quota)
    with pytest.raises(job_dirs.Refused, match="cannot be written: Disk quota exceeded"):
        run(tmp_path, min_free_mb=1)
    predicted = job_dir.run(FakeModule(check_mode=True, jobs_root=str(jobs), job_name="train", min_free_mb=1))
    assert predicted["free_mb"] > 0 and predicted["changed"]


def test_a_user_without_a_directory_is_told_that_provision_makes_it(tmp_path, jobs, monkeypatch):
    real_mkdir = job_dirs.os.mkdir

    def root_owned(name, mode=0o777, *, dir_fd=None):
        if name == user():
            raise PermissionError(errno.EACCES, "Permission denied")
        return real_mkdir(name, mode, dir_fd=dir_fd)

    monkeypatch.setattr(job_dirs.os, "mkdir", root_owned)
    with pytest.raises(job_dirs.Refused, match=rf"{jobs / user()} does not exist, and {user()} cannot make it in "):
        run(tmp_path)


def test_a_key_the_recorded_request_lacks_is_a_difference(tmp_path, jobs):
    ended(jobs, 1, "TIMEOUT", request={"code_hash": ""})
    with pytest.raises(job_dirs.Refused, match=r"^resume=1: run 1 is another request: sweep \(none\), not "):
        run(tmp_path, resume="1", request={"sweep": {"lr": [0.1]}})


def test_a_probe_names_every_file_it_would_write(tmp_path, jobs):
    run(tmp_path, resume="auto", files=[SCRIPT, CHECK])
    new = [{**CHECK, "content": "print('new')\n"}, {**SCRIPT, "content": "#!/bin/bash\necho new\n"}]
    assert run(tmp_path, resume="1", probe=True, files=new)["files_written"] == ["gpu_check.py", "train.sbatch"]


def test_a_run_is_taken_for_code_staged_earlier(tmp_path, jobs):
    archive = pack_tree(tmp_path, {"train.py": "b\n"})
    staged = run(tmp_path, code_hash="ab12cd34", code_archive=str(archive))
    again = run(tmp_path, code_hash="ab12cd34", resume="auto", files=[SCRIPT])
    assert (staged["code_copied"], again["code_present"], again["run_id"]) == (True, True, 1)
    assert again["files_written"] == ["train.sbatch"]


def test_the_manifest_is_never_writable_by_the_group_even_while_it_is_written(tmp_path, jobs, monkeypatch):
    archive = pack_tree(tmp_path, {"train.py": "b\n"})
    seen = []
    real_fchmod = job_dirs.os.fchmod

    def looking_fchmod(fd, mode):
        seen.append((mode, stat.S_IMODE(os.fstat(fd).st_mode)))
        real_fchmod(fd, mode)

    monkeypatch.setattr(job_dirs.os, "fchmod", looking_fchmod)
    old = os.umask(0o002)  # a site whose users' umask lets their group write
    try:
        run(tmp_path, code_hash="ab12cd34", code_archive=str(archive), mode="0750")
    finally:
        os.umask(old)
    assert (0o400, 0o400) in seen, "created 0400, before its mode was set"
