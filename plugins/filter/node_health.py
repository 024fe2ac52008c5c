"""A job's nodes checked against the inventory and the request (node_inventory_plan: the launch,
on the controller, with no Slurm query), and against Slurm as well (node_plan: the preflight,
from a slurm_nodes result), in one pass over the nodes. What Slurm's view of the nodes means is
plugins/module_utils/slurm.py's (check_job_nodes, node_condition), which the launch's staging module run
applies to its own sinfo."""

from ansible_collections.hpc.slurm_train.plugins.module_utils import cluster_rules as _rules
from ansible_collections.hpc.slurm_train.plugins.module_utils import slurm as _slurm_utils

# What the plan reads of each node's inventory variables.
NODE_VARS = ("nccl_env_group", "cluster_node_gpus", "cluster_node_cpus")


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


def node_inventory_plan(nodes, hostvars, groups, request):
    """The job's nodes checked against the inventory and the ``request`` (group, num_nodes,
    gpus_per_node, cpus_per_task, nproc_per_node: the role's values; nccl_env: whether the job
    sources a node group's NCCL env file), with no Slurm query: ``nodes`` is the node list given
    (hostlists) or the group's nodes. In the order a user fixes them: names that are no node names;
    nodes the inventory does not know as compute nodes; no one node group; a request that does
    not fit the inventory's counts. Returns names, hostlist, node_group, num_nodes, node_gpus,
    node_cpus, inventory (each node's counts, for check_job_nodes) and ``problem`` ('' when none)."""
    group = request.get("group") or ""
    plan = {"names": [], "hostlist": "", "node_group": group, "num_nodes": 0, "node_gpus": 0, "node_cpus": 0,
            "inventory": {}, "problem": ""}
    try:
        names = _slurm_utils.requested_names(nodes)
    except ValueError as exc:
        return {**plan, "problem": (f"invalid node list {nodes!r}: {exc}. Give node names ({_slurm_utils.NODE_NAME_RULE}) "
                                    "separated by commas, or a Slurm hostlist such as node[110-111]")}
    plan.update(names=names, hostlist=_slurm_utils.compress_hostlist(names) if names else "")
    compute = groups.get("compute") or []
    compute_set = set(compute)
    not_in_inventory = [name for name in names if name not in compute_set]
    if not_in_inventory:
        return {**plan, "problem": f"Not compute nodes of the inventory: {', '.join(not_in_inventory)} "
                                   f"(known: {', '.join(compute)})."}
    nodes_vars = _nodes_vars(names, hostvars)
    plan["inventory"] = {name: {var: found[var] for var in ("cluster_node_cpus", "cluster_node_gpus") if var in found}
                         for name, found in nodes_vars.items()}
    # The node group names the NCCL env file the job sources (what provision.yml wrote for those
    # nodes); its partition is the group's, named alike, unless another is given.
    if request.get("nccl_env"):
        try:
            plan["node_group"] = _rules.nodes_node_group(names, nodes_vars, groups)
        except ValueError as exc:
            return {**plan, "problem": str(exc)}
    num_nodes = _as_int(request.get("num_nodes")) if group else len(names)
    node_gpus = min((_as_int(nodes_vars[name].get("cluster_node_gpus", 0)) for name in names), default=0)
    node_cpus = min((_as_int(nodes_vars[name].get("cluster_node_cpus", 1)) for name in names), default=0)
    plan.update(num_nodes=num_nodes, node_gpus=node_gpus, node_cpus=node_cpus)
    gpus, cpus, nproc = (_as_int(request.get(key)) for key in ("gpus_per_node", "cpus_per_task", "nproc_per_node"))
    # Only what does not fit is named: a count left at 0 (all of a node's) always fits.
    misfits = [said for fits, said in (
        (num_nodes <= len(names), f"num_nodes={num_nodes} of {len(names)} nodes"),
        (gpus <= node_gpus, f"gpus_per_node={gpus} of {node_gpus} GPUs"),
        (cpus <= node_cpus, f"cpus_per_task={cpus} of {node_cpus} CPUs per node"),
        (nproc <= (cpus or node_cpus),
         f"nproc_per_node={nproc} processes on {cpus or node_cpus} CPUs (one CPU each at least)"),
    ) if not fits]
    if misfits:
        kind = plan["node_group"] or request.get("partition") or "the"
        return {**plan, "problem": (f"The request does not fit: {', '.join(misfits)} ({kind} nodes, "
                                    "from the inventory's cluster_node_* values).")}
    return plan


def node_plan(nodes_info, hostvars, groups, request):
    """The job's nodes (slurm_nodes' result) checked against the inventory and the request
    (node_inventory_plan's, and the partition given), then against Slurm (plugins/module_utils/slurm.py's
    check_job_nodes, which the launch's staging module run applies to its own sinfo): the
    preflight's plan in one pass. Returns node_group, partition, num_nodes, node_gpus, node_cpus,
    unusable, notes and ``problem``: the first failed check's message ('' when none did)."""
    plan = node_inventory_plan(list(nodes_info["names"]), hostvars, groups, request)
    found = {"node_group": plan["node_group"], "partition": "", "num_nodes": plan["num_nodes"],
             "node_gpus": plan["node_gpus"], "node_cpus": plan["node_cpus"], "unusable": {}, "notes": [],
             "problem": plan["problem"]}
    if plan["problem"]:
        return found
    checked = _slurm_utils.check_job_nodes(nodes_info["slurm"], {
        "names": plan["names"], "partition": request.get("partition") or "", "group": request.get("group") or "",
        "node_group": plan["node_group"], "num_nodes": plan["num_nodes"], "inventory": plan["inventory"]})
    return {**found, **{key: checked[key] for key in ("partition", "unusable", "notes", "problem")}}


class FilterModule:
    def filters(self):
        # node_inventory_plan is the slurm_launch_request action's, which loads this file.
        return {"node_plan": node_plan}
