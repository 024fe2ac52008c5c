"""The health gate on the default local cluster (docs/resilience.md): before an attempt trains,
each node times a matmul (on CPU here: the cluster's stand-in CUDA torch trains with gloo) and the
nodes one all-reduce.

A node slowed honestly: as root, the test puts node111's slurmd into a cgroup of its own whose CPU
quota is a twentieth of one CPU (cgroup v2's cpu.max; cpu.cfs_quota_us on a cgroup v1 host, as this
machine is), so that every process of a job on node111 (its slurmstepd and the gate's python,
forked by slurmd) inherits the quota. A launch pinned to node110,node111 then fails before
training, the gate naming node111 with its time against node110's, in the log, summary.txt and
job.json; so does a launch of two nodes of the node group, the gate having asked Slurm for a spare
node to requeue onto and found none. On the 3-node cluster of conftest's three_nodes, which has
the spare, a 2-node group launch whose slowed node Slurm picked is requeued without it and
completes on the other two."""

import json
import re
import sys
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest

from cluster import REPO, THREE_NODES_GROUP, nodes_slurm_would_pick
from launch import TRAINER, launch, outputs_of, unique_job_name

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import slurm_train  # noqa: E402

NODES = "nodes=node110,node111"
CGROUP = Path("/sys/fs/cgroup")
PERIOD_US = 100_000


def _cpu_cgroup_of(pid):
    """(the cpu controller's mount, the cgroup ``pid`` is in there): v2's unified tree, or v1's cpu one."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if (CGROUP / "cgroup.controllers").exists() and controllers == "":
            return CGROUP, path
        if "cpu" in controllers.split(","):
            return CGROUP / controllers, path
    raise AssertionError(f"no cpu cgroup for pid {pid}: {Path(f'/proc/{pid}/cgroup').read_text()}")


@contextmanager
def cpu_quota(pid, fraction):
    """``pid`` (and what it starts from now on) in a new cgroup allowed ``fraction`` of one CPU;
    on leaving, every process in it goes back where ``pid`` was and the cgroup is removed."""
    mount, path = _cpu_cgroup_of(pid)
    back = mount / path.lstrip("/")
    group = mount / f"health-gate-test-{uuid.uuid4().hex[:8]}"
    quota = int(PERIOD_US * fraction)
    if mount == CGROUP:  # v2: the cpu controller enabled for the root's children
        (CGROUP / "cgroup.subtree_control").write_text("+cpu")
    group.mkdir()
    try:
        if mount == CGROUP:
            (group / "cpu.max").write_text(f"{quota} {PERIOD_US}")
        else:
            (group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (group / "cpu.cfs_quota_us").write_text(str(quota))
        (group / "cgroup.procs").write_text(str(pid))
        yield group
    finally:
        for moved in (group / "cgroup.procs").read_text().split():
            try:
                (back / "cgroup.procs").write_text(moved)
            except OSError:
                pass  # ended meanwhile
        group.rmdir()


@pytest.fixture
def forget_node111():
    """The gate gives node111 to mark_bad_node: where the user's bad-nodes record exists, it is
    forgotten after, or the shared cluster's later launches to node111 would be refused."""
    yield
    forget = getattr(slurm_train, "forget_node", None)
    if forget is not None:
        forget("node111")


def slurmd_pid(cluster, node):
    return int((cluster.state_dir / "run" / f"slurmd-{node}.pid").read_text())


