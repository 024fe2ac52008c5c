# -*- coding: utf-8 -*-
"""The launch's parameters: one table, each key once, with its -e name, type, default and meaning.

Everything else that lists them is made from this table or held to it by a unit test
(tests/unit/test_launch_params.py): the slurm_launch role's defaults/main.yml and
meta/argument_specs.yml and the README's table are written from it (``python
scripts/launch_params.py``), the request keys of the slurm_launch_request action and the -e keys
the launch knows are read from it, and the Python API and the ``slurm-train`` options follow it.

A Python module rather than a YAML file: the actions, the API and the command import it by its
collection name as they import any shared code, with typed defaults and no file to find and parse
on each run.
"""

from __future__ import annotations

import json
import textwrap
from typing import NamedTuple

ROLE_PREFIX = "slurm_launch_"


class Param(NamedTuple):
    """One launch parameter: the variable ``slurm_launch_<key>``.

    ``alias`` is the short -e name (``-e nodes=...``; the long name works too), None for none.
    ``default`` is the value when neither is given, or ``from_var`` the variable (an inventory's
    ``cluster_*``, or a Jinja expression) that gives it (``default`` None then). ``request``: the
    slurm_launch_request action reads it (vars/main.yml's _slurm_launch_request); ``given``: a
    value that reaches the job script, checked before anything else; ``preflight``: an option
    of the preflight's entry point too.
    """

    key: str
    type: str
    default: object
    description: str
    alias: str | None = None
    from_var: str | None = None
    elements: str | None = None
    choices: tuple | None = None
    request: bool = False
    given: bool = False
    preflight: bool = False

    @property
    def name(self):
        return ROLE_PREFIX + self.key


class Section(NamedTuple):
    """A comment of defaults/main.yml before the parameters that follow it (lines of text)."""

    text: str


