# -*- coding: utf-8 -*-
"""Action plugin slurm_collect: bring a finished job's files into its outputs folder on the
controller, and write its summaries there, without running a module.

The answer to a launch comes when this task ends, so it costs no module round trip: the
files come over the connection that is already open to the submit host (the transfer
ansible.builtin.fetch itself uses), and job.json and summary.txt are written here, on the
controller. Each file goes to a temporary name in the folder and is renamed into place.
"""

from __future__ import annotations

import base64
import filecmp
import os
import stat
import tempfile

from ansible.errors import AnsibleError
from ansible.plugins.action import ActionBase

ARGUMENT_SPEC = {
    # The outputs folder on the controller: outputs/<name>-<job id>.
    "dest": {"type": "path", "required": True},
    # The folder's mode: 0700 when the log may carry the job's secrets.
    "mode": {"type": "raw", "default": "0755"},
    # Files on the submit host, each fetched as dest/<its name>; one that is not there is left out.
    "fetch": {"type": "list", "elements": "str", "default": []},
    # Of those, only the files directly in this folder are fetched (a job's own directory).
    "fetch_within": {"type": "str"},
    # name -> text, each written as dest/<name> (mode 0644 within the folder).
    "files": {"type": "dict", "default": {}},
}


def _mode(value):
    return int(value, 8) if isinstance(value, str) else int(value)


def _read(path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def _prepare_dir(path, mode, check):
    """The folder exists, is a directory (not a link) with this mode; True if that changed it."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        if not check:
            os.makedirs(path, mode=mode)
            os.chmod(path, mode)
        return True
    if not stat.S_ISDIR(info.st_mode):
        raise AnsibleError(f"the outputs folder {path} is not a directory (a link or a file is there): "
                           "move it away or set slurm_launch_outputs_dir")
    if stat.S_IMODE(info.st_mode) != mode:
        if not check:
            os.chmod(path, mode)
        return True
    return False


def _put(folder, name, data, check):
    """Write data as folder/name through a temporary file and a rename; True if it changed."""
    path = os.path.join(folder, name)
    if _read(path) == data:
        return False
    if not check:
        handle, scratch = tempfile.mkstemp(dir=folder, prefix=f".{name}.")
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(data)
            os.chmod(scratch, 0o644)
            os.replace(scratch, path)
        except BaseException:
            os.unlink(scratch)
            raise
    return True


class ActionModule(ActionBase):
    TRANSFERS_FILES = False  # fetch_file needs no remote temporary directory
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        dest, check = args["dest"], bool(self._task.check_mode)
        for name in args["files"]:
            if not name or "/" in name or name.startswith("."):
                raise AnsibleError(f"slurm_collect: files key {name!r} is not allowed: a plain file name")
        changed = _prepare_dir(dest, _mode(args["mode"]), check)
        fetched, missing = [], []
        within = os.path.normpath(args["fetch_within"]) if args["fetch_within"] else None
        for src in args["fetch"]:
            if within is not None and os.path.dirname(os.path.normpath(src)) != within:
                missing.append(src)
                continue
            fetch_changed = self._fetch(src, dest, check, task_vars)
            if fetch_changed is None:
                missing.append(src)
                continue
            changed |= fetch_changed
            fetched.append(src)
        for name, text in args["files"].items():
            changed |= _put(dest, name, str(text).encode("utf-8"), check)
        result.update(changed=changed, dest=dest, fetched=fetched, not_fetched=missing,
                      written=sorted(args["files"]))
        return result

    def _fetch(self, src, folder, check, task_vars):
        """Bring src of the submit host in as folder/<its name>: True if that changed it, None
        when src cannot be read there. A log can be large: it goes to a file, not to memory."""
        name = os.path.basename(src)
        if getattr(self._connection, "become", None):
            # A raw transfer would read as the login user, not the become user: ask a module.
            slurped = self._execute_module("ansible.legacy.slurp", module_args={"src": src}, task_vars=task_vars)
            return None if slurped.get("failed") else _put(folder, name, base64.b64decode(slurped["content"]), check)
        # Beside its place, so that the rename is within one filesystem; 0600 until then, as
        # the log may carry secrets. In check mode, where the folder may not exist yet, elsewhere.
        handle, scratch = tempfile.mkstemp(dir=None if check else folder, prefix=f".{name}.")
        os.close(handle)
        try:
            try:
                self._connection.fetch_file(src, scratch)
            except AnsibleError:
                return None  # not there (a sweep's task that never started), or not readable
            path = os.path.join(folder, name)
            if os.path.isfile(path) and filecmp.cmp(scratch, path, shallow=False):
                return False
            if not check:
                os.chmod(scratch, 0o644)
                os.replace(scratch, path)
            return True
        finally:
            if os.path.exists(scratch):
                os.unlink(scratch)
