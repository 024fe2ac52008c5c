"""Unit tests of plugins/module_utils/slurm.py against outputs recorded in Slurm 22.05's format."""

import itertools
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.hpc.slurm_train.plugins.module_utils import slurm

MODULE_UTILS_DIR = Path(__file__).resolve().parents[2] / "plugins" / "module_utils"

# ---------------------------------------------------------------------------
# Import
# ---------------------------------------------------------------------------


def test_the_collection_name_imports_the_checkouts_file():
    assert Path(slurm.__file__).resolve() == MODULE_UTILS_DIR / "slurm.py"


def test_uses_only_the_standard_library():
    # A fresh interpreter that can see module_utils but not the venv's packages.
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import slurm; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('ansible', 'yaml', 'jinja2')))"
    )
    completed = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code, str(MODULE_UTILS_DIR)],
        capture_output=True, text=True, check=True,
    )
    assert completed.stdout.strip() == "[]"


# ---------------------------------------------------------------------------
# Hostlists
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "hosts"), [
    ("node[110-111,113],gpu[01-03]x",
     ["node110", "node111", "node113", "gpu01x", "gpu02x", "gpu03x"]),
    ("node110", ["node110"]),
    ("node[08-10]", ["node08", "node09", "node10"]),
    ("node[8-10]", ["node8", "node9", "node10"]),
    ("rack[1-2]-n[01-02]", ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]),
    ("a,b.example.org,c_d", ["a", "b.example.org", "c_d"]),
    ("node[3,1]", ["node3", "node1"]),
    ("  node[1-2]\n", ["node1", "node2"]),
    ("", []),
])
def test_expand_hostlist(text, hosts):
    assert slurm.expand_hostlist(text) == hosts


def test_expand_hostlist_accepts_exactly_the_size_limit():
    hosts = slurm.expand_hostlist(f"n[1-{slurm.MAX_HOSTLIST_SIZE}]")
    assert (len(hosts), hosts[0], hosts[-1]) == (100000, "n1", "n100000")


@pytest.mark.parametrize(("text", "message"), [
    ("node[1-2", "invalid hostlist 'node[1-2': '[' is never closed"),
    ("node1-2]", "invalid hostlist 'node1-2]': unbalanced ']' at position 7"),
    ("node[[1]]", "invalid hostlist 'node[[1]]': nested '[' at position 5"),
    ("node[5-3]", "invalid hostlist 'node[5-3]': reversed range '5-3'"),
    ("node[]", "invalid hostlist 'node[]': bad range '' in []"),
    ("node[a-b]", "invalid hostlist 'node[a-b]': bad range 'a-b' in [a-b]"),
    ("node[1-100001]", "invalid hostlist 'node[1-100001]': range '1-100001' has more than 100000 hosts"),
    ("a[1-1000]b[1-101]", "invalid hostlist 'a[1-1000]b[1-101]': expands to more than 100000 hosts"),
    ("n[1-60000],m[1-60000]", "invalid hostlist 'n[1-60000],m[1-60000]': expands to more than 100000 hosts"),
    ("a,,b", "invalid hostlist 'a,,b': empty host name between commas"),
    ("node1 node2", "invalid hostlist 'node1 node2': bad characters in 'node1 node2'"),
    ("(null)", "invalid hostlist '(null)': bad characters in '(null)'"),
    ("n;rm", "invalid hostlist 'n;rm': bad characters in 'n;rm'"),
])
def test_expand_hostlist_rejects_malformed_text(text, message):
    with pytest.raises(ValueError) as error:
        slurm.expand_hostlist(text)
    assert str(error.value) == message


def test_expand_hostlist_rejects_non_strings():
    with pytest.raises(TypeError, match="not a string"):
        slurm.expand_hostlist(["node1"])


@pytest.mark.parametrize(("names", "text"), [
    (["node110", "node111", "node113"], "node[110-111,113]"),
    (["node111", "node110", "node111"], "node[110-111]"),
    (["node08", "node09", "node10"], "node[08-10]"),
    (["node9", "node10"], "node[9-10]"),
    (["node1", "node01"], "node[1,01]"),
    (["node1", "node3", "node4", "node6"], "node[1,3-4,6]"),  # a later range grows too
    (["gpu01x", "gpu02x"], "gpu01x,gpu02x"),
    (["node5"], "node5"),
    (["login", "node2", "node1", "gpu1"], "gpu1,login,node[1-2]"),
    ([], ""),
])
def test_compress_hostlist(names, text):
    assert slurm.compress_hostlist(names) == text


@pytest.mark.parametrize("text", [
    "node[110-111,113]", "gpu[01-03],node[08-12]", "n[1-9,11],x[001-002,010]", "login",
])
def test_compress_undoes_expand_of_canonical_text(text):
    assert slurm.compress_hostlist(slurm.expand_hostlist(text)) == text


def test_compress_hostlist_rejects_invalid_names():
    with pytest.raises(ValueError, match=r"invalid node name 'node\[1\]'"):
        slurm.compress_hostlist(["node[1]"])


# ---------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["node110", "gpu-a6000_1", "n.example.org", "1node", "a" * 63])
def test_validate_node_name_accepts(name):
    assert slurm.validate_node_name(name) == name


@pytest.mark.parametrize("name", [
    "", "-node", ".node", "_node", "node 1", "node;1", "$HOST", "'node'", '"node"', "a..b",
    "node/1", "node1\n", "a" * 64, None, 110,
])
def test_validate_node_name_refuses(name):
    with pytest.raises(ValueError) as error:
        slurm.validate_node_name(name)
    assert str(error.value) == (
        f"invalid node name {name!r}: a node name is 1 to 63 letters, digits, '-', '_' or '.', "
        "starting with a letter or digit, without '..'"
    )


