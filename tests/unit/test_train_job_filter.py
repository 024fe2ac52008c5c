"""The one place a job's derived values come from, for launch.yml and the NAS job templates."""

import importlib.util
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

FILTER = Path(__file__).resolve().parents[2] / "roles" / "cluster" / "filter_plugins" / "train_job.py"
spec = importlib.util.spec_from_file_location("train_job", FILTER)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)


def request(**overrides):
    base = {key: "" for key in module.JOB_KEYS}
    base.update(num_nodes="2", gpus_per_node="8", cpus_per_task="64", nproc_per_node="0", omp_num_threads="0",
                warning_signal="USR1", warning_seconds="120", max_restarts="3", master_port="0", partition="gpu_A6000", nccl_env_dir="/nas/env",
                conda_root="/nas/anaconda3", conda_env="magicdrivedit", replace_ld_library_path=False)
    # Values the job script checks (train_job refuses what cannot go into it).
    base.update(job_name="train", rendezvous="static", time_limit="60", extra_directives=[], env={}, script_args=[])
    base.update(overrides)
    return base


def test_one_process_per_gpu_and_the_cpus_shared_out():
    job = module.train_job(request())
    assert (job["nproc_per_node"], job["omp_num_threads"], job["num_nodes"]) == (8, 8, 2)
    assert job["nccl_env_file"] == "/nas/env/nccl-gpu_A6000.sh" and "nccl_env_dir" not in job


def test_a_cpu_node_runs_one_process_and_given_values_win():
    assert module.train_job(request(gpus_per_node=0, cpus_per_task=4))["nproc_per_node"] == 1
    job = module.train_job(request(nproc_per_node="2", omp_num_threads="3"))
    assert (job["nproc_per_node"], job["omp_num_threads"]) == (2, 3)
    assert module.train_job(request(nproc_per_node=128, cpus_per_task=64))["omp_num_threads"] == 1


def test_a_virtualenv_replaces_the_conda_env():
    job = module.train_job(request(venv="/opt/venv"))
    assert (job["conda_root"], job["conda_env"], job["venv"]) == ("", "", "/opt/venv")
    assert module.train_job(request())["conda_env"] == "magicdrivedit"


def test_a_missing_key_is_named():
    broken = request()
    del broken["partition"]
    with pytest.raises(AnsibleFilterError, match="train_job: missing partition"):
        module.train_job(broken)


@pytest.mark.parametrize("key, value, words", [
    ("warning_signal", "TERM", "use USR1 or USR2"),
    ("warning_signal", "KILL", "use USR1 or USR2"),
    ("warning_seconds", "0", "give 1 to 65535 seconds"),
    ("warning_seconds", "70000", "give 1 to 65535 seconds"),
    ("max_restarts", "-1", "give a whole number"),
    ("max_restarts", "three", "give a whole number"),
    ("num_nodes", "1.5", "give a whole number"),
])
def test_bad_warning_and_restart_settings_are_refused_by_name(key, value, words):
    with pytest.raises(AnsibleFilterError, match=f"{key}={value!r}.*{words}"):
        module.train_job(request(**{key: value}))


def test_the_warning_signal_may_be_written_with_sig():
    job = module.train_job(request(warning_signal="sigusr2", max_restarts=0))
    assert (job["warning_signal"], job["max_restarts"]) == ("USR2", 0)
