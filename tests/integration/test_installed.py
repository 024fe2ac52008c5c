"""The project as a site installs it, used from outside the checkout against the local cluster:
the collection built and installed with ansible-galaxy and launched from a playbook of the site's
own, and the wheel pip-installed into a fresh virtualenv, launched with the slurm-train command
and with `import slurm_train`. Nothing in these runs sees the checkout: no ansible.cfg of it, the
collection and the package only where they were installed."""

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from cluster import REPO
from launch import unique_job_name

INVENTORY = REPO / "inventory" / "local"


def scontrol_state(cluster, job_id):
    shown = cluster.slurm("scontrol", "show", "job", "-o", str(job_id), check=False).stdout
    match = re.search(r"\bJobState=(\S+)", shown)
    return match.group(1) if match else None


def outside_env(**extra):
    """The environment of a user outside the checkout: no ANSIBLE_CONFIG pointing into it."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("ANSIBLE_CONFIG", "PYTHONPATH") and not key.startswith("ANSIBLE_COLLECTIONS")}
    env.update(extra)
    return env


def run(argv, cwd, env, timeout=600):
    return subprocess.run([str(arg) for arg in argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def site_copy_of_the_trainer(directory):
    """The example trainer in a directory of the site's own (the launch stages its directory)."""
    examples = directory / "examples"
    examples.mkdir(parents=True)
    shutil.copy2(REPO / "examples" / "train_ddp.py", examples / "train_ddp.py")
    return "examples/train_ddp.py"


def finished_job(outputs, name):
    folders = sorted(outputs.glob(f"{name}-*"))
    assert len(folders) == 1, (name, sorted(outputs.iterdir()) if outputs.exists() else "no outputs folder")
    return json.loads((folders[0] / "job.json").read_text())


def test_the_galaxy_built_collection_launches_from_a_sites_own_playbook(cluster, tmp_path):
    bin_dir = Path(sys.executable).parent
    env = outside_env(ANSIBLE_COLLECTIONS_PATH=str(tmp_path / "collections"))
    built = run([bin_dir / "ansible-galaxy", "collection", "build", "--output-path", tmp_path / "dist", REPO],
                cwd=tmp_path, env=env)
    assert built.returncode == 0, built.stdout + built.stderr
    tarball = tmp_path / "dist" / "hpc-slurm_train-1.0.0.tar.gz"
    installed = run([bin_dir / "ansible-galaxy", "collection", "install", "-p", tmp_path / "collections", tarball],
                    cwd=tmp_path, env=env)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    root = tmp_path / "collections" / "ansible_collections" / "hpc" / "slurm_train"
    # The modules' link survives build and install, as a relative link.
    assert os.readlink(root / "plugins" / "modules") == "../library"
    assert (root / "plugins" / "modules" / "slurm_job.py").is_file()
    assert not (root / "tests").exists() and not (root / "collections").exists()
    listed = run([bin_dir / "ansible-galaxy", "collection", "list", "hpc.slurm_train"], cwd=tmp_path, env=env)
    assert str(tmp_path / "collections") in listed.stdout and str(REPO) not in listed.stdout, listed.stdout

    site = tmp_path / "site"
    script = site_copy_of_the_trainer(site)
    (site / "train.yml").write_text(
        "---\n"
        "# A site's own playbook: the collection's launch, with the site's request.\n"
        "- name: Train on the local cluster\n"
        "  ansible.builtin.import_playbook: hpc.slurm_train.launch\n")
    name = unique_job_name("galaxy")
    outputs = tmp_path / "outputs"
    played = run([bin_dir / "ansible-playbook", "-i", INVENTORY, "train.yml", "-e", f"script={script}",
                  "-e", "nodes=node110,node111", "-e", "nproc_per_node=1", "-e", f"job_name={name}",
                  "-e", '{"script_args": "--steps 3"}', "-e", f"slurm_launch_outputs_dir={outputs}"],
                 cwd=site, env=env)
    assert played.returncode == 0, played.stdout[-4000:] + played.stderr
    job = finished_job(outputs, name)
    assert (job["state"], job["exit_code"], job["nodes"]) == ("COMPLETED", 0, ["node110", "node111"])
    assert scontrol_state(cluster, job["job_id"]) == "COMPLETED"


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory):
    """A fresh virtualenv outside the checkout with the project's wheel installed, offline: its
    dependencies are the project's .venv packages (a .pth file), whose ansible-playbook script is
    written as pip writes it when it installs ansible-core there."""
    scratch = tmp_path_factory.mktemp("wheel")
    built = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                 "-w", scratch / "dist", REPO], cwd=scratch, env=outside_env())
    assert built.returncode == 0, built.stdout + built.stderr
    wheel, = (scratch / "dist").glob("slurm_train-1.0.0-*.whl")
    venv = scratch / "venv"
    made = run([sys.executable, "-m", "venv", venv], cwd=scratch, env=outside_env())
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    site_packages = Path(run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             cwd=scratch, env=outside_env()).stdout.strip())
    (site_packages / "project-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    installed = run([python, "-m", "pip", "install", "--no-deps", "--no-index", wheel], cwd=scratch,
                    env=outside_env())
    assert installed.returncode == 0, installed.stdout + installed.stderr
    playbook_script = venv / "bin" / "ansible-playbook"
    playbook_script.write_text(f"#!{python}\nimport sys\nfrom ansible.cli.playbook import main\n"
                               "if __name__ == '__main__':\n    sys.exit(main())\n")
    playbook_script.chmod(0o755)
    work = scratch / "work"
    work.mkdir()
    # The venv first on PATH, as an activated one is.
    env = outside_env(PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}")
    return venv, work, env, site_packages