@pytest.mark.parametrize("name", ["train-ddp", "sweep_lr.0.1", "-x", "a" * 128, "...", ".x"])
def test_validate_job_name_accepts(name):
    assert slurm.validate_job_name(name) == name


@pytest.mark.parametrize("name", ["", "a;rm -rf /", "train ddp", "$(id)", "a/b", "a" * 129, "x\n", None, ".", ".."])
def test_validate_job_name_refuses(name):
    with pytest.raises(ValueError) as error:
        slurm.validate_job_name(name)
    assert str(error.value) == (f"invalid job name {name!r}: a job name is 1 to 128 letters, digits, '-', '_' or '.', "
                                "other than '.' and '..'")


# ---------------------------------------------------------------------------
# Job states
# ---------------------------------------------------------------------------

SLURM_22_05_JOB_STATES = {
    "BOOT_FAIL", "CANCELLED", "COMPLETED", "CONFIGURING", "COMPLETING", "DEADLINE", "FAILED",
    "NODE_FAIL", "OUT_OF_MEMORY", "PENDING", "PREEMPTED", "RUNNING", "RESV_DEL_HOLD", "REQUEUE_FED",
    "REQUEUE_HOLD", "REQUEUED", "RESIZING", "REVOKED", "SIGNALING", "SPECIAL_EXIT", "STAGE_OUT",
    "STOPPED", "SUSPENDED", "TIMEOUT",
}
# job_state_string() of 25.11 adds EXPEDITING; test_slurm_versions.py checks each version's list.
SLURM_JOB_STATES = SLURM_22_05_JOB_STATES | {"EXPEDITING"}

EXPECTED_STATE_OUTCOMES = {
    "BOOT_FAIL": (True, "node_failure"), "CANCELLED": (True, "cancelled"),
    "COMPLETED": (True, "succeeded"), "CONFIGURING": (False, "waiting"),
    "COMPLETING": (False, "finishing"), "DEADLINE": (True, "timeout"), "FAILED": (True, "failed"),
    "NODE_FAIL": (True, "node_failure"), "OUT_OF_MEMORY": (True, "out_of_memory"),
    "PENDING": (False, "waiting"), "PREEMPTED": (True, "preempted"), "RUNNING": (False, "running"),
    "RESV_DEL_HOLD": (False, "held"), "REQUEUE_FED": (False, "requeued"), "EXPEDITING": (False, "requeued"),
    "REQUEUE_HOLD": (False, "held"), "REQUEUED": (False, "requeued"), "RESIZING": (False, "running"),
    "REVOKED": (True, "revoked"), "SIGNALING": (False, "running"), "SPECIAL_EXIT": (False, "held"),
    "STAGE_OUT": (False, "finishing"), "STOPPED": (False, "suspended"),
    "SUSPENDED": (False, "suspended"), "TIMEOUT": (True, "timeout"),
}


def test_job_states_cover_every_slurm_state():
    assert set(slurm.JOB_STATES) == SLURM_JOB_STATES


@pytest.mark.parametrize("state", sorted(slurm.JOB_STATES))
def test_job_state_outcome(state):
    info = slurm.JOB_STATES[state]
    assert (slurm.is_final(state), slurm.outcome(state)) == EXPECTED_STATE_OUTCOMES[state]
    # Only COMPLETED is a success; a success is always final.
    assert info.success == (state == "COMPLETED")
    assert info.description and "\n" not in info.description


@pytest.mark.parametrize("state", sorted(slurm.JOB_STATES))
def test_job_state_accepts_how_commands_print_it(state):
    assert slurm.job_state(f"{state.lower()} by 1000") is slurm.JOB_STATES[state]


@pytest.mark.parametrize(("raw", "base"), [
    ("CANCELLED by 0", "CANCELLED"), ("CANCELLED+", "CANCELLED"), (" RUNNING\n", "RUNNING"), ("pending", "PENDING"),
])
def test_normalize_state(raw, base):
    assert slurm.normalize_state(raw) == base


@pytest.mark.parametrize("helper", [slurm.is_final, slurm.outcome, slurm.job_state])
def test_unknown_state_is_an_error_never_a_success(helper):
    with pytest.raises(slurm.UnknownJobState) as error:
        helper("EXPLODED")
    assert str(error.value).startswith("unknown Slurm job state 'EXPLODED'; known states: BOOT_FAIL, CANCELLED,")


def test_empty_state_is_a_parse_error():
    with pytest.raises(slurm.SlurmParseError, match="empty job state ''"):
        slurm.job_state("")


# ---------------------------------------------------------------------------
# Durations
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "seconds"), [
    ("1-02:03:04", 93784), ("00:12:34", 754), ("12:34", 754), ("0:05", 5), ("100:00:00", 360000),
    ("2-00", 172800), ("2-01:30", 178200), ("UNLIMITED", None), ("INVALID", None),
    ("Partition_Limit", None), ("N/A", None), (" 00:00:00\n", 0),
    # The largest value of each field (sacct prints a day's last second as 1-23:59:59).
    ("1-23:59:59", 172799), ("00:59:59", 3599), ("59:59", 3599),
])
def test_parse_duration(text, seconds):
    assert slurm.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5", "1:2:3:4", "00:61", "01:60:00", "1-24:00:00", "a:b", "1-", "-1:00",
                                  "00:00:60", "1-00:00:60", "1-00:60", "00:60"])
def test_parse_duration_rejects(text):
    with pytest.raises(ValueError, match=f"invalid duration {text!r}"):
        slurm.parse_duration(text)


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "00:00:00"), (754, "00:12:34"), (86399, "23:59:59"), (86400, "1-00:00:00"), (93784, "1-02:03:04"),
    (None, "UNLIMITED"),
])
def test_format_duration(seconds, text):
    assert slurm.format_duration(seconds) == text


def test_format_duration_round_trips():
    for seconds in (1, 59, 3600, 90061, 10 * 86400 + 1):
        assert slurm.parse_duration(slurm.format_duration(seconds)) == seconds


