#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: check, before anything is written, that directories can take the writes."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: writable_dir
short_description: Check that directories (maybe not made yet) are writable and have free space
description:
  - For each path, finds the directory that holds it (the path itself, or its nearest existing
    parent when it is not made yet) and checks that it is a directory, that it can be written
    (read-only mounts and missing permissions fail; outside check mode a temporary file is
    really created and removed, which also catches root squash and quotas) and that its
    filesystem has at least O(min_free_mb) MB free for the user.
  - Fails with one message that names every path at fault and why, so that a full or read-only
    NAS is reported before an install or a job starts, not in the middle of one.
  - Changes nothing.
version_added: "0.1.0"
author: ansible-slurm-train
options:
  paths:
    description: Absolute paths of directories that are about to be written.
    type: list
    elements: path
    required: true
  min_free_mb:
    description: Free space, in MB, that each path's filesystem must have for the user.
    type: int
    default: 0
notes:
  - Supports check mode; it then only asks the kernel (C(access), C(statvfs)).
"""

EXAMPLES = r"""
- name: Check the NAS before installing on it
  writable_dir:
    paths:
      - /starmap/nas/cuda
      - /starmap/nas/anaconda3
    min_free_mb: 1024
"""

RETURN = r"""
free_mb:
  description: Free space for the user, in MB, of each path's filesystem.
  returned: always
  type: dict
  sample: {"/starmap/nas/cuda": 80371}
checked:
  description: For each path, the existing directory that was checked.
  returned: always
  type: dict
  sample: {"/starmap/nas/cuda": /starmap/nas}
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.hpc.slurm_train.plugins.module_utils.job_dirs import existing_directory, problem_with


def main():
    module = AnsibleModule(
        argument_spec={"paths": {"type": "list", "elements": "path", "required": True},
                       "min_free_mb": {"type": "int", "default": 0}},
        supports_check_mode=True,
    )
    paths, min_free_mb = module.params["paths"], module.params["min_free_mb"]
    relative = [path for path in paths if not os.path.isabs(path)]
    if relative or min_free_mb < 0:
        module.fail_json(msg=f"give absolute paths (got {relative}) and min_free_mb of 0 or more "
                             f"(got {min_free_mb})")
    problems, free, checked = [], {}, {}
    for path in paths:
        checked[path] = existing_directory(os.path.normpath(path))
        problem, free[path] = problem_with(checked[path], min_free_mb, try_write=not module.check_mode)
        if problem:
            problems.append(f"{path}: {problem}")
    if problems:
        module.fail_json(msg="; ".join(problems), free_mb=free, checked=checked)
    module.exit_json(changed=False, free_mb=free, checked=checked)


if __name__ == "__main__":
    main()
