"""launch, jobs, cancel, logs: launch.yml and jobs.yml as Python functions."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from . import _rules
from ._playbook import inventory_path, run_playbook


class LaunchError(RuntimeError):
    """The playbook failed before its job ended: the message is the failed task's own.

    ``job_id`` is the job's id when one was submitted or followed (a follow that timed out, a
    controller that did not answer), else None.
    """

    def __init__(self, message, job_id=None):
        super().__init__(message)
        self.message = message
        self.job_id = job_id


class JobFailed(LaunchError):
    """The job ran and did not succeed; its outputs were collected. ``result`` is its JobResult,
    the message the playbook's own ("job N (name) ended FAILED, exit code 1; ...", then the
    exception). ``failure`` is the first failed rank's exception as job.json has it: a dict of
    ``rank``, ``node``, ``type``, ``message`` and ``traceback`` (its last frames, a list of
    lines), or None when the log names none (a job killed, a node failure)."""

    def __init__(self, message, result):
        super().__init__(message, result.job_id)
        self.result = result
        self.failure = result.failure


@dataclass(frozen=True)
class JobResult:
    """A job as a launch, a cancel or a follow of its log left it.

    ``state`` is Slurm's (COMPLETED, FAILED, CANCELLED, RUNNING, PENDING...; None for a job Slurm
    does not know), ``outcome`` the slurm_job module's word for how it ended (succeeded, failed,
    cancelled, timeout, node_failure...; None while it runs), ``final`` whether it has ended.
    ``outputs`` is the outputs/<name>-<id>/ folder the playbook wrote (job.json, summary.txt, the
    log and script), ``summary`` its summary.txt, ``run_line`` which run of the job name it was,
    ``job`` the whole job.json: all four None (``job`` empty) where nothing was collected (a
    launch with wait=False, a log followed). ``result`` is the slurm_job task's result (of a failed
    task, its message and the job's keys only: the slurm_job action's FAILURE_KEYS).
    """

    job_id: int | None
    name: str | None
    state: str | None
    exit_code: int | None
    outcome: str | None
    final: bool
    outputs: Path | None = None
    summary: str | None = None
    run_line: str | None = None
    job: dict = field(default_factory=dict, compare=False)
    result: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def failure(self):
        """The first failed rank's exception (job.json's ``failure``): see JobFailed.failure."""
        return self.job.get("failure")

    @property
    def succeeded(self):
        """True for a job that ended as it should (state COMPLETED, exit code 0)."""
        return self.outcome == "succeeded"


def _common(extravars, user):
    """The -e values without the ones left unset, and the user to run as (-e ansible_user=NAME)."""
    values = {key: value for key, value in extravars.items() if value is not None}
    connection = sorted(key for key in values if key.startswith("ansible_"))
    if connection:
        # Ansible's own variables (connection, interpreter, become) are not a launch's to take from a
        # caller: a service that wraps this API would hand its users the controller.
        raise ValueError(f"{', '.join(connection)}: the API takes the launch's own keys only, not Ansible's "
                         "variables (run as another user with user=NAME; connection settings belong in the inventory)")
    if user is not None:
        values["ansible_user"] = user
    return values


def _job_result(run):
    """The JobResult of the run's last slurm_job task with a job, and the outputs folder it wrote
    job.json into (its ``collected``)."""
    res = run.last("hpc.slurm_train.slurm_job", lambda res: res.get("job_id") is not None)
    if res is None:
        return None
    collected = res.get("collected") or {}
    outputs = Path(collected["dest"]) if "job.json" in (collected.get("written") or []) else None
    job, summary = {}, None
    if outputs is not None:
        job = json.loads((outputs / "job.json").read_text(encoding="utf-8"))
        summary_file = outputs / "summary.txt"
        summary = summary_file.read_text(encoding="utf-8").rstrip("\n") if summary_file.exists() else None
    run_line = job.get("run_line")
    source = job or res
    return JobResult(job_id=source.get("job_id"), name=source.get("name"), state=source.get("state"),
                     exit_code=source.get("exit_code"), outcome=source.get("outcome") if res.get("final") else None,
                     final=bool(res.get("final")), outputs=outputs, summary=summary, run_line=run_line, job=job,
                     result=res)


def launch(script=None, nodes=None, group=None, num_nodes=None, *, inventory=None, user=None, on_progress=None,
           **extravars):
    """Build, submit, follow and collect a job: ``ansible-playbook launch.yml -e ...``.

    ``script``, ``nodes`` (``"node110,node111"``, ``"node[110-111]"`` or a list) or ``group`` with
    ``num_nodes``, and every other keyword are the playbook's ``-e`` names, short or long
    (``nproc_per_node=2``, ``script_args="--steps 5"`` or a list, ``job_name``, ``time_limit``,
    ``wait=False``, ``resume``, ``job_id``, ``slurm_launch_env={...}``; the README's table of
    launch parameters lists them). ``script`` (and ``code_dir``) may be relative to the current directory.
    ``inventory`` defaults to the repo's inventory/local, ``user`` runs as that user
    (``-e ansible_user=NAME``). ``on_progress(line)`` gets the playbook's progress lines as they
    come: ``job N (name): RUNNING on node110,node111`` and ``  N | <log line>``.

    Returns a JobResult: with the default wait=True, the finished job and its collected outputs
    (outputs/<name>-<id>/ of the repo unless slurm_launch_outputs_dir says otherwise); with
    wait=False, the job as submitted (PENDING or RUNNING, nothing collected).

    Every value is passed as data (a text with ``{{ }}``, ``{% %}`` or ``{# #}`` reaches the job as
    written, never templated on the controller), in a file only this user reads, never on a
    command line; secrets in ``slurm_launch_env`` are safe there, or name controller variables
    with ``env_from=["HF_TOKEN"]``. Ansible's own ``ansible_*`` variables are refused (``user``
    sets the one a launch needs).

    Raises ValueError, before anything runs, for a key the launch does not know or a value it
    refuses, with the playbook's message; LaunchError with the failed task's message when the
    playbook fails otherwise before the job ends (a rule only the playbook checks, such as the
    shape of nodes/group or the counts, a node that is down, a script that does not exist);
    JobFailed, carrying the JobResult, when the job ran and did not succeed (the playbook fails
    then too, after collecting the outputs). A job that succeeded never raises.
    """
    given = {"script": script, "nodes": nodes, "group": group, "num_nodes": num_nodes, **extravars}
    for key in ("script", "code_dir"):
        if isinstance(given.get(key), (str, Path)) and str(given[key]):
            # The path the caller means, resolved as the launch resolves it from its own directory.
            given[key] = _rules.script_path(str(given[key]))
    values = _common(given, user)
    _rules.check_keys(values, inventory_path(inventory))
    _rules.check_values(values)
    run = run_playbook("launch.yml", values, inventory, on_progress)
    result = _job_result(run)
    if run.status != "successful":
        if result is not None and result.outputs is not None and result.final:
            raise JobFailed(run.failure, result)
        raise LaunchError(run.failure, result.job_id if result else None)
    if result is None:
        raise LaunchError("launch.yml succeeded without a slurm_job result (nothing submitted or followed)")
    return result


def _jobs_playbook(extravars, user, inventory, on_line=None):
    """jobs.yml with these -e values, their keys checked first as the playbook checks them."""
    values = _common(extravars, user)
    _rules.check_keys(values, inventory_path(inventory))
    return run_playbook("jobs.yml", values, inventory, on_line)


def _jobs_job_result(key, job_id, extravars, user, inventory, on_line=None):
    """jobs.yml for one job (-e cancel=N, -e logs=N): the JobResult of its slurm_job task;
    LaunchError with the playbook's message when it failed, or when no task gave a result."""
    run = _jobs_playbook({key: job_id, **extravars}, user, inventory, on_line)
    result = _job_result(run)
    if run.status != "successful":
        raise LaunchError(run.failure, result.job_id if result else None)
    if result is None:
        raise LaunchError(f"jobs.yml -e {key}={job_id} gave no slurm_job result")
    return result


