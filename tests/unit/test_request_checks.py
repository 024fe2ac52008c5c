"""launch_request's text_problems and count_problems (the slurm_launch_request action's): a
request's names and counts checked in one pass each."""


import pytest

from conftest import PROJECT_ROOT

from ansible_collections.hpc.slurm_train.plugins.plugin_utils import launch_request


def test_text_and_lists_of_text_where_allowed_pass():
    assert launch_request.text_problems([
        {"key": "nodes", "value": ["node110"], "list_ok": True},
        {"key": "script", "value": "train.py"},
        {"key": "group", "value": ""},
    ]) == []


def test_each_value_that_is_not_text_is_named_as_given_with_how_to_give_it():
    problems = launch_request.text_problems([
        {"key": "nodes", "value": 110, "hint": " or a list of node names", "list_ok": True},
        {"key": "script", "value": "ok.py"},
        {"key": "partition", "value": ["gpu"]},
        {"key": "account", "value": {"a": 1}},
    ])
    assert problems == [
        "nodes=110 is not allowed: give it as text (-e nodes=VALUE, or in JSON -e '{\"nodes\": \"VALUE\"}') "
        "or a list of node names.",
        "partition=[\"gpu\"] is not allowed: give it as text (-e partition=VALUE, or in JSON "
        "-e '{\"partition\": \"VALUE\"}').",
        "account={\"a\": 1} is not allowed: give it as text (-e account=VALUE, or in JSON -e '{\"account\": \"VALUE\"}').",
    ]


@pytest.mark.parametrize("value", [0, 2, "3", 65535])
def test_whole_numbers_within_the_bounds_pass(value):
    assert launch_request.count_problems([{"key": "master_port", "value": value, "min": 0, "max": 65535}]) == []


@pytest.mark.parametrize("item, message", [
    ({"key": "num_nodes", "value": -2, "min": 1, "hint": " (with group, how many of its nodes)"},
     "num_nodes=-2 is not allowed: give a whole number, at least 1 (with group, how many of its nodes)."),
    ({"key": "num_nodes", "value": 0, "min": 1}, "num_nodes=0 is not allowed: give a whole number, at least 1."),
    ({"key": "master_port", "value": 70000, "min": 0, "max": 65535},
     "master_port=70000 is not allowed: give a whole number, at least 0 and at most 65535."),
    ({"key": "gpus_per_node", "value": 1.5, "min": 0}, "gpus_per_node=1.5 is not allowed: give a whole number, at least 0."),
    ({"key": "job_id", "value": True, "min": 0}, "job_id=True is not allowed: give a whole number, at least 0."),
    ({"key": "job_id", "value": "2 ", "min": 0}, "job_id=2  is not allowed: give a whole number, at least 0."),
])
def test_a_count_out_of_its_bounds_or_not_whole_is_named_with_its_bounds(item, message):
    assert launch_request.count_problems([item, {"key": "job_id", "value": 1, "min": 0}]) == [message]
