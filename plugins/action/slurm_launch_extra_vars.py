# -*- coding: utf-8 -*-
"""Action plugin: refuse the -e keys a launch does not know, on the controller.

Ansible cannot tell an extra var from any other variable, so a misspelt ``-e wiat=false``
would be ignored and the launch would wait after all. This reads what was given on the
command line and compares it with what the role reads.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: slurm_launch_extra_vars
short_description: Refuse -e keys that a launch does not know
description:
  - Reads the extra vars given to ansible-playbook (every C(-e), also C(-e @file)) and fails,
    listing each key that the launch does not read, with the closest known key
    ("did you mean 'nodes'?") and the list of known keys.
  - Known keys are the launch's parameters (the table of C(plugins/plugin_utils/launch_params.py),
    which the role's defaults and argument specs are written from), by their short C(-e) names
    and their long names, and any variable with one of O(prefixes).
  - Runs on the controller, changes nothing, and runs the same in check mode.
version_added: "0.1.0"
author: ansible-slurm-train
options:
  prefixes:
    description: Variables whose names start with one of these are known (set by the inventory or Ansible).
    type: list
    elements: str
    default: [cluster_, ansible_]
"""

EXAMPLES = r"""
- name: Refuse unknown -e keys.
  slurm_launch_extra_vars:
"""

RETURN = r"""
aliases:
  description: The short -e names of the launch's parameters, in the table's order.
  returned: always
  type: list
  elements: str
  sample: [script, script_args, job_name, nodes]
known:
  description: Every known key other than the prefixed ones, sorted.
  returned: always
  type: list
  elements: str
given:
  description: The keys of the extra vars given, sorted.
  returned: always
  type: list
  elements: str
  sample: [nodes, script]
unknown:
  description: The given keys that are not known; the task fails when there is one.
  returned: always
  type: list
  elements: str
  sample: [wiat]
"""

import difflib
import json
import re
import shlex

from ansible import context
from ansible.parsing.splitter import parse_kv, split_args
from ansible.plugins.action import ActionBase
from ansible.utils.vars import load_extra_vars

from ansible_collections.hpc.slurm_train.plugins.plugin_utils import launch_params

# O(prefixes)' default: what the inventory and Ansible set.
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
    task's variables are the prefixed names only suggested. This action's and the
    slurm_launch_request action's one check."""
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


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec={
            "prefixes": {"type": "list", "elements": "str", "default": list(DEFAULT_PREFIXES)},
        })
        found = check_extra_vars(self._loader, tuple(args["prefixes"]), task_vars or {})
        result.update(changed=False, **{key: found[key] for key in ("aliases", "known", "given", "unknown")})
        if found["unknown"]:
            result.update(failed=True, msg=found["msg"])
        return result
