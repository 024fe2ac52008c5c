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
import shlex

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


# ---------------------------------------------------------------------------
# The Python that ansible-core runs modules with on a host
# ---------------------------------------------------------------------------

# ansible-core's target support matrix: the oldest Python its modules run on, per release; an
# unknown newer release is taken to need 3.9.
MINIMUM_PYTHON = {"2.16": "2.7", "2.17": "3.7", "2.18": "3.8", "2.19": "3.8"}
NEWER_MINIMUM_PYTHON = "3.9"
# The probe's answer: "<path> Python <major>.<minor>...".
ANSWER_RE = re.compile(r"^(\S+) Python (\d+)\.(\d+)", re.MULTILINE)


def target_python_probe(interpreter, fallbacks):
    """A shell command that prints the interpreter's path and its `-V`: ``interpreter`` as set
    (ansible_python_interpreter), or with 'auto' (auto_silent, auto_legacy...) the first of
    ``fallbacks`` (INTERPRETER_PYTHON_FALLBACK) found, as interpreter discovery picks it."""
    if str(interpreter).startswith("auto"):
        return (f"for p in {' '.join(shlex.quote(str(path)) for path in fallbacks)}; "
                "do command -v \"$p\" >/dev/null 2>&1 && { printf '%s ' \"$(command -v \"$p\")\"; \"$p\" -V 2>&1; "
                "exit 0; }; done; echo 'no Python found'; exit 0")
    quoted = shlex.quote(str(interpreter))
    return f"printf '%s ' {quoted}; {quoted} -V 2>&1 || true"


def minimum_python(ansible_version):
    """The oldest Python that ansible-core ``ansible_version`` ('2.19.14') runs modules on."""
    return MINIMUM_PYTHON.get(".".join(str(ansible_version).split(".")[:2]), NEWER_MINIMUM_PYTHON)


def target_python_problem(answer, host, ansible_version):
    """'' when the probe's ``answer`` names a Python that ansible-core ``ansible_version`` runs
    modules on, else what is wrong on ``host`` and how to fix it."""
    minimum = minimum_python(ansible_version)
    found = ANSWER_RE.search(answer or "")
    if found and (int(found[2]), int(found[3])) >= tuple(int(part) for part in minimum.split(".")):
        return ""
    what = (f"{found[1]} is Python {found[2]}.{found[3]}" if found
            else f"this host answered {(answer or '').strip()[:200]}")
    return (f"{host}: ansible-core {ansible_version} needs Python {minimum} or newer on the hosts it manages, "
            f"and {what}. Install a newer Python there (on EL8, where /usr/bin/python3 and "
            "/usr/libexec/platform-python are 3.6: dnf install python39, or python3.11) and set "
            "ansible_python_interpreter to it for this host (e.g. ansible_python_interpreter: /usr/bin/python3.11 "
            "in the inventory's group_vars).")


def probe_problem(action, task_vars):
    """(the probe's answer, '' or what is wrong) for the host of ``action`` (an ActionBase): run on
    the controller, by the actions that run modules first on a host."""
    from ansible.module_utils.ansible_release import __version__ as ansible_version

    config = action._shared_loader_obj.lookup_loader.get("ansible.builtin.config", loader=action._loader,
                                                         templar=action._templar)
    interpreter = task_vars.get("ansible_python_interpreter")
    interpreter = (action._templar.template(interpreter) if interpreter
                   else config.run(["INTERPRETER_PYTHON"], variables=task_vars)[0])
    fallbacks = config.run(["INTERPRETER_PYTHON_FALLBACK"], variables=task_vars)[0]
    answer = action._low_level_execute_command(target_python_probe(interpreter, fallbacks),
                                               sudoable=False).get("stdout", "")
    return answer, target_python_problem(answer, task_vars.get("inventory_hostname"), ansible_version)


def explain_module_failure(action, result, task_vars):
    """``result``, a module run of ``action``'s: when it gave no answer (``module_stderr``) and the
    host's Python is one ansible-core cannot run modules on, that failure said as this action's task
    would have before any module ran. An action whose module is the first to run on a host (the
    launch's slurm_job, provision.yml's nccl_network_facts) runs no target_python task before it (a
    round trip per host) and pays the probe only here, after a failure."""
    if not (result.get("failed") and "module_stderr" in result):
        return result
    _, problem = probe_problem(action, task_vars)
    if not problem:
        return result
    # The module's own output is the old Python's refusal of it: the problem says what it means. Ansible
    # prints the captured error (exception) as the task's error line: it goes too, for the problem's.
    return {key: value for key, value in result.items()
            if key not in ("module_stdout", "module_stderr", "exception")} | {"msg": problem}
