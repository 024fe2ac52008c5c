"""plugins/filter/preflight.py: the preflight's problems and rows, from the
records the node checks (files/preflight/node_check.py, run by Slurm on each node) write. The
records here are shaped as node_check.py writes them; test_node_check.py runs it for real."""
from pathlib import Path

import pytest

from ansible_collections.hpc.slurm_train.plugins.filter import preflight

ETH0 = {"name": "eth0", "operstate": "up", "type": 1, "ipv4": ["10.0.0.1"], "virtual": False}


def record(node, **overrides):
    network = {"hcas": [], "interfaces": [{**ETH0, "ipv4": [f"10.0.0.{node[-1]}"]}], "proposed": {}, "warnings": []}
    base = {"node": node, "cuda": "release 11.8", "cuda_error": "", "python": "torch 2.13.0 (/nas/envs/x/bin/python)",
            "python_error": "", "nccl_env_file_found": True, "conf": {"NCCL_SOCKET_IFNAME": "eth0"},
            "job": {"NCCL_SOCKET_IFNAME": "eth0"}, "network": network, "interface": "eth0",
            "address": f"10.0.0.{node[-1]}", "reach": {}, "peers_seen": 3}
    return {**base, **overrides}


CONTEXT = {"check_job": {"job_id": 41, "state": "FAILED", "exit_code": 1, "log_tail": ["a", "b", "python3: not found"]},
           "cuda_home": "/nas/cuda/cuda-11.8", "env": "conda env x of /nas/anaconda3",
           "nccl_env_file": "/nas/env/nccl-g.sh", "nccl_conf": "/etc/nccl.conf", "node_groups": ["g", "g", "g"],
           "connect_timeout": 5}


def test_a_healthy_set_of_nodes_has_no_problem():
    found = [record("n1", reach={"n2": "", "n3": ""}), record("n2", reach={"n1": "", "n3": ""}),
             record("n3", reach={"n1": "", "n2": ""})]
    assert preflight.preflight_problems(found, ["n1", "n2", "n3"], CONTEXT) == []


def test_every_node_problem_is_named_with_its_fix_and_a_node_that_did_not_report_is_named_with_the_jobs_end():
    found = [record("n1", reach={"n2": "", "n3": "10.0.0.3:40001: timed out"}),
             record("n2", cuda="", cuda_error="nvcc: No such file or directory", python="",
                    python_error="ModuleNotFoundError: No module named 'torch'", nccl_env_file_found=False)]
    problems = preflight.preflight_problems(found, ["n1", "n2", "n3"], CONTEXT)
    assert problems == [
        "n3: the node check did not report (job 41 ended FAILED, exit code 1; its log ends: a | b | python3: not found)",
        "n1 cannot reach n3 at its eth0 address within 5 s (10.0.0.3:40001: timed out: a firewall, a wrong "
        "NCCL_SOCKET_IFNAME, or a route missing between the nodes?)",
        "n2: CUDA: /nas/cuda/cuda-11.8/bin/nvcc --version failed (nvcc: No such file or directory); run provision.yml, "
        "or set cluster_cuda_home to the toolkit every node sees",
        "n2: Python env: conda env x of /nas/anaconda3 does not activate or import torch (ModuleNotFoundError: No module "
        "named 'torch'); run provision.yml, or check conda_environment_file",
        "n2: NCCL env: /nas/env/nccl-g.sh, which the job sources, is missing; run provision.yml",
    ]


def test_nccl_settings_are_judged_by_the_nccl_env_roles_rules_naming_the_node():
    found = [record("n1"), record("n2", job={"NCCL_SOCKET_IFNAME": "ib0"}, interface="ib0")]
    problems = preflight.preflight_problems(found, ["n1", "n2"], {**CONTEXT, "node_groups": ["g", "g"]})
    assert any(p.startswith("n2: NCCL_SOCKET_IFNAME names ib0, which n2 does not have up (up: eth0)") for p in problems), \
        problems
    missing_conf = preflight.preflight_problems([record("n1", conf=None)], ["n1"], {**CONTEXT, "node_groups": ["g"]})
    assert "n1: /etc/nccl.conf is missing (NCCL reads it on every node); run provision.yml" in missing_conf


