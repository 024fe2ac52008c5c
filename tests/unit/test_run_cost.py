"""The cost ledger (plugins/module_utils/run_cost.py): sacct's attempts joined with the job
script's own record of each, and the script's record alone without accounting."""

import json

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


def test_an_attempt_cancelled_while_pending_costs_nothing_and_queue_time_is_never_negative():
    # sacct's line for an attempt cancelled before it started: no allocation, Start Unknown, the
    # state's "by <uid>" tail; a blank line between records; one started the second it was
    # eligible; one whose recorded start precedes its eligibility (clocks of two hosts).
    sacct = ("70|70|CANCELLED by 1000|0||2026-12-07T03:00:00|Unknown\n"
             "\n"
             "71|71|COMPLETED|10|cpu=2,mem=1G,node=1|2026-12-07T03:00:10|2026-12-07T03:00:10\n"
             "72|72|COMPLETED|10|cpu=2,node=1|2026-12-07T03:00:10|2026-12-07T03:00:05\n")
    attempts = run_cost.parse_cost_sacct(sacct)
    assert [(a["job_id"], a["state"], a["elapsed_seconds"], a["gpus"], a["cpus"], a["queue_seconds"]) for a in attempts] == [
        (70, "CANCELLED", 0, 0, 0, None), (71, "COMPLETED", 10, 0, 2, 0), (72, "COMPLETED", 10, 0, 2, 0)]


def test_the_scripts_record_counts_gpus_and_cpus_apart_and_skips_what_it_cannot_read():
    record = ("\n"
              "start\t0\t1000\t-\t-\t8\t32\n"
              "end\t3\t1010\tok\t-\t-\t-\n"        # an end without its start: skipped
              "end\t0\t1100\tok\t-\t-\t-\n"
              "end\t0\t11")                         # the last line, cut by the 64 KiB read
    cost = run_cost.ledger({41: run_cost.parse_attempts(record)})
    assert [(a["restart"], a["state"], a["elapsed_seconds"], a["gpus"], a["cpus"]) for a in cost["attempts"]] == [
        (0, "ok", 100, 8, 32)]
    assert (cost["unit"], cost["hours"]) == ("GPU", round(100 * 8 / 3600, 4))
    cpu_job = run_cost.ledger({42: run_cost.parse_attempts("start\t0\t1000\t-\t-\t0\t8\nend\t0\t1090\tok\t-\t-\t-\n")})
    assert (cpu_job["unit"], cpu_job["hours"]) == ("CPU", round(90 * 8 / 3600, 4))
    # Counts the script could not write are counted as none, not guessed.
    unknown = run_cost.ledger({43: run_cost.parse_attempts("start\t0\t1000\t-\t-\t-\t-\nend\t0\t1090\tok\t-\t-\t-\n")})
    assert [(a["gpus"], a["cpus"]) for a in unknown["attempts"]] == [(0, 0)] and unknown["hours"] == 0


def test_a_cut_attempt_in_the_scripts_record_has_no_known_time_and_adds_no_hours():
    record = ("start\t0\t1000\t-\t-\t4\t4\n"  # cut: no end line
              "start\t1\t1200\t3\t1150\t4\t4\n"
              "end\t1\t1260\tok\t5\t1250\t5\n")
    cost = run_cost.ledger({41: run_cost.parse_attempts(record)})
    assert [(a["state"], a["elapsed_seconds"], a["lost_seconds"]) for a in cost["attempts"]] == [
        ("cut", None, None), ("ok", 60, 0)]
    assert (cost["hours"], cost["lost_hours"], cost["steps_redone"]) == (round(60 * 4 / 3600, 4), 0, 0)
    assert run_cost.cost_line(cost).startswith("0.0667 GPU-hours over 2 attempts, 0.0 lost, 0 steps redone, ")