@pytest.mark.parametrize("where, verdict", [
    ([NODES], "not training on node111: the node list was given"),
    # A node group's job is requeued without the node only onto a spare: this cluster has none.
    (["group=gpu_A6000", "num_nodes=2"], "not training on node111, and the partition has 1 other node(s) (node110) "
                                         "for the job's 2: no spare to requeue onto"),
])
def test_a_node_slowed_through_its_cgroups_cpu_quota_is_named_and_the_job_fails(cluster, tmp_path, where, verdict,
                                                                                forget_node111):
    name = unique_job_name("slownode")
    slow = slurmd_pid(cluster, "node111")
    before = _cpu_cgroup_of(slow)
    with cpu_quota(slow, 0.05) as group:
        assert str(slow) in (group / "cgroup.procs").read_text().split()
        proc = launch(tmp_path, *where, f"script={TRAINER}", "nproc_per_node=1", f"job_name={name}",
                      json.dumps({"script_args": "--steps 4 --log-every 2"}))
    assert _cpu_cgroup_of(slow) == before, "node111's slurmd is back at full speed"
    assert proc.returncode != 0, proc.stdout[-3000:]
    folder, job = outputs_of(tmp_path, name)
    assert (job["state"], job["exit_code"]) == ("FAILED", 94), job
    (gate,) = job["health"]
    assert (gate["action"], gate["restart"]) == ("fail", 0), gate
    (named,) = gate["named"]
    assert (named["node"], named["reason"]) == ("node111", "HEALTH"), gate
    # Its time against the median of the other node's: node110's own time.
    fast = gate["nodes"]["node110"]["seconds"]
    assert named["seconds"] == gate["nodes"]["node111"]["seconds"] and named["median_seconds"] == fast
    assert named["seconds"] > 1.5 * fast, gate
    log = (folder / f"{name}-{job['job_id']}.out").read_text()
    said = (f"health gate: node111 slow: matmul {named['seconds']:.3f} s against {fast:.3f} s, the median of the "
            f"other nodes ({named['ratio']}x, over 1.5x)")
    assert said in log, log[-3000:]
    assert verdict in log and gate["message"].startswith(verdict), gate
    assert "health gate failed (the reasons above): not training" in log
    assert "training step finished" not in log and "world_size=" not in log, "nothing trained"
    summary = (folder / "summary.txt").read_text()
    assert re.search(r"^health +restart 0: failed in [0-9.]+ s \(2 nodes, matmul .*\): not training on node111[:,] .*; "
                     r"node111 slow: matmul", summary, re.M), summary
    assert re.search(r"health gate: restart 0: failed in [0-9.]+ s \(2 nodes, .*\): not training on node111",
                     proc.stdout), "the launch's failure says it"
    print(f"slowed node111: {named['seconds']} s against node110's {fast} s ({named['ratio']}x); "
          f"the gate took {gate['seconds']} s")


def test_a_gate_of_well_nodes_passes_says_its_cost_and_the_job_trains(cluster, tmp_path):
    name = unique_job_name("gatepass")
    proc = launch(tmp_path, NODES, f"script={TRAINER}", "nproc_per_node=1", f"job_name={name}",
                  json.dumps({"script_args": "--steps 2 --log-every 1"}))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
    folder, job = outputs_of(tmp_path, name)
    (gate,) = job["health"]
    assert (gate["action"], gate["named"]) == ("pass", []), gate
    assert set(gate["nodes"]) == {"node110", "node111"}
    assert all(found["seconds"] > 0 and found["device"] == "cpu" for found in gate["nodes"].values()), gate
    assert gate["allreduce"]["wrong"] == 0 and gate["allreduce"]["time_us"] > 0, gate
    log = (folder / f"{name}-{job['job_id']}.out").read_text()
    assert re.search(rf"^health gate: restart 0: passed in {gate['seconds']:.1f} s \(2 nodes, matmul ", log, re.M), log
    for node in ("node110", "node111"):
        assert f"gpu-check {node}: ok: " in log, "the GPU check is the gate's first part"
        assert re.search(rf"^health-check {node}: matmul [0-9.]+ s \(cpu, 2048x2048 float32", log, re.M), log
    assert "[rank0] training complete steps=2" in log
    assert re.search(r"^health +restart 0: passed in [0-9.]+ s", (folder / "summary.txt").read_text(), re.M)
    times = sorted(found["seconds"] for found in gate["nodes"].values())
    print(f"the gate of two well nodes took {gate['seconds']} s, their matmuls {times} s ({times[1] / times[0]:.2f}x)")