def test_what_the_launch_does_not_use_is_not_checked():
    found = [record("n1", cuda="", python="", nccl_env_file_found=False)]
    context = {**CONTEXT, "cuda_home": "", "env": "", "nccl_env_file": "", "node_groups": ["g"]}
    assert preflight.preflight_problems(found, ["n1"], context) == []


def test_a_row_says_what_the_job_will_use_and_how_many_peers_answered():
    found = [record("n1", reach={"n2": "", "n3": "refused"}), record("n2", interface="", reach={"n1": ""}, cuda="")]
    rows = preflight.preflight_rows(found, ["n1", "n2", "n3"])
    assert rows == [
        {"node": "n1", "checks": "CUDA release 11.8; torch 2.13.0 (/nas/envs/x/bin/python); sockets eth0 10.0.0.1; "
                                 "reaches 1 of 2 nodes"},
        {"node": "n2", "checks": "torch 2.13.0 (/nas/envs/x/bin/python); sockets (NCCL chooses) 10.0.0.2; "
                                 "reaches 1 of 2 nodes"},
        {"node": "n3", "checks": "not checked (the node check did not report)"},
    ]


def test_node_groups_are_the_nccl_env_roles():
    groups = {"all": ["n1", "login"], "compute": ["n1"], "gpu_A6000": ["n1"], "submit": ["login"]}
    hostvars = {"n1": {"group_names": ["compute", "gpu_A6000"]}}
    assert preflight.preflight_node_groups(["n1"], hostvars, groups) == ["gpu_A6000"]


def test_a_failed_check_job_is_named_with_slurms_message_and_the_last_three_lines_of_its_log():
    msg = "Slurm job 41 ended in state FAILED (exit code 1, signal 0, reason NonZeroExitCode)"
    job = {"job_id": 41, "state": "FAILED", "exit_code": 1, "msg": msg,
           "log_tail": ["+ source /nas/env/nccl-g.sh", "+ srun python3 node_check.py", "a", "b", "python3: not found"]}
    problems = preflight.preflight_problems([], ["n1", "n2"], {**CONTEXT, "check_job": job, "node_groups": ["g", "g"]})
    assert problems == [f"n1, n2: the node check did not report (job 41 ended FAILED, exit code 1: {msg}; "
                        "its log ends: a | b | python3: not found)"]


def test_a_long_error_is_cut_to_its_last_160_characters():
    # node_check.py keeps an error's last 200 characters (as here); the message shows the last 160.
    cuda_error = ("/nas/cuda/cuda-11.8/bin/nvcc: error while loading shared libraries: libcudart.so.11.0: "
                  "cannot open shared object file: No such file or directory (LD_LIBRARY_PATH=/nas/cuda/cuda-11.8/"
                  "lib64:/usr/lib)")[-200:]
    python_error = ("Traceback (most recent call last):\n  File \"<string>\", line 1, in <module>\n  File \"/nas/envs/x/"
                    "lib/python3.11/site-packages/torch/__init__.py\", line 237, in <module>\nImportError: "
                    "libcudnn.so.8: cannot open shared object file")[-200:]
    assert len(cuda_error) > 160 and len(python_error) > 160
    found = [record("n1", cuda="", cuda_error=cuda_error, python="", python_error=python_error)]
    problems = preflight.preflight_problems(found, ["n1"], {**CONTEXT, "node_groups": ["g"]})
    assert problems[:2] == [
        f"n1: CUDA: /nas/cuda/cuda-11.8/bin/nvcc --version failed ({cuda_error[-160:]}); run provision.yml, or set "
        "cluster_cuda_home to the toolkit every node sees",
        f"n1: Python env: conda env x of /nas/anaconda3 does not activate or import torch ({python_error[-160:]}); "
        "run provision.yml, or check conda_environment_file"]


