"""Filters for the rules the roles share (plugins/module_utils/cluster_rules.py, the same Python the
modules import): safe paths, node groups and partitions, the NCCL env file of a node group."""

from ansible.errors import AnsibleFilterError

from ansible_collections.hpc.slurm_train.plugins.module_utils import cluster_rules as rules


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


def foreign_user_dirs(results):
    """One phrase per <jobs>/<user>/ (the results of a looped stat, follow off, each item a user)
    that is there but is not that user's own directory: a link, a file, or another's directory."""
    found = []
    for result in results:
        info, user = result.get("stat") or {}, result.get("item")
        if not info.get("exists"):
            continue
        kind = "a link" if info.get("islnk") else ("a directory" if info.get("isdir") else "a file")
        if kind != "a directory" or info.get("pw_name") != user:
            found.append(f"{info.get('path')} is {kind} of {info.get('pw_name')}, not {user}'s own directory")
    return found


class FilterModule:
    def filters(self):
        return {
            "cluster_safe_path": rules.is_safe_path,
            "cluster_path_problems": path_problems,
            "cluster_node_groups": rules.node_groups,
            "cluster_host_node_group": _raising(rules.host_node_group),
            "cluster_nccl_env_file": _raising(rules.nccl_env_file),
            "cluster_foreign_user_dirs": foreign_user_dirs,
        }
