"""Provisioning: the molecule scenario of each role, and the cases around them: a checksum
mismatch stops before the NAS is touched, an interrupted install is finished by a rerun, the
env is updated only when environment.yml changes, a conda-pack archive is an offline
alternative, an inconsistent node group is refused, and a second provision.yml on a cluster
of its own reports changed=0. NAS-only cases run against localhost with a NAS directory of
their own; none of them uses the default cluster of inventory/local."""

import functools
import hashlib
import http.server
import json
import os
import pwd
import re
import subprocess
import shutil
import sys
import tarfile
import tempfile
import threading
from pathlib import Path

import pytest

from cluster import local_cluster, play_recap, task_outcome

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
STANDINS = REPO / "tests" / "standins"
SYSFS = REPO / "tests" / "unit" / "fixtures" / "sysfs"
CUDA_RUNFILE = STANDINS / "cuda_11.8.0_520.61.05_linux.run"
MINIFORGE = STANDINS / "Miniforge3-Linux-x86_64.sh"
SITE_PACKAGES = subprocess.run([sys.executable, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip()
ENV = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
       "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1"}
NAS_PLAY = """\
- name: NAS roles
  hosts: nas
  gather_facts: false
  # As provision.yml runs them: on the NAS as its owner account. The stand-ins' test hooks
  # go through `environment` (sudo's env_reset drops the caller's environment).
  become: true
  become_user: nasadmin
  environment: "{{{{ test_env | default({{}}) }}}}"
  roles: {roles}
"""
NAS_OWNER = "nasadmin"
NCCL_PLAY = """\
- name: NCCL role
  hosts: compute
  gather_facts: false
  roles: [hpc.slurm_train.nccl_env]
"""


def sha256(path):
    return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()


def playbook(inventory, play, extra_vars=None, env=None, check=False):
    argv = [str(BIN / "ansible-playbook"), "-i", str(inventory), str(play)]
    if extra_vars:
        argv += ["-e", json.dumps(extra_vars)]
    if check:
        argv += ["--check", "--diff"]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600, env={**ENV, **(env or {})})


def recap(proc):
    """{host: {ok, changed, failed, ...}} from the PLAY RECAP of a run."""
    return play_recap(proc.stdout)


def tree(root):
    root = Path(root)
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else None


def environment_yml(path, dependencies):
    path.write_text(json.dumps({"name": "magicdrivedit", "channels": [f"file://{SITE_PACKAGES}"],
                                "dependencies": dependencies}))
    return path


@pytest.fixture
def nas(tmp_path):
    """An inventory with localhost as the NAS host, a NAS directory owned by the NAS owner
    (outside pytest's 0700 tmp tree, which that account cannot enter) and the roles' vars."""
    inventory = tmp_path / "hosts.yml"
    # The system python: the NAS owner cannot enter a virtualenv under /root.
    inventory.write_text("all:\n  children:\n    nas:\n      hosts:\n        localhost:\n"
                         "          ansible_connection: local\n"
                         "          ansible_python_interpreter: /usr/bin/python3\n")
    nas_root = Path(tempfile.mkdtemp(prefix="test-provision-nas.", dir="/var/tmp"))
    os.chmod(nas_root, 0o755)
    shutil.chown(nas_root, NAS_OWNER, NAS_OWNER)
    play = tmp_path / "play.yml"
    play.write_text(NAS_PLAY.format(roles="[hpc.slurm_train.cuda_toolkit, hpc.slurm_train.conda]"))
    # The conda cases need no toolkit: a play of the conda role alone keeps them quick.
    (tmp_path / "conda.yml").write_text(NAS_PLAY.format(roles="[hpc.slurm_train.conda]"))
    variables = {
        "cluster_nas_root": str(nas_root),
        "cuda_toolkit_runfile_controller_path": str(CUDA_RUNFILE),
        "cuda_toolkit_runfile_checksum": sha256(CUDA_RUNFILE),
        "conda_installer_controller_path": str(MINIFORGE),
        "conda_installer_checksum": sha256(MINIFORGE),
        "conda_environment_file": str(environment_yml(tmp_path / "environment.yml", ["python=3.11", "pytorch"])),
    }
    yield inventory, play, variables, nas_root
    nas_uid = pwd.getpwnam(NAS_OWNER).pw_uid  # lstat: a link's own owner, not its target's
    assert not [p for p in nas_root.rglob("*") if p.lstat().st_uid != nas_uid], "the NAS roles wrote as another account"
    shutil.rmtree(nas_root)


