"""A launch on a shared site: what a request may put into the job script, and what of it others see."""

import os
import shlex
from pathlib import Path

import pytest

from ansible_collections.hpc.slurm_train.plugins.filter import cluster_rules as cluster_rules_filters
from ansible_collections.hpc.slurm_train.plugins.plugin_utils import launch_request
from ansible_collections.hpc.slurm_train.plugins.modules import slurm_job


@pytest.mark.parametrize("name", ["BASH_ENV", "ENV", "IFS", "PATH", "SLURM_RESTART_COUNT", "SLURM_JOB_ID",
                                  "SRUN_CPUS_PER_TASK", "LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONPATH",
                                  "PYTHONSTARTUP"])
def test_env_names_that_steer_the_shell_slurm_or_python_are_refused_by_name(name):
    problems = launch_request.value_problems({"env": {name: "x", "NCCL_DEBUG": "INFO"}})
    assert len(problems) == 1
    assert problems[0].startswith(f"env name={name!r} is not allowed: it steers the job's shell, Slurm")


def test_a_carriage_return_in_an_env_value_is_refused_without_repeating_the_value():
    problems = launch_request.value_problems({"env": {"HF_TOKEN": "hf_abc\r\nrm -rf ~"}})
    assert problems == ["env HF_TOKEN: its value holds a carriage return (\\r), which sbatch refuses in a job "
                        "script: give it without one"]
    assert "hf_abc" not in problems[0]
    assert launch_request.value_problems({"script_args": ["--x\r\n"]})[0].startswith("script_args='--x\\r\\n'")
    # A newline alone is carried: the value is quoted.
    assert launch_request.value_problems({"env": {"NOTE": "a\nb"}}) == []


@pytest.mark.parametrize("value", ["hf_secret", "a b'c\"$(id)", "multi\nline'", ""])
def test_the_fingerprint_leaves_secret_values_out(value):
    def script(token):
        return f"#!/bin/bash\nexport A=1\nexport HF_TOKEN={shlex.quote(token)}\nsrun train.py\n".encode()

    assert (slurm_job.job_fingerprint("t", script(value), ["HF_TOKEN"])
            == slurm_job.job_fingerprint("t", script("other-token"), ["HF_TOKEN"]))
    # Without the name, the value counts (and the rest of the script always does).
    assert slurm_job.job_fingerprint("t", script(value)) != slurm_job.job_fingerprint("t", script("other-token"))
    assert (slurm_job.job_fingerprint("t", script(value), ["HF_TOKEN"])
            != slurm_job.job_fingerprint("t", script(value).replace(b"A=1", b"A=2"), ["HF_TOKEN"]))


# The launch's request check (slurm_launch_request) run as a task with -e values as typed.
from test_slurm_launch_request_action import request, run, script  # noqa: E402,F401  (script: a fixture)


def _script_text(result):
    return next(one["content"] for one in result["job_files"] if one["name"].endswith(".sbatch"))


def test_values_given_with_e_reach_the_job_script_as_typed_not_templated(script):
    """-e '{"slurm_launch_env": {"NOTE": "a{#c#}b"}}': Ansible templates -e values (the request
    arrives as "ab"); the job gets the text typed."""
    typed = {"NOTE": "a{#c#}b{{ 1 + 1 }}{% if 1 %}x{% endif %}"}
    templated = {"NOTE": "ab2x"}
    result = run(request(script, env=templated, script_args=["--tag", "t"]),
                 extra_vars=('{"slurm_launch_env": {"NOTE": "a{#c#}b{{ 1 + 1 }}{% if 1 %}x{% endif %}"}, '
                             '"script_args": ["--tag", "t{#x#}"], "nodes": "node[110-111]"}',),
                 role_vars={"slurm_launch_script_args": "{{ script_args | default([]) }}"})
    assert not result.get("failed"), result.get("msg")
    assert result["job"]["env"] == typed
    assert result["job"]["script_args"] == ["--tag", "t{#x#}"]
    text = _script_text(result)
    assert "export NOTE='a{#c#}b{{ 1 + 1 }}{% if 1 %}x{% endif %}'" in text.splitlines()
    assert "  '--tag'" not in text and "  't{#x#}'" in text.splitlines()


