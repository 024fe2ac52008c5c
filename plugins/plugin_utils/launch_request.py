"""The rules of a launch's request, from what was given to the job's values.

In the order a user fixes a request: the -e keys (a misspelt ``-e wiat=false`` would otherwise be
ignored: Ansible cannot tell an extra var from any other variable), the names and counts given,
the training script's path and its arguments, the values that reach the job script (``train_job``
puts the job together and holds every value to what the template can carry), the job's nodes
against the inventory and against Slurm (``node_plan``), and a sweep. The slurm_launch_request
action applies them; the Python API (slurm_train/_rules.py) runs the same ones before anything
starts; the filters that YAML calls (train_job for the NAS job templates, node_plan for the
preflight) are these functions, registered in plugins/filter/launch_request.py.
"""

import difflib
import itertools
import json
import os
import re
import shlex
from collections.abc import Mapping

from ansible import context
from ansible.errors import AnsibleFilterError
from ansible.parsing.splitter import parse_kv, split_args
from ansible.utils.vars import load_extra_vars

from ansible_collections.hpc.slurm_train.plugins.module_utils import cluster_rules as _rules
from ansible_collections.hpc.slurm_train.plugins.module_utils import slurm as _slurm_utils
from ansible_collections.hpc.slurm_train.plugins.plugin_utils import launch_params

CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


# The -e keys: what ansible-playbook was given, against the launch's parameter table.

# What the inventory and Ansible set: any variable with one of these prefixes is known.
DEFAULT_PREFIXES = ("cluster_", "ansible_")


def unknown_keys(given, aliases, options, prefixes=DEFAULT_PREFIXES):
    """The keys of ``given`` that are neither an alias, an option nor prefixed, in its order."""
    prefixes = tuple(prefixes)
    return [key for key in given if key not in options and key not in aliases and not key.startswith(prefixes)]


def unknown_keys_message(unknown, aliases, options, prefixes, prefixed=()):
    """One sentence per unknown key with the closest known key, then what is known.

    ``prefixed`` are variables with a known prefix that are set (cluster_nas_root): only
    suggested, since any such variable is accepted.
    """
    candidates = aliases + sorted(options) + sorted(prefixed)
    parts = []
    for key in unknown:
        close = difflib.get_close_matches(key, candidates, n=1, cutoff=0.6)
        parts.append(f"-e {key}" + (f" (did you mean '{close[0]}'?)" if close else ""))
    return (
        f"Unknown -e key{'s' if len(unknown) > 1 else ''}: {'; '.join(parts)}. "
        f"A launch reads: {', '.join(aliases)}; "
        f"the role's options {', '.join(sorted(options))}; "
        f"and any variable starting with {', '.join(prefixes)}."
    )


KEY_VALUE_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
QUOTING = "-e '{\"KEY\": \"a b\"}' or -e \"KEY='a b'\""


def loose_words_message(texts):
    """The message for the -e texts (ansible-playbook's, as given) whose key=value parsing left words
    with no key (Ansible's ``_raw_params``): a value with spaces given unquoted, as in
    ``-e "script_args=--steps 2"``, which Ansible reads as script_args=--steps and a stray "2"."""
    for text in texts:
        if text.startswith(("@", "{", "[")) or "_raw_params" not in parse_kv(text):
            continue
        key, words = None, []
        for token in split_args(text):
            if KEY_VALUE_RE.match(token):
                if words:
                    break
                key = token.split("=", 1)[0]
            elif key is None:
                return f"-e {shlex.quote(text)}: {token!r} is not KEY=VALUE. Quote a value with spaces: {QUOTING}."
            else:
                words.append(token)
        got = parse_kv(text)[key]
        value = " ".join([got, *words])
        how = f"-e {shlex.quote(json.dumps({key: value}))}"
        if not re.search(r"[\\'\"$`]", value):
            how += f" or -e \"{key}='{value}'\""
        return (f"-e {shlex.quote(text)}: Ansible splits an -e value at spaces, so {key} got only {got!r} and "
                f"{' '.join(words)!r} has no key. Quote a value with spaces: {how}.")
    return f"An -e value has words with no key (Ansible splits -e KEY=VALUE at spaces): quote it, {QUOTING}."


