"""The sweep filters of roles/slurm_launch: what a sweep may be, its points in task order, the
table beside the job script and the report of a finished array."""

from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.hpc.slurm_train.plugins.plugin_utils import launch_request


def test_points_are_the_cross_product_the_last_key_fastest_and_the_table_says_the_same():
    points = launch_request.sweep_points({"lr": [0.1, 0.01], "seed": [1, 2], "opt": ["adam"]})
    assert points == [
        [["lr", "0.1"], ["seed", "1"], ["opt", "adam"]], [["lr", "0.1"], ["seed", "2"], ["opt", "adam"]],
        [["lr", "0.01"], ["seed", "1"], ["opt", "adam"]], [["lr", "0.01"], ["seed", "2"], ["opt", "adam"]]]
    assert launch_request.sweep_table(points) == ("task\tlr\tseed\topt\n0\t0.1\t1\tadam\n1\t0.1\t2\tadam\n"
                                         "2\t0.01\t1\tadam\n3\t0.01\t2\tadam\n")
    assert launch_request.sweep_points({}) == [] and launch_request.sweep_table([]) == ""


@pytest.mark.parametrize(("given", "parallel", "script_args", "problem"), [
    ("lr=0.1", 0, [], "sweep='lr=0.1' is not allowed: give a mapping of option names to lists of values"),
    ({"1lr": [1]}, 0, [], "sweep key '1lr' is not allowed: a letter, then up to 63 letters"),
    ({"lr;x": [1]}, 0, [], "sweep key 'lr;x' is not allowed"),
    ({"lr": 0.1}, 0, [], "sweep lr=0.1 is not allowed: give a non-empty list of values"),
    ({"lr": "0.1"}, 0, [], "sweep lr='0.1' is not allowed: give a non-empty list of values"),
    ({"lr": []}, 0, [], "sweep lr=[] is not allowed: give a non-empty list of values"),
    ({"lr": ["0.1 --evil"]}, 0, [], "sweep lr value '0.1 --evil' is not allowed: a number, or text"),
    ({"lr": ["$(id)"]}, 0, [], "sweep lr value '$(id)' is not allowed"),
    ({"lr": [True]}, 0, [], "sweep lr value True is not allowed"),
    ({"lr": [None]}, 0, [], "sweep lr value None is not allowed"),
    ({"lr": [{"a": 1}]}, 0, [], "sweep lr value {'a': 1} is not allowed"),
    ({"lr": ["x" * 201]}, 0, [], "is not allowed: a number, or text of up to 200"),
    ({"lr": [0.1, "0.1"]}, 0, [], "sweep lr lists 0.1 more than once: each point would run twice"),
    ({"lr": [0.1]}, 0, ["--steps", "6", "--lr=0.3"], "sweep key 'lr' is not allowed: script_args sets --lr too"),
    ({"a": list(range(10)), "b": list(range(10)), "c": list(range(11))}, 0, [],
     "sweep has 1100 points, over 1000 (Slurm's default MaxArraySize allows task ids 0 to 1000)"),
    ({"lr": [0.1]}, "-1", [], "sweep_parallel='-1' is not allowed: give a whole number, 0 (as many at once as Slurm "
                              "allows) to 1000"),
    ({"lr": [0.1]}, 1001, [], "sweep_parallel=1001 is not allowed"),
    ({}, 2, [], "sweep_parallel=2 is not allowed without a sweep"),
])
def test_a_bad_sweep_is_named_with_what_would_be_right(given, parallel, script_args, problem):
    problems = launch_request.sweep_problems(given, parallel, script_args)
    assert len(problems) == 1 and problem in problems[0], problems


def test_points_of_a_bad_sweep_are_refused_with_every_problem():
    with pytest.raises(AnsibleFilterError, match=r"^sweep key '1lr' is not allowed: .*; sweep b=\[\] is not allowed"):
        launch_request.sweep_points({"1lr": [1], "b": []})


@pytest.mark.parametrize("given", [{}, None, "", {"lr": [0.1, 1e-4, "3e-4", "cosine", -1, "a/b:c=d,e+f@g"]}])
def test_a_good_sweep_or_none_has_no_problems(given):
    assert launch_request.sweep_problems(given, 0, ["--steps", "6", "--lr-decay", "1"]) == []
    assert launch_request.sweep_problems(given, "3" if given else 0) == []


