# -*- coding: utf-8 -*-
"""The outputs of a finished job on the controller, written by the slurm_job action plugin as the
task that followed the job ends (its ``collect`` option): no further task, no module run. Of a
launch whose job is not final yet (wait=false), or of check mode, the one line that says so.

Into outputs/<name>-<job id>/ go the job's log and script (of a sweep, every point's log and its
table), which the module read and returned with its last answer (``collected_files``; a file too
large for that comes over the open connection, the transfer ansible.builtin.fetch uses), and
job.json and summary.txt, made here. Each file goes to a temporary name in the folder and is
renamed into place. The summary is shown, and a job that did not succeed fails the task with its
state, exit code, failed nodes and the last lines of its log.

Not a task of its own: slurm_job's action plugin imports it (one place for the rule).
"""

from __future__ import annotations

import base64
import filecmp
import importlib.util
import json
import os
import re
import stat
import tempfile
from pathlib import Path

from ansible.errors import AnsibleError

_ROLE = Path(__file__).resolve().parents[1]


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


# The rules the role's filters and the modules already use, each from its one place.
_rules = _load(_ROLE.parents[1] / "module_utils" / "cluster_rules.py", "_job_outputs_cluster_rules")
_runs = _load(_ROLE / "filter_plugins" / "runs.py", "_job_outputs_runs")
_sweep = _load(_ROLE / "filter_plugins" / "sweep.py", "_job_outputs_sweep")
_slurm_utils = _load(_ROLE.parents[1] / "module_utils" / "slurm.py", "_job_outputs_slurm_utils")
_launch_code = _load(_ROLE / "filter_plugins" / "launch_code.py", "_job_outputs_launch_code")

# What job.json keeps of the job.
RECORD_KEYS = ("job_id", "name", "user", "partition", "state", "outcome", "exit_code", "exit_signal", "reason",
               "nodes", "elapsed_seconds", "restarts", "stdout_path", "stderr_path", "log_tail", "failed_nodes",
               "code", "run", "run_line", "points")
# What the ``collect`` option says, besides the job itself (the slurm_job result).
COLLECT_SPEC = {
    # Where outputs/<name>-<id>/ go on the controller.
    "outputs_dir": {"type": "path", "required": True},
    # The jobs' root on the NAS: only files of the job's own directory under <jobs_dir>/<user>/ come back.
    "jobs_dir": {"type": "str", "required": True},
    # The sweep's points as the launch rendered them ([] for a job followed by id).
    "points": {"type": "list", "default": []},
    # The job was cancelled on request (jobs.yml -e cancel=N): it ended as asked, no failure.
    "cancelled": {"type": "bool", "default": False},
    # The log and script may carry slurm_launch_env values (tokens): the folder is for the user alone.
    "private": {"type": "bool", "default": False},
}


def outputs_folder(outputs_dir, job):
    # The name comes from Slurm (a job followed by id may not be the launch's own): one path component.
    return os.path.join(outputs_dir, f"{re.sub(r'[^A-Za-z0-9._-]', '_', str(job.get('name')))}-{job.get('job_id')}")


def failed_nodes(job):
    """'node111 (down*), ...': the job's nodes that Slurm gives no job now (the module's node_states,
    looked up after a node failure); '' otherwise."""
    states = job.get("node_states")
    if not states:
        return ""
    return ", ".join(f"{name} ({state})" for name, state in _slurm_utils.unusable_nodes(states).items())


def report(job, staged, points, outputs):
    """(job.json's record, summary.txt's lines, the sweep's report) of a finished job."""
    staged = staged or {}
    tasks = job.get("tasks") or []
    # The points of the sweep this launch rendered; a sweep followed by job id shows task ids only.
    sweep = _sweep.sweep_report(tasks, points) if tasks else {"rows": [], "lines": [], "failed": []}
    failed = failed_nodes(job)
    code = staged.get("code")
    run_line = _runs.run_line(staged, job)
    record = {**job, "failed_nodes": failed, "code": code, "run": _rules.run_of_path(job.get("stdout_path")),
              "run_line": run_line}
    if tasks:
        record["points"] = sweep["rows"]
    record = {key: record.get(key) for key in RECORD_KEYS if key in record}
    reason = f", reason {job['reason']}" if job.get("reason") else ""
    if job.get("found_existing"):
        submitted = "no: found pending or running: not submitted again"
    else:
        submitted = "yes" if job.get("submitted") else "no: followed by job id"
    rows = [("job", f"{job.get('job_id')} ({job.get('name')})"),
            ("run", run_line),
            ("state", f"{job.get('state')}, exit code {job.get('exit_code')}{reason}"),
            ("nodes", ",".join(job.get("nodes") or [])),
            ("elapsed", f"{job.get('elapsed_seconds')} s"),
            ("restarts", job.get("restarts")),
            ("code", _launch_code.launch_code_line(code) if code else "not staged: followed by job id"),
            ("submitted", submitted),
            ("log", job.get("stdout_path")),
            ("outputs", outputs)]
    if failed:
        rows.append(("failed", failed))
    if tasks:
        rows.append(("points", f"{job.get('tasks_done')} of {job.get('tasks_total')} final, "
                               f"{job.get('tasks_total', 0) - len(sweep['failed'])} completed"))
    lines = [f"{key:<10} {value}" for key, value in rows] + [f"  {line}" for line in (sweep["lines"] if tasks else [])]
    return record, lines, sweep


