"""A failed job says why, and a launch shows the training's lines as they come.

A script that raises on rank 1 only: the playbook's failure (JobFailed's message), summary.txt,
job.json and JobFailed.failure name rank 1, its node and the exception's type and message. A
script that prints a timestamped line every second: ansible-playbook's own output (read here
line by line, each line timed as it arrives) shows each line within 5 s of the training writing
it, the two times on this machine's one clock; so do the API's on_progress, for no more Slurm
commands than a follow without live lines, and `jobs.yml -e logs=N`."""

import json
import re
import subprocess
import sys
import threading
import time

import pytest

from cluster import REPO, eventually
from launch import unique_job_name

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import slurm_train  # noqa: E402

RAISE_ON_RANK_1 = '''\
import os
import time

import torch
import torch.distributed as dist


def check_batch(step, rows):
    if int(os.environ["RANK"]) == 1 and step == 3:
        raise ValueError(f"bad batch at step {step}: {rows} rows, expected 32")


dist.init_process_group("gloo")
for step in range(1, 6):
    print(f"step={step}")
    check_batch(step, 31)
    dist.all_reduce(torch.ones(1))  # rank 0 waits here for rank 1, and fails when it is gone
    time.sleep(0.5)
'''

# Plain print(): the job script makes Python's output unbuffered.
TIMESTAMPED_LINES = '''\
import time

for n in range(LINES):
    print(f"live line {n} written at {time.time():.3f}")
    time.sleep(1)
'''
LINES = 15


def test_a_rank_that_raises_is_named_with_its_node_and_exception(cluster, tmp_path):
    script = tmp_path / "code" / "raise_on_rank_1.py"
    script.parent.mkdir()
    script.write_text(RAISE_ON_RANK_1)
    name = unique_job_name("why-failed")
    with pytest.raises(slurm_train.JobFailed) as raised:
        slurm_train.launch(script=str(script), nodes="node110,node111", nproc_per_node=1, job_name=name,
                           slurm_launch_outputs_dir=str(tmp_path / "outputs"))
    failed = raised.value.result
    assert (failed.state, failed.exit_code) == ("FAILED", 1)
    raised_line = "rank 1 on node111 raised ValueError: bad batch at step 3: 31 rows, expected 32"
    failure = raised.value.failure
    assert {key: failure[key] for key in ("rank", "node", "type", "message")} == {
        "rank": 1, "node": "node111", "type": "ValueError", "message": "bad batch at step 3: 31 rows, expected 32"}
    assert failure["traceback"][-1] == 'raise ValueError(f"bad batch at step {step}: {rows} rows, expected 32")'
    # The playbook's failure says it on its second line, before the log's last lines.
    assert raised.value.message.splitlines()[1] == raised_line, raised.value.message
    summary = (failed.outputs / "summary.txt").read_text()
    assert f"failure    {raised_line}\n" in summary, summary
    assert json.loads((failed.outputs / "job.json").read_text())["failure"] == failure
    # Rank 0 failed too, after rank 1 was gone: its error is in the log, not the failure.
    log = (failed.outputs / f"{name}-{failed.job_id}.out").read_text()
    assert re.search(r"^\[rank0@node110\] \[rank0\]: RuntimeError: .*Connection closed by peer", log, re.M), log


def test_a_line_the_training_writes_is_shown_by_the_launch_within_5_s(cluster, tmp_path):
    script = tmp_path / "code" / "timestamped_lines.py"
    script.parent.mkdir()
    script.write_text(TIMESTAMPED_LINES.replace("LINES", str(LINES)))
    name = unique_job_name("live-lines")
    argv = ["ansible-playbook", "launch.yml", "-e", f"slurm_launch_outputs_dir={tmp_path / 'outputs'}",
            "-e", "nodes=node110", "-e", f"script={script}", "-e", "nproc_per_node=1", "-e", f"job_name={name}"]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    lines = []  # (time.time() as the line arrived, line)

    def read():
        for line in proc.stdout:
            lines.append((time.time(), line.rstrip("\n")))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert proc.wait(timeout=300) == 0, "\n".join(line for _, line in lines)
    finally:
        proc.kill()
    reader.join(10)
    text = "\n".join(line for _, line in lines)
    shown = {}
    for at, line in lines:
        match = re.match(r"^  \d+ \| \[rank0@node110\] live line (\d+) written at ([\d.]+)$", line)
        if match:
            shown.setdefault(int(match.group(1)), at - float(match.group(2)))
    assert sorted(shown) == list(range(LINES)), f"every line shown once the job wrote it:\n{text}"
    delays = [shown[n] for n in range(LINES)]
    print("seconds from the training's line to the launch's:", " ".join(f"{delay:.2f}" for delay in delays))
    assert max(delays) < 5, delays
    assert min(delays) >= 0, "the line was shown after it was written"