def test_the_report_has_a_row_per_point_and_names_the_points_that_did_not_complete():
    points = launch_request.sweep_points({"lr": [0.1, 0.01]})
    tasks = [{"task": 0, "state": "COMPLETED", "exit_code": 0, "elapsed_seconds": 9, "log_last_line": "done",
              "stdout_path": "/nas/s-5_0.out"},
             {"task": 1, "state": "TIMEOUT", "exit_code": 0, "elapsed_seconds": 60, "log_last_line": None,
              "stdout_path": "/nas/s-5_1.out"}]
    report = launch_request.sweep_report(tasks, points)
    assert [(row["task"], row["args"], row["state"], row["last_line"]) for row in report["rows"]] == [
        (0, "lr=0.1", "COMPLETED", "done"), (1, "lr=0.01", "TIMEOUT", "")]
    assert report["failed"] == ["point 1 (lr=0.01) ended TIMEOUT, exit code 0"]
    assert report["lines"] == ["task  arguments  state      exit  elapsed  last log line",
                               "0     lr=0.1     COMPLETED  0     9        done",
                               "1     lr=0.01    TIMEOUT    0     60"]


def test_a_point_stopped_no_progress_is_said_in_the_words_given_for_it():
    points = launch_request.sweep_points({"lr": [0.1, 0.01]})
    tasks = [{"task": 0, "state": "FAILED", "exit_code": 1, "no_progress": {"step": 5, "checkpoint_step": 4}},
             {"task": 1, "state": "FAILED", "exit_code": 1, "no_progress": None}]
    report = launch_request.sweep_report(tasks, points, lambda task: f"stopped at {task['no_progress']['step']}")
    assert report["failed"] == ["point 0 (lr=0.1) ended FAILED, exit code 1; stopped at 5",
                                "point 1 (lr=0.01) ended FAILED, exit code 1"]
    assert [row["no_progress"] for row in report["rows"]] == [{"step": 5, "checkpoint_step": 4}, None]


def test_a_report_without_the_points_or_with_tasks_pending_together_shows_dashes():
    # A sweep followed by job id: the points are not known; "2-3" is tasks still pending together.
    report = launch_request.sweep_report([{"task": 0, "state": "COMPLETED", "exit_code": 0, "elapsed_seconds": 1},
                                 {"task": "2-3", "state": "PENDING", "exit_code": 0, "elapsed_seconds": None}], [])
    assert [row["args"] for row in report["rows"]] == ["-", "-"]
    assert report["lines"][2].split() == ["2-3", "-", "PENDING", "0", "-"]
    assert report["failed"] == ["point 2-3 (-) ended PENDING, exit code 0"]


def test_a_sweep_of_a_thousand_points_at_most_a_thousand_at_once_is_allowed():
    assert launch_request.sweep_problems({"a": list(range(10)), "b": list(range(100))}, 1000) == []
    assert launch_request.sweep_problems({"a": list(range(7)), "b": list(range(143))}, 0) == [
        "sweep has 1001 points, over 1000 (Slurm's default MaxArraySize allows task ids 0 to 1000): sweep fewer values "
        "or launch it in parts"]


def test_a_task_outside_the_points_has_no_arguments():
    points = launch_request.sweep_points({"lr": [0.1, 0.01]})
    tasks = [{"task": task, "state": "COMPLETED"} for task in (-1, 0, 1, 2)]
    assert [row["args"] for row in launch_request.sweep_report(tasks, points)["rows"]] == ["-", "lr=0.1", "lr=0.01", "-"]


def test_a_key_without_values_does_not_hide_the_next_keys_problem():
    assert launch_request.sweep_problems({"a": [], "b": ["x y"]}) == [
        "sweep a=[] is not allowed: give a non-empty list of values, e.g. [0.1, 0.01]",
        f"sweep b value 'x y' is not allowed: {launch_request.SWEEP_VALUE_RULE}"]


def test_the_table_of_a_sweep_of_one_point():
    assert launch_request.sweep_table(launch_request.sweep_points({"lr": [0.1]})) == "task\tlr\n0\t0.1\n"