def test_format_duration_rejects_negative():
    with pytest.raises(ValueError, match="negative"):
        slurm.format_duration(-1)


# ---------------------------------------------------------------------------
# sbatch
# ---------------------------------------------------------------------------


def test_parse_sbatch_parsable(slurm_output):
    assert slurm.parse_sbatch_parsable(slurm_output("sbatch_parsable.txt")) == (13, None)


def test_parse_sbatch_parsable_with_cluster(slurm_output):
    # sbatch --parsable -M rec prints JOBID;CLUSTER.
    assert slurm.parse_sbatch_parsable(slurm_output("sbatch_parsable_cluster.txt") + "\n\n") == (12, "rec")


@pytest.mark.parametrize("stdout", ["", "\n", "Submitted batch job 1234\n", "1234\n1235\n", "12a\n", "1234;\n"])
def test_parse_sbatch_parsable_rejects(stdout):
    with pytest.raises(slurm.SlurmParseError, match="expected JOBID or JOBID;CLUSTER"):
        slurm.parse_sbatch_parsable(stdout)


def test_parse_sbatch_test_only(slurm_output):
    assert slurm.parse_sbatch_test_only(slurm_output("sbatch_test_only.stderr")) == {
        "job_id": 20, "start": "2026-12-02T14:41:03", "processors": 2,
        "nodes": ["rec1", "rec2"], "partition": "gpu", "cluster": None,
    }


def test_parse_sbatch_test_only_in_a_federation_among_warnings():
    stderr = (
        "sbatch: warning: can't honor --ntasks-per-node set to 2 which doesn't match the requested tasks\n"
        "sbatch: Job 77 to start at 2026-12-02T14:00:00 on cluster east using 4 processors on nodes n[1-2]"
        " in partition cpu\n"
    )
    assert slurm.parse_sbatch_test_only(stderr) == {
        "job_id": 77, "start": "2026-12-02T14:00:00", "processors": 4,
        "nodes": ["n1", "n2"], "partition": "cpu", "cluster": "east",
    }


def test_parse_sbatch_test_only_rejects_an_error(slurm_output):
    # Slurm 22.05 prints "allocation failure: ...", without the "sbatch: error:" prefix.
    stderr = slurm_output("sbatch_test_only_unsatisfiable.stderr")
    assert stderr == "allocation failure: Requested node configuration is not available\n"
    with pytest.raises(slurm.SlurmParseError, match="Requested node configuration is not available"):
        slurm.parse_sbatch_test_only(stderr)


# ---------------------------------------------------------------------------
# scontrol show job -o
# ---------------------------------------------------------------------------

# The recordings' job directory on the local cluster's NAS (see fixtures/slurm/README.md).
RUN_DIR = "/var/lib/ansible-slurm-train/rec/nas/runs/train-ddp"
FINGERPRINT = "fingerprint:3f9a1c27d4e5b680"
BOTH = {"nodes": ["rec1", "rec2"], "batch_host": "rec1"}
WAITING = {"nodes": [], "batch_host": None}
OK = {"reason": None, "exit_code": 0, "exit_signal": 0}


def recorded_job(job_id, *parts, **fields):
    """Normalized view of a recorded job: what every recording of job ``job_id`` shares, then ``parts`` and ``fields``."""
    merged = {}
    for part in parts:
        merged.update(part)
    return {
        "job_id": job_id, "name": "train-ddp", "partition": "gpu", "comment": FINGERPRINT, "restarts": 0,
        "stdout_path": f"{RUN_DIR}/train-ddp-{job_id}.out", "stderr_path": f"{RUN_DIR}/train-ddp-{job_id}.out",
        **merged, **fields,
    }


@pytest.mark.parametrize(("fixture", "expected"), [
    ("scontrol_show_job_pending_resources.txt",
     recorded_job(7, WAITING, OK, state="PENDING", reason="Resources", elapsed_seconds=0)),
    ("scontrol_show_job_pending_priority.txt",
     recorded_job(17, WAITING, OK, state="PENDING", reason="Priority", elapsed_seconds=0)),
    ("scontrol_show_job_pending_reqnodenotavail.txt",
     recorded_job(18, WAITING, OK, state="PENDING", reason="ReqNodeNotAvail,_UnavailableNodes:rec2",
                  elapsed_seconds=0)),
    ("scontrol_show_job_pending_nodes_down.txt",
     recorded_job(16, WAITING, OK, state="PENDING", elapsed_seconds=0,
                  reason="Nodes_required_for_job_are_DOWN,_DRAINED_or_reserved_for_jobs_in_higher_priority_partitions")),
    ("scontrol_show_job_pending_begintime.txt",
     recorded_job(5, WAITING, OK, state="PENDING", reason="BeginTime", elapsed_seconds=0)),
    ("scontrol_show_job_pending_held.txt",
     recorded_job(6, WAITING, OK, state="PENDING", reason="JobHeldAdmin", elapsed_seconds=0)),
    ("scontrol_show_job_running.txt",
     recorded_job(4, BOTH, OK, state="RUNNING", elapsed_seconds=4)),
    ("scontrol_show_job_completed.txt",
     recorded_job(2, BOTH, OK, state="COMPLETED", elapsed_seconds=0)),
    ("scontrol_show_job_failed.txt",
     recorded_job(3, nodes=["rec2"], batch_host="rec2", state="FAILED", reason="NonZeroExitCode", exit_code=3,
                  exit_signal=0, elapsed_seconds=0)),
    ("scontrol_show_job_cancelled.txt",
     recorded_job(4, BOTH, state="CANCELLED", reason=None, exit_code=0, exit_signal=15, elapsed_seconds=16)),
    ("scontrol_show_job_timeout.txt",
     recorded_job(1, nodes=["rec1"], batch_host="rec1", state="TIMEOUT", reason="TimeLimit", exit_code=0,
                  exit_signal=15, elapsed_seconds=73)),
    ("scontrol_show_job_node_fail.txt",
     recorded_job(13, BOTH, state="NODE_FAIL", reason="NodeDown", exit_code=0, exit_signal=15,
                  elapsed_seconds=34)),
    # Right after 'scontrol requeue' the job shows COMPLETING (not REQUEUED), Restarts=1 and part of its nodes...
    ("scontrol_show_job_requeued_completing.txt",
     recorded_job(8, OK, nodes=["rec1"], batch_host="rec1", state="COMPLETING", restarts=1, elapsed_seconds=0)),
    # ... then PENDING, held back by BeginTime for two minutes ...
    ("scontrol_show_job_requeued_pending.txt",
     recorded_job(8, WAITING, OK, state="PENDING", reason="BeginTime", restarts=1, elapsed_seconds=0)),
    # ... then RUNNING again, started by the backfill scheduler.
    ("scontrol_show_job_running_after_requeue.txt",
     recorded_job(8, BOTH, OK, state="RUNNING", restarts=1, elapsed_seconds=2)),
])
def test_parse_scontrol_job_normalizes(slurm_output, fixture, expected):
    job = slurm.parse_scontrol_job(slurm_output(fixture))
    assert {key: job[key] for key in slurm.NORMALIZED_JOB_KEYS} == expected


