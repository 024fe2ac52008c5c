"""The hang watchdog on the default local cluster (node110, node111): a training of 4 ranks whose
rank 3 blocks forever in all_reduce at step 20 of its first attempt. The job script's watchdog
(hang_minutes=0.2: 12 s without a new log line or a touch of $TRAINING_HEARTBEAT) dumps every
rank's stacks into the run directory with py-spy, kills the step, records the attempt HUNG naming
node111 (rank 3's node: its frame differs from the other three's), and requeues the job from its
checkpoint of step 15; the second attempt resumes there and COMPLETES all 30 steps. A quiet
stretch longer than the window that touches the heartbeat is no hang.

py-spy: the local cluster's conda env is the Miniforge stand-in's, which links Python packages
only (py-spy is a program), so the test puts the project virtualenv's py-spy on the NAS and names
it with $PY_SPY, as a site with py-spy outside the training env would."""

import json
import re
import shutil
import sys

from cluster import REPO
from launch import unique_job_name
from test_runs import run_dir

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import slurm_train  # noqa: E402
from ansible_collections.hpc.slurm_train.roles.slurm_launch.files import hang_dump  # noqa: E402

WINDOW_MINUTES = 0.2
HANG_ONCE = '''\
import json
import os
import time

print("starting")
import torch  # noqa: E402  (seconds of import: the line above is the log's sign of life)
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

STEPS, CHECKPOINT_EVERY, QUIET_STEP, QUIET_SECONDS, HANG_STEP, BLOCKED_RANK = 30, 5, 8, QUIET, 20, 3
rank = int(os.environ["RANK"])
checkpoints = os.environ["CHECKPOINT_DIR"]
os.makedirs(checkpoints, exist_ok=True)
marker = os.path.join(checkpoints, "blocked-once")
dist.init_process_group("gloo")
# Made by every rank; only the blocked rank ever uses it: an all_reduce nobody else joins.
spare = dist.new_group(backend="gloo")
first_attempt = not os.path.exists(marker)
torch.manual_seed(0)
model = nn.Linear(4, 1)
start = 0
if os.path.exists(os.path.join(checkpoints, "checkpoint.json")):
    with open(os.path.join(checkpoints, "checkpoint.json")) as handle:
        start = json.load(handle)["step"]
    model.load_state_dict(torch.load(os.path.join(checkpoints, "model.pt")))
    if rank == 0:
        print(f"resumed from step {start}")
model = DDP(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
dist.barrier()
for step in range(start + 1, STEPS + 1):
    if rank == 0:
        print(f"step={step}")
    if first_attempt and step == QUIET_STEP and rank == 0:
        # Quiet, longer than the watchdog's window, but alive: the heartbeat says so.
        began = time.time()
        while time.time() - began < QUIET_SECONDS:
            os.utime(os.environ["TRAINING_HEARTBEAT"]) if os.path.exists(os.environ["TRAINING_HEARTBEAT"]) else \\
                open(os.environ["TRAINING_HEARTBEAT"], "w").close()
            time.sleep(1)
        print(f"was quiet for {time.time() - began:.0f} s, touching the heartbeat")
    if first_attempt and step == HANG_STEP and rank == BLOCKED_RANK:
        open(marker, "w").close()
        print(f"rank {rank} blocks in all_reduce at step {step}")
        dist.all_reduce(torch.ones(1), group=spare)
    loss = model(torch.randn(8, 4)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()  # the other ranks wait here for the blocked rank's gradients
    optimizer.step()
    time.sleep(0.2)
    if rank == 0 and step % CHECKPOINT_EVERY == 0:
        torch.save(model.module.state_dict(), os.path.join(checkpoints, "model.pt.tmp"))
        os.replace(os.path.join(checkpoints, "model.pt.tmp"), os.path.join(checkpoints, "model.pt"))
        with open(os.path.join(checkpoints, "checkpoint.json.tmp"), "w") as handle:
            json.dump({"step": step}, handle)
        os.replace(os.path.join(checkpoints, "checkpoint.json.tmp"), os.path.join(checkpoints, "checkpoint.json"))
        print(f"checkpoint saved step={step}")
dist.destroy_process_group()
print(f"rank {rank} done")
'''


