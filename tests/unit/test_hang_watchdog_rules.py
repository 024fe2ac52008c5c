"""The hang watchdog's parts that need no cluster: the suspect-node rule over py-spy dumps
(roles/slurm_launch/files/hang_dump.py), hang_minutes as the launch takes it, the job script with
and without a watchdog, and the hang as the run's ledger, job.json and summary.txt tell it. The
whole watchdog runs in tests/integration/test_hang_watchdog.py."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.hpc.slurm_train.plugins.plugin_utils import launch_request
from ansible_collections.hpc.slurm_train.plugins.module_utils import run_cost
from ansible_collections.hpc.slurm_train.plugins.plugin_utils import job_outputs
from ansible_collections.hpc.slurm_train.roles.slurm_launch.files import hang_dump
from test_job_template import in_dir, job, render

# py-spy 0.4.2's dump of a worker, as it prints it (a thread besides the main one).
BLOCKED = '''\
Process 1779: /nas/envs/train/bin/python -u train.py
Python v3.11.2 (/nas/envs/train/bin/python3.11)

Thread 1779 (idle): "MainThread"
    all_reduce (torch/distributed/distributed_c10d.py:2950)
    wrapper (torch/distributed/c10d_logger.py:81)
    <module> (train.py:51)
Thread 1801 (idle): "Thread-1 (_pin_memory_loop)"
    _pin_memory_loop (torch/utils/data/_utils/pin_memory.py:59)
    run (threading.py:982)'''
WAITING = '''\
Process {pid}: /nas/envs/train/bin/python -u train.py
Python v3.11.2 (/nas/envs/train/bin/python3.11)

Thread 1801 (idle): "Thread-1 (_pin_memory_loop)"
    _pin_memory_loop (torch/utils/data/_utils/pin_memory.py:59)
Thread {pid} (idle): "MainThread"
    _engine_run_backward (torch/autograd/graph.py:979)
    backward (torch/_tensor.py:648)
    <module> (train.py:56)'''


def dump_file(node, ranks):
    """A hang dump as hang_dump.dump writes it: {rank: py-spy's text} of one node."""
    lines = [f"# hang of job 41 (restart 0) on {node}, 2026-12-07 05:48:10: {len(ranks)} torchrun worker(s)"]
    for rank, text in ranks.items():
        lines += [hang_dump.HEADER.format(rank=rank, node=node, pid=1000 + rank, step=1), text]
    return "\n".join(lines) + "\n"


def test_the_innermost_frame_is_the_main_threads_first_line_whatever_the_threads_order():
    frames = hang_dump.innermost_frames(dump_file("node111", {2: WAITING.format(pid=1778), 3: BLOCKED}))
    assert frames == {2: ("node111", "_engine_run_backward (torch/autograd/graph.py:979)", "1"),
                      3: ("node111", "all_reduce (torch/distributed/distributed_c10d.py:2950)", "1")}


def test_a_dump_without_py_spy_has_ranks_and_no_frames():
    text = ("# hang of job 41 (restart 0) on node110, ...: 2 torchrun worker(s)\n# py-spy is not on this node's PATH\n"
            + "\n".join(hang_dump.HEADER.format(rank=r, node="node110", pid=9, step=1) for r in (0, 1)) + "\n")
    assert hang_dump.innermost_frames(text) == {0: ("node110", None, "1"), 1: ("node110", None, "1")}


@pytest.mark.parametrize("frames, suspects", [
    # One rank of four elsewhere: its node.
    ({0: ("node110", "b", "1"), 1: ("node110", "b", "1"), 2: ("node111", "b", "1"), 3: ("node111", "a", "1")},
     ["node111"]),
    # All in the same frame: the dumps do not tell.
    ({0: ("node110", "b", "1"), 1: ("node111", "b", "1"), 2: ("node111", "b", "1")}, []),
    # Two against two, or one against one: no majority, nobody named.
    ({0: ("node110", "a", "1"), 1: ("node110", "a", "1"), 2: ("node111", "b", "1"), 3: ("node111", "b", "1")}, []),
    ({0: ("node110", "a", "1"), 1: ("node111", "b", "1")}, []),
    # Ranks without stacks (no py-spy) count for nothing: one rank with a frame tells nothing.
    ({0: ("node110", None, "1"), 1: ("node111", "a", "1")}, []),
    ({0: ("node110", None, "1"), 1: ("node110", None, "1"), 2: ("node111", "a", "1")}, []),
    # Two odd ranks on two nodes, against three: both nodes, once each.
    ({0: ("n1", "x", "1"), 1: ("n1", "x", "1"), 2: ("n2", "x", "1"), 3: ("n3", "y", "1"), 4: ("n4", "z", "1")},
     ["n3", "n4"]),
])
def test_the_suspects_are_the_nodes_of_ranks_outside_the_majoritys_frame(frames, suspects):
    assert hang_dump.suspect_nodes(frames) == suspects


def test_the_suspects_command_prints_the_nodes_and_the_steps_to_kill(tmp_path):
    (tmp_path / "hang-41-0-node110.txt").write_text(dump_file("node110", {0: WAITING.format(pid=1), 1: WAITING.format(pid=2)}))
    (tmp_path / "hang-41-0-node111.txt").write_text(dump_file("node111", {2: WAITING.format(pid=3), 3: BLOCKED}))
    out = subprocess.run([sys.executable, hang_dump.__file__, "suspects", *sorted(map(str, tmp_path.iterdir()))],
                         capture_output=True, text=True, check=True).stdout
    assert out == "node111\n1\n"


def test_hang_minutes_takes_fractions_and_zero_and_refuses_the_rest():
    assert [launch_request.hang_minutes(value) for value in ("30", 30, "0.5", 0.1, "0", "")] == [30, 30, 0.5, 0.1, 0, 0]
    for bad in ("-1", "abc", True, "nan", str(launch_request.MAX_HANG_MINUTES + 1)):
        assert launch_request.hang_minutes(bad) is None, bad
        assert launch_request.value_problems({"hang_minutes": bad}) == [
            f"hang_minutes={bad!r} is not allowed: {launch_request.HANG_MINUTES_RULE}"]


def test_hang_minutes_zero_leaves_no_watchdog_in_the_job_script(tmp_path):
    script = render(in_dir(tmp_path, hang_minutes=0, hang_dump="/nas/jobs/alice/train/runs/1/hang_dump.py"))
    (tmp_path / "job.sbatch").write_text(script)
    subprocess.run(["bash", "-n", str(tmp_path / "job.sbatch")], check=True)
    for word in ("watch_for_hang", "HANG_SECONDS", "hang_dump.py dump", "hang_dump.py suspects", "--overlap",
                 'mark_bad_node "$node" HUNG'):
        assert word not in script, word
    # The heartbeat is there all the same: a training may touch it whether or not it is watched; and
    # the torchrun wrapper keeps a dump NCCL wrote itself by the dumper's rules.
    assert 'export TRAINING_HEARTBEAT="$RUN_DIR/.$SLURM_JOB_ID.heartbeat"' in script.splitlines()
    assert "export TRAINING_HANG_DUMP=/nas/jobs/alice/train/runs/1/hang_dump.py" in script.splitlines()


def test_a_watchdog_of_a_fraction_of_a_minute_watches_whole_seconds(tmp_path):
    script = render(in_dir(tmp_path, hang_minutes=0.1, hang_dump="/nas/jobs/alice/train/runs/1/hang_dump.py"))
    (tmp_path / "job.sbatch").write_text(script)
    subprocess.run(["bash", "-n", str(tmp_path / "job.sbatch")], check=True)
    lines = script.splitlines()
    assert "HANG_SECONDS=6" in lines
    assert "mark_bad_node() {" in lines, "the watchdog's marks have the job script's own mark_bad_node"
    assert any("srun --overlap" in line for line in lines)
    assert any("python /nas/jobs/alice/train/runs/1/hang_dump.py dump" in line for line in lines)


def test_the_launchs_train_job_refuses_a_bad_hang_minutes_naming_it():
    values = {**job(), "node_group": "gpu_A6000", "nccl_env_dir": "/starmap/nas/env", "hang_minutes": "-5"}
    values.pop("nccl_env_file")
    with pytest.raises(AnsibleFilterError, match=r"hang_minutes='-5' is not allowed: give minutes"):
        launch_request.train_job(values)
    assert launch_request.train_job({**values, "hang_minutes": "0.25"})["hang_minutes"] == 0.25


ATTEMPTS = ("start\t0\t1000\t-\t-\t0\t4\n"
            "end\t0\t1100\thung\t15\t1060\t20\n"
            "hang\t0\t1100\tnode111\t20\thang-41-0-node110.txt,hang-41-0-node111.txt\n"
            "start\t1\t1130\t15\t1060\t0\t4\n"
            "end\t1\t1200\tok\t30\t1190\t30\n")


def test_a_hung_attempt_is_lost_after_its_checkpoint_and_carries_its_hang():
    cost = run_cost.ledger({41: run_cost.parse_attempts(ATTEMPTS)})
    first, second = cost["attempts"]
    assert first["state"] == "hung" and first["lost_seconds"] == 100 - 60
    assert first["hang"] == {"time": 1100, "suspect_nodes": ["node111"], "step": 20,
                             "stack_dumps": ["hang-41-0-node110.txt", "hang-41-0-node111.txt"],
                             "flight_recorder_dumps": []}
    assert "hang" not in second and second["lost_seconds"] == 0
    assert cost["steps_redone"] == 5


def test_job_json_and_the_summary_name_the_hung_attempt_and_its_node():
    cost = run_cost.ledger({41: run_cost.parse_attempts(ATTEMPTS)})
    job_result = {"job_id": 41, "name": "train", "state": "COMPLETED", "outcome": "succeeded", "exit_code": 0,
                  "restarts": 1, "nodes": ["node110", "node111"], "cost": cost}
    record, lines, _ = job_outputs.report(job_result, {}, [], "/out")
    assert record["hangs"] == [{"job_id": 41, "restart": 0, "state": "HUNG", "time": 1100, "suspect_nodes": ["node111"],
                                "step": 20, "stack_dumps": ["hang-41-0-node110.txt", "hang-41-0-node111.txt"],
                                "flight_recorder_dumps": []}]
    assert ("hung       attempt 0 of job 41 HUNG at step 20: suspect node111; stacks in hang-41-0-node110.txt, "
            "hang-41-0-node111.txt (the run's directory)") in lines
    # Without suspects (the stacks did not tell), none is named; a job that never hung has no row.
    unnamed = ATTEMPTS.replace("\tnode111\t", "\t-\t")
    _, lines, _ = job_outputs.report({**job_result, "cost": run_cost.ledger({41: run_cost.parse_attempts(unnamed)})},
                                     {}, [], "/out")
    assert any(line.endswith("HUNG at step 20: suspect nodes: none named (the stacks do not tell); stacks in "
                             "hang-41-0-node110.txt, hang-41-0-node111.txt (the run's directory)") for line in lines)
    record, lines, _ = job_outputs.report({**job_result, "cost": None}, {}, [], "/out")
    assert record["hangs"] == [] and not any(line.startswith("hung ") for line in lines)


# The job script's watchdog with stand-ins: srun runs the training on this machine (the dump step,
# --overlap, once per node), the training starts four "workers" (processes with torchrun's
# variables, two per node) that print a few steps, save a checkpoint and then hang; py-spy prints
# rank 3 in all_reduce and the others in backward; scancel kills the workers.
# No job of a real cluster on this machine has it, nor the stand-in workers of another run of
# these tests at the same time (a mutation run beside a test run): workers are found by job id.
HUNG_JOB_ID = str(90_000_000 + os.getpid())
WATCHED_STANDINS = {
    "srun": ('#!/bin/bash\noverlap=0\nwhile [[ $1 == -* ]]; do [[ $1 == --overlap ]] && overlap=1; shift; done\n'
             'if (( overlap )); then\n'
             '  for node in node110 node111; do SLURMD_NODENAME=$node SLURM_STEP_ID=9 "$@" || exit; done\n'
             'else\n'
             '  SLURM_NODEID=0 exec "$@"\nfi\n'),
    "python": ('#!/bin/bash\n'
               'if [[ $1 == -c && $2 == *torchrun* ]]; then\n'
               '  for rank in 0 1 2 3; do\n'
               '    node=node11$((rank / 2))\n'
               '    RANK=$rank TORCHELASTIC_RUN_ID=x SLURMD_NODENAME=$node SLURM_STEP_ID=5 sleep 60 &\n'
               '    echo $! >> "$RECORD.pids"\n'
               '  done\n'
               '  for step in 1 2 3; do echo "[rank0@node110] step=$step"; done\n'
               '  mkdir -p "$CHECKPOINT_DIR" && echo \'{"step": 2}\' > "$CHECKPOINT_DIR/checkpoint.json"\n'
               '  wait\n'
               '  exit 137\n'
               'fi\n'
               'exec python3 "$@"\n'),
    "py-spy": ('#!/bin/bash\nrank=$(tr "\\0" "\\n" < /proc/$3/environ | sed -n "s/^RANK=//p")\n'
               f'if [[ $rank == 3 ]]; then cat <<\'X\'\n{BLOCKED}\nX\nelse cat <<\'X\'\n{WAITING.format(pid="$3")}\nX\nfi\n'),
    "scancel": '#!/bin/bash\necho "scancel $*" >> "$RECORD"\nkill $(cat "$RECORD.pids")\n',
    "scontrol": ('#!/bin/sh\nif [ "$1 $2" = "show hostnames" ]; then printf "node110\\nnode111\\n"; '
                 'else echo "scontrol $*" >> "$RECORD"; fi\n'),
}


def test_the_watchdog_dumps_kills_the_step_and_requeues_the_attempt_as_hung(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in WATCHED_STANDINS.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o700)
    (tmp_path / "job.sbatch").write_text(render(in_dir(tmp_path, hang_minutes=0.05, hang_dump=hang_dump.__file__)))
    record = tmp_path / "record"
    record.touch()
    log = tmp_path / "j.out"
    with log.open("a") as out:
        proc = subprocess.run(["bash", str(tmp_path / "job.sbatch")], stdout=out, stderr=subprocess.STDOUT, timeout=60,
                              env={"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_ID": HUNG_JOB_ID, "SLURM_JOB_NAME": "j",
                                   "RECORD": str(record), "SLURM_JOB_NUM_NODES": "2", "PY_SPY": str(bin_dir / "py-spy"),
                                   "SLURM_JOB_NODELIST": "node[110-111]", "SLURM_RESTART_COUNT": "0"})
    text = log.read_text()
    assert proc.returncode == 0, text
    # Three seconds without a line: the stacks of each node's two workers, the step killed, requeued.
    assert "HUNG: no new line in the log and no touch of $TRAINING_HEARTBEAT for 3 s (hang_minutes=0.05)" in text, text
    # The suspect node, marked bad, is left out of the requeued attempt (the job's own nodes are not
    # said by this stand-in's `scontrol show job`, so it is no node the job was given by name).
    assert record.read_text() == (f"scancel --signal=KILL {HUNG_JOB_ID}.5\nscontrol requeue {HUNG_JOB_ID}\n"
                                  f"scontrol show job {HUNG_JOB_ID}\nscontrol update JobId={HUNG_JOB_ID} ExcNodeList=node111\n")
    dumps = {node: tmp_path / f"hang-{HUNG_JOB_ID}-0-{node}.txt" for node in ("node110", "node111")}
    frames = {}
    for path in dumps.values():
        frames.update(hang_dump.innermost_frames(path.read_text()))
    assert {rank: frame[:2] for rank, frame in frames.items()} == {
        0: ("node110", "_engine_run_backward (torch/autograd/graph.py:979)"),
        1: ("node110", "_engine_run_backward (torch/autograd/graph.py:979)"),
        2: ("node111", "_engine_run_backward (torch/autograd/graph.py:979)"),
        3: ("node111", "all_reduce (torch/distributed/distributed_c10d.py:2950)")}
    assert (f"HUNG at step 3: suspect nodes: node111; stacks in hang-{HUNG_JOB_ID}-0-node110.txt,"
            f"hang-{HUNG_JOB_ID}-0-node111.txt") in text
    assert "the checkpoint advanced from step none to 2: restart 1 of at most 1 resumes from it" in text
    attempts = run_cost.parse_attempts((tmp_path / f"attempts-{HUNG_JOB_ID}.tsv").read_text())
    assert attempts[0]["end"]["outcome"] == "hung"
    assert attempts[0]["hang"]["suspect_nodes"] == ["node111"] and attempts[0]["hang"]["step"] == 3
    run = json.loads((tmp_path / "run.json").read_text())
    assert (run["state"], run["step"]) == ("HUNG", 3)


def test_the_workers_are_this_jobs_torchrun_children_on_this_node_not_their_own_children():
    env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": HUNG_JOB_ID, "SLURMD_NODENAME": "node111", "RANK": "3",
           "TORCHELASTIC_RUN_ID": "x", "SLURM_STEP_ID": "5"}
    # A worker with a child of its own (a DataLoader worker inherits its environment), one on
    # another node, one of another step, and one of another job.
    procs = [with_environ(proc) for proc in (
        subprocess.Popen(["bash", "-c", "sleep 60 & wait"], env=env, start_new_session=True),
        subprocess.Popen(["sleep", "60"], env={**env, "SLURMD_NODENAME": "node110"}),
        subprocess.Popen(["sleep", "60"], env={**env, "SLURM_STEP_ID": "9"}),
        subprocess.Popen(["sleep", "60"], env={**env, "SLURM_JOB_ID": HUNG_JOB_ID + "1"}))]
    try:
        deadline = time.monotonic() + 10
        # Until the worker's child has started.
        while not Path(f"/proc/{procs[0].pid}/task/{procs[0].pid}/children").read_text().split():
            assert time.monotonic() < deadline, "the worker's child never started"
            time.sleep(0.1)
        found = hang_dump.workers(HUNG_JOB_ID, "node111", "9")
        assert sorted(found) == [procs[0].pid] and found[procs[0].pid]["RANK"] == "3"
        assert sorted(hang_dump.workers(HUNG_JOB_ID, "node110", "9")) == [procs[1].pid]
    finally:
        os.killpg(procs[0].pid, signal.SIGKILL)  # the worker and its child
        for proc in procs:
            proc.kill()
            proc.wait()