@pytest.fixture(scope="module")
def http_standins():
    """The stand-ins served on 127.0.0.1 (the only network these tests use)."""
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(STANDINS))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.mark.parametrize("scenario", ["cuda_toolkit", "conda", "nccl_env"])
def test_molecule_scenario(scenario):
    """create (own local cluster), converge, idempotence (changed=0), verify, destroy."""
    proc = subprocess.run([str(BIN / "molecule"), "test", "-s", scenario], cwd=REPO, capture_output=True,
                          text=True, timeout=600, env=ENV)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]


@pytest.mark.parametrize("source", ["url", "controller_path", "nas_path"])
def test_cuda_checksum_mismatch_fails_before_the_nas_is_touched(nas, http_standins, source):
    inventory, play, variables, nas_root = nas
    wrong = "sha256:" + "0" * 64
    variables.update(cuda_toolkit_runfile_checksum=wrong, cuda_toolkit_runfile_controller_path="",
                     cuda_toolkit_runfile_url=f"{http_standins}/{CUDA_RUNFILE.name}")
    if source != "url":
        variables[f"cuda_toolkit_runfile_{source}"] = str(CUDA_RUNFILE)
    before = tree(nas_root)
    proc = playbook(inventory, play, variables)
    assert proc.returncode != 0
    assert re.search(r"did not match 0{64}|expected\s+sha256:0{64}", proc.stdout), proc.stdout[-3000:]
    assert tree(nas_root) == before == []
    assert "Run the runfile" not in proc.stdout


def test_conda_checksum_mismatch_fails_before_the_nas_is_touched(nas):
    inventory, play, variables, nas_root = nas
    play = play.with_name("conda.yml")
    variables["conda_installer_checksum"] = sha256(CUDA_RUNFILE)  # a real checksum, of the wrong file
    proc = playbook(inventory, play, variables)
    assert proc.returncode != 0
    assert "nothing was installed and the NAS was not touched" in proc.stdout, proc.stdout[-3000:]
    assert tree(nas_root) == [], "nothing anywhere on the NAS"
    assert "Run the installer" not in proc.stdout


def test_the_installer_that_runs_is_a_private_copy_no_other_account_can_swap(nas, tmp_path):
    """The checksummed copy is the copy that runs, from a fresh directory only the NAS owner may
    write: another user who owns the source's directory cannot swap what runs."""
    inventory, play, variables, nas_root = nas
    record = Path(tempfile.mkdtemp(prefix="test-provision-record.", dir="/var/tmp"))
    record.chmod(0o777)
    try:
        proc = playbook(inventory, play, {**variables, "test_env": {"CUDA_STANDIN_RECORD": str(record / "ran")}})
        assert proc.returncode == 0, proc.stdout[-3000:]
        mode, owner, path = (record / "ran").read_text().split()
        assert (mode, owner) == ("700", NAS_OWNER), "the directory the installer ran from is the NAS owner's alone"
        assert Path(path).name == CUDA_RUNFILE.name and Path(path).parent != CUDA_RUNFILE.parent
        assert not Path(path).parent.exists(), "the private copy is removed after the run"
    finally:
        shutil.rmtree(record, ignore_errors=True)


