"""Runs of a job name on the default local cluster: a job name is an experiment, each launch a
run of it in <jobs>/<user>/<name>/runs/<id>/, and only an unfinished run is resumed."""

import json
import pwd
import subprocess
from pathlib import Path

import torch

from cluster import REPO
from launch import TRAINER, launch, unique_job_name


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


def test_a_run_stopped_at_its_time_limit_is_resumed_and_resume_never_starts_afresh(cluster, tmp_path):
    """Two names at once, one node each: a real time limit (1 minute), Slurm's own warning, no restarts
    (each job ends TIMEOUT with its checkpoint); then one is resumed, the other started afresh."""
    names = {node: unique_job_name("limit") for node in ("node110", "node111")}
    procs = {node: subprocess.Popen(
        ["ansible-playbook", "launch.yml", "-e", f"slurm_launch_outputs_dir={tmp_path}",
         *sum((["-e", item] for item in request(name, node, "--steps 1000 --step-sleep 0.5 --log-every 1",
                                                 "max_restarts=0", "time_limit=1", "slurm_launch_warning_seconds=20")), [])],
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

    # Launched again as it was (resume=auto): run 1 goes on from its checkpoint, to 4 steps more.
    name, step = names["node110"], saved["node110"]
    proc = launch(tmp_path, *request(name, "node110", f"--steps {step + 4} --log-every 1"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    folder, job = newest(tmp_path, name)
    assert (job["state"], job["run"]) == ("COMPLETED", 1)
    assert summary_line(folder, "run") == job["run_line"] == f"resumed run 1 from its checkpoint at step {step}"
    log = (folder / f"{name}-{job['job_id']}.out").read_text()
    assert f"[rank0] resumed from step={step}" in log and f"training complete steps={step + 4}" in log
    assert not run_dir(cluster, name, 2).exists()

    # resume=never: a fresh run 2 from step 0, though run 1 of this name ended by its time limit.
    name, step = names["node111"], saved["node111"]
    proc = launch(tmp_path, *request(name, "node111", "--steps 4 --log-every 1", "resume=never"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    folder, job = newest(tmp_path, name)
    assert (job["state"], job["run"], summary_line(folder, "run")) == ("COMPLETED", 2, "fresh run 2")
    log = (folder / f"{name}-{job['job_id']}.out").read_text()
    assert "resumed from step" not in log and "[rank0] step=1 " in log and "training complete steps=4" in log
    assert json.loads((run_dir(cluster, name, 1) / "run.json").read_text())["state"] == "TIMEOUT", "run 1 is left as it was"


def test_a_run_taken_by_another_launch_at_the_same_moment_gets_a_script_for_the_run_it_takes(cluster, tmp_path):
    """The job script is rendered on the controller before any run is picked, its run's paths as
    placeholders; another launch (a callback of the test, as the staging task starts) finishes
    run 1 first. The launch takes run 2, and its script, log and end marker are run 2's."""
    name = unique_job_name("race")
    plant = {"ANSIBLE_CALLBACK_PLUGINS": str(REPO / "tests" / "integration" / "callback_plugins"),
             "ANSIBLE_CALLBACKS_ENABLED": "plant_finished_run",
             "PLANT_RUN_DIR": str(run_dir(cluster, name, 1)),
             "PLANT_RUN_UID": str(pwd.getpwnam("alice").pw_uid)}
    proc = launch(tmp_path, *request(name, "node110", "--steps 2 --log-every 1"), env=plant)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    folder, job = newest(tmp_path, name)
    assert (job["state"], job["run"], job["run_line"]) == ("COMPLETED", 2, "fresh run 2")
    script = (run_dir(cluster, name, 2) / f"{name}.sbatch").read_text()
    assert f"/jobs/alice/{name}/runs/2/" in script and "/runs/1/" not in script and "-dir-" not in script
    assert (run_dir(cluster, name, 2) / f".{job['job_id']}.ended").exists(), "the job wrote run 2's end marker"
    assert sorted(p.name for p in run_dir(cluster, name, 1).iterdir()) == ["run.json"], "nothing went into run 1"
