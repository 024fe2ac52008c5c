"""The health gate's program (roles/slurm_launch/files/health_check.py): the slow-node rule, the
nodes it names, what it decides (pass, requeue without them, fail), its judge as the job script
runs it (files of each node, a stand-in scontrol), a real two-node run on this machine, and the
records a launch reads back (plugins/module_utils/run_cost.py's parse_health)."""

import json
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ansible_collections.hpc.slurm_train.plugins.module_utils import run_cost
from ansible_collections.hpc.slurm_train.roles.slurm_launch.files import health_check

PROGRAM = Path(health_check.__file__)


def names(found):
    return [one["node"] for one in found]


@pytest.mark.parametrize("times, slow", [
    # Two nodes: each against the other. The median of both would be their mean, against which a node
    # 2.5 times slower is only 1.43 times (2 * 2.5 / 3.5): named anyway, as it is 2.5 times the other.
    ({"a": 1.0, "b": 2.5}, ["b"]),
    ({"a": 1.0, "b": 1.4}, []),
    ({"a": 1.0, "b": 1.5}, []),  # over the factor, not at it
    ({"a": 10.0, "b": 1.0}, ["a"]),
    # Three nodes, one slow: against the others' median the slow one is 10x, the fast ones below 1x.
    ({"a": 1.0, "b": 1.1, "c": 10.0}, ["c"]),
    # Two slow of four: each slow one still has two fast ones and the other slow one as its others.
    ({"a": 1.0, "b": 1.0, "c": 5.0, "d": 5.0}, ["c", "d"]),
    ({"a": 1.0, "b": 1.2, "c": 0.9, "d": 1.1}, []),
    # One node has nothing to be slow against.
    ({"a": 100.0}, []),
])
def test_a_node_is_slow_against_the_median_of_the_other_nodes(times, slow):
    found = health_check.slow_nodes(times, 1.5)
    assert names(found) == slow
    for one in found:
        others = sorted(value for node, value in times.items() if node != one["node"])
        assert one["median_seconds"] == others[len(others) // 2] if len(others) % 2 else \
            (others[len(others) // 2 - 1] + others[len(others) // 2]) / 2
        assert one["ratio"] == round(times[one["node"]] / one["median_seconds"], 2)


def test_the_factor_is_the_parameter():
    assert names(health_check.slow_nodes({"a": 1.0, "b": 1.8}, 1.5)) == ["b"]
    assert names(health_check.slow_nodes({"a": 1.0, "b": 1.8}, 2.0)) == []


def result(node, seconds=0.2, **more):
    found = {"node": node, "seconds": seconds, "device": "cpu",
             "allreduce": {"backend": "gloo", "bytes": 1 << 20, "time_us": 1200.0, "wrong": 0}}
    found.update(more)
    return found


def test_the_nodes_named_are_the_slow_the_failed_and_the_silent_with_why():
    results = {"n1": result("n1", 0.2), "n2": result("n2", 3.0), "n3": result("n3", 0.21),
               "n4": {"node": "n4", "gpu_check": ["torch sees 4 GPUs, the job asked for 8 per node"]},
               "n5": {"node": "n5", "error": "RuntimeError: CUDA error: an illegal memory access"}}
    named, problem = health_check.named_nodes(results, ["n1", "n2", "n3", "n4", "n5", "n6"], 1.5)
    assert [(one["node"], one["reason"]) for one in named] == [
        ("n4", "GPU_CHECK"), ("n5", "HEALTH"), ("n6", "HEALTH"), ("n2", "HEALTH")]
    why = {one["node"]: one["why"] for one in named}
    assert why["n4"] == "failed the GPU check: torch sees 4 GPUs, the job asked for 8 per node"
    assert why["n5"] == "failed its matmul: RuntimeError: CUDA error: an illegal memory access"
    assert why["n6"] == "no result: its check did not finish"
    assert why["n2"] == "slow: matmul 3.000 s against 0.205 s, the median of the other nodes (14.63x, over 1.5x)"
    assert problem == "", "a node named: the all-reduce is not what to blame"


def test_a_node_stopped_by_another_is_not_named_for_it():
    results = {"n1": {"node": "n1", "waited": "stopped: n2 failed"},
               "n2": {"node": "n2", "error": "RuntimeError: CUDA error: an illegal memory access"},
               "n3": {"node": "n3", "waited": "stopped: n2 failed"}}
    named, problem = health_check.named_nodes(results, ["n1", "n2", "n3"], 1.5)
    assert names(named) == ["n2"] and problem == ""
    # Stopped by a node that never came (its result is missing): that one is named.
    results = {"n1": {"node": "n1", "waited": "stopped: not every node came to its matmul in the gate's time"}}
    assert names(health_check.named_nodes(results, ["n1", "n2"], 1.5)[0]) == ["n2"]
    # Everyone waited and no node to blame: the gate fails without a name.
    named, problem = health_check.named_nodes({"n1": results["n1"], "n2": {**results["n1"], "node": "n2"}},
                                              ["n1", "n2"], 1.5)
    assert named == [] and problem.startswith("the nodes did not time their matmuls together (stopped: not every")


@pytest.mark.parametrize("allreduce, problem", [
    ({"error": "RuntimeError: Connection closed by peer"}, "the all-reduce across the nodes failed: RuntimeError: "
                                                           "Connection closed by peer"),
    ({"backend": "gloo", "bytes": 4, "time_us": 9.0, "wrong": 3}, "the all-reduce across the nodes summed wrong (3 elements)"),
    ({"skipped": "not every node computed"}, "the all-reduce across the nodes did not run"),
])
def test_an_all_reduce_that_fails_with_every_node_well_is_the_problem(allreduce, problem):
    results = {"n1": result("n1"), "n2": result("n2", allreduce=allreduce)}
    assert health_check.named_nodes(results, ["n1", "n2"], 1.5) == ([], problem)


SLOW = [{"node": "n2", "reason": "HEALTH", "why": "slow"}]


@pytest.mark.parametrize("named, problem, explicit, restart, partition, excluded, expected", [
    ([], "", False, 0, [], [], ("pass", [])),
    # A node list given: Slurm would give the same nodes again.
    (SLOW, "", True, 0, ["n1", "n2", "n3"], [], ("fail", [])),
    # A node group with a spare: requeued, the node added to the job's exclusions.
    (SLOW, "", False, 0, ["n1", "n2", "n3"], [], ("requeue", ["n2"])),
    (SLOW, "", False, 1, ["n1", "n2", "n3", "n4"], ["n0"], ("requeue", ["n0", "n2"])),
    # No spare left outside the exclusions, or no restart left: failed naming it.
    (SLOW, "", False, 0, ["n1", "n2"], [], ("fail", [])),
    (SLOW, "", False, 0, ["n1", "n2", "n3"], ["n3"], ("fail", [])),
    (SLOW, "", False, 2, ["n1", "n2", "n3"], [], ("fail", [])),
    # Nobody to leave out.
    ([], "the all-reduce across the nodes failed: x", False, 0, ["n1", "n2", "n3"], [], ("fail", [])),
])
def test_what_the_gate_decides(named, problem, explicit, restart, partition, excluded, expected):
    verdict = health_check.decide(named, problem, explicit, restart, 2, partition, excluded, 2)
    assert (verdict["action"], verdict["exclude"]) == expected
    if named and expected[0] == "fail":
        assert verdict["message"].startswith("not training on n2")


def test_the_decisions_say_why():
    decide = health_check.decide
    assert "the node list was given" in decide(SLOW, "", True, 0, 2, [], [], 2)["message"]
    assert decide(SLOW, "", False, 0, 2, ["n1", "n2", "n3"], [], 2)["message"] == \
        "without n2 (restart 1 of at most 2)"
    assert "no restarts left (2)" in decide(SLOW, "", False, 2, 2, ["n1", "n2", "n3"], [], 2)["message"]
    assert "the partition has 1 other node(s) (n1) for the job's 2: no spare" in \
        decide(SLOW, "", False, 0, 2, ["n1", "n2"], [], 2)["message"]


# scontrol as the judge asks it in a node group's job: the partition's nodes, the job's exclusions,
# a hostlist expanded (these hostlists are plain lists).
SCONTROL = """#!/bin/sh
echo "$*" >> "$ASKED"
case "$1 $2" in
  "show partition") echo "PartitionName=$3 AllowGroups=ALL Nodes=n1,n2,n3 State=UP" ;;
  "show job") echo "JobId=$3 JobName=train ExcNodeList=${EXCLUDED:-(null)} NodeList=n1,n2" ;;
  "show hostnames") echo "$3" | tr , '\\n' ;;
  *) exit 1 ;;
esac
"""


def judge(tmp_path, results, *options, excluded="", scontrol=SCONTROL):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "scontrol").write_text(scontrol)
    (bin_dir / "scontrol").chmod(stat.S_IRWXU)
    for node, found in results.items():
        (tmp_path / f".42.health.{node}").write_text(json.dumps(found) + "\n")
    proc = subprocess.run([sys.executable, str(PROGRAM), "--judge", "--dir", str(tmp_path), "--tag", "42",
                           "--nodes", "n1,n2", "--slow-factor", "1.5", "--restart", "0", "--max-restarts", "2",
                           "--partition", "gpu", "--started", str(time.time() - 3), *options],
                          capture_output=True, text=True, timeout=60,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin", "EXCLUDED": excluded, "ASKED": str(tmp_path / "asked")})
    assert proc.returncode == 0, proc.stderr
    records = run_cost.parse_health((tmp_path / "health-42.jsonl").read_text())
    return proc.stdout.strip(), proc.stderr, records


def test_the_judge_passes_well_nodes_and_says_its_cost(tmp_path):
    verdict, said, records = judge(tmp_path, {"n1": result("n1", 0.2), "n2": result("n2", 0.25)})
    assert verdict == "pass -"
    assert re.fullmatch(r"health gate: restart 0: passed in [3-9]\.[0-9] s \(2 nodes, matmul 0\.200-0\.250 s, "
                        r"all-reduce 1 MiB 1\.2 ms \(gloo\)\)", said.strip()), said
    (record,) = records
    assert (record["action"], record["named"], record["restart"]) == ("pass", [], 0)
    assert "health gate: " + record["summary"] == said.strip(), "summary.txt shows the gate's own line"
    assert 3 <= record["seconds"] < 10
    assert record["allreduce"]["time_us"] == 1200.0
    assert "allreduce" not in record["nodes"]["n1"], "the all-reduce once, not once a node"


def test_the_judge_of_a_node_group_requeues_without_the_slow_node(tmp_path):
    verdict, said, records = judge(tmp_path, {"n1": result("n1", 0.2), "n2": result("n2", 2.0)}, excluded="n0")
    assert verdict == "requeue n0,n2 n2:HEALTH", "the job's own exclusions kept"
    assert ("health gate: n2 slow: matmul 2.000 s against 0.200 s, the median of the other nodes (10.0x, over 1.5x)"
            in said.splitlines())
    assert re.search(r"^health gate: restart 0: requeued in [0-9.]+ s \(2 nodes, matmul 0\.200-2\.000 s, all-reduce "
                     r"1 MiB 1\.2 ms \(gloo\)\): without n2 \(restart 1 of at most 2\)$", said, re.M), said
    assert records[0]["named"][0]["seconds"] == 2.0 and records[0]["named"][0]["median_seconds"] == 0.2
    assert records[0]["summary"].endswith("without n2 (restart 1 of at most 2); n2 slow: matmul 2.000 s against "
                                          "0.200 s, the median of the other nodes (10.0x, over 1.5x)")


def test_the_judge_of_a_node_list_fails_naming_the_slow_node_and_appends_each_attempt(tmp_path):
    judge(tmp_path, {"n1": result("n1", 0.2), "n2": result("n2", 0.21)}, "--explicit")
    verdict, said, records = judge(tmp_path, {"n1": result("n1", 0.2), "n2": result("n2", 2.0)}, "--explicit")
    assert verdict == "fail - n2:HEALTH"
    assert [record["action"] for record in records] == ["pass", "fail"]
    assert "not training on n2: the node list was given" in said


def test_the_judge_fails_when_a_node_left_no_result(tmp_path):
    verdict, said, _ = judge(tmp_path, {"n1": result("n1", 0.2)}, "--explicit")
    assert verdict == "fail - n2:HEALTH"
    assert "health gate: n2 no result: its check did not finish" in said


def test_the_judge_fails_when_the_job_script_could_not_list_the_nodes(tmp_path):
    verdict, said, records = judge(tmp_path, {"n1": result("n1", 0.2), "n2": result("n2", 0.2)}, "--nodes=")
    assert verdict == "fail -"
    assert said.rstrip().endswith("the job's node list came empty (scontrol show hostnames): nothing to judge: "
                                  "no node to leave out, not training"), said
    assert records[0]["action"] == "fail"


def asked(tmp_path):
    """What the judge asked scontrol, one call a line."""
    return (tmp_path / "asked").read_text().splitlines() if (tmp_path / "asked").exists() else []


def test_slurm_is_asked_only_for_a_node_group_that_names_a_node_with_restarts_left(tmp_path):
    judge(tmp_path, {"n1": result("n1", 0.2), "n2": result("n2", 2.0)})
    assert asked(tmp_path) == ["show partition gpu -o", "show hostnames n1,n2,n3", "show job 42 -o"]
    (tmp_path / "asked").unlink()
    judge(tmp_path, {"n1": result("n1", 0.2), "n2": result("n2", 0.2)})
    judge(tmp_path, {"n1": result("n1", 0.2), "n2": result("n2", 2.0)}, "--explicit")
    verdict, said, _ = judge(tmp_path, {"n1": result("n1", 0.2), "n2": result("n2", 2.0)}, "--restart", "2")
    assert asked(tmp_path) == []
    assert verdict == "fail - n2:HEALTH" and "no restarts left (2)" in said


def test_a_slurm_that_does_not_answer_fails_the_gate_saying_so(tmp_path):
    failing = "#!/bin/sh\nprintf x%.0s $(seq 100) >&2\nprintf y%.0s $(seq 200) >&2\nexit 1\n"
    verdict, said, records = judge(tmp_path, {"n1": result("n1", 0.2), "n2": result("n2", 2.0)}, scontrol=failing)
    assert verdict == "fail - n2:HEALTH"
    assert f"health gate: cannot ask Slurm for the partition's nodes (scontrol show partition gpu -o: {'y' * 200})" \
        in said.splitlines()
    assert records[0]["message"] == ("not training on n2, and the partition has 0 other node(s) (none) for the job's 2: "
                                     "no spare to requeue onto")


def test_a_result_that_is_no_json_counts_as_none(tmp_path):
    (tmp_path / ".42.health.n2").write_text('{"node": "n2", "seco')
    verdict, said, _ = judge(tmp_path, {"n1": result("n1", 0.2)}, "--explicit")
    assert verdict == "fail - n2:HEALTH" and "health gate: n2 no result: its check did not finish" in said


def test_a_gate_record_that_cannot_be_written_is_said_and_the_verdict_still_given(tmp_path):
    (tmp_path / "health-42.jsonl").mkdir()
    for node in ("n1", "n2"):
        (tmp_path / f".42.health.{node}").write_text(json.dumps(result(node)) + "\n")
    proc = subprocess.run([sys.executable, str(PROGRAM), "--judge", "--dir", str(tmp_path), "--tag", "42", "--nodes",
                           "n1,,n2"], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout) == (0, "pass -\n")
    assert f"health gate: cannot record the gate in {tmp_path}/health-42.jsonl: [Errno 21] Is a directory" in proc.stderr
    assert "(2 nodes, matmul 0.200-0.200 s" in proc.stderr


def test_a_node_without_a_result_before_one_with_is_the_only_one_named(tmp_path):
    verdict, said, records = judge(tmp_path, {"n2": result("n2", 0.2)}, "--explicit")
    assert verdict == "fail - n1:HEALTH" and records[0]["nodes"]["n2"]["seconds"] == 0.2


def test_the_gates_record_keeps_its_cost_to_the_hundredth(tmp_path, monkeypatch, capsys):
    for node in ("n1", "n2"):
        (tmp_path / f".42.health.{node}").write_text(json.dumps(result(node)) + "\n")
    monkeypatch.setattr(health_check.time, "time", lambda: 1000.123456)
    args = health_check.parse_args(["--judge", "--dir", str(tmp_path), "--tag", "42", "--nodes", "n1,n2",
                                    "--started", "997"])
    assert health_check.judge_main(args) == 0
    (record,) = run_cost.parse_health((tmp_path / "health-42.jsonl").read_text())
    assert record["seconds"] == 3.12 and record["summary"].startswith("restart 0: passed in 3.1 s (2 nodes")
    assert capsys.readouterr().out == "pass -\n"


@pytest.mark.parametrize("time_us, said", [(1049.9, "1.0 ms"), (1050.5, "1.1 ms"), (250000, "250.0 ms")])
def test_the_all_reduce_is_said_in_milliseconds_to_a_tenth(time_us, said):
    record = {"restart": 0, "action": "pass", "nodes": {}, "allreduce": {"time_us": time_us, "bytes": 1 << 20,
                                                                         "backend": "gloo"}}
    assert health_check.summary_line(record) == f"restart 0: passed (0 nodes, all-reduce 1 MiB {said} (gloo))"


def test_two_nodes_named_on_a_node_list_are_them():
    two = [{"node": "n1", "reason": "HEALTH", "why": "slow"}, *SLOW]
    assert health_check.decide(two, "", True, 0, 2, [], [], 2)["message"].startswith(
        "not training on n1, n2: the node list was given, so the job cannot leave them out")
    assert ", so the job cannot leave it out" in health_check.decide(SLOW, "", True, 0, 2, [], [], 2)["message"]


def test_a_spare_node_outside_the_exclusions_is_enough_to_requeue():
    verdict = health_check.decide(SLOW, "", False, 1, 2, ["n1", "n2", "n3"], [], 2)
    assert verdict == {"action": "requeue", "exclude": ["n2"], "message": "without n2 (restart 2 of at most 2)"}


def test_a_node_against_others_of_no_time_is_slow_without_a_ratio():
    assert health_check.slow_nodes({"a": 0.0, "b": 0.5}, 1.5) == [
        {"node": "b", "seconds": 0.5, "median_seconds": 0.0, "ratio": None}]


def test_a_record_of_odd_parts_still_makes_a_line():
    record = {"restart": 0, "action": "pass", "seconds": True, "nodes": {"n1": {"seconds": "fast"}, "n2": "odd"},
              "allreduce": {"time_us": True, "bytes": 4}, "named": ["odd"], "message": "passed"}
    assert health_check.summary_line(record) == "restart 0: passed (2 nodes)"
    record.update(allreduce={"time_us": 1500, "bytes": True})
    assert health_check.summary_line(record) == "restart 0: passed (2 nodes)"


def test_the_options_that_judge_and_bound_the_gate():
    args = health_check.parse_args(["--dir", "/d", "--tag", "1", "--matmul-size", "0", "--timeout", "0.1",
                                    "--slow-factor", "1.01"])
    assert (args.matmul_size, args.timeout, args.slow_factor, args.judge) == (0, 0.1, 1.01, False)


@pytest.mark.parametrize("argv", [["--tag", "1"], ["--dir", "/d"]])
def test_the_directory_and_the_tag_are_required(argv, capsys):
    with pytest.raises(SystemExit):
        health_check.parse_args(argv)
    assert "required" in capsys.readouterr().err


def test_help_says_what_the_program_is(capsys):
    with pytest.raises(SystemExit):
        health_check.parse_args(["--help"])
    assert "The job's health gate (docs/resilience.md): before every attempt trains" in capsys.readouterr().out


def test_the_record_file_is_the_one_a_launch_reads():
    assert health_check.record_path("/run", 42) == os.path.join("/run", run_cost.HEALTH_FILE.format(job_id=42))


def test_only_whole_records_are_read_back():
    good = {"restart": 0, "action": "pass", "nodes": {}, "named": [], "seconds": 1.0}
    text = "\n".join([json.dumps(good), '{"restart": 1, "action": "pa', json.dumps({**good, "action": "maybe"}),
                      json.dumps([1, 2]), json.dumps({**good, "restart": 1})])
    assert [record["restart"] for record in run_cost.parse_health(text)] == [0, 1]


def test_a_record_read_back_without_parts_still_makes_a_line():
    assert health_check.summary_line({"restart": 1, "action": "fail", "nodes": {"n1": {"error": "x"}}, "named": []}) == \
        "restart 1: failed (1 nodes)"


@pytest.mark.parametrize("argv", [["--slow-factor", "1"], ["--matmul-size", "-1"], ["--timeout", "0"]])
def test_bad_options_are_refused(argv, capsys):
    with pytest.raises(SystemExit):
        health_check.parse_args(["--dir", "/d", "--tag", "1", *argv])
    assert "--slow-factor" in capsys.readouterr().err


def test_two_nodes_on_this_machine_meet_compute_and_all_reduce(tmp_path):
    """Two node processes (torch on CPU, gloo) as srun starts them: they meet at rank 0's store,
    time their matmuls in lockstep, each writes its time, both the all-reduce's; the judge passes
    them (at a factor no scheduling noise reaches: the rule has tests of its own)."""
    pytest.importorskip("torch")
    procs = []
    for rank in (0, 1):
        env = {"PATH": "/usr/bin:/bin", "SLURMD_NODENAME": f"n{rank + 1}", "SLURM_NODEID": str(rank),
               "SLURM_NNODES": "2", "MASTER_ADDR": "127.0.0.1", "SLURM_CPUS_PER_TASK": "1", "OMP_NUM_THREADS": "1"}
        procs.append(subprocess.Popen([sys.executable, str(PROGRAM), "--dir", str(tmp_path), "--tag", "42",
                                       "--matmul-size", "256", "--timeout", "60"], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [proc.communicate(timeout=120) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outs
    for rank, (out, _) in enumerate(outs):
        assert f"health-check n{rank + 1}: matmul " in out and "(cpu, 256x256 float32, best of 3)" in out
    found = [json.loads((tmp_path / f".42.health.n{rank}").read_text()) for rank in (1, 2)]
    assert all(one["seconds"] > 0 and one["device"] == "cpu" and one["threads"] == 1 for one in found), found
    assert found[0]["allreduce"] == found[1]["allreduce"], "the slowest node's time, the same on both"
    assert found[0]["allreduce"]["wrong"] == 0 and found[0]["allreduce"]["backend"] == "gloo"
    named, problem = health_check.named_nodes({one["node"]: one for one in found}, ["n1", "n2"], 100)
    assert (named, problem) == ([], "")


def test_a_node_that_fails_tells_the_others_who_then_do_not_wait_for_it(tmp_path):
    """Rank 1's GPU check fails (a CPU torch asked for GPUs): it says so at the store, rank 0 skips
    the all-reduce at once rather than wait out the gate's time."""
    pytest.importorskip("torch")
    started = time.monotonic()
    procs = []
    for rank in (0, 1):
        env = {"PATH": "/usr/bin:/bin", "SLURMD_NODENAME": f"n{rank + 1}", "SLURM_NODEID": str(rank),
               "SLURM_NNODES": "2", "MASTER_ADDR": "127.0.0.1", "SLURM_CPUS_PER_TASK": "1"}
        gpus = ["--gpus-per-node", "2"] if rank else []
        procs.append(subprocess.Popen([sys.executable, str(PROGRAM), "--dir", str(tmp_path), "--tag", "42",
                                       "--matmul-size", "64", "--timeout", "100", *gpus], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [proc.communicate(timeout=120) for proc in procs]
    assert time.monotonic() - started < 60, outs
    found = {rank: json.loads((tmp_path / f".42.health.n{rank + 1}").read_text()) for rank in (0, 1)}
    assert found[1]["gpu_check"] and "seconds" not in found[1], found
    assert found[0]["waited"] == "stopped: n2 failed", "rank 0 stopped at its first matmul's barrier"
    assert found[0]["allreduce"] == {"skipped": "not every node computed (n1, n2)"}
    named, _ = health_check.named_nodes({one["node"]: one for one in found.values()}, ["n1", "n2"], 1.5)
    assert [(one["node"], one["reason"]) for one in named] == [("n2", "GPU_CHECK")]


def test_a_node_that_cannot_reach_rank_0s_store_waits_and_rank_0_is_named(tmp_path):
    """Node rank 0 never opened its store (it died before): the other node waits out the gate's
    time, says so, and is not named; rank 0, with no result, is."""
    pytest.importorskip("torch")
    env = {"PATH": "/usr/bin:/bin", "SLURMD_NODENAME": "n2", "SLURM_NODEID": "1", "SLURM_NNODES": "2",
           "MASTER_ADDR": "127.0.0.1"}
    proc = subprocess.run([sys.executable, str(PROGRAM), "--dir", str(tmp_path), "--tag", "42", "--timeout", "2"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    found = json.loads((tmp_path / ".42.health.n2").read_text())
    assert found["waited"].startswith("no store on 127.0.0.1: TimeoutError: node rank 0 (127.0.0.1) opened no store")
    named, _ = health_check.named_nodes({"n2": found}, ["n1", "n2"], 1.5)
    assert [(one["node"], one["why"]) for one in named] == [("n1", "no result: its check did not finish")]