def test_the_runfiles_link_to_the_temporary_sibling_is_removed(nas):
    """The stand-in makes the link NVIDIA's runfile makes (/usr/local/cuda -> --toolkitpath), in a
    directory of the test's (its CUDA_STANDIN_SYMLINK_ROOT hook): the toolkit was installed into
    the temporary sibling, so that link would point at nothing once the sibling is renamed."""
    inventory, play, variables, nas_root = nas
    link_root = nas_root.with_name(nas_root.name + ".usr-local")
    link_root.mkdir()
    shutil.chown(link_root, NAS_OWNER, NAS_OWNER)
    try:
        link_vars = {**variables, "cuda_toolkit_runfile_symlink": str(link_root / "cuda"),
                     "test_env": {"CUDA_STANDIN_SYMLINK_ROOT": str(link_root)}}
        play.with_name("cuda.yml").write_text(NAS_PLAY.format(roles="[hpc.slurm_train.cuda_toolkit]"))
        run = playbook(inventory, play.with_name("cuda.yml"), link_vars)
        assert run.returncode == 0, run.stdout[-3000:]
        assert task_outcome(run.stdout, "Remove the runfile's link to the temporary sibling.", "localhost") == "changed"
        assert not os.path.lexists(link_root / "cuda"), os.readlink(link_root / "cuda")
        assert (nas_root / "cuda" / "cuda-11.8" / "bin" / "nvcc").exists()
    finally:
        shutil.rmtree(link_root)


def test_interrupted_installs_are_finished_by_a_rerun(nas):
    inventory, play, variables, nas_root = nas
    home, partial = nas_root / "cuda" / "cuda-11.8", nas_root / "cuda" / ".cuda-11.8.partial"
    conda_root = nas_root / "anaconda3"

    killed = playbook(inventory, play, {**variables, "test_env": {"CUDA_STANDIN_KILL_AFTER": "lib64"}})
    assert killed.returncode != 0
    assert not home.exists(), "a killed install left a toolkit at its home"
    assert (partial / "bin" / "nvcc").exists() and not (partial / "version.json").exists()

    killed = playbook(inventory, play, {**variables, "test_env": {"MINIFORGE_STANDIN_KILL_AFTER": "payload"}})
    assert killed.returncode != 0
    assert (home / "version.json").exists() and not partial.exists()
    assert conda_root.exists() and not (conda_root / "conda-meta" / ".ansible-slurm-train-installed").exists()

    rerun = playbook(inventory, play, variables)
    assert rerun.returncode == 0, rerun.stdout[-3000:]
    assert subprocess.run([home / "bin" / "nvcc", "--version"], capture_output=True, text=True).stdout.splitlines()[3] \
        == "Cuda compilation tools, release 11.8, V11.8.89"
    assert (conda_root / "conda-meta" / ".ansible-slurm-train-installed").exists()
    assert not (nas_root / ".anaconda3.installing").exists()
    assert (conda_root / "envs" / "magicdrivedit" / "bin" / "python").exists()


def env_specs(prefix):
    """The specs conda recorded in an env's history, last command."""
    return json.loads(re.findall(r"^# update specs: (.*)$", (Path(prefix) / "conda-meta" / "history").read_text(),
                                 re.M)[-1])