def test_the_wheel_gives_slurm_train_and_its_command_outside_the_checkout(cluster, wheel_venv):
    venv, work, env, site_packages = wheel_venv
    script = site_copy_of_the_trainer(work)
    command = venv / "bin" / "slurm-train"
    imported = run([venv / "bin" / "python", "-c", "import slurm_train, ansible_collections.hpc.slurm_train as c; "
                    "print(slurm_train.__file__); print(list(c.__path__)[0])"], cwd=work, env=env)
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.splitlines() == [str(site_packages / "slurm_train" / "__init__.py"),
                                            str(site_packages / "ansible_collections" / "hpc" / "slurm_train")]

    misspelt = run([command, "launch", script, "--nodse", "node110"], cwd=work, env=env)
    assert misspelt.returncode == 2
    assert "unrecognized arguments: --nodse (did you mean --nodes?)" in misspelt.stderr, misspelt.stderr

    name = unique_job_name("cli")
    launched = run([command, "launch", script, "--nodes", "node110,node111", "--nproc-per-node", "1",
                    "--job-name", name, "--inventory", INVENTORY, "--", "--steps", "3"], cwd=work, env=env)
    assert launched.returncode == 0, launched.stdout[-4000:] + launched.stderr
    job = finished_job(work / "outputs", name)
    assert (job["state"], job["exit_code"], job["nodes"]) == ("COMPLETED", 0, ["node110", "node111"])
    assert scontrol_state(cluster, job["job_id"]) == "COMPLETED"
    assert f"job {job['job_id']} ({name}): RUNNING on node110,node111" in launched.stdout, launched.stdout

    listed = run([command, "jobs", "--inventory", INVENTORY], cwd=work, env=env)
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split()[:4] == ["job", "name", "run", "state"]
    assert [str(job["job_id"]), name, "1", "COMPLETED"] in [row.split()[:4] for row in rows], listed.stdout

    logs = run([command, "logs", str(job["job_id"]), "--inventory", INVENTORY], cwd=work, env=env)
    assert logs.returncode == 0, logs.stderr
    assert "[rank0] training complete steps=3 " in logs.stdout + " ", logs.stdout
    assert f"job {job['job_id']} ({name}): COMPLETED" in logs.stderr

    api_name = unique_job_name("import")
    code = ("import slurm_train\n"
            f"result = slurm_train.launch(script={script!r}, nodes='node110', nproc_per_node=1, job_name={api_name!r},"
            f" script_args='--steps 2', inventory={str(INVENTORY)!r})\n"
            "print(result.job_id, result.state)\n")
    imported_launch = run([venv / "bin" / "python", "-c", code], cwd=work, env=env)
    assert imported_launch.returncode == 0, imported_launch.stdout[-4000:] + imported_launch.stderr
    job_id, state = imported_launch.stdout.split()
    assert state == "COMPLETED" and scontrol_state(cluster, job_id) == "COMPLETED"
    assert finished_job(work / "outputs", api_name)["job_id"] == int(job_id)
