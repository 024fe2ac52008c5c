# -*- coding: utf-8 -*-
"""The outputs of a finished job on the controller, written by the slurm_job action plugin as the
task that followed the job ends (its ``collect`` option): no further task, no module run. Of a
launch whose job is not final yet (wait=false), or of check mode, the one line that says so.

Into outputs/<name>-<job id>/ go the job's log and script (of a sweep, every point's log and its
table), which the module read and returned with its last answer (``collected_files``: only the
job owner's regular files, reached without a link; of a file over the module's budget, its end),
and job.json and summary.txt, made here. Nothing is fetched over the connection: a transfer would
follow a link the job's owner put in place of a file, and read it as whoever follows the job.
The folder is 0700 and its files 0600 whoever's job it is (a log may carry what its job was
given), each written to a temporary name in the folder and renamed into place. The summary is
shown, and a job that did not succeed fails the task with its state, exit code, failed nodes and
the last lines of its log.

Not a task of its own: slurm_job's action plugin imports it (one place for the rule).
"""

from __future__ import annotations

import base64
import errno
import json
import os
import re
import stat

from ansible.errors import AnsibleError

# The rules the role's filters and the modules already use, each from its one place.
from ansible_collections.hpc.slurm_train.plugins.module_utils import cluster_rules as _rules
from ansible_collections.hpc.slurm_train.plugins.module_utils import job_dirs as _job_dirs
from ansible_collections.hpc.slurm_train.plugins.module_utils import run_cost as _run_cost
from ansible_collections.hpc.slurm_train.plugins.module_utils import slurm as _slurm_utils
from ansible_collections.hpc.slurm_train.plugins.plugin_utils import launch_request as _launch_request

# What job.json keeps of the job.
RECORD_KEYS = ("job_id", "name", "user", "partition", "state", "outcome", "exit_code", "exit_signal", "reason",
               "nodes", "elapsed_seconds", "restarts", "stdout_path", "stderr_path", "log_tail", "failed_nodes",
               "code", "run", "run_line", "request_differences", "points", "failure", "no_progress", "cost",
               "hangs", "health")
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
    # The log and script may carry slurm_launch_env values (tokens). The folder is for the user alone
    # whatever this says.
    "private": {"type": "bool", "default": False},
}


# The outputs folder and its files: the follower's alone (a log may hold tokens, or another
# user's output when root or an operator follows a job).
FOLDER_MODE, FILE_MODE = 0o700, 0o600


def run_line(staged, outcome):
    """One line: which run a launch was (what its staging found) or the job followed is."""
    staged = staged or {}
    outcome = outcome or {}
    if staged.get("run_id") is None:
        run = _rules.run_of_path(outcome.get("stdout_path"))
        return f"run {run}" if run else "-"
    if outcome.get("found_existing"):
        return f"run {staged['run_id']}, already pending or running: followed, not submitted again"
    # The newest run passed over as another request, or a run of another request resumed by force.
    aside = "".join(f" ({note})" for note in [staged.get("other_request")] if note)
    if staged.get("request_differences"):
        aside += f" (force: it is another request: {'; '.join(staged['request_differences'])})"
    if not staged.get("resumed"):
        return f"fresh run {staged['run_id']}{aside}"
    step = staged.get("resumed_step")
    if step is None:
        return f"resumed run {staged['run_id']} (no checkpoint of it yet: it starts over){aside}"
    return f"resumed run {staged['run_id']} from its checkpoint at step {step}{aside}"


def launch_code_line(code):
    """One line on the code a launch staged (the slurm_job action's `code` result)."""
    where = "copied to the NAS" if code["copied"] else "already on the NAS, not copied"
    line = f"code {code['hash']} ({code['files']} files) {where}"
    if code.get("git_commit"):
        line += f", git {code['git_commit'][:12]}{' with uncommitted changes' if code.get('git_dirty') else ''}"
    return line


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


