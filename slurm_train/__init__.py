"""slurm_train: the project's playbooks as Python functions, for notebooks and pipelines.

    import slurm_train
    result = slurm_train.launch(script="examples/train_ddp.py", nodes="node110,node111",
                                nproc_per_node=2, script_args="--steps 5", on_progress=print)
    print(result.summary)

Each function runs the collection's playbook through ansible-runner (launch.yml, jobs.yml,
preflight.yml) as ``ansible-playbook`` would run it (from a checkout: from its root), with the
same ``-e`` names, and nothing goes through a shell. The ``slurm-train`` command (cli.py) is the
same functions from a shell. A wrong argument raises ValueError before anything runs, with the playbook's own
message (its own rules, imported from the role's plugins); a playbook that fails raises
LaunchError with the failed task's message; a job that ran and failed raises JobFailed, which
carries its JobResult (launch only: jobs.yml does not fail for a job that failed).
"""

from .api import JobFailed, JobResult, LaunchError, bad_nodes, cancel, forget_node, jobs, launch, logs, preflight

__all__ = ["JobFailed", "JobResult", "LaunchError", "bad_nodes", "cancel", "forget_node", "jobs", "launch", "logs",
           "preflight"]