def test_a_node_after_one_that_did_not_report_is_still_checked_and_listed():
    found = [record("n2", cuda="", cuda_error="nvcc: not found")]
    problems = preflight.preflight_problems(found, ["n1", "n2"], {**CONTEXT, "node_groups": ["g", "g"]})
    assert [p.split(":")[0] for p in problems] == ["n1", "n2"]
    rows = preflight.preflight_rows(found, ["n1", "n2"])
    assert [row["node"] for row in rows] == ["n1", "n2"] and rows[1]["checks"].startswith("torch 2.13.0")


def test_a_record_that_names_no_node_is_no_nodes():
    # As from a node_check.py of another version: the fields, but no "node".
    stray = {key: value for key, value in record("n1").items() if key != "node"}
    problems = preflight.preflight_problems([stray, record("n2")], ["n1", "n2"], {**CONTEXT, "node_groups": ["g", "g"]})
    assert problems[0].startswith("n1: the node check did not report")


def test_without_node_groups_the_nodes_are_judged_as_of_no_group():
    found = [record("n1"), record("n2", job={"NCCL_SOCKET_IFNAME": "ib0"}, interface="ib0")]
    context = {key: value for key, value in CONTEXT.items() if key != "node_groups"}
    problems = preflight.preflight_problems(found, ["n1", "n2"], context)
    assert problems == preflight.preflight_problems(found, ["n1", "n2"], {**context, "node_groups": ["", ""]})
    assert any(p.startswith("n2: NCCL_SOCKET_IFNAME names ib0") for p in problems), problems


def test_a_node_in_two_node_groups_has_none_unless_its_nccl_env_group_chooses_as_provision_refuses_it():
    groups = {"all": ["n1", "n2", "login"], "compute": ["n1", "n2"], "gpu_A6000": ["n1"], "gpu_all": ["n1", "n2"],
              "submit": ["login"]}
    hostvars = {"n1": {"group_names": ["compute", "gpu_A6000", "gpu_all"]}, "n2": {"group_names": ["compute", "gpu_all"]},
                "login": {"group_names": ["submit"]}}
    assert preflight.preflight_node_groups(["n1", "n2", "login"], hostvars, groups) == ["", "gpu_all", ""]
    hostvars["n1"]["nccl_env_group"] = "gpu_A6000"
    assert preflight.preflight_node_groups(["n1", "n2"], hostvars, groups) == ["gpu_A6000", "gpu_all"]


def gpu(**overrides):
    """A node check's GPU record (gpu_check.py --facts): 2 GPUs, torch built for CUDA 11.8."""
    base = {"drivers": ["535.104.05"] * 2, "driver_error": "", "cuda_home": "/nas/cuda/cuda-11.8", "toolkit": [11, 8],
            "toolkit_error": "", "torch": "2.1.2", "torch_cuda": "11.8", "cuda_available": True, "device_count": 2,
            "nccl": "2.18.1"}
    return {**base, **overrides}


def test_the_table_shows_each_nodes_driver_gpus_cuda_and_nccl():
    found = [record("n1", gpu=gpu()), record("n2", gpu=gpu(drivers=["550.54.14"] * 2, nccl="2.19.3"))]
    rows = {row["node"]: row["checks"] for row in preflight.preflight_rows(found, ["n1", "n2"])}
    assert "driver 535.104.05, 2 GPUs, torch sees 2, CUDA 11.8, NCCL 2.18.1" in rows["n1"]
    assert "driver 550.54.14, 2 GPUs, torch sees 2, CUDA 11.8, NCCL 2.19.3" in rows["n2"]