def test_a_value_set_otherwise_than_by_e_is_kept(script):
    # The preflight sets its own script_args over an -e script_args: the -e value is not taken then.
    result = run(request(script, script_args=["--sizes", "1024"]),
                 extra_vars=("nodes=node[110-111]", "script_args=--other"),
                 role_vars={"slurm_launch_script_args": ["--sizes", "1024"]})
    assert not result.get("failed"), result.get("msg")
    assert result["job"]["script_args"] == ["--sizes", "1024"]


def test_a_secret_on_the_command_line_is_refused_naming_the_ways_to_give_it(script):
    result = run(request(script, env={"HF_TOKEN": "hf_x"}),
                 extra_vars=('{"slurm_launch_env": {"HF_TOKEN": "hf_x"}}', "nodes=node[110-111]"))
    assert result["failed"]
    assert result["msg"] == (
        "slurm_launch_env HF_TOKEN given on the command line: every user of this machine can read a command line "
        "(/proc/*/cmdline) while the launch runs; put it in a file only you can read (chmod 600 secrets.yml; "
        "-e @secrets.yml) or export it on the controller and name it (-e env_from=NAME)")
    assert "hf_x" not in result["msg"]
    # A setting that is no secret may be given there.
    assert not run(request(script, env={"NCCL_DEBUG": "INFO", "NCCL_IB_PKEY": "0"}),
                   extra_vars=('{"slurm_launch_env": {"NCCL_DEBUG": "INFO", "NCCL_IB_PKEY": "0"}}',)).get("failed")


def test_a_secrets_file_others_can_read_is_refused_and_a_private_one_taken(script, tmp_path):
    secrets = tmp_path / "secrets.yml"
    secrets.write_text("slurm_launch_env:\n  HF_TOKEN: hf_file\n")
    secrets.chmod(0o644)
    result = run(request(script, env={"HF_TOKEN": "hf_file"}), extra_vars=(f"@{secrets}", "nodes=node[110-111]"))
    assert result["failed"]
    assert result["msg"] == (f"-e @{secrets} sets slurm_launch_env and is readable by others (mode 0644): its "
                             f"values may be secrets; chmod 600 {secrets} first")
    secrets.chmod(0o600)
    result = run(request(script, env={"HF_TOKEN": "hf_file"}), extra_vars=(f"@{secrets}", "nodes=node[110-111]"))
    assert not result.get("failed"), result.get("msg")
    assert "export HF_TOKEN=hf_file" in _script_text(result).splitlines()


