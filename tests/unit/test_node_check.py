"""roles/slurm_launch/files/preflight/node_check.py's detection, staged as the preflight stages it
(beside nccl_network_facts.py, nccl_env.py and gpu_check.py) and run on the recorded sysfs trees of
real GPU servers: the preflight proposes what provision.yml's nccl_network_facts module proposes for
the same node and inputs (the site proposal: compute rails only, the cluster interface, no forced
GID index for NCCL 2.21+), faults included, so the preflight and provision agree on the odd node."""

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import ansible.module_utils._internal
import pytest
from ansible.module_utils.testing import patch_module_args

from conftest import PROJECT_ROOT
from test_nccl_network_facts import OPERSTATES, UP_OPERSTATES, physical_interfaces

SYSFS = PROJECT_ROOT / "tests" / "unit" / "fixtures" / "sysfs"
STAGED = {  # what preflight_report.yml's job_dir task stages beside node_check.py
    "node_check.py": PROJECT_ROOT / "roles" / "slurm_launch" / "files" / "preflight" / "node_check.py",
    "nccl_network_facts.py": PROJECT_ROOT / "library" / "nccl_network_facts.py",
    "nccl_env.py": PROJECT_ROOT / "plugins" / "filter" / "nccl_env.py",
    "gpu_check.py": PROJECT_ROOT / "roles" / "slurm_launch" / "files" / "gpu_check.py",
}
# As in test_nccl_hardware_trees.py: the DGX's in-band management port holds the cluster address;
# storage ports, IPoIB and the BMC's USB NIC hold others.
DGX_ADDRESSES = {"enp41s0f0np0": ["10.77.0.110"], "enp41s0f1np1": ["10.20.41.110"],
                 "enp170s0f0np0": ["10.20.170.110"], "ibp24s0": ["10.30.0.110"],
                 "usb0": ["169.254.3.1"], "lo": ["127.0.0.1"]}
DGX_COMPUTE_HCA = "=mlx5_0:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_9:1,mlx5_10:1,mlx5_11:1"