def check_extra_vars(loader, prefixes, task_vars):
    """The -e keys given to ansible-playbook against the launch's parameters: aliases, known
    (sorted), given (sorted), unknown, and msg (loose_words_message for an unquoted value with
    spaces, unknown_keys_message; '' when none is unknown). The
    task's variables are the prefixed names only suggested. The one check of the
    slurm_launch_request and slurm_launch_extra_vars actions."""
    aliases, options = list(launch_params.ALIASES), set(launch_params.NAMES)
    given = sorted(load_extra_vars(loader))
    unknown = unknown_keys(given, aliases, options, prefixes)
    msg = ""
    named = [key for key in unknown if key != "_raw_params"]
    if len(named) < len(unknown):
        # Not a key anyone typed: what Ansible made of an unquoted value with spaces.
        msg = loose_words_message(context.CLIARGS.get("extra_vars") or ())
    if named:
        prefixed = [name for name in task_vars if name.startswith(prefixes) and name not in given]
        msg = " ".join(filter(None, [msg, unknown_keys_message(named, aliases, options, prefixes, prefixed)]))
    return {"aliases": aliases, "known": sorted(options | set(aliases)), "given": given, "unknown": unknown,
            "msg": msg}


# The names and counts given, one pass each.

WHOLE_NUMBER_RE = re.compile(r"[0-9]+")


def text_problems(values):
    """One sentence per value of ``values`` ([{key, value, hint?, list_ok?}]) that is not text
    (a list of text where list_ok), naming it as given and how to give it instead."""
    problems = []
    for item in values:
        value = item["value"]
        if isinstance(value, str) or (item.get("list_ok") and isinstance(value, (list, tuple))):
            continue
        key = item["key"]
        problems.append(f"{key}={json.dumps(value)} is not allowed: give it as text (-e {key}=VALUE, or in JSON "
                        f"-e '{{\"{key}\": \"VALUE\"}}'){item.get('hint', '')}.")
    return problems


def count_problems(counts):
    """One sentence per count of ``counts`` ([{key, value, min, max?, hint?}]) that is not a whole
    number from its min to its max, naming it and the bounds."""
    problems = []
    for item in counts:
        value, low, high = item["value"], int(item["min"]), item.get("max")
        text = str(value)
        if WHOLE_NUMBER_RE.fullmatch(text) and int(text) >= low and (high is None or int(text) <= int(high)):
            continue
        most = f" and at most {int(high)}" if high is not None else ""
        problems.append(f"{item['key']}={text} is not allowed: give a whole number, at least {low}{most}"
                        f"{item.get('hint', '')}.")
    return problems


# The training script and its arguments, as the job will run them.


def script_path(value, cwd=None):
    """The path relative to where ansible-playbook runs, '.' and '..' resolved by name, not through
    symlinks: the file the launch checks is the file the job runs, by the path the user wrote,
    which every node sees."""
    if value == "":
        return ""
    if not isinstance(value, str):
        raise AnsibleFilterError(f"script={value!r} is not allowed: give the path of the training script as text")
    if CONTROL_RE.search(value):
        raise AnsibleFilterError(f"script={value!r} is not allowed: a path without newlines or control characters")
    path = os.path.normpath(os.path.join(cwd or os.getcwd(), value))
    # POSIX keeps a leading '//' as it is; one '/' names the same file.
    return "/" + path.lstrip("/")


def shell_words(value):
    """Split as a POSIX shell would, so that `-e 'script_args=--name "a b"'` reaches the training as
    two arguments, exactly."""
    if isinstance(value, (list, tuple)):
        # Numbers become their text; a nested list or mapping has no one way to be an argument.
        for item in value:
            if isinstance(item, (list, tuple, Mapping)) or item is None:
                raise AnsibleFilterError(f"script_args item {item!r} is not allowed: give each argument as text")
        return [str(item) for item in value]
    if not isinstance(value, str):
        kind = "a mapping" if isinstance(value, Mapping) else type(value).__name__
        raise AnsibleFilterError(f"script_args must be a list or a string, got {kind}: {value!r}")
    try:
        return shlex.split(value)
    except ValueError as exc:
        raise AnsibleFilterError(f"script_args {value!r} cannot be split into arguments: {exc} "
                                 "(close every quote, or pass a list)") from None


