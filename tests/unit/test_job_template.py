"""The job script template, rendered by Ansible's own templating for several kinds of jobs,
then checked by bash and run with recording stand-ins for srun/scontrol/python (the real
ones are exercised by tests/integration/test_launch.py)."""

import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible_collections.hpc.slurm_train.plugins.module_utils import cluster_rules

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "templates" / "train.sbatch.j2"


def job(**overrides):
    """A job as roles/slurm_launch/tasks/derive.yml puts it together."""
    base = {
        "job_name": "magicdrive", "job_dir": "/starmap/nas/jobs/magicdrive", "account": "", "partition": "gpu_A6000",
        "num_nodes": 2, "nodelist": "node[110-111]", "gpus_per_node": 8, "cpus_per_task": 64, "nproc_per_node": 8,
        "omp_num_threads": 8, "time_limit": "20160", "warning_signal": "USR1", "warning_seconds": 120, "max_restarts": 1,
        "extra_directives": [], "cuda_home": "/starmap/nas/cuda/cuda-11.8", "replace_ld_library_path": False,
        "conda_root": "/starmap/nas/anaconda3", "conda_env": "magicdrivedit", "venv": "",
        "nccl_env_file": "/starmap/nas/env/nccl-gpu_A6000.sh", "env": {}, "rendezvous": "static", "master_port": 0,
        "script": "/starmap/nas/code/train.py", "script_args": [], "gpu_check": "/starmap/nas/jobs/alice/train/gpu_check.py",
        "end_marker": ".%j.ended",
    }
    base.update(overrides)
    return base


def render(job_vars):
    templar = Templar(loader=DataLoader(), variables={"job": job_vars})
    return templar.template(trust_as_template(TEMPLATE.read_text()))


def directives(script):
    return [line[len("#SBATCH "):] for line in script.splitlines() if line.startswith("#SBATCH ")]


def test_reference_job_gets_the_reference_header_and_a_valid_bash_script(tmp_path):
    script = render(job(account="huawei"))
    assert sorted(directives(script)) == sorted([
        "--account=huawei", "--cpus-per-task=64", "--gres=gpu:8", "--job-name=magicdrive", "--nodes=2",
        "--nodelist=node[110-111]", "--ntasks-per-node=1", "--open-mode=append", "--partition=gpu_A6000",
        "--signal=B:USR1@120", "--requeue", "--time=20160", "--output=/starmap/nas/jobs/magicdrive/%x-%j.out"])
    (tmp_path / "job.sbatch").write_text(script)
    subprocess.run(["bash", "-n", str(tmp_path / "job.sbatch")], check=True)
    assert 'export PATH="$CUDA_HOME/bin:$PATH"' in script
    assert 'export LD_LIBRARY_PATH="$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"' in script
    assert ("source /starmap/nas/anaconda3/etc/profile.d/conda.sh \\\n"
            "  && conda_env_prefix=/starmap/nas/anaconda3/envs/$(readlink /starmap/nas/anaconda3/envs/magicdrivedit"
            " || echo magicdrivedit) \\\n"
            '  && conda activate "$conda_env_prefix" \\\n') in script, \
        "by its prefix (a user's own env of that name must not win), the version the link names at the job's start"
    assert 'export OMP_NUM_THREADS="${OMP_NUM_THREADS:-8}"' in script


def test_replacing_ld_library_path_is_explicit():
    script = render(job(replace_ld_library_path=True))
    assert 'export LD_LIBRARY_PATH="$CUDA_HOME/lib64"\n' in script
    assert "${LD_LIBRARY_PATH:+" not in script


def test_cpu_job_in_a_virtualenv_with_c10d_has_no_gpu_cuda_or_account_lines():
    script = render(job(gpus_per_node=0, cuda_home="", conda_root="", conda_env="", venv="/opt/venv",
                        nodelist="", rendezvous="c10d", nproc_per_node=2, cpus_per_task=4, omp_num_threads=2))
    lines = directives(script)
    assert not any(line.startswith(("--gres", "--account", "--nodelist")) for line in lines)
    assert "CUDA_HOME" not in script and "conda" not in script
    assert "source /opt/venv/bin/activate" in script
    assert "--rdzv-backend=c10d" in script and "--master-addr" not in script


def test_extra_directives_and_env_are_rendered_quoted():
    script = render(job(extra_directives=["--exclusive"], env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
                                                               "NOTE": "two words; $(not run)"}))
    assert "#SBATCH --exclusive\n" in script
    assert "export NOTE='two words; $(not run)'\n" in script
    assert "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n" in script


STANDINS = {
    # scontrol show hostnames NODELIST: one name a line, as the real one prints them.
    "scontrol": '#!/bin/sh\n[ "$1 $2" = "show hostnames" ] && printf "node110\\nnode111\\n"\n',
    # srun: drop its own options (-w takes a value), run the command once as node 1 (the second node).
    "srun": '#!/bin/bash\nwhile [[ $1 == -* ]]; do [[ $1 == -w ]] && shift; shift; done\nSLURM_NODEID=1 exec "$@"\n',
    # python: record the argv it got, exit with the code the test asks for.
    # python: the job's look for a free port runs as it is; else record the argv it got, exit with
    # the code the test asks for.
    "python": ('#!/usr/bin/env python3\nimport json, os, sys\n'
               'if sys.argv[1:2] == ["-c"] and "getsockname" in sys.argv[2]:\n'
               '    exec(sys.argv[2])\n'
               '    sys.exit(0)\n'
               'json.dump(sys.argv[1:], open(os.environ["RECORD"], "w"))\n'
               'sys.exit(int(os.environ.get("EXIT_CODE", "0")))\n'),
}


def in_dir(tmp_path, **overrides):
    """A job whose directory (failure records, end marker) and NCCL env file are the test's own; no GPU check unless asked."""
    env_file = tmp_path / "nccl-gpu_A6000.sh"
    env_file.write_text("export NCCL_SOCKET_IFNAME=eth0\n")  # as roles/nccl_env writes it
    # A port given: the stand-ins for python are the training's (the free-port look has a test of its own).
    return job(**{"job_dir": str(tmp_path), "end_marker": f"{tmp_path}/.%j.ended", "cuda_home": "", "conda_root": "",
                  "conda_env": "", "nccl_env_file": str(env_file), "gpu_check": "", "master_port": 29400, **overrides})


