"""What a preflight's node checks found (files/preflight/node_check.py, one JSON record per node,
read back from the NAS), turned into the problems and the table the submit host reports.
The NCCL settings are judged by the nccl_env role's own rules (its filter file), so that the
preflight and provision.yml agree on what is wrong."""

from ansible_collections.hpc.slurm_train.plugins.filter import nccl_env as _nccl_env
# The GPU rules are the job's own check (the slurm_launch role's files/gpu_check.py, which the job
# runs before training).
from ansible_collections.hpc.slurm_train.roles.slurm_launch.files import gpu_check as _gpu_check
# The detection's rules (library/nccl_network_facts.py), as the nccl_env filter imports them.
_facts = _nccl_env._facts


# The node-group rule of plugins/module_utils/cluster_rules.py, the one provision.yml's nccl_env role names
# its env files by.
from ansible_collections.hpc.slurm_train.plugins.module_utils import cluster_rules as _rules


def preflight_node_groups(nodes, hostvars, groups):
    """Each node's group as provision.yml's nccl_env role names it ('' for a node it would refuse)."""
    found = []
    by_host = _rules.node_groups_by_host(groups)
    for node in nodes:
        try:
            found.append(_rules.host_node_group(node, groups, (hostvars.get(node) or {}).get("nccl_env_group", ""),
                                                by_host))
        except ValueError:
            found.append("")
    return found


def _by_node(found):
    return {record["node"]: record for record in found if isinstance(record, dict) and "node" in record}


def preflight_problems(found, nodes, context):
    """Every problem, each naming its node and the likely fix; a node that reported nothing is named."""
    records = _by_node(found)
    problems = []
    missing = [node for node in nodes if node not in records]
    if missing:
        job = context.get("check_job") or {}
        tail = " | ".join((job.get("log_tail") or [])[-3:])
        problems.append(
            f"{', '.join(missing)}: the node check did not report (job {job.get('job_id')} ended "
            f"{job.get('state')}, exit code {job.get('exit_code')}{': ' + job['msg'] if job.get('msg') else ''}"
            f"{'; its log ends: ' + tail if tail else ''})")
    for node in nodes:
        record = records.get(node)
        if record is None:
            continue
        if context.get("cuda_home") and not record.get("cuda"):
            problems.append(f"{node}: CUDA: {context['cuda_home']}/bin/nvcc --version failed "
                            f"({record.get('cuda_error', '')[-160:]}); run provision.yml, or set cluster_cuda_home "
                            "to the toolkit every node sees")
        if context.get("env") and not record.get("python"):
            problems.append(f"{node}: Python env: {context['env']} does not activate or import torch "
                            f"({record.get('python_error', '')[-160:]}); run provision.yml, or check "
                            "conda_environment_file")
        if context.get("nccl_env_file") and not record.get("nccl_env_file_found"):
            problems.append(f"{node}: NCCL env: {context['nccl_env_file']}, which the job sources, is missing; "
                            "run provision.yml")
        gpus = int(context.get("gpus_per_node") or 0)
        for problem in _gpu_check.gpu_problems(record.get("gpu") or {}, gpus) if gpus else []:
            problems.append(f"{node}: GPU: {problem}")
        for peer, error in sorted((record.get("reach") or {}).items()):
            if error:
                problems.append(f"{node} cannot reach {peer} at its {record.get('interface') or 'node'} address within "
                                f"{context.get('connect_timeout')} s ({error}: a firewall, a wrong NCCL_SOCKET_IFNAME, "
                                "or a route missing between the nodes?)")
    reported = [node for node in nodes if node in records]
    groups = dict(zip(nodes, context.get("node_groups") or [""] * len(nodes)))
    problems += [problem for problem in _nccl_env.nccl_env_check_problems(
        reported, [groups.get(node, "") for node in reported], [records[node].get("conf") for node in reported],
        [records[node].get("job") or {} for node in reported], [records[node].get("network") for node in reported],
        context.get("nccl_conf", "/etc/nccl.conf"),
        [(context.get("nccl_overrides") or {}).get(node) or {} for node in reported],
        [(context.get("nccl_host_overrides") or {}).get(node) or {} for node in reported]) if problem not in problems]
    return problems


