# -*- coding: utf-8 -*-
"""What a job cost, across every attempt (requeue) and every array task: GPU-hours (CPU-hours for
a job without GPUs), the part lost, the steps redone and the time spent waiting in the queue.

Two sources: sacct (``-D`` prints one line per attempt: its state, ElapsedRaw, AllocTRES and the
times), and the job script's own record, ``attempts-<job id>.tsv`` beside each log
(templates/train.sbatch.j2): a line when an attempt starts and one when it ends, with the
checkpoint's step and time, so that the part of a failed attempt after its last checkpoint can be
told from the part it saved. sacct's figures win where it answers; without accounting the ledger is
the script's, and says so.

Each attempt's health gate (roles/slurm_launch/files/health_check.py) leaves its own record
beside them, ``health-<job id>.jsonl``: a JSON line an attempt, read back by parse_health.

Standard library only: the slurm_job module imports it on the login node.
"""

from __future__ import annotations

import datetime
import json

# What sacct is asked for the ledger (-n -P -D -X): one line per attempt, oldest first.
COST_FIELDS = ("JobIDRaw", "JobID", "State", "ElapsedRaw", "AllocTRES", "Eligible", "Start")
# An attempt that ended in these sacct states lost what it did after its last checkpoint.
LOST_STATES = ("FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL")
# The job script's own word for such an attempt (sacct says REQUEUED of one it requeued): a rank
# failed, or the hang watchdog stopped it.
LOST_OUTCOMES = ("failed", "hung")
ATTEMPTS_FILE = "attempts-{job_id}.tsv"
# health_check.py's record_path writes it; a unit test holds the two to the same name.
HEALTH_FILE = "health-{job_id}.jsonl"
HEALTH_ACTIONS = ("pass", "requeue", "fail")
SOURCE_SACCT = "sacct"
# A job that ran once, still known to slurmctld: its record holds the figures that slurmctld hands
# slurmdbd, which sacct would print, without a query to slurmdbd.
SOURCE_SLURMCTLD = "slurmctld's record of the job"
SOURCE_SCRIPT = "the job script's own record (no accounting: sacct did not answer)"


def _int(text):
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def _time(text):
    try:
        return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S")
    except (TypeError, ValueError):  # Unknown, None
        return None


def tres_count(tres, name):
    """The count of ``name`` in a TRES list such as ``cpu=8,mem=1G,node=2,billing=8,gres/gpu=4``."""
    for item in (tres or "").split(","):
        key, _, value = item.partition("=")
        if key == name:
            return _int(value)
    return None


def parse_cost_sacct(stdout):
    """Attempts from ``sacct -n -P -D -X -o COST_FIELDS``, in sacct's order: dicts of job_id (the
    task's own, JobIDRaw), task (an array task's id, '' for a plain job), state (its first word), elapsed_seconds, gpus, cpus and queue_seconds
    (Start - Eligible; None while unknown)."""
    attempts = []
    for line in stdout.splitlines():
        if not line.strip():
            continue
        values = line.split("|")
        if len(values) != len(COST_FIELDS):
            raise ValueError(f"sacct printed {line!r}: expected {len(COST_FIELDS)} fields {COST_FIELDS}")
        row = dict(zip(COST_FIELDS, values))
        eligible, start = _time(row["Eligible"]), _time(row["Start"])
        attempts.append({
            "job_id": _int(row["JobIDRaw"]), "task": row["JobID"].partition("_")[2],
            "state": (row["State"].split() or ["UNKNOWN"])[0],
            "elapsed_seconds": _int(row["ElapsedRaw"]) or 0,
            "gpus": tres_count(row["AllocTRES"], "gres/gpu") or 0, "cpus": tres_count(row["AllocTRES"], "cpu") or 0,
            "queue_seconds": max(0, int((start - eligible).total_seconds())) if eligible and start else None})
    return attempts


def scontrol_attempt(record):
    """The one attempt of a final job that ran once, in parse_cost_sacct's shape, from slurmctld's
    record of it (``scontrol show job``'s fields and their parsed job_id, state, elapsed_seconds);
    None when the record lacks the allocation or the start (a record carried between slices)."""
    tres = record.get("AllocTRES") or record.get("TRES")  # TRES: the allocation's, in Slurm 22.05
    eligible, start = _time(record.get("EligibleTime")), _time(record.get("StartTime"))
    if not tres or start is None or record.get("elapsed_seconds") is None:
        return None
    return {"job_id": record["job_id"], "task": "", "state": record["state"], "elapsed_seconds": record["elapsed_seconds"],
            "gpus": tres_count(tres, "gres/gpu") or 0, "cpus": tres_count(tres, "cpu") or 0,
            "queue_seconds": max(0, int((start - eligible).total_seconds())) if eligible else None}


def _names(field):
    return [] if field in ("", "-") else field.split(",")


def parse_attempts(text):
    """The job script's record (ATTEMPTS_FILE) as {restart: {"start": {...}, "end": {...} or None}}."""
    attempts = {}
    for line in text.splitlines():
        fields = line.split("\t")
        kind, restart = fields[0], _int(fields[1]) if len(fields) > 1 else None
        if restart is None:
            continue
        if kind == "start" and len(fields) == 7:
            attempts[restart] = {"start": {"time": _int(fields[2]), "step": _int(fields[3]), "checkpoint_time": _int(fields[4]),
                                           "gpus": _int(fields[5]) or 0, "cpus": _int(fields[6]) or 0}, "end": None}
        elif kind == "end" and len(fields) == 7 and restart in attempts:
            attempts[restart]["end"] = {"time": _int(fields[2]), "outcome": fields[3], "step": _int(fields[4]),
                                        "checkpoint_time": _int(fields[5]), "reached": _int(fields[6])}
        elif kind == "hang" and len(fields) in (6, 7) and restart in attempts:
            # The hang watchdog's record: suspect nodes, stack dumps and NCCL flight-recorder dumps
            # (a script older than those has none), comma-separated ('-': none).
            attempts[restart]["hang"] = {"time": _int(fields[2]), "suspect_nodes": _names(fields[3]),
                                         "step": _int(fields[4]), "stack_dumps": _names(fields[5]),
                                         "flight_recorder_dumps": _names(fields[6]) if len(fields) == 7 else []}
    return attempts


