"""Hostile and broken -e input to launch.yml (docs/hostile-input.md has the table).

Each bad value is refused with an error that names it, before anything is written or
submitted; what may hold anything (script arguments, env values, the script's path) reaches
the training exactly as written. Refusals fail before any job exists, so they run side by
side (two at a time) to keep the file short; the carried-exactly row submits one real job.
"""

import json
import os
import pwd
import re
import shutil
import stat
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from cluster import REPO
from launch import TRAINER, outputs_of, unique_job_name


def node_list(nodes):
    """A row that names its nodes instead of the good request's node group."""
    return {"nodes": nodes, "group": None, "num_nodes": None}


# Every row: the -e (as JSON, applied over a good request; None removes a key of it) and the
# words its error must hold. "{tmp}" stands for the row's own directory.
REFUSED = {
    # Keys nothing reads.
    "misspelt key": ({"wiat": False}, ["Unknown -e key", "-e wiat (did you mean 'wait'?)", "nodes, group"]),
    "misspelt alias": ({"nods": "node110"}, ["-e nods (did you mean 'nodes'?)"]),
    "misspelt option": ({"slurm_launch_jobs_dri": "/tmp/x"}, ["did you mean 'slurm_launch_jobs_dir'?"]),
    "misspelt cluster variable": ({"clustr_nas_root": "/tmp/x"}, ["did you mean 'cluster_nas_root'?"]),
    # Booleans: Ansible's `| bool` would turn these into false, with a warning only.
    "wait=maybe": ({"wait": "maybe"}, ["'slurm_launch_wait'", "The value 'maybe' is not a valid boolean",
                                       "Valid booleans include"]),
    "force=perhaps": ({"force": "perhaps"}, ["'slurm_launch_force'", "The value 'perhaps' is not a valid boolean"]),
    # Node lists.
    "node with ;": (node_list("node110;reboot"), ["invalid node list 'node110;reboot'", "node[110-111]"]),
    "node with $()": (node_list("node$(id)"), ["invalid node list 'node$(id)'"]),
    "node with ../": (node_list("../x"), ["invalid node list '../x'"]),
    "node with a space": (node_list("node 110"), ["invalid node list 'node 110'"]),
    "node with ..": (node_list("node..1"), ["invalid node name 'node..1'", "without '..'"]),
    "unknown node": (node_list("node110,node999"), ["Not compute nodes of the inventory: node999",
                                                    "known: node110, node111"]),
    "nodes as a number": (node_list(110), ["nodes=110 is not allowed: give it as text", "a list of node names"]),
    "node list item not a name": (node_list(["node110", 3]), ["invalid node list item 3"]),
    "nodes and group": ({"nodes": "node110"}, ["not both"]),
    # Node groups.
    "unknown group": ({"group": "gpu_H100"},
                      ["group=gpu_H100 must be a group of compute nodes", "gpu_A6000"]),
    "group not of compute nodes": ({"group": "submit"},
                                   ["group=submit must be a group of compute nodes"]),
    # Job names: also a directory and a file name.
    "job name with a space": ({"job_name": "a b"}, ["job_name='a b' is not allowed", "1 to 128 letters"]),
    "job name with /": ({"job_name": "a/b"}, ["job_name='a/b' is not allowed"]),
    "job name ..": ({"job_name": ".."}, ["job_name='..' is not allowed", "other than '.' and '..'"]),
    "job name with quotes": ({"job_name": "it's \"x\""}, ["job_name='it\\'s \"x\"' is not allowed"]),
    "job name of 129 characters": ({"job_name": "x" * 129}, [f"job_name='{'x' * 129}' is not allowed"]),
    "job name from a script name with a space": ({"job_name": None, "script": "{tmp}/a b.py"},
                                                  ["job_name='a b' is not allowed", "by default the script's file name"]),
    # The training script.
    "missing script": ({"script": "examples/no_such_trainer.py"},
                       [f"{REPO}/examples/no_such_trainer.py does not exist (or is not a file)"]),
    "script is a directory": ({"script": "examples"}, [f"The training script {REPO}/examples is a directory"]),
    "script path with ..": ({"script": "tests/../examples/no_such_trainer.py"},
                            [f"{REPO}/examples/no_such_trainer.py does not exist"]),
    "script path with a newline": ({"script": "examples/train\n.py"}, ["script='examples/train\\n.py' is not allowed"]),
    "script as a number": ({"script": 7}, ["script=7 is not allowed: give it as text"]),
    # Script arguments.
    "unclosed quote in script_args": ({"script_args": "--name 'a b"},
                                      ["script_args \"--name 'a b\" cannot be split", "close every quote"]),
    "script_args as a mapping": ({"script_args": {"lr": 1}}, ["script_args must be a list or a string, got a mapping"]),
    "script_args item a list": ({"script_args": [["--lr"]]}, ["script_args item ['--lr'] is not allowed"]),
    "script_args with NUL": ({"script_args": ["a\u0000b"]}, ["script_args='a\\x00b' is not allowed"]),
    # Counts.
    "negative num_nodes": ({"num_nodes": -2}, ["num_nodes=-2 is not allowed"]),
    "num_nodes not a number": ({"num_nodes": "two"},
                               ["'slurm_launch_num_nodes'", "'two'", "cannot be converted to an int"]),
    "more nodes than the group": ({"num_nodes": 3}, ["num_nodes=3 of 2 nodes"]),
    "more GPUs than a node": ({"gpus_per_node": 9}, ["gpus_per_node=9 of 8 GPUs"]),
    "negative gpus_per_node": ({"gpus_per_node": -1}, ["gpus_per_node=-1 is not allowed"]),
    "more CPUs than a node": ({"cpus_per_task": 17}, ["cpus_per_task=17 of 16 CPUs"]),
    "more processes than CPUs": ({"nproc_per_node": 17}, ["nproc_per_node=17 processes on 16 CPUs"]),
    "master_port over 65535": ({"master_port": 70000}, ["master_port=70000 is not allowed", "at most 65535"]),
    "negative master_port": ({"master_port": -1}, ["master_port=-1 is not allowed"]),
    "master_port not a number": ({"master_port": "http"}, ["'slurm_launch_master_port'", "'http'"]),
    "negative follow timeout": ({"slurm_launch_follow_timeout": -1}, ["slurm_launch_follow_timeout=-1 is not allowed"]),
    "negative log tail": ({"slurm_launch_log_tail_lines": -3}, ["slurm_launch_log_tail_lines=-3 is not allowed"]),
    # Time limits.
    "time limit in words": ({"time_limit": "1 day"}, ["time_limit='1 day' is not allowed", "D-HH:MM:SS"]),
    "negative time limit": ({"time_limit": "-5"}, ["time_limit='-5' is not allowed"]),
    "time limit with a newline": ({"time_limit": "60\n#SBATCH --x"}, ["time_limit='60\\n#SBATCH --x' is not allowed"]),
    # Rendezvous, partition, account.
    "unknown rendezvous": ({"rendezvous": "etcd"}, ["slurm_launch_rendezvous must be one of: static, c10d, got: etcd"]),
    "partition with ;": ({"partition": "a;b"}, ["partition='a;b' is not allowed", "a Slurm partition name"]),
    "account with ;": ({"account": "a;b"}, ["account='a;b' is not allowed", "a Slurm account name"]),
    "account with a newline": ({"account": "x\nrm -rf ~"}, ["account='x\\nrm -rf ~' is not allowed"]),
    # Where the launch writes.
    "relative jobs_dir": ({"slurm_launch_jobs_dir": "jobs"}, ["slurm_launch_jobs_dir='jobs' is not allowed",
                                                              "an absolute path"]),
    "jobs_dir with ..": ({"slurm_launch_jobs_dir": "/tmp/../etc"}, ["slurm_launch_jobs_dir='/tmp/../etc' is not allowed",
                                                                    "without '..'"]),
    "jobs_dir with a space": ({"slurm_launch_jobs_dir": "/tmp/a b"}, ["slurm_launch_jobs_dir='/tmp/a b' is not allowed"]),
    # The training's environment.
    "env name with a space": ({"slurm_launch_env": {"A B": "1"}}, ["env name='A B' is not allowed",
                                                                   "a shell variable name"]),
    "env name with a digit first": ({"slurm_launch_env": {"1X": "1"}}, ["env name='1X' is not allowed"]),
    "env value null": ({"slurm_launch_env": {"X": None}}, ["env X=None is not allowed"]),
    "env as text": ({"slurm_launch_env": "A=1"}, ["env='A=1' is not allowed: give a mapping"]),
    # sbatch refused it only after the job's directory and files were written.
    "env value with a CRLF": ({"slurm_launch_env": {"X": "a\r\nb"}},
                              ["env X: its value holds a carriage return (\\r), which sbatch refuses"]),
    # Names that steer the job's shell, Slurm or the loader.
    "env name BASH_ENV": ({"slurm_launch_env": {"BASH_ENV": "{tmp}/a b.py"}},
                          ["env name='BASH_ENV' is not allowed: it steers the job's shell, Slurm"]),
    "env name SLURM_RESTART_COUNT": ({"slurm_launch_env": {"SLURM_RESTART_COUNT": "0"}},
                                     ["env name='SLURM_RESTART_COUNT' is not allowed"]),
    "env name LD_PRELOAD": ({"slurm_launch_env": {"LD_PRELOAD": "/tmp/x.so"}}, ["env name='LD_PRELOAD' is not allowed"]),
    # A secret on the command line is in every user's process list while the launch runs.
    "token on the command line": ({"slurm_launch_env": {"HF_TOKEN": "hf_row"}},
                                  ["slurm_launch_env HF_TOKEN given on the command line",
                                   "-e @secrets.yml", "-e env_from=NAME"]),
    "env_from not set": ({"env_from": "NO_SUCH_VARIABLE_SET"},
                         ["env_from=NO_SUCH_VARIABLE_SET: the controller's environment has no NO_SUCH_VARIABLE_SET"]),
    # More #SBATCH lines and other values that reach the job script.
    "directive with a newline": ({"slurm_launch_extra_directives": ["--exclusive\necho pwned"]},
                                 ["extra_directives='--exclusive\\necho pwned' is not allowed", "one line"]),
    "directive not an option": ({"slurm_launch_extra_directives": ["exclusive"]},
                                ["extra_directives='exclusive' is not allowed", "starting with '-'"]),
    "directives as text": ({"slurm_launch_extra_directives": "--exclusive"},
                           ["extra_directives='--exclusive' is not allowed: give a list"]),
    "warning signal with a command": ({"slurm_launch_warning_signal": "USR1; id"}, ["warning_signal='USR1; id'"]),
    "venv with quotes": ({"slurm_launch_venv": "/opt/v\"; id; \""}, ["venv='/opt/v\"; id; \"' is not allowed"]),
    "conda env with $()": ({"slurm_launch_conda_env": "$(id)"}, ["conda_env='$(id)' is not allowed"]),
}