# The job's values: what the template (templates/train.sbatch.j2) reads, derived from what a request
# and its node group give, for the launch and the NAS job templates.

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
# templates have none.
OPTIONAL = {"sweep": [], "sweep_parallel": 0}
# The hang watchdog (a launch's hang_minutes: off where not given) and the dumper staged beside the job
# script, which the torchrun wrapper imports too ('': the job's working directory).
OPTIONAL.update(hang_minutes=0, hang_dump="")
# The health gate (a launch's; the NAS job templates have none): its program's path, '' for none.
OPTIONAL.update(health_check="", health_slow_factor=1.5, health_matmul_size=0)
# A launch's record of the user's bad nodes (module_utils/bad_nodes.py, which the job's
# mark_bad_node runs from the run's directory, under the jobs root, for so many hours): the NAS job
# templates have none, and their jobs keep a bad node out of their own requeue only.
OPTIONAL.update(bad_nodes_script="", bad_nodes_root="", bad_node_hours=0)


# The signals a training can take as "checkpoint and stop" without other meaning to Slurm or torchrun.
WARNING_SIGNALS = ("USR1", "USR2")
# sbatch --signal takes up to 65535 seconds.
MAX_WARNING_SECONDS = 0xFFFF
# A week: a window longer than any time limit a site grants is a typo.
MAX_HANG_MINUTES = 7 * 24 * 60
HANG_MINUTES_RULE = (f"give minutes without a new log line after which the training counts as hung, 0 to "
                     f"{MAX_HANG_MINUTES} (a fraction is allowed, e.g. 0.5), 0 for no hang watchdog")


def number_up_to(value, most):
    """A window given as a number, empty for 0 (a whole one when it is), or None when it is not one of 0 to most."""
    if isinstance(value, bool):
        return None
    try:
        number = float(str(value).strip() or "0")
    except ValueError:
        return None
    if not 0 <= number <= most:  # also NaN
        return None
    return int(number) if number.is_integer() else number


def hang_minutes(value):
    """hang_minutes as a number, or None when it is not one of 0 to MAX_HANG_MINUTES."""
    return number_up_to(value, MAX_HANG_MINUTES)


# A year: longer is a typo.
MAX_BAD_NODE_HOURS = 366 * 24
BAD_NODE_HOURS_RULE = (f"give the hours a node that failed a job of yours is kept out of your next jobs, 0 to "
                       f"{MAX_BAD_NODE_HOURS} (a fraction is allowed, e.g. 0.5), 0 to keep none")


def bad_node_hours(value):
    """bad_node_hours as a number, or None when it is not one of 0 to MAX_BAD_NODE_HOURS."""
    return number_up_to(value, MAX_BAD_NODE_HOURS)


def slow_factor(value):
    """The health gate's factor: a number over 1 (1.5: a node 50% slower than the others' median)."""
    try:
        factor = float(value) if not isinstance(value, bool) else 0.0
    except (TypeError, ValueError):
        factor = 0.0
    if not 1 < factor < float("inf"):
        raise AnsibleFilterError(f"health_slow_factor={value!r} is not allowed: give a number over 1, e.g. 1.5 (a node "
                                 "whose matmul takes over 1.5 times the median of the other nodes' is slow)")
    return factor


def whole_number(key, value):
    text = str(value).strip() if value not in (None, "") else "0"
    if not text.isdigit():  # "-1", "two", "1.5"
        raise AnsibleFilterError(f"{key}={value!r} is not allowed: give a whole number, 0 or more")
    return int(text)


