"""The playbook's own request rules, imported from the collection's plugins, for a check before anything runs.

Nothing here restates a rule: the unknown-key check, the value rules, the sweep's and what a
script path and its arguments are made are the launch request's (plugin_utils/launch_request.py,
its known keys the launch's parameter table, plugin_utils/launch_params.py).
"""

from __future__ import annotations

import os

import yaml
from ansible.errors import AnsibleError

from ._collection import ROOT
from ansible_collections.hpc.slurm_train.plugins.filter import runs
from ansible_collections.hpc.slurm_train.plugins.plugin_utils import launch_params
from ansible_collections.hpc.slurm_train.plugins.plugin_utils import launch_request as request_rules
from ansible_collections.hpc.slurm_train.plugins.plugin_utils.launch_request import (
    script_path, shell_words, sweep_problems)

CLUSTER_DEFAULTS_FILE = ROOT / "roles" / "cluster" / "defaults" / "main.yml"
# The long names start with this; the request's keys (vars/main.yml's _slurm_launch_request) are the rest.
PREFIX = launch_params.ROLE_PREFIX
# The values a launch's slurm_launch_request task checks first (by the short key train_job reads).
GIVEN_KEYS = launch_params.GIVEN_KEYS


def _message(error):
    """An Ansible error's own message, without Ansible's decorations."""
    return getattr(error, "message", None) or str(error)


def known_keys():
    """(aliases, long names) of the launch's parameters, as the slurm_launch_extra_vars task knows them."""
    return list(launch_params.ALIASES), set(launch_params.NAMES)


def prefixed_variables(inventory):
    """The variables with a known prefix that a launch's task sees set (only suggested by the
    unknown-key message): the submit host's inventory variables, Ansible's magic ones and the
    cluster role's defaults. Empty where the inventory cannot be read (the playbook says why)."""
    prefixes = request_rules.DEFAULT_PREFIXES
    names = set(yaml.safe_load(CLUSTER_DEFAULTS_FILE.read_text(encoding="utf-8")) or {})
    try:
        from ansible.inventory.manager import InventoryManager
        from ansible.parsing.dataloader import DataLoader
        from ansible.vars.manager import VariableManager

        loader = DataLoader()
        hosts = InventoryManager(loader=loader, sources=[str(inventory)])
        submit = hosts.get_hosts("submit[0]")
        if submit:
            names |= set(VariableManager(loader=loader, inventory=hosts).get_vars(host=submit[0]))
    except (AnsibleError, OSError):
        pass
    return sorted(name for name in names if name.startswith(prefixes))


def check_keys(given, inventory):
    """ValueError with the playbook's message when ``given`` has a key a launch does not read."""
    aliases, options = known_keys()
    unknown = request_rules.unknown_keys(sorted(given), aliases, options)
    if unknown:
        prefixed = [name for name in prefixed_variables(inventory) if name not in given]
        raise ValueError(request_rules.unknown_keys_message(unknown, aliases, options, request_rules.DEFAULT_PREFIXES,
                                                            prefixed))


def _given_value(extravars, key, aliases):
    """The value of slurm_launch_<key> that the -e values set (the long name wins over its alias,
    as a variable given wins over the default that reads the alias), or KeyError."""
    long_name = PREFIX + key
    if long_name in extravars:
        return extravars[long_name]
    alias = key if key in aliases else None
    if alias and alias in extravars:
        return extravars[alias]
    raise KeyError(key)


def check_values(extravars):
    """ValueError with the playbook's message when a value given would not go into the job script.

    The values the inventory supplies (the jobs directory, CUDA home...) are checked by the
    playbook, as are the rules it keeps in its tasks (names given as text, nodes or group, counts,
    the node group): those failures raise LaunchError with the playbook's message.
    """
    aliases, _ = known_keys()
    if _given_value_or(extravars, "job_id", aliases, 0) not in (0, "0", "", None):
        return  # following a job: derive.yml checks no values
    values = {}
    for key in GIVEN_KEYS:
        try:
            values[key] = _given_value(extravars, key, aliases)
        except KeyError:
            continue
    script = _given_value_or(extravars, "script", aliases, "")
    try:
        if "script" in values:
            values["script"] = script_path(values["script"])
        if "script_args" in values:
            values["script_args"] = shell_words(values["script_args"])
    except AnsibleError as error:
        raise ValueError(_message(error)) from None
    job_name = _given_value_or(extravars, "job_name", aliases, "")
    if not job_name and isinstance(script, str) and script:
        job_name = os.path.splitext(os.path.basename(script))[0]
    if job_name:
        values["job_name"] = job_name
    partition = _given_value_or(extravars, "partition", aliases, "")
    if partition:
        values["partition"] = partition
    problems = request_rules.value_problems(values) + sweep_problems(
        _given_value_or(extravars, "sweep", aliases, {}), _given_value_or(extravars, "sweep_parallel", aliases, 0),
        values.get("script_args", []))
    if problems:
        raise ValueError(f"{'; '.join(problems)}.")


def _given_value_or(extravars, key, aliases, default):
    try:
        return _given_value(extravars, key, aliases)
    except KeyError:
        return default
