"""Which log library/slurm_job.py reads, and how much of it: the bound on one look at a log that
grew a lot, and the log of a requeued job's last run when only accounting remembers the job."""

import re

from ansible_collections.hpc.slurm_train.plugins.modules import slurm_job
from test_slurm_job_module import (  # noqa: F401
    INVALID_JOB_ID, SACCT, SCONTROL, answer_sacct_version, clock, run_module, sacct_output, slurm_cli,
)

BLOCK = 64 * 1024


def test_one_look_at_new_output_reads_the_last_64_kib_whatever_was_written(tmp_path):
    # A job that wrote more than a block since the last look costs one block: the lines before
    # its last 64 KiB are skipped (here the block starts where the last line does).
    log = tmp_path / "job.out"
    last = b"y" * (BLOCK - 1) + b"\n"
    log.write_bytes(b"old\n" + b"skipped\n" + last)
    lines, offset = slurm_job.read_new_lines(str(log), 4, 5)
    assert (lines, offset) == ([last[:-1].decode()], log.stat().st_size)
    # A block that begins inside a line shows none of that line's tail as a line of its own.
    log.write_bytes(b"old\n" + b"x" * 100 + b"\n" + b"z" * (BLOCK - 10) + b"\n")
    lines, offset = slurm_job.read_new_lines(str(log), 4, 5)
    assert (lines, offset) == (["z" * (BLOCK - 10)], log.stat().st_size)
    # Within a block, every new line is there.
    log.write_bytes(b"old\n" + last)
    assert slurm_job.read_new_lines(str(log), 4, 5) == ([last[:-1].decode()], log.stat().st_size)


def test_a_requeued_job_renamed_before_its_last_run_reports_that_runs_log(slurm_cli, clock, sacct_output,
                                                                          slurm_output, tmp_path):
    # sacct -D (22.05) prints one line per run, oldest first, each with the name the job had then;
    # `scontrol update JobId=1234 JobName=train-ddp-v2` while it waited again renames the second,
    # and %x-%j.out names each run's log after it.
    text = sacct_output("sacct_requeued.txt", work_dir=str(tmp_path))
    first, second = text.splitlines()
    text = f"{first}\n{re.sub(r'^1234[|]train-ddp[|]', '1234|train-ddp-v2|', second)}\n"
    (tmp_path / "train-ddp-1234.out").write_text("run 1\n")
    (tmp_path / "train-ddp-v2-1234.out").write_text("run 2\n")
    slurm_cli.answer(SCONTROL, *INVALID_JOB_ID)
    answer_sacct_version(slurm_cli, slurm_output)
    slurm_cli.answer(SACCT, out=text)
    result = run_module({"state": "query", "job_id": 1234}).result
    assert (result["restarts"], result["state_source"]) == (1, "sacct")
    assert result["stdout_path"] == str(tmp_path / "train-ddp-v2-1234.out")
    assert result["log_tail"] == ["run 2"]


def test_a_tail_of_progress_bar_updates_reads_only_the_last_block(tmp_path, monkeypatch):
    # Each \r ends a line as \n does: a log of 300 KB of \r-drawn updates has its last lines in its
    # last block, and one read finds them.
    asked = []
    real = slurm_job.os.pread
    monkeypatch.setattr(slurm_job.os, "pread", lambda fd, size, offset: asked.append(size) or real(fd, size, offset))
    log = tmp_path / "bar.out"
    log.write_bytes(b"".join(b"step %d\r" % n for n in range(30000)) + b"done\n")
    assert slurm_job.read_log_tail(str(log), 2) == ["step 29999", "done"]
    assert asked == [BLOCK]


def test_a_cr_lf_split_between_two_reads_ends_one_line_not_two(tmp_path, monkeypatch):
    monkeypatch.setattr(slurm_job, "LOG_READ_BLOCK", 4)
    log = tmp_path / "job.out"
    log.write_bytes(b"a\r\nb\r\nc\r\n")  # the reads from the end: "\nc\r\n", "\r\nb\r", "a"
    assert slurm_job.read_log_tail(str(log), 3) == ["a", "b", "c"]