def test_a_gpu_mismatch_is_a_problem_of_its_node_only_on_a_gpu_job():
    found = [record("n1", gpu=gpu()), record("n2", gpu=gpu(torch_cuda="", cuda_available=False, device_count=0))]
    context = {**CONTEXT, "node_groups": ["g", "g"], "gpus_per_node": 2}
    (problem,) = preflight.preflight_problems(found, ["n1", "n2"], context)
    assert problem.startswith("n2: GPU: torch 2.1.2 is a CPU build (torch.version.cuda is None)")
    assert preflight.preflight_problems(found, ["n1", "n2"], {**context, "gpus_per_node": 0}) == []
    fewer = preflight.preflight_problems([record("n1", gpu=gpu(device_count=1))], ["n1"],
                                         {**context, "node_groups": ["g"]})
    assert fewer and fewer[0].startswith("n1: GPU: torch sees 1 GPUs, the job asked for 2 per node")


def test_a_host_override_names_its_node_as_the_odd_one_as_provision_does():
    # n2's nccl.conf was written from its own nccl_env_host_overrides; n1 has the group's value.
    found = [record("n1", conf={"NCCL_DEBUG": "WARN"}, job={"NCCL_DEBUG": "WARN"}),
             record("n2", conf={"NCCL_DEBUG": "INFO"}, job={"NCCL_DEBUG": "WARN"})]
    context = {**CONTEXT, "node_groups": ["g", "g"], "nccl_overrides": {"n1": {"NCCL_DEBUG": "WARN"},
                                                                      "n2": {"NCCL_DEBUG": "WARN"}},
               "nccl_host_overrides": {"n2": {"NCCL_DEBUG": "INFO"}}}
    problems = preflight.preflight_problems(found, ["n1", "n2"], context)
    assert problems == ["group g: NCCL_DEBUG differs between its nodes (n1=WARN, n2=INFO); n2 is the odd one: its "
                        "nccl_env_host_overrides sets NCCL_DEBUG=INFO, which the rest of its group does not share "
                        "(in /etc/nccl.conf; provision.yml writes it anew)"]
    # Without the inventory's overrides a two-node tie names both sides.
    tie = preflight.preflight_problems(found, ["n1", "n2"], {**CONTEXT, "node_groups": ["g", "g"]})
    assert len(tie) == 1 and "every side (n1, n2) is named" in tie[0], tie


def test_the_nodes_cluster_addresses_and_overrides_are_read_as_the_nccl_env_role_reads_them():
    nccl_env = preflight._nccl_env
    hostvars = {"n1": {"ansible_host": "10.0.0.1"}, "n2": {"nccl_env_cluster_address": "n2.cluster",
                                                             "ansible_host": "192.168.1.2"}, "n3": {},
                "n4": {"nccl_env_host_overrides": {"NCCL_DEBUG": "INFO"}}}
    assert nccl_env.nccl_env_cluster_addresses(["n1", "n2", "n3"], hostvars) == {
        "n1": "10.0.0.1", "n2": "n2.cluster", "n3": "n3"}
    assert nccl_env.nccl_env_node_overrides(["n3", "n4"], hostvars, "nccl_env_host_overrides") == {
        "n3": {}, "n4": {"NCCL_DEBUG": "INFO"}}
    assert nccl_env.nccl_env_node_overrides(["n4"], hostvars) == {"n4": {}}


def test_a_row_names_the_interface_as_ip_shows_it_and_the_setting_as_nccl_conf_spells_it():
    # node_check.py's record: the interface NCCL_SOCKET_IFNAME selects, and the setting as read.
    found = [record("n1", interface="eth0", socket_ifname="=eth0"),
             record("n2", interface="eth0", socket_ifname="eth"),
             record("n3", interface="", socket_ifname="^docker")]
    rows = {row["node"]: row["checks"] for row in preflight.preflight_rows(found, ["n1", "n2", "n3"])}
    assert "; sockets eth0 10.0.0.1 (NCCL_SOCKET_IFNAME==eth0); " in rows["n1"], rows
    assert "; sockets eth0 10.0.0.2 (NCCL_SOCKET_IFNAME=eth); " in rows["n2"], rows
    assert "; sockets (NCCL chooses) 10.0.0.3 (NCCL_SOCKET_IFNAME=^docker); " in rows["n3"], rows