def report_line(job, staged, check_mode):
    """One line on a launch whose job is not final yet (wait=false), or check mode's prediction."""
    if check_mode:
        if job.get("found_existing"):
            return f"Job {job.get('job_id')} ({job.get('name')}) is already pending or running; a launch would follow it."
        predicted = job.get("test_only") or {}
        return (f"Slurm would start the job at {predicted.get('start')} on {','.join(predicted.get('nodes') or [])} "
                f"in partition {predicted.get('partition')}")
    how = "submitted" if job.get("submitted") else "already pending or running: following it"
    code = (staged or {}).get("code")
    return (f"Job {job.get('job_id')} ({job.get('name')}) {how}, state {job.get('state')}"
            f"{', ' + _launch_code.launch_code_line(code) if code else ''}. "
            f"Follow it with: ansible-playbook launch.yml -e job_id={job.get('job_id')}")


def failure_message(job, sweep, failed, outputs):
    """The task's message for a job that did not succeed."""
    reason = f", reason {job['reason']}" if job.get("reason") else ""
    nodes = f"; failed nodes: {failed}" if failed else ""
    points = ("points that did not complete: " + "; ".join(sweep["failed"]) + "\n") if job.get("tasks") else ""
    return (f"job {job.get('job_id')} ({job.get('name')}) ended {job.get('state')}, exit code {job.get('exit_code')}"
            f"{reason}{nodes}; outputs in {outputs}\n{points}last lines of {job.get('stdout_path')}:\n"
            + "\n".join(job.get("log_tail") or []))


def _read(path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def _prepare_dir(path, mode, check):
    """The folder exists and is a directory (not a link) with at most this mode: one there already
    is never widened (a private job's folder stays private whoever collects it later). True if that
    changed it."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        if not check:
            os.makedirs(path, mode=mode)
            os.chmod(path, mode)
        return True
    if not stat.S_ISDIR(info.st_mode):
        raise AnsibleError(f"the outputs folder {path} is not a directory (a link or a file is there): "
                           "move it away or set slurm_launch_outputs_dir")
    narrowed = stat.S_IMODE(info.st_mode) & mode
    if stat.S_IMODE(info.st_mode) != narrowed:
        if not check:
            os.chmod(path, narrowed)
        return True
    return False


def _put(folder, name, data, check, mode=0o644):
    """Write data as folder/name through a temporary file and a rename; True if it changed."""
    path = os.path.join(folder, name)
    if _read(path) == data and stat.S_IMODE(os.lstat(path).st_mode) == mode:
        return False
    if not check:
        handle, scratch = tempfile.mkstemp(dir=folder, prefix=f".{name}.")
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(data)
            os.chmod(scratch, mode)
            os.replace(scratch, path)
        except BaseException:
            os.unlink(scratch)
            raise
    return True


def _fetch(action, src, folder, check, task_vars, mode=0o644):
    """Bring src of the submit host in as folder/<its name> over the connection: True if that
    changed it, None when src cannot be read there. A log can be large: it goes to a file."""
    name = os.path.basename(src)
    if getattr(action._connection, "become", None):
        # A raw transfer would read as the login user, not the become user: ask a module.
        slurped = action._execute_module("ansible.legacy.slurp", module_args={"src": src}, task_vars=task_vars)
        return None if slurped.get("failed") else _put(folder, name, base64.b64decode(slurped["content"]), check, mode)
    # Beside its place, so that the rename is within one filesystem; 0600 until then, as the log
    # may carry secrets. In check mode, where the folder may not exist yet, elsewhere.
    handle, scratch = tempfile.mkstemp(dir=None if check else folder, prefix=f".{name}.")
    os.close(handle)
    try:
        try:
            action._connection.fetch_file(src, scratch)
        except AnsibleError:
            return None  # not there (a sweep's task that never started), or not readable
        path = os.path.join(folder, name)
        if os.path.isfile(path) and filecmp.cmp(scratch, path, shallow=False):
            return False
        if not check:
            os.chmod(scratch, mode)
            os.replace(scratch, path)
        return True
    finally:
        if os.path.exists(scratch):
            os.unlink(scratch)


def collect(action, job, options, staged, task_vars, display=None):
    """Write the finished ``job``'s outputs (the paths cluster_rules.collected_paths names under
    ``options['jobs_dir']``: those the module returned in job['collected_files'] as they are, the
    rest fetched) and show its summary. Returns ``(what was collected, the failure message or None)``."""
    check = bool(action._task.check_mode)
    outputs = outputs_folder(options["outputs_dir"], job)
    returned = job.get("collected_files") or {}
    record, lines, sweep = report(job, staged, options.get("points") or [], outputs)
    # Private as the launch asked, or as the job's own files say (a job followed or cancelled by id).
    private = bool(options.get("private") or job.get("private"))
    changed = _prepare_dir(outputs, 0o700 if private else 0o755, check)
    mode = 0o600 if private else 0o644
    fetched, missing = [], []
    for src in _rules.collected_paths(job, options["jobs_dir"]):
        if src in returned:
            done = _put(outputs, os.path.basename(src), base64.b64decode(returned[src]), check, mode)
        else:
            done = _fetch(action, src, outputs, check, task_vars, mode)
        if done is None:
            missing.append(src)
            continue
        changed |= done
        fetched.append(src)
    files = {"job.json": json.dumps(record, indent=4, sort_keys=True, separators=(",", ": ")) + "\n",
             "summary.txt": "\n".join(lines) + "\n"}
    for name, text in files.items():
        changed |= _put(outputs, name, text.encode("utf-8"), check, mode)
    if display is not None:
        for line in lines:
            display.display(line)
    failure = None
    if job.get("outcome") != "succeeded" and not options.get("cancelled"):
        failure = failure_message(job, sweep, record["failed_nodes"], outputs)
    return {"changed": changed, "dest": outputs, "fetched": fetched, "not_fetched": missing,
            "written": sorted(files), "summary": lines}, failure
