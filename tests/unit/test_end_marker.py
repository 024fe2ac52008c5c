"""The end marker slurm_job watches so that a launch answers right after its job ends.

Time is a scripted clock here: the module's sleeps advance it, and the job "ends" (writes its
marker) at a set moment, so each test states when the launch answers, on a loaded machine too.
"""

from types import SimpleNamespace

import pytest
from ansible_collections.hpc.slurm_train.plugins.modules import slurm_job


class Clock:
    """monotonic() and sleep() for slurm_job; `at(t, action)` runs action once the clock reaches t."""

    def __init__(self):
        self.now, self.events, self.sleeps = 1000.0, [], []

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        assert seconds >= 0
        self.sleeps.append(round(seconds, 6))
        self.now += seconds
        for event in [e for e in self.events if e[0] <= self.now]:
            self.events.remove(event)
            event[1]()

    def at(self, offset, action):
        self.events.append((self.now + offset, action))


@pytest.fixture
def clock(monkeypatch):
    fake = Clock()
    monkeypatch.setattr(slurm_job, "time", SimpleNamespace(monotonic=fake.monotonic, sleep=fake.sleep))
    return fake


def test_a_marker_that_appears_ends_the_wait_at_the_next_check_and_hurries_the_next_polls(tmp_path, clock):
    marker = slurm_job.EndMarker(str(tmp_path / ".%j.ended"), 42)
    clock.at(0.12, lambda: (tmp_path / ".42.ended").write_text("0\n"))
    started = clock.now
    marker.wait(10)
    # The job ended at 0.12 s; the launch knows at the next check (every 0.05 s), not after 10 s.
    assert clock.now - started == pytest.approx(0.15)
    assert clock.sleeps == pytest.approx([0.05] * 3)
    # Ten quick looks at Slurm (written out, not read from the constant under test), then the schedule.
    assert [marker.hurry() for _ in range(11)] == [True] * 10 + [False]


def test_a_marker_left_by_an_earlier_run_does_not_count_until_it_changes(tmp_path, clock):
    (tmp_path / ".7.ended").write_text("0\n")
    marker = slurm_job.EndMarker(str(tmp_path / ".%j.ended"), 7)
    started = clock.now
    marker.wait(0.12)
    assert clock.now - started == pytest.approx(0.12)  # the whole wait: the old marker is no news
    assert clock.sleeps == pytest.approx([0.05, 0.05, 0.02])  # the last check cut to the deadline
    assert marker.hurry() is False
    (tmp_path / ".7.ended").write_text("143\n")
    started = clock.now
    marker.wait(10)
    assert clock.now == started  # already changed: no sleep at all
    assert marker.hurry() is True


def test_a_marker_already_seen_by_an_earlier_slice_is_no_news(tmp_path, clock):
    path = tmp_path / ".7.ended"
    path.write_text("0\n")
    stat = path.stat()
    marker = slurm_job.EndMarker(str(tmp_path / ".%j.ended"), 7, seen=[stat.st_mtime_ns, stat.st_size])
    marker.wait(1)
    assert (clock.now - 1000.0, marker.hurry()) == (pytest.approx(1.0), False)


def test_a_marker_written_between_two_slices_is_the_jobs_end(tmp_path, clock):
    """The earlier slice saw no marker; one there as this slice starts came after it: no 60 s poll."""
    (tmp_path / ".7.ended").write_text("91\n")
    marker = slurm_job.EndMarker(str(tmp_path / ".%j.ended"), 7, seen=None, carried=True)
    assert marker.wait(60) is True and clock.now == 1000.0
    assert marker.hurry() is True


def test_without_a_marker_the_wait_is_the_plain_interval(clock):
    marker = slurm_job.EndMarker(None, 1)
    marker.wait(0.3)
    assert clock.sleeps == [0.3]
    assert marker.hurry() is False


def test_a_marker_that_cannot_be_read_is_waited_out(tmp_path, clock):
    # A NAS directory that is not there (yet): no marker to see, so the plain interval.
    marker = slurm_job.EndMarker(str(tmp_path / "missing" / ".%j.ended"), 3)
    assert marker.path == str(tmp_path / "missing" / ".3.ended")
    marker.wait(0.5)
    assert clock.now - 1000.0 == pytest.approx(0.5)
    assert marker.hurry() is False


def test_a_wait_shorter_than_the_code_takes_never_asks_for_a_negative_sleep(monkeypatch):
    # time.sleep refuses a negative length; here each look at the clock costs a millisecond.
    fake = Clock()

    def monotonic():
        fake.now += 0.001
        return fake.now

    monkeypatch.setattr(slurm_job, "time", SimpleNamespace(monotonic=monotonic, sleep=fake.sleep))
    slurm_job.EndMarker(None, 1).wait(0.0005)
    assert fake.sleeps == [0.0]
