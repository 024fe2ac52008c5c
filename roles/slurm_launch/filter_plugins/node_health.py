"""Which nodes of a slurm_nodes result a job cannot use, and what a job can expect of the others:
one rule (module_utils/slurm.py node_condition) for the check before a launch and for the report
after a node failure; and the job's nodes checked against the inventory and the request
(node_plan), in one pass over the nodes."""

import importlib.util
from pathlib import Path

# The project's layout: roles/slurm_launch/filter_plugins -> module_utils.
_SPEC = importlib.util.spec_from_file_location(
    "_node_health_slurm_utils", Path(__file__).resolve().parents[3] / "module_utils" / "slurm.py")
_slurm_utils = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_slurm_utils)
_RULES_SPEC = importlib.util.spec_from_file_location(
    "_node_health_cluster_rules", Path(__file__).resolve().parents[3] / "module_utils" / "cluster_rules.py")
_rules = importlib.util.module_from_spec(_RULES_SPEC)
_RULES_SPEC.loader.exec_module(_rules)

# What the plan reads of each node's inventory variables.
NODE_VARS = ("nccl_env_group", "cluster_node_gpus", "cluster_node_cpus")


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


def _as_int(value):
    """Jinja's int filter: a number, a numeric string, else 0."""
    try:
        return int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError):
            return 0


def _nodes_vars(names, hostvars):
    """Each node's NODE_VARS that it defines, its variables read once (hostvars[node] merges them
    all again on every read: on a 1,000-node group, a quarter of a second per pass)."""
    found = {}
    for name in names:
        node_vars = hostvars.get(name) or {}
        found[name] = {var: node_vars[var] for var in NODE_VARS if var in node_vars}
    return found


def node_plan(nodes_info, hostvars, groups, request):
    """The job's nodes (slurm_nodes' result) checked against the inventory and the ``request``
    (group, partition, num_nodes, gpus_per_node, cpus_per_task, nproc_per_node: the role's values;
    nccl_env: whether the job sources a node group's NCCL env file), in the order a user fixes
    them. Returns node_group, partition, num_nodes, node_gpus, node_cpus, unusable, notes and
    ``problem``: the first check's message that failed ('' when none did)."""
    names = list(nodes_info["names"])
    slurm = nodes_info["slurm"]
    common = list(nodes_info["common_partitions"])
    group = request.get("group") or ""
    plan = {"node_group": group, "partition": "", "num_nodes": 0, "node_gpus": 0, "node_cpus": 0,
            "unusable": {}, "notes": [], "problem": ""}

    compute = groups.get("compute") or []
    compute_set = set(compute)
    not_in_inventory = [name for name in names if name not in compute_set]
    if not_in_inventory or nodes_info["unknown"]:
        said = []
        if not_in_inventory:
            said.append(f"Not compute nodes of the inventory: {', '.join(not_in_inventory)} "
                        f"(known: {', '.join(compute)}).")
        if nodes_info["unknown"]:
            said.append(f"Slurm does not know: {', '.join(nodes_info['unknown'])} (see sinfo -N).")
        return {**plan, "problem": " ".join(said)}

    nodes_vars = _nodes_vars(names, hostvars)
    # The node group names the NCCL env file the job sources (what provision.yml wrote for those
    # nodes); its partition is the group's, named alike, unless another is given.
    if request.get("nccl_env"):
        try:
            plan["node_group"] = _rules.nodes_node_group(names, nodes_vars, groups)
        except ValueError as exc:
            return {**plan, "problem": str(exc)}
    partition = _rules.job_partition(request.get("partition") or "", group or plan["node_group"], common)
    num_nodes = _as_int(request.get("num_nodes")) if group else len(names)
    plan.update(partition=partition, num_nodes=num_nodes)
    if partition not in common:
        where = "; ".join(f"{name} is in {','.join(node['partitions'])}" for name, node in slurm.items())
        return {**plan, "problem": f"The nodes are not in one partition{' ' + partition if partition else ''}: "
                                   f"{where}; pick nodes of one partition, or -e group=<partition> -e num_nodes=N."}

    # The job asks for what the inventory says a node has; Slurm's count of the same node wins, so a
    # disagreement (cores counted where Slurm counts threads) would shrink or refuse the job silently.
    mismatches = node_resource_mismatches(slurm, nodes_vars, plan["node_group"] or partition)
    if mismatches:
        return {**plan, "problem": "; ".join(mismatches) + "."}

    node_gpus = min((_as_int(nodes_vars[name].get("cluster_node_gpus", 0)) for name in names), default=0)
    node_cpus = min((_as_int(nodes_vars[name].get("cluster_node_cpus", 1)) for name in names), default=0)
    plan.update(node_gpus=node_gpus, node_cpus=node_cpus)
    gpus, cpus, nproc = (_as_int(request.get(key)) for key in ("gpus_per_node", "cpus_per_task", "nproc_per_node"))
    if not (num_nodes <= len(names) and gpus <= node_gpus and cpus <= node_cpus and nproc <= (cpus or node_cpus)):
        procs = (f", nproc_per_node={nproc} processes on {cpus or node_cpus} CPUs (one CPU each at least)"
                 if nproc > 0 else "")
        return {**plan, "problem": (
            f"The request does not fit: num_nodes={num_nodes} of {len(names)} nodes, gpus_per_node={gpus} of "
            f"{node_gpus} GPUs, cpus_per_task={cpus} of {node_cpus} CPUs per node{procs} ({partition} nodes, "
            "from the inventory's cluster_node_* values).")}

    unusable = unusable_nodes(slurm)
    plan["unusable"] = unusable
    if (unusable and not group) or len(names) - len(unusable) < num_nodes:
        return {**plan, "problem": (
            f"{'; '.join(node_messages(slurm, True))}; {num_nodes} usable nodes are needed "
            f"({len(names) - len(unusable)} of {len(names)} are usable). Pick other nodes, or ask an administrator "
            "to mend the node and resume it ('scontrol update nodename=NODE state=resume').")}
    # Usable nodes that delay the job (powered down, planned, reboot pending, reserved, ...): said, not refused.
    plan["notes"] = node_messages(slurm)
    return plan


class FilterModule:
    def filters(self):
        return {"unusable_nodes": unusable_nodes, "node_messages": node_messages,
                "node_resource_mismatches": node_resource_mismatches, "node_plan": node_plan}