def test_a_changed_rendered_environment_yml_gets_a_new_prefix_and_the_link_switches(nas):
    inventory, play, variables, nas_root = nas
    play = play.with_name("conda.yml")
    envs = nas_root / "anaconda3" / "envs"
    # A template: what changes the env is the file as rendered from the inventory, not its source.
    Path(variables["conda_environment_file"]).write_text(
        "name: magicdrivedit\nchannels: [\"file://{{ test_channel }}\"]\n"
        "dependencies: [python=3.11, pytorch{{ test_extra_dependency | default('') }}]\n")
    variables["test_channel"] = SITE_PACKAGES
    first = playbook(inventory, play, variables)
    assert first.returncode == 0, first.stdout[-3000:]
    old = envs / os.readlink(envs / "magicdrivedit")
    assert re.fullmatch(r"\.magicdrivedit-[0-9a-f]{16}", old.name) and env_specs(old) == ["python=3.11", "pytorch"]
    rendered = (nas_root / "anaconda3" / "environments" / "magicdrivedit.yml").read_bytes()
    assert old.name.endswith(hashlib.sha256(rendered).hexdigest()[:16]), "keyed on the file as written to the NAS"

    again = playbook(inventory, play, variables)
    assert recap(again)["localhost"]["changed"] == 0, again.stdout[-3000:]

    source_before = Path(variables["conda_environment_file"]).read_bytes()
    variables["test_extra_dependency"] = ", jinja2"
    check = playbook(inventory, play, variables, check=True)
    assert check.returncode == 0 and recap(check)["localhost"]["changed"] > 0, check.stdout[-3000:]
    assert task_outcome(check.stdout, "Create the env from the environment.yml on the NAS.", "localhost") == "changed"
    assert os.readlink(envs / "magicdrivedit") == old.name and {p.name for p in envs.iterdir()} == \
        {"magicdrivedit", old.name}, "--check changed nothing"

    changed = playbook(inventory, play, variables)
    assert changed.returncode == 0, changed.stdout[-3000:]
    assert Path(variables["conda_environment_file"]).read_bytes() == source_before, "only an extra var changed"
    new = envs / os.readlink(envs / "magicdrivedit")
    assert new != old and env_specs(new) == ["python=3.11", "pytorch", "jinja2"]
    assert env_specs(old) == ["python=3.11", "pytorch"] and (old / "bin" / "python").exists(), "the old env is kept as it was"
    assert subprocess.run([envs / "magicdrivedit" / "bin" / "python", "-c", "import jinja2, torch"]).returncode == 0
    assert recap(playbook(inventory, play, variables))["localhost"]["changed"] == 0

    # Back to the earlier file: its prefix is still there, so the link just switches back.
    del variables["test_extra_dependency"]
    back = playbook(inventory, play, variables)
    assert back.returncode == 0 and os.readlink(envs / "magicdrivedit") == old.name, back.stdout[-3000:]
    assert task_outcome(back.stdout, "Create the env from the environment.yml on the NAS.", "localhost") == "skipping"

    variables["test_extra_dependency"] = ", surely-not-a-package"
    missing = playbook(inventory, play, variables)
    assert missing.returncode != 0 and "PackagesNotFoundError" in missing.stdout, missing.stdout[-3000:]
    assert os.readlink(envs / "magicdrivedit") == old.name, "a failed build leaves the env as it was"


def test_an_env_of_the_unversioned_layout_is_moved_aside_and_replaced(nas):
    inventory, play, variables, nas_root = nas
    play = play.with_name("conda.yml")
    envs = nas_root / "anaconda3" / "envs"
    assert playbook(inventory, play, variables).returncode == 0
    # The layout before: a real env directory at envs/magicdrivedit, made by `conda env create -n`.
    versioned = envs / os.readlink(envs / "magicdrivedit")
    (envs / "magicdrivedit").unlink()
    shutil.rmtree(versioned)
    # From the copy on the NAS: the NAS owner cannot read pytest's private tmp tree.
    subprocess.run(["sudo", "-u", NAS_OWNER, nas_root / "anaconda3" / "bin" / "conda", "env", "create",
                    "-f", nas_root / "anaconda3" / "environments" / "magicdrivedit.yml", "-n", "magicdrivedit"],
                   check=True, capture_output=True)
    assert (envs / "magicdrivedit").is_dir() and not (envs / "magicdrivedit").is_symlink()

    check = playbook(inventory, play, variables, check=True)
    assert check.returncode == 0 and recap(check)["localhost"]["changed"] > 0, check.stdout[-3000:]
    assert not (envs / "magicdrivedit").is_symlink()

    migrated = playbook(inventory, play, variables)
    assert migrated.returncode == 0, migrated.stdout[-3000:]
    assert os.readlink(envs / "magicdrivedit") == versioned.name
    assert (envs / ".magicdrivedit-unversioned" / "conda-meta" / "history").exists(), "the old env is kept, aside"
    assert recap(playbook(inventory, play, variables))["localhost"]["changed"] == 0


