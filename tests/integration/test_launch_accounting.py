"""launch.yml on a cluster of its own with accounting on (slurmdbd + MariaDB) and two
partitions: the job's record comes back from sacct as well, and nodes of two partitions
are refused."""

import json
from datetime import datetime

import pytest

from cluster import eventually, own_cluster
from launch import TRAINER, launch, next_job_id, outputs_of, unique_job_name

HOSTS = """\
    all:
      children:
        submit:
          hosts:
            localhost:
              ansible_connection: local
              ansible_python_interpreter: "{{ ansible_playbook_python }}"
        compute:
          children:
            gpu_acct:
              hosts:
                acct-g1: {ansible_host: 10.85.0.11}
                acct-g2: {ansible_host: 10.85.0.12}
              vars: {cluster_node_gpus: 2, cluster_node_cpus: 4}
            cpu_acct:
              hosts:
                acct-c1: {ansible_host: 10.85.0.21}
              vars: {cluster_node_cpus: 2}
    """


@pytest.fixture(scope="module")
def accounting_cluster(tmp_path_factory):
    with own_cluster(tmp_path_factory.mktemp("acct"), "acct", HOSTS, "10.85.0.0/24", (36817, 36819, 33306),
                     accounting=True) as cluster:
        yield cluster


def test_job_on_an_accounting_cluster_completes_and_sacct_has_it(accounting_cluster, tmp_path):
    name = unique_job_name("acct")
    proc = launch(tmp_path, "nodes=acct-g1,acct-g2", f"script={TRAINER}", "nproc_per_node=1", f"job_name={name}",
                  "slurm_launch_accounting=yes", json.dumps({"script_args": "--steps 4"}),
                  inventory=accounting_cluster.inventory)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    folder, job = outputs_of(tmp_path, name)
    assert (job["state"], job["exit_code"], job["nodes"]) == ("COMPLETED", 0, ["acct-g1", "acct-g2"])
    assert "--gres=gpu:2" in (folder / f"{name}-{job['job_id']}.sbatch").read_text()
    assert "[rank0] world_size=2 backend=gloo" in (folder / f"{name}-{job['job_id']}.out").read_text()
    sacct = eventually(lambda: accounting_cluster.slurm("sacct", "-X", "-n", "-P", "-j", str(job["job_id"]),
                                                        "-o", "JobName,Partition,State,ExitCode").stdout)
    assert sacct == f"{name}|gpu_acct|COMPLETED|0:0\n"
    # It ran once: its cost is slurmctld's record of it, which slurmdbd now holds the same.
    cost = job["cost"]
    state, elapsed, tres, eligible, start = accounting_cluster.slurm(
        "sacct", "-X", "-n", "-P", "-j", str(job["job_id"]), "-o", "State,ElapsedRaw,AllocTRES,Eligible,Start"
    ).stdout.strip().split("|")
    assert cost["source"] == "slurmctld's record of the job", cost
    assert [(a["state"], a["elapsed_seconds"], a["gpus"]) for a in cost["attempts"]] == [(state, int(elapsed), 4)], tres
    assert cost["queue_seconds"] == int((datetime.fromisoformat(start) - datetime.fromisoformat(eligible)).total_seconds())


def test_nodes_of_two_partitions_are_refused(accounting_cluster, tmp_path):
    before = next_job_id(accounting_cluster)
    proc = launch(tmp_path, "nodes=acct-g1,acct-c1", f"script={TRAINER}", inventory=accounting_cluster.inventory)
    assert proc.returncode != 0
    assert "The nodes are not in one partition: acct-g1 is in gpu_acct; acct-c1 is in cpu_acct;" in proc.stdout
    assert next_job_id(accounting_cluster) == before


def test_the_cost_of_a_job_with_one_requeue_is_sacct_s(accounting_cluster, tmp_path):
    """Rank 0 saves at steps 2 and 4 and fails at step 5: requeued once (its checkpoint advanced),
    then stopped NO_PROGRESS. The ledger's figures are sacct's, attempt by attempt."""
    name = unique_job_name("cost")
    proc = launch(tmp_path, "nodes=acct-g1,acct-g2", f"script={TRAINER}", "nproc_per_node=1", f"job_name={name}",
                  "slurm_launch_accounting=yes", "max_restarts=2",
                  json.dumps({"script_args": "--steps 20 --checkpoint-every 2 --fail-rank 0 --fail-at-step 5"}),
                  inventory=accounting_cluster.inventory)
    assert proc.returncode != 0, proc.stdout
    folder, job = outputs_of(tmp_path, name)
    assert (job["state"], job["restarts"], job["no_progress"]["step"]) == ("FAILED", 1, 5), job
    cost = job["cost"]
    rows = [line.split("|") for line in accounting_cluster.slurm(
        "sacct", "-D", "-X", "-n", "-P", "-j", str(job["job_id"]), "-o", "State,ElapsedRaw,AllocTRES,Eligible,Start").stdout.splitlines()]
    assert [row[0].split()[0] for row in rows] == ["REQUEUED", "FAILED"]
    gpus = [int(next(item for item in row[2].split(",") if item.startswith("gres/gpu=")).split("=")[1]) for row in rows]
    assert gpus == [4, 4], "2 GPUs on each of 2 nodes, as AllocTRES says"
    assert cost["source"] == "sacct" and cost["unit"] == "GPU"
    assert [(a["state"], a["elapsed_seconds"], a["gpus"]) for a in cost["attempts"]] == [
        (row[0].split()[0], int(row[1]), gpu) for row, gpu in zip(rows, gpus)]
    assert cost["hours"] == round(sum(int(row[1]) * gpu for row, gpu in zip(rows, gpus)) / 3600, 4)
    # The second attempt advanced nothing: all of it lost; the first only what followed its checkpoint.
    assert cost["attempts"][1]["lost_seconds"] == int(rows[1][1])
    assert 0 <= cost["attempts"][0]["lost_seconds"] <= int(rows[0][1])
    assert cost["steps_redone"] == 1, "step 5 was trained twice"
    waited = [datetime.fromisoformat(row[4]) - datetime.fromisoformat(row[3]) for row in rows]
    assert cost["queue_seconds"] == sum(int(wait.total_seconds()) for wait in waited)
    summary = (folder / "summary.txt").read_text()
    assert f"{cost['hours']} GPU-hours over 2 attempts, {cost['lost_hours']} lost, 1 step redone" in summary, summary
