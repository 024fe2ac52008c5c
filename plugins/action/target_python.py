# -*- coding: utf-8 -*-
"""Action plugin: ask a host for its Python and refuse one ansible-core cannot run modules on.

The probe and its rule live here, once, in one task (each task is a round of Ansible's task
machinery on every host): the actions of slurm_job and nccl_network_facts apply them too
(explain_module_failure), only once their module run has failed, so that a launch, and
provision.yml's compute nodes, pay no round trip for them.
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

import re
import shlex

from ansible.plugins.action import ActionBase
from ansible.release import __version__ as ansible_version

# ansible-core's target support matrix: the oldest Python its modules run on, per release; an
# unknown newer release is taken to need 3.9.
MINIMUM_PYTHON = {"2.16": "2.7", "2.17": "3.7", "2.18": "3.8", "2.19": "3.8"}
NEWER_MINIMUM_PYTHON = "3.9"
# The probe's answer: "<path> Python <major>.<minor>...".
ANSWER_RE = re.compile(r"^(\S+) Python (\d+)\.(\d+)", re.MULTILINE)


def target_python_probe(interpreter, fallbacks):
    """A shell command that prints the interpreter's path and its `-V`: ``interpreter`` as set
    (ansible_python_interpreter), or with 'auto' (auto_silent, auto_legacy...) the first of
    ``fallbacks`` (INTERPRETER_PYTHON_FALLBACK) found, as interpreter discovery picks it."""
    if str(interpreter).startswith("auto"):
        return (f"for p in {' '.join(shlex.quote(str(path)) for path in fallbacks)}; "
                "do command -v \"$p\" >/dev/null 2>&1 && { printf '%s ' \"$(command -v \"$p\")\"; \"$p\" -V 2>&1; "
                "exit 0; }; done; echo 'no Python found'; exit 0")
    quoted = shlex.quote(str(interpreter))
    return f"printf '%s ' {quoted}; {quoted} -V 2>&1 || true"


def minimum_python(ansible_version):
    """The oldest Python that ansible-core ``ansible_version`` ('2.19.14') runs modules on."""
    return MINIMUM_PYTHON.get(".".join(str(ansible_version).split(".")[:2]), NEWER_MINIMUM_PYTHON)


def target_python_problem(answer, host, ansible_version):
    """'' when the probe's ``answer`` names a Python that ansible-core ``ansible_version`` runs
    modules on, else what is wrong on ``host`` and how to fix it."""
    minimum = minimum_python(ansible_version)
    found = ANSWER_RE.search(answer or "")
    if found and (int(found[2]), int(found[3])) >= tuple(int(part) for part in minimum.split(".")):
        return ""
    what = (f"{found[1]} is Python {found[2]}.{found[3]}" if found
            else f"this host answered {(answer or '').strip()[:200]}")
    return (f"{host}: ansible-core {ansible_version} needs Python {minimum} or newer on the hosts it manages, "
            f"and {what}. Install a newer Python there (on EL8, where /usr/bin/python3 and "
            "/usr/libexec/platform-python are 3.6: dnf install python39, or python3.11) and set "
            "ansible_python_interpreter to it for this host (e.g. ansible_python_interpreter: /usr/bin/python3.11 "
            "in the inventory's group_vars).")


def probe_problem(action, task_vars):
    """(the probe's answer, '' or what is wrong) for the host of ``action`` (an ActionBase)."""
    config = action._shared_loader_obj.lookup_loader.get("ansible.builtin.config", loader=action._loader,
                                                         templar=action._templar)
    interpreter = task_vars.get("ansible_python_interpreter")
    interpreter = (action._templar.template(interpreter) if interpreter
                   else config.run(["INTERPRETER_PYTHON"], variables=task_vars)[0])
    fallbacks = config.run(["INTERPRETER_PYTHON_FALLBACK"], variables=task_vars)[0]
    answer = action._low_level_execute_command(target_python_probe(interpreter, fallbacks),
                                               sudoable=False).get("stdout", "")
    return answer, target_python_problem(answer, task_vars.get("inventory_hostname"), ansible_version)


def explain_module_failure(action, result, task_vars):
    """``result``, a module run of ``action``'s: when it gave no answer (``module_stderr``) and the
    host's Python is one ansible-core cannot run modules on, that failure said as this action's task
    would have before any module ran. An action whose module is the first to run on a host skips
    that task (a round trip per host) and pays the probe only here, after a failure."""
    if not (result.get("failed") and "module_stderr" in result):
        return result
    _, problem = probe_problem(action, task_vars)
    if not problem:
        return result
    # The module's own output is the old Python's refusal of it: the problem says what it means. Ansible
    # prints the captured error (exception) as the task's error line: it goes too, for the problem's.
    return {key: value for key, value in result.items()
            if key not in ("module_stdout", "module_stderr", "exception")} | {"msg": problem}


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