def test_conda_pack_archive_is_an_offline_alternative(nas, tmp_path):
    inventory, play, variables, nas_root = nas
    play = play.with_name("conda.yml")
    # Pack an env made by another (stand-in) conda install, as a site with internet would.
    builder = tmp_path / "builder"
    subprocess.run(["bash", MINIFORGE, "-b", "-p", builder], check=True, capture_output=True)
    subprocess.run([builder / "bin" / "conda", "env", "create", "-f", variables["conda_environment_file"], "-n", "packed"],
                   check=True, capture_output=True)
    archive = tmp_path / "magicdrivedit.tar.gz"
    subprocess.run([STANDINS / "conda-pack", "-p", builder / "envs" / "packed", "-o", archive], check=True,
                   capture_output=True)
    variables.update(conda_environment_file="", conda_pack_archive=str(archive),
                     conda_pack_archive_checksum=sha256(archive))
    first = playbook(inventory, play, variables)
    assert first.returncode == 0, first.stdout[-3000:]
    envs = nas_root / "anaconda3" / "envs"
    # Unpacked into a prefix of its own, keyed by the archive's checksum, that the env's name links to.
    prefix = envs / os.readlink(envs / "magicdrivedit")
    assert prefix.name == ".magicdrivedit-" + sha256(archive).split(":")[1][:16]
    check = subprocess.run(["bash", "-c", 'source "$1/etc/profile.d/conda.sh" && conda activate "$2" && '
                            'python -c "import sys, torch; print(sys.prefix)"', "bash", nas_root / "anaconda3", prefix],
                           capture_output=True, text=True)
    assert check.stdout.strip() == str(prefix), check.stderr
    pyvenv = (prefix / "pyvenv.cfg").read_text()  # conda-unpack rewrote the packed prefix to the env's
    assert str(builder / "envs" / "packed") not in pyvenv and str(prefix) in pyvenv
    with tarfile.open(archive) as packed:
        assert "./bin/conda-unpack" in packed.getnames()
    again = playbook(inventory, play, variables)
    assert recap(again)["localhost"]["changed"] == 0, again.stdout[-3000:]


def nccl_inventory(tmp_path, hosts, group_vars=""):
    inventory = tmp_path / "nccl-hosts.yml"
    # The first address stands for the node's cluster address (ansible_host on a real site).
    host_lines = "".join(f"            {name}: {{nccl_env_sysfs_root: {SYSFS / tree_name}, "
                         f"nccl_env_ipv4_addresses: {json.dumps(addresses)}, "
                         f"nccl_env_cluster_address: {next(iter(addresses.values()))[0]}}}\n"
                         for name, tree_name, addresses in hosts)
    inventory.write_text(
        "all:\n  vars:\n    ansible_connection: local\n"
        f"    ansible_python_interpreter: {sys.executable}\n"
        f"    cluster_nas_root: {tmp_path / 'nas'}\n"
        f"    nccl_env_conf_path: \"{tmp_path}/{{{{ inventory_hostname }}}}.nccl.conf\"\n"
        "  children:\n    nas:\n      hosts:\n        localhost:\n"
        "    compute:\n      children:\n        gpu_roce:\n" + group_vars + "          hosts:\n" + host_lines)
    play = tmp_path / "nccl.yml"
    play.write_text(NCCL_PLAY)
    return inventory, play


DGX_ADDRESSES = {"enp41s0f0np0": ["10.77.0.210"], "enp170s0f0np0": ["10.20.170.210"], "usb0": ["169.254.3.1"]}


