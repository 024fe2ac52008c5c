"""Running launch.yml as a user does, from the repo root, and reading what it brought back."""

import json
import os
import re
import subprocess
import uuid
from pathlib import Path

from cluster import REPO

TRAINER = "examples/train_ddp.py"


def unique_job_name(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def launch(outputs_dir, *extra_vars, inventory=None, check=False, timeout=600, env=None):
    """ansible-playbook launch.yml -e K=V ...; returns the finished process. ``env`` is added to
    the environment."""
    argv = ["ansible-playbook", "launch.yml", "-e", f"slurm_launch_outputs_dir={outputs_dir}"]
    if check:
        argv.append("--check")
    if inventory:
        argv += ["-i", str(inventory)]
    for item in extra_vars:
        argv += ["-e", item]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **env} if env else None)


def outputs_of(outputs_dir, job_name):
    """The one outputs/<job-name>-<job-id>/ folder of a job, and its job.json."""
    folders = sorted(Path(outputs_dir).glob(f"{job_name}-*"))
    assert len(folders) == 1, f"expected one outputs folder for {job_name}, found {folders}"
    return folders[0], json.loads((folders[0] / "job.json").read_text())


def submitted_job_id(stdout):
    match = re.search(r"Job (\d+) \(", stdout)
    assert match, stdout
    return int(match.group(1))


def next_job_id(cluster):
    """Slurm's next job id: unchanged means nothing was submitted."""
    config = cluster.slurm("scontrol", "show", "config").stdout
    return int(re.search(r"^NEXT_JOB_ID\s*=\s*(\d+)", config, re.M).group(1))


def forget_bad_nodes(*nodes, inventory=None):
    """ansible-playbook jobs.yml -e forget_node=NODE for each: a test whose job marks nodes of the
    shared cluster bad clears them, or the later launches there would be refused."""
    for node in nodes:
        argv = ["ansible-playbook", "jobs.yml", "-e", f"forget_node={node}"] + (["-i", str(inventory)] if inventory else [])
        proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
