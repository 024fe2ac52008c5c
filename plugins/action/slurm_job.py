# -*- coding: utf-8 -*-
"""Action plugin for the slurm_job module: follows a job in slices, so that a person sees it move.

A module cannot print while it runs. While a job is followed, this runs the module again and
again, each run ending at the job's next change of state or after ``progress_every`` seconds,
and prints between runs what changed: the state (with Slurm's reason, the nodes, the restart
count) and the newest lines of the job's log. Each slice carries on the poll schedule of the
previous one (``progress_from``), so Slurm is asked no more often than by one long run.

With ``stage`` (the job_dir module's options: the job's directory, code and files), the code is
listed and hashed here, as the job_dir action plugin does it (CodeToStage): small code goes with
the module's first run, which stages and submits; larger code is sent as a file only when that
run finds it missing, and the module runs again with it. ``stage.expect_files_message`` is the
task's message when a file of ``stage.expect_files`` is missing (nothing is staged then).

With ``collect`` (job_outputs.COLLECT_SPEC: the outputs folder, the jobs' root, the sweep's
points), a job that is final when the task ends has its outputs written on the controller here,
from the module's last answer (``collect_files``): job.json, summary.txt, its log and script. The
summary is shown, and a job that did not succeed fails the task, with its log's last lines. Of a
job that is not final yet (wait=false), and in check mode, one line says what was done or predicted.
"""

from __future__ import annotations

import time

from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()

# The code staging of the job_dir action plugin beside this one (its CodeToStage), one rule for both.
from ansible_collections.hpc.slurm_train.plugins.action import job_dir as _job_dir_action  # noqa: E402
# The rule of which Python ansible-core runs modules on (the target_python action).
from ansible_collections.hpc.slurm_train.plugins.action import target_python as _target_python  # noqa: E402
# The outputs of a finished job, written on the controller.
from ansible_collections.hpc.slurm_train.plugins.plugin_utils import job_outputs as _job_outputs  # noqa: E402

# Arguments that only the submission needs; later slices follow the job by its id.
SUBMIT_ONLY = ("script", "job_name", "chdir", "sbatch_args", "force", "stage", "nodes")

# What a failed task's result keeps: the message (and Ansible's own words of a module that did not
# answer), what became of the job, where its outputs went (collected's dest and written, which
# slurm_train's API reads). The callback prints a failed result whole, and the rest is this
# action's protocol with the module (the run's placeholders, the poll state, the staging's
# details): a person would read it in place of the sentence. -v keeps it all, for whoever debugs
# the launch.
FAILURE_KEYS = ("failed", "changed", "msg", "exception", "warnings", "deprecations", "module_stdout", "module_stderr",
                "job_id", "name", "state", "exit_code", "outcome", "final")


def failure_result(result):
    """A failed result cut down to FAILURE_KEYS that have a value (no job: no job_id, state, ...),
    and collected's dest and written."""
    kept = {key: result[key] for key in FAILURE_KEYS if result.get(key) is not None}
    if result.get("collected"):
        kept["collected"] = {key: result["collected"][key] for key in ("dest", "written") if key in result["collected"]}
    return kept