def preflight_rows(found, nodes):
    """One row per node: what it has, as the job will use it."""
    records = _by_node(found)
    rows = []
    for node in nodes:
        record = records.get(node)
        if record is None:
            rows.append({"node": node, "checks": "not checked (the node check did not report)"})
            continue
        parts = []
        if record.get("cuda"):
            parts.append(f"CUDA {record['cuda']}")
        if record.get("python"):
            parts.append(record["python"])
        gpu = record.get("gpu")
        if gpu:
            drivers = gpu.get("drivers") or []
            parts.append(f"driver {drivers[0] if drivers else 'none'}, {len(drivers)} GPUs, torch sees "
                         f"{gpu.get('device_count', 0)}, CUDA {gpu.get('torch_cuda') or 'none'}, "
                         f"NCCL {gpu.get('nccl') or 'none'}")
        reach = record.get("reach") or {}
        # The interface by its name (what `ip addr` shows), then the setting as /etc/nccl.conf and
        # the env file spell it (NCCL's "=" for an exact name), so each can be looked up as written.
        setting = record.get("socket_ifname")
        parts.append(f"sockets {record.get('interface') or '(NCCL chooses)'} {record.get('address')}"
                     + (f" (NCCL_SOCKET_IFNAME={setting})" if setting else ""))
        user_conf = record.get("user_conf")
        if user_conf:
            # NCCL reads it over /etc/nccl.conf: a setting there is the job's, not the group's.
            parts.append(f"{user_conf['path']} sets {', '.join(sorted(user_conf.get('settings') or {})) or 'nothing'}")
        parts.append(f"reaches {sum(1 for error in reach.values() if not error)} of {len(nodes) - 1} nodes")
        rows.append({"node": node, "checks": "; ".join(parts)})
    return rows


# The sizes whose bus bandwidth is held against the floor: large enough to be bandwidth-bound.
FLOOR_MIN_SIZE = 256 * 2**20


def preflight_allreduce_problems(result, found, context):
    """What the all-reduce's figures and rank 0's NCCL log say against the nodes' settings: a GPU
    job whose NCCL did not use NET/IB where IB is enabled on usable ports (or used no GPUDirect
    RDMA where GPUs and HCAs share a PCIe switch), and a bus bandwidth below the group's floor
    (context min_busbw_gbps, Gb/s; none when empty)."""
    problems = []
    records = _by_node(found)
    node = result.get("node") or "rank 0"
    nccl = result.get("nccl")
    # Whatever the backend says: where NCCL logged, its log tells the network it used.
    if int(context.get("gpus_per_node") or 0) and nccl is not None:
        record = records.get(node) or {}
        job = record.get("job") or {}
        network = record.get("network") or {}
        hcas, gpus = network.get("hcas") or [], network.get("gpus") or []
        usable = _facts.active_ports([hca for hca in hcas if not hca.get("virtual_function")])
        used = nccl.get("network") or "no network (NCCL said none)"
        said = " | ".join(line for line in nccl.get("lines") or [] if "NET/" in line)[-400:]
        ports = ", ".join(_facts.port_label(hca, port) for hca, port in usable[:4])
        plugin_only = [hca["name"] for hca in hcas if any(
            port["active"] and port["link_layer"] not in _facts.NCCL_LINK_LAYERS for port in hca["ports"])]
        if str(job.get("NCCL_IB_DISABLE", "0")) != "1" and usable and used != "IB":
            problems.append(
                f"{node}: the all-reduce's NCCL used NET/{used}, not NET/IB, though NCCL_IB_DISABLE="
                f"{job.get('NCCL_IB_DISABLE', '0')} and {node} has active ports ({ports}"
                f"{', ...' if len(usable) > 4 else ''}): a training would run at socket speed "
                f"(rank 0's NCCL: {said or 'no NET lines'}); check NCCL_IB_HCA, the rdma-core libraries in the "
                "training env (libibverbs.so.1) and /dev/infiniband in the job")
        elif used == "IB" and not nccl.get("gdrdma") and _facts.compute_fabric(hcas, gpus)[2] == "pci":
            problems.append(
                f"{node}: the all-reduce's NCCL used NET/IB without GPUDirect RDMA (no channel 'via NET/IB/.../GDRDMA'), "
                f"though {node}'s GPUs and HCAs share PCIe switches: load nvidia-peermem (or use DMA-BUF), and check "
                "NCCL_NET_GDR_LEVEL and ACS")
        elif used == "Socket" and plugin_only:
            problems.append(
                f"{node}: the all-reduce's NCCL used NET/Socket though {node} has RDMA devices NCCL's IB transport "
                f"does not use ({', '.join(plugin_only[:4])}{', ...' if len(plugin_only) > 4 else ''}): a net "
                "plugin (aws-ofi-nccl for EFA) missing from the training env?")
    floor = context.get("min_busbw_gbps")
    if floor not in (None, "") and result.get("results"):
        rows = [row for row in result["results"] if row["size"] >= FLOOR_MIN_SIZE] or \
            [max(result["results"], key=lambda row: row["size"])]
        best = max(rows, key=lambda row: row["busbw"])
        if best["busbw"] * 8 < float(floor):
            problems.append(
                f"the all-reduce's bus bandwidth, {best['busbw'] * 8:.1f} Gb/s at {best['size']} bytes "
                f"({result.get('world_size')} ranks, {result.get('backend')}), is below the group's floor of "
                f"{float(floor):g} Gb/s (slurm_launch_preflight_min_busbw_gbps): a slow or wrong network path")
    return problems


class FilterModule:
    def filters(self):
        return {"preflight_problems": preflight_problems, "preflight_rows": preflight_rows,
                "preflight_node_groups": preflight_node_groups,
                "preflight_allreduce_problems": preflight_allreduce_problems}
