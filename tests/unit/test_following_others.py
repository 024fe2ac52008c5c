"""What following a job reads and shows (docs/hostile-input.md, "Following another user's job"):
the log tail bounded and shown with its control characters made visible, the owner's files of
another user's job reached only without links, and the owner question's answers parsed."""

import os
import time

import pytest

from ansible_collections.hpc.slurm_train.plugins.module_utils import job_dirs, slurm
from ansible_collections.hpc.slurm_train.plugins.module_utils.cluster_rules import visible
from ansible_collections.hpc.slurm_train.plugins.modules import slurm_job


def test_control_characters_but_tab_are_shown_as_escapes():
    assert visible("\x1b]0;pwned\x07\x1b[1A\x1b[2Kdone\tok\x7f\x9b\x85é") == (
        "\\x1b]0;pwned\\x07\\x1b[1A\\x1b[2Kdone\tok\\x7f\\x9b\\x85é")
    assert visible(None) is None


def test_the_tail_takes_carriage_returns_as_line_ends_and_shows_escapes(tmp_path):
    log = tmp_path / "job.out"
    log.write_bytes(b"first\r\nstep 1\rstep 2\rstep 3\n\x1b[2Kdone\n")
    assert slurm_job.read_log_tail(str(log), 3) == ["step 2", "step 3", "\\x1b[2Kdone"]
    assert slurm_job.read_log_tail(str(log), 10) == ["first", "step 1", "step 2", "step 3", "\\x1b[2Kdone"]
    lines, offset = slurm_job.read_new_lines(str(log), 7, 10)
    assert (lines, offset) == (["step 1", "step 2", "step 3", "\\x1b[2Kdone"], log.stat().st_size)


@pytest.fixture
def counted_reads(monkeypatch):
    """Bytes the tail reader asks the file for."""
    asked = []
    real = os.pread

    def pread(fd, size, offset):
        asked.append(size)
        return real(fd, size, offset)

    monkeypatch.setattr(slurm_job.os, "pread", pread)
    return asked


def test_a_64_mb_log_without_a_line_end_costs_one_mib_not_its_size_squared(tmp_path, counted_reads):
    log = tmp_path / "bar.out"
    with open(log, "wb") as out:
        for _ in range(64):
            out.write(b"#" * (1 << 20))
    started = time.monotonic()
    tail = slurm_job.read_log_tail(str(log), 40)
    took = time.monotonic() - started
    assert sum(counted_reads) == slurm_job.LOG_TAIL_SCAN_BYTES == 1 << 20
    assert tail == ["#" * (1 << 20)], "the last MiB, as one line"
    assert took < 1, f"{took:.1f} s for one look (the quadratic reader took 23 s)"


def test_a_tail_found_within_the_scan_reads_only_as_far_back_as_it_needs(tmp_path, counted_reads):
    log = tmp_path / "job.out"
    log.write_bytes(b"x" * (8 << 20) + b"".join(b"line %d\n" % n for n in range(50)))
    assert slurm_job.read_log_tail(str(log), 3) == ["line 47", "line 48", "line 49"]
    assert counted_reads == [slurm_job.LOG_READ_BLOCK]


def test_a_fifo_in_place_of_the_log_is_not_waited_on(tmp_path):
    fifo = tmp_path / "job.out"
    os.mkfifo(fifo)
    assert slurm_job.read_log_tail(str(fifo), 5) == []
    assert slurm_job.read_new_lines(str(fifo), None, 5) == ([], None)


@pytest.fixture
def jobs(tmp_path):
    """<jobs>/<me>/train/runs/1/ with a log, as the user running the tests (the job's owner)."""
    me = job_dirs.owner_name(os.geteuid())
    run = tmp_path / "jobs" / me / "train" / "runs" / "1"
    run.mkdir(parents=True)
    (run / "train-7.out").write_text("mine\n")
    return tmp_path / "jobs", me, run


def read_owned(root, user, path, uid=None):
    fd = job_dirs.open_owned_file(str(root), user, os.geteuid() if uid is None else uid, str(path))
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


def test_the_owners_regular_file_is_read(jobs):
    root, me, run = jobs
    assert read_owned(root, me, run / "train-7.out") == b"mine\n"


def test_a_link_in_place_of_the_file_or_a_directory_is_refused(jobs, tmp_path):
    root, me, run = jobs
    (tmp_path / "canary").write_text("root's alone\n")
    (run / "train.sbatch").symlink_to(tmp_path / "canary")
    with pytest.raises(OSError, match="a link or not a directory on the way"):
        read_owned(root, me, run / "train.sbatch")
    os.rename(run, run.with_name("2"))
    run.symlink_to(run.with_name("2"))  # runs/1 -> runs/2: every component is opened without links
    with pytest.raises(OSError, match="a link or not a directory on the way"):
        read_owned(root, me, run / "train-7.out")


def test_a_path_outside_the_owners_directory_or_another_owners_file_is_refused(jobs, tmp_path):
    root, me, run = jobs
    with pytest.raises(OSError, match="not under"):
        read_owned(root, me, tmp_path / "canary")
    with pytest.raises(OSError, match="not under"):
        read_owned(root, me, f"{run}/../../../../{me}-other/x")
    with pytest.raises(OSError, match=f"directory of {me}, not of"):
        read_owned(root, me, run / "train-7.out", uid=os.geteuid() + 4242)
    os.mkfifo(run / "fifo")
    with pytest.raises(OSError, match="not a regular file"):
        read_owned(root, me, run / "fifo")


def test_another_users_log_is_not_read_outside_the_jobs_directory(tmp_path):
    log = tmp_path / "job.out"
    log.write_text("someone's\n")
    with pytest.raises(OSError):
        slurm_job.refuse_open(str(log))
    assert slurm_job.read_log_tail(str(log), 5, slurm_job.refuse_open) == []


def test_the_owner_answers_are_parsed_from_fields_no_job_name_shapes():
    assert slurm.parse_job_identity("2002|a | b UserId=alice(2001)\n2002|a | b UserId=alice(2001)\n") == (
        2002, "a | b UserId=alice(2001)")
    assert slurm.parse_job_identity("") is None
    with pytest.raises(slurm.SlurmParseError, match="a job name with a line break cannot be read"):
        slurm.parse_job_identity("2002|a\n2001|b\n")  # sbatch -J $'a\n2001|b'
    assert slurm.parse_accounting_uid("2002\n2002\n") == 2002
    assert slurm.parse_accounting_uid("") is None
    with pytest.raises(slurm.SlurmParseError):
        slurm.parse_accounting_uid("2002\n2001\n")
