# -*- coding: utf-8 -*-
"""Action plugin: check a launch's request and put its job together, on the controller, in one task.

Everything a launch checks before it writes or submits anything, in the order a user fixes it,
and the job script rendered, in one pass in Python. The request's rules are
plugin_utils/launch_request.py's, so that the launch, the preflight, the job templates and the
Python API share one copy of each; what is here reads what Ansible was given (the -e values as
typed, the inventory) and renders the job's files.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: slurm_launch_request
short_description: Check a launch's request and put its job together, on the controller
description:
  - Refuses the C(-e) keys a launch does not know (as M(slurm_launch_extra_vars) does).
  - Checks the request in the order a user fixes it and fails with the first problem found,
    naming the value and what would be right. First the names given as text, where to run (a
    node list, or a node group and a count, or a job id to follow), the counts and the node
    group. With O(render), also the values that reach the job script (paths, names, time
    limit, env, directives, a sweep), the training script on the controller, and the job's
    nodes against the inventory (names, node group, counts, whether the request fits them).
  - With O(render), lists and hashes the code to stage (the script's directory, or C(code_dir)),
    puts the job together (the C(train_job) values) and renders its files: the job script from
    C(train.sbatch.j2), the GPU check C(gpu_check.py), the health gate's C(health_check.py) and
    C(allreduce_check.py), and a sweep's table. The job script names its files from the run's
    directory, the job's working directory (C(sbatch --chdir), C($PWD) in the job), the code by
    its hash from there, and leaves a partition not given to the submission, which finds the one
    the nodes share in Slurm.
  - Returns its findings, for the task to register (RV(job), RV(job_files), RV(node_plan), ...): not
    as facts, which a fact cache would keep and a set_fact of the same name would hide. Runs on the
    controller, changes nothing, and runs the same in check mode.
version_added: "0.1.0"
author: ansible-slurm-train
options:
  request:
    description:
      - The role's values, by their short C(-e) names (C(nodes), C(group), C(script), ...); every
        request key of the launch's parameter table (C(plugins/plugin_utils/launch_params.py)) is
        required (the role's C(vars/main.yml) passes them).
    type: dict
    required: true
  render:
    description:
      - Check the job's values, script and nodes as well, put the job together and render its
        files (a launch). Without it, only the request's shape is checked (the preflight's).
    type: bool
    default: true
  slurm_conf:
    description: The C(SLURM_CONF) that Slurm's commands on the submit host read; empty for their default.
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Check the request and put the job together.
  slurm_launch_request:
    slurm_conf: "{{ cluster_slurm_conf }}"
    request:
      nodes: "{{ slurm_launch_nodes }}"
      group: "{{ slurm_launch_group }}"
      # ... every value of the role's request (vars/main.yml's _slurm_launch_request)
  register: _slurm_launch_checked
"""

RETURN = r"""
environment:
  description: The environment of Slurm's commands on the submit host (C(SLURM_CONF) when set).
  returned: success
  type: dict
following:
  description: Whether the request follows a job already submitted (C(job_id)).
  returned: success
  type: bool
script:
  description: The training script's absolute path on the controller ('.' and '..' resolved).
  returned: success
  type: str
code_dir:
  description: The directory staged with it.
  returned: success
  type: str
job_name:
  description: The job's name (the script's name unless given).
  returned: success
  type: str
code_hash:
  description: The content hash of the code to stage, which the job script names (code/<hash>/).
  returned: with render, unless following
  type: str
node_plan:
  description: The job's nodes from the inventory (launch_request.py's node_inventory_plan), with its partition.
  returned: with render, unless following
  type: dict
job:
  description: The job's values (train_job's).
  returned: with render, unless following
  type: dict
job_files:
  description: The files the staging run writes into the run's directory, each name, content and mode.
  returned: with render, unless following
  type: list
  elements: dict
run_request:
  description:
    - What the job trains, which a run of its name records when taken (job_dir's O(request)) and a
      later launch must match to resume it (RUN_REQUEST_KEYS, the script relative to the code).
  returned: with render, unless following
  type: dict
"""