def test_parse_scontrol_job_out_of_memory(slurm_output):
    # Hand-written: the local cluster has no memory enforcement (TaskPlugin=task/none), so it cannot record one.
    job = slurm.parse_scontrol_job(slurm_output("scontrol_show_job_out_of_memory.txt"))
    assert {key: job[key] for key in ("job_id", "state", "reason", "exit_code", "exit_signal", "elapsed_seconds",
                                       "nodes", "batch_host")} == {
        "job_id": 1234, "state": "OUT_OF_MEMORY", "reason": "OutOfMemory", "exit_code": 0, "exit_signal": 125,
        "elapsed_seconds": 242, "nodes": ["node110", "node111"], "batch_host": "node110",
    }


def test_parse_scontrol_job_keeps_every_raw_field(slurm_output):
    line = slurm_output("scontrol_show_job_running.txt")
    job = slurm.parse_scontrol_job(line)
    raw = {key: value for key, value in job.items() if key not in slurm.NORMALIZED_JOB_KEYS}
    # Only Command holds a space here ("job.sbatch 300"), and its second word has no '=' in it,
    # so the tokens with '=' name every key.
    assert sorted(raw) == sorted(token.split("=")[0] for token in line.split() if "=" in token)
    assert len(raw) == 62
    assert raw["JobId"] == "4"
    assert raw["UserId"] == "root(0)"
    assert raw["AllocNode:Sid"] == "localhost:21139"
    assert raw["TRES"] == "cpu=2,node=2,billing=2,gres/gpu=4"
    assert raw["ReqB:S:C:T"] == "0:0:*:*"
    assert raw["CPUs/Task"] == "1"
    assert raw["Comment"] == FINGERPRINT  # without the extra space Slurm prints after it
    assert raw["Power"] == ""
    assert raw["TresPerNode"] == "gres:gpu:2"
    assert raw["Command"] == f"{RUN_DIR}/job.sbatch 300"
    assert raw["EndTime"] == "Unknown"


def test_parse_scontrol_job_after_backfill_has_a_day_time_limit(slurm_output):
    job = slurm.parse_scontrol_job(slurm_output("scontrol_show_job_running_after_requeue.txt"))
    assert (job["TimeLimit"], slurm.parse_duration(job["TimeLimit"]), job["Scheduler"]) == (
        "365-00:00:00", 365 * 86400, "Backfill")


def test_parse_scontrol_job_values_with_spaces_and_equals_signs(slurm_output):
    job = slurm.parse_scontrol_job(slurm_output("scontrol_show_job_spaces.txt"))
    spaced_dir = "/var/lib/ansible-slurm-train/rec/nas/my runs/train ddp"
    assert job["WorkDir"] == spaced_dir
    assert job["Command"] == f"{spaced_dir}/train-ddp.sbatch 2"
    assert job["comment"] == "fingerprint:0123456789abcdef note: Partition=debug was full, Retry=3"
    assert job["Partition"] == job["partition"] == "gpu"
    assert "Retry" not in job
    assert job["stdout_path"] == f"{spaced_dir}/train-ddp-14.out"
    assert job["ReqNodeList"] == "rec1"
    assert job["job_id"] == 14


@pytest.mark.parametrize("node_list", ["", "(null)"])
def test_parse_scontrol_job_without_allocation(node_list):
    # libslurm 22.05 prints an unset NodeList as "NodeList="; older releases printed "(null)".
    job = slurm.parse_scontrol_job(f"JobId=5 JobState=PENDING Reason=Priority ExitCode=0:0 NodeList={node_list} NumNodes=1\n")
    assert (job["nodes"], job["NumNodes"], job["batch_host"]) == ([], "1", None)


def test_parse_scontrol_job_takes_keys_of_later_slurm_versions():
    line = "JobId=9 JobName=x JobState=RUNNING Reason=None ExitCode=0:0 RunTime=00:00:01 NewKey=abc Command=/x y\n"
    job = slurm.parse_scontrol_job(line)
    assert (job["NewKey"], job["Command"], job["elapsed_seconds"]) == ("abc", "/x y", 1)


def test_parse_scontrol_job_without_comment(slurm_output):
    # Submitted without --comment: scontrol leaves the key out altogether.
    job = slurm.parse_scontrol_job(slurm_output("scontrol_show_job_no_comment.txt"))
    assert (job["comment"], "Comment" in job, job["job_id"], job["state"]) == (None, False, 15, "COMPLETED")


