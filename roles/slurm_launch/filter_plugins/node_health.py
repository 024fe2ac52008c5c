"""unusable_nodes: which nodes of a slurm_nodes result cannot run a job now, one rule for the
check before a launch and for the report after a node failure."""

# Base states in which a node runs jobs; sinfo's suffixes mark trouble even then.
USABLE_STATES = ("idle", "mixed", "allocated", "completing", "planned")
# * not responding, ~ powered off, # powering up, ! powering down, % powering down,
# $ maintenance reservation, @ reboot pending, ^ reboot issued, - planned by backfill.
TROUBLE_MARKERS = set("*~#!%$@^-")


def unusable_nodes(slurm_nodes):
    """{name: "state+markers"} for the nodes of ``slurm_nodes`` (slurm_nodes' ``slurm``) that cannot run jobs."""
    return {name: node["state"] + node["markers"] for name, node in slurm_nodes.items()
            if node["state"] not in USABLE_STATES or TROUBLE_MARKERS & set(node["markers"])}


class FilterModule:
    def filters(self):
        return {"unusable_nodes": unusable_nodes}