import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path

from ansible import context
from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.parsing.splitter import parse_kv
from ansible.plugins.action import ActionBase
from ansible.utils.vars import load_extra_vars

from ansible_collections.hpc.slurm_train.plugins.action.slurm_job import CodeToStage
from ansible_collections.hpc.slurm_train.plugins.module_utils import bad_nodes as _bad_nodes
from ansible_collections.hpc.slurm_train.plugins.module_utils.job_dirs import END_MARKER_NAME, code_dir_from_run
from ansible_collections.hpc.slurm_train.plugins.plugin_utils import launch_params as _params
from ansible_collections.hpc.slurm_train.plugins.plugin_utils import launch_request as _rules

# Every value of a request, by its key; the task passes each (vars/main.yml's _slurm_launch_request:
# the key KEY is the variable ROLE_PREFIX + KEY). The values given that reach the job script are
# checked by train_job's rules before anything else is (the Python API checks the same keys of its
# arguments: slurm_train/_rules.py).
ROLE_PREFIX = _params.ROLE_PREFIX
REQUEST_KEYS = _params.REQUEST_KEYS
GIVEN_KEYS = _params.GIVEN_KEYS
ARGUMENT_SPEC = {
    "request": {"type": "dict", "required": True},
    "render": {"type": "bool", "default": True},
    "slurm_conf": {"type": "str", "default": ""},
}
# The values given with -e that reach the job script are taken as the text given, not templated:
# a value "a{#c#}b" is that, and no caller of the Python API runs a lookup on the controller.
VERBATIM_KEYS = (*GIVEN_KEYS, "sweep")
# A variable whose name has one of these words (split at '_') holds a secret, which -e on the command
# line would show to every user of the controller (/proc/*/cmdline).
SECRET_NAME_WORDS = frozenset(("TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "APIKEY", "CREDENTIAL",
                               "CREDENTIALS", "AUTH", "COOKIE", "PAT"))
SECRET_SOURCES = ("put it in a file only you can read (chmod 600 secrets.yml; -e @secrets.yml) or export it on the "
                  "controller and name it (-e env_from=NAME)")
JOB_TEMPLATE = "train.sbatch.j2"
# Written into the run's directory; the job runs it on every node before a GPU job trains.
GPU_CHECK = "gpu_check.py"
# The hang watchdog's stack dumper and its suspect-node rule (files/hang_dump.py).
HANG_DUMP = "hang_dump.py"
# The health gate's program, and the all-reduce it imports, beside the GPU check (it imports that too).
HEALTH_CHECK, ALLREDUCE_CHECK = "health_check.py", "allreduce_check.py"
# Written there too: the job's mark_bad_node runs it to record a node in the user's bad nodes.
BAD_NODES = "bad_nodes.py"


def _length(value):
    return len(value) if isinstance(value, (str, list, tuple, Mapping)) else 0


def derived(request):
    """What the request's names make: the script's absolute path, the code's directory, the job's
    name. A script that is no text makes none (the shape check names it)."""
    script = request["script"] if isinstance(request["script"], str) else None
    try:
        script_file = _rules.script_path(script) if script is not None else ""
        code_dir = _rules.script_path(request["code_dir"] or (os.path.dirname(script_file) if script else ""))
    except AnsibleError as exc:
        raise AnsibleActionFail(str(exc)) from None
    job_name = request["job_name"] or (os.path.splitext(os.path.basename(script))[0] if script else "")
    return script_file, code_dir, job_name


