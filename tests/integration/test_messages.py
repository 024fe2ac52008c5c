"""What a person reads on the terminal when a launch is refused or fails, and jobs.yml's table: the
sentence, never the slurm_job module's protocol with its action (the run's end marker, the poll
state, the staging's details)."""

import json
import re

from launch import TRAINER, launch, submitted_job_id, unique_job_name
from test_jobs import jobs_playbook, state_of



def failure_part(stdout):
    """What the run printed from the failed task on: its error line and its result."""
    return stdout[stdout.index("[ERROR]"):]


def submitted(cluster, name):
    """Whether Slurm knows a job of this name (other users' jobs may be submitted meanwhile)."""
    return f"JobName={name} " in cluster.slurm("scontrol", "show", "job", "-o").stdout


def result_keys(shown):
    """The top-level keys of the failed result as the callback prints it (YAML, the checkout's
    ansible.cfg): the lines indented by four under 'FAILED! =>'."""
    result = shown.split("FAILED! => \n", 1)[1].split("\nPLAY RECAP", 1)[0]
    return re.findall(r"^    ([a-z_]+):", result, re.M)


def test_a_refused_launch_shows_its_sentence_and_not_the_modules_result(cluster, tmp_path):
    name = unique_job_name("refused")
    proc = launch(tmp_path, "nodes=node110,node111", f"script={TRAINER}", f"job_name={name}", "resume=7")
    assert proc.returncode != 0
    sentence = "resume=7: this job has no run 7 (its runs: none yet)"
    assert f"[ERROR]: Task failed: Module failed: {sentence}\n" in proc.stdout, proc.stdout[-3000:]
    shown = failure_part(proc.stdout)
    # The module's result held end_marker, nodes_checked, progress, staged and 20 more; the failure
    # shows the message alone.
    assert result_keys(shown) == ["changed", "msg"], shown
    assert "end_marker" not in shown and "/runs/" not in shown, shown
    assert not submitted(cluster, name)


def test_a_failed_job_shows_its_message_and_log_tail_as_lines_and_not_the_modules_result(cluster, tmp_path):
    name = unique_job_name("msgfail")
    proc = launch(tmp_path, "nodes=node110", f"script={TRAINER}", "nproc_per_node=1", f"job_name={name}",
                  json.dumps({"script_args": "--steps 3 --fail-rank 0 --fail-at-step 2 --fail-exit-code 5"}))
    assert proc.returncode != 0
    shown = failure_part(proc.stdout)
    job_id = int(re.search(rf"job (\d+) \({name}\) ended FAILED, exit code 5, reason NonZeroExitCode; outputs in ", shown).group(1))
    # Ansible's error line is the launch's own message (not the module's shorter one), its log tail
    # line by line; the result under it says the same as a block of lines, and what became of the job.
    error = shown.split("\nOrigin: ", 1)[0]
    assert error.startswith(f"[ERROR]: Task failed: Action failed: job {job_id} ({name}) ended FAILED"), error
    assert "\ntraining step finished with exit code 5" in error, error
    assert re.search(r"\n    msg: \|-\n        job \d+ ", shown), shown
    assert "\n        training step finished with exit code 5\n" in shown, shown
    assert f"\n    job_id: {job_id}\n" in shown and "\n    state: FAILED\n" in shown, shown
    assert result_keys(shown) == ["changed", "collected", "exit_code", "final", "job_id", "msg", "name", "outcome",
                                  "state"], shown
    assert "end_marker" not in shown and ".ended" not in shown, shown  # the marker, by key or by its file


def test_an_unquoted_value_with_spaces_is_told_how_to_quote(cluster, tmp_path):
    name = unique_job_name("unquoted")
    proc = launch(tmp_path, "nodes=node110,node111", f"script={TRAINER}", f"job_name={name}", "script_args=--steps 2")
    assert proc.returncode != 0
    assert ("-e 'script_args=--steps 2': Ansible splits an -e value at spaces, so script_args got only '--steps' "
            "and '2' has no key. Quote a value with spaces: -e '{\"script_args\": \"--steps 2\"}' or "
            "-e \"script_args='--steps 2'\".") in proc.stdout, proc.stdout[-3000:]
    assert "_raw_params" not in proc.stdout
    assert not submitted(cluster, name)


def test_a_request_that_does_not_fit_names_only_what_does_not_fit(cluster, tmp_path):
    proc = launch(tmp_path, "group=gpu_A6000", "num_nodes=3", f"script={TRAINER}")
    assert proc.returncode != 0
    assert ("The request does not fit: num_nodes=3 of 2 nodes (gpu_A6000 nodes, from the inventory's "
            "cluster_node_* values).") in proc.stdout, proc.stdout[-3000:]
    assert "gpus_per_node=" not in proc.stdout and "cpus_per_task=" not in proc.stdout


def test_jobs_prints_its_table_as_lines_and_last(cluster, tmp_path):
    name = unique_job_name("table")
    held = launch(tmp_path, "nodes=node111", f"script={TRAINER}", "nproc_per_node=1", f"job_name={name}",
                  "wait=false", json.dumps({"slurm_launch_extra_directives": ["--hold"]}))
    assert held.returncode == 0, held.stdout + held.stderr
    job_id = submitted_job_id(held.stdout)
    try:
        listed = jobs_playbook(tmp_path)
        assert listed.returncode == 0, listed.stdout + listed.stderr
        table = listed.stdout.split("TASK [hpc.slurm_train.slurm_launch : Show the user's jobs.]", 1)[1]
        table, after = table.split("\nPLAY RECAP ", 1)
        assert "TASK [" not in table, "nothing runs after the table"
        lines = table.splitlines()
        assert lines[1:3] == ["ok: [login01] => ", "    msg: |-"], lines
        header = lines[3].split()
        assert header == ["job", "name", "run", "state", "exit", "nodes", "elapsed", "restarts", "cost", "outputs"], lines
        row = next(line for line in lines if line.startswith(f"        {job_id}  "))
        assert re.split(r"\s{2,}", row.strip())[:4] == [str(job_id), name, "1", "PENDING (JobHeldUser)"], row
        # Its columns line up: each cell starts where its header does.
        assert row.index(name) == lines[3].index("name") and row.index("PENDING") == lines[3].index("state")
        assert '"msg"' not in listed.stdout and "\\n" not in table
    finally:
        cluster.slurm("scancel", str(job_id), check=False)
    assert state_of(cluster, job_id) in ("", "CANCELLED")