def with_environ(proc):
    """``proc`` once /proc shows its environment: a vfork()ed child's parent resumes before the
    kernel has set up the new program's environment, which reads empty for that moment (a
    training's workers have run for minutes when the watchdog looks)."""
    deadline = time.monotonic() + 10
    while not Path(f"/proc/{proc.pid}/environ").read_bytes():
        assert time.monotonic() < deadline, f"process {proc.pid} never showed its environment"
        time.sleep(0.01)
    return proc


def start_workers(ranks, node="node111", **more):
    """Stand-in torchrun workers of HUNG_JOB_ID on ``node``, one per rank, in the given order."""
    return [with_environ(subprocess.Popen(["sleep", "60"], env={
        "PATH": "/usr/bin:/bin", "SLURM_JOB_ID": HUNG_JOB_ID, "SLURMD_NODENAME": node, "RANK": str(rank),
        "TORCHELASTIC_RUN_ID": "x", "SLURM_STEP_ID": "5", **more})) for rank in ranks]


def stop(procs):
    for proc in procs:
        proc.kill()
        proc.wait()


def test_a_dump_has_each_worker_in_rank_order_with_py_spys_words_and_failures(tmp_path, monkeypatch, capsys):
    py_spy = tmp_path / "py-spy"
    # py-spy as a stand-in: a stack for rank 1, a failure for rank 0.
    py_spy.write_text('#!/bin/bash\nif tr "\\0" "\\n" < /proc/$3/environ | grep -qx RANK=1; then '
                      'echo "Thread $3 (idle): \\"MainThread\\""; echo "    wait (x.py:1)"; '
                      'else echo "Error: no such process" >&2; exit 3; fi\n')
    py_spy.chmod(0o700)
    monkeypatch.setenv("SLURMD_NODENAME", "node111")
    monkeypatch.setenv("SLURM_STEP_ID", "9")
    monkeypatch.setenv("PY_SPY", str(py_spy))
    procs = start_workers([1, 0])
    try:
        hang_dump.dump(HUNG_JOB_ID, 2, str(tmp_path))
    finally:
        stop(procs)
    path = tmp_path / f"hang-{HUNG_JOB_ID}-2-node111.txt"
    lines = path.read_text().splitlines()
    assert lines[0].startswith(f"# hang of job {HUNG_JOB_ID} (restart 2) on node111, ")
    assert lines[0].endswith(": 2 torchrun worker(s)")
    assert lines[1:] == [f"=== rank 0 on node111 pid {procs[1].pid} step 5 ===", "",
                         "# py-spy exited 3: Error: no such process",
                         f"=== rank 1 on node111 pid {procs[0].pid} step 5 ===",
                         f'Thread {procs[0].pid} (idle): "MainThread"', "    wait (x.py:1)"]
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert capsys.readouterr().out == f"hang: 2 worker(s) on node111 -> {path}\n"
    assert hang_dump.innermost_frames(path.read_text()) == {0: ("node111", None, "5"), 1: ("node111", "wait (x.py:1)", "5")}


