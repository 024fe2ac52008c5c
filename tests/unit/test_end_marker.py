"""The end marker slurm_job watches so that a launch answers right after its job ends."""

import threading
import time

import slurm_job


def test_a_marker_that_appears_ends_the_wait_early_and_hurries_the_next_polls(tmp_path):
    marker = slurm_job.EndMarker(str(tmp_path / ".%j.ended"), 42)
    threading.Timer(0.3, (tmp_path / ".42.ended").write_text, args=("0\n",)).start()
    started = time.monotonic()
    marker.wait(10)
    assert time.monotonic() - started < 2
    assert [marker.hurry() for _ in range(slurm_job.MARKER_QUICK_POLLS + 1)] == \
        [True] * slurm_job.MARKER_QUICK_POLLS + [False]


def test_a_marker_left_by_an_earlier_run_does_not_count_until_it_changes(tmp_path):
    (tmp_path / ".7.ended").write_text("0\n")
    marker = slurm_job.EndMarker(str(tmp_path / ".%j.ended"), 7)
    started = time.monotonic()
    marker.wait(0.5)
    assert time.monotonic() - started >= 0.5
    assert marker.hurry() is False
    (tmp_path / ".7.ended").write_text("143\n")
    marker.wait(10)
    assert marker.hurry() is True


def test_without_a_marker_the_wait_is_the_plain_interval():
    marker = slurm_job.EndMarker(None, 1)
    started = time.monotonic()
    marker.wait(0.3)
    assert 0.3 <= time.monotonic() - started < 1
    assert marker.hurry() is False