def run_with_standins(tmp_path, script, exit_code=0, keep_srun=False, cwd=None, **slurm_env):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in STANDINS.items():
        if keep_srun and name == "srun":
            continue
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(stat.S_IRWXU)
    (tmp_path / "job.sbatch").write_text(script)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "RECORD": str(tmp_path / "argv.json"), "EXIT_CODE": str(exit_code),
           "SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "magicdrive", "SLURM_JOB_NUM_NODES": "2",
           "SLURM_JOB_NODELIST": "node[110-111]", "HOME": str(tmp_path), **slurm_env}
    proc = subprocess.run(["bash", str(tmp_path / "job.sbatch")], env=env, capture_output=True, text=True,
                          timeout=30, cwd=cwd)
    record = tmp_path / "argv.json"
    return proc, json.loads(record.read_text()) if record.exists() else None


def test_arguments_reach_the_training_exactly_and_rank_and_master_come_from_slurm(tmp_path):
    args = ["--name", "a b", "it's \"quoted\"", "$HOME", "*", "--lr=0.1"]
    script = render(in_dir(tmp_path, script_args=args, master_port=0))
    proc, argv = run_with_standins(tmp_path, script)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "run.json").read_text())["state"] == "COMPLETED"
    assert argv[0] == "-c"  # torchrun, run so that it keeps the failed worker's exit code
    port = re.search(r"^master node110:([0-9]+) rendezvous static", proc.stdout, re.M).group(1)
    assert argv[2:] == ["--node-rank=1", "--nnodes=2", "--nproc-per-node=8", "--master-addr=node110",
                        f"--master-port={port}", "/starmap/nas/code/train.py", *args]


def test_the_rendezvous_port_is_one_free_on_the_master_at_run_time_not_one_known_before(tmp_path):
    """A port derived from the job id (20000 + id % 20000) is one another user can hold on the first
    node before the job starts; the job takes one the kernel says is free there."""
    script = render(in_dir(tmp_path, master_port=0))
    assert "20000" not in script
    squatter = socket.socket()
    squatter.bind(("", 0))
    squatter.listen()
    held = squatter.getsockname()[1]
    ports = set()
    try:
        for job_id in ("4242", str(held - 20000 if held > 20000 else held)):
            proc, argv = run_with_standins(tmp_path, script, SLURM_JOB_ID=job_id, SLURMD_NODENAME="node110")
            assert proc.returncode == 0, proc.stderr
            port = int(next(arg for arg in argv if arg.startswith("--master-port=")).split("=")[1])
            assert port != held and 0 < port < 65536
            ports.add(port)
    finally:
        squatter.close()
    assert len(ports) == 2, "a fresh one each job"


def test_c10d_makes_node_rank_0_the_store_host_and_the_others_its_clients(tmp_path):
    script = render(in_dir(tmp_path, rendezvous="c10d"))
    # Node 1 joins only once node 0 said its own torchrun listens: here, never.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "seq").write_text("#!/bin/sh\necho 1; echo 2\n")  # two looks, not two minutes of them
    (bin_dir / "seq").chmod(0o755)
    proc, argv = run_with_standins(tmp_path, script)  # the srun stand-in runs node 1
    assert proc.returncode == 1 and argv is None
    assert "node 1: the rendezvous store on node110:29400 never became this job's: not joining it" in proc.stderr
    # Once it did, node 1 is a client of it.
    (bin_dir / "srun").write_text('#!/bin/bash\nwhile [[ $1 == --* ]]; do shift; done\n'
                                  'touch "$RENDEZVOUS_READY"; SLURM_NODEID=1 exec "$@"\n')
    proc, argv = run_with_standins(tmp_path, script, keep_srun=True)
    assert proc.returncode == 0, proc.stderr
    assert "--rdzv-conf=is_host=0" in argv and "--rdzv-backend=c10d" in argv
    # Node 0 hosts the store, never a client of another's.
    (bin_dir / "srun").write_text('#!/bin/bash\nwhile [[ $1 == --* ]]; do shift; done\nSLURM_NODEID=0 exec "$@"\n')
    proc, argv = run_with_standins(tmp_path, script, keep_srun=True)
    assert proc.returncode == 0, proc.stderr
    assert "--rdzv-conf=is_host=1" in argv


def test_the_node_groups_nccl_settings_reach_the_training(tmp_path):
    proc, _ = run_with_standins(tmp_path, render(in_dir(tmp_path)))
    assert proc.returncode == 0, proc.stderr
    assert "env: NCCL_SOCKET_IFNAME=eth0" in proc.stdout, proc.stdout


def test_a_missing_nccl_env_file_stops_the_job_naming_it(tmp_path):
    # Without it NCCL would pick its own interfaces: the job stops before training instead.
    missing = tmp_path / "env" / "nccl-gpu_A6000.sh"
    script = render(in_dir(tmp_path, nccl_env_file=str(missing)))
    (tmp_path / "job.sbatch").write_text(script)
    proc = subprocess.run(["bash", str(tmp_path / "job.sbatch")], capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "4242", "HOME": str(tmp_path)})
    assert proc.returncode == 90
    assert (f"cannot read the NCCL env file {missing} of this node group (run provision.yml for it)"
            in proc.stderr), proc.stderr
    assert "training" not in proc.stdout


@pytest.mark.parametrize("code", [1, 7, 137])
def test_the_jobs_exit_code_is_the_trainings(tmp_path, code):
    script = render(in_dir(tmp_path))
    proc, _ = run_with_standins(tmp_path, script, exit_code=code)
    assert proc.returncode == code
    assert f"training step finished with exit code {code}" in proc.stdout
    assert (tmp_path / ".4242.ended").read_text() == f"{code}\n", "the end marker a launch watches for"
    # The run's end record, which the next launch of the name reads (library/job_dir.py).
    assert json.loads((tmp_path / "run.json").read_text()) == {"job_id": 4242, "state": "FAILED", "exit_code": code}