def test_the_interface_a_socket_setting_selects():
    nccl_env = preflight._nccl_env
    network = {"interfaces": [{**ETH0, "name": "eth01", "ipv4": ["10.9.0.1"]}, ETH0,
                              {**ETH0, "name": "eth1", "operstate": "down", "ipv4": ["10.8.0.1"]}]}
    assert nccl_env.nccl_env_socket_interface({"NCCL_SOCKET_IFNAME": "=eth0"}, network) == ("eth0", "10.0.0.1")
    # Without "=" a prefix: eth01 comes first and matches.
    assert nccl_env.nccl_env_socket_interface({"NCCL_SOCKET_IFNAME": "eth0"}, network) == ("eth01", "10.9.0.1")
    assert nccl_env.nccl_env_socket_interface({"NCCL_SOCKET_IFNAME": "=eth1"}, network) == (None, None)
    assert nccl_env.nccl_env_socket_interface({"NCCL_SOCKET_IFNAME": "^eth1"}, network) == (None, None)
    assert nccl_env.nccl_env_socket_interface({}, network) == (None, None)
    assert nccl_env.nccl_env_socket_address({"NCCL_SOCKET_IFNAME": "=eth0"}, network) == "10.0.0.1"


def test_a_hand_edited_nccl_conf_names_its_node_alone_for_every_key_it_differs_on():
    # n2's /etc/nccl.conf names an HCA n2 lacks and enables IB; n1's is what provision.yml wrote.
    hca = {"name": "mlx5_0", "ports": [{"port": 1, "active": True, "state": "ACTIVE", "link_layer": "InfiniBand"}]}
    written = {"NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": "=mlx5_0:1", "NCCL_SOCKET_IFNAME": "eth0"}
    edited = {"NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": "=mlx5_3:1", "NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_GID_INDEX": "3"}
    found = []
    for name, conf in (("n1", written), ("n2", edited)):
        rec = record(name, conf=conf, job=conf)
        rec["network"] = {**rec["network"], "hcas": [hca]}
        found.append(rec)
    problems = preflight.preflight_problems(found, ["n1", "n2"], {**CONTEXT, "node_groups": ["g", "g"]})
    assert problems == [
        "n2: NCCL_IB_HCA names mlx5_3:1, which n2 does not have as an active port (active: mlx5_0:1; HCAs: mlx5_0) "
        "(in /etc/nccl.conf; provision.yml writes it anew)",
        "group g: NCCL_IB_GID_INDEX differs between its nodes (n1=(unset), n2=3); n2 is the odd one: its own check "
        "failed on NCCL_IB_HCA (in /etc/nccl.conf; provision.yml writes it anew)",
        "group g: NCCL_IB_HCA differs between its nodes (n1==mlx5_0:1, n2==mlx5_3:1); n2 is the odd one: its own "
        "check of NCCL_IB_HCA failed, above (in /etc/nccl.conf; provision.yml writes it anew)"]
    assert not any("n1" in problem.split(";")[-1] for problem in problems), problems


# --- The all-reduce's result against the nodes' settings: rank 0's NCCL log and the busbw floor ---
_FACTS = preflight._facts
_SYSFS = Path(__file__).resolve().parent / "fixtures" / "sysfs"


def dgx_record(node, tree="dgx_h100", job=None):
    root = str(_SYSFS / tree)
    network = {"hcas": _FACTS.read_hcas(root), "gpus": _FACTS.read_gpus(root), "interfaces": []}
    return record(node, network=network, job=job or {"NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": "=mlx5_0:1"})


def allreduce(node="dgx1", network="IB", gdrdma=True, busbw=(0.5, 20.0), backend="nccl", lines=()):
    sizes = (16777216, 268435456)
    return {"world_size": 16, "backend": backend, "node": node,
            "nccl": {"network": network, "gdrdma": gdrdma, "lines": list(lines)} if backend == "nccl" else None,
            "results": [{"size": size, "busbw": bw, "wrong": 0} for size, bw in zip(sizes, busbw)]}


GPU_CONTEXT = {"gpus_per_node": 8, "min_busbw_gbps": ""}


