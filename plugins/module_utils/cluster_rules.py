"""The rules the roles and modules of this project share, each in one place.

Shipped to managed hosts with the modules that import it (standard library only) and imported by
the filters (plugins/filter/cluster_rules.py) for the roles, so that a module and a
role never disagree about what a safe path is, which inventory groups are node groups, what the
NCCL env file of a group is called, which run of a job name a log belongs to, or which of a
finished job's files come back.
"""

from __future__ import annotations

import os
import re

# ---------------------------------------------------------------------------
# Safe paths
# ---------------------------------------------------------------------------

# Paths land in job scripts, module files and command lines: only characters that need no
# quoting anywhere. '+' is in (conda and CUDA paths use it: cuda-12.1+extras); a space, '$',
# quotes or a newline are not.
SAFE_PATH_RE = re.compile(r"/[A-Za-z0-9_.+/-]*")
SAFE_PATH_RULE = "an absolute path of letters, digits, '_', '.', '+', '-' and '/', without '..'"


def is_safe_path(value):
    """True for an absolute path of SAFE_PATH_RE's characters with no '..' component."""
    return (isinstance(value, str) and SAFE_PATH_RE.fullmatch(value) is not None
            and ".." not in value.split("/"))


def safe_path_problem(name, value, allow_empty=False):
    """None when ``value`` is a safe path (or empty and allowed), else a message naming it."""
    if (allow_empty and value in ("", None)) or is_safe_path(value):
        return None
    return f"{name}={value!r} is not allowed: {SAFE_PATH_RULE}"


# ---------------------------------------------------------------------------
# Node groups and partitions
# ---------------------------------------------------------------------------

# Inventory groups that are never node groups.
NOT_NODE_GROUPS = frozenset(("all", "ungrouped", "compute"))
GROUP_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
GROUP_NAME_RULE = "1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit"


def node_groups(groups):
    """Every node group of the inventory, sorted: a non-empty group of compute nodes only,
    other than ``compute`` itself.  A node group is a Slurm partition of the same name."""
    compute = set(groups.get("compute") or [])
    return sorted(name for name, members in groups.items()
                  if name not in NOT_NODE_GROUPS and members and set(members) <= compute)


def node_groups_by_host(groups):
    """``{host: its node groups, sorted}`` for every host in a node group: the inventory's groups
    read once, for one host or a whole job's nodes."""
    found = {}
    for name in node_groups(groups):
        for hostname in groups[name]:
            found.setdefault(hostname, []).append(name)
    return found


def host_node_group(hostname, groups, override="", by_host=None):
    """The one node group of a host: ``override`` (the inventory's nccl_env_group for the host)
    or its only node group.  ValueError, naming the groups, when there is none or several.
    ``by_host``: node_groups_by_host(groups), when the caller asks for many hosts."""
    if override:
        if not GROUP_NAME_RE.fullmatch(str(override)):
            raise ValueError(f"{hostname}: node group {override!r} is not allowed: {GROUP_NAME_RULE}")
        return str(override)
    found = (by_host if by_host is not None else node_groups_by_host(groups)).get(hostname, [])
    if len(found) != 1:
        raise ValueError(f"{hostname}: node groups {found} (groups under `compute` holding it): it needs exactly "
                         "one; set nccl_env_group for the node to choose")
    if not GROUP_NAME_RE.fullmatch(found[0]):
        raise ValueError(f"{hostname}: node group {found[0]!r} is not allowed: {GROUP_NAME_RULE}")
    return found[0]


