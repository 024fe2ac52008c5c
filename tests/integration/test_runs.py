"""Runs of a job name on the default local cluster: a job name is an experiment, each launch a
run of it in <jobs>/<user>/<name>/runs/<id>/, and only an unfinished run of the same request is
resumed."""

import json
import pwd
import re
import subprocess
import time
from pathlib import Path

import torch

from cluster import REPO
from launch import TRAINER, launch, next_job_id, unique_job_name


def request(name, node, args, *extra):
    return [f"nodes={node}", f"script={TRAINER}", "nproc_per_node=1", f"job_name={name}",
            json.dumps({"script_args": args}), *extra]


def outputs_by_id(outputs_dir, name):
    """{job id: (folder, job.json)} of a job name's outputs folders."""
    found = {}
    for folder in Path(outputs_dir).glob(f"{name}-*"):
        job = json.loads((folder / "job.json").read_text())
        found[job["job_id"]] = (folder, job)
    return found


def newest(outputs_dir, name):
    found = outputs_by_id(outputs_dir, name)
    return found[max(found)]


def summary_line(outputs_folder, key):
    return next(line for line in (outputs_folder / "summary.txt").read_text().splitlines()
                if line.startswith(key + " ")).split(None, 1)[1]


def run_dir(cluster, name, run):
    return cluster.nas / "jobs" / "alice" / name / "runs" / str(run)


def test_a_job_name_launched_again_after_it_completed_trains_again_as_a_fresh_run(cluster, tmp_path):
    name = unique_job_name("again")
    for run in (1, 2):
        proc = launch(tmp_path, *request(name, "node110,node111", "--steps 6 --log-every 2"))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "no hosts matched" not in proc.stdout, "no preflight play is skipped"
        folder, job = newest(tmp_path, name)
        assert (job["state"], job["run"], job["run_line"]) == ("COMPLETED", run, f"fresh run {run}")
        assert summary_line(folder, "run") == f"fresh run {run}"
        log = (folder / f"{name}-{job['job_id']}.out").read_text()
        assert "resumed from step" not in log and "[rank0] step=2 " in log and "training complete steps=6" in log
        assert job["stdout_path"] == f"/starmap/nas/jobs/alice/{name}/runs/{run}/{name}-{job['job_id']}.out"
        record = json.loads((run_dir(cluster, name, run) / "run.json").read_text())
        assert (record["job_id"], record["state"], record["exit_code"]) == (job["job_id"], "COMPLETED", 0)
    assert len(outputs_by_id(tmp_path, name)) == 2