def test_a_launchs_job_names_its_files_from_the_directory_sbatch_ran_in(tmp_path):
    """A launch renders the job before its run is taken: its log, end mark and records go to the
    directory Slurm runs it in (its working directory, PWD), the training from the code named from
    there, and a partition not given is no directive (the submission adds the one the nodes share)."""
    run_dir = tmp_path / "runs" / "1"
    run_dir.mkdir(parents=True)
    script = render(in_dir(tmp_path, job_dir="", end_marker=".%j.ended", partition="",
                           script="../../code/ab12cd34/train.py"))
    assert "--output=%x-%j.out" in directives(script)
    assert not any(line.startswith("--partition") for line in directives(script))
    (tmp_path / "bin").mkdir()
    proc, argv = run_with_standins(tmp_path, script, exit_code=3, cwd=run_dir, PWD=str(run_dir))
    assert proc.returncode == 3, proc.stderr
    # Given whole, from the directory sbatch ran in as the site names it (PWD).
    assert argv[-1] == f"{run_dir}/../../code/ab12cd34/train.py"
    assert (run_dir / ".4242.ended").read_text() == "3\n" and not (tmp_path / ".4242.ended").exists()
    assert json.loads((run_dir / "run.json").read_text())["exit_code"] == 3


def test_a_fixed_master_port_is_used_as_given(tmp_path):
    script = render(in_dir(tmp_path, master_port=34567))
    _, argv = run_with_standins(tmp_path, script)
    assert "--master-port=34567" in argv


# A training that checkpoints and stops on the warning (as examples/train_ddp.py does) or fails.
TRAINING_ON_WARNING = ('#!/bin/bash\necho started >> "$RECORD"\n'
                       'trap \'echo "got USR1" >> "$RECORD"; exit "${EXIT_CODE:-0}"\' USR1\n'
                       'while sleep 0.1; do :; done\n')
# scontrol: hostnames as above; any other call is recorded.
SCONTROL_RECORDING = ('#!/bin/sh\nif [ "$1 $2" = "show hostnames" ]; then printf "node110\\nnode111\\n"; '
                      'else echo "scontrol $*" >> "$RECORD"; fi\n')


