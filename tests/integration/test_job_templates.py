"""The job scripts provision.yml leaves on the NAS run a correct multi-node job with a plain
sbatch, for people who do not run Ansible."""

import subprocess
import uuid

from cluster import REPO


def test_a_nas_job_template_runs_a_two_node_training_with_plain_sbatch(cluster):
    base = cluster.nas / "tests" / f"job-templates-{uuid.uuid4().hex[:8]}"
    templates, work = base / "templates", base / "work"
    work.mkdir(parents=True)
    role = subprocess.run(["ansible", "localhost", "-m", "ansible.builtin.include_role", "-a", "name=hpc.slurm_train.job_templates",
                           "-e", f"job_templates_dir={templates}"], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert role.returncode == 0, role.stdout + role.stderr
    script = templates / "gpu_A6000.sbatch"
    assert "#SBATCH --partition=gpu_A6000\n" in script.read_text()
    env = {**cluster.env, "NPROC_PER_NODE": "1"}
    # By hand, the training goes where the nodes see it (they do not see this checkout).
    trainer = work / "train_ddp.py"
    trainer.write_text((REPO / "examples" / "train_ddp.py").read_text())
    proc = subprocess.run(["sbatch", "--parsable", "--wait", "--job-name=by-hand", str(script),
                           str(trainer), "--steps", "4"],
                          cwd=work, env=env, capture_output=True, text=True, timeout=600)
    job_id = proc.stdout.strip()
    log = (work / f"by-hand-{job_id}.out").read_text()
    assert proc.returncode == 0, log
    assert "[rank0] world_size=2 backend=gloo" in log
    assert "[rank0] training complete steps=4" in log
    assert (work / "checkpoints" / "checkpoint.pt").exists(), "checkpoints go where sbatch ran"