def train_job(request):
    missing = [key for key in JOB_KEYS if key not in request]
    if missing:
        raise AnsibleFilterError(f"train_job: missing {', '.join(missing)}")
    job = {**OPTIONAL, **request}
    job["sweep_parallel"] = whole_number("sweep_parallel", job["sweep_parallel"])
    minutes = hang_minutes(job["hang_minutes"])
    if minutes is None:
        raise AnsibleFilterError(f"hang_minutes={job['hang_minutes']!r} is not allowed: {HANG_MINUTES_RULE}")
    job["hang_minutes"] = minutes
    hours = bad_node_hours(job["bad_node_hours"])
    if hours is None:
        raise AnsibleFilterError(f"bad_node_hours={job['bad_node_hours']!r} is not allowed: {BAD_NODE_HOURS_RULE}")
    job["bad_node_hours"] = hours
    job["health_matmul_size"] = whole_number("health_matmul_size", job["health_matmul_size"])
    job["health_slow_factor"] = slow_factor(job["health_slow_factor"])
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
# sbatch's --chdir/-D: a launch's job runs in its run's directory (sbatch runs there), and the job
# script names its log, its end mark and its GPU check relative to it.
CHDIR_DIRECTIVE_RE = re.compile(r"(?:--chdir(?:[=\s]|$)|-D)")
CHDIR_RULE = ("a launch's job runs in its run's directory, which holds its log, checkpoints and end record; the "
              "training may change directory itself")
# A file of the run's directory, named from there.
RUN_FILE_RE = re.compile(r"[A-Za-z0-9_.+-]+")
RUN_FILE_RULE = "a file name of the run's directory (letters, digits, '_', '.', '+', '-')"
RENDEZVOUS = ("static", "c10d")


def _is_path(value):
    return value == "" or _rules.is_safe_path(value)


def _is_run_file(value):
    return value == "" or (isinstance(value, str) and RUN_FILE_RE.fullmatch(value) is not None
                           and value not in (".", ".."))


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
            elif not _is_run_file(str(values.get("end_marker", "")).replace("%j", "")):  # %j: the job id
                refuse("end_marker", values["end_marker"], f"{RUN_FILE_RULE} ('%j' is the job id)")
    if "jobs_dir" in values and not (values["jobs_dir"] and _is_path(values["jobs_dir"])):
        refuse("slurm_launch_jobs_dir", values["jobs_dir"], PATH_RULE)
    for key in ("cuda_home", "conda_root", "venv", "nccl_env_dir", "nccl_env_file", "bad_nodes_root"):
        if key in values and not _is_path(values[key]):
            refuse(key, values[key], PATH_RULE)
    for key in ("gpu_check", "hang_dump", "health_check", "bad_nodes_script"):
        if key in values and not (_is_path(values[key]) or _is_run_file(values[key])):
            refuse(key, values[key], f"{PATH_RULE}, or {RUN_FILE_RULE}")
    # Empty: the partition the job's nodes share, which the submission finds in Slurm.
    if "partition" in values and not _is_name(values["partition"], SLURM_NAME_RE):
        refuse("partition", values["partition"], f"a Slurm partition name: {SLURM_NAME_RULE}")
    if "account" in values and not _is_name(values["account"], SLURM_NAME_RE):
        refuse("account", values["account"], f"a Slurm account name: {SLURM_NAME_RULE}, or empty for your default")
    if "conda_env" in values and not _is_name(values["conda_env"], CONDA_ENV_RE):
        refuse("conda_env", values["conda_env"], "a conda env name: letters, digits, '_', '.' and '-', "
                                                 "starting with a letter, digit or '_'")
    if "nodelist" in values and not _is_name(values["nodelist"], HOSTLIST_RE):
        refuse("nodelist", values["nodelist"], "a Slurm hostlist such as node[110-111]")
    if "hang_minutes" in values and hang_minutes(values["hang_minutes"]) is None:
        refuse("hang_minutes", values["hang_minutes"], HANG_MINUTES_RULE)
    if "bad_node_hours" in values and bad_node_hours(values["bad_node_hours"]) is None:
        refuse("bad_node_hours", values["bad_node_hours"], BAD_NODE_HOURS_RULE)
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
            elif CHDIR_DIRECTIVE_RE.match(directive):
                refuse("extra_directives", directive, CHDIR_RULE)

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
    if script != "" and (not isinstance(script, str) or CONTROL_RE.search(script)):
        refuse("script", script, "a path without newlines or control characters (absolute, or from the run's "
                                 "directory, where the job runs)")
    args = values.get("script_args", [])
    if not isinstance(args, (list, tuple)):
        refuse("script_args", args, "a list of arguments")
    else:
        for arg in args:
            if not isinstance(arg, str) or "\0" in arg or "\r" in arg:
                refuse("script_args", arg, "each argument is text without NUL or carriage return characters (sbatch "
                                           "refuses a job script with a CRLF)")
    return problems


