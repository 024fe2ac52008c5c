# -*- coding: utf-8 -*-
"""Action plugin: check the module path settings and render the profile.d scripts, on the
controller, in one task: every task is a round of Ansible's task machinery on every node."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: module_path_render
short_description: Check the module path settings and render the profile.d scripts
description:
  - Checks O(dirs) and O(profile), which are written into shell scripts, and fails naming both and
    what would be right.
  - Renders C(modules.sh.j2) and C(modules.csh.j2) (the role's templates) into RV(files), as
    M(node_files) takes them; writes nothing. Runs on the controller, the same in check mode.
version_added: "0.1.0"
author: ansible-slurm-train
options:
  dirs:
    description: Module file directories, first searched first (C(module_path_dirs)).
    type: list
    elements: str
    required: true
  profile:
    description: The scripts' path in C(/etc/profile.d) without extension (C(module_path_profile)).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Check the module path settings and render the profile.d scripts.
  module_path_render:
    dirs: "{{ module_path_dirs }}"
    profile: "{{ module_path_profile }}"
  register: module_path_rendered
"""

RETURN = r"""
files:
  description: The two scripts, root's and world-readable, as M(node_files) takes them.
  returned: success
  type: list
  elements: dict
  sample:
    - {path: /etc/profile.d/zz-ansible-slurm-train-modules.sh, content: "...", owner: root, group: root, mode: "0644"}
"""

import re

from ansible.plugins.action import ActionBase

# Each is written into a shell script: no spaces, no quotes, no '..'.
DIR_RE = re.compile(r"^/[A-Za-z0-9_.+/-]*$")
PARENT_RE = re.compile(r"/\.\./|/\.\.$")
PROFILE_RE = re.compile(r"^/etc/profile\.d/[A-Za-z0-9_.-]+$")
SCRIPTS = {".sh": "modules.sh.j2", ".csh": "modules.csh.j2"}


def settings_problem(dirs, profile):
    """'' when the settings may be written into the scripts, else the message naming them."""
    good_dirs = (isinstance(dirs, list) and dirs and all(isinstance(one, str) and DIR_RE.match(one)
                                                          and not PARENT_RE.search(one) for one in dirs))
    if good_dirs and isinstance(profile, str) and PROFILE_RE.match(profile):
        return ""
    return (f"module_path_dirs={dirs} must be absolute paths of letters, digits and '_.+/-' (no '..', no "
            f"spaces: each is written into a shell script), and module_path_profile={profile} a name in "
            "/etc/profile.d (without extension).")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        # Unknown and missing options refused in Ansible's words; the values as given ('raw'): a
        # string is no list of directories, which Ansible's list type would make of it.
        _, args = self.validate_argument_spec(argument_spec={"dirs": {"type": "raw", "required": True},
                                                             "profile": {"type": "raw", "required": True}})
        dirs, profile = args["dirs"], args["profile"]
        problem = settings_problem(dirs, profile)
        if problem:
            return {**result, "failed": True, "msg": problem}
        # Ansible's template lookup, as a task's lookup('template') renders (its ansible_managed).
        lookup = self._shared_loader_obj.lookup_loader.get("ansible.builtin.template", loader=self._loader,
                                                           templar=self._templar)
        search = {"ansible_search_path": task_vars.get("ansible_search_path", [])}
        files = [{"path": profile + suffix,
                  "content": lookup.run([template], variables=search, template_vars={"module_path_dirs": dirs})[0],
                  "owner": "root", "group": "root", "mode": "0644"}
                 for suffix, template in SCRIPTS.items()]
        return {**result, "changed": False, "files": files}
