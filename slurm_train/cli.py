"""``slurm-train``: the API (api.py) from a shell, one subcommand per function.

    slurm-train launch train.py --nodes node[110-111] -- --lr 0.1
    slurm-train jobs [--all]
    slurm-train forget-node NODE
    slurm-train logs JOB_ID
    slurm-train cancel JOB_ID
    slurm-train preflight --nodes node110,node111

The launch options are the launch's own -e names (the parameter table,
plugins/plugin_utils/launch_params.py, with their help, types and defaults); every rule stays the
playbook's, which the API applies.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys

from ansible_collections.hpc.slurm_train.plugins.plugin_utils import launch_params

from . import _rules, api
from ._playbook import default_inventory

# The -e names that are jobs.yml's verbs or given otherwise here, not launch options.
_NOT_OPTIONS = {"script", "script_args", "all", "cancel", "logs", "preflight", "forget_node"}
# Where a job runs: preflight's options too.
_WHERE = ("nodes", "group", "num_nodes", "partition")


def _launch_options():
    """(-e name, type, default as a person reads it, description) of each launch option."""
    return [(param.alias, param.type, launch_params.shown_default(param), param.description)
            for param in launch_params.PARAMS.values() if param.alias and param.alias not in _NOT_OPTIONS]


def _value(text):
    """A value as -e takes it: JSON (a list, a mapping, a number) where it parses, else the text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _add_options(parser, options):
    for key, kind, default, description in options:
        flag = "--" + key.replace("_", "-")
        # argparse formats help with %: a literal one (sweep_parallel's "%N") is doubled.
        help_text = f"{description} (default: {default})".replace("%", "%%")
        if kind == "bool":
            parser.add_argument(flag, dest=key, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        elif kind == "int":
            parser.add_argument(flag, dest=key, type=int, default=None, metavar="N", help=help_text)
        elif kind == "str":
            parser.add_argument(flag, dest=key, default=None, metavar="TEXT", help=help_text)
        else:
            parser.add_argument(flag, dest=key, type=_value, default=None, metavar="VALUE", help=help_text)


class _Parser(argparse.ArgumentParser):
    """argparse, no abbreviations, and an unknown option refused with the closest known one."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def refuse_unknown(self, unknown):
        known = [flag for action in self._actions for flag in action.option_strings]
        named = []
        for token in unknown:
            flag = token.split("=", 1)[0]
            close = difflib.get_close_matches(flag, known, n=1) if flag.startswith("-") else []
            named.append(f"{token} (did you mean {close[0]}?)" if close else token)
        self.error(f"unrecognized arguments: {' '.join(named)}")


def build_parser():
    inventory = default_inventory()
    common = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    common.add_argument("--inventory", "-i", default=None, metavar="PATH",
                        help=f"the inventory (default: what ansible-playbook uses here: {inventory})")
    common.add_argument("--user", "-u", default=None, metavar="NAME",
                        help="run as this user on the submit host, -e ansible_user=NAME (default: Ansible's)")
    parser = _Parser(prog="slurm-train", description="Launch and follow trainings on a Slurm cluster "
                                                      "(the playbooks of hpc.slurm_train, through slurm_train's API).")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    options = _launch_options()

    launch = commands.add_parser("launch", parents=[common], help="build, submit, follow and collect a job",
                                 description="Build, submit, follow and collect a job (launch.yml). Arguments "
                                             "after -- go to the script.",
                                 usage="slurm-train launch SCRIPT [options] [-- SCRIPT_ARGS...]")
    launch.add_argument("script", help="the training script, on the controller (staged with its directory)")
    _add_options(launch, options)

    jobs = commands.add_parser("jobs", parents=[common], help="your jobs: pending, running and finished",
                               description="Your jobs, newest first, then the nodes kept out of them (jobs.yml).")
    jobs.add_argument("--all", action="store_true", help=f"every job (default: the newest {_rules.runs.JOBS_SHOWN})")

    forget = commands.add_parser("forget-node", parents=[common], help="take a node off your bad nodes",
                                 description="Take a node off the nodes kept out of your jobs (jobs.yml "
                                             "-e forget_node=NODE); slurm-train jobs lists them.")
    forget.add_argument("node", help="the node's name")

    logs = commands.add_parser("logs", parents=[common], help="follow a job's log until it ends",
                               description="Follow a job's log until the job ends (jobs.yml -e logs=N).")
    logs.add_argument("job_id", type=int, help="the Slurm job id")

    cancel = commands.add_parser("cancel", parents=[common], help="cancel a job and collect it",
                                 description="Cancel a job of yours, wait until it ended, collect it (jobs.yml "
                                             "-e cancel=N).")
    cancel.add_argument("job_id", type=int, help="the Slurm job id")

    preflight = commands.add_parser("preflight", parents=[common], help="check the nodes a job would use",
                                    description="Check the nodes a job would use, then run a short all-reduce "
                                                "on them (preflight.yml).")
    _add_options(preflight, [option for option in options if option[0] in _WHERE])
    return parser


def _split_script_args(argv):
    """argv before the first ``--`` and the script's arguments after it (launch only)."""
    if argv[:1] == ["launch"] and "--" in argv:
        at = argv.index("--")
        return argv[:at], argv[at + 1:]
    return argv, None


def _given(namespace, skip):
    return {key: value for key, value in vars(namespace).items() if key not in skip and value is not None}


def _print_table(rows):
    columns = list(_rules.runs.COLUMNS)
    cells = [columns] + [[str(row.get(column, "")) for column in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    for line in cells:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())


def _show(line):
    """A progress or log line, out at once: through a pipe (| tee, a pipeline's log) Python's
    stdout would hold it until its buffer fills."""
    print(line, flush=True)


def _run(args, script_args):
    where = {"inventory": args.inventory, "user": args.user}
    if args.command == "launch":
        given = _given(args, {"command", "inventory", "user", "script"})
        if script_args is not None:
            given["script_args"] = script_args
        result = api.launch(args.script, **where, on_progress=_show, **given)
        print(result.summary or f"job {result.job_id} ({result.name}): {result.state}")
    elif args.command == "jobs":
        found = api.listing(args.all, **where)
        _print_table(found.jobs)
        if found.bad_nodes:
            print("\nbad nodes, kept out of your jobs (slurm-train forget-node NODE clears one):")
            for entry in found.bad_nodes:
                print(f"  {entry['line']}")
    elif args.command == "forget-node":
        forgotten = api.forget_node(args.node, **where)
        print(f"forgot {forgotten}" if forgotten else f"{args.node} is not one of your bad nodes: nothing to forget")
    elif args.command == "logs":
        result = api.logs(args.job_id, on_line=_show, **where)
        print(f"job {result.job_id} ({result.name}): {result.state}", file=sys.stderr)
    elif args.command == "cancel":
        result = api.cancel(args.job_id, **where)
        print(result.summary or f"job {result.job_id} ({result.name}): {result.state}")
    elif args.command == "preflight":
        for line in api.preflight(**where, on_line=_show, **_given(args, {"command", "inventory", "user"})):
            print(line)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    argv, script_args = _split_script_args(argv)
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        parser._subparsers._group_actions[0].choices[args.command].refuse_unknown(unknown)
    try:
        _run(args, script_args)
    except ValueError as error:  # refused before anything ran
        print(f"slurm-train {args.command}: {error}", file=sys.stderr)
        return 2
    except api.JobFailed as error:
        if error.result.summary:
            print(error.result.summary)
        print(f"slurm-train {args.command}: {error}", file=sys.stderr)
        return 1
    except api.LaunchError as error:
        print(f"slurm-train {args.command}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
