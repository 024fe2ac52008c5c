"""The cost ledger (plugins/module_utils/run_cost.py): sacct's attempts joined with the job
script's own record of each, and the script's record alone without accounting."""

from ansible_collections.hpc.slurm_train.plugins.module_utils import run_cost

# sacct -n -P -D -X -o JobIDRaw,JobID,State,ElapsedRaw,AllocTRES,Eligible,Start of a job requeued
# once by its script after a failure that advanced the checkpoint, then failed at the same step.
SACCT = ("41|41|REQUEUED|100|billing=4,cpu=4,gres/gpu=4,mem=8G,node=2|2026-12-07T03:00:00|2026-12-07T03:00:05\n"
         "41|41|FAILED|60|billing=4,cpu=4,gres/gpu=4,mem=8G,node=2|2026-12-07T03:01:50|2026-12-07T03:02:00\n")
# The script's record: attempt 0 started at t=1000 with no checkpoint, saved step 4 at t=1080, failed
# at t=1100 having reached step 5; attempt 1 resumed at step 4 and failed at step 5 again.
RECORD = ("start\t0\t1000\t-\t-\t4\t4\n"
          "end\t0\t1100\tfailed\t4\t1080\t5\n"
          "start\t1\t1200\t4\t1080\t4\t4\n"
          "end\t1\t1260\tfailed\t4\t1080\t5\n")


def test_sacct_attempts_are_parsed_with_their_gpus_and_queue_time():
    attempts = run_cost.parse_cost_sacct(SACCT)
    assert [(a["job_id"], a["state"], a["elapsed_seconds"], a["gpus"], a["cpus"], a["queue_seconds"]) for a in attempts] == [
        (41, "REQUEUED", 100, 4, 4, 5), (41, "FAILED", 60, 4, 4, 10)]


def test_the_ledger_counts_every_attempt_and_what_was_lost_after_each_checkpoint():
    cost = run_cost.ledger({41: run_cost.parse_attempts(RECORD)}, run_cost.parse_cost_sacct(SACCT))
    assert (cost["source"], cost["unit"]) == ("sacct", "GPU")
    assert cost["hours"] == round((100 + 60) * 4 / 3600, 4)
    # Attempt 0 saved its first 80 s (the checkpoint at t=1080) and lost 20; attempt 1 advanced nothing.
    assert [a["lost_seconds"] for a in cost["attempts"]] == [20, 60]
    assert cost["lost_hours"] == round((20 + 60) * 4 / 3600, 4)
    assert (cost["steps_redone"], cost["queue_seconds"]) == (1, 15)
    line = run_cost.cost_line(cost)
    assert line == "0.1778 GPU-hours over 2 attempts, 0.0889 lost, 1 step redone, 15 s queued (from sacct)"


def test_without_accounting_the_ledger_is_the_scripts_and_says_so():
    cost = run_cost.ledger({41: run_cost.parse_attempts(RECORD)})
    assert cost["source"] == run_cost.SOURCE_SCRIPT and cost["queue_seconds"] is None
    assert [a["elapsed_seconds"] for a in cost["attempts"]] == [100, 60]
    assert "time queued unknown (from the job script's own record (no accounting" in run_cost.cost_line(cost)


def test_an_attempt_cut_by_a_node_failure_loses_what_it_did_after_its_checkpoint_and_a_cpu_job_counts_cpu_hours():
    record = ("start\t0\t1000\t-\t-\t0\t8\n"  # cut: no end line; the next start saw the checkpoint of t=1030
              "start\t1\t1300\t3\t1030\t0\t8\n"
              "end\t1\t1400\tok\t10\t1390\t10\n")
    sacct = ("50|50|NODE_FAIL|90|billing=8,cpu=8,mem=8G,node=2|2026-12-07T03:00:00|2026-12-07T03:00:00\n"
             "50|50|COMPLETED|100|billing=8,cpu=8,mem=8G,node=2|2026-12-07T03:05:00|2026-12-07T03:05:03\n")
    cost = run_cost.ledger({50: run_cost.parse_attempts(record)}, run_cost.parse_cost_sacct(sacct))
    assert cost["unit"] == "CPU" and cost["hours"] == round(190 * 8 / 3600, 4)
    assert [a["lost_seconds"] for a in cost["attempts"]] == [60, 0]
    assert cost["steps_redone"] == 0, "the cut attempt's reach is unknown: nothing counted as redone"


def test_each_task_of_an_array_is_its_own_attempts():
    sacct = ("61|60_0|COMPLETED|30|cpu=2,gres/gpu=1,node=1|2026-12-07T03:00:00|2026-12-07T03:00:01\n"
             "62|60_1|COMPLETED|50|cpu=2,gres/gpu=1,node=1|2026-12-07T03:00:00|2026-12-07T03:00:04\n")
    attempts = run_cost.parse_cost_sacct(sacct)
    assert [(a["job_id"], a["task"]) for a in attempts] == [(61, "0"), (62, "1")]
    cost = run_cost.ledger({}, attempts)
    assert (cost["hours"], cost["queue_seconds"], len(cost["attempts"])) == (round(80 / 3600, 4), 5, 2)