def job_failure(job):
    """The first failed rank's exception in a job that did not succeed (cluster_rules.first_failure),
    read from its collected log (its end, when it was cut), else from the module's log tail; None
    when the log names none (a job killed, a shell error, a log not readable here)."""
    if job.get("outcome") == "succeeded":
        return None
    data = (job.get("collected_files") or {}).get(job.get("stdout_path"))
    if data:
        lines = [_rules.visible(line) for line in base64.b64decode(data).decode("utf-8", "replace").splitlines()]
    else:
        lines = job.get("log_tail") or []  # made visible by the module
    return _rules.first_failure(lines)


def job_hangs(job):
    """The attempts the job script's hang watchdog stopped (the ledger's attempts with a hang), each
    with state HUNG, its suspect nodes (none when the stacks did not tell) and its stack dumps."""
    return [{"job_id": attempt.get("job_id"), "restart": attempt.get("restart"), "state": "HUNG",
             **attempt["hang"]} for attempt in (job.get("cost") or {}).get("attempts") or [] if attempt.get("hang")]


def hang_line(hang):
    """summary.txt's 'hung' row: 'attempt 0 of job 41 HUNG at step 20: suspect node111; stacks in ...',
    and the NCCL flight recorder's dumps where there are any."""
    at = f" at step {hang['step']}" if hang.get("step") is not None else ""
    nodes = ", ".join(_rules.visible(node) for node in hang.get("suspect_nodes") or [])
    dumps = ", ".join(_rules.visible(name) for name in hang.get("stack_dumps") or [])
    recorded = ", ".join(_rules.visible(name) for name in hang.get("flight_recorder_dumps") or [])
    return (f"attempt {hang['restart']} of job {hang['job_id']} HUNG{at}: suspect "
            f"{nodes or 'nodes: none named (the stacks do not tell)'}; stacks in {dumps or 'no file'}"
            f"{'; NCCL flight recorder in ' + recorded if recorded else ''} (the run's directory)")


def failure_lines(failure):
    """The failure as a person reads it: who raised what, then the last frames."""
    where = "a process" if failure["rank"] is None else f"rank {failure['rank']} on {failure['node']}"
    message = f": {failure['message']}" if failure["message"] else ""
    return [f"{where} raised {failure['type']}{message}"] + [
        f"  {line}" if line.startswith('File "') else f"    {line}" for line in failure["traceback"]]


def report(job, staged, points, outputs):
    """(job.json's record, summary.txt's lines, the sweep's report) of a finished job."""
    staged = staged or {}
    tasks = job.get("tasks") or []
    # The points of the sweep this launch rendered; a sweep followed by job id shows task ids only.
    sweep = (_launch_request.sweep_report(tasks, points, stopped_words) if tasks
             else {"rows": [], "lines": [], "failed": []})
    failed = failed_nodes(job)
    code = staged.get("code")
    run_words = run_line(staged, job)
    failure = job_failure(job)
    hangs = job_hangs(job)
    record = {**job, "failed_nodes": failed, "code": code, "run": _rules.run_of_path(job.get("stdout_path")),
              "run_line": run_words, "failure": failure, "hangs": hangs}
    if staged.get("request_differences"):
        record["request_differences"] = staged["request_differences"]
    if tasks:
        record["points"] = sweep["rows"]
    record = {key: record.get(key) for key in RECORD_KEYS if key in record}
    reason = f", reason {_rules.visible(job['reason'])}" if job.get("reason") else ""
    if job.get("found_existing"):
        submitted = "no: found pending or running: not submitted again"
    else:
        submitted = "yes" if job.get("submitted") else "no: followed by job id"
    rows = [("job", f"{job.get('job_id')} ({_rules.visible(job.get('name'))})"),
            ("run", run_words),
            ("state", f"{job.get('state')}, exit code {job.get('exit_code')}{reason}"),
            ("nodes", ",".join(job.get("nodes") or [])),
            ("elapsed", f"{job.get('elapsed_seconds')} s"),
            ("restarts", job.get("restarts")),
            ("cost", _run_cost.cost_line(job["cost"]) if job.get("cost") else "unknown: neither sacct nor the job script "
                                                                             "recorded its attempts"),
            ("code", launch_code_line(code) if code else "not staged: followed by job id"),
            ("submitted", submitted),
            ("log", _rules.visible(job.get("stdout_path"))),
            ("outputs", outputs)]
    for path, size in sorted((job.get("collected_truncated") or {}).items()):
        rows.append(("cut", f"{_rules.visible(os.path.basename(path))}: its last part only, {size} bytes on the NAS "
                            "(over what a collect brings back)"))
    for path, why in sorted((job.get("collected_skipped") or {}).items()):
        rows.append(("left out", f"{_rules.visible(path)}: {why}"))
    if failed:
        rows.append(("failed", failed))
    if failure:
        why = failure_lines(failure)
        rows.append(("failure", why[0]))
        rows.extend(("", line) for line in why[1:])
    if job.get("no_progress"):
        rows.append(("stopped", no_progress_line(job)))
    rows.extend(("stopped", f"point {row['task']} ({row['args']}): {stopped_words(task)}")
                for row, task in zip(sweep["rows"], tasks) if row["no_progress"])
    rows.extend(("hung", hang_line(hang)) for hang in hangs)
    for line in health_lines(job):
        rows.append(("health", line))
    if tasks:
        rows.append(("points", f"{job.get('tasks_done')} of {job.get('tasks_total')} final, "
                               f"{job.get('tasks_total', 0) - len(sweep['failed'])} completed"))
    lines = [f"{key:<10} {value}" for key, value in rows] + [f"  {line}" for line in (sweep["lines"] if tasks else [])]
    return record, lines, sweep


