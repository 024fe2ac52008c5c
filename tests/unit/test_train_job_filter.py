"""The one place a job's derived values come from, for launch.yml and the NAS job templates."""

import re
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.hpc.slurm_train.plugins.plugin_utils import launch_request as module


def request(**overrides):
    base = {key: "" for key in module.JOB_KEYS}
    base.update(num_nodes="2", gpus_per_node="8", cpus_per_task="64", nproc_per_node="0", omp_num_threads="0",
                warning_signal="USR1", warning_seconds="120", max_restarts="3", master_port="0", partition="gpu_A6000", nccl_env_dir="/nas/env",
                node_group="gpu_A6000",
                conda_root="/nas/anaconda3", conda_env="magicdrivedit", replace_ld_library_path=False)
    # Values the job script checks (train_job refuses what cannot go into it).
    base.update(job_name="train", rendezvous="static", time_limit="60", extra_directives=[], env={}, script_args=[])
    base.update(overrides)
    return base


def test_one_process_per_gpu_and_the_cpus_shared_out():
    job = module.train_job(request())
    assert (job["nproc_per_node"], job["omp_num_threads"], job["num_nodes"]) == (8, 8, 2)
    assert job["nccl_env_file"] == "/nas/env/nccl-gpu_A6000.sh" and "nccl_env_dir" not in job


def test_the_nccl_env_file_is_the_node_groups_whatever_the_partition():
    # provision.yml names the file after the inventory group; a job in another partition
    # (a site's "batch" partition spanning groups) sources its nodes' group's file all the same.
    job = module.train_job(request(partition="batch", node_group="gpu_H100"))
    assert (job["partition"], job["nccl_env_file"]) == ("batch", "/nas/env/nccl-gpu_H100.sh")
    assert "node_group" not in job
    assert module.train_job(request(nccl_env_dir="", node_group=""))["nccl_env_file"] == ""
    with pytest.raises(AnsibleFilterError, match="no NCCL env file for node group ''"):
        module.train_job(request(node_group=""))


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


def test_the_longest_warning_sbatch_takes_is_accepted_and_one_more_is_not():
    assert module.train_job(request(warning_seconds="65535"))["warning_seconds"] == 65535
    assert module.train_job(request(warning_seconds="1"))["warning_seconds"] == 1
    with pytest.raises(AnsibleFilterError, match="warning_seconds='65536' is not allowed: give 1 to 65535 seconds "
                                                 "before the time limit"):
        module.train_job(request(warning_seconds="65536"))


@pytest.mark.parametrize("given, kept", [(True, True), (1, True), (False, False), (0, False), ("", False)])
def test_replacing_ld_library_path_is_a_yes_or_no(given, kept):
    # The job script and job.json say true or false, whatever truthy value the request carried.
    assert module.train_job(request(replace_ld_library_path=given))["replace_ld_library_path"] is kept


def test_an_empty_count_means_zero_and_spaces_around_a_number_do_not_matter():
    job = module.train_job(request(max_restarts=None, master_port=" 29500 ", nproc_per_node=""))
    assert (job["max_restarts"], job["master_port"], job["nproc_per_node"]) == (0, 29500, 8)


def test_the_cpus_are_shared_out_by_whole_numbers():
    job = module.train_job(request(gpus_per_node="4", cpus_per_task="30"))
    assert (job["nproc_per_node"], job["omp_num_threads"]) == (4, 7)


def test_a_value_the_job_script_cannot_hold_is_refused_after_deriving():
    with pytest.raises(AnsibleFilterError, match="^partition='gpu a' is not allowed: a Slurm partition name"):
        module.train_job(request(partition="gpu a"))
    with pytest.raises(AnsibleFilterError, match="account='a;b' is not allowed.*; time_limit='1 day' is not allowed"):
        module.train_job(request(account="a;b", time_limit="1 day"))


def test_an_empty_jobs_dir_is_refused_since_the_job_dir_would_be_at_the_root():
    assert module.value_problems({"jobs_dir": ""}) == [
        "slurm_launch_jobs_dir='' is not allowed: an absolute path of letters, digits, '_', '.', '+', '-' and '/', "
        "without '..'"]
    assert module.value_problems({"jobs_dir": "/starmap/nas/jobs"}) == []


