"""A peer of launch.yml for bench/run.py: submitit (SlurmExecutor) submits the benchmark's 4-rank
training (torchrun on each of 2 nodes, 2 processes each) and waits for its result, as a user does
on the login host. Run with the peers' venv's Python; prints one JSON line at the end.

The job runs this venv's Python on each node (submitit's own runner, `python -m
submitit.core._submit`), so the venv lives where the nodes see it; `setup` activates the same
conda env the launch's job script activates, whose torchrun trains.
"""

import argparse
import json
import os
import subprocess
import sys
import time

import submitit


def train(script, script_args, nproc_per_node):
    # One task per node: this node's torchrun, its rank and the master from submitit's view of the job.
    env = submitit.JobEnvironment()
    job = int(str(env.job_id).split("_")[0])
    argv = ["torchrun", f"--nnodes={env.num_nodes}", f"--nproc-per-node={nproc_per_node}",
            f"--node-rank={env.node}", f"--master-addr={env.hostnames[0]}", f"--master-port={20000 + job % 20000}",
            script, *script_args]
    return subprocess.run(argv, check=True).returncode


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--folder", required=True)
    parser.add_argument("--job-name", required=True)
    parser.add_argument("--partition", required=True)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--nproc-per-node", type=int, default=2)
    parser.add_argument("--cpus-per-task", type=int, default=4)
    parser.add_argument("--setup", action="append", default=[], help="a shell line of the job before srun")
    parser.add_argument("--script", required=True)
    parser.add_argument("script_args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    started = time.time()
    executor = submitit.SlurmExecutor(folder=args.folder, python=sys.executable)
    executor.update_parameters(job_name=args.job_name, partition=args.partition, nodes=args.nodes,
                               ntasks_per_node=1, cpus_per_task=args.cpus_per_task, time=10,
                               stderr_to_stdout=True, setup=args.setup)
    script_args = args.script_args[1:] if args.script_args[:1] == ["--"] else args.script_args
    job = executor.submit(train, args.script, script_args, args.nproc_per_node)
    submitted = time.time()
    error = None
    try:
        job.results()
    except Exception as exc:  # noqa: BLE001 - reported to the harness, which prints it
        error = f"{type(exc).__name__}: {str(exc)[-2000:]}"
    print(json.dumps({"job_id": job.job_id, "state": job.state, "error": error, "started": started,
                      "submitted": submitted, "answered": time.time(), "pid": os.getpid()}), flush=True)
    return 0 if error is None else 1


if __name__ == "__main__":
    sys.exit(main())
