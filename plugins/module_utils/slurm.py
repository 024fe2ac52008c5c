"""Slurm client helpers shared by this project's Ansible modules.

Shipped to the managed hosts inside the modules that import it, so it uses the
standard library only and never imports Ansible.  Everything here is a pure
function of the text Slurm prints (or of its arguments), which keeps it
testable with recorded command output: 22.05's recorded on the local cluster,
23.02 to 25.11's derived from SchedMD's sources (tests/unit/fixtures/slurm/).
"""

from __future__ import annotations

import collections
import itertools
import random
import re
import time

# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------


class SlurmParseError(ValueError):
    """Slurm printed something this module does not understand."""


class JobNameMismatch(SlurmParseError):
    """A job record whose name is not the one squeue gave: renamed since (scontrol update)."""


class JobNotFound(LookupError):
    """slurmctld (or slurmdbd) does not know the job: it never existed or has aged out."""

    def __init__(self, job_id=None, detail=""):
        self.job_id = job_id
        what = "the job" if job_id is None else f"job {job_id}"
        super().__init__(f"Slurm does not know {what}" + (f": {detail}" if detail else ""))


class UnknownJobState(ValueError):
    """A job state missing from JOB_STATES; never taken for a success."""


# ---------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------

NODE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
# Not "." or "..": a job name is also a directory name (<jobs_dir>/<job_name>).
JOB_NAME_RE = re.compile(r"(?!\.\.?$)[A-Za-z0-9._-]{1,128}")

NODE_NAME_RULE = "1 to 63 letters, digits, '-', '_' or '.', starting with a letter or digit, without '..'"
JOB_NAME_RULE = "1 to 128 letters, digits, '-', '_' or '.', other than '.' and '..'"


def validate_node_name(name):
    """Return ``name`` if it is a valid Slurm node/host name, else raise ValueError."""
    # fullmatch, not match with '$': '$' also matches before a trailing newline.
    if not isinstance(name, str) or not NODE_NAME_RE.fullmatch(name) or ".." in name:
        raise ValueError(f"invalid node name {name!r}: a node name is {NODE_NAME_RULE}")
    return name


def validate_job_name(name):
    """Return ``name`` if it is a job name this project accepts, else raise ValueError.

    Slurm itself takes almost anything; the narrow set keeps names safe in file
    names (``%x`` in --output), log lines and squeue filters.
    """
    if not isinstance(name, str) or not JOB_NAME_RE.fullmatch(name):
        raise ValueError(f"invalid job name {name!r}: a job name is {JOB_NAME_RULE}")
    return name


# ---------------------------------------------------------------------------
# Hostlists
# ---------------------------------------------------------------------------

MAX_HOSTLIST_SIZE = 100000

_HOSTLIST_LITERAL_RE = re.compile(r"[A-Za-z0-9._-]*")
_RANGE_RE = re.compile(r"(\d+)(?:-(\d+))?")
_TRAILING_NUMBER_RE = re.compile(r"(.*?)(\d+)")


def _split_hostlist_items(text):
    """Split at the commas outside brackets; reject unbalanced or nested brackets."""
    items = []
    start = 0
    inside = False
    for position, char in enumerate(text):
        if char == "[":
            if inside:
                raise ValueError(f"invalid hostlist {text!r}: nested '[' at position {position}")
            inside = True
        elif char == "]":
            if not inside:
                raise ValueError(f"invalid hostlist {text!r}: unbalanced ']' at position {position}")
            inside = False
        elif char == "," and not inside:
            items.append(text[start:position])
            start = position + 1
    if inside:
        raise ValueError(f"invalid hostlist {text!r}: '[' is never closed")
    items.append(text[start:])
    return items


def _expand_bracket(text, group):
    """Numbers of one bracket group such as ``110-111,113``, keeping zero padding."""
    numbers = []
    for part in group.split(","):
        match = _RANGE_RE.fullmatch(part)
        if not match:
            raise ValueError(f"invalid hostlist {text!r}: bad range {part!r} in [{group}]")
        low_text, high_text = match.groups()
        low = int(low_text)
        high = low if high_text is None else int(high_text)
        if high < low:
            raise ValueError(f"invalid hostlist {text!r}: reversed range {part!r}")
        if high - low + 1 > MAX_HOSTLIST_SIZE:
            raise ValueError(f"invalid hostlist {text!r}: range {part!r} has more than {MAX_HOSTLIST_SIZE} hosts")
        # Slurm pads to the width of the low bound: node[08-10] -> node08..node10.
        width = len(low_text)
        numbers.extend(str(number).zfill(width) for number in range(low, high + 1))
    return numbers


def expand_hostlist(text):
    """Expand a Slurm hostlist expression into a list of host names.

    ``expand_hostlist("node[110-111,113],gpu[01-03]x")`` gives
    ``['node110', 'node111', 'node113', 'gpu01x', 'gpu02x', 'gpu03x']``.
    Several bracket groups in one item give every combination, the leftmost
    group varying slowest.  Order and duplicates are kept as written.
    """
    if not isinstance(text, str):
        raise TypeError(f"invalid hostlist {text!r}: not a string")
    text = text.strip()
    if not text:
        return []
    hosts = []
    for item in _split_hostlist_items(text):
        if not item:
            raise ValueError(f"invalid hostlist {text!r}: empty host name between commas")
        # re.split with a group puts the bracket contents at the odd indexes.
        pieces = re.split(r"\[([^\]]*)\]", item)
        choices = []
        for index, piece in enumerate(pieces):
            if index % 2:
                choices.append(_expand_bracket(text, piece))
            elif _HOSTLIST_LITERAL_RE.fullmatch(piece):
                choices.append([piece])
            else:
                raise ValueError(f"invalid hostlist {text!r}: bad characters in {item!r}")
        combinations = 1
        for choice in choices:
            combinations *= len(choice)
        if len(hosts) + combinations > MAX_HOSTLIST_SIZE:
            raise ValueError(f"invalid hostlist {text!r}: expands to more than {MAX_HOSTLIST_SIZE} hosts")
        hosts.extend("".join(parts) for parts in itertools.product(*choices))
    return hosts


def _compress_numbered(prefix, hosts):
    """``prefix[lo-hi,...]`` for hosts given as (number, digits as written)."""
    ordered = sorted(hosts, key=lambda host: (host[0], len(host[1])))
    if len(ordered) == 1:
        return prefix + ordered[0][1]
    ranges = []  # [low, high, width]
    for number, digits in ordered:
        if ranges:
            last = ranges[-1]
            # Extend only when the padding agrees: node9,node10 join; node1,node01 do not.
            if number == last[1] + 1 and str(number).zfill(last[2]) == digits:
                last[1] = number
                continue
        ranges.append([number, number, len(digits)])
    parts = [
        str(low).zfill(width) if low == high else f"{str(low).zfill(width)}-{str(high).zfill(width)}"
        for low, high, width in ranges
    ]
    return f"{prefix}[{','.join(parts)}]"


