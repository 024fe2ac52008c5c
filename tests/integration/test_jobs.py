"""jobs.yml on the default local cluster: a user's jobs listed (Slurm's pending and running ones,
the collected finished ones), one followed live by its log, one cancelled and collected, and
another user's job refused."""

import json
import queue
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

from cluster import REPO, eventually
from launch import TRAINER, launch, submitted_job_id, unique_job_name


def jobs_playbook(outputs_dir, *extra_vars, popen=False):
    argv = ["ansible-playbook", "jobs.yml", "-e", f"slurm_launch_outputs_dir={outputs_dir}"]
    for item in extra_vars:
        argv += ["-e", item]
    if popen:
        return subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300)


def table_rows(stdout):
    """{job id: row cells} of the table jobs.yml prints (its debug msg, a block of lines)."""
    rows = {}
    for line in stdout.split("    msg: |-\n", 1)[1].split("\n\n", 1)[0].splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if cells[0].isdigit():
            rows[int(cells[0])] = cells
    return rows


def request(name, node, args, *extra):
    return [f"nodes={node}", f"script={TRAINER}", "nproc_per_node=1", f"job_name={name}",
            json.dumps({"script_args": args}), *extra]


def state_of(cluster, job_id):
    return cluster.slurm("squeue", "-h", "-j", str(job_id), "-o", "%T", check=False).stdout.strip()


def test_jobs_lists_follows_a_log_refuses_bobs_cancel_and_cancels(cluster, tmp_path):
    done_name, long_name, held_name = (unique_job_name(prefix) for prefix in ("done", "long", "held"))
    done = launch(tmp_path, *request(done_name, "node110", "--steps 2"))
    assert done.returncode == 0, done.stdout + done.stderr
    # Quiet: no preflight play skipped without -e preflight=true, no warning a real site would not show.
    assert "no hosts matched" not in done.stdout and "WARNING" not in done.stdout + done.stderr, done.stdout + done.stderr
    done_id = json.loads(next(Path(tmp_path).glob(f"{done_name}-*/job.json")).read_text())["job_id"]
    # The nodes resolve each other's names and addresses as a site does: torch's store has no
    # "[W... socket.cpp] hostname of the client socket cannot be retrieved" to log.
    log = (next(Path(tmp_path).glob(f"{done_name}-*")) / f"{done_name}-{done_id}.out").read_text()
    assert not [line for line in log.splitlines() if re.sub(r"^\[rank\d+@\S+\] ", "", line).startswith("[W")], log
    running = launch(tmp_path, *request(long_name, "node110", "--steps 600 --step-sleep 0.5 --log-every 1"), "wait=false")
    assert running.returncode == 0, running.stdout + running.stderr
    running_id = submitted_job_id(running.stdout)
    # Held (sbatch --hold): pending until released, whatever the nodes do.
    held = launch(tmp_path, *request(held_name, "node111", "--steps 2"), "wait=false",
                  json.dumps({"slurm_launch_extra_directives": ["--hold"]}))
    assert held.returncode == 0, held.stdout + held.stderr
    held_id = submitted_job_id(held.stdout)
    try:
        assert eventually(lambda: state_of(cluster, running_id) == "RUNNING", 60)

        listed = jobs_playbook(tmp_path)
        assert listed.returncode == 0, listed.stdout + listed.stderr
        rows = table_rows(listed.stdout)
        assert [job_id for job_id in rows if job_id in (done_id, running_id, held_id)] == [held_id, running_id, done_id]
        assert rows[held_id][1:4] == [held_name, "1", "PENDING (JobHeldUser)"]
        assert rows[running_id][1:4] == [long_name, "1", "RUNNING"] and rows[running_id][5] == "node110"
        assert rows[done_id][1:6] == [done_name, "1", "COMPLETED", "0", "node110"]
        assert rows[done_id][-1] == str(next(Path(tmp_path).glob(f"{done_name}-*")))

        # The log, live: lines the training writes after the follow began, while the job runs.
        log_path = cluster.nas / "jobs" / "alice" / long_name / "runs" / "1" / f"{long_name}-{running_id}.out"
        before = max(map(int, re.findall(r"\[rank0\] step=(\d+) ", log_path.read_text())), default=0)
        follow = jobs_playbook(tmp_path, f"logs={running_id}", popen=True)
        lines = queue.Queue()
        reader = threading.Thread(target=lambda: [lines.put(line) for line in follow.stdout], daemon=True)
        reader.start()
        steps = []
        deadline = time.monotonic() + 120
        while not (steps and steps[-1] > before + 4) and time.monotonic() < deadline:
            try:
                line = lines.get(timeout=5)
            except queue.Empty:
                continue
            match = re.match(rf"\s+{running_id} \| \[rank0@node110\] \[rank0\] step=(\d+) ", line)
            if match:
                steps.append(int(match.group(1)))
        assert steps and steps[-1] > before + 4, f"no live log lines of job {running_id} after step {before}: {steps}"
        assert steps == sorted(steps), "the tail, then each new line once, in order"
        assert state_of(cluster, running_id) == "RUNNING", "the lines came while the job ran"
        follow.send_signal(signal.SIGINT)  # Ctrl-C: stops following, not the job
        follow.wait(timeout=60)
        time.sleep(1)
        assert state_of(cluster, running_id) == "RUNNING"

        refused = jobs_playbook(tmp_path, "ansible_user=bob", f"cancel={running_id}")
        assert refused.returncode != 0
        assert f"job {running_id} belongs to alice, not to bob" in refused.stdout
        assert state_of(cluster, running_id) == "RUNNING"

        cancelled = jobs_playbook(tmp_path, f"cancel={running_id}")
        assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
        folder = Path(tmp_path) / f"{long_name}-{running_id}"
        job = json.loads((folder / "job.json").read_text())
        assert (job["job_id"], job["state"], job["run"]) == (running_id, "CANCELLED", 1)
        assert "[rank0] step=" in (folder / f"{long_name}-{running_id}.out").read_text(), "the log was collected"
        assert (folder / f"{long_name}-{running_id}.sbatch").exists()
        assert "CANCELLED" in (folder / "summary.txt").read_text() and f"{running_id} ({long_name})" in cancelled.stdout
        record = json.loads((cluster.nas / "jobs" / "alice" / long_name / "runs" / "1" / "run.json").read_text())
        assert (record["job_id"], record["state"].split()[0]) == (running_id, "CANCELLED")
    finally:
        cluster.slurm("scancel", str(running_id), str(held_id), check=False)