def test_a_dump_without_py_spy_or_with_a_broken_one_still_names_the_workers(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SLURMD_NODENAME", "node110")
    monkeypatch.setenv("PATH", "/nowhere")
    monkeypatch.delenv("PY_SPY", raising=False)
    monkeypatch.delenv("SLURM_STEP_ID", raising=False)
    procs = start_workers([0, 1], node="node110")
    try:
        hang_dump.dump(HUNG_JOB_ID, 0, str(tmp_path))
        said = capsys.readouterr().out
        monkeypatch.setenv("PY_SPY", str(tmp_path / "missing-py-spy"))
        hang_dump.dump(HUNG_JOB_ID, 1, str(tmp_path))
    finally:
        stop(procs)
    lines = (tmp_path / f"hang-{HUNG_JOB_ID}-0-node110.txt").read_text().splitlines()
    assert lines[1:] == ["# py-spy is not on this node's PATH (nor in $PY_SPY): no stacks; add py-spy to the training env",
                         f"=== rank 0 on node110 pid {procs[0].pid} step 5 ===",
                         f"=== rank 1 on node110 pid {procs[1].pid} step 5 ==="]
    assert said.startswith("hang: 2 worker(s) on node110 (no py-spy: no stacks) -> ")
    lines = (tmp_path / f"hang-{HUNG_JOB_ID}-1-node110.txt").read_text().splitlines()
    assert lines[2].startswith("# py-spy failed: [Errno 2] No such file or directory")


def test_a_dump_does_not_write_through_a_planted_link_and_replaces_an_old_file(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMD_NODENAME", "node110")
    monkeypatch.setenv("PATH", "/nowhere")
    monkeypatch.delenv("PY_SPY", raising=False)
    (tmp_path / f"hang-{HUNG_JOB_ID}-0-node110.txt").write_text("an older dump\n" * 100)
    hang_dump.dump(HUNG_JOB_ID, 0, str(tmp_path))
    assert "older" not in (tmp_path / f"hang-{HUNG_JOB_ID}-0-node110.txt").read_text()
    victim = tmp_path / "victim"
    victim.write_text("mine")
    (tmp_path / f"hang-{HUNG_JOB_ID}-1-node110.txt").symlink_to(victim)
    with pytest.raises(OSError):
        hang_dump.dump(HUNG_JOB_ID, 1, str(tmp_path))
    assert victim.read_text() == "mine"


def test_a_process_that_is_gone_has_no_environment_and_no_parent():
    proc = subprocess.Popen(["true"])
    proc.wait()
    assert hang_dump._environ(proc.pid) is None and hang_dump._parent(proc.pid) is None


def test_the_parent_is_read_past_a_command_name_with_parentheses_and_spaces():
    # The kernel's stat line is 'pid (comm) state ppid ...', comm as the process named itself.
    proc = subprocess.Popen([sys.executable, "-c", "import time\nopen('/proc/self/comm', 'w').write('w) 1 2 (x')\n"
                             "print(flush=True)\ntime.sleep(60)"], stdout=subprocess.PIPE, start_new_session=True)
    try:
        proc.stdout.readline()
        assert hang_dump._parent(proc.pid) == os.getpid()
    finally:
        stop([proc])


def test_suspects_skips_a_dump_that_is_not_there_and_lists_the_steps_in_order(tmp_path, capsys):
    text = "\n".join(hang_dump.HEADER.format(rank=rank, node="n1", pid=1, step=step)
                     for rank, step in ((0, "10"), (1, "9"), (2, "-"), (3, "10")))
    (tmp_path / "hang-1-0-n1.txt").write_text(text + "\n")
    hang_dump.suspects([str(tmp_path / "missing.txt"), str(tmp_path / "hang-1-0-n1.txt")])
    assert capsys.readouterr().out == "\n9 10\n"


@pytest.mark.parametrize("argv", [[], ["dump", "--restart", "0", "--dir", "/d"], ["dump", "--job", "1", "--dir", "/d"],
                                  ["dump", "--job", "1", "--restart", "0"]])
def test_the_dump_command_needs_its_job_restart_and_directory(argv, capsys):
    with pytest.raises(SystemExit) as exited:
        hang_dump.main(argv)
    assert exited.value.code == 2 and "required" in capsys.readouterr().err


def test_hang_minutes_go_up_to_a_week():
    assert launch_request.hang_minutes(7 * 24 * 60) == 10080 and launch_request.hang_minutes("10080.5") is None


def test_without_a_main_thread_the_first_threads_frame_counts_and_an_idle_main_thread_wins():
    threads_only = 'Thread 7 (idle): "Thread-1"\n    loop (a.py:3)\n    run (threading.py:982)\n' \
                   'Thread 8 (idle): "Thread-2"\n    other (b.py:4)'
    idle_main = 'Thread 7 (idle): "MainThread"\nThread 8 (idle): "Thread-1"\n    loop (a.py:3)'
    frames = hang_dump.innermost_frames(dump_file("node111", {0: threads_only, 1: idle_main}))
    assert frames == {0: ("node111", "loop (a.py:3)", "1"), 1: ("node111", None, "1")}


def test_help_says_what_the_program_is(capsys):
    with pytest.raises(SystemExit):
        hang_dump.main(["--help"])
    assert "What a hung training was doing: every torchrun worker's Python stacks" in capsys.readouterr().out