@pytest.mark.parametrize("marker", [".ended$(id)", "nas/jobs/train/.%j.ended", "../.%j.ended", ".%j ended",
                                    "/nas/jobs/train/.%j.ended"])
def test_an_end_marker_the_job_script_cannot_hold_is_refused(marker):
    assert module.value_problems({"job_name": "train", "job_dir": "/nas/jobs/train", "end_marker": marker}) == [
        f"end_marker={marker!r} is not allowed: a file name of the run's directory (letters, digits, '_', '.', '+', "
        "'-') ('%j' is the job id)"]


def test_the_job_id_in_the_end_marker_and_an_empty_one_are_accepted():
    values = {"job_name": "train", "job_dir": "/nas/jobs/train"}
    assert module.value_problems({**values, "end_marker": ".%j.ended"}) == []
    assert module.value_problems({**values, "end_marker": ""}) == []


def test_a_bad_job_name_is_the_only_problem_named_for_the_job_dir():
    # The job dir is made of the name: the name is what to fix.
    [message] = module.value_problems({"job_name": "my job", "job_dir": "/nas/jobs/my job",
                                       "end_marker": "/nas/jobs/my job/.%j.ended"})
    assert message.startswith("job_name='my job' is not allowed: a job name is ")


@pytest.mark.parametrize("key, value, rule", [
    ("partition", "a b", "a Slurm partition name"),
    ("rendezvous", "etcd", "static or c10d"),
    ("time_limit", True, "give Slurm's --time as"),
    ("nodelist", "node1 node2", "a Slurm hostlist such as node[110-111]"),
    ("conda_env", "-env", "a conda env name"),
    ("nccl_env_file", "/nas/env/nccl-$(id).sh", "an absolute path"),
    ("script_args", "--steps 30", "a list of arguments"),
    ("script_args", ["--steps", 30], "each argument is text without NUL or carriage return characters"),
    ("env", {"X": 1.5, "Y": 2, "Z": b"x"}, "give text or a number"),
])
def test_each_value_check_names_its_key_and_rule(key, value, rule):
    [message] = module.value_problems({key: value})
    assert message.startswith(f"{key if key != 'env' else 'env Z'}=") and rule in message


def test_accepted_values_of_each_kind():
    assert module.value_problems({"partition": "gpu_A6000", "rendezvous": "c10d", "account": "", "conda_env": "",
                                  "nodelist": "node[110-111]", "time_limit": "UNLIMITED",
                                  "script_args": ("--steps", "30"), "env": {"X": 1.5, "Y": 2, "Z": "a"}}) == []


@pytest.mark.parametrize("directives", [5, None, {"--exclusive": True}, "--exclusive"])
def test_extra_directives_that_are_no_list_are_refused(directives):
    assert module.value_problems({"extra_directives": directives}) == [
        f"extra_directives={directives!r} is not allowed: give a list of sbatch options, e.g. [\"--exclusive\"]"]


def test_a_job_without_the_launchs_own_values_has_no_sweep_watchdog_gate_or_bad_nodes():
    # The NAS job templates put their jobs together without them.
    job = module.train_job(request())
    assert {key: job[key] for key in ("sweep", "sweep_parallel", "hang_minutes", "hang_dump", "health_check",
                                      "health_matmul_size", "bad_nodes_script", "bad_nodes_root", "bad_node_hours")} == {
        "sweep": [], "sweep_parallel": 0, "hang_minutes": 0, "hang_dump": "", "health_check": "",
        "health_matmul_size": 0, "bad_nodes_script": "", "bad_nodes_root": "", "bad_node_hours": 0}


@pytest.mark.parametrize("given, factor", [("1.01", 1.01), (2, 2.0), ("1e3", 1000.0)])
def test_the_health_gates_factor_is_a_number_over_1(given, factor):
    assert module.slow_factor(given) == factor


@pytest.mark.parametrize("given", [1, "1", 0.5, "inf", "nan", True, None, "fast", [1.5]])
def test_a_health_gate_factor_of_1_or_less_or_no_number_is_refused_naming_it(given):
    with pytest.raises(AnsibleFilterError, match=re.escape(f"health_slow_factor={given!r} is not allowed: give a number over 1")):
        module.slow_factor(given)


def test_a_warning_one_second_before_the_time_limit_is_accepted():
    assert module.train_job(request(warning_seconds="1"))["warning_seconds"] == 1
