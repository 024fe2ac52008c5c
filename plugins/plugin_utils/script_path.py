"""script_path: the training script's path as the job will run it, so that the file the launch
checks is the file the job runs: relative to where ansible-playbook runs, '.' and '..' resolved
(by name, not through symlinks: the path stays the one the user wrote, which every node sees)."""

import os
import re

from ansible.errors import AnsibleFilterError

CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def script_path(value, cwd=None):
    if value == "":
        return ""
    if not isinstance(value, str):
        raise AnsibleFilterError(f"script={value!r} is not allowed: give the path of the training script as text")
    if CONTROL_RE.search(value):
        raise AnsibleFilterError(f"script={value!r} is not allowed: a path without newlines or control characters")
    path = os.path.normpath(os.path.join(cwd or os.getcwd(), value))
    # POSIX keeps a leading '//' as it is; one '/' names the same file.
    return "/" + path.lstrip("/")


class FilterModule:
    def filters(self):
        return {"script_path": script_path}
