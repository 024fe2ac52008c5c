"""The launch request's rules that YAML calls: train_job (the NAS job templates put their jobs
together as a launch does) and node_plan (the preflight's nodes, against the inventory and Slurm).
The rules themselves are plugins/plugin_utils/launch_request.py's, which the launch imports."""

from ansible_collections.hpc.slurm_train.plugins.plugin_utils.launch_request import node_plan, train_job


class FilterModule:
    def filters(self):
        return {"train_job": train_job, "node_plan": node_plan}
