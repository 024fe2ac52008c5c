"""library/node_files.py run in-process as a task runs it, on real files: what it writes, what it
leaves alone, what it refuses before writing anything, and what check and diff mode report."""

import grp
import json
import os
import pwd
import stat

import ansible.module_utils._internal
from ansible_collections.hpc.slurm_train.plugins.modules import node_files
import pytest
from ansible.module_utils.testing import patch_module_args

OWNER = pwd.getpwuid(os.getuid()).pw_name
GROUP = grp.getgrgid(os.getgid()).gr_name


@pytest.fixture(autouse=True)
def module_side(monkeypatch):
    monkeypatch.setattr(ansible.module_utils._internal, "is_controller", False)


def run(capsys, files, check_mode=False, diff=False):
    args = {"files": files}
    if check_mode:
        args["_ansible_check_mode"] = True
    if diff:
        args["_ansible_diff"] = True
    with patch_module_args(args), pytest.raises(SystemExit):
        node_files.main()
    return json.loads(capsys.readouterr().out)


def entry(path, content, mode="0644"):
    return {"path": str(path), "content": content, "owner": OWNER, "group": GROUP, "mode": mode}


def actions(result):
    return [one["action"] for one in result["files"]]


def test_files_are_created_then_left_alone(capsys, tmp_path):
    files = [entry(tmp_path / "nccl.conf", "NCCL_IB_DISABLE=1\n"), entry(tmp_path / "modules.csh", "x\n", "0600")]
    first = run(capsys, files)
    assert (first["changed"], actions(first)) == (True, ["created", "created"])
    assert (tmp_path / "nccl.conf").read_text() == "NCCL_IB_DISABLE=1\n"
    assert stat.S_IMODE((tmp_path / "modules.csh").stat().st_mode) == 0o600
    second = run(capsys, files)
    assert (second["changed"], actions(second)) == (False, ["none", "none"])
    assert sorted(os.listdir(tmp_path)) == ["modules.csh", "nccl.conf"], "no temporary file is left"


def test_new_content_replaces_the_file_and_a_mode_alone_is_changed_in_place(capsys, tmp_path):
    conf = tmp_path / "nccl.conf"
    conf.write_text("old\n")
    conf.chmod(0o644)
    inode = conf.stat().st_ino
    written = run(capsys, [entry(conf, "new\n")])
    assert actions(written) == ["written"] and conf.read_text() == "new\n"
    assert conf.stat().st_ino != inode, "renamed into place, not rewritten"
    inode = conf.stat().st_ino
    chmodded = run(capsys, [entry(conf, "new\n", "0640")])
    assert actions(chmodded) == ["attributes"]
    assert (stat.S_IMODE(conf.stat().st_mode), conf.stat().st_ino) == (0o640, inode)


def test_check_mode_predicts_and_changes_nothing_and_diff_shows_the_change(capsys, tmp_path):
    conf = tmp_path / "nccl.conf"
    conf.write_text("old\n")
    result = run(capsys, [entry(conf, "new\n"), entry(tmp_path / "b.sh", "b\n")], check_mode=True, diff=True)
    assert (result["changed"], actions(result)) == (True, ["written", "created"])
    assert conf.read_text() == "old\n" and not (tmp_path / "b.sh").exists()
    assert result["diff"][0] == {"before_header": str(conf), "after_header": str(conf), "before": "old\n",
                                 "after": "new\n"}


