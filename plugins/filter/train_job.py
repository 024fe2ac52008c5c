"""train_job: the values of a job script (templates/train.sbatch.j2) derived from what a
request and its node group give, in one place for the launch and the NAS job templates."""

import re
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

# Every key the template reads; a missing one is a bug in the caller, said plainly.
JOB_KEYS = (
    "job_name", "job_dir", "end_marker", "account", "partition", "num_nodes", "nodelist", "gpus_per_node",
    "cpus_per_task", "nproc_per_node", "omp_num_threads", "time_limit", "warning_signal", "warning_seconds", "max_restarts",
    "extra_directives", "cuda_home", "replace_ld_library_path", "conda_root", "conda_env", "venv", "nccl_env_dir",
    "node_group", "env", "rendezvous", "master_port", "script", "script_args", "gpu_check",
)
INTEGERS = ("num_nodes", "gpus_per_node", "cpus_per_task", "nproc_per_node", "omp_num_threads", "warning_seconds",
            "max_restarts", "master_port")
# A launch's sweep (roles/slurm_launch's sweep_points): a job array, a task per point; the NAS job
# templates have none. Nor have they a record of the user's bad nodes (module_utils/bad_nodes.py,
# which the job's mark_bad_node runs from the run's directory, under the jobs root, for so many
# hours): their jobs still keep a bad node out of their own requeue.
OPTIONAL = {"sweep": [], "sweep_parallel": 0, "bad_nodes_script": "", "bad_nodes_root": "", "bad_node_hours": 0}


# The signals a training can take as "checkpoint and stop" without other meaning to Slurm or torchrun.
WARNING_SIGNALS = ("USR1", "USR2")
# sbatch --signal takes up to 65535 seconds.
MAX_WARNING_SECONDS = 0xFFFF


def whole_number(key, value):
    text = str(value).strip() if value not in (None, "") else "0"
    if not text.isdigit():  # "-1", "two", "1.5"
        raise AnsibleFilterError(f"{key}={value!r} is not allowed: give a whole number, 0 or more")
    return int(text)


def hours(key, value):
    """A number of hours, 0 or more, as the job script writes it (no exponent)."""
    try:
        number = float(str(value).strip())
    except ValueError:
        number = -1.0
    if isinstance(value, bool) or not 0 <= number < 1e6:
        raise AnsibleFilterError(f"{key}={value!r} is not allowed: give hours, 0 or more (e.g. 24 or 0.5; 0 = not kept)")
    return int(number) if number == int(number) else number


