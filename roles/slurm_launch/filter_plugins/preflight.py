"""What a preflight's node checks found, gathered on the submit host from each node's facts:
preflight_node.yml's (CUDA, Python env, NCCL env file) and the nccl_env role's check.yml
(settings against hardware and across nodes, reachability)."""


def _facts(hostvars, node):
    try:
        return hostvars[node]
    except KeyError:
        return {}


def preflight_problems(nodes, hostvars):
    """Every problem, each naming its node; a node whose checks did not run is named too."""
    problems, group_problems = [], []
    for node in nodes:
        facts = _facts(hostvars, node)
        if "_slurm_launch_preflight_problems" not in facts:
            problems.append(f"{node}: its checks did not run (not reachable over SSH, or its facts could not be "
                            "gathered): see the errors above")
            continue
        problems.extend(facts["_slurm_launch_preflight_problems"])
        problems.extend(facts.get("_nccl_env_check_problems") or [])
        group_problems.extend(facts.get("_nccl_env_check_group_problems") or [])
    return problems + [problem for problem in group_problems if problem not in problems]


def preflight_rows(nodes, hostvars):
    """One row per node: what it has, as the job will use it."""
    rows = []
    for node in nodes:
        facts = _facts(hostvars, node)
        found = facts.get("_slurm_launch_preflight_found") or {}
        nccl = facts.get("_nccl_env_check") or {}
        parts = []
        if found.get("cuda"):
            parts.append(f"CUDA {found['cuda']}")
        if found.get("python"):
            parts.append(found["python"])
        if nccl:
            parts.append(f"sockets {nccl.get('interface') or '(NCCL chooses)'} {nccl.get('address')}")
            reached = [r for r in (facts.get("_nccl_env_check_reach") or {}).get("results", []) if "state" in r]
            parts.append(f"reaches {len(reached)} of {len(nodes) - 1} nodes")
        rows.append({"node": node, "checks": "; ".join(parts) or "not checked"})
    return rows


class FilterModule:
    def filters(self):
        return {"preflight_problems": preflight_problems, "preflight_rows": preflight_rows}
