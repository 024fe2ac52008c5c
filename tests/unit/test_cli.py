"""The slurm-train command: every launch -e name an option with its default in --help, a misspelt
option refused naming the closest one, and each subcommand one call of the API with what was typed."""

import tomllib

import pytest
import yaml

from conftest import PROJECT_ROOT
from slurm_train import _rules, api, cli

TRAINER = str(PROJECT_ROOT / "examples" / "train_ddp.py")


def help_of(capsys, *argv):
    with pytest.raises(SystemExit) as done:
        cli.main([*argv, "--help"])
    assert done.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def test_launch_help_lists_every_launch_key_with_its_default(capsys):
    text = help_of(capsys, "launch")
    aliases, _ = _rules.known_keys()
    for key in aliases:
        if key in cli._NOT_OPTIONS:
            continue
        flag = "--" + key.replace("_", "-")
        assert f" {flag} " in text or f" {flag}, --no-" in text, flag
    assert text.count("(default: ") >= len(aliases) - len(cli._NOT_OPTIONS) + 2  # each option, --inventory and --user
    assert "--time-limit TEXT sbatch --time (minutes, or D-HH:MM:SS) (default: 1-00:00:00)" in text
    assert "--account TEXT empty: the user's default account (default: the inventory's cluster_account)" in text
    assert "--inventory PATH, -i PATH the inventory (default: what ansible-playbook uses here: " in text


@pytest.mark.parametrize("argv, suggestion", [
    (["launch", TRAINER, "--nodse", "node110"], "--nodse (did you mean --nodes?)"),
    (["launch", TRAINER, "--node", "node110"], "--node (did you mean --nodes?)"),
    (["launch", TRAINER, "--time-limt=10"], "--time-limt=10 (did you mean --time-limit?)"),
    (["jobs", "--al"], "--al (did you mean --all?)"),
])
def test_a_misspelt_option_is_refused_naming_the_closest(capsys, monkeypatch, argv, suggestion):
    monkeypatch.setattr(api, "launch", lambda *a, **k: pytest.fail("nothing may run"))
    monkeypatch.setattr(api, "jobs", lambda *a, **k: pytest.fail("nothing may run"))
    with pytest.raises(SystemExit) as done:
        cli.main(argv)
    assert done.value.code == 2
    assert f"unrecognized arguments: {suggestion}" in capsys.readouterr().err


def test_launch_passes_what_was_typed_to_the_api(monkeypatch, capsys):
    calls = []

    def launch(script, **kwargs):
        calls.append((script, kwargs))
        return api.JobResult(job_id=7, name="train_ddp", state="COMPLETED", exit_code=0, outcome="succeeded",
                             final=True, summary="job 7 (train_ddp) COMPLETED")

    monkeypatch.setattr(api, "launch", launch)
    code = cli.main(["launch", TRAINER, "--nodes", "node[110-111]", "--nproc-per-node", "2", "--no-wait",
                     "--sweep", '{"lr": [0.1, 0.01]}', "--inventory", "inv", "--", "--lr", "0.1", "--", "x"])
    assert code == 0
    script, kwargs = calls[0]
    on_progress = kwargs.pop("on_progress")
    assert script == TRAINER and on_progress is cli._show
    assert kwargs == {"inventory": "inv", "user": None, "nodes": "node[110-111]", "nproc_per_node": 2,
                      "wait": False, "sweep": {"lr": [0.1, 0.01]}, "script_args": ["--lr", "0.1", "--", "x"]}
    assert capsys.readouterr().out == "job 7 (train_ddp) COMPLETED\n"