def squeue_jobs(cluster):
    """Every job slurmctld knows, whatever its state: id, name, work dir, command."""
    out = cluster.slurm("squeue", "-h", "-t", "all", "-o", "%i|%j|%Z|%o").stdout
    return {tuple(line.split("|", 3)) for line in out.splitlines() if line}


def row_request(case, base_dir, jobs_dir):
    """The row's -e over a good request, its job name, and the launch's argv."""
    extra, _ = REFUSED[case]
    name = unique_job_name("hostile")
    # A node group and a count: Slurm picks the node, so a row does not hang on one node's state.
    request = {"group": "gpu_A6000", "num_nodes": 1, "script": TRAINER, "job_name": name, "wait": False,
               "script_args": "--steps 1",
               "slurm_launch_jobs_dir": str(jobs_dir), "slurm_launch_outputs_dir": str(base_dir / "outputs")}
    for key, value in extra.items():
        if value is None:
            request.pop(key, None)
        else:
            request[key] = value.replace("{tmp}", str(base_dir)) if isinstance(value, str) else value
    return name, request, ["ansible-playbook", "launch.yml", "-e", json.dumps(request)]


@pytest.fixture(scope="module")
def refusals(cluster, tmp_path_factory):
    """Every REFUSED row run once, two at a time; each test below reads its own row."""
    rows = {}
    # Each row's own jobs directory on the NAS, shared as provision.yml makes <nas>/jobs (1777).
    nas_rows = cluster.nas / "hostile-rows"
    shutil.rmtree(nas_rows, ignore_errors=True)
    nas_rows.mkdir(mode=0o1777)
    nas_rows.chmod(0o1777)
    for index, case in enumerate(REFUSED):
        base_dir = tmp_path_factory.mktemp("hostile")
        (base_dir / "a b.py").write_text("print('never runs')\n")
        jobs_dir = nas_rows / str(index)
        jobs_dir.mkdir(mode=0o1777)
        jobs_dir.chmod(0o1777)
        rows[case] = (base_dir, jobs_dir, *row_request(case, base_dir, jobs_dir))
    before = squeue_jobs(cluster)

    def run(case):
        argv = rows[case][4]
        return case, subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300)

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(pool.map(run, rows))
    new_jobs = squeue_jobs(cluster) - before
    return rows, results, new_jobs