def report_line(job, staged, check_mode):
    """One line on a launch whose job is not final yet (wait=false), or check mode's prediction."""
    if check_mode:
        if job.get("found_existing"):
            return (f"Job {job.get('job_id')} ({_rules.visible(job.get('name'))}) is already pending or running; "
                    "a launch would follow it.")
        predicted = job.get("test_only") or {}
        return (f"Slurm would start the job at {predicted.get('start')} on {','.join(predicted.get('nodes') or [])} "
                f"in partition {predicted.get('partition')}")
    how = "submitted" if job.get("submitted") else "already pending or running: following it"
    code = (staged or {}).get("code")
    return (f"Job {job.get('job_id')} ({_rules.visible(job.get('name'))}) {how}, state {job.get('state')}"
            f"{', ' + launch_code_line(code) if code else ''}. "
            f"Follow it with: ansible-playbook launch.yml -e job_id={job.get('job_id')}")


def stopped_words(job):
    """'NO_PROGRESS: failed at step 5 without advancing its checkpoint from step 4: not requeued again
    (restart 1)' of a job, or a sweep's point, its script stopped (the module's no_progress)."""
    stopped = job["no_progress"]
    at = f" at step {stopped['step']}" if stopped.get("step") is not None else ""
    return (f"NO_PROGRESS: failed{at} without advancing its checkpoint from step {stopped.get('checkpoint_step')}: "
            f"not requeued again (restart {job.get('restarts')})")


def no_progress_line(job):
    """stopped_words of a job, and what the next launch of its request does with its run."""
    return f"{stopped_words(job)}; a launch of the same request does not resume it unless given resume=<run id>"


def health_lines(job):
    """The health gate's line of each attempt (the module's health: the gate's own summary of it),
    made visible: a node's error is what a node printed."""
    return [_rules.visible(str(record.get("summary") or f"restart {record.get('restart')}: {record.get('action')}"))
            for record in job.get("health") or []]