def test_with_accounting_only_a_failed_or_cut_attempt_loses_its_time_after_the_checkpoint():
    sacct = "".join(f"80|80|{state}|{elapsed}|cpu=4,gres/gpu=4,node=1|2026-12-07T03:00:00|2026-12-07T03:00:00\n"
                    for state, elapsed in (("REQUEUED", 20), ("REQUEUED", 100), ("REQUEUED", 50), ("COMPLETED", 30)))
    # Attempt 0 left no record (it ended before the script's first line); attempt 1 was cut, and
    # attempt 2 started from the checkpoint it left at t=1060; attempt 2 stopped at a warning with a
    # checkpoint, and was requeued: nothing lost.
    record = ("start\t1\t1000\t-\t-\t4\t4\n"
              "start\t2\t1200\t3\t1060\t4\t4\n"
              "end\t2\t1250\tstopped\t4\t1240\t4\n"
              "start\t3\t1300\t4\t1240\t4\t4\n"
              "end\t3\t1330\tok\t5\t1325\t5\n")
    cost = run_cost.ledger({80: run_cost.parse_attempts(record)}, run_cost.parse_cost_sacct(sacct))
    assert [(a["state"], a["lost_seconds"]) for a in cost["attempts"]] == [
        ("REQUEUED", 0), ("REQUEUED", 40), ("REQUEUED", 0), ("COMPLETED", 0)]
    assert cost["lost_hours"] == round(40 * 4 / 3600, 4)


def test_one_attempt_reads_as_one_and_tasks_are_listed_by_job_id():
    records = {62: run_cost.parse_attempts("start\t0\t1000\t-\t-\t1\t2\nend\t0\t1036\tok\t-\t-\t1\n"),
               61: run_cost.parse_attempts("start\t0\t1000\t-\t-\t1\t2\nend\t0\t1072\tfailed\t-\t-\t1\n"),
               63: {}}  # its file is there, still empty: no attempt yet
    cost = run_cost.ledger(records)
    assert [(a["job_id"], a["state"]) for a in cost["attempts"]] == [(61, "failed"), (62, "ok")]
    one = run_cost.ledger({62: records[62]})
    assert run_cost.cost_line(one) == ("0.01 GPU-hours over 1 attempt, 0.0 lost, 0 steps redone, time queued unknown "
                                       f"(from {run_cost.SOURCE_SCRIPT})")


def test_an_attempt_missing_from_the_scripts_record_counts_nothing():
    record = ("start\t0\t1000\t-\t-\t4\t8\nend\t0\t1060\tfailed\t-\t-\t-\n"
              "start\t2\t1300\t-\t-\t4\t8\nend\t2\t1360\tok\t-\t-\t-\n")  # attempt 1's lines are gone
    cost = run_cost.ledger({41: run_cost.parse_attempts(record)})
    assert [(a["restart"], a["state"], a["gpus"], a["cpus"]) for a in cost["attempts"]] == [
        (0, "failed", 4, 8), (1, "cut", 0, 0), (2, "ok", 4, 8)]


def test_slurmctlds_record_of_a_job_that_ran_once_is_one_attempt_or_none_without_its_allocation():
    record = {"job_id": 5, "state": "FAILED", "elapsed_seconds": 60, "AllocTRES": "cpu=8,node=2,gres/gpu=16",
              "EligibleTime": "2026-12-07T10:00:00", "StartTime": "2026-12-07T10:01:00"}
    assert run_cost.scontrol_attempt(record) == {"job_id": 5, "task": "", "state": "FAILED", "elapsed_seconds": 60,
                                                 "gpus": 16, "cpus": 8, "queue_seconds": 60}
    assert run_cost.scontrol_attempt({**record, "EligibleTime": "Unknown"})["queue_seconds"] is None
    # A record carried between slices keeps no allocation nor start: sacct is asked instead.
    for missing in ("AllocTRES", "StartTime", "elapsed_seconds"):
        assert run_cost.scontrol_attempt({key: value for key, value in record.items() if key != missing}) is None
    cost = run_cost.ledger({}, [run_cost.scontrol_attempt(record)], run_cost.SOURCE_SLURMCTLD)
    assert run_cost.cost_line(cost) == ("0.2667 GPU-hours over 1 attempt, 0.2667 lost, 0 steps redone, 60 s queued "
                                        "(from slurmctld's record of the job)")