@dataclass(frozen=True)
class Listing:
    """What ``ansible-playbook jobs.yml`` lists: ``jobs`` as jobs() returns them, and ``bad_nodes``
    as bad_nodes() does."""

    jobs: list
    bad_nodes: list


def listing(all=False, *, inventory=None, user=None, **extravars):  # jobs.yml's own -e all
    """The user's jobs and bad nodes, from one run of jobs.yml: a Listing (see jobs() and bad_nodes())."""
    run = _jobs_playbook({"all": bool(all), **extravars}, user, inventory)
    if run.status != "successful":
        raise LaunchError(run.failure)
    found = run.last("hpc.slurm_train.bad_nodes", lambda res: "bad_nodes" in res) or {}
    return Listing(jobs=_jobs_rows(run, all), bad_nodes=list(found.get("bad_nodes") or []))


def jobs(all=False, *, inventory=None, user=None, **extravars):  # jobs.yml's own -e all
    """The user's jobs, newest first: ``ansible-playbook jobs.yml`` (``all=True``: -e all=true).

    Each a dict of the table's columns (job, name, run, state, exit, nodes, elapsed, restarts,
    outputs), each cell the text the table shows: pending and running jobs from Slurm (state
    with the reason a job waits), finished ones from the outputs folder's job.json files. At most
    the newest 20 unless ``all``. ``extravars`` are more -e values (slurm_launch_outputs_dir:
    the outputs folder to read), their keys checked as launch checks them. LaunchError with the
    playbook's message when it fails.
    """
    return listing(all, inventory=inventory, user=user, **extravars).jobs