def shape_problem(request, groups, following):
    """The first problem of the request's shape, in this order: names that are no text (the
    argument specs turn a number given in JSON into text for their check only; the variables stay
    numbers, which the later checks could not read as names), where to run, the counts, the node
    group. '' when there is none."""
    text = _rules.text_problems([
        {"key": "nodes", "value": request["nodes"], "hint": " or a list of node names", "list_ok": True},
        {"key": "group", "value": request["group"]},
        {"key": "script", "value": request["script"]},
        {"key": "job_name", "value": request["job_name"]},
        {"key": "partition", "value": request["partition"]},
        {"key": "account", "value": request["account"]},
    ])
    if text:
        return " ".join(text)
    nodes, group = request["nodes"], request["group"]
    if not (following or ((_length(nodes) > 0) != (_length(group) > 0))):
        return ("Say where to run: either a node list (-e nodes=node110,node111 or -e 'nodes=node[110-111]') "
                "or a node group and a count (-e group=gpu_A6000 -e num_nodes=2), not both "
                f"(got nodes={nodes} group={group}); or -e job_id=N to follow a job already submitted.")
    counts = _rules.count_problems([
        {"key": "num_nodes", "value": request["num_nodes"], "min": 1 if group and not following else 0,
         "hint": " (with group, how many of its nodes)"},
        {"key": "gpus_per_node", "value": request["gpus_per_node"], "min": 0, "hint": " (0 = all GPUs of the node)"},
        {"key": "cpus_per_task", "value": request["cpus_per_task"], "min": 0, "hint": " (0 = all CPUs of the node)"},
        {"key": "nproc_per_node", "value": request["nproc_per_node"], "min": 0, "hint": " (0 = one per GPU)"},
        {"key": "master_port", "value": request["master_port"], "min": 0, "max": 65535,
         "hint": " (0 = a port free on the first node as the job starts)"},
        {"key": "job_id", "value": request["job_id"], "min": 0},
        {"key": "slurm_launch_follow_timeout", "value": request["follow_timeout"], "min": 0,
         "hint": " (0 = until the job ends)"},
        {"key": "slurm_launch_log_tail_lines", "value": request["log_tail_lines"], "min": 0},
    ])
    if counts:
        return " ".join(counts)
    compute = set(groups.get("compute") or [])
    if group and not (groups.get(group) and set(groups[group]) <= compute):
        compute_groups = sorted(name for name, members in groups.items()
                                if name not in ("all", "ungrouped") and members and set(members) <= compute)
        return (f"group={group} must be a group of compute nodes in the inventory "
                f"(groups of compute nodes: {', '.join(compute_groups)}).")
    return ""


def job_problem(request, script_file, script_args, job_name, plan, host):
    """The first problem of what reaches the job script, the training script and the nodes, in the
    order a user fixes them: the values that land in the job script (the rules of train_job, which
    checks the job it puts together again), the training script (on the controller: the launch
    stages it, and its directory, onto the NAS), the nodes against the inventory. '' when none."""
    given = {key: request[key] for key in GIVEN_KEYS}
    given.update(script=script_file, script_args=script_args, job_name=job_name)
    if request["partition"]:
        given["partition"] = request["partition"]
    values = (_rules.value_problems(given)
              + _rules.sweep_problems(request["sweep"], request["sweep_parallel"], script_args))
    if values:
        return "; ".join(values) + "."
    if not (request["script"] and os.path.isfile(script_file)):
        if not request["script"]:
            return ("Say what to run: -e script=path/to/train.py (a path on the controller, where ansible-playbook "
                    "runs; the launch copies its directory to the NAS).")
        what = " is a directory" if os.path.isdir(script_file) else " does not exist (or is not a file)"
        return (f"The training script {script_file}{what} on {host} (a path on the controller, where "
                "ansible-playbook runs; the launch copies its directory to the NAS).")
    return plan["problem"]


def _plain(value):
    """A -e value as plain data (text, numbers, lists, mappings), without Ansible's trust to template it."""
    return json.loads(json.dumps(value))


