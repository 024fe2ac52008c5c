"""Installs that running jobs survive, on the default local cluster (inventory/local), as users
meet them: `module load cuda/11.8` in a login shell on a node right after provisioning (under
Lmod, the nodes' module system), and a
conda env switched by provision.yml while a job that imports from it runs (the job finishes
COMPLETED on the env it started with; the next job gets the new one). The CUDA toolkit and
Miniforge are the project's stand-ins (tests/standins/), as everywhere on the local cluster."""

import json
import os
import re
import subprocess
import uuid
from pathlib import Path

from cluster import REPO, eventually, play_recap

INVENTORY = REPO / "inventory" / "local"
EXAMPLE_ENV = REPO / "examples" / "environment-local-cluster.yml"


def as_alice(cluster, command, check=True):
    """As a user types it: alice on the login host."""
    return cluster.ssh("login01", command, check=check, user="alice")


def provision_nas(*extra_vars):
    """provision.yml for the NAS host only (the installs), as an admin reruns it."""
    argv = ["ansible-playbook", "-i", str(INVENTORY), "provision.yml", "--limit", "nas01"]
    for variables in extra_vars:
        argv += ["-e", json.dumps(variables)]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=900)


def job_state(cluster, job_id):
    line = cluster.slurm("scontrol", "show", "job", "-o", job_id, check=False).stdout
    found = re.search(r"\bJobState=(\S+)", line)
    if found:
        return found.group(1)
    sacct = cluster.slurm("sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State", check=False).stdout.split()
    return sacct[0] if sacct else None


def finished(cluster, job_id):
    return eventually(lambda: (s := job_state(cluster, job_id)) not in (None, "PENDING", "RUNNING", "CONFIGURING",
                                                                          "COMPLETING") and s, timeout=180)


def env_activation(cluster):
    """The lines of the job scripts provision.yml put on the NAS that activate the conda env: the
    test's job activates it exactly as a real job script does."""
    for path in sorted((cluster.nas / "job-templates").rglob("*")):
        if path.is_file() and "profile.d/conda.sh" in (text := path.read_text()):
            lines = text.splitlines()
            start = next(i for i, line in enumerate(lines) if line.startswith("source ") and "conda.sh" in line)
            end = next(i for i in range(start, len(lines)) if lines[i].lstrip().startswith("||"))
            return "\n".join(lines[start:end + 1])
    raise AssertionError(f"no job script under {cluster.nas / 'job-templates'} activates the conda env")


def test_module_load_cuda_works_in_a_login_shell_on_a_node_right_after_provisioning(cluster):
    # Nothing but provision.yml (the session fixture) ran: no `module use` by hand.
    proc = as_alice(cluster, "srun -p gpu_A6000 -N1 -w node110 bash -lc "
                             "'module --version 2>&1 | grep -o \"Modules based on Lua\" && module -t avail 2>&1 && "
                             "module load cuda/11.8 && which nvcc && nvcc --version'")
    lines = proc.stdout.splitlines()
    assert lines[0] == "Modules based on Lua", proc.stdout + proc.stderr
    # Lmod's terse listing (the nodes' module system, Debian's lmod: scripts/install-deps): the
    # NAS directory first, then its modules, read from the Tcl module file roles/cuda_toolkit wrote.
    assert lines[1:4] == ["/starmap/nas/modulefiles:", "cuda/", "cuda/11.8"], proc.stdout + proc.stderr
    assert "/starmap/nas/cuda/cuda-11.8/bin/nvcc" in lines, proc.stdout + proc.stderr
    assert "Cuda compilation tools, release 11.8, V11.8.89" in lines
    # The same for a user's plain `module load cuda` (the cluster's default version).
    default = as_alice(cluster, "srun -p gpu_A6000 -N1 -w node111 bash -lc 'module load cuda && echo $CUDA_HOME'")
    assert default.stdout.strip() == "/starmap/nas/cuda/cuda-11.8", default.stdout + default.stderr


def test_a_running_job_keeps_its_env_when_provision_switches_it_and_the_next_job_gets_the_new_one(cluster, tmp_path):
    envs = cluster.nas / "anaconda3" / "envs"
    before = os.readlink(envs / "magicdrivedit")
    assert re.fullmatch(r"\.magicdrivedit-[0-9a-f]{16}", before), before
    # The site's environment.yml with one more dependency, named by an extra var: what changes
    # is the file as rendered for the inventory.
    template = tmp_path / "environment.yml"
    template.write_text(EXAMPLE_ENV.read_text() + "{% if test_installs_dependency is defined %}"
                                                  "  - {{ test_installs_dependency }}\n{% endif %}")
    changed_env = {"conda_environment_file": str(template), "test_installs_dependency": "jinja2"}

    work = f"/home/alice/installs-{uuid.uuid4().hex[:8]}"
    as_alice(cluster, f"mkdir -m 0755 {work}")
    # Imports from the env at its start, waits for the switch, imports again after it.
    Path(work, "job.py").write_text(
        "import os, pathlib, sys, time\n"
        "import torch\n"
        "work = pathlib.Path(sys.argv[1])\n"
        "print('started', sys.prefix, flush=True)\n"
        "(work / 'started').write_text(sys.prefix)\n"
        "while not (work / 'go').exists():\n"
        "    time.sleep(0.2)\n"
        "import numpy\n"
        "print('after', sys.prefix, os.path.exists(sys.executable), numpy.__name__, flush=True)\n")
    Path(work, "job.sh").write_text("#!/bin/bash\n" + env_activation(cluster) + '\nexec python job.py "$PWD"\n')
    submit = f"cd {work} && sbatch --parsable -p gpu_A6000 -N1 -w node110 --time=10 -J installs-%s -o %s.out job.sh"
    try:
        first = as_alice(cluster, submit % ("first", "first")).stdout.strip().split(";")[0]
        assert eventually(lambda: Path(work, "started").exists(), timeout=180), job_state(cluster, first)
        assert job_state(cluster, first) == "RUNNING"

        switch = provision_nas(changed_env)
        assert switch.returncode == 0, switch.stdout[-4000:] + switch.stderr
        after = os.readlink(envs / "magicdrivedit")
        assert after != before and (envs / before / "bin" / "python").exists(), "a new prefix; the old one kept"
        again = provision_nas(changed_env)
        assert play_recap(again.stdout)["nas01"]["changed"] == 0, again.stdout[-4000:]

        Path(work, "go").write_text("")
        assert finished(cluster, first) == "COMPLETED", Path(work, "first.out").read_text()
        out = Path(work, "first.out").read_text()
        assert f"started {envs / before}\n" in out and f"after {envs / before} True numpy\n" in out, out

        second = as_alice(cluster, submit % ("second", "second")).stdout.strip().split(";")[0]
        assert finished(cluster, second) == "COMPLETED", Path(work, "second.out").read_text()
        assert f"started {envs / after}\n" in Path(work, "second.out").read_text()
        history = (envs / after / "conda-meta" / "history").read_text()
        assert '"jinja2"' in history.splitlines()[-1], "the new env was built from the changed rendered file"
    finally:
        Path(work, "go").write_text("")
        # Back to the inventory's env: its prefix was kept, so this only switches the link back.
        back = provision_nas()
        subprocess.run(["rm", "-rf", work], check=False)
    assert back.returncode == 0 and os.readlink(envs / "magicdrivedit") == before, back.stdout[-4000:]
