"""How library/slurm_job.py paces its looks while following a job: a progress slice's new log lines
and when the log is looked at, the poll schedule below a second, and a running job looked at as
its time limit passes."""

import datetime
from types import SimpleNamespace

import pytest

from ansible_collections.hpc.slurm_train.plugins.modules import slurm_job
from test_slurm_job_module import SCONTROL, clock, job_output, run_module, slurm_cli  # noqa: F401


def test_a_slice_shows_at_most_20_new_log_lines_unless_told(slurm_cli, clock, tmp_path, job_output):
    (tmp_path / "train-ddp-1234.out").write_text("".join(f"step {n}\n" for n in range(30)))
    slurm_cli.answer(SCONTROL, out=job_output("running", run_dir=str(tmp_path)))
    slurm_cli.answer(SCONTROL, out=job_output("completed", run_dir=str(tmp_path)))
    result = run_module({"job_id": 1234, "return_on_change": True, "timeout": 60}).result
    assert result["progress"]["log_lines"] == [f"step {n}" for n in range(10, 30)]


@pytest.mark.parametrize("every, slept", [(None, 2.0), (0.5, 0.5)])
def test_a_slice_ends_for_new_log_lines_at_the_first_look_at_the_log(slurm_cli, clock, tmp_path, job_output,
                                                                     monkeypatch, every, slept):
    # progress_log_every: 2 s unless told, any time above 0.
    log = tmp_path / "train-ddp-1234.out"
    log.write_text("step 0\n")
    sleep = clock.sleep

    def training_writes(seconds):
        sleep(seconds)
        with log.open("a") as out:
            out.write(f"step {len(clock.sleeps)}\n")

    monkeypatch.setattr(clock, "sleep", training_writes)
    slurm_cli.answer(SCONTROL, out=job_output("running", run_dir=str(tmp_path)))
    args = {"job_id": 1234, "return_on_change": True, "timeout": 60, "poll_min": 10}
    result = run_module({**args, "progress_log_every": every} if every else args).result
    assert clock.sleeps == [slept]
    assert (result["state"], result["progress"]["log_lines"]) == ("RUNNING", ["step 0", "step 1"])


def test_a_poll_interval_below_a_second_is_kept(slurm_cli, clock, job_output):
    slurm_cli.answer(SCONTROL, out=job_output("running"))
    slurm_cli.answer(SCONTROL, out=job_output("running"))
    slurm_cli.answer(SCONTROL, out=job_output("completed"))
    assert run_module({"job_id": 1234, "poll_min": 0.5, "poll_max": 0.5}).result["state"] == "COMPLETED"
    assert clock.sleeps == [0.5, 0.5]


NOW = datetime.datetime(2026, 12, 4, 18, 0, 0)


class FrozenDatetime(datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return NOW


@pytest.mark.parametrize("left, interval", [(30, 35), (1, 6), (0, 60), (-10, 60), (3600, 60)])
def test_a_running_job_with_an_end_marker_is_looked_at_as_its_time_limit_passes(monkeypatch, left, interval):
    # A job killed at its time limit writes no end marker: rather than wait out marked_poll_interval,
    # Slurm is asked poll_min after the limit (EndTime, local time, whole seconds).
    monkeypatch.setattr(slurm_job.datetime, "datetime", FrozenDatetime)
    monkeypatch.setattr(slurm_job, "time", SimpleNamespace(monotonic=lambda: 1000.0))
    runner = SimpleNamespace(params={"marked_poll_interval": 60, "poll_min": 5})
    end = (NOW + datetime.timedelta(seconds=left)).strftime("%Y-%m-%dT%H:%M:%S")
    job = {"state": "RUNNING", "EndTime": end, "stdout_path": None}
    marker = SimpleNamespace(path="/runs/1/.%j.ended")
    look_at, watched = slurm_job.SlurmJobRunner.plan_look(runner, iter([1]), marker, job)
    assert (look_at - 1000.0, watched) == (pytest.approx(interval), None)


def test_a_slice_showing_another_log_than_the_last_starts_at_its_tail(slurm_cli, clock, tmp_path, job_output):
    # An array's shown task changed: the offset the last slice reached is another file's.
    (tmp_path / "train-ddp-1234.out").write_text("aaaa\nbbbb\n")
    slurm_cli.answer(SCONTROL, out=job_output("completed", run_dir=str(tmp_path)))
    previous = {"state": "RUNNING", "restarts": 0, "next_poll": 8.0, "marker": None,
                "log_path": str(tmp_path / "train-ddp-1234_0.out"), "log_offset": 3,
                "owner": {"uid": 0, "user": "root", "name": "train-ddp"}}
    result = run_module({"job_id": 1234, "return_on_change": True, "timeout": 60, "progress_from": previous}).result
    assert result["progress"]["log_lines"] == ["aaaa", "bbbb"]


def test_lines_written_between_two_slices_end_the_next_at_its_first_look_at_the_log(slurm_cli, clock, tmp_path,
                                                                                  job_output):
    log = tmp_path / "train-ddp-1234.out"
    log.write_text("step 0\n")
    slurm_cli.answer(SCONTROL, out=job_output("running", run_dir=str(tmp_path)))
    first = run_module({"job_id": 1234, "return_on_change": True, "timeout": 1, "poll_min": 10}).result
    assert first["timed_out"] is True and first["progress"]["log_lines"] == ["step 0"]
    with log.open("a") as out:
        out.write("step 1\n")  # while the controller shows the slice's answer
    clock.sleeps.clear()
    result = run_module({"job_id": 1234, "return_on_change": True, "timeout": 60, "poll_min": 10,
                         "progress_from": first["progress"]}).result
    assert clock.sleeps == [2.0] and result["progress"]["log_lines"] == ["step 1"]
    assert len(slurm_cli.calls) == 1, "the job as the last slice saw it: Slurm is not asked"
