"""bench/benchlib.py on recorded Slurm output: `pytest bench/test_benchlib.py` (not part of make test)."""

import benchlib

SDIAG = """\
Remote Procedure Call statistics by message type
	REQUEST_FED_INFO                        ( 2049) count:7      ave_time:199    total_time:1399
	REQUEST_JOB_INFO_SINGLE                 ( 2021) count:7      ave_time:92     total_time:650
	REQUEST_STATS_INFO                      ( 2035) count:3      ave_time:136    total_time:410

Remote Procedure Call statistics by user
	root            (       0) count:17     ave_time:349    total_time:2098

Pending RPC statistics
	No pending RPCs
"""

SACCTMGR_STATS = """\
*******************************************************************
sacctmgr show stats output at Thu Dec 03 07:54:30 2026 (1796284470)
*******************************************************************

Remote Procedure Call statistics by message type
	DBD_FINI                 ( 1401) count:8      ave_time:401    total_time:3215
	SLURM_PERSIST_INIT       ( 6500) count:5      ave_time:1105   total_time:5526
	DBD_GET_STATS            ( 1489) count:1      ave_time:49     total_time:49

Remote Procedure Call statistics by user
	root                (         0) count:14     ave_time:4848   total_time:145465
"""


def test_rpc_counts_reads_only_the_by_type_section():
    assert benchlib.rpc_counts(SDIAG) == {"REQUEST_FED_INFO": 7, "REQUEST_JOB_INFO_SINGLE": 7, "REQUEST_STATS_INFO": 3}
    assert benchlib.rpc_counts(SACCTMGR_STATS) == {"DBD_FINI": 8, "SLURM_PERSIST_INIT": 5, "DBD_GET_STATS": 1}
    assert benchlib.rpc_counts("") == {}


def test_rpc_delta_takes_out_the_probe_and_drops_what_did_not_grow():
    before = {"DBD_FINI": 8, "DBD_GET_STATS": 1, "DBD_JOB_COMPLETE": 2}
    after = {"DBD_FINI": 12, "DBD_GET_STATS": 2, "DBD_JOB_COMPLETE": 2, "DBD_STEP_START": 2}
    probe = {"DBD_FINI": 2, "DBD_GET_STATS": 1}
    assert benchlib.rpc_delta(before, after, minus=probe) == {"DBD_FINI": 2, "DBD_STEP_START": 2}


def test_summary_and_ratio():
    assert benchlib.summary([3.0, 1.0, 2.0, None]) == {"n": 3, "median": 2.0, "min": 1.0, "max": 3.0}
    assert benchlib.summary([])["median"] is None
    assert benchlib.ratio(5.0, 2.0) == 2.5
    assert benchlib.ratio(5.0, 0) is None and benchlib.ratio(None, 1.0) is None


def test_tables_show_each_row_with_its_ratios():
    rows = [{"figure": "1 submission", "measured": "floor", "unit": "s", "n": 3, "median": 0.97, "min": 0.9,
             "max": 1.2, "ratios": [], "goal": None},
            {"figure": "1 submission", "measured": "launch | wait=false", "unit": "s", "n": 3, "median": 4.94,
             "min": 4.8, "max": 5.1, "ratios": [{"against": "floor", "ratio": 5.09}], "goal": "<= 1.25x floor: missed"}]
    text = benchlib.text_table(rows).splitlines()
    assert text[0].split() == ["figure", "measured", "n", "median", "min", "max", "ratio", "goal"]
    assert "5.09x floor" in text[3] and "4.94 s" in text[3]
    markdown = benchlib.markdown_table(rows).splitlines()
    assert markdown[3] == ("| 1 submission | launch \\| wait=false | 3 | 4.94 s | 4.80 s | 5.10 s | 5.09x floor "
                           "| <= 1.25x floor: missed |")
    assert markdown[2].startswith("| 1 submission | floor | 3 | 0.970 s |")


def test_small_ratios_keep_the_digit_that_decides_a_goal():
    assert benchlib.ratio_text(0.0539) == "0.054x"
    assert benchlib.ratio_text(0.5) == "0.50x"
    assert benchlib.ratio_text(None) == "-"