@pytest.mark.parametrize("case", list(REFUSED))
def test_bad_input_is_refused_before_anything_is_written_or_submitted(refusals, case):
    rows, results, new_jobs = refusals
    base_dir, jobs_dir, name, request, _ = rows[case]
    proc = results[case]
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    for words in REFUSED[case][1]:
        assert words in output, output[-3000:]
    ours = [job for job in new_jobs
            if job[1] in (name, request.get("job_name")) or any(str(base_dir) in field for field in job[2:])]
    assert ours == [], "nothing is submitted"
    assert list(jobs_dir.iterdir()) == [] and not (base_dir / "outputs").exists(), "nothing is written"


# What may hold anything reaches the training exactly: arguments with spaces, both quotes,
# $(...), backticks and ';' (written as a shell would quote them), a script path with a
# space and quotes, an env value with quotes and $(...). None of it is run by a shell.
SCRIPT_ARGS = """--name 'a b' --quote "it's" --say 'he said "hi"' '$(id)' '`id`' 'a;b' 'x && y' back\\\\slash '*' '~' ''"""
EXPECTED_ARGS = ["--name", "a b", "--quote", "it's", "--say", 'he said "hi"', "$(id)", "`id`", "a;b", "x && y",
                 "back\\slash", "*", "~", ""]