def start_warned_job(tmp_path, restart, max_restarts=1, exit_code=0):
    """Run the batch script with a training that waits for the warning, then send it (B:USR1)."""
    script = render(in_dir(tmp_path, max_restarts=max_restarts))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("srun", STANDINS["srun"]), ("python", TRAINING_ON_WARNING), ("scontrol", SCONTROL_RECORDING)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(stat.S_IRWXU)
    (tmp_path / "job.sbatch").write_text(script)
    record = tmp_path / "record"
    record.touch()
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_ID": "77", "SLURM_JOB_NAME": "j", "RECORD": str(record),
           "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "node[110-111]", "SLURM_RESTART_COUNT": str(restart),
           "EXIT_CODE": str(exit_code)}
    batch = subprocess.Popen(["bash", str(tmp_path / "job.sbatch")], env=env, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while "started" not in record.read_text() and batch.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if batch.poll() is None:
        os.kill(batch.pid, signal.SIGUSR1)
    return batch, record


def test_at_the_warning_the_training_checkpoints_and_the_job_is_requeued(tmp_path):
    batch, record = start_warned_job(tmp_path, restart=0)
    out, _ = batch.communicate(timeout=30)
    assert "restart 0 of at most 1" in out and "time-limit warning (USR1)" in out
    assert record.read_text().splitlines() == ["started", "got USR1", "scontrol requeue 77"]
    assert "requeueing: restart 1 of at most 1 resumes from the checkpoint" in out
    assert batch.returncode == 0
    # The marker says "requeued", not an exit code: the follower asks Slurm at once and sees the requeue.
    assert (tmp_path / ".77.ended").read_text() == "requeued\n"
    assert not (tmp_path / "run.json").exists(), "nor its run"


def test_without_restarts_left_the_job_ends_at_its_time_limit(tmp_path):
    batch, record = start_warned_job(tmp_path, restart=1)
    deadline = time.monotonic() + 20
    while "got USR1" not in record.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    assert batch.poll() is None, "the job must wait for Slurm to end it (TIMEOUT), not report success"
    os.kill(batch.pid, signal.SIGTERM)  # what Slurm sends at the time limit
    out, _ = batch.communicate(timeout=30)
    assert "no restarts left (1)" in out and "waiting for the time limit" in out
    assert "scontrol requeue" not in record.read_text()
    assert batch.returncode == 143
    # Recorded before the wait: Slurm's kill at the limit leaves the script no time after it.
    assert json.loads((tmp_path / "run.json").read_text()) == {"job_id": 77, "state": "TIMEOUT", "exit_code": 0}


def test_a_training_that_fails_after_the_warning_is_not_requeued(tmp_path):
    batch, record = start_warned_job(tmp_path, restart=0, exit_code=3)
    out, _ = batch.communicate(timeout=30)
    assert batch.returncode == 3 and "training step finished with exit code 3" in out
    assert "scontrol requeue" not in record.read_text()


def test_a_restart_over_the_limit_does_not_train(tmp_path):
    """Slurm requeues on node failure too; the script bounds every kind of restart."""
    batch, record = start_warned_job(tmp_path, restart=2)
    out, _ = batch.communicate(timeout=30)
    assert batch.returncode == 75
    assert "started" not in record.read_text()
    assert json.loads((tmp_path / "run.json").read_text()) == {"job_id": 77, "state": "REQUEUE_LIMIT", "exit_code": 75}


def test_requeue_is_asked_of_slurm_only_with_restarts_allowed():
    assert "--requeue" in directives(render(job(max_restarts=2)))
    assert "--no-requeue" in directives(render(job(max_restarts=0)))


def test_the_node_that_failed_first_gives_the_jobs_exit_code(tmp_path):
    """srun reports the highest code of its tasks: here 143 of the node it stopped after node 1
    failed with 7. Each node records when it saw its failure; the job takes the first."""
    script = render(in_dir(tmp_path))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(STANDINS["scontrol"])
    (bin_dir / "srun").write_text('#!/bin/sh\necho "1700000000.900000 143" > "$TRAINING_FAILURE_RECORD.0"\n'
                                  'echo "1700000000.100000 7" > "$TRAINING_FAILURE_RECORD.1"\nexit 143\n')
    for name in ("scontrol", "srun"):
        (bin_dir / name).chmod(stat.S_IRWXU)
    (tmp_path / "job.sbatch").write_text(script)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_ID": "9", "SLURM_JOB_NAME": "j",
           "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "node[110-111]"}
    proc = subprocess.run(["bash", str(tmp_path / "job.sbatch")], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 7
    assert "training step finished with exit code 7" in proc.stdout
    assert not list(tmp_path.glob(".9.failure.*")), "the records are removed, so a requeued run starts clean"


# python, as the GPU check and the training: the check (argv[1] ends in gpu_check.py) exits with
# $GPU_CHECK_EXIT and records its argv; the training records that it ran.
GPU_CHECK_STANDIN = ('#!/usr/bin/env python3\nimport json, os, sys\n'
                     'if sys.argv[1].endswith("gpu_check.py"):\n'
                     '    json.dump(sys.argv[1:], open(os.environ["RECORD"] + ".check", "w"))\n'
                     '    sys.exit(int(os.environ["GPU_CHECK_EXIT"]))\n'
                     'open(os.environ["RECORD"] + ".trained", "w").close()\n')


@pytest.mark.parametrize("check_exit", [0, 1])
def test_a_gpu_job_runs_the_gpu_check_on_every_node_before_training(tmp_path, check_exit):
    check = f"{tmp_path}/gpu_check.py"
    script = render(in_dir(tmp_path, gpu_check=check, gpus_per_node=4, cuda_home="/nas/cuda/cuda-11.8"))
    assert "srun --nodes=\"$SLURM_JOB_NUM_NODES\" --ntasks-per-node=1 \\\n" in script
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("srun", STANDINS["srun"]), ("scontrol", STANDINS["scontrol"]), ("python", GPU_CHECK_STANDIN)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(stat.S_IRWXU)
    (tmp_path / "job.sbatch").write_text(script)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "RECORD": str(tmp_path / "rec"), "GPU_CHECK_EXIT": str(check_exit),
           "SLURM_JOB_ID": "5", "SLURM_JOB_NAME": "j", "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "node[110-111]"}
    proc = subprocess.run(["bash", str(tmp_path / "job.sbatch")], env=env, capture_output=True, text=True, timeout=30)
    assert json.loads((tmp_path / "rec.check").read_text()) == [check, "--gpus-per-node=4",
                                                               "--cuda-home=/nas/cuda/cuda-11.8"]
    if check_exit:
        assert proc.returncode == 91, proc.stdout + proc.stderr
        assert "GPU check failed (the reasons above, per node): not training" in proc.stderr
        assert not (tmp_path / "rec.trained").exists(), "nothing trains after a failed check"
        assert (tmp_path / ".5.ended").read_text() == "91\n", "the end marker a launch watches for"
    else:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert (tmp_path / "rec.trained").exists()


def test_a_cpu_job_has_no_gpu_check(tmp_path):
    assert "gpu_check.py" not in render(in_dir(tmp_path, gpu_check=f"{tmp_path}/gpu_check.py", gpus_per_node=0))


SWEEP = [[["lr", "0.1"], ["seed", "1"]], [["lr", "0.01"], ["seed", "1"]], [["lr", "0.1"], ["seed", "-2"]]]


def test_a_sweep_is_one_array_whose_task_trains_its_point_in_a_directory_of_its_own(tmp_path):
    script = render(in_dir(tmp_path, script_args=["--steps", "6"], sweep=SWEEP, sweep_parallel=2))
    assert "--array=0-2%2" in directives(script)
    assert f"--output={tmp_path}/%x-%A_%a.out" in directives(script)
    proc, argv = run_with_standins(tmp_path, script, SLURM_ARRAY_TASK_ID="2", SLURM_ARRAY_JOB_ID="4240")
    assert proc.returncode == 0, proc.stderr
    assert argv[-7:] == ["/starmap/nas/code/train.py", "--steps", "6", "--lr", "0.1", "--seed", "-2"]
    assert "point 2 of 3: --lr 0.1 --seed -2" in proc.stdout
    # The point's own end record; the array's marker gets a line per task.
    assert json.loads((tmp_path / "points" / "2" / "run.json").read_text())["state"] == "COMPLETED"
    assert not (tmp_path / "run.json").exists()
    assert (tmp_path / ".4240.ended").read_text() == "2 0\n"


def test_a_sweep_without_a_limit_has_no_throttle_and_a_task_outside_it_stops(tmp_path):
    script = render(in_dir(tmp_path, sweep=SWEEP))
    assert "--array=0-2" in directives(script)
    proc, argv = run_with_standins(tmp_path, script, SLURM_ARRAY_TASK_ID="3", SLURM_ARRAY_JOB_ID="4240")
    assert (proc.returncode, argv) == (92, None)
    assert "array task '3' is not a point of this sweep (0-2)" in proc.stderr


def test_a_resumed_sweep_does_not_train_a_point_that_completed(tmp_path):
    script = render(in_dir(tmp_path, sweep=SWEEP))
    (tmp_path / "points" / "1").mkdir(parents=True)
    (tmp_path / "points" / "1" / "run.json").write_text('{"job_id": 4241, "state": "COMPLETED", "exit_code": 0}\n')
    proc, argv = run_with_standins(tmp_path, script, SLURM_ARRAY_TASK_ID="1", SLURM_ARRAY_JOB_ID="4240")
    assert (proc.returncode, argv) == (0, None), proc.stderr
    assert "point 1 already COMPLETED in this run: not training it again" in proc.stdout
    assert (tmp_path / ".4240.ended").read_text() == "1 0\n"
    proc, argv = run_with_standins(tmp_path, script, SLURM_ARRAY_TASK_ID="0", SLURM_ARRAY_JOB_ID="4240")
    assert proc.returncode == 0 and argv[-4:] == ["--lr", "0.1", "--seed", "1"]


def torchrun_wrapper(script):
    """The Python that the job script runs in place of torchrun (torchrun_keeping_exit_code)."""
    start = script.index("torchrun_keeping_exit_code='\n") + len("torchrun_keeping_exit_code='\n")
    return script[start:script.index("\n'\n", start)]


def stage_hang_dump(directory):
    """hang_dump.py in the job's working directory, as a launch stages it and names it to the wrapper,
    which imports it: the variable for the wrapper's environment."""
    shutil.copy(REPO / "roles" / "slurm_launch" / "files" / "hang_dump.py", directory / "hang_dump.py")
    return {"TRAINING_HANG_DUMP": "hang_dump.py"}


@pytest.mark.parametrize("worker_exit", [0, 7])
def test_torchrun_ends_without_tearing_torch_down_and_keeps_the_workers_exit_code(tmp_path, worker_exit):
    """Real torchrun (torch from this virtualenv), one worker. Once the workers ended, the wrapper
    leaves at once: an atexit handler of its own interpreter (planted by sitecustomize, as torch's
    own teardown would run) never runs, the job's answer does not wait for it; what it printed
    is flushed; the exit code is the worker's, with the failure recorded for the job script; the
    teed lines are looked for at the wrapper's pace."""
    wrapper = torchrun_wrapper(render(job()))
    (tmp_path / "train.py").write_text(f"print('training complete', flush=True)\nraise SystemExit({worker_exit})\n")
    staged = stage_hang_dump(tmp_path)
    (tmp_path / "sitecustomize.py").write_text(
        "import atexit, os, sys\n"
        "if sys.argv[:1] == ['-c']:\n"
        "    atexit.register(lambda: open(os.environ['TEARDOWN_RECORD'], 'w').close())\n"
        "    print('wrapper output, unflushed', end='')\n"
        "    import torch.distributed.elastic.multiprocessing.tail_log as tail_log\n"
        "    real_tail = tail_log.tail_logfile\n"
        "    def tail_logfile(**given):\n"
        "        with open(os.environ['TAIL_RECORD'], 'a') as record:\n"
        "            record.write(f\"{given['interval_sec']}\\n\")\n"
        "        return real_tail(**given)\n"
        "    tail_log.tail_logfile = tail_logfile\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "TEARDOWN_RECORD": str(tmp_path / "torn-down"), "TAIL_RECORD": str(tmp_path / "tail-intervals"),
           "TRAINING_FAILURE_RECORD": str(tmp_path / ".9.failure"), "SLURM_NODEID": "0",
           "SLURMD_NODENAME": "node7", "TMPDIR": str(tmp_path / "scratch"),
           "TRAINING_FLIGHT_RECORDER_KEEP": str(tmp_path / "nccl-9-0"), **staged}
    (tmp_path / "scratch").mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", wrapper, "--nnodes=1", "--nproc-per-node=1", "--master-addr=127.0.0.1",
         f"--master-port={29500 + os.getpid() % 1000 + worker_exit}", str(tmp_path / "train.py")],
        env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == worker_exit, proc.stderr[-2000:]
    assert "[rank0@node7] training complete\n" in proc.stdout and "wrapper output, unflushed" in proc.stdout
    assert cluster_rules.rank_line("[rank0@node7] training complete") == (0, "node7", "training complete")
    assert not list((tmp_path / "scratch").iterdir()), "the workers' teed files were removed"
    assert not (tmp_path / "torn-down").exists(), "the interpreter's teardown was skipped"
    # The teed stdout and stderr of the one worker, each looked at every 0.02 s, not torch's 0.1 s.
    assert (tmp_path / "tail-intervals").read_text().split() == ["0.02", "0.02"]
    recorded = list(tmp_path.glob(".9.failure.*"))
    assert [path.read_text().split()[1] for path in recorded] == ([] if worker_exit == 0 else [str(worker_exit)])


# A training that resumes from checkpoint.json's step (or 0), prints "step=N" as it goes, saves a
# checkpoint at SAVE_AT (when given) and exits with EXIT_CODE at FAIL_AT.
TRAINING_THAT_FAILS = ('#!/usr/bin/env python3\nimport json, os, sys\n'
                       'path = os.path.join(os.environ["CHECKPOINT_DIR"], "checkpoint.json")\n'
                       'step = json.load(open(path))["step"] if os.path.exists(path) else 0\n'
                       'while True:\n'
                       '    if str(step) == os.environ.get("SAVE_AT"):\n'
                       '        os.makedirs(os.path.dirname(path), exist_ok=True)\n'
                       '        json.dump({"step": step}, open(path, "w"))\n'
                       '    if step == int(os.environ["FAIL_AT"]):\n'
                       '        print(f"failing at step={step}", flush=True)\n'
                       '        sys.exit(int(os.environ["EXIT_CODE"]))\n'
                       '    step += 1\n'
                       '    print(f"step={step} loss=0.5", flush=True)\n')


def run_failing_attempt(tmp_path, restart, max_restarts=3, **env):
    """One attempt of the batch script, its stdout the log file as under Slurm (--output, append)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("srun", STANDINS["srun"]), ("python", TRAINING_THAT_FAILS), ("scontrol", SCONTROL_RECORDING)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(stat.S_IRWXU)
    (tmp_path / "job.sbatch").write_text(render(in_dir(tmp_path, max_restarts=max_restarts)))
    record = tmp_path / "record"
    record.touch()
    log = tmp_path / "j-77.out"
    with log.open("a") as out:
        proc = subprocess.run(["bash", str(tmp_path / "job.sbatch")], stdout=out, stderr=subprocess.STDOUT, timeout=30,
                              env={"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_ID": "77", "SLURM_JOB_NAME": "j",
                                   "RECORD": str(record), "SLURM_JOB_NUM_NODES": "2", "EXIT_CODE": "1",
                                   "SLURM_JOB_NODELIST": "node[110-111]", "SLURM_RESTART_COUNT": str(restart), **env})
    return proc.returncode, log.read_text(), record.read_text()


def test_a_failed_attempt_that_advanced_the_checkpoint_is_requeued_one_that_did_not_stops(tmp_path):
    # Attempt 1 saves step 0 (none before it) and fails at step 5: progress, requeued.
    code, log, calls = run_failing_attempt(tmp_path, restart=0, SAVE_AT="0", FAIL_AT="5")
    assert code == 0 and calls == "scontrol requeue 77\n", log
    assert "the checkpoint advanced from step none to 0: restart 1 of at most 3 resumes from it" in log
    assert (tmp_path / ".77.ended").read_text() == "requeued\n"
    assert not (tmp_path / "run.json").exists()
    # Attempt 2 resumes at 0 and fails at step 5 again: stopped, with restarts to spare.
    code, log, calls = run_failing_attempt(tmp_path, restart=1, SAVE_AT="0", FAIL_AT="5")
    assert code == 1 and calls == "scontrol requeue 77\n", "no second requeue"
    assert ("NO_PROGRESS: failed at step 5 without advancing the checkpoint from step 0: not requeued "
            "(2 restarts left unused)") in log
    assert json.loads((tmp_path / "run.json").read_text()) == {
        "job_id": 77, "state": "NO_PROGRESS", "exit_code": 1, "step": 5, "checkpoint_step": 0}
    assert (tmp_path / ".77.ended").read_text() == "1\n"


def test_a_training_that_writes_no_checkpoint_is_never_requeued_after_a_failure(tmp_path):
    code, log, calls = run_failing_attempt(tmp_path, restart=0, FAIL_AT="3")
    assert code == 1 and calls == "", log
    assert "the training wrote no checkpoint" in log and "not requeued" in log
    assert json.loads((tmp_path / "run.json").read_text()) == {"job_id": 77, "state": "FAILED", "exit_code": 1}


def test_an_attempt_cut_by_slurm_without_progress_stops_the_next_one_before_training(tmp_path):
    """A node failure kills the batch shell: its attempt record stays, and the requeued attempt reads it."""
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "checkpoint.json").write_text('{"step": 40}')
    (tmp_path / ".77.attempt").write_text("40\n")
    code, log, _ = run_failing_attempt(tmp_path, restart=1, FAIL_AT="1000000")
    assert code == 76 and "step=41" not in log
    assert "the last attempt was cut (node failure) without advancing the checkpoint from step 40" in log
    assert json.loads((tmp_path / "run.json").read_text())["state"] == "NO_PROGRESS"
    # One that had advanced it trains again.
    (tmp_path / ".77.attempt").write_text("30\n")
    (tmp_path / "run.json").unlink()
    code, log, calls = run_failing_attempt(tmp_path, restart=1, FAIL_AT="45")
    assert "step=41" in log and code == 1 and "NO_PROGRESS: failed at step 45" in log


# Bad nodes: python runs bad_nodes.py (the record) as a recording stand-in, anything else as the training.
BAD_NODES_PYTHON = ('#!/bin/bash\nif [[ $1 == *bad_nodes.py ]]; then echo "$*" >> "$RECORD.marks"; exit 0; fi\n'
                    'exec training "$@"\n')
# sinfo -N -n NODES -o '%N %t': the states the test gives in $NODE_STATES.
SINFO_STATES = '#!/bin/sh\nprintf "$NODE_STATES"\n'


def run_cut_attempt(tmp_path, node_states, hours=24, **env):
    """The attempt after one Slurm cut (its attempt record and nodes left behind) at checkpoint 40;
    this one saves step 42 and fails at 45: requeued."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("srun", STANDINS["srun"]), ("training", TRAINING_THAT_FAILS), ("python", BAD_NODES_PYTHON),
                       ("scontrol", SCONTROL_RECORDING), ("sinfo", SINFO_STATES)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(stat.S_IRWXU)
    (tmp_path / "checkpoints").mkdir(exist_ok=True)
    (tmp_path / "checkpoints" / "checkpoint.json").write_text('{"step": 40}')
    (tmp_path / ".77.attempt").write_text("30\n")
    (tmp_path / ".77.attempt-nodes").write_text("node110\nnode111\n")
    script = render(in_dir(tmp_path, max_restarts=3, bad_nodes_script=f"{tmp_path}/bad_nodes.py",
                           bad_nodes_root="/nas/jobs", bad_node_hours=hours))
    (tmp_path / "job.sbatch").write_text(script)
    record = tmp_path / "record"
    record.write_text("")
    proc = subprocess.run(["bash", str(tmp_path / "job.sbatch")], capture_output=True, text=True, timeout=30,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_ID": "77", "SLURM_JOB_NAME": "j",
                               "RECORD": str(record), "SLURM_JOB_NUM_NODES": "2", "EXIT_CODE": "1", "SAVE_AT": "42",
                               "FAIL_AT": "45", "SLURM_JOB_NODELIST": "node[110-111]", "SLURM_RESTART_COUNT": "1",
                               "NODE_STATES": node_states, **env})
    marks = tmp_path / "record.marks"
    return proc, record.read_text(), marks.read_text() if marks.exists() else ""


