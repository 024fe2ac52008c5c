"""A test's stand-in for another launch of the same job name at the same moment.

As the launch's task that stages and submits the job starts (its job script already rendered on
the controller, before any run was picked), it makes run 1 on the NAS as the other launch would
have, finished (run.json COMPLETED), so the launch gets the next run, whose paths its script must
name. PLANT_RUN_DIR names the
run's directory (the NAS's host path), PLANT_RUN_UID its owner.
"""

import json
import os

from ansible.plugins.callback import CallbackBase

TASK = "Stage the job on the NAS and submit it, or find the same job already pending or running."


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "plant_finished_run"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_task_start(self, task, is_conditional):
        run_dir = os.environ.get("PLANT_RUN_DIR")
        if not run_dir or task.get_name().split(" : ")[-1] != TASK or os.path.exists(run_dir):
            return
        uid = int(os.environ["PLANT_RUN_UID"])
        made = []
        path = run_dir
        while not os.path.exists(path):
            made.append(path)
            path = os.path.dirname(path)
        for directory in reversed(made):
            os.mkdir(directory, 0o700)
            os.chown(directory, uid, uid)
        record = os.path.join(run_dir, "run.json")
        with open(record, "w", encoding="utf-8") as handle:
            json.dump({"job_id": 1, "state": "COMPLETED", "exit_code": 0}, handle)
        os.chown(record, uid, uid)
