"""job_dir action: stage code from the controller into a job's directory on the NAS (the
preflight's programs, named one by one with ``code_files``, or a directory with ``code_dir``).

The code is listed, held to ``max_mb`` and hashed as a launch's is (the slurm_job action's
CodeToStage), and the module on the submit host is asked whether ``<job dir>/code/<hash>/`` is
there: small code goes with that request, larger code is sent as one archive only when the first
run finds it missing (and not in check mode or a probe).
"""

from ansible.plugins.action import ActionBase

# The launch's code staging (the slurm_job action's), one rule for both.
from ansible_collections.hpc.slurm_train.plugins.action.slurm_job import MODULE_ARGS, CodeToStage


class ActionModule(ActionBase):
    # Not TRANSFERS_FILES: that makes a remote tmp before run(), which send()'s own (made only when
    # the code is sent, and removed after) replaced as the shell's tmpdir, so it was never removed.

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        code = CodeToStage(args)
        module_args = {key: args[key] for key in MODULE_ARGS if key in args}
        module_args["code_hash"] = code.digest
        answer = code.stage(
            self, lambda extra: self._execute_module("job_dir", module_args={**module_args, **extra}, task_vars=task_vars),
            bool(module_args.get("probe")) or self._task.check_mode,
            lambda answer: None if answer.get("failed") else answer)
        return {**result, **answer}
