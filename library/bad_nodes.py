#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: list the user's bad nodes, or forget one."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: bad_nodes
short_description: List the nodes kept out of the user's jobs, or forget one
description:
  - A node that failed a job of the user (a node failure, the GPU check, a hang, the health gate) is
    kept in C(<jobs_root>/<user>/nodes.json) until it expires; the user's launches by node group
    leave it out and a launch given it by name is refused (the C(slurm_job) module's
    submission checks it).
  - Lists the unexpired ones; with O(forget), takes that node off the list first (the record is
    rewritten without the expired ones). Runs as the user whose nodes they are; the record is read
    and written only as the user's own regular file inside their own directory, never through a link.
version_added: "0.1.0"
author: ansible-slurm-train
options:
  jobs_root:
    description: The jobs directory, C(<jobs_root>/<user>/) the user's.
    type: path
    required: true
  forget:
    description: A node to take off the user's bad nodes; nothing changes when it is not there.
    type: str
notes:
  - Supports check mode; it then says what it would forget and writes nothing.
"""

EXAMPLES = r"""
- name: List my bad nodes
  bad_nodes:
    jobs_root: /starmap/nas/jobs
  register: mine

- name: Forget node111
  bad_nodes:
    jobs_root: /starmap/nas/jobs
    forget: node111
"""

RETURN = r"""
bad_nodes:
  description:
    - The user's unexpired bad nodes, oldest mark first (after O(forget)), each with C(node), C(reason)
      (NODE_FAIL, GPU_CHECK, HUNG or HEALTH), C(since) and C(until) (seconds since the epoch),
      C(job_id) and C(line), the same for people.
  returned: always
  type: list
  elements: dict
  sample: [{"node": "node111", "reason": "NODE_FAIL", "since": 1796450000, "until": 1796536400, "job_id": 12,
            "line": "node111: NODE_FAIL in job 12 at 2026-12-07 05:53 UTC, kept out until 2026-12-08 05:53 UTC"}]
forgotten:
  description: The line of the node O(forget) took off, or null when it was not there.
  returned: always
  type: str
record:
  description: The record's path.
  returned: always
  type: str
  sample: /starmap/nas/jobs/alice/nodes.json
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.hpc.slurm_train.plugins.module_utils import bad_nodes

ARGUMENT_SPEC = {
    "jobs_root": {"type": "path", "required": True},
    "forget": {"type": "str"},
}


def run(module):
    """The module's result (a dict) or a failure (fail_json)."""
    root, node = module.params["jobs_root"], module.params["forget"]
    now = time.time()
    result = {"changed": False, "forgotten": None,
              "record": bad_nodes.record_path(root, bad_nodes.owner_name(os.geteuid()))}
    try:
        if node is None:
            records = bad_nodes.unexpired(bad_nodes.read(root), now)
        else:
            bad_nodes.check_node(node)
            if not bad_nodes.read(root):
                records = {}  # nothing to forget, nothing to write (nor a directory to write it in)
            else:
                before, records = bad_nodes.update(root, lambda records: bad_nodes.forget(records, node), now=now,
                                                   dry=module.check_mode)
                if node in before:
                    result.update(changed=True, forgotten=bad_nodes.describe(node, before[node]))
    except ValueError as error:
        module.fail_json(msg=f"forget={node!r}: {error}", **result)
    except (bad_nodes.Refused, OSError) as error:
        module.fail_json(msg=str(error), **result)
    return {**result, "bad_nodes": bad_nodes.listed(records)}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