def verbatim_values(request, given, aliases, task_vars):
    """``request`` with each VERBATIM_KEYS value that the -e values (``given``, as loaded, untemplated)
    supply replaced by that value as given. The long name given wins, as in Ansible; an alias only
    where the long name is still the role's default that reads it (a value the play sets itself, as
    the preflight sets its own script_args, is left as it is)."""
    request = dict(request)
    for key in VERBATIM_KEYS:
        long_name = ROLE_PREFIX + key
        if long_name in given:
            name = long_name
        elif key in aliases and key in given and str(task_vars.get(long_name, "")) == role_default(key):
            name = key
        else:
            continue
        try:
            request[key] = _plain(given[name])
        except (TypeError, ValueError):
            continue  # not plain data: the templated value stands
    return request


def role_default(key):
    """The role's default of slurm_launch_<key> as Ansible holds it before templating: the template
    that reads the key's -e alias (the launch's parameter table writes defaults/main.yml)."""
    return _params.default_template(_params.PARAMS[key])


def secret_names(env):
    return sorted(name for name in env if isinstance(name, str) and SECRET_NAME_WORDS & set(name.upper().split("_")))


def command_line_secret_problem(items, load_file, load_text):
    """The first -e of ``items`` (ansible-playbook's -e arguments as typed) that puts a job's env
    where others can read it: a file that sets env readable by its group or others, or a value of
    a secret's name (secret_names) given on the command line itself. '' when there is none."""
    for item in items:
        if item.startswith("@"):
            path = item[1:]
            data = load_file(path)
            if not (isinstance(data, Mapping) and (data.get("env") or data.get(ROLE_PREFIX + "env"))):
                continue
            try:
                mode = stat.S_IMODE(os.stat(path).st_mode)
            except OSError as error:
                return f"-e @{path}: {error.strerror}"
            if mode & 0o077:
                return (f"-e @{path} sets slurm_launch_env and is readable by others (mode {mode:04o}): its values "
                        f"may be secrets; chmod 600 {path} first")
            continue
        data = load_text(item)
        env = data.get(ROLE_PREFIX + "env") if isinstance(data, Mapping) else None
        names = secret_names(env) if isinstance(env, Mapping) else []
        if names:
            return (f"slurm_launch_env {', '.join(names)} given on the command line: every user of this machine can "
                    f"read a command line (/proc/*/cmdline) while the launch runs; {SECRET_SOURCES}")
    return ""


def _load_inline(loader, text):
    """An -e argument's values as ansible-playbook reads them (YAML/JSON, or key=value words)."""
    text = text.strip()
    if text[:1] in ("{", "["):
        return loader.load(text)
    return parse_kv(text)


def env_from_environment(request, environ):
    """(request with env_from's variables of ``environ`` added to its env, problem): each name given
    must be set on the controller and not be in env too."""
    names = request["env_from"]
    if isinstance(names, str):
        names = [name.strip() for name in names.split(",") if name.strip()]
    if not isinstance(names, (list, tuple)) or not all(isinstance(name, str) for name in names):
        return request, (f"env_from={names!r} is not allowed: give names of variables of the controller's environment, "
                         "e.g. -e env_from=HF_TOKEN or -e '{\"env_from\": [\"HF_TOKEN\", \"WANDB_API_KEY\"]}'")
    env = dict(request["env"]) if isinstance(request["env"], Mapping) else request["env"]
    if not names:
        return request, ""
    if not isinstance(env, dict):
        return request, ""  # value_problems names it
    for name in names:
        if name in env:
            return request, f"env_from={name} is not allowed: slurm_launch_env sets {name} too; give it once"
        if name not in environ:
            return request, (f"env_from={name}: the controller's environment has no {name} (export {name}=... "
                             "before ansible-playbook)")
        env[name] = environ[name]
    return {**request, "env": env}, ""
def script_in_code(script_file, code_dir):
    """The script's path relative to the code's directory, links resolved: where it is staged."""
    return os.path.relpath(os.path.realpath(script_file), os.path.realpath(code_dir))