def test_nccl_env_leaves_out_the_node_whose_own_rail_is_down_and_provisions_the_other(tmp_path):
    # Stand-in DGX H100 trees (tests/unit/fixtures/sysfs/README.md); dgx2's mlx5_5 port is DOWN.
    # The env file is written as root here: the NAS owner account cannot run this checkout's Python.
    owner = "          vars:\n            nccl_env_nas_owner: root\n            nccl_env_nas_group: root\n"
    inventory, play = nccl_inventory(tmp_path, [("dgx1", "dgx_h100", DGX_ADDRESSES),
                                                ("dgx2", "dgx_h100_rail_down", DGX_ADDRESSES)], owner)
    proc = playbook(inventory, play)
    assert proc.returncode != 0
    assert ("group gpu_roce: NCCL_IB_HCA differs between its nodes (dgx1==mlx5_0:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,"
            "mlx5_6:1,mlx5_9:1,mlx5_10:1,mlx5_11:1, dgx2==mlx5_0:1,mlx5_3:1,mlx5_4:1,mlx5_6:1,mlx5_9:1,mlx5_10:1,"
            "mlx5_11:1); dgx2 is the odd one: its own detection reports: mlx5_5:1 is a compute rail") \
        in proc.stdout, proc.stdout[-3000:]
    assert "Leaving dgx1 out" not in proc.stdout
    assert not (tmp_path / "dgx2.nccl.conf").exists()
    assert "NCCL_IB_HCA==mlx5_0:1,mlx5_3:1" in (tmp_path / "dgx1.nccl.conf").read_text()
    assert "export NCCL_SOCKET_IFNAME==enp41s0f0np0" in (tmp_path / "nas" / "env" / "nccl-gpu_roce.sh").read_text()


@pytest.mark.parametrize("overrides, message", [
    ({"NCCL_SOCKET_IFNAME": "ens1f1"}, "r2: NCCL_SOCKET_IFNAME names ens1f1, which r2 does not have up"),
    ({"NCCL_IB_HCA": "mlx5_1:1"}, "r2: NCCL_IB_HCA names mlx5_1:1, which r2 does not have as an active port"),
    ({"NCCL_SOCKET_IFNAME": "lo,ens1f0"}, "includes the loopback interface lo"),
    ({"NCCL_IB_HCA": "=mlx5_0:1, mlx5_1:1"}, "has a space in ' mlx5_1:1': NCCL splits at ',' only"),
])
def test_nccl_env_refuses_inventory_settings_a_node_cannot_honour(tmp_path, overrides, message):
    group_vars = f"          vars:\n            nccl_env_overrides: {json.dumps(overrides)}\n"
    inventory, play = nccl_inventory(tmp_path, [("r1", "two_hcas", {"ens1f0": ["10.10.0.11"], "ens1f1": ["10.10.1.11"]}),
                                                ("r2", "two_hcas_one_down", {"ens1f0": ["10.10.0.12"]})], group_vars)
    proc = playbook(inventory, play)
    assert proc.returncode != 0
    assert message in proc.stdout, proc.stdout[-3000:]
    # r2 is left out; r1 (whose hardware honours them) may be written.
    assert not (tmp_path / "r2.nccl.conf").exists()


PROVISION_HOSTS = """\
all:
  children:
    nas:
      hosts:
        localhost:
    compute:
      children:
        gpu_pv:
          hosts:
            pv-n1: {ansible_host: 10.84.0.11}
            pv-n2: {ansible_host: 10.84.0.12}
"""


