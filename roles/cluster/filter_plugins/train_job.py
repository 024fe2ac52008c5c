"""train_job: the values of a job script (templates/train.sbatch.j2) derived from what a
request and its node group give, in one place for the launch and the NAS job templates."""

from ansible.errors import AnsibleFilterError

# Every key the template reads; a missing one is a bug in the caller, said plainly.
JOB_KEYS = (
    "job_name", "job_dir", "end_marker", "account", "partition", "num_nodes", "nodelist", "gpus_per_node",
    "cpus_per_task", "nproc_per_node", "omp_num_threads", "time_limit", "warning_signal", "warning_seconds",
    "extra_directives", "cuda_home", "replace_ld_library_path", "conda_root", "conda_env", "venv", "nccl_env_dir",
    "env", "rendezvous", "master_port", "script", "script_args",
)
INTEGERS = ("num_nodes", "gpus_per_node", "cpus_per_task", "nproc_per_node", "omp_num_threads", "warning_seconds",
            "master_port")


def train_job(request):
    missing = [key for key in JOB_KEYS if key not in request]
    if missing:
        raise AnsibleFilterError(f"train_job: missing {', '.join(missing)}")
    job = dict(request)
    for key in INTEGERS:
        job[key] = int(job[key] or 0)
    # One process per GPU unless asked otherwise (one on a CPU node), its CPUs shared out.
    job["nproc_per_node"] = job["nproc_per_node"] or max(job["gpus_per_node"], 1)
    job["omp_num_threads"] = job["omp_num_threads"] or max(job["cpus_per_task"] // job["nproc_per_node"], 1)
    job["replace_ld_library_path"] = bool(job["replace_ld_library_path"])
    if job["venv"]:  # a virtualenv replaces the conda env
        job["conda_root"] = job["conda_env"] = ""
    # What provision.yml's nccl_env role writes for the node group (the partition).
    job["nccl_env_file"] = f"{job.pop('nccl_env_dir')}/nccl-{job['partition']}.sh"
    return job


class FilterModule:
    def filters(self):
        return {"train_job": train_job}