TABLE = (
    Section("What to run."),
    Param("script", "str", "", "entry point, on the controller (staged with its directory)",
          alias="script", request=True, given=True),
    Param("script_args", "raw", [], "list, or a string split as a shell would",
          alias="script_args", request=True, given=True),
    Param("job_name", "str", "", "default: the script's name; one name = one training run",
          alias="job_name", request=True),
    Section("The code staged onto the NAS with the script: the script's directory (in a git work tree, its "
            "tracked and untracked-but-not-ignored files), copied to <job dir>/code/<content hash>/."),
    Param("code_dir", "str", "", "the code staged with the script; default: the script's directory",
          alias="code_dir", request=True),
    Param("code_max_mb", "int", 100, "refuse to stage more than this many MB of code", request=True),
    Section("A sweep: the cross product of the values, one Slurm job array of one job script, a task (and a "
            "run directory, runs/<id>/points/<task>/) per point, each given --KEY VALUE after script_args."),
    Param("sweep", "raw", {}, 'option names to lists of values, e.g. {"lr": [0.1, 0.01], "seed": [1, 2]}: the '
          "cross product runs as one Slurm job array, a task and a run directory per point, each given --KEY VALUE",
          alias="sweep", request=True),
    Param("sweep_parallel", "raw", 0, "at most this many points at once (the array's %N); 0 = as many as Slurm allows",
          alias="sweep_parallel", request=True),
    Section("Where: a node list, or a node group and a count (Slurm then picks the nodes)."),
    Param("nodes", "raw", "", "node110,node111 or node[110-111]", alias="nodes", request=True),
    Param("group", "str", "", "an inventory group under compute, a Slurm partition", alias="group", request=True),
    Param("num_nodes", "int", 0, "with group: how many nodes; 0 = all nodes given", alias="num_nodes", request=True),
    Param("partition", "str", "", "default: the partition the nodes share", alias="partition", request=True),
    Param("account", "str", None, "empty: the user's default account", alias="account", from_var="cluster_account",
          request=True, given=True),
    Section("Resources per node: 0 = from the node group's cluster_node_gpus / cluster_node_cpus."),
    Param("gpus_per_node", "int", 0, "--gres=gpu:N", alias="gpus_per_node", request=True),
    Param("cpus_per_task", "int", 0, "one task per node", alias="cpus_per_task", request=True),
    Param("nproc_per_node", "int", 0, "0 = one process per GPU (1 without GPUs)", alias="nproc_per_node",
          request=True),
    Param("time_limit", "str", "1-00:00:00", "sbatch --time (minutes, or D-HH:MM:SS)", alias="time_limit",
          request=True, given=True),
    Param("extra_directives", "list", [], "more '#SBATCH' lines, e.g. ['--exclusive']", elements="str",
          request=True, given=True),
    Section("Time-limit warning and requeue (see cluster_job_* in roles/cluster/defaults/main.yml)."),
    Param("warning_signal", "str", None, "time-limit warning signal, USR1 or USR2; the batch shell passes it on "
          "to the training, which checkpoints", from_var="cluster_job_warning_signal", request=True),
    Param("warning_seconds", "int", None, "seconds before the time limit at which the warning signal comes",
          from_var="cluster_job_warning_seconds", request=True),
    Param("max_restarts", "int", None, "times the job requeues itself after the warning or a node failure; "
          "0 = --no-requeue", alias="max_restarts", from_var="cluster_job_max_restarts", request=True),
    Param("bad_node_hours", "float", 24, "hours a node that failed a job of yours (node failure, GPU check, hang, "
          "health gate) is kept out of your next jobs (<jobs>/<you>/nodes.json); 0 = not kept",
          alias="bad_node_hours", request=True, given=True),
    Param("hang_minutes", "float", 30, "minutes without a new log line or a touch of $TRAINING_HEARTBEAT after "
          "which the training counts as hung: every rank's stacks dumped, the attempt failed as HUNG and requeued "
          "from its checkpoint; 0 = no hang watchdog", alias="hang_minutes", request=True, given=True),
    Section("The health gate (docs/resilience.md), at every start and restart, before training: the GPU check, a "
            "timed matmul on each GPU of each node (on CPU where the training computes on CPU) and one timed "
            "all-reduce across the nodes. A node that fails, or is slow, is named: the job is requeued without it "
            "(group) or fails naming it (a node list)."),
    Param("health_gate", "bool", True, "false: no gate (a GPU job still runs the GPU check)", alias="health_gate",
          request=True),
    Param("health_slow_factor", "float", 1.5, "a node whose matmul takes over this many times the median of the "
          "other nodes' is slow", alias="health_slow_factor", request=True),
    Param("health_matmul_size", "int", 0, "the gate's float32 matmul side; 0 = 8192 on GPUs, 2048 on CPU",
          request=True),
    Section("Environment of the training."),
    Param("cuda_home", "str", None, "'' = no CUDA (CPU jobs)", from_var="cluster_cuda_home", request=True, given=True),
    Param("replace_ld_library_path", "bool", False, "true: LD_LIBRARY_PATH is CUDA's lib64 only", request=True),
    Param("conda_root", "str", None, "conda installation on the NAS", from_var="cluster_conda_root", request=True,
          given=True),
    Param("conda_env", "str", None, "conda env jobs activate", from_var="cluster_conda_env", request=True, given=True),
    Param("venv", "str", None, "set: activate this virtualenv instead of conda", from_var="cluster_venv",
          request=True, given=True),
    Param("nccl_env_dir", "str", None, "nccl-<node group>.sh is sourced when it exists", from_var="cluster_nccl_env_dir",
          request=True, given=True),
    Param("env", "dict", {}, "more variables, e.g. {NCCL_DEBUG: INFO}", request=True, given=True),
    Section("Secrets (tokens) never on the command line: in a file of mode 0600 (-e @secrets.yml setting "
            "slurm_launch_env), or exported on the controller and named here. A job with env is private."),
    Param("env_from", "list", [], "names of variables of the controller's environment added to env (secrets: "
          "never on the command line)", alias="env_from", elements="str", request=True),
    Param("omp_num_threads", "int", 0, "0 = cpus_per_task / nproc_per_node", request=True),
    Param("rendezvous", "str", "static", "static (first host is master) or c10d", alias="rendezvous",
          choices=("static", "c10d"), request=True, given=True),
    Param("master_port", "int", 0, "0 = a port free on the first node as the job starts", alias="master_port",
          request=True),
    Section("Following and collecting."),
    Param("wait", "bool", True, "false: return right after submission", alias="wait"),
    Param("job_id", "int", 0, "follow or collect this job instead of submitting", alias="job_id", request=True),
    Param("force", "bool", False, "submit even if the same job is pending/running; with resume=<run id>, resume "
          "that run even when it is another request; with nodes, submit to a node you keep as bad (warned)",
          alias="force"),
    Section("A job name is an experiment, each launch a run of it in <job dir>/runs/<id>/ (script, log, "
            "checkpoints), and a run is one request: its script, arguments, code, sweep, env names and shape."),
    Param("resume", "str", "auto", "which run of the job name this launch is: auto (resume the newest run of the "
          "same request if it ended by time limit, requeue limit, preemption or node failure, else a fresh run), "
          "never (always fresh), or a run id (refused when it is another request, unless force)", alias="resume"),
    Section("jobs.yml: the user's jobs; with cancel or logs, that one job."),
    Param("jobs_all", "bool", False, "jobs.yml: list every job, not only the newest 20", alias="all"),
    Param("cancel", "int", 0, "jobs.yml: cancel this job of yours, wait until it is final, collect its outputs",
          alias="cancel"),
    Param("logs", "int", 0, "jobs.yml: print this job's log tail and follow it until the job ends (Ctrl-C stops "
          "following only)", alias="logs"),
    Param("forget_node", "str", "", "jobs.yml: take this node off your bad nodes (jobs.yml lists them)",
          alias="forget_node"),
    Param("logs_every", "int", 5, "jobs.yml -e logs=N: seconds between looks at the log (each asks Slurm once)"),
    Param("progress_every", "int", 30, "while following, seconds between live progress lines (state changes show "
          "at once); 0 = none"),
    Param("follow_timeout", "int", 0, "seconds to follow; 0 = until the job ends", request=True),
    Param("accounting", "str", "auto", "where job states come from: auto, yes (sacct), no",
          choices=("auto", "yes", "no")),
    Param("log_tail_lines", "int", 40, "how many last lines of the log a result carries", request=True),
    Param("jobs_dir", "str", None, "<jobs_dir>/<user>/<job_name>/: script, logs, code, checkpoints",
          from_var="cluster_jobs_dir", request=True, given=True),
    Param("jobs_mode", "str", None, "mode of the user's job directories (0700 private; at most 0750, for a group "
          "that reads them)", from_var="cluster_jobs_mode"),
    Param("outputs_dir", "str", None, "job.json, summary.txt, log and script of each job, on the controller",
          from_var="lookup('ansible.builtin.env', 'PWD') ~ '/outputs'"),
    Section("Preflight (preflight.yml, or -e preflight=true before a launch): the nodes' Slurm state, the CUDA, "
            "Python env and NCCL env the job sources, the interfaces and HCAs, reachability between the nodes "
            "(nccl_env_check_connect_timeout), then a short all-reduce through this same job script. A failure "
            "stops the launch."),
    Param("preflight", "bool", False, "true: run the preflight (preflight.yml) first; a failure stops the launch",
          alias="preflight"),
    Param("preflight_sizes", "list", [1024, 65536, 1048576, 16777216], "all-reduce message sizes of the preflight, "
          "bytes (multiples of 4)", elements="int", preflight=True),
    Param("preflight_iterations", "int", 5, "timed all-reduces per size", preflight=True),
    Param("preflight_time_limit", "int", 5, "minutes the preflight's all-reduce job may take", preflight=True),
    Param("preflight_nccl_sizes", "list", [268435456, 1073741824], "all-reduce message sizes added when it runs on "
          "nccl (GPUs), bytes (bandwidth-bound: 256 MiB, 1 GiB)", elements="int", preflight=True),
    Param("preflight_min_busbw_gbps", "raw", "", "lowest bus bandwidth in Gb/s at 256 MiB or more; empty: none "
          "(set it per node group in its group_vars: the first checked node's value counts)", preflight=True),
)