# The job's nodes: against the inventory and the request (the launch, on the controller, with no
# Slurm query), and against Slurm as well (the preflight, from a slurm_nodes result). What Slurm's
# view of the nodes means is module_utils/slurm.py's (check_job_nodes, node_condition), which the
# launch's staging module run applies to its own sinfo.

# What the plan reads of each node's inventory variables.
NODE_VARS = ("nccl_env_group", "cluster_node_gpus", "cluster_node_cpus")


def as_int(value):
    """Jinja's int filter: a number, a numeric string, else 0."""
    try:
        return int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError):
            return 0


def _nodes_vars(names, hostvars):
    """Each node's NODE_VARS that it defines, its variables read once (hostvars[node] merges them
    all again on every read: on a 1,000-node group, a quarter of a second per pass)."""
    found = {}
    for name in names:
        node_vars = hostvars.get(name) or {}
        found[name] = {var: node_vars[var] for var in NODE_VARS if var in node_vars}
    return found


def node_inventory_plan(nodes, hostvars, groups, request):
    """The job's nodes checked against the inventory and the ``request`` (group, num_nodes,
    gpus_per_node, cpus_per_task, nproc_per_node: the role's values; nccl_env: whether the job
    sources a node group's NCCL env file), with no Slurm query: ``nodes`` is the node list given
    (hostlists) or the group's nodes. In the order a user fixes them: names that are no node names;
    nodes the inventory does not know as compute nodes; no one node group; a request that does
    not fit the inventory's counts. Returns names, hostlist, node_group, num_nodes, node_gpus,
    node_cpus, inventory (each node's counts, for check_job_nodes) and ``problem`` ('' when none)."""
    group = request.get("group") or ""
    plan = {"names": [], "hostlist": "", "node_group": group, "num_nodes": 0, "node_gpus": 0, "node_cpus": 0,
            "inventory": {}, "problem": ""}
    try:
        names = _slurm_utils.requested_names(nodes)
    except ValueError as exc:
        return {**plan, "problem": (f"invalid node list {nodes!r}: {exc}. Give node names ({_slurm_utils.NODE_NAME_RULE}) "
                                    "separated by commas, or a Slurm hostlist such as node[110-111]")}
    plan.update(names=names, hostlist=_slurm_utils.compress_hostlist(names) if names else "")
    compute = groups.get("compute") or []
    compute_set = set(compute)
    not_in_inventory = [name for name in names if name not in compute_set]
    if not_in_inventory:
        return {**plan, "problem": f"Not compute nodes of the inventory: {', '.join(not_in_inventory)} "
                                   f"(known: {', '.join(compute)})."}
    nodes_vars = _nodes_vars(names, hostvars)
    plan["inventory"] = {name: {var: found[var] for var in ("cluster_node_cpus", "cluster_node_gpus") if var in found}
                         for name, found in nodes_vars.items()}
    # The node group names the NCCL env file the job sources (what provision.yml wrote for those
    # nodes); its partition is the group's, named alike, unless another is given.
    if request.get("nccl_env"):
        try:
            plan["node_group"] = _rules.nodes_node_group(names, nodes_vars, groups)
        except ValueError as exc:
            return {**plan, "problem": str(exc)}
    num_nodes = as_int(request.get("num_nodes")) if group else len(names)
    node_gpus = min((as_int(nodes_vars[name].get("cluster_node_gpus", 0)) for name in names), default=0)
    node_cpus = min((as_int(nodes_vars[name].get("cluster_node_cpus", 1)) for name in names), default=0)
    plan.update(num_nodes=num_nodes, node_gpus=node_gpus, node_cpus=node_cpus)
    gpus, cpus, nproc = (as_int(request.get(key)) for key in ("gpus_per_node", "cpus_per_task", "nproc_per_node"))
    # Only what does not fit is named: a count left at 0 (all of a node's) always fits.
    misfits = [said for fits, said in (
        (num_nodes <= len(names), f"num_nodes={num_nodes} of {len(names)} nodes"),
        (gpus <= node_gpus, f"gpus_per_node={gpus} of {node_gpus} GPUs"),
        (cpus <= node_cpus, f"cpus_per_task={cpus} of {node_cpus} CPUs per node"),
        (nproc <= (cpus or node_cpus),
         f"nproc_per_node={nproc} processes on {cpus or node_cpus} CPUs (one CPU each at least)"),
    ) if not fits]
    if misfits:
        kind = plan["node_group"] or request.get("partition") or "the"
        return {**plan, "problem": (f"The request does not fit: {', '.join(misfits)} ({kind} nodes, "
                                    "from the inventory's cluster_node_* values).")}
    return plan