# What makes two launches of one job name the same training: a run is resumed only by its own.
# Not the time limit, restarts or node names: a run resumed after its time limit or a node failure
# may be given more time or other nodes of the same shape.
RUN_REQUEST_KEYS = ("script_args", "sweep", "num_nodes", "nproc_per_node", "gpus_per_node")


def run_request(job, script_file, code_dir):
    """The run's request (RUN_REQUEST_KEYS of the job, its script and its env's names; the
    staging adds the code's hash): values only a launch sets, never the env's values (tokens)."""
    return {"script": script_in_code(script_file, code_dir), "env_names": sorted(job["env"]),
            **{key: job[key] for key in RUN_REQUEST_KEYS}}


def put_together(request, script_args, job_name, plan, code):
    """The job's values (train_job's). The job runs in its run's directory (sbatch runs there), so
    its files are named from there: its log, its end mark, the GPU check, and the script, in the
    code staged by its hash (CodeToStage's), relative to the code's directory, links resolved. A
    partition not given is left to the submission, which finds the one the nodes share."""
    return _rules.train_job({
        "job_name": job_name,
        "job_dir": "",
        "end_marker": END_MARKER_NAME,
        "account": request["account"],
        "partition": request["partition"],
        "num_nodes": plan["num_nodes"],
        "nodelist": "" if request["group"] else plan["hostlist"],
        "gpus_per_node": _rules.as_int(request["gpus_per_node"]) or plan["node_gpus"],
        "cpus_per_task": _rules.as_int(request["cpus_per_task"]) or plan["node_cpus"],
        "nproc_per_node": request["nproc_per_node"],
        "omp_num_threads": request["omp_num_threads"],
        "time_limit": request["time_limit"],
        "warning_signal": request["warning_signal"],
        "warning_seconds": request["warning_seconds"],
        "max_restarts": request["max_restarts"],
        "hang_minutes": request["hang_minutes"],
        # Written beside the GPU check by the staging run.
        "hang_dump": HANG_DUMP,
        "extra_directives": request["extra_directives"],
        "cuda_home": request["cuda_home"],
        "replace_ld_library_path": boolean(request["replace_ld_library_path"], strict=False),
        "conda_root": request["conda_root"],
        "conda_env": request["conda_env"],
        "venv": request["venv"],
        "nccl_env_dir": request["nccl_env_dir"],
        "node_group": plan["node_group"],
        "env": request["env"],
        "rendezvous": request["rendezvous"],
        "master_port": request["master_port"],
        "script": f"{code_dir_from_run(code.digest)}/{code.relative_script}",
        "script_args": script_args,
        "sweep": _rules.sweep_points(request["sweep"]),
        "sweep_parallel": request["sweep_parallel"],
        # Written into the run's directory by the staging run.
        "gpu_check": GPU_CHECK,
        "health_check": HEALTH_CHECK if boolean(request["health_gate"], strict=False) else "",
        "health_slow_factor": request["health_slow_factor"],
        "health_matmul_size": request["health_matmul_size"],
        "bad_nodes_script": BAD_NODES,
        "bad_nodes_root": request["jobs_dir"],
        "bad_node_hours": request["bad_node_hours"],
    })


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        task_vars = task_vars or {}
        missing = [key for key in REQUEST_KEYS if key not in args["request"]]
        if missing:
            raise AnsibleActionFail(f"slurm_launch_request: the request lacks {', '.join(missing)}")
        request = args["request"]
        result["changed"] = False

        unknown = _rules.check_extra_vars(self._loader, _rules.DEFAULT_PREFIXES, task_vars)["msg"]
        if unknown:
            return {**result, "failed": True, "msg": unknown}

        problem = command_line_secret_problem(
            context.CLIARGS.get("extra_vars", ()), self._loader.load_from_file,
            lambda text: _load_inline(self._loader, text))
        if problem:
            return {**result, "failed": True, "msg": problem}
        request = verbatim_values(request, load_extra_vars(self._loader), _params.ALIASES, task_vars)
        request, problem = env_from_environment(request, os.environ)
        if problem:
            return {**result, "failed": True, "msg": problem}
        following = _rules.as_int(request["job_id"]) > 0
        script_file, code_dir, job_name = derived(request)
        found = {
            "environment": {"SLURM_CONF": args["slurm_conf"]} if args["slurm_conf"] else {},
            "following": following,
            "script": script_file,
            "code_dir": code_dir,
            "job_name": job_name,
        }
        groups = task_vars.get("groups") or {}
        problem = shape_problem(request, groups, following)
        if problem:
            return {**result, "failed": True, "msg": problem}
        if not args["render"] or following:
            return {**result, **found}

        try:
            plan = _rules.node_inventory_plan(
                request["nodes"] if _length(request["nodes"]) else groups.get(request["group"]) or [],
                task_vars["hostvars"], groups,
                {**{key: request[key] for key in ("group", "partition", "num_nodes", "gpus_per_node",
                                                  "cpus_per_task", "nproc_per_node")},
                 "nccl_env": bool(request["nccl_env_dir"])})
            plan["partition"] = request["partition"]
            # As a shell would split them; split once, for the checks and the job.
            script_args = _rules.shell_words(request["script_args"])
            problem = job_problem(request, script_file, script_args, job_name, plan,
                                  task_vars.get("inventory_hostname"))
            if problem:
                return {**result, "failed": True, "msg": problem}
            # The code as it will be staged: listed, held to code_max_mb, hashed.
            code = CodeToStage({"script": script_file, "code_dir": code_dir, "max_mb": request["code_max_mb"]})
            job = put_together(request, script_args, job_name, plan, code)
        except AnsibleError as exc:  # the rules' refusals: script_args that split into no words, ...
            return {**result, "failed": True, "msg": str(exc.message)}
        return {**result, **found, "node_plan": plan, "job": job, "job_files": self.job_files(job, task_vars),
                "run_request": run_request(job, script_file, code_dir), "code_hash": code.digest}

    def job_files(self, job, task_vars):
        """The job script (only the user reads it when it carries slurm_launch_env values: they may be
        tokens), the GPU check, the hang watchdog's stack dumper, the bad nodes' program, the health
        gate's programs, and a sweep's table (each array task reads its arguments from the script; the
        table is for people and tools)."""
        # Ansible's template lookup, as a task's lookup('template') renders (its ansible_managed,
        # trim_blocks), given only the search path: it copies every variable it is given.
        lookup = self._shared_loader_obj.lookup_loader.get("ansible.builtin.template", loader=self._loader,
                                                           templar=self._templar)
        script = lookup.run([JOB_TEMPLATE], variables={"ansible_search_path": task_vars.get("ansible_search_path", [])},
                            template_vars={"job": job})[0]
        files = [{"name": f"{job['job_name']}.sbatch", "content": script, "mode": "0600" if job["env"] else "0644"},
                 {"name": GPU_CHECK, "content": Path(self._find_needle("files", GPU_CHECK)).read_text(encoding="utf-8"),
                  "mode": "0644"},
                 {"name": HANG_DUMP, "content": Path(self._find_needle("files", HANG_DUMP)).read_text(encoding="utf-8"),
                  "mode": "0644"},
                 {"name": BAD_NODES, "content": Path(_bad_nodes.__file__).read_text(encoding="utf-8"), "mode": "0644"}]
        if job["health_check"]:
            files += [{"name": name, "content": Path(self._find_needle("files", name)).read_text(encoding="utf-8"),
                       "mode": "0644"} for name in (HEALTH_CHECK, ALLREDUCE_CHECK)]
        if job["sweep"]:
            files.append({"name": _rules.TABLE_NAME, "content": _rules.sweep_table(job["sweep"]), "mode": "0644"})
        return files
