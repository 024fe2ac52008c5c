"""A peer of launch.yml for bench/run.py: NeMo-Run (SlurmExecutor with its torchrun launcher)
submits the benchmark's 4-rank training (one torchrun on each of 2 nodes, 2 processes each) and
waits for it, as a user does from a workstation: NeMo-Run runs here and reaches the login host
through its own SSHTunnel, as the user. Run with the peers' venv's Python; NeMo-Run prints its
experiment summary ("- Job id: N"), then this prints one JSON line.

Host keys: NeMo-Run's tunnel (fabric, paramiko) would accept any, so this script has it accept
only the one in the cluster's known_hosts; NeMo-Run copies the experiment to the login host with
`rsync --rsh=ssh`, which reads the default known_hosts (none here for the bench clusters), so
bench/run.py puts bench/peers/nemo_run_ssh/ssh first on PATH, pointed at the same file.
"""

import argparse
import json
import os
import sys
import time

import fabric.connection
import nemo_run as run
import paramiko


class KnownHostsOnly(paramiko.MissingHostKeyPolicy):
    """Accepts a host only with the key that the known_hosts file has for it."""

    def __init__(self, path):
        self.keys = paramiko.HostKeys(path)

    def missing_host_key(self, client, hostname, key):
        if (self.keys.lookup(hostname) or {}).get(key.get_name()) != key:
            raise paramiko.SSHException(f"{hostname}: its {key.get_name()} host key is not the one known")


def no_password(*_):
    raise paramiko.AuthenticationException("the bench authenticates with the user's key only")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--job-dir", required=True, help="the user's folder on the login host")
    parser.add_argument("--job-name", required=True)
    parser.add_argument("--host", required=True)
    parser.add_argument("--user", required=True)
    parser.add_argument("--identity", required=True)
    parser.add_argument("--known-hosts", required=True)
    parser.add_argument("--partition", required=True)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--nproc-per-node", type=int, default=2)
    parser.add_argument("--cpus-per-task", type=int, default=4)
    parser.add_argument("--setup", action="append", default=[], help="a shell line of the job before srun")
    parser.add_argument("--script", required=True)
    parser.add_argument("script_args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    started = time.time()
    # Every connection NeMo-Run's tunnel opens (fabric makes each client with AutoAddPolicy).
    fabric.connection.AutoAddPolicy = lambda: KnownHostsOnly(args.known_hosts)
    tunnel = run.SSHTunnel(host=args.host, user=args.user, identity=args.identity, job_dir=args.job_dir)
    # The key or nothing: where the key fails, NeMo-Run asks for a password on the terminal,
    # and nobody is there to answer (it then exits 1).
    tunnel.auth_handler = tunnel.fallback_auth_handler = no_password
    executor = run.SlurmExecutor(
        # account=None leaves --account out (bench2 enforces no associations); a prefix of our own,
        # as NeMo-Run would otherwise make the job name's prefix from the account.
        account=None, job_name_prefix=f"{args.job_name}-", partition=args.partition, nodes=args.nodes,
        # NeMo-Run's torchrun launcher runs one task per node: torchrun starts the node's ranks.
        ntasks_per_node=1, torchrun_nproc_per_node=args.nproc_per_node, cpus_per_task=args.cpus_per_task,
        time="00:10:00", tunnel=tunnel, launcher="torchrun", setup_lines="\n".join(args.setup),
        # The trainer is already where the nodes read it: nothing to archive (the default
        # GitArchivePackager would pack the git checkout of the working directory).
        packager=run.Packager())
    script_args = args.script_args[1:] if args.script_args[:1] == ["--"] else args.script_args
    # A python script: NeMo-Run's torchrun launcher runs it with the torchrun on the job's PATH.
    task = run.Script(path=args.script, args=script_args, entrypoint="python")
    with run.Experiment(args.job_name) as exp:
        exp.add(task, executor=executor, name="ddp")
        exp.run(detach=False)  # submits, then waits for the job's end
    answered = time.time()
    # The state its wait saw (exp.status() would ask Slurm again, RPCs that NeMo-Run's own
    # answer did not need).
    job = exp.jobs[0]
    state = getattr(job.state, "name", str(job.state))
    print(json.dumps({"job_id": job.handle.partition("://")[2].split("/")[1] if job.handle else None,
                      "state": state, "started": started, "answered": answered, "pid": os.getpid()}), flush=True)
    return 0 if state == "SUCCEEDED" else 1


if __name__ == "__main__":
    sys.exit(main())
