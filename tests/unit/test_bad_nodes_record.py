"""A user's bad nodes (plugins/module_utils/bad_nodes.py): the rules, the record on the NAS as
job_dirs.py keeps files there, the program the job script runs, and the bad_nodes module."""

import json
import os
import stat
import subprocess
import sys

import ansible.module_utils._internal
import pytest
import yaml
from ansible.module_utils.testing import patch_module_args

from ansible_collections.hpc.slurm_train.plugins.module_utils import bad_nodes
from ansible_collections.hpc.slurm_train.plugins.modules import bad_nodes as module
from ansible_collections.hpc.slurm_train.plugins.plugin_utils import launch_request

OTHER_UID = 4242  # a user who is not the one running the tests
NOW = 1_800_000_000
HOUR = 3600


@pytest.fixture
def jobs(tmp_path):
    root = tmp_path / "jobs"
    (root / user()).mkdir(parents=True)
    return root


def user():
    return bad_nodes.owner_name(os.geteuid())


def mark(records, node="node111", reason="NODE_FAIL", job_id=12, hours=24, now=NOW):
    return bad_nodes.add(records, node, reason, job_id, hours, now)


def test_a_mark_keeps_the_node_out_for_its_hours_and_then_expires():
    records = mark({}, hours=24)
    assert records == {"node111": {"reason": "NODE_FAIL", "since": NOW, "until": NOW + 24 * HOUR, "job_id": 12}}
    assert bad_nodes.unexpired(records, NOW + 24 * HOUR - 1) == records
    assert bad_nodes.unexpired(records, NOW + 24 * HOUR) == {}


def test_a_new_mark_says_why_and_keeps_the_later_end():
    first = mark({}, hours=48)
    again = mark(first, reason="GPU_CHECK", job_id=13, hours=1, now=NOW + HOUR)
    assert again["node111"] == {"reason": "GPU_CHECK", "since": NOW + HOUR, "until": NOW + 48 * HOUR, "job_id": 13}
    later = mark(first, reason="HUNG", job_id=14, hours=100, now=NOW + HOUR)
    assert later["node111"]["until"] == NOW + HOUR + 100 * HOUR


def test_forget_removes_that_node_only():
    records = mark(mark({}, node="node110"), node="node111")
    assert set(bad_nodes.forget(records, "node110")) == {"node111"}
    assert bad_nodes.forget(records, "node112") == records