def nodes_node_group(nodes, nodes_vars, groups):
    """The one node group of a job's nodes: each node's (its nccl_env_group in ``nodes_vars``, a
    ``{node: {name: value}}``, or its only node group), which must be the same for all; ValueError
    naming the nodes otherwise."""
    found = {}
    by_host = node_groups_by_host(groups)
    for node in nodes:
        group = host_node_group(node, groups, (nodes_vars.get(node) or {}).get("nccl_env_group", ""), by_host)
        found.setdefault(group, []).append(node)
    if len(found) != 1:
        raise ValueError(
            "the nodes are not of one node group, so no one NCCL env file fits them: "
            + "; ".join(f"{', '.join(members)} in {group}" for group, members in sorted(found.items()))
            + "; pick nodes of one group (-e group=GROUP)")
    return next(iter(found))


# ---------------------------------------------------------------------------
# The NCCL env file of a node group
# ---------------------------------------------------------------------------


def nccl_env_file(env_dir, group):
    """``<env_dir>/nccl-<group>.sh``: what provision.yml's nccl_env role writes for a node group
    and what a job on that group's nodes sources; '' when there is no env dir."""
    if not env_dir:
        return ""
    if not GROUP_NAME_RE.fullmatch(str(group or "")):
        raise ValueError(f"no NCCL env file for node group {group!r}: a node group is {GROUP_NAME_RULE}")
    return f"{str(env_dir).rstrip('/')}/nccl-{group}.sh"


# ---------------------------------------------------------------------------
# Runs of a job name
# ---------------------------------------------------------------------------

# <jobs dir>/<user>/<job name>/runs/<run id>/<log>: library/job_dir.py's layout.
RUN_PATH_RE = re.compile(r"/runs/([1-9][0-9]*)/[^/]*$")


def run_of_path(path):
    """The run id of a job whose log is ``path`` in its run's directory, or None."""
    match = RUN_PATH_RE.search(path or "")
    return int(match.group(1)) if match else None


def job_script_name(job_name, job_id):
    """Each job's own copy of its run's script (slurm_job links it after sbatch): a later job of
    the run stages the run's script anew and never changes an earlier job's."""
    return f"{job_name}-{job_id}.sbatch"


# ---------------------------------------------------------------------------
# The files of a finished job that come back to the controller
# ---------------------------------------------------------------------------


def collected_paths(job, jobs_root):
    """The files of a finished ``job`` (slurm_job's result) that its launch brings back: its log and
    script; of a sweep, every point's log and its table. Only files directly in the job's own
    directory, and only when its log is under ``<jobs_root>/<its user>/``: a job followed by id may
    have named any path as its output, which the launching user (root, an operator) could read.
    The slurm_job module reads these for its last answer; the controller writes them."""
    user, log, name = job.get("user"), job.get("stdout_path") or "", job.get("name")
    if not user or not log or not jobs_root or not name:
        return []
    log = "/" + os.path.normpath(log).lstrip("/")
    if not log.startswith(f"{os.path.normpath(jobs_root).rstrip('/')}/{user}/"):
        return []
    job_dir = os.path.dirname(log)
    paths = [log, f"{job_dir}/{job_script_name(name, job.get('job_id'))}"]
    if job.get("tasks"):
        paths += [task["stdout_path"] for task in job["tasks"] if task.get("stdout_path")] + [f"{job_dir}/sweep.tsv"]
    wanted = []
    for path in paths:
        path = "/" + os.path.normpath(path).lstrip("/")
        if os.path.dirname(path) == job_dir and path not in wanted:
            wanted.append(path)
    return wanted


# ---------------------------------------------------------------------------
# Text from a job shown on a terminal
# ---------------------------------------------------------------------------

# A job's log and name are its user's text: escape sequences in them would move the cursor,
# retitle or erase lines on the terminal of whoever follows the job (an admin, another
# program). C0 and C1 control characters (and DEL) other than tab are shown as \xNN.
_CONTROL_RE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def visible(text):
    """``text`` with every control character but tab written as ``\\xNN``; None stays None."""
    if text is None:
        return None
    return _CONTROL_RE.sub(lambda match: f"\\x{ord(match.group()):02x}", str(text))


# ---------------------------------------------------------------------------
# A failed job's first exception, from its log
# ---------------------------------------------------------------------------