def test_parse_scontrol_job_not_found(slurm_output):
    with pytest.raises(slurm.JobNotFound) as error:
        slurm.parse_scontrol_job("", slurm_output("scontrol_show_job_invalid_id.stderr"))
    assert str(error.value) == "Slurm does not know the job: Invalid job id specified"


@pytest.mark.parametrize(("stdout", "message"), [
    ("", "scontrol show job printed no job record"),
    ("No jobs in the system\n", "not an 'scontrol show job -o' record: 'No jobs in the system'"),
    ("JobName=x JobId=1\n", "not an 'scontrol show job -o' record"),
    ("JobId=1 JobName=x ExitCode=0:0\n", "scontrol job record without JobState"),
    ("JobId=1 JobState=RUNNING ExitCode=zero\n", "invalid exit code 'zero'"),
    ("JobId=1 JobState=RUNNING ExitCode=0:0 Restarts=x\n", "invalid Restarts='x'"),
    ("JobId=x1 JobState=RUNNING ExitCode=0:0\n", "invalid job id 'x1'"),
])
def test_parse_scontrol_job_rejects_garbage(stdout, message):
    with pytest.raises(slurm.SlurmParseError, match=message.replace("(", r"\(").replace(")", r"\)")):
        slurm.parse_scontrol_job(stdout)


def test_parse_scontrol_job_refuses_several_records(slurm_output):
    two = slurm_output("scontrol_show_job_running.txt") + slurm_output("scontrol_show_job_spaces.txt")
    with pytest.raises(slurm.SlurmParseError, match=r"expected one job record, got 2 \(job ids \[4, 14\]\)"):
        slurm.parse_scontrol_job(two)
    assert [job["job_id"] for job in slurm.parse_scontrol_jobs(two)] == [4, 14]


# ---------------------------------------------------------------------------
# sacct
# ---------------------------------------------------------------------------


def test_parse_sacct_requeued_job(slurm_output):
    # Job 8: requeued with 'scontrol requeue' after 2 s, run again, then cancelled.
    runs, summary = slurm.parse_sacct(slurm_output("sacct_requeued.txt"))
    assert runs == [
        {"job_id": 8, "name": "train-ddp", "state": "REQUEUED", "reason": None, "exit_code": 0,
         "exit_signal": 0, "nodes": ["rec1", "rec2"], "elapsed_seconds": 2,
         "start": "2026-12-02T14:37:00", "end": "2026-12-02T14:37:02", "comment": None},
        {"job_id": 8, "name": "train-ddp", "state": "CANCELLED", "reason": "BeginTime", "exit_code": 0,
         "exit_signal": 0, "nodes": ["rec1", "rec2"], "elapsed_seconds": 12,
         "start": "2026-12-02T14:39:31", "end": "2026-12-02T14:39:43", "comment": None},
    ]
    assert summary == {
        "job_id": 8, "name": "train-ddp", "state": "CANCELLED", "reason": "BeginTime", "exit_code": 0,
        "exit_signal": 0, "restarts": 1, "nodes": ["rec1", "rec2"], "batch_host": None,
        "elapsed_seconds": 12, "stdout_path": None, "stderr_path": None, "partition": None,
        "comment": None,
    }


@pytest.mark.parametrize(("fixture", "expected"), [
    ("sacct_completed.txt", {"job_id": 2, "state": "COMPLETED", "exit_code": 0, "exit_signal": 0, "restarts": 0,
                             "nodes": ["rec1", "rec2"], "elapsed_seconds": 0}),
    ("sacct_failed.txt", {"job_id": 3, "state": "FAILED", "exit_code": 3, "exit_signal": 0, "restarts": 0,
                          "nodes": ["rec2"], "elapsed_seconds": 0}),
    # sacct says 0:0 where scontrol says ExitCode=0:15 for the same cancelled, timed-out or failed-node job.
    ("sacct_cancelled.txt", {"job_id": 4, "state": "CANCELLED", "exit_code": 0, "exit_signal": 0, "restarts": 0,
                             "nodes": ["rec1", "rec2"], "elapsed_seconds": 16}),
    ("sacct_timeout.txt", {"job_id": 1, "state": "TIMEOUT", "exit_code": 0, "exit_signal": 0, "restarts": 0,
                           "nodes": ["rec1"], "elapsed_seconds": 73}),
    ("sacct_node_fail.txt", {"job_id": 13, "state": "NODE_FAIL", "exit_code": 0, "exit_signal": 0, "restarts": 0,
                             "nodes": ["rec1", "rec2"], "elapsed_seconds": 34}),
    ("sacct_pending_resources.txt", {"job_id": 7, "state": "PENDING", "reason": None, "restarts": 0, "nodes": []}),
    ("sacct_pending_held.txt", {"job_id": 6, "state": "PENDING", "reason": None, "restarts": 0, "nodes": []}),
    ("sacct_pending_begintime.txt", {"job_id": 5, "state": "PENDING", "reason": "BeginTime", "restarts": 0,
                                     "nodes": []}),
    ("sacct_running.txt", {"job_id": 4, "state": "RUNNING", "exit_code": 0, "exit_signal": 0, "restarts": 0,
                           "nodes": ["rec1", "rec2"], "elapsed_seconds": 11}),
])
def test_parse_sacct_summary(slurm_output, fixture, expected):
    summary = slurm.parse_sacct(slurm_output(fixture))[1]
    assert {key: summary[key] for key in expected} == expected
    assert tuple(summary) == slurm.NORMALIZED_JOB_KEYS
    # slurmdbd keeps no job comments unless AccountingStoreFlags=job_comment: the field is empty.
    assert summary["comment"] is None