def node_plan(nodes_info, hostvars, groups, request):
    """The job's nodes (slurm_nodes' result) checked against the inventory and the request
    (node_inventory_plan's, and the partition given), then against Slurm (plugins/module_utils/slurm.py's
    check_job_nodes, which the launch's staging module run applies to its own sinfo): the
    preflight's plan in one pass. Returns node_group, partition, num_nodes, node_gpus, node_cpus,
    unusable, notes and ``problem``: the first failed check's message ('' when none did)."""
    plan = node_inventory_plan(list(nodes_info["names"]), hostvars, groups, request)
    found = {"node_group": plan["node_group"], "partition": "", "num_nodes": plan["num_nodes"],
             "node_gpus": plan["node_gpus"], "node_cpus": plan["node_cpus"], "unusable": {}, "notes": [],
             "problem": plan["problem"]}
    if plan["problem"]:
        return found
    checked = _slurm_utils.check_job_nodes(nodes_info["slurm"], {
        "names": plan["names"], "partition": request.get("partition") or "", "group": request.get("group") or "",
        "node_group": plan["node_group"], "num_nodes": plan["num_nodes"], "inventory": plan["inventory"]})
    return {**found, **{key: checked[key] for key in ("partition", "unusable", "notes", "problem")}}


# Sweeps: -e '{"sweep": {"lr": [0.1, 0.01], "seed": [1, 2]}}' launches the cross product of the
# values as one Slurm job array of one job script, a task per point.

# A key becomes the script's option --<key>; a value one argument after it, also a cell of the
# tab-separated table: nothing a shell, a line or a cell would read otherwise.
SWEEP_KEY_RE = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")
SWEEP_KEY_RULE = "a letter, then up to 63 letters, digits, '_' or '-' (the script's option --KEY)"
SWEEP_VALUE_RE = re.compile(r"[A-Za-z0-9_.,:+=@/-]{1,200}")
SWEEP_VALUE_RULE = ("a number, or text of up to 200 letters, digits and '_.,:+=@/-' (no spaces or quotes: one argument "
              "to the script)")
# Slurm's default MaxArraySize (1001) allows task ids 0 to 1000.
MAX_POINTS = 1000
TABLE_NAME = "sweep.tsv"


def _scalar_text(value):
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    text = str(value)
    return text if SWEEP_VALUE_RE.fullmatch(text) else None


