"""Which nodes of a slurm_nodes result a job cannot use, and what a job can expect of the others:
one rule (module_utils/slurm.py node_condition) for the check before a launch and for the report
after a node failure."""

import importlib.util
from pathlib import Path

# The project's layout: roles/slurm_launch/filter_plugins -> module_utils.
_SPEC = importlib.util.spec_from_file_location(
    "_node_health_slurm_utils", Path(__file__).resolve().parents[3] / "module_utils" / "slurm.py")
_slurm_utils = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_slurm_utils)


def _conditions(slurm_nodes):
    for name, node in slurm_nodes.items():
        refused, reasons = _slurm_utils.node_condition(node["state"], node["markers"])
        yield name, node["state"] + node["markers"], refused, reasons


def unusable_nodes(slurm_nodes):
    """{name: "state+markers"} for the nodes of ``slurm_nodes`` (slurm_nodes' ``slurm``) that Slurm
    gives no job until an administrator acts: down, drained, draining, failed, INVAL, not responding."""
    return {name: shown for name, shown, refused, _ in _conditions(slurm_nodes) if refused}


def node_messages(slurm_nodes, refused=False):
    """One line per node: why it is refused (``refused=True``), or what a job can expect of a usable
    node that is not simply idle or mixed (powered down, planned, reboot pending, reserved, ...)."""
    return [f"{name} ({shown}) {'; '.join(reasons)}" for name, shown, is_refused, reasons in _conditions(slurm_nodes)
            if is_refused == bool(refused) and reasons]


def node_resource_mismatches(slurm_nodes, hostvars, group):
    """One line per node whose cluster_node_cpus or cluster_node_gpus in the inventory (``hostvars``)
    differ from Slurm's node record (sinfo %c, scontrol's CPUTot; the gpu count of its Gres),
    naming both values and the fix in ``group``'s group_vars.  A count the inventory does not set,
    or a GRES this project cannot read, is not compared."""
    found = []
    for name, node in slurm_nodes.items():
        ours = hostvars.get(name) or {}
        for what, theirs, field, var in (("CPUs", node.get("cpus"), "CPUTot", "cluster_node_cpus"),
                                         ("GPUs", node.get("gpus"), "Gres", "cluster_node_gpus")):
            if theirs is None or ours.get(var) in (None, ""):
                continue
            if int(ours[var]) != int(theirs):
                found.append(f"{name}: the inventory says {int(ours[var])} {what}, Slurm says {int(theirs)} ({field}); "
                             f"set {var}: {int(theirs)} in group_vars/{group or '<node group>'}.yml")
    return found


class FilterModule:
    def filters(self):
        return {"unusable_nodes": unusable_nodes, "node_messages": node_messages,
                "node_resource_mismatches": node_resource_mismatches}