def test_parse_sacct_pending_and_running_fields(slurm_output):
    pending = slurm.parse_sacct(slurm_output("sacct_pending_begintime.txt"))[0][0]
    running = slurm.parse_sacct(slurm_output("sacct_running.txt"))[0][0]
    assert (pending["reason"], pending["start"], pending["end"], pending["job_id"]) == ("BeginTime", None, None, 5)
    assert (running["start"], running["end"], running["comment"], running["elapsed_seconds"]) == (
        "2026-12-02T14:36:30", None, None, 11)


def test_parse_sacct_keeps_pipes_in_the_comment():
    runs = slurm.parse_sacct("7|x|COMPLETED|0:0|00:00:01|n1|None|Unknown|Unknown|a|b\n")[0]
    assert runs[0]["comment"] == "a|b"


def test_parse_sacct_knows_no_run():
    assert slurm.parse_sacct("\n") == ([], None)
    assert slurm.parse_sacct("") == ([], None)  # what sacct -j prints for a job id it never saw


@pytest.mark.parametrize(("stdout", "message"), [
    ("1234|train|COMPLETED\n", "sacct line has 3 fields, expected 10"),
    ("1234|x|COMPLETED|0|00:00:01|n1|None|Unknown|Unknown|\n", "invalid exit code '0'"),
    ("1234|x|COMPLETED|0:0|soon|n1|None|Unknown|Unknown|\n", "invalid duration 'soon'"),
])
def test_parse_sacct_rejects_garbage(stdout, message):
    with pytest.raises(ValueError, match=message):
        slurm.parse_sacct(stdout)


# ---------------------------------------------------------------------------
# squeue and sinfo
# ---------------------------------------------------------------------------


def test_parse_squeue(slurm_output):
    # squeue lists pending jobs first, by priority, then running ones.
    assert slurm.parse_squeue(slurm_output("squeue_train_ddp.txt")) == [
        {"job_id": 5, "name": "train-ddp", "state": "PENDING", "reason": "BeginTime", "nodes": [],
         "comment": FINGERPRINT},
        {"job_id": 7, "name": "train-ddp", "state": "PENDING", "reason": "Resources", "nodes": [],
         "comment": FINGERPRINT},
        {"job_id": 6, "name": "train-ddp", "state": "PENDING", "reason": "JobHeldAdmin", "nodes": [],
         "comment": FINGERPRINT},
        {"job_id": 1, "name": "train-ddp", "state": "RUNNING", "reason": None, "nodes": ["rec1"],
         "comment": FINGERPRINT},
        {"job_id": 4, "name": "train-ddp", "state": "RUNNING", "reason": None, "nodes": ["rec1", "rec2"],
         "comment": FINGERPRINT},
    ]


def test_parse_squeue_spells_reasons_as_scontrol_does(slurm_output):
    # squeue prints "ReqNodeNotAvail, UnavailableNodes:rec2"; scontrol the same with '_' for each space.
    text = slurm_output("squeue_pending_reasons.txt")
    assert "|ReqNodeNotAvail, UnavailableNodes:rec2|" in text
    reasons = {job["job_id"]: job["reason"] for job in slurm.parse_squeue(text)}
    assert reasons == {5: "BeginTime", 16: slurm.parse_scontrol_job(slurm_output(
        "scontrol_show_job_pending_nodes_down.txt"))["reason"], 17: "Priority",
        18: "ReqNodeNotAvail,_UnavailableNodes:rec2", 6: "JobHeldAdmin", 8: None}
    assert reasons[16] == "Nodes_required_for_job_are_DOWN,_DRAINED_or_reserved_for_jobs_in_higher_priority_partitions"
    assert reasons[18] == slurm.parse_scontrol_job(slurm_output("scontrol_show_job_pending_reqnodenotavail.txt"))["reason"]


def test_parse_squeue_array_job_ids_stay_text():
    jobs = slurm.parse_squeue("1300_[2-4%2]|sweep|PENDING|JobArrayTaskLimit||(null)\n1300_1|sweep|RUNNING|None|n1|(null)\n")
    assert [job["job_id"] for job in jobs] == ["1300_[2-4%2]", "1300_1"]


@pytest.mark.parametrize("stdout", ["1234|train|RUNNING\n", "JOBID|NAME|STATE|REASON|NODELIST|COMMENT\n"])
def test_parse_squeue_rejects_garbage(stdout):
    with pytest.raises(slurm.SlurmParseError):
        slurm.parse_squeue(stdout)


def sinfo_node(state, markers=""):
    return {"partitions": ["gpu"], "state": state, "markers": markers, "cpus": 2, "gres": "gpu:2", "gpus": 2}


@pytest.mark.parametrize(("fixture", "rec1", "rec2"), [
    ("sinfo_nodes_busy.txt", sinfo_node("allocated"), sinfo_node("mixed")),
    ("sinfo_nodes_drained.txt", sinfo_node("mixed"), sinfo_node("drained")),
    ("sinfo_nodes_resumed.txt", sinfo_node("mixed"), sinfo_node("idle")),
    ("sinfo_nodes_draining.txt", sinfo_node("mixed"), sinfo_node("draining")),
    ("sinfo_nodes_not_responding.txt", sinfo_node("mixed"), sinfo_node("mixed", "*")),
    ("sinfo_nodes_down.txt", sinfo_node("idle"), sinfo_node("down", "*")),
])
def test_parse_sinfo_nodes(slurm_output, fixture, rec1, rec2):
    assert slurm.parse_sinfo_nodes(slurm_output(fixture)) == {"rec1": rec1, "rec2": rec2}


def test_parse_sinfo_lists_every_partition_of_a_node():
    # sinfo -N prints a node once per partition (the local cluster has one partition, so this is typed).
    stdout = "rec1|gpu*|mixed|2|gpu:2\nrec1|debug|mixed|2|gpu:2\ncpu01|cpu|idle|64|(null)\n"
    assert slurm.parse_sinfo_nodes(stdout) == {
        "rec1": {"partitions": ["gpu", "debug"], "state": "mixed", "markers": "", "cpus": 2, "gres": "gpu:2", "gpus": 2},
        "cpu01": {"partitions": ["cpu"], "state": "idle", "markers": "", "cpus": 64, "gres": None, "gpus": 0},
    }