def sweep_problems(sweep, parallel=0, script_args=()):
    """What is wrong with a sweep (and sweep_parallel), one message each; [] for none or a good one."""
    problems = []
    parallel_text = str(parallel).strip()
    if not parallel_text.isdigit() or int(parallel_text) > MAX_POINTS:
        problems.append(f"sweep_parallel={parallel!r} is not allowed: give a whole number, 0 (as many at once as "
                        f"Slurm allows) to {MAX_POINTS}")
    elif int(parallel_text) and not sweep:
        problems.append(f"sweep_parallel={parallel} is not allowed without a sweep: "
                        "-e '{\"sweep\": {\"lr\": [0.1, 0.01]}}' says which points to run")
    if sweep in (None, "", {}):
        return problems
    if not isinstance(sweep, Mapping):
        return problems + [f"sweep={sweep!r} is not allowed: give a mapping of option names to lists of values, "
                           "e.g. -e '{\"sweep\": {\"lr\": [0.1, 0.01], \"seed\": [1, 2]}}'"]
    options = {str(arg).split("=", 1)[0] for arg in script_args or [] if str(arg).startswith("--")}
    points = 1
    for key, values in sweep.items():
        if not isinstance(key, str) or not SWEEP_KEY_RE.fullmatch(key):
            problems.append(f"sweep key {key!r} is not allowed: {SWEEP_KEY_RULE}")
            continue
        if f"--{key}" in options:
            problems.append(f"sweep key {key!r} is not allowed: script_args sets --{key} too; sweep it or set it, "
                            "not both")
        if isinstance(values, (str, Mapping)) or not isinstance(values, (list, tuple)) or not values:
            problems.append(f"sweep {key}={values!r} is not allowed: give a non-empty list of values, e.g. [0.1, 0.01]")
            continue
        texts = [_scalar_text(value) for value in values]
        for value, text in zip(values, texts):
            if text is None:
                problems.append(f"sweep {key} value {value!r} is not allowed: {SWEEP_VALUE_RULE}")
        repeated = sorted({text for text in texts if text is not None and texts.count(text) > 1})
        if repeated:
            problems.append(f"sweep {key} lists {', '.join(repeated)} more than once: each point would run twice")
        points *= len(values)
    if points > MAX_POINTS:
        problems.append(f"sweep has {points} points, over {MAX_POINTS} (Slurm's default MaxArraySize allows task ids "
                        f"0 to {MAX_POINTS}): sweep fewer values or launch it in parts")
    return problems


def sweep_points(sweep):
    """The points of a checked sweep in task order (the last key varies fastest): each a list of
    [key, value as text]; [] for no sweep."""
    if not sweep:
        return []
    problems = sweep_problems(sweep)
    if problems:
        raise AnsibleFilterError("; ".join(problems))
    keys = list(sweep)
    return [[[key, str(value)] for key, value in zip(keys, combination)]
            for combination in itertools.product(*(sweep[key] for key in keys))]


def sweep_table(points):
    """The table written beside the job script: a header (task and the keys), a line per point."""
    if not points:
        return ""
    lines = ["\t".join(["task"] + [key for key, _ in points[0]])]
    lines += ["\t".join([str(task)] + [value for _, value in point]) for task, point in enumerate(points)]
    return "\n".join(lines) + "\n"


def point_words(point):
    return " ".join(f"{key}={value}" for key, value in point) if point else "-"


def sweep_report(tasks, points, stopped_words=None):
    """One row per point of a finished array (the slurm_job module's tasks): its arguments, state,
    exit code, elapsed seconds, last log line, the job script's NO_PROGRESS record of it; and the
    points that did not complete, in words, a point stopped NO_PROGRESS with
    ``stopped_words(task)`` (the outputs' words for a job stopped so)."""
    rows, failed = [], []
    for task in tasks or []:
        index = task.get("task")
        point = points[index] if isinstance(index, int) and 0 <= index < len(points) else None
        row = {"task": index, "args": point_words(point), "state": task.get("state"),
               "exit_code": task.get("exit_code"), "elapsed_seconds": task.get("elapsed_seconds"),
               "last_line": task.get("log_last_line") or "", "log": task.get("stdout_path"),
               "no_progress": task.get("no_progress")}
        rows.append(row)
        if row["state"] != "COMPLETED":
            stopped = f"; {stopped_words(task)}" if row["no_progress"] and stopped_words else ""
            failed.append(f"point {index} ({row['args']}) ended {row['state']}, exit code {row['exit_code']}{stopped}")
    columns = ("task", "args", "state", "exit_code", "elapsed_seconds", "last_line")
    header = ("task", "arguments", "state", "exit", "elapsed", "last log line")
    cells = [header] + [tuple("-" if row[key] is None else str(row[key]) for key in columns) for row in rows]
    widths = [max(len(cell[i]) for cell in cells) for i in range(len(columns) - 1)]
    lines = ["  ".join([*(cell[i].ljust(widths[i]) for i in range(len(widths))), cell[-1]]).rstrip() for cell in cells]
    return {"rows": rows, "lines": lines, "failed": failed}
