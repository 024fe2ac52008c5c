"""Records when each task of a playbook run started and ended, for the benchmarks' profiles."""

import json
import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: bench_timeline
type: aggregate
short_description: write each task's start and end (wall clock) to $BENCH_TIMELINE as JSON
description:
  - Used by bench/run.py to say which tasks dominate a launch's time; writes nothing when
    BENCH_TIMELINE is unset.
requirements:
  - enable in configuration
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "bench_timeline"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self.path = os.environ.get("BENCH_TIMELINE")
        self.started = None
        self.tasks = []

    def v2_playbook_on_start(self, playbook):
        self.started = time.time()

    def v2_playbook_on_task_start(self, task, is_conditional):
        self.tasks.append({"name": task.get_name(), "action": task.action, "start": time.time(),
                           "end": None, "status": {}})

    v2_playbook_on_handler_task_start = v2_playbook_on_task_start

    def _result(self, result, status):
        if self.tasks:
            task = self.tasks[-1]
            task["end"] = time.time()
            task["status"][status] = task["status"].get(status, 0) + 1

    def v2_runner_on_ok(self, result):
        self._result(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._result(result, "failed")

    def v2_runner_on_skipped(self, result):
        self._result(result, "skipped")

    def v2_runner_on_unreachable(self, result):
        self._result(result, "unreachable")

    def v2_playbook_on_stats(self, stats):
        if not self.path:
            return
        with open(self.path, "w", encoding="utf-8") as handle:
            json.dump({"playbook_start": self.started, "stats_time": time.time(), "tasks": self.tasks}, handle)