def train_job(request):
    missing = [key for key in JOB_KEYS if key not in request]
    if missing:
        raise AnsibleFilterError(f"train_job: missing {', '.join(missing)}")
    job = {**OPTIONAL, **request}
    job["sweep_parallel"] = whole_number("sweep_parallel", job["sweep_parallel"])
    for key in INTEGERS:
        job[key] = whole_number(key, job[key])
    job["warning_signal"] = str(job["warning_signal"]).upper().removeprefix("SIG")
    if job["warning_signal"] not in WARNING_SIGNALS:
        raise AnsibleFilterError(f"warning_signal={request['warning_signal']!r} is not allowed: use "
                                 f"{' or '.join(WARNING_SIGNALS)} (the training checkpoints on it)")
    if not 1 <= job["warning_seconds"] <= MAX_WARNING_SECONDS:
        raise AnsibleFilterError(f"warning_seconds={request['warning_seconds']!r} is not allowed: give 1 to "
                                 f"{MAX_WARNING_SECONDS} seconds before the time limit")
    # One process per GPU unless asked otherwise (one on a CPU node), its CPUs shared out.
    job["nproc_per_node"] = job["nproc_per_node"] or max(job["gpus_per_node"], 1)
    job["omp_num_threads"] = job["omp_num_threads"] or max(job["cpus_per_task"] // job["nproc_per_node"], 1)
    job["bad_node_hours"] = hours("bad_node_hours", job["bad_node_hours"])
    job["replace_ld_library_path"] = bool(job["replace_ld_library_path"])
    if job["venv"]:  # a virtualenv replaces the conda env
        job["conda_root"] = job["conda_env"] = ""
    # What provision.yml's nccl_env role writes for the job's node group (not its partition,
    # which may be named otherwise): the one rule of plugins/module_utils/cluster_rules.py.
    nccl_env_dir, node_group = job.pop("nccl_env_dir"), job.pop("node_group")
    try:
        job["nccl_env_file"] = _rules.nccl_env_file(nccl_env_dir, node_group)
    except ValueError as exc:
        raise AnsibleFilterError(f"nccl_env_dir={nccl_env_dir!r}: {exc}") from exc
    problems = value_problems(job)
    if problems:
        raise AnsibleFilterError("; ".join(problems))
    return job


# What the template writes into the job script. Some values land in #SBATCH lines, comments
# and double-quoted strings, so each is held to what it can be: a newline would start a line
# of shell, a '"', '$' or '`' would end or expand a string, a space would split an option.
# The module_utils job-name rule, shared with the slurm_job module.
from ansible_collections.hpc.slurm_train.plugins.module_utils import slurm as _slurm_utils  # noqa: E402
# The safe-path and NCCL env file rules, shared with the other roles and the modules.
from ansible_collections.hpc.slurm_train.plugins.module_utils import cluster_rules as _rules  # noqa: E402

PATH_RULE = _rules.SAFE_PATH_RULE
SLURM_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
SLURM_NAME_RULE = "letters, digits, '_', '.' and '-', starting with a letter or digit"
CONDA_ENV_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
HOSTLIST_RE = re.compile(r"[A-Za-z0-9._,\[\]-]+")
# sbatch --time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, or no limit.
TIME_LIMIT_RE = re.compile(r"[0-9]+(?::[0-9]{1,2}){0,2}|[0-9]+-[0-9]{1,2}(?::[0-9]{1,2}){0,2}|UNLIMITED|INFINITE",
                           re.IGNORECASE)
TIME_LIMIT_RULE = ("minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS (e.g. 90, 2:00:00, 1-12:00:00), "
                   "or UNLIMITED for the partition's limit")
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Names that steer the job's shell, its Slurm commands (srun reads SLURM_*/SRUN_* as options, the
# script reads SLURM_RESTART_COUNT and SLURM_JOB_ID), the loader or Python before the training
# runs: set by the launch, the site or Slurm, never by a request.
RESERVED_ENV_NAMES = frozenset(("BASH_ENV", "ENV", "IFS", "PATH", "CDPATH", "SHELLOPTS", "BASHOPTS", "PS4"))
RESERVED_ENV_PREFIXES = ("SLURM_", "SRUN_", "SBATCH_", "SALLOC_", "LD_", "PYTHON")
RESERVED_ENV_RULE = ("it steers the job's shell, Slurm, the loader or Python (refused: BASH_ENV, ENV, IFS, PATH, "
                     "CDPATH, SHELLOPTS, BASHOPTS, PS4 and names starting SLURM_, SRUN_, SBATCH_, SALLOC_, LD_ or "
                     "PYTHON); the site's environment or the launch's own settings set these")
# sbatch's --clusters/-M (also "--clusters=a,b", "-M a", "-Ma"): the launch follows its job with
# queries that have no -M, so a job sent to another cluster would be lost and a rerun would
# submit it again.
CLUSTERS_DIRECTIVE_RE = re.compile(r"(?:--clusters(?:[=\s]|$)|-M)")
CLUSTERS_RULE = ("a launch follows its job on the cluster of its submit host only (its Slurm queries have no -M); "
                 "to run on another cluster, launch with an inventory whose submit host belongs to it")
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
RENDEZVOUS = ("static", "c10d")


def _is_path(value):
    return value == "" or _rules.is_safe_path(value)


def _is_name(value, pattern, allow_empty=True):
    return (value == "" and allow_empty) or (isinstance(value, str) and pattern.fullmatch(value) is not None)


def value_problems(values):
    """What of these job values cannot go into the job script as it is, one message each.

    Checks the keys present, so that a launch can check what the user gave before it asks
    Slurm anything (jobs_dir there: the directory job_dir is made in), and train_job checks
    every value of the job it derived.
    """
    problems = []

    def refuse(key, value, rule):
        problems.append(f"{key}={value!r} is not allowed: {rule}")

    if "job_name" in values:
        try:
            _slurm_utils.validate_job_name(values["job_name"])
        except ValueError:
            refuse("job_name", values["job_name"], f"a job name is {_slurm_utils.JOB_NAME_RULE} (by default the "
                                                  "script's file name without its extension; set one with -e job_name=NAME)")
        else:
            # <jobs dir>/<job name>/...: only the jobs dir can be wrong once the name is right.
            if not _is_path(values.get("job_dir", "")):
                refuse("job_dir", values["job_dir"], f"the jobs directory (slurm_launch_jobs_dir) must be {PATH_RULE}")
            elif not _is_path(str(values.get("end_marker", "")).replace("%j", "")):  # %j: the job id
                refuse("end_marker", values["end_marker"], f"{PATH_RULE} ('%j' is the job id)")
    if "jobs_dir" in values and not (values["jobs_dir"] and _is_path(values["jobs_dir"])):
        refuse("slurm_launch_jobs_dir", values["jobs_dir"], PATH_RULE)
    for key in ("cuda_home", "conda_root", "venv", "nccl_env_dir", "nccl_env_file", "gpu_check", "bad_nodes_script",
                "bad_nodes_root"):
        if key in values and not _is_path(values[key]):
            refuse(key, values[key], PATH_RULE)
    if "partition" in values and not _is_name(values["partition"], SLURM_NAME_RE, allow_empty=False):
        refuse("partition", values["partition"], f"a Slurm partition name: {SLURM_NAME_RULE}")
    if "account" in values and not _is_name(values["account"], SLURM_NAME_RE):
        refuse("account", values["account"], f"a Slurm account name: {SLURM_NAME_RULE}, or empty for your default")
    if "conda_env" in values and not _is_name(values["conda_env"], CONDA_ENV_RE):
        refuse("conda_env", values["conda_env"], "a conda env name: letters, digits, '_', '.' and '-', "
                                                 "starting with a letter, digit or '_'")
    if "nodelist" in values and not _is_name(values["nodelist"], HOSTLIST_RE):
        refuse("nodelist", values["nodelist"], "a Slurm hostlist such as node[110-111]")
    if "rendezvous" in values and values["rendezvous"] not in RENDEZVOUS:
        refuse("rendezvous", values["rendezvous"], " or ".join(RENDEZVOUS))
    if "time_limit" in values and (isinstance(values["time_limit"], bool)
                                   or not TIME_LIMIT_RE.fullmatch(str(values["time_limit"]))):
        refuse("time_limit", values["time_limit"], f"give Slurm's --time as {TIME_LIMIT_RULE}")

    directives = values.get("extra_directives", [])
    if isinstance(directives, (str, Mapping)) or not isinstance(directives, (list, tuple)):
        refuse("extra_directives", directives, "give a list of sbatch options, e.g. [\"--exclusive\"]")
    else:
        for directive in directives:
            if not isinstance(directive, str) or not directive.startswith("-") or CONTROL_RE.search(directive):
                refuse("extra_directives", directive, "each is one sbatch option on one line, starting with '-' "
                                                      "(e.g. \"--exclusive\"), without newlines or control characters")
            elif CLUSTERS_DIRECTIVE_RE.match(directive):
                refuse("extra_directives", directive, CLUSTERS_RULE)

    env = values.get("env", {})
    if not isinstance(env, Mapping):
        refuse("env", env, "give a mapping of variable names to values, e.g. {\"NCCL_DEBUG\": \"INFO\"}")
    else:
        for name, value in env.items():
            if not isinstance(name, str) or not ENV_NAME_RE.fullmatch(name):
                refuse("env name", name, "a shell variable name: letters, digits and '_', not starting with a digit")
            elif name in RESERVED_ENV_NAMES or name.startswith(RESERVED_ENV_PREFIXES):
                refuse("env name", name, RESERVED_ENV_RULE)
            # The job script quotes the value: any text is carried as it is, but NUL ends it.
            if isinstance(value, bool) or not isinstance(value, (str, int, float)) or "\0" in str(value):
                refuse(f"env {name}", value, "give text or a number (without NUL characters)")
            elif "\r" in str(value):
                # sbatch refuses a script with a CRLF; the value (maybe a token) is not repeated here.
                problems.append(f"env {name}: its value holds a carriage return (\\r), which sbatch refuses in a "
                                "job script: give it without one")

    script = values.get("script", "")
    if script != "" and (not isinstance(script, str) or not script.startswith("/") or CONTROL_RE.search(script)):
        refuse("script", script, "an absolute path without newlines or control characters")
    args = values.get("script_args", [])
    if not isinstance(args, (list, tuple)):
        refuse("script_args", args, "a list of arguments")
    else:
        for arg in args:
            if not isinstance(arg, str) or "\0" in arg or "\r" in arg:
                refuse("script_args", arg, "each argument is text without NUL or carriage return characters (sbatch "
                                           "refuses a job script with a CRLF)")
    return problems


class FilterModule:
    def filters(self):
        return {"train_job": train_job, "job_value_problems": value_problems}
