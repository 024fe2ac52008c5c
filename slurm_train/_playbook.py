"""One run of a playbook of the repo through ansible-runner, and what its events said."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import ansible_runner

from ._rules import REPO

DEFAULT_INVENTORY = REPO / "inventory" / "local"


@dataclass
class Run:
    """What a playbook run left: its status and rc, and its events' results by task action."""

    status: str = ""
    rc: int | None = None
    # (task action, task name, result) of each task that ended ok or failed, in order.
    results: list = field(default_factory=list)
    failures: list = field(default_factory=list)  # the msg of each failed task (or item)
    errors: list = field(default_factory=list)  # Ansible's own errors ([ERROR]: ...), as printed

    def last(self, action, where=lambda res: True):
        """The result of the last task of ``action`` whose result passes ``where``, or None."""
        for task_action, _, res in reversed(self.results):
            if task_action == action and where(res):
                return res
        return None

    @property
    def failure(self):
        """The playbook's own failure message: the failed task's msg, else Ansible's error."""
        if self.failures:
            return "\n".join(self.failures)
        if self.errors:
            return "\n".join(self.errors)
        return f"the playbook ended {self.status} (rc {self.rc}) without a failed task"


def _failed_messages(res):
    """The msg of a failed result; of a loop, each failed item's."""
    items = [item for item in res.get("results") or [] if isinstance(item, dict) and item.get("failed")]
    messages = [str(item.get("msg")) for item in items if item.get("msg")]
    return messages or [str(res.get("msg") or res)]


def inventory_path(inventory):
    """The inventory to use: the repo's local cluster by default, a relative path from here."""
    return str(Path(inventory).resolve()) if inventory else str(DEFAULT_INVENTORY)


def run_playbook(playbook, extravars, inventory=None, on_line=None):
    """Run ``<repo>/<playbook>`` with ``extravars`` (as ``-e``), from the repo root, as
    ansible-playbook there would run; ``on_line`` gets each line that the playbook's plugins
    print themselves (display.display outside any task's result), as it comes."""
    run = Run()

    def handle(event):
        kind = event.get("event")
        data = event.get("event_data") or {}
        if kind == "verbose" and on_line is not None:
            for line in (event.get("stdout") or "").splitlines():
                if line.strip():
                    on_line(line.rstrip())
        elif kind == "error":
            run.errors.append((event.get("stdout") or "").strip())
        elif kind in ("runner_on_ok", "runner_on_failed", "runner_on_unreachable"):
            res = data.get("res") or {}
            run.results.append((data.get("task_action"), data.get("task"), res))
            ignored = data.get("ignore_errors") or res.get("skipped")
            if kind != "runner_on_ok" and not ignored:
                run.failures.extend(_failed_messages(res))
        return True  # keep the event in the artifacts (they go with the temporary directory)

    private = tempfile.mkdtemp(prefix="slurm-train-")
    bin_dir = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    envvars = {
        # lookup('env', 'PWD'): the outputs folder of a run from the repo root.
        "PWD": str(REPO),
        # ansible-runner turns host key checking off unless told; the project keeps it on.
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        # The ansible-playbook of this Python's environment, whether or not it is activated.
        "PATH": bin_dir + os.pathsep + path if (Path(bin_dir) / "ansible-playbook").exists() else path,
    }
    try:
        result = ansible_runner.run(
            private_data_dir=private,
            project_dir=str(REPO),
            playbook=str(REPO / playbook),
            inventory=inventory_path(inventory),
            extravars=extravars,
            envvars=envvars,
            event_handler=handle,
            quiet=True,
        )
        run.status, run.rc = result.status, result.rc
    finally:
        shutil.rmtree(private, ignore_errors=True)
    return run