def test_a_node_down_after_a_cut_attempt_is_marked_and_left_out_of_the_requeue(tmp_path):
    proc, calls, marks = run_cut_attempt(tmp_path, "node110 down*\\nnode111 alloc\\n")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert marks == f"{tmp_path}/bad_nodes.py mark /nas/jobs node110 NODE_FAIL 24 77\n"
    assert "bad node node110 (NODE_FAIL): left out of this job's next attempt" in proc.stdout
    # Slurm takes ExcNodeList only from a pending job: after the requeue, as the script ends.
    assert calls == "scontrol requeue 77\nscontrol show job 77\nscontrol update JobId=77 ExcNodeList=node110\n"
    assert "step=41" in proc.stdout, "the attempt trains on the nodes it has"
    assert (tmp_path / ".77.attempt-nodes").read_text() == "node110\nnode111\n", "this attempt's nodes, for the next"


@pytest.mark.parametrize("states, marked", [
    ("node110 alloc\\nnode111 idle\\n", []),  # preempted or requeued by hand: nothing failed
    ("node110 drain\\nnode111 idle*\\n", ["node110", "node111"]),
    ("node110 drng\\nnode111 fail\\n", ["node110", "node111"]),
])
def test_only_nodes_slurm_has_down_drained_failing_or_not_responding_are_marked(tmp_path, states, marked):
    proc, calls, marks = run_cut_attempt(tmp_path, states)
    assert [line.split()[3] for line in marks.splitlines()] == marked, proc.stdout + proc.stderr
    assert ("ExcNodeList=" + ",".join(marked) in calls) == bool(marked)