def describe(result):
    """One line for a person: the job, its state, and what goes with that state."""
    state = result.get("state") or "unknown to Slurm"
    visible = _job_outputs._rules.visible  # the name and reason are the job's user's text
    line = f"job {result.get('job_id')} ({visible(result.get('name'))}): {state}"
    if result.get("reason") and state != "RUNNING":
        line += f" ({visible(result['reason'])})"
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
        result = self.outcome(tmp, task_vars)
        return failure_result(result) if result.get("failed") and display.verbosity < 1 else result

    def outcome(self, tmp, task_vars):
        super().run(tmp, task_vars)
        args = dict(self._task.args)
        collect = args.pop("collect", None)
        if collect is not None:
            collect = self.collect_options(collect)
            args["collect_files"] = True
        result = self.follow(args, task_vars)
        files = result.pop("collected_files", None) or {}
        staged = result.get("staged") or {}
        if staged.get("missing_files") and (self._task.args.get("stage") or {}).get("expect_files_message"):
            result.update(failed=True, msg=self._task.args["stage"]["expect_files_message"])
            # Ansible's error line says the task's message, not the module's it replaced.
            result.pop("exception", None)
            return result
        if collect is None:
            return result
        check_mode, following = bool(self._task.check_mode), self._task.args.get("job_id") is not None
        if check_mode or not result.get("final"):
            if not result.get("failed") and (not check_mode or not following):
                display.display(_job_outputs.report_line(result, staged, check_mode))
            return result
        job = {**result, "collected_files": files}
        collected, failure = _job_outputs.collect(self, job, collect, staged, task_vars, display)
        result["collected"] = collected
        result["changed"] = bool(result.get("changed")) or collected["changed"]
        if failure is not None:
            # The job's own failure, now with its outputs and log tail; the module's message said less.
            result.update(failed=True, msg=failure)
            result.pop("exception", None)
        elif not (result.get("failed") and result.get("outcome") == "succeeded"):
            # A job cancelled as asked; a succeeded job fails the task only for the module's own reasons
            # (its run record could not be written).
            result["failed"] = False
            result.pop("msg", None)
        return result

    @staticmethod
    def collect_options(given):
        if not isinstance(given, dict):
            raise AnsibleActionFail(f"slurm_job: collect must be a dict of {', '.join(_job_outputs.COLLECT_SPEC)}")
        unknown = sorted(set(given) - set(_job_outputs.COLLECT_SPEC))
        missing = [key for key, spec in _job_outputs.COLLECT_SPEC.items() if spec.get("required") and not given.get(key)]
        if unknown or missing:
            raise AnsibleActionFail(f"slurm_job: collect has unknown keys {unknown} or lacks {missing} "
                                    f"(keys: {', '.join(_job_outputs.COLLECT_SPEC)})")
        options = {key: given.get(key, spec.get("default")) for key, spec in _job_outputs.COLLECT_SPEC.items()}
        for key, spec in _job_outputs.COLLECT_SPEC.items():
            if spec["type"] == "bool":
                options[key] = boolean(options[key], strict=False)
        return options

    def follow(self, args, task_vars):
        """Stage and submit (or find the job given), then follow it in slices until it is final."""
        code = None
        if args.get("stage"):
            code = _job_dir_action.CodeToStage(args["stage"])
            args["stage"] = {key: value for key, value in args["stage"].items() if key in _job_dir_action.MODULE_ARGS}
            args["stage"]["code_hash"] = code.digest
        every = int(args.pop("progress_every", 30) or 0)
        live = (every > 0 and args.get("state", "present") == "present" and boolean(args.get("wait", True))
                and not self._task.check_mode)
        if not live:
            return self.submit(code, args, task_vars)

        total = int(args.get("timeout") or 0)
        started = time.monotonic()
        result = self.submit(code, {**args, "return_on_change": True,
                                    "timeout": min(every, total) if total else every}, task_vars)
        first = result
        self.show(result, None)
        while not result.get("failed") and result.get("final") is False:
            left = total - (time.monotonic() - started) if total else None
            if left is not None and left <= 0:
                result["timed_out"] = True
                break
            follow = {key: value for key, value in args.items() if key not in SUBMIT_ONLY}
            # The marker's path as the first slice filled it in (stage's placeholders).
            follow.update(job_id=result["job_id"], return_on_change=True, progress_from=result["progress"],
                          end_marker=first.get("end_marker", args.get("end_marker")),
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
        # What the first slice did (stage, submit, or find the same job) is what this task did.
        for key in ("changed", "submitted", "found_existing", "staged"):
            result[key] = first.get(key, False)
        return result

    def submit(self, code, args, task_vars):
        """The module's first run; with ``code`` (a CodeToStage), the code goes with it, or is sent
        when that run finds it missing and the module runs again with it, which then submits. What
        the nodes' check noted of usable nodes that may delay the job is shown."""
        if code is None:
            result = self._execute_module("slurm_job", module_args=args, task_vars=task_vars)
        else:
            result = code.stage(self, lambda extra: self._execute_module(
                "slurm_job", module_args={**args, "stage": {**args["stage"], **extra}}, task_vars=task_vars),
                self._task.check_mode, lambda answer: answer.get("staged"))
        result = _target_python.explain_module_failure(self, result, task_vars)
        for note in (result.get("nodes_checked") or {}).get("notes") or []:
            display.display(note)
        return result

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