TORCHX_OUTPUT = """\
torchx 2026-12-04 22:33:03 INFO     Launched app: slurm://torchx/14
torchx 2026-12-04 22:33:03 INFO     AppStatus:
    State: UNKNOWN
torchx 2026-12-04 22:33:54 INFO     Job finished: SUCCEEDED
"""

# What NeMo-Run 0.11.1 printed on bench2 (bench/peers/nemo_run_ddp.py, stdout not a terminal),
# cut: the launch, its experiment summary and the wait.
NEMO_RUN_OUTPUT = """\
[23:16:37] Launching job ddp for experiment                    experiment.py:800
           bench-nemo_run-fbc953                                                
           INFO     Launched app: slurm_tunnel://nemo_run/23     launcher.py:116
── Waiting for Experiment bench-nemo_run-fbc953_1796512596304468075 to finish ──
[SLURM] Job 23 - State: PENDING, Estimated start: N/A, Current time: 2026-12-05 23:16:37

Experiment Status for bench-nemo_run-fbc953_1796512596304468075

Task 0: ddp
- Status: SUBMITTED
- Executor: SlurmExecutor on alice@10.88.0.100
- Job id: 23
- Local Directory: /tmp/nrtest/home/experiments/bench-nemo_run-fbc953/bench-nemo_run-fbc953_1796512596304468075/ddp
- Remote Directory: /home/alice/bench-peers/bench-nemo_run-fbc953/bench-nemo_run-fbc953/bench-nemo_run-fbc953_1796512596304468075/ddp

           INFO     Waiting for job 23 to finish [log=False]...  launcher.py:136
[23:16:55] INFO     Job 23 finished: SUCCEEDED                   launcher.py:186
"""


def test_peer_job_ids_from_what_each_peer_prints():
    assert benchlib.peer_job_id("submitit", '{"job_id": "11", "state": "RUNNING", "error": null}\n') == 11
    assert benchlib.peer_job_id("torchx", TORCHX_OUTPUT) == 14
    assert benchlib.peer_job_id("nemo_run", NEMO_RUN_OUTPUT) == 23
    # The experiment's id is a number too: only the "Job id" line counts.
    assert benchlib.peer_job_id("nemo_run", "bench-nemo_1796425249928416926\n") is None
    # rich's styles, where a terminal is forced (FORCE_COLOR).
    assert benchlib.peer_job_id("nemo_run", "- \x1b[1;32mJob id\x1b[0m: 23\n") == 23
    # Nothing submitted: the summary's id is empty.
    assert benchlib.peer_job_id("nemo_run", "Task 0: ddp\n- Status: UNKNOWN\n- Job id: \n") is None
    assert benchlib.peer_job_id("torchx", "torchx ... Waiting for the app to finish...\n") is None


def test_sacct_state_reads_the_first_record():
    assert benchlib.sacct_state("COMPLETED|0:0\n") == ("COMPLETED", "0:0")
    assert benchlib.sacct_state("CANCELLED by 2001|0:15\nCOMPLETED|0:0\n") == ("CANCELLED by 2001", "0:15")
    assert benchlib.sacct_state("\n") == (None, None)


def test_split_rpcs_leaves_the_jobs_own_and_sbatchs_out_of_the_followers():
    counts = {"REQUEST_JOB_STEP_CREATE": 1, "REQUEST_STEP_COMPLETE": 2, "REQUEST_COMPLETE_BATCH_SCRIPT": 1,
              "REQUEST_SUBMIT_BATCH_JOB": 1, "REQUEST_FED_INFO": 3, "REQUEST_JOB_INFO_SINGLE": 3, "REQUEST_NODE_INFO": 1}
    assert benchlib.split_rpcs(counts) == {"job": 4, "sbatch": 1, "own": 7}
    assert benchlib.split_rpcs(None) == {"job": 0, "sbatch": 0, "own": 0}


def test_dbd_queries_counts_a_clients_questions_only():
    assert benchlib.dbd_queries({"DBD_GET_JOBS_COND": 2, "DBD_JOB_START": 1, "DBD_SEND_MULT_MSG": 3, "DBD_GET_USERS": 1}) == 3
    assert benchlib.dbd_queries(None) == 0