def bad_nodes(*, inventory=None, user=None, **extravars):
    """The nodes kept out of the user's jobs (``<jobs>/<user>/nodes.json``, which jobs.yml lists),
    oldest mark first: each a dict of ``node``, ``reason`` (NODE_FAIL, GPU_CHECK, HUNG or HEALTH),
    ``since`` and ``until`` (seconds since the epoch), ``job_id`` and ``line`` (the same for people).
    LaunchError with the playbook's message when it fails."""
    return listing(inventory=inventory, user=user, **extravars).bad_nodes


def forget_node(node, *, inventory=None, user=None, **extravars):
    """Take ``node`` off the user's bad nodes: ``ansible-playbook jobs.yml -e forget_node=NODE``.
    Returns the line of what was forgotten, or None when the node was not one of them. LaunchError
    with the playbook's message for what is no node name, or when the playbook fails."""
    run = _jobs_playbook({"forget_node": node, **extravars}, user, inventory)
    if run.status != "successful":
        raise LaunchError(run.failure)
    forgot = run.last("hpc.slurm_train.bad_nodes", lambda res: res.get("forgotten"))
    return forgot["forgotten"] if forgot else None


def _jobs_rows(run, all):
    """The jobs table's rows of a jobs.yml run."""
    mine = run.last("hpc.slurm_train.slurm_job", lambda res: "jobs" in res)
    if mine is None:
        raise LaunchError("jobs.yml listed no jobs (no slurm_job list result)")
    found = run.last("ansible.builtin.find", lambda res: "files" in res) or {}
    paths = [item["path"] for item in found.get("files") or []]
    texts = []
    for path in paths:
        try:
            texts.append(Path(path).read_text(encoding="utf-8"))
        except OSError:
            texts.append("")
    finished = _rules.runs.collected_jobs(paths, texts, mine.get("user"))
    rows = _rules.runs.jobs_rows(mine.get("jobs") or [], finished)
    shown = rows if all else rows[:_rules.runs.JOBS_SHOWN]
    return [dict(zip(_rules.runs.COLUMNS, row)) for row in shown]


def cancel(job_id, *, inventory=None, user=None, **extravars):
    """Cancel a job of the user, wait until Slurm says it ended, collect it:
    ``ansible-playbook jobs.yml -e cancel=N``.

    Returns the JobResult of the ended job (state CANCELLED, or how it ended if it ended first)
    with its outputs folder; for a job Slurm does not know, a JobResult with state None and
    nothing collected. LaunchError with the playbook's message for another user's job
    ("job N belongs to bob, not to alice") or a bad id. ``extravars`` as for jobs().
    """
    return _jobs_job_result("cancel", job_id, extravars, user, inventory)


# The slurm_job action plugin's log lines: "  <job id> | <line of the log>".
_LOG_LINE = re.compile(r"^\s*(\d+) \| (.*)$")


def logs(job_id, on_line=None, *, inventory=None, user=None, **extravars):
    """Follow a job's log until the job ends: ``ansible-playbook jobs.yml -e logs=N``.

    ``on_line(line)`` gets the log's tail, then each new line, as the playbook prints them (each
    line of the log as it is, without the ``  N | `` in front). Returns when the job has ended,
    with its JobResult (nothing collected: cancel or a launch with job_id=N collects). A job that
    failed does not raise (jobs.yml does not fail for it either); LaunchError with the playbook's
    message when the playbook fails (another user's job, a bad id). ``extravars`` as for jobs()
    (slurm_launch_logs_every: seconds between looks, 5).
    """
    def each(line):
        match = _LOG_LINE.match(line)
        if match and on_line is not None and match.group(1) == str(job_id):
            on_line(match.group(2))

    return _jobs_job_result("logs", job_id, extravars, user, inventory, each)


def preflight(nodes=None, group=None, num_nodes=None, *, inventory=None, user=None, on_line=None, **extravars):
    """Check the nodes a job would use: ``ansible-playbook preflight.yml -e nodes=...`` (or
    ``group`` with ``num_nodes``; the other keywords as for launch()).

    Returns the lines of its summary table (each node's checks, then the all-reduce's figures),
    also written to outputs/preflight-<partition>.txt. LaunchError with the playbook's message
    when a check failed (each problem names its node and the likely fix) or the playbook failed.
    ``on_line(line)`` gets the progress lines of its all-reduce job, as launch()'s on_progress.
    """
    values = _common({"nodes": nodes, "group": group, "num_nodes": num_nodes, "preflight": True, **extravars}, user)
    _rules.check_keys(values, inventory_path(inventory))
    run = run_playbook("preflight.yml", values, inventory, on_line)
    if run.status != "successful":
        raise LaunchError(run.failure)
    summary = run.last("ansible.builtin.debug", lambda res: isinstance(res.get("msg"), list))
    if summary is None:
        raise LaunchError("preflight.yml ended without its summary")
    return list(summary["msg"])