def test_a_slowed_node_slurm_picked_is_left_out_and_the_job_runs_on_the_other_two(three_nodes, bad_nodes_cleared,
                                                                                  tmp_path):
    cluster = three_nodes
    picked = nodes_slurm_would_pick(cluster, THREE_NODES_GROUP, 2)
    # Of the two nodes Slurm would give the job, the one that is not the batch host: the job script
    # (and the gate's judge in it) keeps its speed, only the node's share of the gate is slowed.
    slowed, batch_host = picked[1], picked[0]
    others = sorted(set(cluster.nodes) - {slowed})
    name = unique_job_name("slowspare")
    slow = slurmd_pid(cluster, slowed)
    # A tenth of a CPU: slow enough to stand out from two nodes sharing this loaded host's two
    # cores, fast enough that the slowed node's import of torch costs seconds, not half a minute.
    with cpu_quota(slow, 0.1):
        proc = launch(tmp_path, f"group={THREE_NODES_GROUP}", "num_nodes=2", f"script={TRAINER}", "nproc_per_node=1",
                      f"job_name={name}", "max_restarts=1", json.dumps({"script_args": "--steps 2 --log-every 1"}),
                      inventory=cluster.inventory)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
    folder, job = outputs_of(tmp_path, name)
    # Requeued once, COMPLETED on the two others.
    assert (job["state"], job["restarts"]) == ("COMPLETED", 1), job
    assert sorted(job["nodes"]) == others and slowed not in job["nodes"], job
    first, second = job["health"]
    assert (first["action"], first["restart"], set(first["nodes"])) == ("requeue", 0, set(picked)), first
    (named,) = first["named"]
    assert (named["node"], named["reason"]) == (slowed, "HEALTH"), first
    # Its time against the median of the other nodes': the batch host's own time.
    fast = first["nodes"][batch_host]["seconds"]
    assert named["seconds"] == first["nodes"][slowed]["seconds"] and named["median_seconds"] == fast
    assert named["seconds"] > 1.5 * fast, first
    assert (second["action"], second["restart"], second["named"]) == ("pass", 1, []), second
    assert set(second["nodes"]) == set(others), second
    log = (folder / f"{name}-{job['job_id']}.out").read_text()
    said = (f"health gate: {slowed} slow: matmul {named['seconds']:.3f} s against {fast:.3f} s, the median of the "
            f"other nodes ({named['ratio']}x, over 1.5x)")
    assert said in log, log[-3000:]
    assert f"bad node {slowed} (HEALTH): left out of this job's next attempt" in log
    assert "[rank0] training complete steps=2" in log
    # Requeued with the node excluded, as Slurm keeps the job (MinJobAge) and the user's record says.
    shown = cluster.slurm("scontrol", "show", "job", str(job["job_id"])).stdout
    excluded = re.search(r"ExcNodeList=(\S+)", shown).group(1)
    assert slowed in cluster.slurm("scontrol", "show", "hostnames", excluded).stdout.split(), shown
    mark = json.loads(bad_nodes_cleared.read_text())["nodes"][slowed]
    assert (mark["reason"], mark["job_id"]) == ("HEALTH", job["job_id"]), mark
    summary = (folder / "summary.txt").read_text()
    assert re.search(rf"^health +restart 0: requeued in [0-9.]+ s \(2 nodes, .*\): without {slowed} ", summary,
                     re.M), summary
    assert re.search(r"^health +restart 1: passed in ", summary, re.M), summary
    print(f"slowed {slowed}: {named['seconds']} s against {batch_host}'s {fast} s ({named['ratio']}x); gates "
          f"{first['seconds']} s and {second['seconds']} s; the job ran on {','.join(job['nodes'])}")
