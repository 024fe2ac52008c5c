# -*- coding: utf-8 -*-
"""Action plugin: refuse the -e keys a launch does not know, on the controller (jobs.yml's task).

Ansible cannot tell an extra var from any other variable, so a misspelt ``-e wiat=false``
would be ignored and the launch would wait after all. The rule is the launch request's
(plugin_utils/launch_request.py's check_extra_vars), which the slurm_launch_request action
applies too.
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

from ansible.plugins.action import ActionBase

from ansible_collections.hpc.slurm_train.plugins.plugin_utils.launch_request import DEFAULT_PREFIXES, check_extra_vars


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