# The job script has torchrun put "[rank<N>@<node>] " before each line of a worker (its
# TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE); torch.distributed adds its own "[rank<N>]: " to the lines
# of an exception raised after init_process_group.
RANK_LINE_RE = re.compile(r"^\[rank(\d+)@([A-Za-z0-9._-]+)\] (?:\[rank\d+\]: )?(.*)$")
# The last frames of the traceback that a failure keeps (the user's code is usually the last).
FAILURE_FRAMES = 4
_EXCEPTION_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_.]*)(?:: (.*))?$")
_CHAINED = ("During handling of the above exception, another exception occurred:",
            "The above exception was the direct cause of the following exception:")
# torchrun's agent stopped by a signal (srun ending the step after another node failed, a
# cancel, the time limit): a consequence, never the cause.
_STOPPED = "torch.distributed.elastic.multiprocessing.api.SignalException"


def rank_line(line):
    """(rank, node, text) of a worker's line of the log; (None, None, line) of any other line."""
    match = RANK_LINE_RE.match(line)
    if match is None:
        return None, None, line
    return int(match.group(1)), match.group(2), match.group(3)


def first_failure(lines, frames=FAILURE_FRAMES):
    """The Python exception of the rank that failed first, from a job's log lines:
    {"rank", "node", "type", "message", "traceback"} (its last ``frames`` frames: each frame's
    ``File ...`` line and the source line under it), or None when no traceback ended in one.

    Each rank's lines are read apart from the others' (ranks' tracebacks interleave line by line);
    the first is the rank whose exception line comes first in the log, shown with the last
    exception of that chain ("During handling of the above exception..."). Lines without a rank
    prefix (torchrun, srun, a job from before the prefix) are one more writer, read the same way
    with rank and node None, and only in a log where no line has a rank: where ranks wrote,
    torchrun's own tracebacks are what followed their failure. A torchrun stopped by a signal
    (_STOPPED) is never the failure."""
    writers = {}
    for index, line in enumerate(lines):
        rank, node, text = rank_line(line)
        writer = writers.setdefault((rank, node), {"state": "idle", "frames": [], "at": None})
        state, stripped = writer["state"], text.strip()
        if state == "done":
            continue  # only a writer's first failure counts
        if state in ("idle", "chained") and (text.startswith("Traceback (most recent call last):")
                                             or text.startswith('  File "')):
            # A traceback; one that begins with its frame is a SyntaxError's.
            writer.update(state="frames", frames=[[stripped]] if text.startswith("  ") else [])
        elif state == "frames":
            if text.startswith("  "):
                if stripped.startswith('File "'):
                    writer["frames"].append([stripped])
                elif writer["frames"] and len(writer["frames"][-1]) == 1 and stripped.strip("^~ "):
                    writer["frames"][-1].append(stripped)  # its source line (not 3.11's ^^^ markers)
                continue
            match = _EXCEPTION_RE.match(text)
            if match and match.group(1) == _STOPPED:
                writer.update(state="idle", frames=[])
            elif match and writer["frames"]:  # other lines (a print of the rank between) are passed over
                writer.update(state="raised", type=match.group(1), message=match.group(2) or "",
                              traceback=[part for frame in writer["frames"][-frames:] for part in frame])
                writer["at"] = index if writer["at"] is None else writer["at"]
        elif state == "raised":
            if stripped in _CHAINED:
                writer["state"] = "chained"
            elif stripped:
                writer["state"] = "done"
    ranked = any(rank is not None for rank, _ in writers)
    raised = [(key, writer) for key, writer in writers.items()
              if writer["at"] is not None and (key[0] is not None or not ranked)]
    if not raised:
        return None
    (rank, node), writer = min(raised, key=lambda item: item[1]["at"])
    return {"rank": rank, "node": node, "type": writer["type"], "message": writer["message"],
            "traceback": writer["traceback"]}
