"""Filters for the rules the roles share (module_utils/cluster_rules.py, the same Python the
modules import): safe paths, node groups and partitions, the NCCL env file of a node group."""

import importlib.util
from pathlib import Path

from ansible.errors import AnsibleFilterError

# The project's layout: roles/cluster/filter_plugins -> module_utils.
_SPEC = importlib.util.spec_from_file_location(
    "_cluster_rules", Path(__file__).resolve().parents[3] / "module_utils" / "cluster_rules.py")
rules = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(rules)


def _raising(function):
    def wrapper(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except ValueError as exc:
            raise AnsibleFilterError(str(exc)) from exc
    wrapper.__doc__ = function.__doc__
    return wrapper


def path_problems(values, allow_empty=()):
    """One message per value of ``{name: path}`` that is not a safe path (empty allowed for the
    names in ``allow_empty``)."""
    found = (rules.safe_path_problem(name, value, name in allow_empty) for name, value in values.items())
    return [problem for problem in found if problem]


def nodes_node_group(nodes, hostvars, groups):
    """The one node group of a job's nodes: each node's (its nccl_env_group, or its only node
    group), which must be the same for all; AnsibleFilterError naming the nodes otherwise."""
    found = {}
    for node in nodes:
        try:
            group = rules.host_node_group(node, groups, (hostvars.get(node) or {}).get("nccl_env_group", ""))
        except ValueError as exc:
            raise AnsibleFilterError(str(exc)) from exc
        found.setdefault(group, []).append(node)
    if len(found) != 1:
        raise AnsibleFilterError(
            "the nodes are not of one node group, so no one NCCL env file fits them: "
            + "; ".join(f"{', '.join(members)} in {group}" for group, members in sorted(found.items()))
            + "; pick nodes of one group (-e group=GROUP)")
    return next(iter(found))


def nodes_node_group_problem(nodes, hostvars, groups):
    """Why the nodes have no one node group (nodes_node_group's message), or '' when they have:
    for an assert's fail_msg, which a user reads without a filter's traceback around it."""
    try:
        nodes_node_group(nodes, hostvars, groups)
    except AnsibleFilterError as exc:
        return exc.message
    return ""


class FilterModule:
    def filters(self):
        return {
            "cluster_safe_path": rules.is_safe_path,
            "cluster_path_problems": path_problems,
            "cluster_node_groups": rules.node_groups,
            "cluster_host_node_groups": rules.host_node_groups,
            "cluster_host_node_group": _raising(rules.host_node_group),
            "cluster_nodes_node_group": nodes_node_group,
            "cluster_nodes_node_group_problem": nodes_node_group_problem,
            "cluster_job_partition": rules.job_partition,
            "cluster_nccl_env_file": _raising(rules.nccl_env_file),
        }