def _attempt(index, record, following, accounted):
    """One attempt's line of the ledger: the script's record joined with sacct's (accounted, or None)."""
    start = (record or {}).get("start") or {}
    end = (record or {}).get("end")
    if accounted is not None:
        elapsed, state = accounted["elapsed_seconds"], accounted["state"]
        gpus, cpus, queue = accounted["gpus"], accounted["cpus"], accounted["queue_seconds"]
    else:
        elapsed = end["time"] - start["time"] if end and end.get("time") and start.get("time") else None
        state = None
        gpus, cpus, queue = start.get("gpus", 0), start.get("cpus", 0), None
    # Cut (no end of its own: a node failure killed the script), the checkpoint it left is the one
    # the next attempt started from.
    checkpoint_time = (end or {}).get("checkpoint_time") if end else ((following or {}).get("start") or {}).get("checkpoint_time")
    failed = (state in LOST_STATES) or (end or {}).get("outcome") in LOST_OUTCOMES or (record is not None and end is None
                                                                                 and following is not None)
    lost = 0
    if failed and elapsed is not None:
        saved = 0
        if checkpoint_time and start.get("time") and checkpoint_time > start["time"]:
            saved = min(elapsed, checkpoint_time - start["time"])
        lost = elapsed - saved
    hang = (record or {}).get("hang")
    return {"restart": index, "state": state or (end or {}).get("outcome") or "cut", "elapsed_seconds": elapsed,
            "gpus": gpus, "cpus": cpus, "queue_seconds": queue, "lost_seconds": lost if elapsed is not None else None,
            **({"hang": hang} if hang else {})}


def ledger(records, accounted=None, source=SOURCE_SACCT):
    """The ledger of one job, or of each task of an array. ``records``: {job id: parse_attempts()}
    of each task's (or the job's) own id; ``accounted``: parse_cost_sacct() of the job (or
    scontrol_attempt()'s one attempt, ``source`` SOURCE_SLURMCTLD), or None without accounting.
    Hours are GPU-hours, or CPU-hours when no attempt had a GPU."""
    tasks = {}
    if accounted is not None:
        for row in accounted:
            tasks.setdefault(row["job_id"], {"rows": [], "record": records.get(row["job_id"]) or {}})["rows"].append(row)
    else:
        for job_id, record in records.items():
            tasks[job_id] = {"rows": None, "record": record}
    attempts, steps_redone = [], 0
    for job_id, task in sorted(tasks.items(), key=lambda item: item[0] or 0):
        record = task["record"]
        count = len(task["rows"]) if task["rows"] is not None else (max(record) + 1 if record else 0)
        for index in range(count):
            line = _attempt(index, record.get(index), record.get(index + 1),
                            task["rows"][index] if task["rows"] is not None else None)
            attempts.append({"job_id": job_id, **line})
            # After a resume, the steps done again: what the last attempt reached past the checkpoint this one took.
            before, this = record.get(index - 1), record.get(index)
            reached = ((before or {}).get("end") or {}).get("reached")
            resumed_at = ((this or {}).get("start") or {}).get("step")
            if index and reached is not None and resumed_at is not None and reached > resumed_at:
                steps_redone += reached - resumed_at
    unit = "GPU" if any(attempt["gpus"] for attempt in attempts) else "CPU"
    per = "gpus" if unit == "GPU" else "cpus"

    def hours(seconds_key):
        return round(sum((attempt[seconds_key] or 0) * attempt[per] for attempt in attempts) / 3600, 4)

    known = [attempt["queue_seconds"] for attempt in attempts if attempt["queue_seconds"] is not None]
    return {"source": source if accounted is not None else SOURCE_SCRIPT, "unit": unit,
            "hours": hours("elapsed_seconds"), "lost_hours": hours("lost_seconds"), "steps_redone": steps_redone,
            "queue_seconds": sum(known) if known else None, "attempts": attempts}


def cost_line(cost):
    """summary.txt's line: '0.0125 GPU-hours over 2 attempts, 0.01 lost, 1 step redone, 12 s queued (sacct)'."""
    queued = f"{cost['queue_seconds']} s queued" if cost.get("queue_seconds") is not None else "time queued unknown"
    steps = cost.get("steps_redone", 0)
    return (f"{cost['hours']} {cost['unit']}-hours over {len(cost['attempts'])} attempt"
            f"{'' if len(cost['attempts']) == 1 else 's'}, {cost['lost_hours']} lost, {steps} step"
            f"{'' if steps == 1 else 's'} redone, {queued} (from {cost['source']})")


def parse_health(text):
    """The attempts' gate records of HEALTH_FILE's text, in the order written; lines that are no
    record (cut, or not the gate's) are left out."""
    records = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if (isinstance(record, dict) and record.get("action") in HEALTH_ACTIONS
                and isinstance(record.get("restart"), int) and isinstance(record.get("nodes"), dict)
                and isinstance(record.get("named"), list)):
            records.append(record)
    return records