ENV_VALUE = """it's "quoted" $(id) `id`; a b"""
ARGV_PRINTER = """\
import json, os, sys
# torchrun starts one process per rank; one line is enough.
if os.environ.get("RANK") == "0":
    print("ARGV_JSON " + json.dumps({"script": sys.argv[0], "args": sys.argv[1:],
                                     "env": os.environ.get("HOSTILE_VALUE")}), flush=True)
"""


def test_arguments_path_and_env_reach_the_training_exactly(cluster, tmp_path):
    name = unique_job_name("hostile-carried")
    # On the controller: the launch stages its directory onto the NAS.
    script_dir = tmp_path / "hostile-input" / "a dir"
    script_dir.mkdir(parents=True)
    script = script_dir / "it's \"argv\".py"
    script.write_text(ARGV_PRINTER)
    job_dir = cluster.nas / "jobs" / "alice" / name
    try:
        request = {"group": "gpu_A6000", "num_nodes": 1, "nproc_per_node": 1, "script": str(script),
                   "job_name": name, "script_args": SCRIPT_ARGS, "time_limit": "5",
                   "slurm_launch_env": {"HOSTILE_VALUE": ENV_VALUE},
                   "slurm_launch_outputs_dir": str(tmp_path / "outputs")}
        proc = subprocess.run(["ansible-playbook", "launch.yml", "-e", json.dumps(request)], cwd=REPO,
                              capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
        folder, job = outputs_of(tmp_path / "outputs", name)
        assert (job["state"], job["exit_code"]) == ("COMPLETED", 0)
        log = (folder / f"{name}-{job['job_id']}.out").read_text()
        # The job script puts the rank and node before each line of the training.
        lines = re.findall(r"^\[rank0@node11[01]\] ARGV_JSON (.*)$", log, re.M)
        assert len(lines) == 1, log
        seen = json.loads(lines[0])
        staged = f"{job_dir}/code/{job['code']['hash']}/{script.name}"
        # The training is given its staged file by the site's absolute name (from the run's directory).
        assert {**seen, "script": os.path.normpath(seen["script"])} == {"script": staged, "args": EXPECTED_ARGS,
                                                                        "env": ENV_VALUE}
        assert seen["script"].startswith("/"), seen
        # What the launch and the job wrote is the user's (alice's on the NAS, the controller's
        # user's in the outputs) and not writable by others.
        for top, owner in ((job_dir, pwd.getpwnam("alice").pw_uid), (tmp_path / "outputs", os.getuid())):
            for path in [top, *top.rglob("*")]:
                info = path.lstat()
                assert info.st_uid == owner, f"{path} belongs to uid {info.st_uid}"
                assert not info.st_mode & stat.S_IWOTH, f"{path} is world-writable ({oct(info.st_mode)})"
    finally:
        shutil.rmtree(job_dir, ignore_errors=True)