PARAMS = {row.key: row for row in TABLE if isinstance(row, Param)}
# The short -e names, in the table's order.
ALIASES = tuple(param.alias for param in PARAMS.values() if param.alias)
# Every long name (slurm_launch_<key>).
NAMES = frozenset(param.name for param in PARAMS.values())
# What the slurm_launch_request action reads, by key (vars/main.yml's _slurm_launch_request).
REQUEST_KEYS = tuple(key for key, param in PARAMS.items() if param.request)
# The values given that reach the job script, checked by train_job's rules before anything else.
GIVEN_KEYS = tuple(key for key, param in PARAMS.items() if param.given)


def _jinja(value):
    """A default as a Jinja literal: 'text', 0, true, [] ..."""
    if isinstance(value, str):
        return repr(value)
    return json.dumps(value)


def default_template(param):
    """The template that is the role's default where it reads an -e alias or another variable
    (as Ansible holds it before templating), else None."""
    if param.alias:
        return f"{{{{ {param.alias} | default({param.from_var or _jinja(param.default)}) }}}}"
    if param.from_var:
        return f"{{{{ {param.from_var} }}}}"
    return None


def role_default(param):
    """The role's default as defaults/main.yml writes it: its template quoted, else the value as YAML."""
    template = default_template(param)
    return json.dumps(template if template is not None else param.default)


def shown_default(param):
    """The default as a person reads it (--help, the README)."""
    if param.from_var and param.from_var.startswith("cluster_"):
        return f"the inventory's {param.from_var}"
    if param.key == "outputs_dir":
        return "./outputs"
    if isinstance(param.default, bool):
        return str(param.default).lower()
    return json.dumps(param.default) if not isinstance(param.default, str) or not param.default else param.default