@pytest.mark.parametrize("node, reason, hours, message", [
    ("node;reboot", "NODE_FAIL", 24, "node 'node;reboot' is no node name"),
    ("../x", "NODE_FAIL", 24, "is no node name"),
    ("node111", "SLOW", 24, "reason 'SLOW' is not one of NODE_FAIL, GPU_CHECK, HUNG, HEALTH"),
    ("node111", "NODE_FAIL", 0, "hours 0: give how many hours"),
    ("node111", "NODE_FAIL", -1, "hours -1"),
    ("node111", "NODE_FAIL", True, "hours True"),
    ("node111", "NODE_FAIL", "24", "hours '24'"),
    (110, "NODE_FAIL", 24, "node 110 is no node name"),
])
def test_a_bad_mark_is_refused_naming_the_value(node, reason, hours, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        bad_nodes.add({}, node, reason, 1, hours, NOW)


def test_malformed_entries_are_left_out_and_the_rest_kept():
    data = {"nodes": {
        "good": {"reason": "HEALTH", "since": NOW, "until": NOW + HOUR, "job_id": 3},
        "bad reason": {"reason": "NODE_FAIL", "since": NOW, "until": NOW + HOUR},
        "noreason": {"reason": "TIRED", "since": NOW, "until": NOW + HOUR},
        "notimes": {"reason": "HUNG", "since": "yesterday", "until": NOW},
        "boolean": {"reason": "HUNG", "since": True, "until": NOW},
        "list": ["HUNG"],
    }}
    assert bad_nodes.parse(data) == {"good": {"reason": "HEALTH", "since": NOW, "until": NOW + HOUR, "job_id": 3}}
    assert bad_nodes.parse([]) == {} and bad_nodes.parse({"nodes": []}) == {}


def test_a_malformed_entry_before_good_ones_costs_only_itself():
    good = {"reason": "HEALTH", "since": NOW, "until": NOW + HOUR, "job_id": 3}
    data = {"nodes": {"list": ["HUNG"], "a": good, "noreason": {**good, "reason": "TIRED"}, "b": good}}
    assert set(bad_nodes.parse(data)) == {"a", "b"}


def test_nodes_marked_at_one_time_are_listed_by_name():
    records = {name: {"reason": "HUNG", "since": NOW, "until": NOW + HOUR, "job_id": None} for name in ("n2", "n10", "n1")}
    assert [entry["node"] for entry in bad_nodes.listed(records)] == ["n1", "n10", "n2"]


def test_a_job_id_that_is_no_number_is_kept_as_none_and_times_as_whole_seconds():
    entry = {"reason": "HUNG", "since": NOW + 0.7, "until": NOW + HOUR + 0.2}
    data = {"nodes": {"n1": {**entry, "job_id": True}, "n2": {**entry, "job_id": "12"}, "n3": {**entry, "job_id": 5}}}
    assert bad_nodes.parse(data) == {name: {"reason": "HUNG", "since": NOW, "until": NOW + HOUR, "job_id": job_id}
                                     for name, job_id in (("n1", None), ("n2", None), ("n3", 5))}


def test_a_line_names_the_node_why_the_job_and_until_when():
    line = bad_nodes.describe("node111", mark({})["node111"])
    assert line == "node111: NODE_FAIL in job 12 at 2027-01-15 08:00 UTC, kept out until 2027-01-16 08:00 UTC"


def test_the_record_is_written_private_and_read_back(jobs):
    before, after = bad_nodes.update(str(jobs), lambda records: mark(records), now=NOW)
    assert before == {} and set(after) == {"node111"}
    path = jobs / user() / "nodes.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert bad_nodes.read(str(jobs)) == after
    assert sorted(os.listdir(jobs / user())) == [".nodes.json.lock", "nodes.json"], "no partial file left"


def test_an_update_drops_expired_entries_and_writes_nothing_when_dry(jobs):
    bad_nodes.update(str(jobs), lambda records: mark(mark(records, node="old", hours=1), node="new"), now=NOW)
    before, after = bad_nodes.update(str(jobs), lambda records: records, now=NOW + 2 * HOUR)
    assert set(before) == set(after) == {"new"}
    assert set(json.loads((jobs / user() / "nodes.json").read_text())["nodes"]) == {"new"}
    _, forgotten = bad_nodes.update(str(jobs), lambda records: bad_nodes.forget(records, "new"), now=NOW, dry=True)
    assert forgotten == {}
    assert set(bad_nodes.read(str(jobs))) == {"new"}, "a dry update writes nothing"


def test_no_user_directory_reads_as_none_and_is_no_place_to_write(tmp_path):
    (tmp_path / "jobs").mkdir()
    assert bad_nodes.read(str(tmp_path / "jobs")) == {}
    with pytest.raises(bad_nodes.Refused, match=f"{tmp_path}/jobs/{user()} does not exist"):
        bad_nodes.update(str(tmp_path / "jobs"), lambda records: mark(records))


def test_a_planted_link_as_the_record_is_refused_and_not_written_through(jobs, tmp_path):
    victim = tmp_path / "victim.json"
    victim.write_text("{}")
    (jobs / user() / "nodes.json").symlink_to(victim)
    for attempt in (lambda: bad_nodes.read(str(jobs)), lambda: bad_nodes.update(str(jobs), mark)):
        with pytest.raises(bad_nodes.Refused, match="nodes.json is a symbolic link: refusing to read it"):
            attempt()
    assert victim.read_text() == "{}"


def test_a_planted_link_as_the_users_directory_is_refused(tmp_path):
    root = tmp_path / "jobs"
    root.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (root / user()).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(bad_nodes.Refused, match=f"{root}/{user()} is a link or not a directory"):
        bad_nodes.update(str(root), mark)
    assert os.listdir(tmp_path / "elsewhere") == []
    # The user's directory is the staging's to refuse with the admin's fix: a launch tells them apart.
    with pytest.raises(bad_nodes.UserDirRefused):
        bad_nodes.read(str(root))


def test_a_planted_record_is_no_user_directory_problem(jobs, tmp_path):
    (jobs / user() / "nodes.json").symlink_to(tmp_path / "victim.json")
    with pytest.raises(bad_nodes.Refused) as refused:
        bad_nodes.read(str(jobs))
    assert not isinstance(refused.value, bad_nodes.UserDirRefused)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_record_of_another_user_is_refused_naming_its_owner(jobs):
    path = jobs / user() / "nodes.json"
    path.write_text(json.dumps({"nodes": {"node110": {"reason": "HUNG", "since": NOW, "until": NOW + HOUR}}}))
    os.chown(path, OTHER_UID, OTHER_UID)
    with pytest.raises(bad_nodes.Refused, match=f"belongs to uid {OTHER_UID}, not to {user()}"):
        bad_nodes.read(str(jobs))


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_a_users_directory_of_another_user_is_refused(jobs):
    os.chown(jobs / user(), OTHER_UID, OTHER_UID)
    with pytest.raises(bad_nodes.Refused, match=f"belongs to uid {OTHER_UID}, not to {user()}"):
        bad_nodes.update(str(jobs), mark)
    assert not (jobs / user() / "nodes.json").exists()


def test_a_record_that_is_no_json_or_over_a_megabyte_reads_as_none(jobs):
    path = jobs / user() / "nodes.json"
    text = json.dumps({"nodes": mark({})})
    limit = 1024 * 1024  # a record's most: a planted or runaway file costs no more to read
    path.write_text(" " * (limit - len(text)) + text)
    assert set(bad_nodes.read(str(jobs))) == {"node111"}, "a record of exactly the limit is read"
    path.write_text(" " * (limit + 1 - len(text)) + text)
    assert bad_nodes.read(str(jobs)) == {}, "one byte more is not read whole, so not at all"
    path.write_text('{"nodes": {"node111": ')
    assert bad_nodes.read(str(jobs)) == {}


def test_a_jobs_root_not_made_yet_reads_as_none_and_one_that_is_a_file_is_refused(tmp_path):
    assert bad_nodes.read(str(tmp_path / "nowhere")) == {}
    (tmp_path / "file").write_text("")
    with pytest.raises(bad_nodes.Refused, match=f"jobs directory {tmp_path}/file: Not a directory"):
        bad_nodes.read(str(tmp_path / "file"))


def test_a_users_directory_that_is_a_file_or_a_record_that_is_a_directory_is_refused(tmp_path, jobs):
    (jobs / user() / "nodes.json").mkdir()
    with pytest.raises(bad_nodes.Refused, match="nodes.json is not a regular file: remove it"):
        bad_nodes.read(str(jobs))
    (jobs / user() / "nodes.json").rmdir()
    os.mkfifo(jobs / user() / "nodes.json")
    with pytest.raises(bad_nodes.Refused, match="nodes.json is not a regular file: remove it"):
        bad_nodes.read(str(jobs))
    root = tmp_path / "other"
    root.mkdir()
    (root / user()).write_text("")
    with pytest.raises(bad_nodes.Refused, match=f"{root}/{user()} is a link or not a directory"):
        bad_nodes.read(str(root))


def test_the_record_and_its_lock_are_private_from_the_moment_they_are_made(jobs, monkeypatch):
    # A file made readable and only then chmod-ed could be opened by another user in between.
    made = []
    fchmod = os.fchmod
    monkeypatch.setattr(bad_nodes.os, "fchmod", lambda fd, mode: made.append(os.fstat(fd).st_mode) or fchmod(fd, mode))
    umask = os.umask(0o022)
    try:
        bad_nodes.update(str(jobs), mark, now=NOW)
    finally:
        os.umask(umask)
    assert [stat.S_IMODE(mode) for mode in made] == [0o600]
    assert stat.S_IMODE((jobs / user() / ".nodes.json.lock").stat().st_mode) == 0o600


def test_a_write_that_fails_leaves_no_partial_file(jobs):
    with pytest.raises(TypeError):
        bad_nodes.update(str(jobs), lambda records: {"node111": {"until": NOW + HOUR, "odd": {1}}}, now=NOW)
    assert os.listdir(jobs / user()) == [".nodes.json.lock"]


def test_a_link_planted_at_the_temporary_name_is_not_written_through(jobs, tmp_path, monkeypatch):
    monkeypatch.setattr(bad_nodes.os, "urandom", lambda size: b"\x07" * size)
    victim = tmp_path / "victim"
    victim.write_text("mine")
    (jobs / user() / f".nodes.json.{os.getpid()}.07070707").symlink_to(victim)
    with pytest.raises(FileExistsError):
        bad_nodes.update(str(jobs), mark, now=NOW)
    assert victim.read_text() == "mine" and not (jobs / user() / "nodes.json").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_lock_of_another_user_is_refused(jobs):
    lock = jobs / user() / ".nodes.json.lock"
    lock.write_text("")
    os.chown(lock, OTHER_UID, OTHER_UID)
    with pytest.raises(bad_nodes.Refused, match=r"\.nodes\.json\.lock belongs to another user: remove it"):
        bad_nodes.update(str(jobs), mark, now=NOW)
    assert not (jobs / user() / "nodes.json").exists()
    assert bad_nodes.update(str(jobs), mark, now=NOW, dry=True)[1] == mark({}), "a dry update takes no lock"


def run_program(*args):
    return subprocess.run([sys.executable, bad_nodes.__file__, *map(str, args)], capture_output=True, text=True)


def test_the_job_sides_program_marks_a_node_and_says_so(jobs):
    proc = run_program("mark", jobs, "node111", "GPU_CHECK", "0.5", 77)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("bad node node111: GPU_CHECK in job 77 at ")
    record = bad_nodes.read(str(jobs))["node111"]
    assert (record["reason"], record["job_id"], record["until"] - record["since"]) == ("GPU_CHECK", 77, 1800)


@pytest.mark.parametrize("args, code, message", [
    (("mark", "node111", "SLOW", "24", "1"), 1, "bad node node111 not recorded: reason 'SLOW' is not one of"),
    (("mark", "node111", "HUNG", "a day", "1"), 1, "bad node node111 not recorded: could not convert string to float"),
    (("mark", "node111", "HUNG", "24"), 2, "usage: bad_nodes.py mark JOBS_ROOT NODE REASON HOURS JOB_ID"),
    (("list", "node111", "HUNG", "24", "1"), 2, "usage: bad_nodes.py mark JOBS_ROOT NODE REASON HOURS JOB_ID"),
])
def test_the_program_refuses_bad_arguments_and_writes_nothing(jobs, args, code, message):
    proc = run_program(args[0], jobs, *args[1:])
    assert proc.returncode == code and message in proc.stderr
    assert not (jobs / user() / "nodes.json").exists()


# The bad_nodes module (library/bad_nodes.py), run in-process as a task runs it.


def run_module(capsys, monkeypatch, check_mode=False, **args):
    monkeypatch.setattr(ansible.module_utils._internal, "is_controller", False)
    if check_mode:
        args["_ansible_check_mode"] = True
    with patch_module_args(args), pytest.raises(SystemExit):
        module.main()
    return json.loads(capsys.readouterr().out)



def test_the_module_lists_the_users_unexpired_bad_nodes_oldest_first(capsys, monkeypatch, jobs):
    bad_nodes.update(str(jobs), lambda records: mark(mark(records, node="node110", now=bad_nodes.time.time() - 60),
                                                     node="node111", now=bad_nodes.time.time()))
    result = run_module(capsys, monkeypatch, jobs_root=str(jobs))
    assert result["changed"] is False and [entry["node"] for entry in result["bad_nodes"]] == ["node110", "node111"]
    assert result["bad_nodes"][0]["line"].startswith("node110: NODE_FAIL in job 12 at ")
    assert result["record"] == f"{jobs}/{user()}/nodes.json"


def test_the_module_forgets_a_node_and_says_so_only_when_it_was_there(capsys, monkeypatch, jobs):
    now = bad_nodes.time.time()
    bad_nodes.update(str(jobs), lambda records: mark(mark(records, node="node110", now=now), node="node111", now=now))
    predicted = run_module(capsys, monkeypatch, check_mode=True, jobs_root=str(jobs), forget="node110")
    assert predicted["changed"] is True and set(bad_nodes.read(str(jobs))) == {"node110", "node111"}, "check mode"
    forgot = run_module(capsys, monkeypatch, jobs_root=str(jobs), forget="node110")
    assert forgot["changed"] is True and forgot["forgotten"].startswith("node110: NODE_FAIL in job 12")
    assert [entry["node"] for entry in forgot["bad_nodes"]] == ["node111"]
    assert set(bad_nodes.read(str(jobs))) == {"node111"}
    again = run_module(capsys, monkeypatch, jobs_root=str(jobs), forget="node110")
    assert again["changed"] is False and again["forgotten"] is None


def test_the_module_refuses_what_is_no_node_name_and_a_planted_record(capsys, monkeypatch, jobs, tmp_path):
    result = run_module(capsys, monkeypatch, jobs_root=str(jobs), forget="node1;reboot")
    assert result["failed"] is True and result["msg"].startswith("forget='node1;reboot': node 'node1;reboot' is no node")
    (jobs / user() / "nodes.json").symlink_to(tmp_path / "elsewhere.json")
    result = run_module(capsys, monkeypatch, jobs_root=str(jobs))
    assert result["failed"] is True and "nodes.json is a symbolic link: refusing to read it" in result["msg"]


def test_the_modules_documented_options_are_its_argument_spec():
    documented = yaml.safe_load(module.DOCUMENTATION)["options"]
    assert {name: (spec["type"], spec.get("required", False)) for name, spec in documented.items()} == {
        name: (spec["type"], spec.get("required", False)) for name, spec in module.ARGUMENT_SPEC.items()}


def test_bad_node_hours_is_checked_with_the_values_given():
    assert [launch_request.bad_node_hours(value) for value in (24, "0.5", 0, "")] == [24, 0.5, 0, 0]
    for bad in ("-1", "a day", True, "nan", str(launch_request.MAX_BAD_NODE_HOURS + 1)):
        assert launch_request.value_problems({"bad_node_hours": bad}) == [
            f"bad_node_hours={bad!r} is not allowed: {launch_request.BAD_NODE_HOURS_RULE}"]


def test_bad_node_hours_go_up_to_a_leap_year():
    assert launch_request.bad_node_hours(366 * 24) == 8784 and launch_request.bad_node_hours("8784.5") is None