def test_a_rank_blocked_in_all_reduce_is_dumped_named_hung_and_the_job_completes_after_a_requeue(cluster, tmp_path,
                                                                                                   request):
    # The suspect node becomes a bad node of the user's: forgotten after, or the shared cluster's
    # later launches to it would be refused.
    request.addfinalizer(lambda: slurm_train.forget_node("node111"))
    py_spy = cluster.nas / "tools" / "py-spy-0.4.2" / "py-spy"
    if not py_spy.exists():
        py_spy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2((REPO / ".venv" / "bin" / "py-spy").resolve(), py_spy.with_name(".py-spy.partial"))
        py_spy.with_name(".py-spy.partial").chmod(0o755)
        py_spy.with_name(".py-spy.partial").rename(py_spy)
    window = WINDOW_MINUTES * 60
    script = tmp_path / "code" / "hang_once.py"
    script.parent.mkdir()
    script.write_text(HANG_ONCE.replace("QUIET,", f"{window + 6:.0f},", 1))
    name = unique_job_name("hang")
    result = slurm_train.launch(script=str(script), nodes="node110,node111", nproc_per_node=2, job_name=name,
                                hang_minutes=WINDOW_MINUTES, max_restarts=2, slurm_launch_env={"PY_SPY": str(py_spy)},
                                slurm_launch_outputs_dir=str(tmp_path / "outputs"))
    assert (result.state, result.job["restarts"]) == ("COMPLETED", 1), result.summary
    job_id = result.job_id
    log = (result.outputs / f"{name}-{job_id}.out").read_text()
    # The quiet stretch with heartbeats passed; the block did not.
    assert re.search(r"was quiet for (\d+) s", log) and int(re.search(r"was quiet for (\d+) s", log).group(1)) > window
    assert log.count("HUNG: no new line in the log") == 1, log[-4000:]
    assert "rank 3 blocks in all_reduce at step 20" in log
    # Requeued from the checkpoint of step 15, resumed there, all 30 steps done.
    assert "the checkpoint advanced from step none to 15: restart 1 of at most 2 resumes from it" in log
    assert "resumed from step 15" in log and "[rank0@node110] step=30" in log
    assert all(f"rank {rank} done" in log for rank in range(4)), log[-4000:]

    # Every rank's stacks, one file per node, in the run's directory; rank 3's in all_reduce.
    directory = run_dir(cluster, name, 1)
    dumps = {node: directory / f"hang-{job_id}-0-{node}.txt" for node in ("node110", "node111")}
    assert all(path.is_file() for path in dumps.values()), sorted(p.name for p in directory.iterdir())
    frames = {}
    for path in dumps.values():
        frames.update(hang_dump.innermost_frames(path.read_text()))
    assert sorted(frames) == [0, 1, 2, 3], frames
    assert frames[3][0] == "node111" and frames[3][1].startswith("all_reduce ("), frames
    assert all(not frames[rank][1].startswith("all_reduce (") for rank in (0, 1, 2)), frames

    # job.json and summary.txt: the first attempt HUNG, node111 named; the second COMPLETED it.
    record = json.loads((result.outputs / "job.json").read_text())
    hangs = record["hangs"]
    assert [(h["job_id"], h["restart"], h["state"], h["suspect_nodes"], h["step"]) for h in hangs] == [
        (job_id, 0, "HUNG", ["node111"], 20)], hangs
    assert sorted(hangs[0]["stack_dumps"]) == sorted(path.name for path in dumps.values())
    # gloo has no NCCL flight recorder: no pipe was there to ask, nothing kept beside the stacks.
    assert hangs[0]["flight_recorder_dumps"] == [] and not list(directory.glob("*nccl-rank*"))
    assert not any("NCCL flight recorder" in path.read_text() for path in dumps.values())
    assert [attempt["restart"] for attempt in record["cost"]["attempts"]] == [0, 1]
    assert record["cost"]["attempts"][0]["lost_seconds"] > 0, "a hung attempt's time after its checkpoint is lost"
    hung_row = next(line for line in result.summary.splitlines() if line.startswith("hung "))
    assert hung_row.split(None, 1)[1].startswith(f"attempt 0 of job {job_id} HUNG at step 20: suspect node111;")

    # node111 is kept out of the user's next launches; this job, given it by name, ran there again.
    assert [(entry["reason"], entry["job_id"]) for entry in slurm_train.bad_nodes() if entry["node"] == "node111"] == [
        ("HUNG", job_id)]
    assert "node111 is in the job's own node list: its next attempt runs there again" in log