def test_the_tail_shows_no_head_less_line_where_the_scan_began(tmp_path, monkeypatch):
    monkeypatch.setattr(slurm_job, "LOG_TAIL_SCAN_BYTES", 10)
    log = tmp_path / "job.out"
    log.write_bytes(b"aaaaaaaaaa\nbb\ncc\n")  # the scan's 10 bytes begin inside the a's
    assert slurm_job.read_log_tail(str(log), 5) == ["bb", "cc"]
    log.write_bytes(b"aaaaaaaaaa\nbbb\n")  # one whole line after the head-less one
    assert slurm_job.read_log_tail(str(log), 5) == ["bbb"]


def test_a_trailing_cr_waits_for_what_follows_it(tmp_path):
    # "\r" last may be the first half of "\r\n": the line it ends is read next time, whole.
    log = tmp_path / "job.out"
    log.write_bytes(b"one\ntwo\r")
    assert slurm_job.read_new_lines(str(log), 0, 5) == (["one"], 4)
    log.write_bytes(b"one\ntwo\r\nthree\n")
    assert slurm_job.read_new_lines(str(log), 4, 5) == (["two", "three"], 15)
    # Only the last \r waits: one just before it ended its line.
    log.write_bytes(b"one\r\r")
    assert slurm_job.read_new_lines(str(log), 0, 5) == (["one"], 4)


def test_an_empty_new_line_is_a_line(tmp_path):
    log = tmp_path / "job.out"
    log.write_bytes(b"one\n\nrest")
    assert slurm_job.read_new_lines(str(log), 4, 5) == ([""], 5)


def test_a_tail_reads_back_only_until_it_has_one_line_end_more_than_its_lines(tmp_path, monkeypatch):
    # Two lines of a log that ends with a line end: three line ends tell where the first begins.
    monkeypatch.setattr(slurm_job, "LOG_READ_BLOCK", 8)
    asked = []
    real = slurm_job.os.pread
    monkeypatch.setattr(slurm_job.os, "pread", lambda fd, size, offset: asked.append(offset) or real(fd, size, offset))
    log = tmp_path / "job.out"
    log.write_bytes(b"x" * 64 + b"a\nbb\ncc\n")
    assert slurm_job.read_log_tail(str(log), 2) == ["bb", "cc"]
    assert asked == [64]


def test_a_log_that_fails_to_read_shows_no_new_lines_and_keeps_its_offset(tmp_path, monkeypatch):
    # An I/O error of the NAS: the next look tries again from where this one was.
    log = tmp_path / "job.out"
    log.write_bytes(b"one\ntwo\n")

    def failing(fd, size, offset):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(slurm_job.os, "pread", failing)
    assert slurm_job.read_new_lines(str(log), 4, 5) == ([], 4)


def test_a_line_end_at_the_start_of_a_read_counts_once_unless_a_cr_before_it_pairs_with_it(tmp_path, monkeypatch):
    # Reads from the end: "\nbb\n" (two line ends), then "y\nya" (one more, not a \r before that \n):
    # three line ends are enough for two lines, and no third read is made.
    monkeypatch.setattr(slurm_job, "LOG_READ_BLOCK", 4)
    asked = []
    real = slurm_job.os.pread
    monkeypatch.setattr(slurm_job.os, "pread", lambda fd, size, offset: asked.append(offset) or real(fd, size, offset))
    log = tmp_path / "job.out"
    log.write_bytes(b"pppp" + b"y\nya" + b"\nbb\n")
    assert slurm_job.read_log_tail(str(log), 2) == ["ya", "bb"]
    assert asked == [8, 4]


def test_a_tail_that_fails_to_read_is_empty(tmp_path, monkeypatch):
    log = tmp_path / "job.out"
    log.write_bytes(b"one\ntwo\n")

    def failing(fd, size, offset):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(slurm_job.os, "pread", failing)
    assert slurm_job.read_log_tail(str(log), 5) == []


def test_a_scan_that_begins_one_byte_in_still_drops_the_head_less_line(tmp_path, monkeypatch):
    monkeypatch.setattr(slurm_job, "LOG_TAIL_SCAN_BYTES", 10)
    log = tmp_path / "job.out"
    log.write_bytes(b"abcd\nef\ngh\n")  # 11 bytes: the scan starts at "bcd"
    assert slurm_job.read_log_tail(str(log), 5) == ["ef", "gh"]