def failure_message(job, sweep, failed, outputs, failure=None):
    """The task's message for a job that did not succeed: the first failed rank's exception
    (``failure``, job_failure's) before the log's last lines."""
    reason = f", reason {_rules.visible(job['reason'])}" if job.get("reason") else ""
    if job.get("no_progress"):
        reason += f"; {no_progress_line(job)}"
    gate = [record for record in job.get("health") or [] if record.get("action") != "pass"]
    if gate:
        reason += f"; health gate: {health_lines({'health': gate[-1:]})[0]}"
    nodes = f"; failed nodes: {failed}" if failed else ""
    points = ("points that did not complete: " + "; ".join(sweep["failed"]) + "\n") if job.get("tasks") else ""
    # The module made the log's lines visible; the name and path are the job's too.
    why = "".join(f"{line}\n" for line in failure_lines(failure)) if failure else ""
    return (f"job {job.get('job_id')} ({_rules.visible(job.get('name'))}) ended {job.get('state')}, exit code "
            f"{job.get('exit_code')}{reason}{nodes}; outputs in {outputs}\n{why}{points}last lines of "
            f"{_rules.visible(job.get('stdout_path'))}:\n" + "\n".join(job.get("log_tail") or []))


def _open_folder(path, check):
    """(descriptor of the outputs folder, whether it changed): made FOLDER_MODE, or an existing one
    narrowed to it through its descriptor; a link or a file there is refused. In check mode, where
    the folder may not exist, (None, True) when it would be made."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        if check:
            return None, True
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            os.mkdir(path, FOLDER_MODE)
        except FileExistsError:
            pass  # made at the same moment; opened (and checked) below
        fd, _ = _open_folder(path, check)
        os.fchmod(fd, FOLDER_MODE)  # mkdir's mode was narrowed by the umask only
        return fd, True
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            raise AnsibleError(f"the outputs folder {path} is not a directory (a link or a file is there): "
                               "move it away or set slurm_launch_outputs_dir") from None
        raise
    if stat.S_IMODE(os.fstat(fd).st_mode) == FOLDER_MODE:
        return fd, False
    if not check:
        os.fchmod(fd, FOLDER_MODE)
    return fd, True


def _put(folder_fd, name, data, check):
    """Write data as ``name`` in the folder through a temporary file (FILE_MODE from the start)
    and a rename, which replaces a link there rather than follow it; True if it changed."""
    if folder_fd is not None and _job_dirs.same_file(folder_fd, name, data, FILE_MODE):
        return False
    if check:
        return True
    partial = f".{name}.partial-{os.urandom(4).hex()}"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE, dir_fd=folder_fd)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            os.fchmod(out.fileno(), FILE_MODE)
        os.rename(partial, name, src_dir_fd=folder_fd, dst_dir_fd=folder_fd)
    except BaseException:
        try:
            os.unlink(partial, dir_fd=folder_fd)
        except OSError:
            pass
        raise
    return True


def collect(action, job, options, staged, task_vars, display=None):
    """Write the finished ``job``'s outputs (the paths cluster_rules.collected_paths names under
    ``options['jobs_dir']`` that the module returned in job['collected_files'], as they are; the
    rest are left out, as the module's collected_skipped says) and show its summary. Returns ``(what was collected, the failure message or None)``."""
    check = bool(action._task.check_mode)
    outputs = outputs_folder(options["outputs_dir"], job)
    returned = job.get("collected_files") or {}
    record, lines, sweep = report(job, staged, options.get("points") or [], outputs)
    folder_fd, changed = _open_folder(outputs, check)
    fetched, missing = [], []
    files = {"job.json": json.dumps(record, indent=4, sort_keys=True, separators=(",", ": ")) + "\n",
             "summary.txt": "\n".join(lines) + "\n"}
    try:
        for src in _rules.collected_paths(job, options["jobs_dir"]):
            if src not in returned:
                missing.append(src)  # the module said why (collected_skipped): never fetched instead
                continue
            changed |= _put(folder_fd, os.path.basename(src), base64.b64decode(returned[src]), check)
            fetched.append(src)
        for name, text in files.items():
            changed |= _put(folder_fd, name, text.encode("utf-8"), check)
    finally:
        if folder_fd is not None:
            os.close(folder_fd)
    if display is not None:
        for line in lines:
            display.display(line)
    failure = None
    if job.get("outcome") != "succeeded" and not options.get("cancelled"):
        failure = failure_message(job, sweep, record["failed_nodes"], outputs, record.get("failure"))
    return {"changed": changed, "dest": outputs, "fetched": fetched, "not_fetched": missing,
            "written": sorted(files), "summary": lines}, failure