def test_slurmctlds_record_of_a_cpu_job_that_started_at_once_or_before_it_was_eligible():
    record = {"job_id": 6, "state": "COMPLETED", "elapsed_seconds": 36, "TRES": "node=1,billing=2",
              "EligibleTime": "2026-12-07T10:00:05", "StartTime": "2026-12-07T10:00:05"}
    assert run_cost.scontrol_attempt(record) == {"job_id": 6, "task": "", "state": "COMPLETED", "elapsed_seconds": 36,
                                                 "gpus": 0, "cpus": 0, "queue_seconds": 0}
    # A start stamped before eligibility (clocks a second apart) waited no time, not less.
    assert run_cost.scontrol_attempt({**record, "StartTime": "2026-12-07T10:00:04"})["queue_seconds"] == 0


def test_a_cost_line_of_a_ledger_without_steps_redone_says_none():
    cost = run_cost.ledger({}, [{"job_id": 1, "task": "", "state": "COMPLETED", "elapsed_seconds": 3600, "gpus": 0,
                                 "cpus": 2, "queue_seconds": None}])
    del cost["steps_redone"]
    assert run_cost.cost_line(cost) == ("2.0 CPU-hours over 1 attempt, 0.0 lost, 0 steps redone, time queued "
                                        "unknown (from sacct)")


def test_the_scripts_record_is_read_field_by_field_with_each_hang():
    text = ("start\t0\t1000\t-\t-\t4\t8\n"
            "hang\t0\t1090\tnode111\t5\thang-41-0-node110.txt,hang-41-0-node111.txt\thang-41-0-node111-nccl-rank1\n"
            "end\t0\t1100\tfailed\t5\t1080\t6\n"
            # A hang recorded by a script older than the flight recorder: six fields.
            "start\t1\t1200\t4\t1080\t4\t8\n"
            "hang\t1\t1250\t-\t7\thang-41-1-node110.txt\n"
            # A hang of an attempt whose start is not recorded is no attempt's.
            "hang\t2\t1300\tnode110\t9\t-\t-\n")
    assert run_cost.parse_attempts(text) == {
        0: {"start": {"time": 1000, "step": None, "checkpoint_time": None, "gpus": 4, "cpus": 8},
            "end": {"time": 1100, "outcome": "failed", "step": 5, "checkpoint_time": 1080, "reached": 6},
            "hang": {"time": 1090, "suspect_nodes": ["node111"], "step": 5,
                     "stack_dumps": ["hang-41-0-node110.txt", "hang-41-0-node111.txt"],
                     "flight_recorder_dumps": ["hang-41-0-node111-nccl-rank1"]}},
        1: {"start": {"time": 1200, "step": 4, "checkpoint_time": 1080, "gpus": 4, "cpus": 8}, "end": None,
            "hang": {"time": 1250, "suspect_nodes": [], "step": 7, "stack_dumps": ["hang-41-1-node110.txt"],
                     "flight_recorder_dumps": []}}}
    cost = run_cost.ledger({41: run_cost.parse_attempts(text)})
    assert [attempt.get("hang", {}).get("time") for attempt in cost["attempts"]] == [1090, 1250]
    assert "hang" not in run_cost.ledger({41: run_cost.parse_attempts(RECORD)})["attempts"][0]


def test_only_the_gates_records_are_read_from_the_health_file():
    good = {"action": "requeue", "restart": 0, "nodes": {"node110": {}}, "named": [{"node": "node110"}]}
    lines = ['{"action": "requeue", "restart": 0, "nod',  # cut mid-write
             json.dumps(["not", "a", "record"]),
             json.dumps({**good, "action": "wait"}),
             json.dumps({**good, "restart": "0"}),
             json.dumps({**good, "nodes": []}),
             json.dumps({**good, "named": {}}),
             json.dumps(good),
             json.dumps({**good, "action": "pass", "restart": 1, "named": []})]
    assert run_cost.parse_health("\n".join(lines) + "\n") == [good, {**good, "action": "pass", "restart": 1, "named": []}]