def compress_hostlist(names):
    """Compress host names into Slurm's ranged form: ``node[110-111,113]``.

    As in Slurm, only a trailing number is ranged (``gpu01x`` stays as it is),
    hosts are sorted and de-duplicated, and zero padding is kept
    (``node08,node09,node10`` -> ``node[08-10]``).
    """
    plain = set()
    numbered = collections.defaultdict(set)
    for name in names:
        validate_node_name(name)
        match = _TRAILING_NUMBER_RE.fullmatch(name)
        if match:
            numbered[match.group(1)].add((int(match.group(2)), match.group(2)))
        else:
            plain.add(name)
    pieces = []
    for prefix in sorted(plain | set(numbered)):
        if prefix in plain:
            pieces.append(prefix)
        if prefix in numbered:
            pieces.append(_compress_numbered(prefix, numbered[prefix]))
    return ",".join(pieces)


# ---------------------------------------------------------------------------
# Job states
# ---------------------------------------------------------------------------

JobStateInfo = collections.namedtuple("JobStateInfo", "final success outcome description")

# Every state job_state_string() prints in Slurm 22.05 to 25.11 (squeue(1), JOB
# STATE CODES).  The flag states Slurm shows instead of the base state (COMPLETING,
# REQUEUED, ...) are not final: the job moves on by itself or waits for an
# operator.
JOB_STATES = {
    "BOOT_FAIL": JobStateInfo(True, False, "node_failure", "terminated because its nodes failed to boot"),
    "CANCELLED": JobStateInfo(True, False, "cancelled", "cancelled by the user or an administrator"),
    "COMPLETED": JobStateInfo(True, True, "succeeded", "every process on every node exited with code 0"),
    "CONFIGURING": JobStateInfo(False, False, "waiting", "allocated; waiting for its nodes to become ready"),
    "COMPLETING": JobStateInfo(False, False, "finishing", "processes ending; the epilog may still run"),
    "DEADLINE": JobStateInfo(True, False, "timeout", "terminated on reaching its --deadline"),
    "FAILED": JobStateInfo(True, False, "failed", "terminated with a non-zero exit code or another failure"),
    "NODE_FAIL": JobStateInfo(True, False, "node_failure", "terminated because an allocated node failed"),
    "OUT_OF_MEMORY": JobStateInfo(True, False, "out_of_memory", "killed after running out of memory"),
    "PENDING": JobStateInfo(False, False, "waiting", "waiting for a resource allocation"),
    "PREEMPTED": JobStateInfo(True, False, "preempted", "terminated by preemption"),
    "RUNNING": JobStateInfo(False, False, "running", "running on its allocation"),
    "RESV_DEL_HOLD": JobStateInfo(False, False, "held", "held because its reservation was deleted"),
    # 25.11: a job of --requeue=expedite being checked for its expedited requeue.
    "EXPEDITING": JobStateInfo(False, False, "requeued", "checked for an expedited requeue; it may run again at once"),
    "REQUEUE_FED": JobStateInfo(False, False, "requeued", "being requeued by the federation"),
    "REQUEUE_HOLD": JobStateInfo(False, False, "held", "requeued and held until 'scontrol release'"),
    "REQUEUED": JobStateInfo(False, False, "requeued", "being requeued; it will run again"),
    "RESIZING": JobStateInfo(False, False, "running", "about to change size"),
    "REVOKED": JobStateInfo(True, False, "revoked", "federation sibling removed: another cluster runs it"),
    "SIGNALING": JobStateInfo(False, False, "running", "being signaled"),
    "SPECIAL_EXIT": JobStateInfo(False, False, "held", "requeued and held after a special exit code"),
    "STAGE_OUT": JobStateInfo(False, False, "finishing", "staging out files"),
    "STOPPED": JobStateInfo(False, False, "suspended", "stopped with SIGSTOP; keeps its CPUs"),
    "SUSPENDED": JobStateInfo(False, False, "suspended", "suspended; its CPUs were released"),
    "TIMEOUT": JobStateInfo(True, False, "timeout", "terminated on reaching its time limit"),
}


def normalize_state(raw):
    """Base state of what Slurm printed: ``'CANCELLED by 1000'`` -> ``'CANCELLED'``."""
    words = raw.split() if isinstance(raw, str) else []
    if not words:
        raise SlurmParseError(f"empty job state {raw!r}")
    # sacct marks a truncated value with '+'.
    return words[0].rstrip("+").upper()


def job_state(state):
    """JobStateInfo of a state as Slurm printed it; UnknownJobState when it is unknown."""
    base = normalize_state(state)
    if base not in JOB_STATES:
        raise UnknownJobState(f"unknown Slurm job state {state!r}; known states: {', '.join(sorted(JOB_STATES))}")
    return JOB_STATES[base]


def is_final(state):
    """True when the job will not change state by itself any more."""
    return job_state(state).final


def outcome(state):
    """One word for what the state means to the user (see JOB_STATES)."""
    return job_state(state).outcome


# ---------------------------------------------------------------------------
# Durations
# ---------------------------------------------------------------------------

_NO_DURATION = {"UNLIMITED", "INVALID", "PARTITION_LIMIT", "N/A", "NONE"}
_DURATION_RE = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?")