def test_a_gpu_job_whose_nccl_fell_back_to_sockets_names_rank_0s_node_and_net_socket():
    lines = ["NCCL INFO NET/IB : No device found.", "NCCL INFO NET/Socket : Using [0]eth0:10.77.0.110<0>",
             "NCCL INFO Using network Socket"]
    problems = preflight.preflight_allreduce_problems(allreduce(network="Socket", gdrdma=False, lines=lines),
                                                      [dgx_record("dgx1"), dgx_record("dgx2")], GPU_CONTEXT)
    assert problems == [
        "dgx1: the all-reduce's NCCL used NET/Socket, not NET/IB, though NCCL_IB_DISABLE=0 and dgx1 has active "
        "ports (mlx5_0:1, mlx5_1:1, mlx5_2:1, mlx5_3:1, ...): a training would run at socket speed (rank 0's NCCL: "
        "NCCL INFO NET/IB : No device found. | NCCL INFO NET/Socket : Using [0]eth0:10.77.0.110<0>); check "
        "NCCL_IB_HCA, the rdma-core libraries in the training env (libibverbs.so.1) and /dev/infiniband in the job"]


def test_net_ib_with_gdrdma_passes_and_without_it_on_a_switched_node_is_named():
    found = [dgx_record("dgx1"), dgx_record("dgx2")]
    assert preflight.preflight_allreduce_problems(allreduce(), found, GPU_CONTEXT) == []
    (problem,) = preflight.preflight_allreduce_problems(allreduce(gdrdma=False), found, GPU_CONTEXT)
    assert problem.startswith("dgx1: the all-reduce's NCCL used NET/IB without GPUDirect RDMA")
    # A GB200 tray's HCAs share no PCIe switch with its GPUs: GDRDMA is not what this check expects.
    tray = [dgx_record("dgx1", tree="gb200_tray")]
    assert preflight.preflight_allreduce_problems(allreduce(gdrdma=False), tray, GPU_CONTEXT) == []


def test_sockets_by_choice_and_cpu_jobs_are_not_judged_by_the_log():
    sockets = [dgx_record("dgx1", job={"NCCL_IB_DISABLE": "1"})]
    assert preflight.preflight_allreduce_problems(allreduce(network="Socket", gdrdma=False), sockets,
                                                  GPU_CONTEXT) == []
    assert preflight.preflight_allreduce_problems(allreduce(backend="gloo"), [dgx_record("dgx1")],
                                                  {"gpus_per_node": 0}) == []


def test_efa_without_its_plugin_is_named():
    (problem,) = preflight.preflight_allreduce_problems(
        allreduce(node="p5", network="Socket", gdrdma=False),
        [dgx_record("p5", tree="aws_p5", job={"NCCL_IB_DISABLE": "1"})], GPU_CONTEXT)
    assert problem.startswith("p5: the all-reduce's NCCL used NET/Socket though p5 has RDMA devices")
    assert "aws-ofi-nccl" in problem


@pytest.mark.parametrize("floor, failing", [("", False), (100, False), (160, False), (161, True), ("400", True)])
def test_the_bus_bandwidth_floor_is_held_against_the_large_sizes_in_gbps(floor, failing):
    # 20 GB/s at 256 MiB is 160 Gb/s; the 16 MiB row (0.5 GB/s) does not count.
    problems = preflight.preflight_allreduce_problems(allreduce(), [dgx_record("dgx1")],
                                                      {"gpus_per_node": 8, "min_busbw_gbps": floor})
    assert bool(problems) == failing, problems
    if failing:
        assert problems == [f"the all-reduce's bus bandwidth, 160.0 Gb/s at 268435456 bytes (16 ranks, nccl), is "
                            f"below the group's floor of {float(floor):g} Gb/s (slurm_launch_preflight_min_busbw_gbps): "
                            "a slow or wrong network path"]