def test_the_api_gets_the_lines_as_they_come_for_no_more_slurm_queries_than_a_quiet_follow(cluster, tmp_path):
    script = tmp_path / "code" / "timestamped_lines.py"
    script.parent.mkdir()
    script.write_text("import time\ntime.sleep(5)\n" + TIMESTAMPED_LINES.replace("LINES", str(LINES)))
    job = slurm_train.launch(script=str(script), nodes="node110", nproc_per_node=1, wait=False,
                             job_name=unique_job_name("live-api"), slurm_launch_outputs_dir=str(tmp_path))
    try:
        assert eventually(lambda: "JobState=RUNNING" in cluster.slurm(
            "scontrol", "show", "job", "-o", str(job.job_id), check=False).stdout, 300)
        # Two followers of the one running job from the same moment: logs() with live lines, and
        # one module run to the job's end (slurm_launch_logs_every=0, no slices): what Slurm is
        # asked without live lines. The slices that end for new lines ask it nothing.
        arrived, followed = [], {}

        def follow(key, **extra):
            followed[key] = slurm_train.logs(job.job_id, **extra)

        threads = [threading.Thread(target=follow, args=("live",), kwargs={
                       "on_line": lambda line: arrived.append((time.time(), line))}),
                   threading.Thread(target=follow, args=("quiet",), kwargs={"slurm_launch_logs_every": 0})]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(180)
    finally:
        cluster.slurm("scancel", str(job.job_id), check=False)
    assert set(followed) == {"live", "quiet"} and followed["live"].state == "COMPLETED", followed
    delays = {}
    for at, line in arrived:
        match = re.search(r"^\[rank0@node110\] live line (\d+) written at ([\d.]+)$", line)
        if match:
            delays.setdefault(int(match.group(1)), at - float(match.group(2)))
    assert sorted(delays) == list(range(LINES)) and max(delays.values()) < 5, (delays, arrived)
    live, quiet = followed["live"].result["queries"], followed["quiet"].result["queries"]
    print(f"Slurm commands while following: live {live}, quiet {quiet}")
    assert live <= quiet, (live, quiet)


def test_jobs_logs_shows_each_new_line_within_5_s(cluster, tmp_path):
    script = tmp_path / "code" / "timestamped_lines.py"
    script.parent.mkdir()
    script.write_text(TIMESTAMPED_LINES.replace("LINES", str(LINES)))
    submitted = slurm_train.launch(script=str(script), nodes="node110", nproc_per_node=1, wait=False,
                                   job_name=unique_job_name("live-logs"), slurm_launch_outputs_dir=str(tmp_path))
    follow_started = time.time()
    proc = subprocess.Popen(["ansible-playbook", "jobs.yml", "-e", f"logs={submitted.job_id}"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    lines = []
    try:
        for line in proc.stdout:
            lines.append((time.time(), line.rstrip("\n")))
        assert proc.wait(timeout=120) == 0, "\n".join(line for _, line in lines)
    finally:
        proc.kill()
        cluster.slurm("scancel", str(submitted.job_id), check=False)
    delays = {}
    for at, line in lines:
        match = re.match(rf"^  {submitted.job_id} \| \[rank0@node110\] live line (\d+) written at ([\d.]+)$", line)
        if match and float(match.group(2)) > follow_started:  # the tail shown first was written before
            delays.setdefault(int(match.group(1)), at - float(match.group(2)))
    assert delays and max(delays) == LINES - 1, "\n".join(line for _, line in lines)
    print("jobs.yml -e logs=N, seconds from the training's line to its own:",
          " ".join(f"{delays[n]:.2f}" for n in sorted(delays)))
    assert max(delays.values()) < 5, delays