def parse_duration(text):
    """Seconds of a Slurm duration; None for UNLIMITED, INVALID and the like.

    Takes what Slurm prints: ``[D-]HH:MM:SS``, ``MM:SS`` (squeue, sacct) and
    the day forms ``D-HH`` and ``D-HH:MM``.
    """
    if not isinstance(text, str):
        raise TypeError(f"invalid duration {text!r}: not a string")
    value = text.strip()
    if value.upper() in _NO_DURATION:
        return None
    match = _DURATION_RE.fullmatch(value)
    if not match or (match.group(1) is None and match.group(3) is None):
        raise ValueError(f"invalid duration {text!r}: expected [D-]HH:MM:SS or MM:SS")
    days, first, second, third = (None if group is None else int(group) for group in match.groups())
    if days is not None:
        hours, minutes, seconds = first, second or 0, third or 0
        bounded = ((hours, 24), (minutes, 60), (seconds, 60))
    elif third is not None:
        hours, minutes, seconds = first, second, third
        bounded = ((minutes, 60), (seconds, 60))
    else:
        hours, minutes, seconds = 0, first, second
        bounded = ((seconds, 60),)
    if any(field >= limit for field, limit in bounded):
        raise ValueError(f"invalid duration {text!r}: a field is out of range")
    return (((days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds


def format_duration(seconds):
    """Slurm's form of a duration: ``1-02:03:04``, ``00:05:00``; None -> ``UNLIMITED``."""
    if seconds is None:
        return "UNLIMITED"
    seconds = int(seconds)
    if seconds < 0:
        raise ValueError(f"invalid duration {seconds!r}: negative")
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    clock = f"{hours:02d}:{minutes:02d}:{seconds:02d}"
    return f"{days}-{clock}" if days else clock


# ---------------------------------------------------------------------------
# Parsers
# ---------------------------------------------------------------------------

# The normalized view of a job that parse_scontrol_job() and parse_sacct() return.
NORMALIZED_JOB_KEYS = (
    "job_id", "name", "state", "reason", "exit_code", "exit_signal", "restarts", "nodes",
    "batch_host", "elapsed_seconds", "stdout_path", "stderr_path", "partition", "comment",
)

_NULL_VALUES = {"", "(null)", "None", "N/A"}


def _optional(value):
    """None for Slurm's spellings of "nothing", else the value."""
    return None if value is None or value.strip() in _NULL_VALUES else value


def _nodes(value):
    """Expanded node list; empty for "(null)" and for sacct's "None assigned"."""
    if _optional(value) is None or value.strip() == "None assigned":
        return []
    return expand_hostlist(value)


def _job_id(text):
    """int for a plain job id; array and het job ids (``12_3``, ``12_[1-4]``, ``12+1``) stay text."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    if re.fullmatch(r"\d+[_+][0-9\[\]%,-]+", text):
        return text
    raise SlurmParseError(f"invalid job id {text!r}")


def _exit_code(text):
    """(exit code, signal) of ``2:0``."""
    match = re.fullmatch(r"(\d+):(\d+)", text.strip())
    if not match:
        raise SlurmParseError(f"invalid exit code {text!r}: expected CODE:SIGNAL")
    return int(match.group(1)), int(match.group(2))


def _data_lines(text):
    return [line for line in (text or "").splitlines() if line.strip()]


def parse_sbatch_parsable(stdout):
    """(job id, cluster or None) from ``sbatch --parsable``: ``1234`` or ``1234;cluster``."""
    lines = _data_lines(stdout)
    match = re.fullmatch(r"(\d+)(?:;([A-Za-z0-9._-]+))?", lines[0].strip()) if len(lines) == 1 else None
    if not match:
        raise SlurmParseError(f"sbatch --parsable printed {stdout!r}; expected JOBID or JOBID;CLUSTER")
    return int(match.group(1)), match.group(2)


# src/api/allocate.c, slurm_job_will_run(): up to 24.11 "Job %u to start at %s using %u
# processors on nodes %s in partition %s"; from 25.05 "Job %u to start at %s%s%s a using ...",
# the middle %s%s being " on cluster " and the name when there is one (the " a" is in
# SchedMD's format).  The hetjob form has no "nodes " and no partition.
_TEST_ONLY_RE = re.compile(
    r"Job (?P<job_id>\d+) to start at (?P<start>\S+)"
    r"(?: on cluster (?P<cluster>\S+))?"
    r"(?: a)? using (?P<processors>\d+) processors on (?:nodes )?(?P<nodes>\S+)"
    r"(?: in partition (?P<partition>\S+))?"
)


def parse_sbatch_test_only(stderr):
    """The prediction ``sbatch --test-only`` prints on stderr.

    ``sbatch: Job 12 to start at 2026-12-02T13:40:01 using 16 processors on
    nodes node[110-111] in partition gpu_A6000`` gives ``{'job_id': 12,
    'start': '2026-12-02T13:40:01', 'processors': 16, 'nodes': ['node110',
    'node111'], 'partition': 'gpu_A6000', 'cluster': None}``.
    """
    for line in _data_lines(stderr):
        match = _TEST_ONLY_RE.search(line)
        if match:
            return {
                "job_id": int(match.group("job_id")),
                "start": match.group("start"),
                "processors": int(match.group("processors")),
                "nodes": expand_hostlist(match.group("nodes")),
                "partition": match.group("partition"),
                "cluster": match.group("cluster"),
            }
    raise SlurmParseError(f"sbatch --test-only printed no prediction: {stderr!r}")


# Keys that slurm_sprint_job_info() (src/api/job_info.c, 22.05 to 24.05; from 24.11
# _sprint_job_info() in src/scontrol/info_job.c) prints, up to 25.11.  Knowing them lets
# the splitter take a new key only where it cannot be part of a value that may hold
# spaces: later versions print new keys right after free text (Extra after Comment,
# SegmentSize after StdOut, SubmitLine after Command), which without them would be
# read as part of that text.
SCONTROL_JOB_KEYS = frozenset((
    "JobId", "ArrayJobId", "ArrayTaskId", "ArrayTaskThrottle", "HetJobId", "HetJobOffset",
    "JobName", "HetJobIdSet", "UserId", "GroupId", "MCS_label", "Priority", "Nice", "Account",
    "QOS", "WCKey", "JobState", "Reason", "Dependency", "Requeue", "Restarts", "BatchFlag",
    "Reboot", "ExitCode", "DerivedExitCode", "RunTime", "TimeLimit", "TimeMin", "SubmitTime",
    "EligibleTime", "AccrueTime", "ResizeTime", "StartTime", "EndTime", "Deadline", "CronJob",
    "CrontabSpec", "PreemptEligibleTime", "PreemptTime", "SuspendTime", "SecsPreSuspend",
    "LastSchedEval", "Scheduler", "Partition", "AllocNode:Sid", "ReqNodeList", "ExcNodeList",
    "NodeList", "SchedNodeList", "BatchFeatures", "BatchHost", "FedOrigin", "FedViableSiblings",
    "FedActiveSiblings", "NumNodes", "NumCPUs", "NumTasks", "CPUs/Task", "ReqB:S:C:T", "TRES",
    "Socks/Node", "NtasksPerN:B:S:C", "CoreSpec", "ThreadSpec", "JOB_GRES", "Nodes", "CPU_IDs",
    "Mem", "GRES", "MinCPUsNode", "MinMemoryNode", "MinMemoryCPU", "MinTmpDiskNode", "Features",
    "DelayBoot", "ClusterFeatures", "Prefer", "Reservation", "OverSubscribe", "Contiguous",
    "Licenses", "Network", "Command", "WorkDir", "AdminComment", "SystemComment", "Comment",
    "StdErr", "StdIn", "StdOut", "Switches", "BurstBuffer", "BurstBufferState", "CpuFreqMin",
    "CpuFreqMax", "CpuFreqGov", "Power", "GresEnforceBind", "KillOInInvalidDependent",
    "SpreadJob", "CpusPerTres", "MemPerTres", "TresBind", "TresFreq", "TresPerJob",
    "TresPerNode", "TresPerSocket", "TresPerTask", "MailUser", "MailType", "NtasksPerTRES",
    "Container", "SELinuxContext",
    # 23.02
    "FailedNode", "ReqTRES", "AllocTRES", "Extra", "ContainerID",
    # 23.11
    "GresAllowTaskSharing", "GresOneTaskPerSharing",
    # 24.05 (and Power= no longer printed)
    "StepMgrEnabled", "ResvPorts",
    # 24.11 (MinMemoryTRES for a job of --mem-per-gpu)
    "OOMKillStep", "MinMemoryTRES",
    # 25.05
    "LicensesAlloc", "SegmentSize", "SpreadSegments", "ConsolidateSegments",
    # 25.11 (KillOInInvalidDependent is spelt KillOnInvalidDependent from here)
    "SLUID", "SubmitLine", "KillOnInvalidDependent", "ExpeditedRequeue",
))
# Values printed verbatim: they may hold spaces and "Word=" text.
_FREE_TEXT_KEYS = frozenset((
    "JobName", "Command", "WorkDir", "StdErr", "StdIn", "StdOut", "Comment", "AdminComment", "SystemComment",
    "Extra", "SubmitLine",
))
# Printed once per node group by 'scontrol -d', so seeing them again is normal.
_REPEATED_KEYS = frozenset(("Nodes", "CPU_IDs", "Mem", "GRES"))
_KEY_CANDIDATE_RE = re.compile(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_:/]*)=")
INVALID_JOB_ID = "Invalid job id specified"  # scontrol and scancel say so for unknown jobs


def _masked_job_name(line, job_name):
    """``line`` with the value of its JobName blanked out, so that no ``Word=`` text of the name
    is taken for a field; the name must be exactly ``job_name``, as squeue gave it. A name with
    '=' is blanked out wherever it occurs after that too: 25.11 prints it again in SubmitLine."""
    start = line.find(" JobName=")
    end = start + len(" JobName=") + len(job_name)
    if start < 0 or line[end - len(job_name):end] != job_name or line[end:end + 1] not in ("", " "):
        raise JobNameMismatch(f"the job's name in {line[:200]!r} is not {job_name!r}, the name squeue gave "
                              "(renamed since?)")
    blank = "_" * len(job_name)
    rest = line[end:].replace(job_name, blank) if "=" in job_name else line[end:]
    return line[:end - len(job_name)] + blank + rest


def _split_scontrol_record(line, job_name=None):
    """Key=Value pairs of one ``scontrol show job -o`` line. ``job_name``: the job's exact name
    (JOB_IDENTITY_FORMAT), for a job whose name its user chose: JobName is free text printed
    before UserId, and a name such as ``x UserId=alice(2001) StdOut=...`` would otherwise be read
    as those fields."""
    boundaries = []
    seen = set()
    previous_key = None
    scanned = line if job_name is None else _masked_job_name(line, job_name)
    for match in _KEY_CANDIDATE_RE.finditer(scanned):
        key = match.group(1)
        inside_free_text = previous_key in _FREE_TEXT_KEYS
        if key in SCONTROL_JOB_KEYS:
            # A known key met again right after free text belongs to that text.
            accept = not (inside_free_text and key in seen and key not in _REPEATED_KEYS)
        else:
            # Keys of later Slurm versions are CapitalizedWords, never inside free text.
            accept = key[0].isupper() and not inside_free_text
        if accept:
            boundaries.append(match)
            seen.add(key)
            previous_key = key
    if not boundaries or boundaries[0].start() != 0 or boundaries[0].group(1) != "JobId":
        raise SlurmParseError(f"not an 'scontrol show job -o' record: {line[:200]!r}")
    fields = {}
    for current, following in zip(boundaries, boundaries[1:] + [None]):
        end = len(line) if following is None else following.start()
        fields[current.group(1)] = line[current.end():end].strip()
    return fields


def _scontrol_summary(fields):
    for required in ("JobId", "JobState", "ExitCode"):
        if required not in fields:
            raise SlurmParseError(f"scontrol job record without {required}: {fields!r}")
    exit_code, exit_signal = _exit_code(fields["ExitCode"])
    restarts = fields.get("Restarts", "0")
    if not restarts.isdigit():
        raise SlurmParseError(f"invalid Restarts={restarts!r}")
    return {
        "job_id": _job_id(fields["JobId"]),
        "name": fields.get("JobName"),
        "state": normalize_state(fields["JobState"]),
        "reason": _optional(fields.get("Reason")),
        "exit_code": exit_code,
        "exit_signal": exit_signal,
        "restarts": int(restarts),
        "nodes": _nodes(fields.get("NodeList")),
        "batch_host": _optional(fields.get("BatchHost")),
        "elapsed_seconds": parse_duration(fields["RunTime"]) if "RunTime" in fields else None,
        "stdout_path": _optional(fields.get("StdOut")),
        "stderr_path": _optional(fields.get("StdErr")),
        "partition": _optional(fields.get("Partition")),
        "comment": _optional(fields.get("Comment")),
    }


def parse_scontrol_jobs(stdout, stderr="", job_name=None):
    """Every record of ``scontrol show job -o``: its raw Key=Value fields plus NORMALIZED_JOB_KEYS.
    ``job_name``: the job's exact name, as _split_scontrol_record() takes it."""
    if INVALID_JOB_ID in (stdout or "") or INVALID_JOB_ID in (stderr or ""):
        raise JobNotFound(detail=INVALID_JOB_ID)
    records = []
    for line in _data_lines(stdout):
        fields = _split_scontrol_record(line.strip(), job_name)
        records.append({**fields, **_scontrol_summary(fields)})
    if not records:
        raise SlurmParseError(f"scontrol show job printed no job record (stderr: {stderr!r})")
    return records


def parse_scontrol_job(stdout, stderr="", array_job_id=None, job_name=None):
    """The one job of ``scontrol show job -o JOBID``.

    With ``array_job_id`` (the JOBID asked about), the records of that job
    array are one job (array_summary(): its tasks in ``tasks``).  With
    ``job_name`` (parse_job_identity()), the JobName is taken as exactly that.
    Raises JobNotFound for "slurm_load_jobs error: Invalid job id specified"
    and SlurmParseError for anything else but exactly one record
    (heterogeneous jobs print one per component).
    """
    records = parse_scontrol_jobs(stdout, stderr, job_name)
    tasks = array_tasks_of_scontrol(records, array_job_id)
    if tasks is not None:
        # The raw fields (UserId, ...) are the same for every task of the array.
        return {**records[0], **array_summary(array_job_id, tasks)}
    if len(records) != 1:
        job_ids = [record["job_id"] for record in records]
        raise SlurmParseError(f"expected one job record, got {len(records)} (job ids {job_ids})")
    return records[0]


# Job arrays (sbatch --array). ``scontrol show job -o ARRAY_JOB_ID`` prints one record per task
# that has started (its own JobId, ArrayJobId=ARRAY_JOB_ID, ArrayTaskId=N) and one for the tasks
# still pending together (ArrayTaskId=2-3%2, the %2 being the throttle), which keeps the array's
# JobId; sacct names them ARRAY_JOB_ID_N and ARRAY_JOB_ID_[2-3%2].
ARRAY_TASK_KEYS = ("job_id", "state", "reason", "exit_code", "exit_signal", "restarts", "nodes",
                   "elapsed_seconds", "stdout_path")
_TASK_RANGE_RE = re.compile(r"(\d+)(?:-(\d+)(?::(\d+))?)?")


def _array_task(text):
    """A task id (int), or the text of tasks pending together ("2-3%2" -> "2-3")."""
    text = text.strip().strip("[]").split("%", 1)[0]
    return int(text) if text.isdigit() else text


def array_task_count(task):
    """How many tasks a task entry stands for: 1 for a task id, the size of a range ("2-5,7", "0-9:2")."""
    if isinstance(task, int):
        return 1
    count = 0
    for item in str(task).split(","):
        match = _TASK_RANGE_RE.fullmatch(item)
        if not match:
            raise SlurmParseError(f"invalid array task range {task!r}")
        first, last, step = int(match.group(1)), int(match.group(2) or match.group(1)), int(match.group(3) or 1)
        count += len(range(first, last + 1, step))
    return count


def _task_order(task):
    return int(_TASK_RANGE_RE.match(str(task["task"])).group(1))


def array_tasks_of_scontrol(records, array_job_id):
    """The tasks of the array ``array_job_id`` in parse_scontrol_jobs() records, by task id; None when
    the records are not that array's (a plain job, or one task of an array asked for by its own id)."""
    if array_job_id is None or any(record.get("ArrayJobId") != str(array_job_id) for record in records):
        return None
    tasks = [{"task": _array_task(record.get("ArrayTaskId", "")), **{key: record[key] for key in ARRAY_TASK_KEYS}}
             for record in records]
    return sorted(tasks, key=_task_order)


def array_tasks_of_sacct(runs, array_job_id):
    """The tasks of the array ``array_job_id`` in parse_sacct() runs (``-D``: a requeued task has a
    line per run), by task id; None when the runs are not that array's."""
    prefix = f"{array_job_id}_"
    if not runs or any(not str(run["job_id"]).startswith(prefix) for run in runs):
        return None
    by_task = {}
    for run in runs:
        by_task.setdefault(str(run["job_id"])[len(prefix):], []).append(run)
    tasks = []
    for task, task_runs in by_task.items():
        last = task_runs[-1]
        tasks.append({"task": _array_task(task), "job_id": None, "restarts": len(task_runs) - 1,
                      "stdout_path": last.get("stdout_path"), "work_dir": last.get("work_dir"),
                      **{key: last[key] for key in ("state", "reason", "exit_code", "exit_signal", "nodes",
                                                    "elapsed_seconds")}})
    return sorted(tasks, key=_task_order)


def array_summary(array_job_id, tasks):
    """The array as one job: final when every task is; then COMPLETED only if every task completed,
    else the state, exit code and log of its first task that did not. While tasks are left, the
    state of a running task (or the first waiting one). Restarts add up; ``tasks_done`` counts the
    final tasks, ``tasks_total`` all of them; ``log_task`` is the task shown."""
    active = [task for task in tasks if not job_state(task["state"]).final]
    if active:
        shown = next((task for task in active if task["state"] == "RUNNING"), active[0])
    else:
        shown = next((task for task in tasks if task["state"] != "COMPLETED"), tasks[0])
    return {
        "job_id": array_job_id,
        **{key: shown[key] for key in ("state", "reason", "exit_code", "exit_signal", "stdout_path")},
        "stderr_path": shown["stdout_path"],
        "log_task": shown["task"],  # whose state and log these are
        "restarts": sum(task["restarts"] for task in tasks),
        "nodes": sorted({node for task in tasks for node in task["nodes"]}),
        "elapsed_seconds": max(task["elapsed_seconds"] or 0 for task in tasks),
        "tasks": tasks,
        "tasks_done": sum(array_task_count(task["task"]) for task in tasks if task not in active),
        "tasks_total": sum(array_task_count(task["task"]) for task in tasks),
    }


def array_job_id(job_id):
    """The array a job id as squeue prints it belongs to (``5_0``, ``5_[2-3%2]`` -> 5); a plain job id
    is its own; None for a component of a heterogeneous job (``12+1``)."""
    if isinstance(job_id, int):
        return job_id
    match = re.fullmatch(r"(\d+)_.+", str(job_id))
    return int(match.group(1)) if match else None


SACCT_FIELDS = ("JobID", "JobName", "State", "ExitCode", "Elapsed", "NodeList", "Reason", "Start", "End", "Comment")
SACCT_FORMAT = ",".join(SACCT_FIELDS)
# sacct prints StdOut and StdErr from 24.05 (src/sacct/sacct.c fields[]); an older sacct
# answers 'Invalid field requested: "StdOut"' and exits 1 (src/sacct/options.c), and does
# not know --expand-patterns, without which the fields are the patterns as given (%x-%j.out).
SACCT_STDIO_SINCE = (24, 5)
_SLURM_VERSION_RE = re.compile(r"\S+ (\d+)\.(\d+)\.(\d+)")


def parse_slurm_version(stdout):
    """(major, minor, micro) of what a Slurm command's ``--version`` prints.

    ``print_slurm_version()`` (src/common/proc_args.c) prints ``PACKAGE_NAME
    SLURM_VERSION_STRING``: ``slurm 24.05.8`` as SchedMD builds it,
    ``slurm-wlm 22.05.8`` in Debian's packages.
    """
    lines = _data_lines(stdout)
    match = _SLURM_VERSION_RE.fullmatch(lines[0].strip()) if len(lines) == 1 else None
    if not match:
        raise SlurmParseError(f"--version printed {stdout!r}; expected 'slurm MAJOR.MINOR.MICRO'")
    return tuple(int(part) for part in match.groups())


def sacct_query(version):
    """(options, fields) that sacct of this Slurm version takes for parse_sacct().

    Every version gets WorkDir (the job's directory); from 24.05 also StdErr and
    StdOut, expanded.  Comment stays last, so that a '|' in it stays there.
    """
    fields = SACCT_FIELDS[:-1] + ("WorkDir",)
    options = []
    if tuple(version) >= SACCT_STDIO_SINCE:
        fields += ("StdErr", "StdOut")
        options.append("--expand-patterns")
    return options, fields + ("Comment",)


def parse_sacct(stdout, fields=SACCT_FIELDS):
    """Runs of a job from ``sacct -n -P -D -X -o FIELDS``, oldest first, and a summary.

    ``fields`` are those asked for: SACCT_FIELDS, or what sacct_query() gives,
    which adds ``work_dir`` to each run and, from 24.05, ``stdout_path`` and
    ``stderr_path``.  ``-D`` prints one line per run of a requeued job.
    Returns ``(runs, summary)``: summary has the NORMALIZED_JOB_KEYS of the last
    run, with ``restarts`` = number of runs - 1 and None for what sacct does
    not tell; it is None when sacct knows no run.
    """
    if fields[-1] != "Comment":
        raise ValueError(f"sacct fields {fields!r}: Comment must come last")
    runs = []
    for line in _data_lines(stdout):
        # Comment is the last field, so a '|' inside it stays there.
        values = line.split("|", len(fields) - 1)
        if len(values) != len(fields):
            raise SlurmParseError(f"sacct line has {len(values)} fields, expected {len(fields)}: {line!r}")
        row = dict(zip(fields, values))
        exit_code, exit_signal = _exit_code(row["ExitCode"])
        run = {
            "job_id": _job_id(row["JobID"]),
            "name": row["JobName"],
            "state": normalize_state(row["State"]),
            "reason": _optional(row["Reason"]),
            "exit_code": exit_code,
            "exit_signal": exit_signal,
            "nodes": _nodes(row["NodeList"]),
            "elapsed_seconds": parse_duration(row["Elapsed"]),
            "start": None if row["Start"] in ("Unknown", "None") else row["Start"],
            "end": None if row["End"] in ("Unknown", "None") else row["End"],
            "comment": _optional(row["Comment"]),
        }
        for field, key in (("WorkDir", "work_dir"), ("StdOut", "stdout_path"), ("StdErr", "stderr_path")):
            if field in row:
                run[key] = _optional(row[field])
        runs.append(run)
    if not runs:
        return [], None
    summary = dict.fromkeys(NORMALIZED_JOB_KEYS)
    summary.update((key, value) for key, value in runs[-1].items() if key in summary)
    summary["restarts"] = len(runs) - 1
    return runs, summary


SQUEUE_FORMAT = "%i|%j|%T|%r|%N|%k"
# Who owns a job and its exact name, from fields its user cannot shape: %U is the numeric user
# id slurmctld took from the submitter's credential, printed first, so that whatever the name
# holds (spaces, '|', 'UserId=alice(2001)') is after it.
JOB_IDENTITY_FORMAT = "%U|%j"


def parse_job_identity(stdout):
    """(uid, name) of one job from ``squeue -h -t all -j JOBID -o JOB_IDENTITY_FORMAT`` (a line per
    task of an array, all alike); None when squeue lists none. A name that holds a line break
    cannot be told from a second line, and is refused."""
    lines = _data_lines(stdout)
    if not lines:
        return None
    match = re.fullmatch(r"(\d+)\|(.*)", lines[0])
    if not match or any(line != lines[0] for line in lines[1:]):
        raise SlurmParseError(f"squeue printed {stdout[:300]!r} for one job: expected 'UID|NAME' lines, all alike "
                              "(a job name with a line break cannot be read)")
    return int(match.group(1)), match.group(2)


def parse_accounting_uid(stdout):
    """The uid of ``sacct -n -P -X -o UID -j JOBID`` (a line per run or task, all alike); None when
    sacct lists none."""
    uids = {line.strip() for line in _data_lines(stdout)}
    if not uids:
        return None
    if len(uids) != 1 or not next(iter(uids)).isdigit():
        raise SlurmParseError(f"sacct printed {stdout[:300]!r} for the UID of one job")
    return int(uids.pop())


def _scontrol_reason(reason):
    """A reason as ``scontrol show job`` spells it: each white-space character becomes '_'.

    squeue's ``%r`` prints the reason as slurmctld has it
    (``ReqNodeNotAvail, UnavailableNodes:rec2``); scontrol, whose one-line
    records are split at spaces, prints ``ReqNodeNotAvail,_UnavailableNodes:rec2``.
    """
    return None if reason is None else re.sub(r"\s", "_", reason.strip())


def parse_squeue(stdout):
    """Jobs of ``squeue -h -o SQUEUE_FORMAT``: job_id, name, state, reason, nodes, comment.

    ``reason`` is spelt as parse_scontrol_job() gives it, so that the two compare.
    """
    jobs = []
    for line in _data_lines(stdout):
        # Comment is the last field, so a '|' inside it stays there.
        values = line.split("|", 5)
        if len(values) != 6:
            raise SlurmParseError(f"squeue line has {len(values)} fields, expected 6: {line!r}")
        job_id, name, state, reason, nodes, comment = values
        jobs.append({
            "job_id": _job_id(job_id),
            "name": name,
            "state": normalize_state(state),
            "reason": _scontrol_reason(_optional(reason)),
            "nodes": _nodes(nodes),
            "comment": _optional(comment),
        })
    return jobs


# A user's jobs as jobs.yml lists them: squeue's elapsed time (%M) and working directory (%Z) too.
MY_JOBS_FORMAT = "%i|%j|%T|%r|%N|%M|%Z"


def parse_my_jobs(stdout):
    """Jobs of ``squeue -h -o MY_JOBS_FORMAT``: job_id, name, state, reason, nodes (Slurm's
    hostlist, as given), elapsed (as squeue prints it: ``1-02:03:04``, ``3:04``), work_dir."""
    jobs = []
    for line in _data_lines(stdout):
        # The working directory is the last field, so a '|' inside it stays there.
        values = line.split("|", 6)
        if len(values) != 7:
            raise SlurmParseError(f"squeue line has {len(values)} fields, expected 7: {line!r}")
        job_id, name, state, reason, nodes, elapsed, work_dir = values
        jobs.append({
            "job_id": _job_id(job_id),
            "name": name,
            "state": normalize_state(state),
            "reason": _scontrol_reason(_optional(reason)),
            "nodes": _optional(nodes) or "",
            "elapsed": elapsed.strip(),
            "work_dir": _optional(work_dir),
        })
    return jobs


SINFO_NODES_FORMAT = "%N|%P|%T|%c|%G"
# sinfo(1) NODE STATE CODES: the flags sinfo appends to a node's state, and what each means
# to a job submitted now.
NODE_STATE_MARKERS = {
    "*": "is not responding (slurmd does not answer the controller)",
    "~": "is powered down: Slurm powers it up on submit, allow its ResumeTimeout",
    "#": "is powering up: the job starts once it has booted",
    "!": "is about to power down: Slurm powers it up again for the job",
    "%": "is powering down: Slurm powers it up again for the job, after its SuspendTimeout",
    "$": "is in a maintenance reservation: the job waits until the reservation ends",
    "@": "has a reboot pending: the job starts after the reboot",
    "^": "is rebooting: the job starts once it is back",
    "-": "is planned by the backfill scheduler for a waiting job: this job may wait for it",
    "+": "is in more states than one",
}
# Base states in which Slurm will not start a job until an administrator acts: a launch
# refuses these. Every other state only delays the job (or not at all): it passes with a note.
NODE_REFUSED_STATES = {
    "down": "is down",
    "drained": "is drained",
    "draining": "is draining (it takes no new jobs)",
    "fail": "has failed (drained for a failure)",
    "failing": "is failing (it takes no new jobs)",
    # Registered with less than slurm.conf gives it; Slurm never allocates it until fixed.
    "inval": "is INVAL (it registered with less than slurm.conf says it has)",
}
# Markers that refuse a node whatever its base state.
NODE_REFUSED_MARKERS = "*"
NODE_STATE_NOTES = {
    "idle": "",
    "mixed": "",
    "allocated": "is allocated: the job waits for it",
    "completing": "is completing a job: the job may wait for its epilog",
    "planned": "is planned by the backfill scheduler for a waiting job: this job may wait for it",
    "reserved": "is reserved: the job runs there only inside the reservation (--reservation)",
    "maint": "is in a maintenance reservation: the job waits until the reservation ends",
    "future": "is not yet in service (FUTURE): the job waits until it registers",
    "reboot_requested": "has a reboot pending: the job starts after the reboot",
    "reboot_issued": "is rebooting: the job starts once it is back",
    "power_down": "is about to power down: Slurm powers it up again for the job",
    "powered_down": "is powered down: Slurm powers it up on submit, allow its ResumeTimeout",
    "powering_down": "is powering down: Slurm powers it up again for the job",
    "powering_up": "is powering up: the job starts once it has booted",
    "blocked": "is blocked for exclusive topology jobs: the job may wait for it",
    "perfctrs": "is reserved for performance counters (NPC): the job waits for it",
    "unknown": "is in state UNKNOWN (slurmctld has not heard from it since its start): the job waits until it does",
    "external": "is an external node (not managed by this cluster's slurmd)",
}


def node_condition(state, markers=""):
    """``(refused, reasons)`` for a node as parse_sinfo_nodes() gives its state and markers.

    ``refused`` is True for a down, drained, draining, failed, INVAL or not-responding
    node: Slurm starts no job there until an administrator acts.  ``reasons`` are the
    phrases that say why (refused) or what the job can expect (a note), empty for a node
    that runs the job at once.
    """
    base = state.lower()
    reasons = []
    refused = base in NODE_REFUSED_STATES or any(marker in NODE_REFUSED_MARKERS for marker in markers)
    if base in NODE_REFUSED_STATES:
        reasons.append(NODE_REFUSED_STATES[base])
    elif base in NODE_STATE_NOTES:
        if NODE_STATE_NOTES[base]:
            reasons.append(NODE_STATE_NOTES[base])
    else:
        reasons.append(f"is in state {state!r}, which this launch does not know: Slurm decides whether the job waits")
    for marker in markers:
        reason = NODE_STATE_MARKERS.get(marker, f"carries the state marker {marker!r}")
        if reason not in reasons:
            reasons.append(reason)
    return refused, reasons


_GRES_GPU_RE = re.compile(r"gpu(?::[^:(,]+)?:(\d+)(?:\([^)]*\))?")


def gres_gpu_count(gres):
    """GPUs in a node's GRES as sinfo %G or scontrol's Gres= print it; 0 for none.

    ``gpu:8``, ``gpu:a100:8``, ``gpu:h100:4(S:0),gpu:h100:4(S:1)`` (types and socket
    bindings), ``gpu:8,shard:16``: every ``gpu`` item counts.  None for a GPU item of
    another form, so that a caller compares nothing rather than a wrong count.
    """
    gres = _optional(gres) or ""
    total = 0
    # Split at the commas outside parentheses: "(S:0,1)" lists sockets.
    for item in re.split(r",(?![^(]*\))", gres) if gres else []:
        item = item.strip()
        if item.split(":", 1)[0] != "gpu":
            continue
        match = _GRES_GPU_RE.fullmatch(item)
        if not match:  # a form this parser does not know: no count rather than a wrong one
            return None
        total += int(match.group(1))
    return total


def parse_sinfo_nodes(stdout):
    """Nodes of ``sinfo -h -N -o SINFO_NODES_FORMAT``, keyed by node name.

    sinfo prints a node once per partition; its entry lists them all.
    ``state`` is lower case without suffix markers, which stay in
    ``markers`` (``*`` not responding, ``~`` powered off, ...).
    """
    nodes = {}
    for line in _data_lines(stdout):
        values = line.split("|")
        if len(values) != 5:
            raise SlurmParseError(f"sinfo line has {len(values)} fields, expected 5: {line!r}")
        name, partition, state, cpus, gres = (value.strip() for value in values)
        validate_node_name(name)
        if not cpus.isdigit():
            raise SlurmParseError(f"sinfo: invalid CPU count {cpus!r} for node {name}")
        base_state = state.rstrip("".join(NODE_STATE_MARKERS))
        if not base_state:
            raise SlurmParseError(f"sinfo: invalid state {state!r} for node {name}")
        entry = nodes.setdefault(name, {
            "partitions": [],
            "state": base_state.lower(),
            "markers": state[len(base_state):],
            "cpus": int(cpus),
            "gres": _optional(gres),
            "gpus": gres_gpu_count(gres),
        })
        partition = partition.rstrip("*")  # '*' marks the default partition
        if partition and partition not in entry["partitions"]:
            entry["partitions"].append(partition)
    return nodes


class SinfoError(ValueError):
    """sinfo failed (``rc``: its exit status) or its answer could not be read (``rc`` 0)."""

    def __init__(self, message, rc=0):
        super().__init__(message)
        self.rc = rc


def sinfo_nodes(run):
    """Every node as sinfo shows it (parse_sinfo_nodes' entries), asked through ``run(argv)`` ->
    (rc, stdout, stderr); SinfoError saying what failed, a controller that did not answer included."""
    rc, out, err = run(["sinfo", "-h", "-N", "-o", SINFO_NODES_FORMAT])
    if rc != 0:
        hint = " (the controller did not answer)" if is_transient_error(rc, err) else ""
        raise SinfoError(f"sinfo failed{hint}: {err.strip() or 'exit ' + str(rc)}", rc)
    try:
        return parse_sinfo_nodes(out)
    except ValueError as exc:  # SlurmParseError too
        raise SinfoError(f"could not read sinfo's answer: {exc}") from None


def _node_conditions(slurm_nodes):
    for name, node in slurm_nodes.items():
        refused, reasons = node_condition(node["state"], node["markers"])
        yield name, node["state"] + node["markers"], refused, reasons


def unusable_nodes(slurm_nodes):
    """{name: "state+markers"} for the nodes of ``slurm_nodes`` (parse_sinfo_nodes' entries) that
    Slurm gives no job until an administrator acts: down, drained, draining, failed, INVAL, not
    responding."""
    return {name: shown for name, shown, refused, _ in _node_conditions(slurm_nodes) if refused}


def node_messages(slurm_nodes, refused=False):
    """One line per node: why it is refused (``refused=True``), or what a job can expect of a usable
    node that is not simply idle or mixed (powered down, planned, reboot pending, reserved, ...)."""
    return [f"{name} ({shown}) {'; '.join(reasons)}" for name, shown, is_refused, reasons in _node_conditions(slurm_nodes)
            if is_refused == bool(refused) and reasons]


def node_resource_mismatches(slurm_nodes, inventory, group):
    """One line per node whose cluster_node_cpus or cluster_node_gpus in the inventory (``inventory``:
    {node: its variables}) differ from Slurm's node record (sinfo %c, scontrol's CPUTot; the gpu count
    of its Gres), naming both values and the fix in ``group``'s group_vars.  A count the inventory
    does not set, or a GRES this project cannot read, is not compared."""
    found = []
    for name, node in slurm_nodes.items():
        ours = inventory.get(name) or {}
        for what, theirs, field, var in (("CPUs", node.get("cpus"), "CPUTot", "cluster_node_cpus"),
                                         ("GPUs", node.get("gpus"), "Gres", "cluster_node_gpus")):
            if theirs is None or ours.get(var) in (None, ""):
                continue
            if int(ours[var]) != int(theirs):
                found.append(f"{name}: the inventory says {int(ours[var])} {what}, Slurm says {int(theirs)} ({field}); "
                             f"set {var}: {int(theirs)} in group_vars/{group or '<node group>'}.yml")
    return found


def job_partition(given, group, common_partitions):
    """The partition a job runs in: the one given, else its node group's (named alike) when its
    nodes are in it, else the first partition all its nodes share; '' when there is none."""
    if given:
        return given
    if group and group in common_partitions:
        return group
    return common_partitions[0] if common_partitions else ""


def shared_partitions(slurm_nodes):
    """The partitions every node of ``slurm_nodes`` (parse_sinfo_nodes' entries) is in, in the first
    node's order; [] for no nodes."""
    seen = [node["partitions"] for node in slurm_nodes.values()]
    return [partition for partition in seen[0] if all(partition in each for each in seen)] if seen else []


def check_job_nodes(known, request):
    """The Slurm side of a job's node plan: its nodes as sinfo shows them (``known``:
    parse_sinfo_nodes' result, all nodes or the job's) against ``request``: names, partition (the
    one given, or ''), group (the node group asked for with -e group, or ''), node_group (the
    inventory's node group of the nodes, or ''), num_nodes and inventory ({node: its
    cluster_node_cpus and cluster_node_gpus}). In the order a user fixes them: nodes Slurm does
    not know; no one partition; the inventory's counts disagreeing with Slurm's; too few usable
    nodes. Returns partition, unusable, notes and ``problem``, the first failed check's message
    ('' when none failed). The launch's own checks of the inventory come first, on the controller."""
    names = list(request["names"])
    group = request.get("group") or ""
    found = {"partition": "", "unusable": {}, "notes": [], "problem": ""}
    unknown = [name for name in names if name not in known]
    if unknown:
        return {**found, "problem": f"Slurm does not know: {', '.join(unknown)} (see sinfo -N)."}
    slurm = {name: known[name] for name in names}
    common = shared_partitions(slurm)
    partition = job_partition(request.get("partition") or "", group or request.get("node_group") or "", common)
    found["partition"] = partition
    if partition not in common:
        where = "; ".join(f"{name} is in {','.join(node['partitions'])}" for name, node in slurm.items())
        return {**found, "problem": f"The nodes are not in one partition{' ' + partition if partition else ''}: "
                                    f"{where}; pick nodes of one partition, or -e group=<partition> -e num_nodes=N."}
    # The job asks for what the inventory says a node has; Slurm's count of the same node wins, so a
    # disagreement (cores counted where Slurm counts threads) would shrink or refuse the job silently.
    mismatches = node_resource_mismatches(slurm, request.get("inventory") or {},
                                          request.get("node_group") or partition)
    if mismatches:
        return {**found, "problem": "; ".join(mismatches) + "."}
    num_nodes = int(request["num_nodes"])
    unusable = unusable_nodes(slurm)
    found["unusable"] = unusable
    if (unusable and not group) or len(names) - len(unusable) < num_nodes:
        return {**found, "problem": (
            f"{'; '.join(node_messages(slurm, True))}; {num_nodes} usable nodes are needed "
            f"({len(names) - len(unusable)} of {len(names)} are usable). Pick other nodes, or ask an administrator "
            "to mend the node and resume it ('scontrol update nodename=NODE state=resume').")}
    # Usable nodes that delay the job (powered down, planned, reboot pending, reserved, ...): said, not refused.
    found["notes"] = node_messages(slurm)
    return found


def requested_names(nodes):
    """Expand a hostlist string, or a list of them, keeping the order and dropping repeats;
    ValueError for what is no node name."""
    items = [nodes] if isinstance(nodes, str) else list(nodes or [])
    names = []
    for item in items:
        if not isinstance(item, str):
            raise ValueError(f"invalid node list item {item!r}: give node names or Slurm hostlists")
        for name in expand_hostlist(item) if item.strip() else []:
            validate_node_name(name)  # node..1 and -x expand, yet are no host names
            if name not in names:
                names.append(name)
    return names


# ---------------------------------------------------------------------------
# Talking to a busy or restarting controller
# ---------------------------------------------------------------------------

TRANSIENT_ERROR_PATTERNS = tuple(re.compile(pattern, re.IGNORECASE) for pattern in (
    r"Socket timed out on send/recv operation",
    r"Unable to contact slurm controller",
    r"Zero Bytes were transmitted or received",
    r"Connection refused",
    r"Transport endpoint is not connected",
    r"backup controller in standby mode",
    r"Controller is in standby mode",
    r"Problem talking to (?:the )?database",
    r"Communication connection failure",
    # EAGAIN: slurmctld has too many RPCs in flight to take this one now.
    r"Resource temporarily unavailable",
))


def is_transient_error(rc, stderr):
    """True when a failed Slurm command is worth retrying: controller or slurmdbd unreachable or busy."""
    if rc == 0:
        return False
    return any(pattern.search(stderr or "") for pattern in TRANSIENT_ERROR_PATTERNS)


def backoff_delays(base_delay=0.5, max_delay=8.0, jitter=0.1, rng=random.random):
    """Endless exponential back-off: base, 2*base, 4*base ... up to max_delay.

    Each delay is up to ``jitter`` (a fraction) longer, so that hosts that
    failed together do not retry in lockstep.
    """
    delay = base_delay
    while True:
        yield min(max_delay, delay * (1 + jitter * rng()))
        delay *= 2


def retry_command(run, argv, attempts=5, base_delay=0.5, max_delay=8.0, sleep=time.sleep,
                  jitter=0.1, rng=random.random):
    """Run ``run(argv)`` (like AnsibleModule.run_command), retrying transient Slurm errors.

    Returns the last ``(rc, stdout, stderr)``; a success or any other failure
    comes back at once, for the caller to report.
    """
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1, got {attempts!r}")
    for delay in itertools.islice(backoff_delays(base_delay, max_delay, jitter, rng), attempts - 1):
        rc, out, err = run(argv)
        if not is_transient_error(rc, err):
            return rc, out, err
        sleep(delay)
    return run(argv)


class PollSchedule:
    """Sleep intervals between polls of a job: short at first, doubling up to a cap.

    A job that just changed state tends to change again soon (PENDING ->
    RUNNING -> an early crash) while a long training run needs only an
    occasional look, so a state change (``observe()``) starts over from the
    minimum.
    """

    def __init__(self, minimum=1.0, maximum=30.0, factor=2.0):
        if not 0 < minimum <= maximum or factor < 1:
            raise ValueError(
                "invalid poll schedule: need 0 < minimum <= maximum and factor >= 1, "
                f"got minimum={minimum!r} maximum={maximum!r} factor={factor!r}"
            )
        self.minimum = minimum
        self.maximum = maximum
        self.factor = factor
        self._next = minimum
        self._last_state = None

    def __iter__(self):
        return self

    def __next__(self):
        interval = self._next
        self._next = min(self.maximum, interval * self.factor)
        return interval

    def reset(self):
        self._next = self.minimum

    def resume(self, next_interval, last_state):
        """Carry on a schedule that an earlier process ran (following in slices)."""
        self._next = min(self.maximum, max(self.minimum, float(next_interval)))
        self._last_state = last_state

    @property
    def next_interval(self):
        return self._next

    def observe(self, state):
        """Record the state the latest poll saw; on a change, reset and return True."""
        changed = self._last_state is not None and state != self._last_state
        self._last_state = state
        if changed:
            self.reset()
        return changed
