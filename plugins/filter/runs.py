"""Runs of a job name (<jobs>/<user>/<name>/runs/<id>/) in words, and the table of a user's jobs
(jobs.yml): Slurm's pending and running jobs with the finished ones of the outputs folder."""

import json
import os
import re

from ansible.errors import AnsibleFilterError

# The run-path rule, shared with the slurm_job module; a launch's run in words, as its outputs say it.
from ansible_collections.hpc.slurm_train.plugins.module_utils import cluster_rules as _rules
from ansible_collections.hpc.slurm_train.plugins.plugin_utils.job_outputs import run_line
run_of_path = _rules.run_of_path
JOBS_SHOWN = 20
COLUMNS = ("job", "name", "run", "state", "exit", "nodes", "elapsed", "restarts", "cost", "outputs")


def _duration(seconds):
    if not isinstance(seconds, int) or isinstance(seconds, bool):
        return "-"
    minutes, secs = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _cost(cost):
    """'0.0133 GPU-h (0.0067 lost)' of job.json's cost (run_cost.ledger); '-' without one."""
    if not isinstance(cost, dict) or cost.get("hours") is None:
        return "-"
    lost = f" ({cost['lost_hours']} lost)" if cost.get("lost_hours") else ""
    return f"{cost['hours']} {cost.get('unit', 'GPU')}-h{lost}"


def _squeue_elapsed(text):
    """squeue's %M ("1-02:03:04", "2:03:04", "3:04") as seconds, or None."""
    match = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)", text or "")
    if not match:
        return None
    days, hours, minutes, secs = (int(part or 0) for part in match.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + secs


def collected_jobs(paths, texts, user=None):
    """The job.json files of the outputs folder (their paths, and their texts as
    query('ansible.builtin.file') reads them) as jobs with their folder as `outputs`; only the
    user's (the folder may hold jobs collected for another user), unreadable ones left out."""
    jobs = []
    for path, text in zip(paths, texts):
        try:
            job = json.loads(text)
        except ValueError:
            continue
        if isinstance(job, dict) and (user is None or job.get("user") in (user, None)):
            jobs.append({**job, "outputs": os.path.dirname(path)})
    return jobs


def _array_of(job_id):
    """The job id a row sorts by: a job's own, an array task's array ("12_3" -> 12); None otherwise."""
    if isinstance(job_id, int) and not isinstance(job_id, bool):
        return job_id
    match = re.fullmatch(r"(\d+)_.+", str(job_id))
    return int(match.group(1)) if match else None


def jobs_rows(active, finished):
    """The user's jobs as the table's cells (COLUMNS, text each), newest first: `active` from
    parse_squeue plus elapsed/work_dir (jobs.yml's squeue), `finished` the job.json of each
    outputs/<name>-<id>/ (with its folder as `outputs`). A job in both is Slurm's (a requeued
    job's job.json is older)."""
    if not isinstance(active, list) or not isinstance(finished, list):
        raise AnsibleFilterError("jobs_table: give two lists of jobs")
    rows = {}
    for job in finished:
        if not isinstance(job, dict) or not isinstance(job.get("job_id"), int):
            continue
        rows[job["job_id"]] = (
            str(job["job_id"]), str(job.get("name") or "-"), str(run_of_path(job.get("stdout_path")) or "-"),
            str(job.get("state") or "-"), str(job.get("exit_code") if job.get("exit_code") is not None else "-"),
            ",".join(job.get("nodes") or []) or "-", _duration(job.get("elapsed_seconds")),
            str(job.get("restarts") if job.get("restarts") is not None else "-"), _cost(job.get("cost")),
            str(job.get("outputs") or "-"))
    for job in active:
        if _array_of(job.get("job_id")) is None:
            continue  # a component of a heterogeneous job ("12+1"): not a launch's job
        # A sweep's tasks ("12_3", and "12_[4-7]" still pending) are a row each.
        work_dir = (job.get("work_dir") or "").rstrip("/") + "/"
        state = job["state"] + (f" ({job['reason']})" if job.get("reason") and job["state"] != "RUNNING" else "")
        rows[job["job_id"]] = (
            str(job["job_id"]), job["name"], str(run_of_path(work_dir) or "-"), state, "-",
            job.get("nodes") or "-", _duration(_squeue_elapsed(job.get("elapsed"))), "-", "-", "-")
    return [rows[job_id] for job_id in sorted(rows, key=lambda key: (_array_of(key), str(key)), reverse=True)]


def jobs_table(active, finished, show_all=False):
    """The lines of the table of jobs_rows: at most JOBS_SHOWN rows unless show_all; the last
    line says how many were left out."""
    ordered = jobs_rows(active, finished)
    shown = ordered if show_all else ordered[:JOBS_SHOWN]
    widths = [max(len(row[i]) for row in [COLUMNS, *shown]) for i in range(len(COLUMNS))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in [COLUMNS, *shown]]
    if not shown:
        lines.append("(no jobs: none pending or running in Slurm, none collected in the outputs folder)")
    if len(ordered) > len(shown):
        lines.append(f"... and {len(ordered) - len(shown)} older jobs (-e all=true shows them)")
    return lines


class FilterModule:
    def filters(self):
        return {"run_of_path": run_of_path, "run_line": run_line, "jobs_table": jobs_table,
                "collected_jobs": collected_jobs}
