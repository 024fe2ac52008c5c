# -*- coding: utf-8 -*-
"""Action plugin for the nccl_network_facts module (library/): runs the module, and when its run
gives no answer on a Python that ansible-core cannot run modules on, says so (the cluster role's
target_python rule). The module is the first to run on a node in provision.yml's compute play,
which therefore runs no Python check of its own: a round trip per node, paid here only after a
failure."""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.hpc.slurm_train.plugins.module_utils.cluster_rules import explain_module_failure


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        result.update(self._execute_module(module_name="nccl_network_facts", module_args=self._task.args,
                                           task_vars=task_vars))
        # As Ansible's own action for plain modules does: a temporary directory made for it goes.
        self._remove_tmp_path(self._connection._shell.tmpdir)
        return explain_module_failure(self, result, task_vars)