def test_a_conf_naming_a_missing_hca_under_an_env_file_that_disables_ib_names_its_node_alone():
    # The local cluster's case: the group's env file says NCCL_IB_DISABLE=1, so a job reads no
    # HCA; node111's hand-edited nccl.conf enables IB and names mlx5_0:1, which it lacks.
    env_file = {"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "=eth0"}
    written = {"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "=eth0"}
    edited = {"NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": "=mlx5_0:1", "NCCL_SOCKET_IFNAME": "=eth0"}
    found = [record("node110", conf=written, job={**written, **env_file}),
             record("node111", conf=edited, job={**edited, **env_file})]
    problems = preflight.preflight_problems(found, ["node110", "node111"], {**CONTEXT, "node_groups": ["g", "g"]})
    assert problems[0] == ("node111: NCCL_IB_HCA names mlx5_0:1, which node111 does not have as an active port "
                           "(active: none; HCAs: none) (in /etc/nccl.conf; provision.yml writes it anew)")
    # As a job reads it, NCCL_IB_HCA differs the same way: said once.
    assert len(problems) == 3, problems
    assert all("node111 is the odd one" in problem for problem in problems[1:]), problems
    assert not any("every side" in problem or "check node110" in problem for problem in problems), problems


def test_a_users_nccl_conf_is_shown_in_the_nodes_row():
    found = [record("n1", user_conf={"path": "/home/alice/.nccl.conf", "settings": {"NCCL_IB_HCA": "=mlx5_9:1"}}),
             record("n2")]
    rows = {row["node"]: row["checks"] for row in preflight.preflight_rows(found, ["n1", "n2"])}
    assert "; /home/alice/.nccl.conf sets NCCL_IB_HCA; reaches" in rows["n1"]
    assert ".nccl.conf" not in rows["n2"]


def sized(*rows, node="dgx1"):
    return {**allreduce(node=node), "results": [{"size": size, "busbw": bw, "wrong": 0} for size, bw in rows]}


def test_the_floor_counts_a_row_of_exactly_256_mib_and_not_one_a_byte_smaller():
    big = 256 * 2**20
    context = {"gpus_per_node": 8, "min_busbw_gbps": 100}
    # 20 GB/s (160 Gb/s) at 256 MiB passes though the 1 GiB row ran at 5 GB/s (40 Gb/s).
    assert preflight.preflight_allreduce_problems(sized((big, 20.0), (4 * big, 5.0)), [dgx_record("dgx1")],
                                                  context) == []
    (problem,) = preflight.preflight_allreduce_problems(sized((big - 1, 20.0), (4 * big, 5.0)), [dgx_record("dgx1")],
                                                        context)
    assert problem.startswith("the all-reduce's bus bandwidth, 40.0 Gb/s at 1073741824 bytes"), problem


def test_without_a_row_of_256_mib_the_largest_size_is_held_against_the_floor():
    context = {"gpus_per_node": 8, "min_busbw_gbps": 100}
    (problem,) = preflight.preflight_allreduce_problems(sized((2**20, 20.0), (16 * 2**20, 1.0)), [dgx_record("dgx1")],
                                                        context)
    assert problem.startswith("the all-reduce's bus bandwidth, 8.0 Gb/s at 16777216 bytes"), problem


def test_a_job_without_gpus_is_not_judged_by_its_nccl_log():
    for context in ({"gpus_per_node": 0}, {"gpus_per_node": ""}, {}):
        assert preflight.preflight_allreduce_problems(allreduce(network="Socket", gdrdma=False),
                                                      [dgx_record("dgx1")], context) == [], context


def test_four_active_ports_are_all_named_and_a_fifth_is_an_ellipsis():
    hcas = _FACTS.read_hcas(str(_SYSFS / "dgx_h100"))
    for count, tail in ((4, ""), (5, ", ...")):
        node = dgx_record("dgx1")
        node["network"] = {**node["network"], "hcas": hcas[:count]}
        (problem,) = preflight.preflight_allreduce_problems(allreduce(network="Socket", gdrdma=False), [node],
                                                            GPU_CONTEXT)
        assert f"active ports (mlx5_0:1, mlx5_1:1, mlx5_2:1, mlx5_3:1{tail}): " in problem, problem


def test_virtual_functions_are_no_ports_nccl_should_have_used():
    node = dgx_record("dgx1")
    node["network"] = {**node["network"], "hcas": [{**hca, "virtual_function": True}
                                                   for hca in node["network"]["hcas"]]}
    assert preflight.preflight_allreduce_problems(allreduce(network="Socket", gdrdma=False), [node],
                                                  GPU_CONTEXT) == []


def test_ib_not_disabled_by_the_job_counts_as_enabled():
    node = dgx_record("dgx1", job={"NCCL_IB_HCA": "=mlx5_0:1"})
    (problem,) = preflight.preflight_allreduce_problems(allreduce(network="Socket", gdrdma=False), [node],
                                                        GPU_CONTEXT)
    assert "not NET/IB, though NCCL_IB_DISABLE=0 and dgx1 has" in problem, problem


def test_rank_0s_net_lines_are_quoted_to_their_last_400_characters():
    lines = ["NCCL INFO NET/IB : " + "x" * 300, "NCCL INFO Using network Socket", "NCCL INFO NET/Socket : " + "y" * 200]
    (problem,) = preflight.preflight_allreduce_problems(allreduce(network="Socket", gdrdma=False, lines=lines),
                                                        [dgx_record("dgx1")], GPU_CONTEXT)
    said = " | ".join(line for line in lines if "NET/" in line)[-400:]
    assert f"(rank 0's NCCL: {said}); check" in problem, problem
    assert len(said) == 400 and "x" * 174 in problem and "x" * 176 not in problem


def test_efa_devices_are_named_four_at_most():
    node = dgx_record("p5", tree="aws_p5", job={"NCCL_IB_DISABLE": "1"})
    (problem,) = preflight.preflight_allreduce_problems(allreduce(node="p5", network="Socket", gdrdma=False), [node],
                                                        GPU_CONTEXT)
    names = [hca["name"] for hca in node["network"]["hcas"]]
    assert f"does not use ({', '.join(names[:4])}, ...): a net plugin" in problem, problem
    hcas = node["network"]["hcas"]
    for count, tail in ((4, ""), (5, ", ...")):
        node["network"] = {**node["network"], "hcas": hcas[:count]}
        (problem,) = preflight.preflight_allreduce_problems(allreduce(node="p5", network="Socket", gdrdma=False),
                                                            [node], GPU_CONTEXT)
        assert f"does not use ({', '.join(names[:4])}{tail}): a net plugin" in problem, problem


def test_a_gpu_job_on_a_cpu_backend_has_no_nccl_log_to_judge():
    assert preflight.preflight_allreduce_problems(allreduce(backend="gloo"), [dgx_record("dgx1")], GPU_CONTEXT) == []


def test_a_nodes_own_nccl_env_overrides_name_it_as_the_odd_one():
    found = [record("n1", conf={"NCCL_DEBUG": "WARN"}, job={"NCCL_DEBUG": "WARN"}),
             record("n2", conf={"NCCL_DEBUG": "INFO"}, job={"NCCL_DEBUG": "WARN"})]
    context = {**CONTEXT, "node_groups": ["g", "g"], "nccl_overrides": {"n2": {"NCCL_DEBUG": "INFO"}}}
    (problem,) = preflight.preflight_problems(found, ["n1", "n2"], context)
    assert "n2 is the odd one: its nccl_env_overrides sets NCCL_DEBUG=INFO" in problem, problem


def test_the_table_shows_the_first_gpus_driver_and_torch_seeing_none_when_it_reported_no_count():
    found = [record("n1", gpu={k: v for k, v in gpu(drivers=["535.1", "550.2", "560.3"]).items()
                               if k != "device_count"})]
    (row,) = preflight.preflight_rows(found, ["n1"])
    assert "driver 535.1, 3 GPUs, torch sees 0, CUDA 11.8" in row["checks"], row
