# -*- coding: utf-8 -*-
"""The health gate's records, as the job script leaves them and a launch reports them.

Each attempt of a job whose launch has the gate (roles/slurm_launch/files/health_check.py, judged
in the batch shell) appends one JSON line to HEALTH_FILE in its run directory: what every node's
matmul took, the all-reduce across the nodes, the nodes named (slow or failing) and what the
job did (passed, requeued without them, failed). The slurm_job module reads the file of a final
job (its ``health``); job.json keeps it, and summary.txt says it in a line an attempt (the
gate's own summary_line). Standard library only: the module imports it.
"""

from __future__ import annotations

import json

# health_check.py's record_path writes it; a unit test holds the two to the same name.
HEALTH_FILE = "health-{job_id}.jsonl"
ACTIONS = ("pass", "requeue", "fail")


def parse_health(text):
    """The attempts' gate records of HEALTH_FILE's text, in the order written; lines that are no
    record (cut, or not the gate's) are left out."""
    records = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if (isinstance(record, dict) and record.get("action") in ACTIONS and isinstance(record.get("restart"), int)
                and isinstance(record.get("nodes"), dict) and isinstance(record.get("named"), list)):
            records.append(record)
    return records

