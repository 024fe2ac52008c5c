#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: expand a Slurm node list and report how Slurm sees those nodes."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: slurm_nodes
short_description: Expand a Slurm node list and report each node's state as Slurm sees it
description:
  - Expands a node list in any form Slurm accepts (C(node110,node111), C(node[110-111])) into
    node names, refusing names that are not safe host names, before anything else runs.
  - Asks C(sinfo) once for every node of the cluster and reports, for each requested node,
    its partitions, state, CPUs and GRES, and which requested nodes Slurm does not know.
  - Only reads; never changes anything, so it runs the same in check mode.
version_added: "0.1.0"
author: ansible-slurm-train
options:
  nodes:
    description:
      - The nodes, as a Slurm hostlist string or a list of names or hostlists.
      - Leave empty to report every node of the cluster.
    type: raw
    default: []
  environment:
    description:
      - Environment for the Slurm client, for example C(SLURM_CONF).
    type: dict
    default: {}
notes:
  - Runs C(sinfo -h -N -o '%N|%P|%T|%c|%G') with C(LC_ALL=C).
"""

EXAMPLES = r"""
- name: Look at the nodes a job will use
  slurm_nodes:
    nodes: node[110-111]
    environment:
      SLURM_CONF: /var/lib/ansible-slurm-train/local/etc/slurm.conf
  register: nodes

- name: Refuse drained nodes
  ansible.builtin.assert:
    that: nodes.slurm[item].state not in ['drained', 'draining', 'down', 'fail', 'failing']
  loop: "{{ nodes.names }}"
"""

RETURN = r"""
names:
  description: The requested node names, expanded, in the order given, without duplicates.
  returned: always
  type: list
  elements: str
  sample: [node110, node111]
hostlist:
  description: The same nodes in Slurm's compact form.
  returned: always
  type: str
  sample: node[110-111]
slurm:
  description: How Slurm sees each requested node it knows.
  returned: always
  type: dict
  sample:
    node110: {partitions: [gpu_A6000], state: idle, markers: "", cpus: 16, gres: "gpu:8", gpus: 8}
  contains:
    partitions:
      description: Partitions the node belongs to.
      type: list
      elements: str
    state:
      description: Base state in lower case (idle, mixed, allocated, drained, down, ...).
      type: str
    markers:
      description: sinfo's state suffixes (C(*) not responding, C(~) powered off, ...).
      type: str
    cpus:
      description: CPUs Slurm counts on the node.
      type: int
    gres:
      description: The node's GRES, null when it has none.
      type: str
    gpus:
      description:
        - GPUs in the node's GRES (every C(gpu) item, typed or not), 0 for none; null for a GPU
          GRES of a form this module cannot count.
      type: int
common_partitions:
  description: Partitions that hold every requested node Slurm knows, in Slurm's order.
  returned: always
  type: list
  elements: str
  sample: [gpu_A6000]
unknown:
  description: Requested nodes that Slurm does not know.
  returned: always
  type: list
  elements: str
  sample: []
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.hpc.slurm_train.plugins.module_utils.slurm import (
    NODE_NAME_RULE,
    SinfoError,
    compress_hostlist,
    requested_names,
    retry_command,
    shared_partitions,
    sinfo_nodes,
)


def main():
    module = AnsibleModule(
        argument_spec={"nodes": {"type": "raw", "default": []},
                       "environment": {"type": "dict", "default": {}}},
        supports_check_mode=True,
    )
    try:
        names = requested_names(module.params["nodes"])
    except ValueError as exc:
        module.fail_json(msg=f"invalid node list {module.params['nodes']!r}: {exc}. Give node names "
                             f"({NODE_NAME_RULE}) separated by commas, or a Slurm hostlist such as node[110-111]")
    environ = {key: str(value) for key, value in module.params["environment"].items()}
    environ["LC_ALL"] = "C"

    def run(argv):
        return module.run_command(argv, environ_update=environ, expand_user_and_vars=False)

    try:
        known = sinfo_nodes(lambda argv: retry_command(run, argv))
    except SinfoError as exc:
        module.fail_json(msg=str(exc), **({"rc": exc.rc} if exc.rc else {}))
    if not names:
        names = list(known)
    module.exit_json(
        common_partitions=shared_partitions({name: known[name] for name in names if name in known}),
        changed=False,
        names=names,
        hostlist=compress_hostlist(names) if names else "",
        slurm={name: known[name] for name in names if name in known},
        unknown=[name for name in names if name not in known],
    )


if __name__ == "__main__":
    main()
