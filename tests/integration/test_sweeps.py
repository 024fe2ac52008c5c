"""Sweeps on the default local cluster: the cross product of -e sweep's values as one Slurm job
array of one job script, a task and a run directory per point, one row per point at the end."""

import json
import re

from launch import TRAINER, launch, next_job_id, outputs_of, unique_job_name

# 2x2 points; only point 3 (fail-rank=0 fail-at-step=2) fails: rank 0 exits 3 at step 2.
SWEEP = {"fail-rank": [-1, 0], "fail-at-step": [-1, 2]}
POINTS = ["fail-rank=-1 fail-at-step=-1", "fail-rank=-1 fail-at-step=2",
          "fail-rank=0 fail-at-step=-1", "fail-rank=0 fail-at-step=2"]


def sweep_request(name, *extra):
    return ["nodes=node110,node111", f"script={TRAINER}", "nproc_per_node=1", f"job_name={name}",
            json.dumps({"script_args": "--steps 6 --log-every 2", "sweep": SWEEP}), *extra]


def test_a_2x2_sweep_is_one_array_of_four_points_and_the_failed_point_is_named_after_all_ended(cluster, tmp_path):
    name = unique_job_name("sweep")
    proc = launch(tmp_path, *sweep_request(name, "sweep_parallel=2"))
    assert proc.returncode != 0, proc.stdout
    folder, job = outputs_of(tmp_path, name)
    array = job["job_id"]

    # One job array of four tasks, at most two at once, all final when the playbook failed.
    records = cluster.slurm("scontrol", "show", "job", "-o", str(array)).stdout.splitlines()
    assert sorted(re.search(r"ArrayTaskId=(\S+)", line).group(1) for line in records) == ["0", "1", "2", "3"]
    assert all(f"ArrayJobId={array} " in line and "ArrayTaskThrottle=2 " in line for line in records)
    assert ("point 3 (fail-rank=0 fail-at-step=2) ended FAILED, exit code 3" in proc.stdout
            and "points that did not complete" in proc.stdout), proc.stdout
    assert [(row["task"], row["args"], row["state"], row["exit_code"]) for row in job["points"]] == [
        (0, POINTS[0], "COMPLETED", 0), (1, POINTS[1], "COMPLETED", 0),
        (2, POINTS[2], "COMPLETED", 0), (3, POINTS[3], "FAILED", 3)]
    assert (job["state"], job["exit_code"]) == ("FAILED", 3)
    summary = (folder / "summary.txt").read_text()
    assert "points     4 of 4 final, 3 completed" in summary
    assert all(re.search(rf"^  {task} +{re.escape(args)} ", summary, re.M) for task, args in enumerate(POINTS)), summary

    # Each task trained with its own arguments, after script_args, in its own directory.
    run = job["run"]
    table = (folder / "sweep.tsv").read_text().splitlines()
    assert table == ["task\tfail-rank\tfail-at-step", "0\t-1\t-1", "1\t-1\t2", "2\t0\t-1", "3\t0\t2"]
    for task, args in enumerate(POINTS):
        log = (folder / f"{name}-{array}_{task}.out").read_text()
        words = " ".join(f"--{pair.replace('=', ' ')}" for pair in args.split())
        assert f"point {task} of 4: {words}" in log, log
        assert ("training complete steps=6" in log) == (task != 3), log
        point_dir = f"/starmap/nas/jobs/alice/{name}/runs/{run}/points/{task}"
        record = json.loads(cluster.ssh("login01", f"cat {point_dir}/run.json", user="alice").stdout)
        assert record["state"] == ("FAILED" if task == 3 else "COMPLETED")
        checkpoint = cluster.ssh("login01", f"cat {point_dir}/checkpoints/checkpoint.json", user="alice", check=False)
        assert (checkpoint.returncode == 0 and json.loads(checkpoint.stdout)["step"] == 6) == (task != 3), checkpoint

    # The same run again: the completed points are not trained again, the failed one is.
    again = launch(tmp_path, *sweep_request(name, f"resume={run}"))
    assert again.returncode != 0, again.stdout
    second = max((folder for folder in tmp_path.glob(f"{name}-*")), key=lambda f: int(f.name.rsplit("-", 1)[1]))
    resumed = json.loads((second / "job.json").read_text())
    assert resumed["run"] == run and resumed["job_id"] != array
    for task in range(4):
        log = (second / f"{name}-{resumed['job_id']}_{task}.out").read_text()
        assert ("already COMPLETED in this run: not training it again" in log) == (task != 3), log
    assert "point 3 (fail-rank=0 fail-at-step=2) ended FAILED" in again.stdout


def test_a_bad_sweep_is_refused_by_name_before_anything_is_submitted(cluster, tmp_path):
    before = next_job_id(cluster)
    proc = launch(tmp_path, "nodes=node110,node111", f"script={TRAINER}",
                  json.dumps({"sweep": {"lr": [0.1, "0.1; rm -rf ~"], "seed": []}}), "sweep_parallel=-1")
    assert proc.returncode != 0
    for message in ("sweep lr value '0.1; rm -rf ~' is not allowed: a number, or text of up to 200 letters",
                    "sweep seed=[] is not allowed: give a non-empty list of values",
                    "sweep_parallel='-1' is not allowed: give a whole number"):
        assert message in proc.stdout, proc.stdout
    assert next_job_id(cluster) == before
