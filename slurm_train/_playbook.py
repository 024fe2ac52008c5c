"""One run of a playbook of the collection through ansible-runner, and what its events said."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import ansible_runner
import yaml

from ._collection import CHECKOUT, ROOT

# A checkout's ansible.cfg names this inventory: the local test cluster.
CHECKOUT_INVENTORY = CHECKOUT / "inventory" / "local" if CHECKOUT else None


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


class _Unsafe(str):
    """Text that Ansible takes as data, never as a template (its YAML tag !unsafe)."""


class _ExtraVarsDumper(yaml.SafeDumper):
    pass


_ExtraVarsDumper.add_representer(_Unsafe, lambda dumper, value: dumper.represent_scalar("!unsafe", str(value),
                                                                                        style='"'))


def _unsafe(value):
    # Only text that has a '{' can hold a template ({{ }}, {% %}, {# #}); Ansible reads a tagged
    # scalar by its implicit type (!unsafe "5" is 5), which no text with a '{' has.
    if isinstance(value, str):
        return _Unsafe(value) if "{" in value else value
    if isinstance(value, Mapping):
        return {str(key): _unsafe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_unsafe(item) for item in value]
    return value


def write_extravars(private, extravars):
    """The -e values as the caller gave them, every text tagged !unsafe (a caller's "{{ lookup('pipe', ...) }}"
    is text, not a command on the controller), in ansible-runner's env/extravars, which it gives to
    ansible-playbook as -e @FILE: readable by this user alone (the values may be tokens), off the
    command line."""
    env = Path(private) / "env"
    env.mkdir(mode=0o700)
    fd = os.open(env / "extravars", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        yaml.dump(_unsafe(extravars), handle, Dumper=_ExtraVarsDumper, default_flow_style=False, allow_unicode=True)
def default_inventory():
    """The inventory ansible-playbook would use from here: ANSIBLE_INVENTORY, else the one of the
    ansible.cfg Ansible finds (ANSIBLE_CONFIG, ./ansible.cfg, ~/.ansible.cfg, /etc/ansible); where
    none names one, a checkout's own (what its ansible.cfg says), else Ansible's default."""
    from ansible.config.manager import ConfigManager

    value, origin = ConfigManager().get_config_value_and_origin("DEFAULT_HOST_LIST")
    if origin == "default" and CHECKOUT_INVENTORY is not None:
        return str(CHECKOUT_INVENTORY)
    sources = value if isinstance(value, list) else [value]
    return ",".join(str(source) for source in sources)


def inventory_path(inventory):
    """The inventory to use: a relative path from here, else what Ansible would use."""
    return str(Path(inventory).resolve()) if inventory else default_inventory()


def playbook_path(name):
    """A checkout's playbook of ``name`` at its root (the README's commands), else the collection's."""
    return CHECKOUT / name if CHECKOUT else ROOT / "playbooks" / name


def run_playbook(playbook, extravars, inventory=None, on_line=None):
    """Run the playbook ``playbook`` with ``extravars`` (as ``-e``), as ansible-playbook would run
    from a checkout's root, or installed, from here; ``on_line`` gets each line that the playbook's plugins
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

    workdir = CHECKOUT or Path.cwd()
    private = tempfile.mkdtemp(prefix="slurm-train-")
    bin_dir = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    envvars = {
        # lookup('env', 'PWD'): the outputs folder (a checkout's, or the current directory's).
        "PWD": str(workdir),
        # ansible-runner turns host key checking off unless told; the project keeps it on.
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        # The ansible-playbook of this Python's environment, whether or not it is activated.
        "PATH": bin_dir + os.pathsep + path if (Path(bin_dir) / "ansible-playbook").exists() else path,
    }
    try:
        write_extravars(private, extravars)
        result = ansible_runner.run(
            private_data_dir=private,
            project_dir=str(workdir),
            playbook=str(playbook_path(playbook)),
            inventory=inventory_path(inventory),
            envvars=envvars,
            event_handler=handle,
            quiet=True,
        )
        run.status, run.rc = result.status, result.rc
    finally:
        shutil.rmtree(private, ignore_errors=True)
    return run