def test_env_from_takes_the_controllers_variable(script, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_from_env")
    result = run(request(script, env_from=["HF_TOKEN"]), extra_vars=("nodes=node[110-111]", "env_from=HF_TOKEN"))
    assert not result.get("failed"), result.get("msg")
    assert result["job"]["env"] == {"HF_TOKEN": "hf_from_env"}
    files = {one["name"]: one for one in result["job_files"]}
    assert files["train.sbatch"]["mode"] == "0600"
    monkeypatch.delenv("HF_TOKEN")
    result = run(request(script, env_from="HF_TOKEN"))
    assert result["msg"] == ("env_from=HF_TOKEN: the controller's environment has no HF_TOKEN (export HF_TOKEN=... "
                             "before ansible-playbook)")
    monkeypatch.setenv("LD_PRELOAD", "/tmp/x.so")
    assert run(request(script, env_from=["LD_PRELOAD"]))["msg"].startswith(
        "env name='LD_PRELOAD' is not allowed: it steers the job's shell")


# Staged code (code/<hash>/) is run again by later launches: it must still be what its hash names.
from ansible_collections.hpc.slurm_train.plugins.module_utils import job_dirs  # noqa: E402
from test_job_dir import staging, jobs, pack_tree, run as stage, user  # noqa: E402,F401  (jobs: a fixture)


def _real_hash(tmp_path, files):
    source = tmp_path / "hash-src"
    for name, text in files.items():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_text(text)
    listed, _, _ = staging.list_code(str(source))
    return staging.content_hash(listed, lambda name: str(source / name))


def test_code_changed_in_place_after_staging_is_refused_naming_the_file(tmp_path, jobs):
    files = {"train.py": "print('mine')\n", "pkg/util.py": "X = 1\n"}
    code_hash = _real_hash(tmp_path, files)
    archive = pack_tree(tmp_path, files)
    code = Path(stage(tmp_path, code_hash=code_hash, code_archive=str(archive), mode="0750")["code_dir"])
    manifest = code.parent / f"{code_hash}.manifest"
    assert manifest.stat().st_mode & 0o777 == 0o400
    assert stage(tmp_path, code_hash=code_hash, mode="0750")["code_present"]
    # A member of the group patches the training in place (as they could in a group-writable directory).
    (code / "train.py").chmod(0o640 | 0o020)
    (code / "train.py").write_text("import os; os.system('steal')\n")
    with pytest.raises(job_dirs.Refused) as refused:
        stage(tmp_path, code_hash=code_hash, mode="0750")
    assert str(refused.value).startswith(
        f"{code}/train.py changed since it was staged (it no longer matches its hash {code_hash}): not running it")
    # Adding a file, or a link, is a change too; without the manifest the hash itself decides.
    (code / "train.py").write_text("print('mine')\n")
    assert stage(tmp_path, code_hash=code_hash, mode="0750")["code_present"]
    (code / "sitecustomize.py").write_text("x\n")
    with pytest.raises(job_dirs.Refused, match=f"^{code}/sitecustomize.py changed since it was staged"):
        stage(tmp_path, code_hash=code_hash, mode="0750")
    os.unlink(code / "sitecustomize.py")
    os.symlink("/etc/passwd", code / "data")
    with pytest.raises(job_dirs.Refused, match="data is not a regular file"):
        stage(tmp_path, code_hash=code_hash, mode="0750")
    os.unlink(code / "data")
    manifest.chmod(0o600)
    manifest.unlink()
    assert stage(tmp_path, code_hash=code_hash, mode="0750")["code_present"]
    (code / "pkg" / "util.py").write_text("X = 2\n")
    with pytest.raises(job_dirs.Refused, match=f"^the code in {code} changed since it was staged"):
        stage(tmp_path, code_hash=code_hash, mode="0750")


def test_the_bytecode_python_writes_beside_staged_code_it_imports_is_no_change(tmp_path, jobs):
    """A job or the preflight imports modules of the staged code as its owner, and Python writes its
    __pycache__ there: the next launch of the same code reuses it (with or without the manifest)."""
    files = {"train.py": "import pkg.util\n", "pkg/util.py": "X = 1\n"}
    code_hash = _real_hash(tmp_path, files)
    code = Path(stage(tmp_path, code_hash=code_hash, code_archive=str(pack_tree(tmp_path, files)),
                      mode="0750")["code_dir"])
    for cache in (code / "__pycache__", code / "pkg" / "__pycache__"):
        cache.mkdir()
        (cache / "util.cpython-311.pyc").write_bytes(b"\x00bytecode")
    assert stage(tmp_path, code_hash=code_hash, mode="0750")["code_present"]
    (code.parent / f"{code_hash}.manifest").unlink()
    assert stage(tmp_path, code_hash=code_hash, mode="0750")["code_present"]
    # Only Python's cache directory is left out: a file of that name is code like any other.
    (code / "pkg" / "__pycache__" / "util.cpython-311.pyc").unlink()
    (code / "pkg" / "__pycache__").rmdir()
    (code / "pkg" / "__pycache__").write_text("x\n")
    with pytest.raises(job_dirs.Refused, match=f"^the code in {code} changed since it was staged"):
        stage(tmp_path, code_hash=code_hash, mode="0750")


def test_provision_names_a_users_job_directory_someone_else_made():
    foreign = cluster_rules_filters.FilterModule().filters()["cluster_foreign_user_dirs"]
    stats = [
        {"item": "alice", "stat": {"exists": True, "isdir": True, "islnk": False, "pw_name": "alice", "path": "/j/alice"}},
        {"item": "bob", "stat": {"exists": False}},
        {"item": "carol", "stat": {"exists": True, "isdir": True, "islnk": False, "pw_name": "bob", "path": "/j/carol"}},
        {"item": "dave", "stat": {"exists": True, "isdir": False, "islnk": True, "pw_name": "bob", "path": "/j/dave"}},
        {"item": "erin", "stat": {"exists": True, "isdir": False, "islnk": False, "pw_name": "erin", "path": "/j/erin"}},
    ]
    assert foreign(stats) == ["/j/carol is a directory of bob, not carol's own directory",
                              "/j/dave is a link of bob, not dave's own directory",
                              "/j/erin is a file of erin, not erin's own directory"]
