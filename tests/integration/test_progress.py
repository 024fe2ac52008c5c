"""A launch shows its job move while it runs: state changes and the newest log lines arrive in
ansible-playbook's own output as they happen (read here from the live stream, line by line)."""

import json
import re
import subprocess
import threading
import time

from cluster import REPO
from launch import TRAINER, unique_job_name


def test_a_minute_long_job_shows_its_states_and_log_lines_while_it_runs(cluster, tmp_path):
    name = unique_job_name("progress")
    argv = ["ansible-playbook", "launch.yml", "-e", f"slurm_launch_outputs_dir={tmp_path}",
            "-e", "nodes=node110,node111", "-e", f"script={TRAINER}", "-e", "nproc_per_node=1",
            "-e", f"job_name={name}", "-e", json.dumps({"script_args": "--steps 45 --step-sleep 1 --log-every 1"})]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    lines = []  # (seconds since start, line) as each arrives

    def read():
        for line in proc.stdout:
            lines.append((time.monotonic() - started, line.rstrip("\n")))

    started = time.monotonic()
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert proc.wait(timeout=300) == 0, "\n".join(line for _, line in lines)
    finally:
        proc.kill()
    reader.join(10)
    ended = time.monotonic() - started
    text = "\n".join(line for _, line in lines)

    def first(pattern):
        found = [(at, line) for at, line in lines if re.search(pattern, line)]
        assert found, f"no line matches {pattern!r}:\n{text}"
        return found[0][0]

    running = first(rf"^job \d+ \({name}\): RUNNING on node110,node111$")
    log_line = first(r"^  \d+ \| \[rank0@node110\] \[rank0\] step=\d+ loss=")
    done = first(rf"^job \d+ \({name}\): COMPLETED, exit code 0, \d+ s$")
    assert running < log_line < done
    assert done - running > 30, "RUNNING was shown when the job started, not at its end"
    assert done - log_line > 10, "log lines were shown while the job ran"
    shown = [line for _, line in lines if re.match(r"^  \d+ \| ", line)]
    assert len(shown) == len(set(shown)), "each line of the log is shown once"