def test_second_provision_run_reports_changed_zero(tmp_path, http_standins):
    """provision.yml end to end on a 2-node cluster of its own: CUDA from a URL, conda from the
    controller, the NCCL env on both nodes; then a --check run and a second run change nothing."""
    state = Path("/var/lib/ansible-slurm-train/test-provision")
    inventory = tmp_path / "inventory"
    (inventory / "group_vars").mkdir(parents=True)
    (inventory / "hosts.yml").write_text(PROVISION_HOSTS)
    (inventory / "group_vars" / "all.yml").write_text(json.dumps({
        "cluster_name": "test-provision", "local_cluster_state_dir": str(state),
        "local_cluster_network": "10.84.0.0/24", "cluster_nas_root": str(state / "nas"),
        "local_cluster_slurmctld_port": 29817, "local_cluster_slurmd_port": 29818,
        "local_cluster_slurmdbd_port": 29819, "local_cluster_mariadb_port": 29306}))
    # The system python: the NAS owner cannot enter a virtualenv under /root.
    (inventory / "group_vars" / "nas.yml").write_text(json.dumps({
        "ansible_connection": "local", "ansible_python_interpreter": "/usr/bin/python3"}))
    (inventory / "group_vars" / "compute.yml").write_text(json.dumps({
        "ansible_user": "root", "ansible_python_interpreter": "/usr/bin/python3",
        "ansible_ssh_private_key_file": str(state / "ssh" / "id_ed25519"),
        "ansible_ssh_common_args": f"-o UserKnownHostsFile={state / 'ssh' / 'known_hosts'} -o StrictHostKeyChecking=yes",
        # The fixture tree is copied where the nodes see it (below, after up).
        "nccl_env_sysfs_root": str(state / "sysfs" / "no_hca")}))
    variables = {
        "cuda_toolkit_runfile_url": f"{http_standins}/{CUDA_RUNFILE.name}",
        "cuda_toolkit_runfile_checksum": sha256(CUDA_RUNFILE),
        "conda_installer_controller_path": str(MINIFORGE), "conda_installer_checksum": sha256(MINIFORGE),
        "conda_environment_file": str(environment_yml(tmp_path / "environment.yml", ["python=3.11", "pytorch"])),
    }
    local_cluster("up", "-i", str(inventory))
    try:
        shutil.copytree(SYSFS, state / "sysfs", symlinks=True)
        first = playbook(inventory, REPO / "provision.yml", variables)
        assert first.returncode == 0, first.stdout[-4000:]
        assert recap(first)["localhost"]["changed"] > 0
        nas_uid = pwd.getpwnam(NAS_OWNER).pw_uid
        assert [p for p in (state / "nas").rglob("*") if p.lstat().st_uid != nas_uid] == []
        jobs = (state / "nas" / "jobs").stat()
        assert (jobs.st_mode & 0o7777, jobs.st_uid) == (0o711, nas_uid)
        assert (state / "nas" / "env" / "nccl-gpu_pv.sh").read_text().count("export NCCL_SOCKET_IFNAME==eth0") == 1
        check = playbook(inventory, REPO / "provision.yml", variables, check=True)
        assert check.returncode == 0, check.stdout[-4000:]
        predicted = recap(check)
        assert set(predicted) == {"localhost", "pv-n1", "pv-n2"}, check.stdout[-4000:]
        assert all(c["changed"] == 0 for c in predicted.values()), check.stdout[-4000:]
        second = playbook(inventory, REPO / "provision.yml", variables)
        assert second.returncode == 0, second.stdout[-4000:]
        counts = recap(second)
        assert set(counts) == {"localhost", "pv-n1", "pv-n2"}
        assert all(c["changed"] == 0 and c["failed"] == 0 for c in counts.values()), second.stdout[-4000:]
        # A NAS path with '..' is refused by the NAS play's first check, before any NAS path is
        # looked at or probed as the NAS owner.
        escaping = f"{state / 'nas'}/../jobs"
        refused = playbook(inventory, REPO / "provision.yml", {**variables, "cluster_jobs_dir": escaping})
        assert refused.returncode != 0
        assert (f"cluster_jobs_dir={escaping!r} is not allowed: an absolute path of letters, digits, '_', '.', '+', "
                "'-' and '/', without '..' (provision.yml writes there as the NAS owner)") in refused.stdout, \
            refused.stdout[-3000:]
        assert "TASK [Look at the NAS root" not in refused.stdout
    finally:
        local_cluster("down", "-i", str(inventory))