def test_without_hours_to_keep_it_a_bad_node_is_left_out_of_the_requeue_but_not_recorded(tmp_path):
    proc, calls, marks = run_cut_attempt(tmp_path, "node111 down*\\n", hours=0)
    assert marks == "" and "bad_nodes.py" not in (tmp_path / "job.sbatch").read_text()
    assert calls.endswith("scontrol update JobId=77 ExcNodeList=node111\n"), proc.stdout + proc.stderr


def test_mark_bad_node_refuses_what_is_no_node_or_reason_and_keeps_anothers_exit_trap(tmp_path):
    script = render(in_dir(tmp_path))
    functions = script[script.index("bad_nodes=()"):script.index("# Slurm requeues a job on node failure")]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text('#!/bin/sh\ncase "$1 $2" in\n'
                                      '  "show job") echo "   ReqNodeList=$REQUESTED ExcNodeList=node[1-2] Features=(null)" ;;\n'
                                      '  "show hostnames") [ "$3" = "node[1-2]" ] && printf "node1\\nnode2\\n" '
                                      '|| printf "node9\\nnode11\\n" ;;\n'
                                      '  *) echo "scontrol $*" >> "$RECORD" ;;\nesac\n')
    (bin_dir / "scontrol").chmod(stat.S_IRWXU)
    test = (functions + "trap 'echo their exit trap ran' EXIT\n"
            "mark_bad_node 'node9;reboot' HUNG || echo refused 1\nmark_bad_node node9 TIRED || echo refused 2\n"
            "mark_bad_node node9 HUNG\nmark_bad_node node9 HEALTH\nmark_bad_node node10 HEALTH\nend_mark=$END_MARK\n")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_ID": "5", "RECORD": str(tmp_path / "rec"), "REQUESTED": "(null)"}
    proc = subprocess.run(["bash", "-c", test], capture_output=True, text=True, timeout=10,
                          env={**env, "END_MARK": "requeued"})
    assert "refused 1\n" in proc.stdout and "refused 2\n" in proc.stdout
    assert "mark_bad_node 'node9;reboot' 'HUNG': give a node name and NODE_FAIL, GPU_CHECK, HUNG or HEALTH" in proc.stderr
    assert proc.stdout.endswith("the job's next attempt leaves out node[1-2],node9,node10\ntheir exit trap ran\n")
    assert (tmp_path / "rec").read_text() == "scontrol update JobId=5 ExcNodeList=node[1-2],node9,node10\n"
    # Not requeued: nothing asked of Slurm after the end marker (a launch waits on Slurm's final word).
    (tmp_path / "rec").unlink()
    proc = subprocess.run(["bash", "-c", test], capture_output=True, text=True, timeout=10, env={**env, "END_MARK": "0"})
    assert proc.stdout.endswith("left out of this job's next attempt\ntheir exit trap ran\n")
    assert not (tmp_path / "rec").exists()
    # A job given its nodes by name keeps them: excluded, it could never start again.
    proc = subprocess.run(["bash", "-c", test], capture_output=True, text=True, timeout=10,
                          env={**env, "END_MARK": "requeued", "REQUESTED": "node[9,11]"})
    assert "node9 is in the job's own node list: its next attempt runs there again" in proc.stderr
    assert (tmp_path / "rec").read_text() == "scontrol update JobId=5 ExcNodeList=node[1-2],node10\n"