# sinfo(1) NODE STATE CODES written out, not read from the constant under test, so that a marker
# dropped from it fails here instead of silently removing its case.
@pytest.mark.parametrize("marker", ["*", "~", "#", "!", "%", "$", "@", "^", "-", "+"])
def test_parse_sinfo_strips_every_state_marker(marker):
    nodes = slurm.parse_sinfo_nodes(f"n1|p|IDLE{marker}|4|(null)\n")
    assert (nodes["n1"]["state"], nodes["n1"]["markers"]) == ("idle", marker)


@pytest.mark.parametrize(("stdout", "message"), [
    ("n1|p|idle|4\n", "sinfo line has 4 fields, expected 5"),
    ("n1|p|idle|four|(null)\n", "sinfo: invalid CPU count 'four' for node n1"),
    ("n1|p|*|4|(null)\n", r"sinfo: invalid state '\*' for node n1"),
    ("n 1|p|idle|4|(null)\n", "invalid node name 'n 1'"),
])
def test_parse_sinfo_rejects_garbage(stdout, message):
    with pytest.raises(ValueError, match=message):
        slurm.parse_sinfo_nodes(stdout)


# ---------------------------------------------------------------------------
# Transient errors and retries
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("stderr", [
    "slurm_load_jobs error: Socket timed out on send/recv operation",
    "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)",
    "squeue: error: slurm_receive_msg: Zero Bytes were transmitted or received",
    "scancel: error: Kill job error on job id 12: Connection refused",
    "squeue: error: Transport endpoint is not connected",
    "scontrol: error: Slurm backup controller in standby mode",
    "sacct: error: slurmdbd: Connection refused",
    "sacct: error: Problem talking to the database: Connection refused",
    "sacct: error: Problem talking to database",
    "sbatch: error: Batch job submission failed: Resource temporarily unavailable",
])
def test_transient_errors(stderr):
    assert slurm.is_transient_error(1, stderr + "\n") is True


@pytest.mark.parametrize(("rc", "stderr"), [
    (1, "slurm_load_jobs error: Invalid job id specified"),
    (1, "sbatch: error: Batch job submission failed: Requested node configuration is not available"),
    (1, "sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified"),
    (1, ""),
    (0, "sbatch: error: Socket timed out on send/recv operation"),
])
def test_not_transient_errors(rc, stderr):
    assert slurm.is_transient_error(rc, stderr) is False