def test_a_run_stopped_at_its_time_limit_is_resumed_by_its_own_request_only(cluster, tmp_path):
    """Two names at once, one node each: a real time limit (1 minute), Slurm's own warning, no
    restarts (each job ends TIMEOUT with its checkpoint). Then, for one name, another variant is a
    fresh run and the first variant again resumes run 1; for the other, resume=1 with other
    arguments is refused naming them, is taken with force=true, and resume=never starts afresh."""
    variant = "--steps 150 --step-sleep 0.3 --log-every 1"
    names = {node: unique_job_name("limit") for node in ("node110", "node111")}
    procs = {node: subprocess.Popen(
        ["ansible-playbook", "launch.yml", "-e", f"slurm_launch_outputs_dir={tmp_path}",
         *sum((["-e", item] for item in request(name, node, variant, "max_restarts=0", "time_limit=1",
                                                 "slurm_launch_warning_seconds=20")), [])],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for node, name in names.items()}
    saved = {}
    try:
        for node, proc in procs.items():
            out, _ = proc.communicate(timeout=400)
            assert proc.returncode != 0 and "ended TIMEOUT" in out, out[-3000:]
            folder, job = newest(tmp_path, names[node])
            assert (job["state"], job["restarts"], job["run_line"]) == ("TIMEOUT", 0, "fresh run 1")
            checkpoints = run_dir(cluster, names[node], 1) / "checkpoints"
            saved[node] = json.loads((checkpoints / "checkpoint.json").read_text())["step"]
            assert torch.load(checkpoints / "checkpoint.pt")["step"] == saved[node] > 0
            log = (folder / f"{names[node]}-{job['job_id']}.out").read_text()
            assert f"[rank0] checkpoint saved step={saved[node]} reason=SIGUSR1" in log
            assert "no restarts left (0)" in log and "training complete" not in log
    finally:
        for proc in procs.values():
            proc.kill()

    # Another variant of the name: a fresh run, which says which run it did not resume and why.
    name, step = names["node110"], saved["node110"]
    proc = launch(tmp_path, *request(name, "node110", "--steps 4 --log-every 1"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    folder, job = newest(tmp_path, name)
    said = "fresh run 2 (run 1 is another request: --steps 150 --step-sleep 0.3, not --steps 4)"
    assert (job["state"], job["run"], job["run_line"], summary_line(folder, "run")) == ("COMPLETED", 2, said, said)
    log = (folder / f"{name}-{job['job_id']}.out").read_text()
    assert "resumed from step" not in log and "[rank0] step=1 " in log and "training complete steps=4" in log
    # The first variant again: run 1 goes on from its checkpoint to its end.
    proc = launch(tmp_path, *request(name, "node110", variant))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    folder, job = newest(tmp_path, name)
    assert (job["state"], job["run"]) == ("COMPLETED", 1)
    assert summary_line(folder, "run") == job["run_line"] == (
        f"resumed run 1 from its checkpoint at step {step} (run 2 is another request: --steps 4, not --steps 150 "
        "--step-sleep 0.3)")
    log = (folder / f"{name}-{job['job_id']}.out").read_text()
    assert f"[rank0] resumed from step={step}" in log and "training complete steps=150" in log
    assert not run_dir(cluster, name, 3).exists()
    # Each job of run 1 kept the script it ran.
    assert sorted(p.name for p in run_dir(cluster, name, 1).glob(f"{name}-*.sbatch")) == sorted(
        f"{name}-{job_id}.sbatch" for job_id, (_, one) in outputs_by_id(tmp_path, name).items() if one["run"] == 1)

    # resume=1 with other arguments: refused, naming them, before anything is submitted.
    name, step = names["node111"], saved["node111"]
    before = next_job_id(cluster)
    proc = launch(tmp_path, *request(name, "node111", f"--steps {step + 4} --log-every 1", "resume=1"))
    assert proc.returncode != 0
    assert (f"resume=1: run 1 is another request: --steps 150 --step-sleep 0.3, not --steps {step + 4}. "
            "Launch it as it was") in proc.stdout, proc.stdout[-3000:]
    assert next_job_id(cluster) == before and not run_dir(cluster, name, 2).exists()
    # With force=true it is resumed, and job.json says what differed.
    proc = launch(tmp_path, *request(name, "node111", f"--steps {step + 4} --log-every 1", "resume=1", "force=true"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    folder, job = newest(tmp_path, name)
    assert (job["state"], job["run"]) == ("COMPLETED", 1)
    differences = [f"--steps 150 --step-sleep 0.3, not --steps {step + 4}"]
    assert job["request_differences"] == differences
    assert job["run_line"] == (f"resumed run 1 from its checkpoint at step {step} (force: it is another request: "
                               f"{differences[0]})")
    log = (folder / f"{name}-{job['job_id']}.out").read_text()
    assert f"[rank0] resumed from step={step}" in log and f"training complete steps={step + 4}" in log

    # resume=never: a fresh run 2 from step 0.
    proc = launch(tmp_path, *request(name, "node111", "--steps 4 --log-every 1", "resume=never"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    folder, job = newest(tmp_path, name)
    assert (job["state"], job["run"], summary_line(folder, "run")) == ("COMPLETED", 2, "fresh run 2")
    log = (folder / f"{name}-{job['job_id']}.out").read_text()
    assert "resumed from step" not in log and "[rank0] step=1 " in log and "training complete steps=4" in log
    assert json.loads((run_dir(cluster, name, 1) / "run.json").read_text())["state"] == "COMPLETED"


def test_two_variants_of_one_name_launched_together_each_train_in_a_run_of_their_own(cluster, tmp_path):
    """The issue's two commands, half a second apart: two runs, two checkpoints, each variant's log
    its own lr, each trained 40 steps from step 0."""
    name = unique_job_name("variant")
    procs = {}
    for lr in ("0.1", "0.01"):
        procs[lr] = subprocess.Popen(
            ["ansible-playbook", "launch.yml", "-e", f"slurm_launch_outputs_dir={tmp_path}",
             *sum((["-e", item] for item in request(name, "node110,node111",
                                                     f"--steps 40 --step-sleep 0.2 --log-every 10 --lr {lr}")), [])],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(0.5)
    try:
        outs = {lr: proc.communicate(timeout=400)[0] for lr, proc in procs.items()}
    finally:
        for proc in procs.values():
            proc.kill()
    for lr, out in outs.items():
        assert procs[lr].returncode == 0, out[-3000:]
    jobs = outputs_by_id(tmp_path, name)
    assert len(jobs) == 2, "two jobs"
    by_lr = {}
    for folder, job in jobs.values():
        log = (folder / f"{name}-{job['job_id']}.out").read_text()
        lrs = re.findall(r"\[rank0\] training lr=(\S+) steps=40", log)
        assert len(lrs) == 1, log
        by_lr[lrs[0]] = (job, log)
        assert job["state"] == "COMPLETED" and "resumed from step" not in log
        assert "[rank0] step=10 " in log and "training complete steps=40" in log
    assert sorted(by_lr) == ["0.01", "0.1"]
    assert sorted(job["run"] for job, _ in by_lr.values()) == [1, 2], "a run each"
    for job, _ in by_lr.values():
        run = run_dir(cluster, name, job["run"])
        assert json.loads((run / "checkpoints" / "checkpoint.json").read_text())["step"] == 40
        assert (run / f"{name}-{job['job_id']}.sbatch").exists()
    # The second variant said which run it did not take.
    second = max(by_lr.values(), key=lambda item: item[0]["run"])[0]
    assert second["run_line"].startswith("fresh run 2 (run 1 is another request: --lr ")


def test_a_run_taken_by_another_launch_at_the_same_moment_gets_a_script_for_the_run_it_takes(cluster, tmp_path):
    """The job script is rendered on the controller before any run is picked, its files named from
    the run's directory it will run in; another launch (a callback of the test, as the staging task
    starts) finishes run 1 first. The launch takes run 2, and its script, log and end marker are
    run 2's."""
    name = unique_job_name("race")
    plant = {"ANSIBLE_CALLBACK_PLUGINS": str(REPO / "tests" / "integration" / "callback_plugins"),
             "ANSIBLE_CALLBACKS_ENABLED": "plant_finished_run",
             "PLANT_RUN_DIR": str(run_dir(cluster, name, 1)),
             "PLANT_RUN_UID": str(pwd.getpwnam("alice").pw_uid)}
    proc = launch(tmp_path, *request(name, "node110", "--steps 2 --log-every 1"), env=plant)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    folder, job = newest(tmp_path, name)
    assert (job["state"], job["run"], job["run_line"]) == (
        "COMPLETED", 2, "fresh run 2 (run 1 is another request: it recorded no request)")
    script = (run_dir(cluster, name, 2) / f"{name}.sbatch").read_text()
    # The script names its files from the directory it runs in: the run taken, 2.
    assert "/runs/" not in script and "--output=%x-%j.out" in script
    assert job["stdout_path"].endswith(f"/jobs/alice/{name}/runs/2/{name}-{job['job_id']}.out"), job["stdout_path"]
    assert (run_dir(cluster, name, 2) / f".{job['job_id']}.ended").exists(), "the job wrote run 2's end marker"
    assert sorted(p.name for p in run_dir(cluster, name, 1).iterdir()) == ["run.json"], "nothing went into run 1"