def test_a_node_that_fails_the_gpu_check_is_marked(tmp_path):
    script = render(in_dir(tmp_path, gpu_check=f"{tmp_path}/gpu_check.py", gpus_per_node=4,
                           bad_nodes_script=f"{tmp_path}/bad_nodes.py", bad_nodes_root="/nas/jobs", bad_node_hours=0.5))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    check = ('#!/bin/bash\nif [[ $1 == *gpu_check.py ]]; then\n  echo "gpu-check node110: ok: driver 550"\n'
             '  echo "gpu-check node111: FAILED: driver none"; echo "gpu-check node111: torch sees 0 GPUs" >&2; exit 1\nfi\n')
    for name, text in (("srun", STANDINS["srun"]), ("scontrol", SCONTROL_RECORDING),
                       ("python", BAD_NODES_PYTHON.replace("exec training", check + "exec training"))):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(stat.S_IRWXU)
    (tmp_path / "job.sbatch").write_text(script)
    proc = subprocess.run(["bash", str(tmp_path / "job.sbatch")], capture_output=True, text=True, timeout=30,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin", "RECORD": str(tmp_path / "rec"), "SLURM_JOB_ID": "5",
                               "SLURM_JOB_NAME": "j", "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "node[110-111]"})
    assert proc.returncode == 91, proc.stdout + proc.stderr
    assert "gpu-check node111: torch sees 0 GPUs" in proc.stdout, "the check's reasons stay in the log"
    assert (tmp_path / "rec.marks").read_text() == f"{tmp_path}/bad_nodes.py mark /nas/jobs node111 GPU_CHECK 0.5 5\n"


# The health gate's stand-ins: python as the gate on each node (records its argv), as its judge
# (records its argv, prints $HEALTH_VERDICT, the line the real judge prints) and as the training;
# scontrol records what the job asks of Slurm (and answers `show job` with the exclusions set);
# python as the bad-nodes record (bad_nodes.py mark ROOT NODE REASON ...) records the nodes marked.
GATE_PYTHON = ('#!/usr/bin/env python3\nimport json, os, sys\n'
               'record = os.environ["RECORD"]\n'
               'if sys.argv[1].endswith("bad_nodes.py"):\n'
               '    open(record + ".bad", "a").write(f"{sys.argv[4]} {sys.argv[5]}\\n")\n'
               '    sys.exit(0)\n'
               'if sys.argv[1].endswith("health_check.py"):\n'
               '    json.dump(sys.argv[1:], open(record + (".judge" if "--judge" in sys.argv else ".gate"), "w"))\n'
               '    print(os.environ["HEALTH_VERDICT"]) if "--judge" in sys.argv else None\n'
               '    sys.exit(0)\n'
               'open(record + ".trained", "w").close()\n')
GATE_SCONTROL = ('#!/bin/sh\ncase "$1 $2" in\n'
                 '  "show hostnames") [ "$3" = "node[110-111]" ] && printf "node110\\nnode111\\n" || echo "$3" | tr , "\\n"'
                 '; exit 0 ;;\n'
                 '  "show job") echo "   ReqNodeList=(null) ExcNodeList=$(cat "$RECORD.excluded" 2>/dev/null || echo "(null)")"'
                 '; exit 0 ;;\n'
                 '  update*) echo "${3#ExcNodeList=}" > "$RECORD.excluded" ;;\nesac\n'
                 'echo "$*" >> "$RECORD.scontrol"\n')


def run_gate(tmp_path, verdict, restart=0, mark=True, **overrides):
    check = f"{tmp_path}/health_check.py"
    values = {"health_check": check, "health_slow_factor": 1.5, "health_matmul_size": 0, "max_restarts": 2,
              "gpus_per_node": 8, "cuda_home": "/nas/cuda/cuda-11.8", **overrides}
    if mark:
        values.update(bad_nodes_script=f"{tmp_path}/bad_nodes.py", bad_nodes_root="/nas/jobs", bad_node_hours=24)
    script = render(in_dir(tmp_path, **values))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("srun", STANDINS["srun"]), ("scontrol", GATE_SCONTROL), ("python", GATE_PYTHON)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(stat.S_IRWXU)
    (tmp_path / "job.sbatch").write_text(script)
    record = tmp_path / "rec"
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "RECORD": str(record), "HEALTH_VERDICT": verdict,
           "SLURM_JOB_ID": "5", "SLURM_JOB_NAME": "j", "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "node[110-111]",
           "SLURM_JOB_PARTITION": "gpu_A6000", "SLURM_RESTART_COUNT": str(restart)}
    proc = subprocess.run(["bash", str(tmp_path / "job.sbatch")], env=env, capture_output=True, text=True, timeout=30)

    def read(suffix, default=None):
        path = Path(f"{record}{suffix}")
        return path.read_text() if path.exists() else default
    return proc, read


