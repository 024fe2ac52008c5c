# -*- coding: utf-8 -*-
"""Action plugin for the slurm_job module: follows a job in slices, so that a person sees it move.

A module cannot print while it runs. While a job is followed, this runs the module again and
again, each run ending at the job's next change of state or after ``progress_every`` seconds,
and prints between runs what changed: the state (with Slurm's reason, the nodes, the restart
count) and the newest lines of the job's log. Each slice carries on the poll schedule of the
previous one (``progress_from``), so Slurm is asked no more often than by one long run.

In check mode, ``prediction_script`` (the script's content, rendered on the controller) is what
Slurm's prediction reads, from a temporary directory on the host.
"""

from __future__ import annotations

import os
import time

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()

# Arguments that only the submission needs; later slices follow the job by its id.
SUBMIT_ONLY = ("script", "job_name", "chdir", "sbatch_args", "force")


def describe(result):
    """One line for a person: the job, its state, and what goes with that state."""
    state = result.get("state") or "unknown to Slurm"
    line = f"job {result.get('job_id')} ({result.get('name')}): {state}"
    if result.get("reason") and state != "RUNNING":
        line += f" ({result['reason']})"
    if state == "RUNNING" and result.get("nodes"):
        line += f" on {','.join(result['nodes'])}"
    if result.get("restarts"):
        line += f", restart {result['restarts']}"
    if result.get("tasks_total"):
        line += f", {result.get('tasks_done')} of {result['tasks_total']} array tasks final"
    if result.get("final"):
        line += f", exit code {result.get('exit_code')}, {result.get('elapsed_seconds')} s"
    return line


def newly_final_tasks(result, previous):
    """The array tasks that are final in ``result`` and were not in ``previous``, one line each."""
    def final(one):
        return {task["task"]: task for task in (one or {}).get("tasks") or []
                if task.get("final")}
    before = final(previous)
    return [f"  {result['job_id']}_{task_id}: {task['state']}, exit code {task.get('exit_code')}"
            + (f" | {task['log_last_line']}" if task.get("log_last_line") else "")
            for task_id, task in final(result).items() if task_id not in before]


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        super().run(tmp, task_vars)
        args = dict(self._task.args)
        prediction_script = args.pop("prediction_script", None)
        if self._task.check_mode and prediction_script is not None:
            return self.predict(args, prediction_script, task_vars)
        every = int(args.pop("progress_every", 30) or 0)
        live = (every > 0 and args.get("state", "present") == "present" and boolean(args.get("wait", True))
                and not self._task.check_mode)
        if not live:
            return self._execute_module("slurm_job", module_args=args, task_vars=task_vars)

        total = int(args.get("timeout") or 0)
        started = time.monotonic()
        result = self._execute_module("slurm_job", module_args={**args, "return_on_change": True,
                                                               "timeout": min(every, total) if total else every},
                                      task_vars=task_vars)
        first = result
        self.show(result, None)
        while not result.get("failed") and result.get("final") is False:
            left = total - (time.monotonic() - started) if total else None
            if left is not None and left <= 0:
                result["timed_out"] = True
                break
            follow = {key: value for key, value in args.items() if key not in SUBMIT_ONLY}
            follow.update(job_id=result["job_id"], return_on_change=True, progress_from=result["progress"],
                          timeout=max(1, int(min(every, left) if left is not None else every)))
            previous, result = result, self._execute_module("slurm_job", module_args=follow, task_vars=task_vars)
            result["queries"] = result.get("queries", 0) + previous.get("queries", 0)
            result["controller_outage_seconds"] = (result.get("controller_outage_seconds", 0)
                                                   + previous.get("controller_outage_seconds", 0))
            # Only the returned result's warnings are shown: an earlier slice's (a controller
            # outage, say) would otherwise be lost.
            for key in ("warnings", "deprecations"):
                carried = (previous.get(key) or []) + (result.get(key) or [])
                if carried:
                    result[key] = carried
            self.show(result, previous)
        # What the first slice did (submit, or find the same job) is what this task did.
        for key in ("changed", "submitted", "found_existing"):
            result[key] = first.get(key, False)
        return result

    def predict(self, args, content, task_vars):
        """Check mode writes nothing on the NAS, yet Slurm predicts only from a real script: the
        script's content goes to a temporary directory on the host for sbatch --test-only, which
        is removed again."""
        tmp = self._make_tmp_path()
        try:
            script = self._connection._shell.join_path(tmp, os.path.basename(str(args["script"])))
            self._transfer_data(script, content)
            self._fixup_perms2((tmp, script))
            args.pop("progress_every", None)
            return self._execute_module("slurm_job", module_args={**args, "script": script, "chdir": tmp},
                                        task_vars=task_vars)
        finally:
            self._remove_tmp_path(tmp)

    def show(self, result, previous):
        if result.get("job_id") is None:
            return
        key = (result.get("state"), result.get("restarts"), result.get("tasks_done"))
        if previous is None or key != (previous.get("state"), previous.get("restarts"), previous.get("tasks_done")):
            display.display(describe(result))
        for line in newly_final_tasks(result, previous):
            display.display(line)
        label = result["job_id"] if result.get("log_task") is None else f"{result['job_id']}_{result['log_task']}"
        for line in (result.get("progress") or {}).get("log_lines", []):
            display.display(f"  {label} | {line}")