def test_a_refused_launch_exits_2_with_the_apis_message(capsys):
    # The API's own check (no playbook runs): the rule's message, as the playbook gives it.
    assert cli.main(["launch", TRAINER, "--nodes", "node110", "--time-limit", "1 hour"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("slurm-train launch: time_limit='1 hour' is not allowed: give Slurm's --time as minutes")


def test_jobs_prints_the_apis_rows_as_a_table(monkeypatch, capsys):
    rows = [{"job": "12", "name": "train_ddp", "run": "1", "state": "COMPLETED", "exit": "0", "nodes": "node110",
             "elapsed": "0:10", "restarts": "0", "cost": "0.0133", "outputs": "outputs/train_ddp-12"}]
    monkeypatch.setattr(api, "listing", lambda show_all, **kwargs: api.Listing(rows if show_all is True else [], []))
    assert cli.main(["jobs", "--all"]) == 0
    header, line = capsys.readouterr().out.splitlines()
    assert header.split() == list(_rules.runs.COLUMNS)
    assert line.split() == list(rows[0].values())


def test_jobs_lists_the_bad_nodes_after_the_table_and_forget_node_clears_one(monkeypatch, capsys):
    bad = [{"node": "node111", "line": "node111: NODE_FAIL in job 12 at 2026-12-07 05:50 UTC, kept out until ..."}]
    monkeypatch.setattr(api, "listing", lambda show_all, **kwargs: api.Listing([], bad))
    assert cli.main(["jobs"]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == [
        "", "bad nodes, kept out of your jobs (slurm-train forget-node NODE clears one):", f"  {bad[0]['line']}"]
    asked = []
    monkeypatch.setattr(api, "forget_node", lambda node, **kwargs: asked.append((node, kwargs)) or bad[0]["line"])
    assert cli.main(["forget-node", "node111", "--user", "bob"]) == 0
    assert asked == [("node111", {"inventory": None, "user": "bob"})]
    assert capsys.readouterr().out == f"forgot {bad[0]['line']}\n"


def test_logs_and_cancel_are_one_api_call_each(monkeypatch, capsys):
    seen = []
    result = api.JobResult(job_id=5, name="t", state="CANCELLED", exit_code=0, outcome="cancelled", final=True)

    def logs(job_id, on_line=None, **kwargs):
        seen.append(("logs", job_id, kwargs))
        on_line("step 1 loss 0.5")
        return result

    monkeypatch.setattr(api, "logs", logs)
    monkeypatch.setattr(api, "cancel", lambda job_id, **kwargs: seen.append(("cancel", job_id, kwargs)) or result)
    assert cli.main(["logs", "5", "--user", "bob"]) == 0
    assert cli.main(["cancel", "5"]) == 0
    assert seen == [("logs", 5, {"inventory": None, "user": "bob"}), ("cancel", 5, {"inventory": None, "user": None})]
    assert capsys.readouterr().out.splitlines() == ["step 1 loss 0.5", "job 5 (t): CANCELLED"]


def test_the_package_and_the_collection_have_one_version():
    galaxy = yaml.safe_load((PROJECT_ROOT / "galaxy.yml").read_text())
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]
    assert project["version"] == galaxy["version"]
    assert project["scripts"]["slurm-train"] == "slurm_train.cli:main"


class Piped:
    """stdout as a pipe: what was written, and what of it was flushed."""

    def __init__(self):
        self.written, self.flushed = "", ""

    def write(self, text):
        self.written += text

    def flush(self):
        self.flushed = self.written


def test_each_progress_and_log_line_is_flushed_as_it_comes(monkeypatch):
    out = Piped()
    monkeypatch.setattr("sys.stdout", out)
    seen_flushed = []

    def logs(job_id, on_line=None, **kwargs):
        for line in ("  5 | [rank0@node110] step 1", "  5 | [rank0@node110] step 2"):
            on_line(line)
            seen_flushed.append(out.flushed)
        return api.JobResult(job_id=5, name="t", state="COMPLETED", exit_code=0, outcome="succeeded", final=True)

    monkeypatch.setattr(api, "logs", logs)
    assert cli.main(["logs", "5"]) == 0
    assert seen_flushed == ["  5 | [rank0@node110] step 1\n",
                            "  5 | [rank0@node110] step 1\n  5 | [rank0@node110] step 2\n"]


def test_a_failed_job_prints_its_summary_and_the_exception(monkeypatch, capsys):
    raised = "rank 1 on node111 raised ValueError: bad batch"
    result = api.JobResult(job_id=9, name="t", state="FAILED", exit_code=1, outcome="failed", final=True,
                           summary=f"job        9 (t)\nfailure    {raised}",
                           job={"failure": {"rank": 1, "node": "node111", "type": "ValueError", "message": "bad batch",
                                            "traceback": []}})

    def launch(script, **kwargs):
        raise api.JobFailed(f"job 9 (t) ended FAILED, exit code 1; outputs in o\n{raised}\nlast lines of l:", result)

    monkeypatch.setattr(api, "launch", launch)
    assert cli.main(["launch", TRAINER, "--nodes", "node110"]) == 1
    shown = capsys.readouterr()
    assert f"failure    {raised}" in shown.out.splitlines()
    assert shown.err.splitlines()[1] == raised


def test_preflight_takes_where_a_job_runs_and_prints_the_summary(monkeypatch, capsys):
    seen = []

    def preflight(**kwargs):
        seen.append(kwargs)
        return ["node      checks", "node110   ok", "node111   ok"]

    monkeypatch.setattr(api, "preflight", preflight)
    assert cli.main(["preflight", "--nodes", "node110,node111", "--partition", "gpu", "--user", "bob"]) == 0
    (kwargs,) = seen
    assert kwargs.pop("on_line") is cli._show
    assert kwargs == {"inventory": None, "user": "bob", "nodes": "node110,node111", "partition": "gpu"}
    assert capsys.readouterr().out.splitlines() == ["node      checks", "node110   ok", "node111   ok"]


def test_a_command_is_required(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main([])
    assert done.value.code == 2 and "the following arguments are required: COMMAND" in capsys.readouterr().err


def test_a_failed_playbook_exits_1_with_its_message(monkeypatch, capsys):
    def logs(job_id, **kwargs):
        raise api.LaunchError("job 5 belongs to bob, not to alice")

    monkeypatch.setattr(api, "logs", logs)
    assert cli.main(["logs", "5"]) == 1
    assert capsys.readouterr().err == "slurm-train logs: job 5 belongs to bob, not to alice\n"


def test_a_misspelt_option_with_a_long_value_is_still_named(capsys, monkeypatch):
    monkeypatch.setattr(api, "launch", lambda *a, **k: pytest.fail("nothing may run"))
    with pytest.raises(SystemExit):
        cli.main(["launch", TRAINER, "--nodse=node110,node111,node112,node113"])
    assert "--nodse=node110,node111,node112,node113 (did you mean --nodes?)" in capsys.readouterr().err


def test_the_command_line_is_read_from_sys_argv(monkeypatch):
    monkeypatch.setattr("sys.argv", ["slurm-train", "jobs", "--all"])
    shown = []
    monkeypatch.setattr(api, "listing",
                        lambda show_all, **kwargs: shown.append(show_all) or api.Listing(jobs=[], bad_nodes=[]))
    assert cli.main() == 0 and shown == [True]


def test_an_option_cut_short_is_refused_not_guessed(monkeypatch, capsys):
    monkeypatch.setattr(api, "jobs", lambda *a, **k: pytest.fail("nothing may run"))
    with pytest.raises(SystemExit) as done:
        cli.main(["jobs", "--inv", "hosts.ini"])
    assert done.value.code == 2 and "unrecognized arguments: --inv" in capsys.readouterr().err