DEFAULTS_HEADER = """\
---
# Generated from plugins/plugin_utils/launch_params.py (python scripts/launch_params.py): edit the
# table there. The knobs of a launch: the short names in brackets are the -e aliases users type
# (ansible-playbook launch.yml -e nodes=node110,node111 -e script=train.py); the long names work
# with -e as well. An empty value means "from the inventory", derived by the request's check.
"""


def _comment(text, indent=""):
    return "".join(f"{indent}# {line}\n" for line in textwrap.wrap(text, 100 - len(indent)))


def _described(param):
    return f"[{param.alias}] {param.description}" if param.alias else param.description


def defaults_yaml():
    """The text of roles/slurm_launch/defaults/main.yml."""
    out = [DEFAULTS_HEADER]
    for row in TABLE:
        if isinstance(row, Section):
            out.append("\n" + _comment(row.text))
        else:
            out.append(_comment(_described(row)) + f"{row.name}: {role_default(row)}\n")
    return "".join(out)


# The role's entry points: main (a launch and jobs.yml: every parameter) and the preflight's.
ENTRY_POINTS = {
    "main": {
        "short_description": "Build, submit, follow and collect a multi-node torchrun job on Slurm.",
        "description": "Derives the job from the inventory (node group, GPUs, CPUs) and from Slurm's view of the "
                       "nodes, refuses a bad request before anything is written, renders templates/train.sbatch.j2, "
                       "submits it with the slurm_job module, follows it and fetches its log, script and a job.json "
                       "summary.",
        "options": lambda param: True,
    },
    "preflight_select": {
        "short_description": "Check a preflight's request and choose its nodes (the submit host).",
        "description": "The request checks of a launch and Slurm's view of its nodes (known, one partition, usable); "
                       "keeps the usable ones in C(_slurm_launch_preflight_nodes), the nodes of the node-check job.",
        "options": lambda param: param.preflight,
    },
    "preflight_report": {
        "short_description": "Gather the preflight's problems, run the all-reduce job, report (the submit host).",
        "description": "Runs the node checks (files/preflight/node_check.py: CUDA, the Python env, the NCCL env file "
                       "and settings against the node's hardware, reach between the nodes on a fresh port) as a "
                       "short Slurm job on the chosen nodes, and reads what they found from the NAS. Fails naming "
                       "each node, setting and likely fix when a check found a problem; otherwise runs the "
                       "all-reduce program through this role's launch, then prints and writes a summary table with "
                       "the bus bandwidth per message size.",
        "options": lambda param: False,
    },
}


def _folded(text, indent):
    return ">-\n" + "".join(f"{indent}{line}\n" for line in textwrap.wrap(text, 110 - len(indent)))


def _spec_option(param):
    lines = [f"      {param.name}:\n", f"        type: {param.type}\n"]
    if param.elements:
        lines.append(f"        elements: {param.elements}\n")
    if param.choices:
        lines.append(f"        choices: {json.dumps(list(param.choices))}\n")
    lines.append(f"        description: {_folded(_described(param), '          ')}")
    return "".join(lines)


def argument_specs_yaml():
    """The text of roles/slurm_launch/meta/argument_specs.yml."""
    out = ["---\n# Generated from plugins/plugin_utils/launch_params.py (python scripts/launch_params.py).\n",
           "argument_specs:\n"]
    for entry, spec in ENTRY_POINTS.items():
        out.append(f"  {entry}:\n    short_description: {json.dumps(spec['short_description'])}\n")
        out.append(f"    description:\n      - {_folded(spec['description'], '        ')}")
        options = [param for param in PARAMS.values() if spec["options"](param)]
        if options:
            out.append("    options:\n" + "".join(_spec_option(param) for param in options))
    return "".join(out)


README_BEGIN = "<!-- launch parameters: generated from plugins/plugin_utils/launch_params.py -->"
README_END = "<!-- end of launch parameters -->"


def readme_table():
    """The README's table of launch parameters, between README_BEGIN and README_END."""
    rows = [README_BEGIN, "", "| `-e` | variable | type | default | what |", "|---|---|---|---|---|"]
    for param in PARAMS.values():
        alias = f"`{param.alias}`" if param.alias else ""
        what = param.description.replace("|", "\\|")
        rows.append(f"| {alias} | `{param.name}` | {param.type} | `{shown_default(param)}` | {what} |")
    rows += ["", README_END]
    return "\n".join(rows)
