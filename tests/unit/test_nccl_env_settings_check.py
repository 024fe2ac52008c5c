"""The preflight's take of the nccl_env role's settings (tasks_from: settings.yml, on the submit
host) refuses the bad values provision.yml refuses, in its words: types and choices by Ansible's
role-argument validation of the `settings` entry point (the main entry point's definitions), paths
and values by the rules validate.yml applies. Run as the preflight runs them: ansible-playbook,
the role included with tasks_from, the values given with -e."""

import pytest

from conftest import failed_task, run_role_tasks

PATH_RULE = "is not allowed: an absolute path of letters, digits, '_', '.', '+', '-' and '/', without '..'"
BAD = {"nccl_env_ipv4_addresses": {"eth0": "10.0.0.1"}, "nccl_env_cluster_cidr": "10.77.0.0/33",
       "nccl_env_nccl_version": "latest", "nccl_env_sysfs_root": "/sys/../proc"}
PROBLEMS = [
    f"nccl_env_sysfs_root='/sys/../proc' {PATH_RULE}",
    "nccl_env_ipv4_addresses['eth0']='10.0.0.1' is not a list of IPv4 addresses; give a list, as {\"eth0\": [\"10.0.0.1\"]}",
    "nccl_env_cluster_cidr='10.77.0.0/33' is no IPv4 network; give it empty or as 10.77.0.0/24",
    "nccl_env_nccl_version='latest' is no NCCL version; give it empty or as 2.21.5",
]


@pytest.mark.parametrize(("tasks_from", "task"), [
    ("settings", "Check the NCCL settings the preflight's node check applies."),
    ("validate", "Check the NCCL role's settings and the inventory's."),  # provision.yml's
])
def test_the_preflight_and_provision_refuse_bad_values_naming_each_and_what_would_be_right(tmp_path, tasks_from,
                                                                                            task):
    rc, out = run_role_tasks(tmp_path, "nccl_env", tasks_from, **BAD)
    assert rc != 0, out
    failed, message = failed_task(out)
    assert failed.startswith(f"TASK [hpc.slurm_train.nccl_env : {task}]"), out
    assert message == "; ".join(PROBLEMS), message


def test_the_preflights_settings_take_good_values(tmp_path):
    rc, out = run_role_tasks(tmp_path, "nccl_env", "settings", nccl_env_ipv4_addresses={"eth0": ["10.77.0.1"]},
                       nccl_env_cluster_cidr="10.77.0.0/24", nccl_env_nccl_version="2.21.5",
                       nccl_env_sysfs_root="/srv/sysfs+recorded", nccl_env_prefer_gid_type="IB/RoCE v1")
    assert rc == 0, out
    assert "TASK [hpc.slurm_train.nccl_env : Check the NCCL settings the preflight's node check applies.]" in out


def test_a_wrong_type_or_choice_is_refused_as_provision_refuses_it(tmp_path):
    wrong = {"nccl_env_prefer_gid_type": "RoCE v3", "nccl_env_ipv4_addresses": ["10.0.0.1"],
             "nccl_env_exclude_interfaces": {"lo": 1}}
    words = ["value of nccl_env_prefer_gid_type must be one of: RoCE v2, IB/RoCE v1, got: RoCE v3",
             "argument 'nccl_env_ipv4_addresses' is of type list and we were unable to convert to dict",
             "argument 'nccl_env_exclude_interfaces' is of type dict and we were unable to convert to list"]
    for tasks_from, entry_point in (("settings", "settings"), (None, "main")):
        rc, out = run_role_tasks(tmp_path, "nccl_env", tasks_from, **wrong)
        assert rc != 0, out
        assert f"Validating arguments against arg spec '{entry_point}'" in out, out
        for said in words:
            assert said in out, (entry_point, out[-3000:])
        # Refused before the role's own tasks.
        assert "Check the NCCL" not in out and "Detect the node" not in out, out
