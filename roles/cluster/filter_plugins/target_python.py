"""Whether ansible-core can run modules with a host's Python: the command that asks the host, and
what its answer means. One rule for the cluster role's target_python.yml (a raw probe as a play's
first task, before any module runs) and the slurm_job action (which probes only when its first
module run fails: a launch pays no round trip for it)."""

import re
import shlex

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


class FilterModule:
    def filters(self):
        return {"target_python_probe": target_python_probe, "target_python_problem": target_python_problem}
