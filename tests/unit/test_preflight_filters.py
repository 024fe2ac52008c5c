"""roles/slurm_launch/filter_plugins/preflight.py: the preflight's problems and rows, gathered
from the facts each node's checks left."""
import importlib.util
from pathlib import Path

PLUGIN = Path(__file__).resolve().parents[2] / "roles" / "slurm_launch" / "filter_plugins" / "preflight.py"
spec = importlib.util.spec_from_file_location("preflight_filters", PLUGIN)
preflight = importlib.util.module_from_spec(spec)
spec.loader.exec_module(preflight)

CHECKED = {
    "_slurm_launch_preflight_problems": [],
    "_slurm_launch_preflight_found": {"cuda": "release 11.8", "python": "torch 2.13.0 (/nas/envs/x/bin/python)"},
    "_nccl_env_check": {"interface": "eth0", "address": "10.0.0.1"},
    "_nccl_env_check_reach": {"results": [{"item": "n2", "state": "started"}, {"item": "n3", "msg": "Timeout"}]},
    "_nccl_env_check_problems": ["n1 cannot reach n3 at its eth0 address within 5 s"],
}


def test_every_node_problem_is_kept_and_a_node_that_was_not_checked_is_named():
    hostvars = {"n1": {**CHECKED, "_nccl_env_check_group_problems": ["group g: NCCL_IB_HCA differs"]},
                "n2": {**CHECKED, "_slurm_launch_preflight_problems": ["n2: CUDA: nvcc failed"],
                       "_nccl_env_check_problems": []},
                "n3": {}}
    problems = preflight.preflight_problems(["n1", "n2", "n3"], hostvars)
    assert problems == ["n1 cannot reach n3 at its eth0 address within 5 s", "n2: CUDA: nvcc failed",
                        "n3: its checks did not run (not reachable over SSH, or its facts could not be gathered): "
                        "see the errors above", "group g: NCCL_IB_HCA differs"]


def test_a_row_says_what_the_job_will_use_and_how_many_peers_answered():
    rows = preflight.preflight_rows(["n1", "n2", "n3"], {"n1": CHECKED, "n2": {}, "n3": {}})
    assert rows[0] == {"node": "n1", "checks": "CUDA release 11.8; torch 2.13.0 (/nas/envs/x/bin/python); "
                                              "sockets eth0 10.0.0.1; reaches 1 of 2 nodes"}
    assert rows[1] == {"node": "n2", "checks": "not checked"}