def test_a_link_in_the_way_is_refused_before_any_file_is_written(capsys, tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("not ours\n")
    (tmp_path / "b.conf").symlink_to(target)
    result = run(capsys, [entry(tmp_path / "a.conf", "a\n"), entry(tmp_path / "b.conf", "b\n")])
    assert result["failed"] is True
    assert result["msg"] == f"{tmp_path / 'b.conf'} is a link: refusing to write through it (remove it, or give another path)"
    assert target.read_text() == "not ours\n" and not (tmp_path / "a.conf").exists()


@pytest.mark.parametrize("change, words", [
    ({"path": "etc/nccl.conf"}, "path 'etc/nccl.conf' is not allowed: give the absolute path of a file"),
    ({"mode": "rw-r--r--"}, "mode 'rw-r--r--' of"),
    ({"mode": "17777"}, "give permissions from 0000 to 7777"),
    ({"owner": "no-such-user-x"}, "owner 'no-such-user-x' of"),
    ({"group": "no-such-group-x"}, "group 'no-such-group-x' of"),
])
def test_bad_entries_are_refused_naming_the_value(capsys, tmp_path, change, words):
    result = run(capsys, [{**entry(tmp_path / "a.conf", "a\n"), **change}])
    assert result["failed"] is True and words in result["msg"], result["msg"]
    assert not (tmp_path / "a.conf").exists()


def test_a_directory_or_a_missing_parent_is_refused(capsys, tmp_path):
    (tmp_path / "d").mkdir()
    assert run(capsys, [entry(tmp_path / "d", "x\n")])["msg"] == f"{tmp_path / 'd'} is not a regular file: refusing to replace it"
    missing = run(capsys, [entry(tmp_path / "nope" / "a.conf", "x\n")])
    assert missing["msg"] == f"{tmp_path / 'nope'} is not a directory: {tmp_path / 'nope' / 'a.conf'} cannot be written"


def test_attributes_are_changed_through_a_descriptor_never_through_a_link(tmp_path):
    # A link swapped in after the file was looked at: its target keeps its owner and mode.
    target = tmp_path / "shadow"
    target.write_text("root's\n")
    target.chmod(0o600)
    (tmp_path / "nccl.conf").symlink_to(target)
    with pytest.raises(OSError):
        node_files.set_attributes(str(tmp_path / "nccl.conf"), os.getuid(), os.getgid(), 0o666)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    regular = tmp_path / "plain.conf"
    regular.write_text("x\n")
    node_files.set_attributes(str(regular), os.getuid(), os.getgid(), 0o640)
    assert stat.S_IMODE(regular.stat().st_mode) == 0o640


@pytest.mark.parametrize("key", ["path", "content", "owner", "group", "mode"])
def test_an_entry_without_a_key_is_refused_naming_it(capsys, tmp_path, key):
    given = entry(tmp_path / "a.conf", "a\n")
    del given[key]
    result = run(capsys, [given])
    assert result["failed"] is True and key in result["msg"] and "missing required arguments" in result["msg"], result["msg"]
    assert not (tmp_path / "a.conf").exists()


def test_a_task_without_files_is_refused(capsys):
    with patch_module_args({}), pytest.raises(SystemExit):
        node_files.main()
    assert json.loads(capsys.readouterr().out)["msg"] == "missing required arguments: files"


@pytest.mark.parametrize("mode, allowed", [("0000", True), ("7777", True), ("10000", False), ("-1", False)])
def test_modes_from_0000_to_7777_are_taken_and_no_other(capsys, tmp_path, mode, allowed):
    result = run(capsys, [entry(tmp_path / "a.conf", "a\n", mode)], check_mode=True)
    if allowed:
        assert "failed" not in result and actions(result) == ["created"], result
    else:
        assert result["msg"] == (f"mode '{mode}' of {tmp_path / 'a.conf'} is not allowed: "
                                 "give permissions from 0000 to 7777")


def test_check_mode_leaves_a_mode_alone_and_only_diff_mode_shows_content(capsys, tmp_path):
    conf = tmp_path / "nccl.conf"
    conf.write_text("same\n")
    conf.chmod(0o644)
    predicted = run(capsys, [entry(conf, "same\n", "0600")], check_mode=True)
    assert actions(predicted) == ["attributes"] and stat.S_IMODE(conf.stat().st_mode) == 0o644
    written = run(capsys, [entry(conf, "secret\n", "0600")])
    assert actions(written) == ["written"] and "diff" not in written, "the content is shown only when --diff asks"


def test_a_file_planted_at_the_temporary_name_is_not_written_through(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(node_files.os, "urandom", lambda n: b"\x0a\x0b\x0c\x0d")
    target = tmp_path / "elsewhere"
    target.write_text("not ours\n")
    partial = tmp_path / ".nccl.conf.partial-0a0b0c0d"
    partial.symlink_to(target)
    result = run(capsys, [entry(tmp_path / "nccl.conf", "x\n")])
    assert result["msg"] == f"cannot write {partial}: File exists" and result["files"] == []
    assert target.read_text() == "not ours\n" and not (tmp_path / "nccl.conf").exists()


def test_the_content_is_private_until_its_mode_is_set(capsys, tmp_path, monkeypatch):
    seen = []
    real_fchown = os.fchown

    def looking_fchown(fd, uid, gid):
        seen.append(stat.S_IMODE(os.fstat(fd).st_mode))
        real_fchown(fd, uid, gid)

    monkeypatch.setattr(node_files.os, "fchown", looking_fchown)
    old = os.umask(0o022)
    try:
        run(capsys, [entry(tmp_path / "a.conf", "a\n", "0644")])
    finally:
        os.umask(old)
    assert seen == [0o600] and stat.S_IMODE((tmp_path / "a.conf").stat().st_mode) == 0o644


def test_a_failed_write_leaves_no_temporary_file_and_names_its_error(capsys, tmp_path, monkeypatch):
    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(node_files.os, "fsync", full)
    result = run(capsys, [entry(tmp_path / "a.conf", "a\n")])
    assert result["msg"] == f"cannot write {tmp_path / 'a.conf'}: No space left on device"
    assert os.listdir(tmp_path) == []

    def full_and_swept(fd):
        # A cleanup on the shared directory removed the temporary file first: the write's own
        # error is still the one reported.
        for name in os.listdir(tmp_path):
            os.unlink(tmp_path / name)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(node_files.os, "fsync", full_and_swept)
    assert run(capsys, [entry(tmp_path / "a.conf", "a\n")])["msg"].endswith(": No space left on device")