@pytest.fixture(scope="module")
def node_check(tmp_path_factory):
    staged = tmp_path_factory.mktemp("preflight")
    for name, source in STAGED.items():
        shutil.copy(source, staged / name)
    spec = importlib.util.spec_from_file_location("staged_node_check", staged / "node_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    sys.path.remove(str(staged))


def config(tree, **more):
    return {"sysfs_root": str(SYSFS / tree), "exclude_interfaces": ["lo", "docker*", "veth*", "virbr*", "br-*"],
            "prefer_gid_type": "RoCE v2", "ipv4_overrides": {}, "cluster_addresses": {"dgx1": "10.77.0.110"},
            "cluster_cidr": "", "nccl_version": "2.21.5", "venv": "", "conda_root": "", "conda_env": "", **more}


def provision_facts(monkeypatch, capsys, tree, addresses, **module_args):
    """What provision.yml's nccl_env role gets from the module for the same node."""
    monkeypatch.setattr(ansible.module_utils._internal, "is_controller", False)
    facts = importlib.util.spec_from_file_location("nccl_facts_for_node_check", STAGED["nccl_network_facts.py"])
    module = importlib.util.module_from_spec(facts)
    facts.loader.exec_module(module)
    with patch_module_args({"sysfs_root": str(SYSFS / tree), "ipv4_addresses": addresses, **module_args}), \
            pytest.raises(SystemExit):
        module.main()
    return json.loads(capsys.readouterr().out)["ansible_facts"]["nccl_network"]


@pytest.mark.parametrize("tree", ["dgx_h100", "dgx_h100_rail_down"])
def test_the_preflight_proposes_what_provision_proposes_for_the_node(node_check, monkeypatch, capsys, tree):
    monkeypatch.setattr(node_check, "ipv4_addresses", lambda: dict(DGX_ADDRESSES))
    found = node_check.detect_network(config(tree), "dgx1")
    expected = provision_facts(monkeypatch, capsys, tree, DGX_ADDRESSES, cluster_address="10.77.0.110",
                               nccl_version="2.21.5")
    assert found == expected


def test_on_a_dgx_the_preflight_proposes_the_compute_rails_and_the_cluster_interface(node_check, monkeypatch):
    monkeypatch.setattr(node_check, "ipv4_addresses", lambda: dict(DGX_ADDRESSES))
    found = node_check.detect_network(config("dgx_h100"), "dgx1")
    # Not every active port and every interface with an address: the rails and the cluster's one.
    assert found["proposed"] == {"NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": DGX_COMPUTE_HCA,
                                 "NCCL_SOCKET_IFNAME": "=enp41s0f0np0"}
    assert found["reasons"]["NCCL_SOCKET_IFNAME"] == "it holds the node's cluster address 10.77.0.110"
    assert found["faults"] == [] and found["warnings"] == []


def test_a_rail_down_is_the_nodes_own_fault_which_names_it_in_the_group_check(node_check, monkeypatch):
    monkeypatch.setattr(node_check, "ipv4_addresses", lambda: dict(DGX_ADDRESSES))
    down = node_check.detect_network(config("dgx_h100_rail_down"), "dgx1")
    assert len(down["faults"]) == 1 and "is a compute rail" in down["faults"][0], down["faults"]
    healthy = node_check.detect_network(config("dgx_h100"), "dgx1")
    # A job on both reads one env file naming all eight rails; nccl.conf on each as provisioned.
    conf = [{**healthy["proposed"]}, {**down["proposed"]}]
    problems = node_check.nccl_env.nccl_env_group_problems(["dgx1", "dgx2"], ["g", "g"], conf, [healthy, down])
    assert problems and all("dgx2" in problem and "dgx1 is the odd one" not in problem for problem in problems), \
        problems
    assert any("dgx2 is the odd one: its own detection reports" in problem for problem in problems), problems


def test_the_preflights_proposal_and_the_filter_use_the_same_up_rule(node_check, monkeypatch, tmp_path):
    # One interface in each documented operstate, each with an address: the preflight proposes the
    # one holding the node's cluster address exactly where the group check counts it up.
    names = {f"ens{index}": state for index, state in enumerate(OPERSTATES, start=1)}
    addresses = {name: [f"10.10.{index}.11"] for index, name in enumerate(names)}
    monkeypatch.setattr(node_check, "ipv4_addresses", lambda: dict(addresses))
    root = physical_interfaces(tmp_path, names)
    proposed = []
    for name, (address,) in addresses.items():
        found = node_check.detect_network(config("no_hca", sysfs_root=root, cluster_addresses={"n1": address}), "n1")
        accepted = node_check.nccl_env.nccl_env_group_problems(
            ["n1"], ["g"], [{"NCCL_SOCKET_IFNAME": "=" + name}], [found]) == []
        taken = found["proposed"].get("NCCL_SOCKET_IFNAME") == "=" + name
        assert taken is accepted, (name, found)
        proposed += [name] if taken else []
    assert proposed == [name for name, state in names.items() if state in UP_OPERSTATES] == ["ens1", "ens7"]
    assert [(iface["name"], iface["operstate"], iface["virtual"]) for iface in found["interfaces"]] == [
        (name, state, False) for name, state in names.items()]


def test_the_nccl_version_is_read_from_the_training_env_as_provision_reads_it(node_check, monkeypatch, tmp_path):
    monkeypatch.setattr(node_check, "ipv4_addresses", lambda: dict(DGX_ADDRESSES))
    env = tmp_path / "anaconda3" / "envs" / "train"
    (env / "conda-meta").mkdir(parents=True)
    (env / "conda-meta" / "nccl-2.18.3-h1234.json").write_text(json.dumps({"version": "2.18.3"}))
    found = node_check.detect_network(config("hgx_roce_bond", nccl_version="", conda_root=str(tmp_path / "anaconda3"),
                                             conda_env="train",
                                             cluster_addresses={"dgx1": "10.77.0.120"}), "dgx1")
    assert found["nccl_version"] == "2.18.3"
    # NCCL before 2.21 takes one GID index for all ports: the RoCE v2 one is proposed.
    assert "NCCL_IB_GID_INDEX" in found["proposed"], found


def test_a_cluster_address_the_node_cannot_resolve_is_a_warning_not_a_crash(node_check, monkeypatch):
    monkeypatch.setattr(node_check, "ipv4_addresses", lambda: dict(DGX_ADDRESSES))
    found = node_check.detect_network(config("dgx_h100", cluster_addresses={"dgx1": "no-such-host.invalid"}), "dgx1")
    assert "NCCL_SOCKET_IFNAME" not in found["proposed"]
    assert any("cluster_address 'no-such-host.invalid' is neither an IPv4 address" in w for w in found["warnings"])


def test_the_users_nccl_conf_is_read_as_nccl_reads_it(node_check):
    # NCCL (src/misc/param.cc): $NCCL_CONF_FILE, else ~/.nccl.conf, then /etc/nccl.conf, each only
    # setting what is not set yet; the job's environment (the group's env file) first of all.
    assert node_check.user_conf_path({"HOME": "/home/alice"}) == "/home/alice/.nccl.conf"
    assert node_check.user_conf_path({"HOME": "/home/alice", "NCCL_CONF_FILE": "/nas/x.conf"}) == "/nas/x.conf"
    assert node_check.user_conf_path({"HOME": "/home/alice", "NCCL_CONF_FILE": ""}) == "/home/alice/.nccl.conf"
    assert node_check.user_conf_path({}) == ""
    conf = {"NCCL_IB_HCA": "=mlx5_0:1", "NCCL_SOCKET_IFNAME": "=eth0", "NCCL_DEBUG": "WARN"}
    user = {"NCCL_IB_HCA": "=mlx5_9:1", "NCCL_DEBUG": "INFO"}
    env_file = {"NCCL_DEBUG": "TRACE"}
    assert node_check.job_settings(conf, user, env_file) == {"NCCL_IB_HCA": "=mlx5_9:1", "NCCL_SOCKET_IFNAME": "=eth0",
                                                             "NCCL_DEBUG": "TRACE"}
    assert node_check.job_settings(conf, None, {}) == conf


def test_the_keys_provision_kept_in_nccl_conf_are_reported(node_check, tmp_path, monkeypatch):
    monkeypatch.setattr(node_check, "ipv4_addresses", lambda: dict(DGX_ADDRESSES))
    conf = tmp_path / "nccl.conf"
    conf.write_text("# NCCL settings of dgx1 (node group g), read by NCCL at init.\nNCCL_IB_DISABLE=0\n"
                    f"{node_check.nccl_network_facts.KEPT_MARKER}\nNCCL_TOPO_FILE=/opt/microsoft/ndv5/topo.xml\n")
    found = node_check.detect_network(config("dgx_h100", nccl_conf=str(conf)), "dgx1")
    assert found["kept"] == {"NCCL_TOPO_FILE": "/opt/microsoft/ndv5/topo.xml"}


def test_the_nccl_version_torch_reports_decides_the_gid_index_as_in_provision(node_check, monkeypatch):
    # hgx_roce_bond's RoCE rails: a forced GID index for NCCL 2.18 only.
    monkeypatch.setattr(node_check, "ipv4_addresses", lambda: {"eno1": ["10.77.0.120"]})
    settings = config("hgx_roce_bond", nccl_version="", cluster_addresses={"dgx1": "10.77.0.120"})
    assert node_check.detect_network(settings, "dgx1", "2.21.5")["proposed"].get("NCCL_IB_GID_INDEX") is None
    assert node_check.detect_network(settings, "dgx1", "2.18.3")["proposed"]["NCCL_IB_GID_INDEX"] == "3"


def executable(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.fixture
def node_env(tmp_path):
    """A node's toolkit and training env, stand-ins that answer as the real programs do: nvcc
    --version, a venv whose python imports torch and prints gpu_check.py's --facts line."""
    executable(tmp_path / "cuda" / "bin" / "nvcc", "#!/bin/sh\necho 'nvcc: NVIDIA (R) Cuda compiler driver'\n"
               "echo 'Cuda compilation tools, release 12.4, V12.4.131'\n")
    venv = tmp_path / "venv"
    executable(venv / "bin" / "activate", f'PATH="{venv}/bin:$PATH"\n')
    executable(venv / "bin" / "python", "#!/bin/sh\n"
               'if [ "$1" = -c ]; then echo "torch 2.3.0 ($0)"; exit 0; fi\n'
               'echo "a warning first"; echo "and another"\n'
               'echo \'{"drivers": ["535.104.05"], "nccl": "2.21.5", "device_count": 8}\'\n')
    return tmp_path


def test_the_toolkit_check_reports_nvccs_release_or_why_it_has_none(node_check, node_env, tmp_path):
    assert node_check.check_cuda("") == {"cuda": "", "cuda_error": ""}
    assert node_check.check_cuda(str(node_env / "cuda")) == {"cuda": "release 12.4", "cuda_error": ""}
    assert "No such file or directory" in node_check.check_cuda(str(tmp_path / "none"))["cuda_error"]
    noisy = tmp_path / "noisy"
    executable(noisy / "bin" / "nvcc", "#!/bin/sh\nprintf 'e%.0s' $(seq 300) >&2; printf 'TAIL' >&2; exit 1\n")
    error = node_check.check_cuda(str(noisy))["cuda_error"]
    assert error == "e" * 196 + "TAIL", "an error's last 200 characters"
    silent = tmp_path / "silent"
    executable(silent / "bin" / "nvcc", "#!/bin/sh\necho 'Cuda compilation tools, release 12.4'\nexit 3\n")
    assert node_check.check_cuda(str(silent)) == {"cuda": "", "cuda_error": "Cuda compilation tools, release 12.4"}
    executable(silent / "bin" / "nvcc", "#!/bin/sh\nexit 3\n")
    assert node_check.check_cuda(str(silent)) == {"cuda": "", "cuda_error": "exit 3"}


def settings(node_env, **more):
    return {"venv": "", "conda_root": "", "conda_env": "", "cuda_home": str(node_env / "cuda"), "gpus_per_node": 0,
            **more}


def test_the_training_env_is_activated_as_the_job_activates_it(node_check, node_env, tmp_path):
    assert node_check.check_python(settings(node_env)) == {"python": "", "python_error": ""}
    venv = str(node_env / "venv")
    assert node_check.check_python(settings(node_env, venv=venv)) == {
        "python": f"torch 2.3.0 ({venv}/bin/python)", "python_error": ""}
    conda = tmp_path / "conda"
    executable(conda / "etc" / "profile.d" / "conda.sh",
               f'conda() {{ [ "$1" = activate ] && [ "$2" = "{conda}/envs/train" ] && PATH="{node_env}/venv/bin:$PATH"; }}\n')
    assert node_check.check_python(settings(node_env, conda_root=str(conda), conda_env="train"))["python"].startswith(
        "torch 2.3.0 (")
    executable(node_env / "venv" / "bin" / "python", "#!/bin/sh\necho \"ModuleNotFoundError: No module named 'torch'\" >&2\n"
               "exit 1\n")
    assert node_check.check_python(settings(node_env, venv=venv)) == {
        "python": "", "python_error": "ModuleNotFoundError: No module named 'torch'"}
    executable(node_env / "venv" / "bin" / "python", "#!/bin/sh\nexit 4\n")
    assert node_check.check_python(settings(node_env, venv=venv))["python_error"] == "exit 4"


def test_on_a_gpu_job_the_gpus_are_seen_as_the_jobs_own_check_sees_them(node_check, node_env, tmp_path):
    assert node_check.check_gpus(settings(node_env)) == {}
    venv = str(node_env / "venv")
    assert node_check.check_gpus(settings(node_env, venv=venv, gpus_per_node=8)) == {
        "drivers": ["535.104.05"], "nccl": "2.21.5", "device_count": 8}
    conda = tmp_path / "conda"
    executable(conda / "etc" / "profile.d" / "conda.sh",
               f'conda() {{ [ "$1" = activate ] && [ "$2" = "{conda}/envs/train" ] && PATH="{node_env}/venv/bin:$PATH"; }}\n')
    assert node_check.check_gpus(settings(node_env, conda_root=str(conda), conda_env="train", gpus_per_node=8))["nccl"] \
        == "2.21.5"
    executable(node_env / "venv" / "bin" / "python", "#!/bin/sh\necho 'RuntimeError: CUDA driver too old' >&2\nexit 1\n")
    failed = node_check.check_gpus(settings(node_env, venv=venv, gpus_per_node=8))
    assert (failed["torch_error"], failed["cuda_home"], failed["toolkit"]) == (
        "RuntimeError: CUDA driver too old", str(node_env / "cuda"), None)
    assert "drivers" in failed and "driver_error" in failed
    executable(node_env / "venv" / "bin" / "python", f"#!/bin/sh\necho '{'t' * 300}CUDA error' >&2\nexit 1\n")
    assert node_check.check_gpus(settings(node_env, venv=venv, gpus_per_node=8))["torch_error"] == \
        ("t" * 300 + "CUDA error")[-200:]
    executable(node_env / "venv" / "bin" / "python", "#!/bin/sh\necho 'not json'\n")
    assert node_check.check_gpus(settings(node_env, venv=venv, gpus_per_node=8))["torch_error"] == "not json"
    executable(node_env / "venv" / "bin" / "python", "#!/bin/sh\nexit 0\n")
    assert node_check.check_gpus(settings(node_env, venv=venv, gpus_per_node=8))["torch_error"] == "exit 0"


def test_the_nodes_addresses_are_read_from_iproute2_and_the_overrides_win(node_check, monkeypatch):
    addresses = node_check.ipv4_addresses()
    assert addresses["lo"] == ["127.0.0.1"]
    found = node_check.detect_network(config("ib_single", ipv4_overrides={"eno1": ["10.77.0.5"]},
                                             cluster_addresses={}), "n1")
    assert [i["ipv4"] for i in found["interfaces"] if i["name"] == "eno1"] == [["10.77.0.5"]]
    monkeypatch.setattr(node_check, "run", lambda argv, timeout=120: (1, "", "ip: not found"))
    assert node_check.ipv4_addresses() is None
    unknown = node_check.detect_network(config("ib_single", cluster_addresses={}), "n1")
    assert "ip -j addr show failed: the interfaces' IPv4 addresses are unknown" in unknown["warnings"]
    assert "ip -j addr show failed: the interfaces' IPv4 addresses are unknown" not in found["warnings"]


def test_a_barrier_returns_as_soon_as_every_node_is_there_or_at_its_deadline(node_check, tmp_path):
    import threading
    import time

    (tmp_path / "a.addr").write_text("{}")
    later = threading.Timer(0.3, lambda: (tmp_path / "b.addr").write_text("{}"))
    later.start()
    began = time.monotonic()
    assert [p.rsplit("/", 1)[1] for p in node_check.wait_for_files(str(tmp_path / "*.addr"), 2, 30)] == [
        "a.addr", "b.addr"]
    assert time.monotonic() - began < 20, "returned when the second came, not at the deadline"
    began = time.monotonic()
    assert len(node_check.wait_for_files(str(tmp_path / "*.addr"), 3, 0.5)) == 2
    assert 0.4 < time.monotonic() - began < 20


def node_check_config(tmp_path, node_env, **more):
    conf = tmp_path / "nccl.conf"
    conf.write_text("NCCL_SOCKET_IFNAME==eno1\nNCCL_DEBUG=WARN\n")
    env_file = tmp_path / "nccl-g.sh"
    env_file.write_text("NCCL_DEBUG=INFO\n")
    path = tmp_path / "check.json"
    path.write_text(json.dumps({
        **config("ib_single", ipv4_overrides={"eno1": ["127.0.0.1"]}, cluster_addresses={}),
        "cuda_home": str(node_env / "cuda"), "venv": str(node_env / "venv"), "nccl_conf": str(conf),
        "nccl_env_file": str(env_file), "connect_timeout": 5, "gpus_per_node": 0, **more}))
    return path


def test_every_node_reaches_every_other_and_the_first_gathers_what_all_found(node_check, node_env, tmp_path):
    program = str(Path(node_check.__file__).parent / "node_check.py")
    results = tmp_path / "results"
    results.mkdir()
    # A third node whose port nothing listens on any more: the others name it unreachable.
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    (results / "n3.addr").write_text(json.dumps({"node": "n3", "address": "127.0.0.1", "port": port}))
    (results / "n3.json").write_text(json.dumps({"node": "n3"}))
    cfg = node_check_config(tmp_path, node_env)
    env = {**os.environ, "HOME": str(tmp_path), "SLURM_JOB_NUM_NODES": "3"}
    procs = [subprocess.Popen([sys.executable, program, "--config", str(cfg), "--results", str(results)],
                              env={**env, "SLURMD_NODENAME": node, "SLURM_NODEID": node_id},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for node, node_id in (("n1", "0"), ("n2", "1"))]
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert (proc.returncode, err) == (0, ""), (out, err)
    gathered = json.loads((results / "all.json").read_text())
    assert gathered["nodes"] == 3 and [r["node"] for r in gathered["results"]] == ["n1", "n2", "n3"]
    n1 = gathered["results"][0]
    assert (n1["cuda"], n1["python"], n1["gpu"]) == ("release 12.4", f"torch 2.3.0 ({node_env}/venv/bin/python)", {})
    assert (n1["interface"], n1["socket_ifname"], n1["address"], n1["peers_seen"]) == ("eno1", "=eno1", "127.0.0.1", 3)
    assert n1["job"] == {"NCCL_SOCKET_IFNAME": "=eno1", "NCCL_DEBUG": "INFO"} and n1["nccl_env_file_found"] is True
    assert n1["conf"] == {"NCCL_SOCKET_IFNAME": "=eno1", "NCCL_DEBUG": "WARN"} and n1["user_conf"] is None
    assert n1["reach"]["n2"] == "" and set(n1["reach"]) == {"n2", "n3"}
    assert n1["reach"]["n3"].startswith(f"127.0.0.1:{port}: ") and "refused" in n1["reach"]["n3"]
    assert json.loads((results / "n2.json").read_text())["reach"]["n1"] == ""
    assert sorted(p.name for p in results.iterdir()) == ["all.json", "n1.addr", "n1.json", "n2.addr", "n2.json",
                                                         "n3.addr", "n3.json"], "no partial file is left"


def test_a_node_alone_names_itself_from_its_host_name_and_a_rerun_gathers_again(node_check, node_env, tmp_path,
                                                                                 monkeypatch):
    (tmp_path / ".nccl.conf").write_text("NCCL_IB_HCA=mlx5_0\n")
    cfg = node_check_config(tmp_path, node_env, nccl_env_file="")
    results = tmp_path / "results"
    for key in ("SLURMD_NODENAME", "SLURM_JOB_NUM_NODES", "SLURM_NODEID", "NCCL_CONF_FILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(node_check.socket, "gethostname", lambda: "cn01.cluster.example")
    monkeypatch.setattr(sys, "argv", ["node_check.py", "--config", str(cfg), "--results", str(results)])
    for _ in range(2):
        assert node_check.main() == 0
        gathered = json.loads((results / "all.json").read_text())
        assert gathered["nodes"] == 1 and [r["node"] for r in gathered["results"]] == ["cn01"]
    found = gathered["results"][0]
    assert (found["nccl_env_file_found"], found["reach"], found["peers_seen"]) == (True, {}, 1)
    assert found["user_conf"] == {"path": str(tmp_path / ".nccl.conf"), "settings": {"NCCL_IB_HCA": "mlx5_0"}}
    assert found["job"] == {"NCCL_SOCKET_IFNAME": "=eno1", "NCCL_DEBUG": "WARN", "NCCL_IB_HCA": "mlx5_0"}


def test_the_env_files_nccl_conf_file_names_the_users_file_and_a_missing_env_file_is_said(node_check, node_env,
                                                                                          tmp_path, monkeypatch):
    (tmp_path / "mine.conf").write_text("NCCL_DEBUG=TRACE\n")
    cfg = node_check_config(tmp_path, node_env)
    (tmp_path / "nccl-g.sh").write_text(f"NCCL_CONF_FILE={tmp_path / 'mine.conf'}\n")
    results = tmp_path / "results"
    monkeypatch.setenv("SLURMD_NODENAME", "n1")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "1")
    monkeypatch.setenv("HOME", str(tmp_path / "nohome"))
    monkeypatch.setattr(sys, "argv", ["node_check.py", "--config", str(cfg), "--results", str(results)])
    assert node_check.main() == 0
    found = json.loads((results / "n1.json").read_text())
    assert found["user_conf"] == {"path": str(tmp_path / "mine.conf"), "settings": {"NCCL_DEBUG": "TRACE"}}
    (tmp_path / "nccl-g.sh").unlink()
    assert node_check.main() == 0
    found = json.loads((results / "n1.json").read_text())
    assert found["nccl_env_file_found"] is False and found["user_conf"] is None


def test_without_a_cluster_address_the_cluster_network_names_the_socket_interface(node_check, monkeypatch):
    monkeypatch.setattr(node_check, "ipv4_addresses", lambda: dict(DGX_ADDRESSES))
    found = node_check.detect_network(config("dgx_h100", cluster_addresses={}, cluster_cidr="10.77.0.0/16"), "dgx1")
    assert found["proposed"]["NCCL_SOCKET_IFNAME"] == "=enp41s0f0np0"


def test_a_long_python_error_is_kept_to_its_end(node_check, node_env):
    executable(node_env / "venv" / "bin" / "python", f"#!/bin/sh\necho '{'i' * 300}ImportError' >&2\nexit 1\n")
    found = node_check.check_python(settings(node_env, venv=str(node_env / "venv")))
    assert found["python_error"] == ("i" * 300 + "ImportError")[-200:]


def test_help_opens_with_what_the_check_does(node_check, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["node_check.py", "--help"])
    with pytest.raises(SystemExit):
        node_check.main()
    out = " ".join(capsys.readouterr().out.split())
    assert "A preflight's checks of one node, run by Slurm as one task per node of a short job (srun)" in out


def test_on_a_gpu_job_the_nccl_of_the_jobs_torch_decides_the_proposal(node_check, node_env, tmp_path, monkeypatch):
    cfg = node_check_config(tmp_path, node_env, gpus_per_node=8, nccl_version="")
    results = tmp_path / "results"
    monkeypatch.setenv("SLURMD_NODENAME", "n1")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "1")
    monkeypatch.setattr(sys, "argv", ["node_check.py", "--config", str(cfg), "--results", str(results)])
    assert node_check.main() == 0
    found = json.loads((results / "n1.json").read_text())
    assert found["gpu"]["nccl"] == "2.21.5" and found["network"]["nccl_version"] == "2.21.5"