class ScriptedRun:
    """A stand-in for AnsibleModule.run_command answering from a list."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.calls = []

    def __call__(self, argv):
        self.calls.append(list(argv))
        return self.answers.pop(0)


TIMEOUT = (1, "", "slurm_load_jobs error: Socket timed out on send/recv operation\n")


def test_retry_command_retries_transient_errors_with_backoff():
    run = ScriptedRun([TIMEOUT, TIMEOUT, TIMEOUT, (0, "ok\n", "")])
    sleeps = []
    result = slurm.retry_command(run, ["squeue"], sleep=sleeps.append, jitter=0)
    assert result == (0, "ok\n", "")
    assert run.calls == [["squeue"]] * 4
    assert sleeps == [0.5, 1.0, 2.0]


def test_retry_command_gives_up_after_attempts_and_caps_the_delay():
    run = ScriptedRun([TIMEOUT] * 7)
    sleeps = []
    assert slurm.retry_command(run, ["squeue"], attempts=7, sleep=sleeps.append, jitter=0) == TIMEOUT
    assert sleeps == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]
    assert len(run.calls) == 7


def test_retry_command_does_not_retry_other_failures():
    failure = (1, "", "slurm_load_jobs error: Invalid job id specified\n")
    run = ScriptedRun([failure])
    sleeps = []
    assert slurm.retry_command(run, ["scontrol"], sleep=sleeps.append) == failure
    assert (len(run.calls), sleeps) == (1, [])


def test_retry_command_jitter_stays_small():
    run = ScriptedRun([TIMEOUT, TIMEOUT, (0, "", "")])
    sleeps = []
    slurm.retry_command(run, ["squeue"], sleep=sleeps.append, rng=lambda: 1.0)
    assert sleeps == [pytest.approx(0.55), pytest.approx(1.1)]


def test_retry_command_needs_an_attempt():
    with pytest.raises(ValueError, match="attempts must be at least 1, got 0"):
        slurm.retry_command(ScriptedRun([]), ["squeue"], attempts=0)


def test_backoff_delays():
    delays = slurm.backoff_delays(base_delay=1, max_delay=5, jitter=0)
    assert list(itertools.islice(delays, 5)) == [1, 2, 4, 5, 5]


def test_backoff_delays_by_default_start_at_half_a_second_and_are_at_most_a_tenth_longer():
    # rng at its largest value: each delay as long as the jitter makes it; 8 s is the cap.
    longest = slurm.backoff_delays(rng=lambda: 1.0)
    assert list(itertools.islice(longest, 6)) == pytest.approx([0.55, 1.1, 2.2, 4.4, 8.0, 8.0])
    assert list(itertools.islice(slurm.backoff_delays(rng=lambda: 0.0), 5)) == [0.5, 1, 2, 4, 8]


# ---------------------------------------------------------------------------
# Poll schedule
# ---------------------------------------------------------------------------


def test_poll_schedule_doubles_up_to_the_cap():
    assert list(itertools.islice(slurm.PollSchedule(1, 30), 8)) == [1, 2, 4, 8, 16, 30, 30, 30]
    # The defaults: a look after 1 s, at most every 30 s.
    assert list(itertools.islice(slurm.PollSchedule(), 7)) == [1, 2, 4, 8, 16, 30, 30]


def test_poll_schedule_starts_over_on_a_state_change():
    schedule = slurm.PollSchedule(minimum=2, maximum=60, factor=3)
    assert schedule.observe("PENDING") is False
    assert [next(schedule), next(schedule), next(schedule)] == [2, 6, 18]
    assert schedule.observe("PENDING") is False
    assert next(schedule) == 54
    assert schedule.observe("RUNNING") is True
    assert [next(schedule), next(schedule)] == [2, 6]


def test_poll_schedule_costs_few_queries_for_a_long_job():
    schedule = slurm.PollSchedule(1, 60)
    waited, polls = 0, 0
    while waited < 4 * 3600:
        waited += next(schedule)
        polls += 1
    assert polls == 6 + 239  # 1+2+4+8+16+32 s, then one a minute for the remaining 14337 s


@pytest.mark.parametrize(("minimum", "maximum", "factor"), [(0, 5, 2), (5, 1, 2), (1, 5, 0.5), (-1, 5, 2)])
def test_poll_schedule_rejects_bad_bounds(minimum, maximum, factor):
    with pytest.raises(ValueError, match="invalid poll schedule"):
        slurm.PollSchedule(minimum, maximum, factor)


def test_a_long_line_that_is_no_record_is_quoted_to_200_characters():
    line = "slurm_load_jobs error: " + "x" * 300
    with pytest.raises(slurm.SlurmParseError) as error:
        slurm.parse_scontrol_job(line + "\n")
    assert str(error.value) == f"not an 'scontrol show job -o' record: {line[:200]!r}"


def test_invalid_job_id_in_merged_output_is_job_not_found(slurm_output):
    # A caller that merged stderr into stdout (2>&1) is read the same.
    with pytest.raises(slurm.JobNotFound):
        slurm.parse_scontrol_jobs(slurm_output("scontrol_show_job_invalid_id.stderr"), "")


def test_parse_squeue_keeps_a_bar_inside_the_comment():
    [job] = slurm.parse_squeue("9|train|RUNNING|None|n1|fingerprint:0123456789abcdef a|b|c\n")
    assert job["comment"] == "fingerprint:0123456789abcdef a|b|c"


def test_retry_command_with_one_attempt_runs_once():
    run = ScriptedRun([TIMEOUT])
    assert slurm.retry_command(run, ["squeue"], attempts=1, sleep=pytest.fail) == TIMEOUT
    assert run.calls == [["squeue"]]


def test_poll_schedule_may_keep_one_interval():
    assert list(itertools.islice(slurm.PollSchedule(5, 5, factor=1), 3)) == [5, 5, 5]


def test_parse_sinfo_lists_each_partition_once_and_no_empty_one():
    # A node in no partition prints an empty %P; sinfo -N repeats a node per partition.
    nodes = slurm.parse_sinfo_nodes("n1||idle|4|(null)\nn2|gpu*|idle|4|(null)\nn2|gpu|idle|4|(null)\n")
    assert (nodes["n1"]["partitions"], nodes["n2"]["partitions"]) == ([], ["gpu"])


def test_parse_my_jobs_keeps_a_bar_inside_the_work_dir():
    # squeue -o '%i|%j|%T|%r|%N|%M|%Z' (22.05) prints the working directory last and as it is:
    # a user's own job started in a directory named with '|' is listed, its directory whole.
    [job] = slurm.parse_my_jobs("52|notebook|RUNNING|None|n1|12:01|/home/alice/a|b\n")
    assert (job["job_id"], job["elapsed"], job["work_dir"]) == (52, "12:01", "/home/alice/a|b")


def test_gpus_are_counted_after_another_gres_item():
    # A node's GRES need not start with its GPUs (slurm.conf `Gres=shard:8,gpu:2`, or an MPS or
    # NIC resource listed first): every gpu item still counts, wherever it stands.
    nodes = slurm.parse_sinfo_nodes("n1|gpu*|idle|64|shard:8,gpu:2\nn2|gpu*|idle|64|mps:200,gpu:a100:4(S:0)\n")
    assert (nodes["n1"]["gpus"], nodes["n2"]["gpus"]) == (2, 4)


@pytest.mark.parametrize(("task", "count"), [(3, 1), ("2-3", 2), ("0-9:2", 5), ("1,3-5", 4), ("7", 1)])
def test_an_array_task_entry_counts_the_tasks_it_stands_for(task, count):
    assert slurm.array_task_count(task) == count


def test_an_array_task_range_that_is_not_one_is_refused():
    with pytest.raises(slurm.SlurmParseError, match="invalid array task range 'x-1'"):
        slurm.array_task_count("x-1")


@pytest.mark.parametrize(("job_id", "array"), [(12, 12), ("12_3", 12), ("12_[4-7%2]", 12), ("12+1", None)])
def test_the_array_a_squeue_job_id_belongs_to(job_id, array):
    assert slurm.array_job_id(job_id) == array


def test_the_pending_tasks_of_an_array_are_one_entry_and_a_running_task_is_shown(slurm_output):
    job = slurm.parse_scontrol_job(slurm_output("scontrol_show_job_array_pending.txt"), "", array_job_id=5)
    assert [(task["task"], task["job_id"], task["state"]) for task in job["tasks"]] == [
        (0, 6, "RUNNING"), (1, 7, "RUNNING"), ("2-3", 5, "PENDING")]
    assert (job["job_id"], job["state"], job["log_task"], job["tasks_done"], job["tasks_total"]) == (5, "RUNNING", 0, 0, 4)
    # Without the array's id the records are several jobs, as before.
    with pytest.raises(slurm.SlurmParseError, match="expected one job record, got 3"):
        slurm.parse_scontrol_job(slurm_output("scontrol_show_job_array_pending.txt"))
