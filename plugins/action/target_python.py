# -*- coding: utf-8 -*-
"""Action plugin: ask a host for its Python and refuse one ansible-core cannot run modules on.

The probe and its rule are module_utils/cluster_rules.py's: the actions of slurm_job and
nccl_network_facts apply them too (explain_module_failure), only once their module run has
failed, so that a launch, and provision.yml's compute nodes, pay no round trip for them.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: target_python
short_description: Check that ansible-core can run modules with a host's Python
description:
  - Runs one shell command on the host, without a module and without become: the interpreter's
    path and C(-V), the interpreter being C(ansible_python_interpreter), or with V(auto) (and
    its variants) the first of C(INTERPRETER_PYTHON_FALLBACK) found, as interpreter discovery
    picks it.
  - Fails, naming the host, the Python found and the fix, when that Python is older than the
    oldest one this ansible-core runs modules on (3.8 for 2.19), or when there is none.
  - Changes nothing, and runs the same in check mode. Meant as a play's first task, with
    gather_facts off, before any module runs on the host.
version_added: "0.1.0"
author: ansible-slurm-train
options: {}
"""

EXAMPLES = r"""
- name: Check the host's Python before any module runs there.
  target_python:
"""

RETURN = r"""
python:
  description: The probe's answer, the interpreter's path and its C(-V).
  returned: always
  type: str
  sample: /usr/bin/python3 Python 3.11.2
"""

from ansible.plugins.action import ActionBase

from ansible_collections.hpc.slurm_train.plugins.module_utils.cluster_rules import probe_problem


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        self.validate_argument_spec(argument_spec={})  # no options: any given is refused, in Ansible's words
        answer, problem = probe_problem(self, task_vars)
        result.update(changed=False, python=answer.strip())
        if problem:
            result.update(failed=True, msg=problem)
        return result
