#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Write a node's small configuration files, all in one module run."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_files
short_description: Write a node's small configuration files (content, owner, group, mode) in one run
description:
  - Makes each file of O(files) a regular file of the given content, owner, group and mode, changing
    only what differs. A file whose content differs is written to a temporary file beside it and
    renamed into place, so that a reader never sees half of it; one whose owner, group or mode
    alone differ is changed in place.
  - One module run for all the files of a role, where M(ansible.builtin.template) costs two per file
    (a stat, then the file module); on many nodes sharing few cores, that is the time of a no-change
    C(provision.yml). Render the content on the controller (C(lookup('ansible.builtin.template', ...))).
  - The last component of a path is never followed; a link, directory or other non-regular file
    there is refused, naming it. The parent directory must exist.
  - Supports check mode (what would change) and diff mode (each changed file's before and after).
version_added: "0.1.0"
author: ansible-slurm-train
options:
  files:
    description: The files, each with its content and attributes.
    type: list
    elements: dict
    required: true
    suboptions:
      path:
        description: Absolute path of the file.
        type: path
        required: true
      content:
        description: The whole content, as text (written as UTF-8).
        type: str
        required: true
      owner:
        description: Owner's user name.
        type: str
        required: true
      group:
        description: Group name.
        type: str
        required: true
      mode:
        description: Permissions, as octal text (C("0644")).
        type: str
        required: true
notes:
  - Usually run with C(become), the files being the node's own (C(/etc)).
"""

EXAMPLES = r"""
- name: Write the profile.d scripts.
  node_files:
    files:
      - path: /etc/profile.d/nas-modules.sh
        content: "{{ lookup('ansible.builtin.template', 'modules.sh.j2') }}"
        owner: root
        group: root
        mode: "0644"
      - path: /etc/profile.d/nas-modules.csh
        content: "{{ lookup('ansible.builtin.template', 'modules.csh.j2') }}"
        owner: root
        group: root
        mode: "0644"
  become: true
"""

RETURN = r"""
files:
  description: Each file, in the order given, and what was (or in check mode would be) done to it.
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: The file.
      type: str
    action:
      description: C(created), C(written) (its content differed), C(attributes) (only owner, group or mode), or C(none).
      type: str
  sample: [{"path": "/etc/nccl.conf", "action": "none"}]
"""

import errno
import grp
import os
import pwd
import stat

from ansible.module_utils.basic import AnsibleModule

FILE_SPEC = {
    "path": {"type": "path", "required": True},
    "content": {"type": "str", "required": True},
    "owner": {"type": "str", "required": True},
    "group": {"type": "str", "required": True},
    "mode": {"type": "str", "required": True},
}


class Refused(Exception):
    """A file that cannot be written as asked; the message names it."""


def wanted(entry):
    """(path, bytes, uid, gid, mode) of one entry of O(files); Refused naming what is wrong."""
    path = entry["path"]
    if not os.path.isabs(path) or os.path.basename(path) in ("", ".", ".."):
        raise Refused(f"path {path!r} is not allowed: give the absolute path of a file")
    try:
        mode = int(entry["mode"], 8)
    except ValueError:
        raise Refused(f"mode {entry['mode']!r} of {path} is not allowed: give octal text such as \"0644\"") from None
    if not 0 <= mode <= 0o7777:
        raise Refused(f"mode {entry['mode']!r} of {path} is not allowed: give permissions from 0000 to 7777")
    try:
        uid = pwd.getpwnam(entry["owner"]).pw_uid
    except KeyError:
        raise Refused(f"owner {entry['owner']!r} of {path} is no user on this host") from None
    try:
        gid = grp.getgrnam(entry["group"]).gr_gid
    except KeyError:
        raise Refused(f"group {entry['group']!r} of {path} is no group on this host") from None
    return path, entry["content"].encode("utf-8"), uid, gid, mode


def current(path):
    """(bytes, uid, gid, mode) of the regular file at ``path``, None where there is none; Refused
    for a link, directory or other kind of file there (never followed)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as error:
        kind = "a link" if os.path.islink(path) else error.strerror
        raise Refused(f"{path} is {kind}: refusing to write through it (remove it, or give another path)") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise Refused(f"{path} is not a regular file: refusing to replace it")
    with os.fdopen(fd, "rb") as handle:
        return handle.read(), info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)


def write(path, data, uid, gid, mode):
    """Write ``data`` through a temporary file beside ``path``, renamed into place."""
    directory, name = os.path.split(path)
    partial = os.path.join(directory, f".{name}.partial-{os.urandom(4).hex()}")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            os.fchown(out.fileno(), uid, gid)
            os.fchmod(out.fileno(), mode)  # after fchown, which clears set-id bits
            out.flush()
            os.fsync(out.fileno())
        os.rename(partial, path)
    except BaseException:
        try:
            os.unlink(partial)
        except OSError:
            pass
        raise


def set_attributes(path, uid, gid, mode):
    """Owner, group and mode of the regular file at ``path``, changed through a descriptor opened
    without following a link: what is changed is what was looked at, not a link put there since."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        os.fchown(fd, uid, gid)
        os.fchmod(fd, mode)  # after fchown, which clears set-id bits
    finally:
        os.close(fd)


def plan(entry):
    """What one file needs (RV(files)' action: created, written, attributes or none), with what to
    write; Refused naming what stands in the way."""
    path, data, uid, gid, mode = wanted(entry)
    if not os.path.isdir(os.path.dirname(path)):
        raise Refused(f"{os.path.dirname(path)} is not a directory: {path} cannot be written")
    found = current(path)
    if found is None or found[0] != data:
        action = "created" if found is None else "written"
    elif found[1:] != (uid, gid, mode):
        action = "attributes"
    else:
        action = "none"
    before = "" if found is None else found[0].decode("utf-8", "replace")
    return {"path": path, "action": action, "data": data, "uid": uid, "gid": gid, "mode": mode, "before": before,
            "after": entry["content"]}


def main():
    module = AnsibleModule(
        argument_spec={"files": {"type": "list", "elements": "dict", "required": True, "options": FILE_SPEC}},
        supports_check_mode=True,
    )
    try:
        # Every file is looked at before any is written: one that cannot be leaves all as they were.
        planned = [plan(entry) for entry in module.params["files"]]
    except Refused as error:
        module.fail_json(msg=str(error))
    done = []
    try:
        for one in planned:
            if not module.check_mode and one["action"] in ("created", "written"):
                write(one["path"], one["data"], one["uid"], one["gid"], one["mode"])
            elif not module.check_mode and one["action"] == "attributes":
                set_attributes(one["path"], one["uid"], one["gid"], one["mode"])
            done.append({"path": one["path"], "action": one["action"]})
    except OSError as error:
        module.fail_json(msg=f"cannot write {error.filename or one['path']}: {error.strerror}", files=done)
    diffs = [{"before_header": one["path"], "after_header": one["path"], "before": one["before"],
              "after": one["after"]} for one in planned if one["action"] in ("created", "written")]
    module.exit_json(changed=any(one["action"] != "none" for one in planned),
                     files=[{"path": one["path"], "action": one["action"]} for one in planned],
                     **({"diff": diffs} if module._diff and diffs else {}))


if __name__ == "__main__":
    main()
