"""Every follow of a user's launch records the nodes of a node failure Slurm did not requeue: the
job script, killed with its node, cannot. The launch's follow, -e job_id's and jobs.yml -e logs=N's
each pass the role's bad_node_hours to slurm_job; one that did not would leave a failed node in the
user's next jobs whenever that follow was the one to see the end."""

import yaml

from conftest import PROJECT_ROOT

TASKS = PROJECT_ROOT / "roles" / "slurm_launch" / "tasks"


def slurm_job_tasks(tasks):
    """Every hpc.slurm_train.slurm_job task of a task list, blocks opened."""
    for task in tasks or []:
        for key in ("block", "rescue", "always"):
            yield from slurm_job_tasks(task.get(key))
        if "hpc.slurm_train.slurm_job" in task:
            yield task


def launch_follows():
    """(file, task name, its arguments) of each slurm_job task that follows a job of a launch: it
    waits, keeps the job's records (run_records) and is not a cancel."""
    for path in sorted(TASKS.glob("*.yml")):
        for task in slurm_job_tasks(yaml.safe_load(path.read_text())):
            args = task["hpc.slurm_train.slurm_job"]
            if "run_records" in args and "wait" in args and args.get("state", "present") == "present":
                yield path.name, task["name"], args


def test_the_role_has_the_three_follows_of_a_launch():
    found = {(name, task) for name, task, _ in launch_follows()}
    assert found == {
        ("jobs.yml", "Follow the job's log until it ends (Ctrl-C stops following; the job runs on)."),
        ("submit.yml", "Follow the job given."),
        ("submit.yml", "Stage the job on the NAS and submit it, or find the same job already pending or running."),
    }


def test_each_follow_of_a_launch_records_a_node_failure_for_the_roles_hours():
    missing = [(name, task) for name, task, args in launch_follows()
               if args.get("bad_node_hours") != "{{ slurm_launch_bad_node_hours }}"]
    assert missing == []