def test_a_gate_that_passes_lets_the_attempt_train_after_one_step_over_the_nodes(tmp_path):
    proc, read = run_gate(tmp_path, "pass -")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert read(".trained") is not None
    gate = json.loads(read(".gate"))
    assert gate[0] == f"{tmp_path}/health_check.py"
    assert gate[1:] == [f"--dir={tmp_path}", "--tag=5", "--gpus-per-node=8", "--cuda-home=/nas/cuda/cuda-11.8",
                        "--matmul-size=0"]
    judge = json.loads(read(".judge"))
    assert judge[1:8] == ["--judge", f"--dir={tmp_path}", "--tag=5", "--nodes=node110,node111", "--slow-factor=1.5",
                          "--restart=0", "--max-restarts=2"]
    assert "--partition=gpu_A6000" in judge and "--explicit" in judge, "a node list was given"
    assert read(".bad") is None and read(".scontrol") is None
    assert "gpu_check.py" not in (tmp_path / "job.sbatch").read_text(), "the GPU check is the gate's part"


def test_a_node_groups_gate_marks_the_slow_node_and_requeues_the_job_without_it(tmp_path):
    proc, read = run_gate(tmp_path, "requeue node109,node111 node111:HEALTH", nodelist="")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "--explicit" not in json.loads(read(".judge"))
    assert read(".bad") == "node111 HEALTH\n"
    # Requeued first: Slurm changes the exclusions of a pending job only.
    assert read(".scontrol").splitlines() == ["requeue 5", "update JobId=5 ExcNodeList=node109,node111"]
    assert read(".trained") is None
    assert (tmp_path / ".5.ended").read_text() == "requeued\n"
    assert not (tmp_path / ".5.attempt").exists(), "the next attempt is no cut one"
    end = (tmp_path / "attempts-5.tsv").read_text().splitlines()[-1].split("\t")
    assert (end[0], end[1], end[3]) == ("end", "0", "failed"), "the attempt's time is lost"


@pytest.mark.parametrize("verdict, code, said", [
    ("fail - node111:HEALTH", 94, "health gate failed (the reasons above): not training"),
    ("fail - node110:GPU_CHECK node111:GPU_CHECK", 91, "GPU check failed (the reasons above, per node): not training"),
    ("fail - node110:GPU_CHECK node111:HEALTH", 94, "health gate failed (the reasons above): not training"),
    ("fail -", 94, "health gate failed (the reasons above): not training"),
    # A judge that printed nothing (it crashed): no verdict is no pass.
    ("", 94, "health gate failed (the reasons above): not training"),
])
def test_a_gate_that_fails_stops_the_job_naming_its_nodes(tmp_path, verdict, code, said):
    proc, read = run_gate(tmp_path, verdict)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert said in proc.stderr
    assert read(".trained") is None and read(".scontrol") is None, "not requeued"
    assert (tmp_path / ".5.ended").read_text() == f"{code}\n"
    marked = [f"{one.split(':')[0]} {one.split(':')[1]}" for one in verdict.split()[2:]]
    assert (read(".bad") or "").splitlines() == marked


def test_without_mark_bad_node_the_gate_still_requeues(tmp_path):
    """Without a record of bad nodes (a job of the NAS job templates), the gate requeues all the same."""
    proc, read = run_gate(tmp_path, "requeue node111 node111:HEALTH", mark=False, nodelist="", health_slow_factor=2.0)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "mark_bad_node" not in proc.stderr, "no 'command not found'"
    assert read(".scontrol").splitlines() == ["requeue 5", "update JobId=5 ExcNodeList=node111"]
    assert "--slow-factor=2.0" in json.loads(read(".judge"))
