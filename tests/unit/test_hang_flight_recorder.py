"""PyTorch's NCCL flight recorder at a hang (roles/slurm_launch/files/hang_dump.py) and in the job
script's torchrun wrapper (templates/train.sbatch.j2).

The stand-in workers lay the recorder out as PyTorch 2.13 does (its installed headers and the
ProcessGroupNCCL.cpp of that DumpPipe; docs/resilience.md says which lines):
- DumpPipe (torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp:199-242): the heartbeat monitor of the
  default process group unlinks and mkfifo()s TORCH_NCCL_DEBUG_INFO_PIPE_FILE + global rank + '.pipe'
  (0666), opens it O_RDONLY | O_NONBLOCK and reads up to 128 bytes each poll; any byte read is a
  request for a dump;
- HeartbeatMonitor::runLoop polls every TORCH_NCCL_COORD_CHECK_MILSEC (1000) with
  TORCH_NCCL_DUMP_ON_TIMEOUT, and dumps from another thread (std::async);
- DebugInfoWriter::write (FlightRecorder.cpp) writes the whole pickled trace with a std::ofstream
  on TORCH_NCCL_DEBUG_INFO_TEMP_FILE + global rank: created or truncated in place, no mark of its end.
A worker of a training without NCCL (gloo, CPU) never makes the pipe."""

import os
import pickle
import stat
import subprocess
import sys
import time

import pytest
from ansible_collections.hpc.slurm_train.roles.slurm_launch.files import hang_dump
from test_hang_watchdog_rules import with_environ
from test_job_template import job, render, stage_hang_dump, torchrun_wrapper

# No job of a real cluster on this machine has it, nor test_hang_watchdog_rules.py's workers, nor
# those of another run of these tests at the same time: workers are found by job id.
JOB_ID = str(91_000_000 + os.getpid())

# A worker with an NCCL process group, as far as its flight recorder goes. ANSWER: "dump" writes
# the dump when asked, "never" reads the request and never writes (a dump stuck on the GIL).
RECORDER = r'''
import os, sys, time
stem, prefix, rank = os.environ["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"], os.environ["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"], os.environ["RANK"]
pipe = f"{stem}{rank}.pipe"
try:
    os.unlink(pipe)
except FileNotFoundError:
    pass
os.mkfifo(pipe, 0o666)
fd = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
print("ready", flush=True)
while True:
    time.sleep(0.1)
    try:
        asked = os.read(fd, 128)
    except BlockingIOError:
        asked = b""
    if asked and os.environ["ANSWER"] == "dump":
        time.sleep(0.3)  # the trace is gathered before it is written
        with open(prefix + rank, "wb") as out:
            out.write(os.environ["TRACE"].encode() + b" of rank " + rank.encode())
'''


def worker(tmp_path, rank, answer=None, node="node111", **more):
    """A stand-in torchrun worker of JOB_ID on ``node``: with a flight recorder answering as
    ``answer`` says, or (None) a worker without NCCL, which has the variables but never the pipe."""
    folder = tmp_path / "flight"
    folder.mkdir(mode=0o700, exist_ok=True)
    env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": JOB_ID, "SLURMD_NODENAME": node, "RANK": str(rank),
           "TORCHELASTIC_RUN_ID": "x", "SLURM_STEP_ID": "5", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": f"{folder}/pipe-",
           "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": f"{folder}/trace-", "TRACE": "new trace", **more}
    if answer is None:
        return with_environ(subprocess.Popen(["sleep", "60"], env=env))
    proc = subprocess.Popen([sys.executable, "-c", RECORDER], env={**env, "ANSWER": answer}, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline() == "ready\n"
    return proc


def stop(procs):
    for proc in procs:
        proc.kill()
        proc.wait()


@pytest.fixture(name="node111")
def fixture_node111(monkeypatch):
    """This process as the dump step on node111, without py-spy (the stacks are not what is tested)."""
    monkeypatch.setenv("SLURMD_NODENAME", "node111")
    monkeypatch.setenv("SLURM_STEP_ID", "9")
    monkeypatch.setenv("PATH", "/nowhere")
    monkeypatch.delenv("PY_SPY", raising=False)


def recorded(tmp_path, rank, restart=0):
    return tmp_path / f"hang-{JOB_ID}-{restart}-node111-nccl-rank{rank}"


def test_each_ranks_dump_is_asked_through_its_pipe_and_kept_beside_the_stacks(tmp_path, node111, capsys):
    # A dump of an earlier request is there already: the one asked for now is taken, not that one.
    (tmp_path / "flight").mkdir(mode=0o700)
    (tmp_path / "flight" / "trace-3").write_text("an older trace")
    procs = [worker(tmp_path, 3, "dump"), worker(tmp_path, 2, "dump")]
    try:
        hang_dump.dump(JOB_ID, 0, str(tmp_path), flight_recorder_seconds=20)
    finally:
        stop(procs)
    assert {path.name for path in tmp_path.glob("hang-*-nccl-rank*")} == {recorded(tmp_path, 2).name,
                                                                       recorded(tmp_path, 3).name}
    for rank in (2, 3):
        assert recorded(tmp_path, rank).read_text() == f"new trace of rank {rank}"
        assert stat.S_IMODE(recorded(tmp_path, rank).stat().st_mode) == 0o600
    lines = (tmp_path / f"hang-{JOB_ID}-0-node111.txt").read_text().splitlines()
    assert lines[1:3] == [f"# NCCL flight recorder of rank 2: {recorded(tmp_path, 2).name}",
                          f"# NCCL flight recorder of rank 3: {recorded(tmp_path, 3).name}"]
    # The stacks' part is read as before: the recorder's lines are no rank's frames.
    assert hang_dump.innermost_frames("\n".join(lines)) == {2: ("node111", None, "5"), 3: ("node111", None, "5")}
    assert capsys.readouterr().out.endswith("; NCCL flight recorder of 2 rank(s) beside it\n")


def test_without_a_pipe_nothing_waits_and_nothing_is_written(tmp_path, node111, capsys):
    # gloo or CPU: the variables are there, the pipe never is; a worker started otherwise has none.
    procs = [worker(tmp_path, 0), worker(tmp_path, 1, TORCH_NCCL_DEBUG_INFO_PIPE_FILE="")]
    began = time.monotonic()
    try:
        hang_dump.dump(JOB_ID, 0, str(tmp_path), flight_recorder_seconds=30)
    finally:
        stop(procs)
    assert time.monotonic() - began < 5, "no pipe, no wait"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["flight", f"hang-{JOB_ID}-0-node111.txt"]
    assert not list((tmp_path / "flight").iterdir())
    assert "NCCL flight recorder" not in (tmp_path / f"hang-{JOB_ID}-0-node111.txt").read_text()
    assert "NCCL flight recorder" not in capsys.readouterr().out


def test_a_rank_that_never_answers_is_waited_for_a_bounded_time_and_the_others_kept(tmp_path, node111):
    procs = [worker(tmp_path, 0, "dump"), worker(tmp_path, 1, "never")]
    began = time.monotonic()
    try:
        hang_dump.dump(JOB_ID, 0, str(tmp_path), flight_recorder_seconds=3)
    finally:
        stop(procs)
    waited = time.monotonic() - began
    assert 3 <= waited < 8, waited
    assert recorded(tmp_path, 0).read_text() == "new trace of rank 0" and not recorded(tmp_path, 1).exists()
    lines = (tmp_path / f"hang-{JOB_ID}-0-node111.txt").read_text().splitlines()
    assert lines[1:3] == [f"# NCCL flight recorder of rank 0: {recorded(tmp_path, 0).name}",
                          "# NCCL flight recorder of rank 1: no dump in time (its NCCL heartbeat monitor did not answer)"]


def test_a_pipe_nobody_reads_any_more_is_not_waited_for(tmp_path, node111):
    # A rank's pipe left behind (its process gone): opening it to write fails at once.
    (tmp_path / "flight").mkdir(mode=0o700)
    os.mkfifo(tmp_path / "flight" / "pipe-4.pipe")
    procs = [worker(tmp_path, 4)]
    began = time.monotonic()
    try:
        hang_dump.dump(JOB_ID, 0, str(tmp_path), flight_recorder_seconds=30)
    finally:
        stop(procs)
    assert time.monotonic() - began < 5
    lines = (tmp_path / f"hang-{JOB_ID}-0-node111.txt").read_text().splitlines()
    assert lines[1] == f"# NCCL flight recorder of rank 4: not asked ({tmp_path}/flight/pipe-4.pipe: No such device or address)"
    assert not recorded(tmp_path, 4).exists()


def test_a_link_planted_at_a_dumps_destination_is_refused_and_the_others_kept(tmp_path, node111):
    victim = tmp_path / "victim"
    victim.write_text("mine")
    recorded(tmp_path, 0).symlink_to(victim)
    procs = [worker(tmp_path, 0, "dump"), worker(tmp_path, 1, "dump")]
    try:
        hang_dump.dump(JOB_ID, 0, str(tmp_path), flight_recorder_seconds=20)
    finally:
        stop(procs)
    assert victim.read_text() == "mine" and recorded(tmp_path, 0).is_symlink()
    assert recorded(tmp_path, 1).read_text() == "new trace of rank 1"
    lines = (tmp_path / f"hang-{JOB_ID}-0-node111.txt").read_text().splitlines()
    assert f"# NCCL flight recorder of rank 0: not kept ({recorded(tmp_path, 0).name}: Too many levels of symbolic links)" in lines


def test_a_file_at_the_pipes_name_that_is_no_pipe_is_not_written_to(tmp_path, node111):
    (tmp_path / "flight").mkdir(mode=0o700)
    (tmp_path / "flight" / "pipe-0.pipe").write_text("")
    procs = [worker(tmp_path, 0)]
    try:
        hang_dump.dump(JOB_ID, 0, str(tmp_path), flight_recorder_seconds=30)
    finally:
        stop(procs)
    assert (tmp_path / "flight" / "pipe-0.pipe").read_text() == ""
    assert "# NCCL flight recorder of rank 0: not asked (" in (tmp_path / f"hang-{JOB_ID}-0-node111.txt").read_text()


@pytest.mark.parametrize("env, files", [
    ({"TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/t/trace-"}, ("/p/pipe-7.pipe", "/t/trace-7")),
    # The newer name wins; with a dynamic file name it is the file itself.
    ({"TORCH_FR_DUMP_TEMP_FILE": "/f/fr-", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/t/trace-"}, ("/p/pipe-7.pipe", "/f/fr-7")),
    ({"TORCH_FR_DUMP_TEMP_FILE": "/f/fr", "TORCH_FR_DUMP_DYNAMIC_FILE_NAME": "True"}, ("/p/pipe-7.pipe", "/f/fr")),
    # Neither: PyTorch 2.13's default, in the user's cache.
    ({"HOME": "/home/alice"}, ("/p/pipe-7.pipe", "/home/alice/.cache/torch/comm_lib_trace_rank_7")),
    ({"HOME": "/home/alice", "XDG_CACHE_HOME": "/x"}, ("/p/pipe-7.pipe", "/x/torch/comm_lib_trace_rank_7")),
])
def test_the_pipe_and_the_dump_are_named_as_pytorch_names_them(env, files):
    assert hang_dump.flight_recorder_files(4711, {"RANK": "7", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": "/p/pipe-", **env}) == files


def test_a_relative_name_is_the_workers_own_and_no_pipe_name_is_no_recorder():
    assert hang_dump.flight_recorder_files(4711, {"RANK": "0", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": "fr/pipe-",
                                                  "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "fr/trace-"}) == (
        "/proc/4711/cwd/fr/pipe-0.pipe", "/proc/4711/cwd/fr/trace-0")
    assert hang_dump.flight_recorder_files(4711, {"RANK": "0"}) is None


def test_the_kept_dumps_are_named_as_torchfrtrace_reads_them(tmp_path):
    """PyTorch 2.13's analyzer (torchfrtrace, torch/distributed/flight_recorder) reads one file per
    rank, the rank at the end of its name after the prefix given with -p."""
    from torch.distributed.flight_recorder.components import loader  # noqa: PLC0415  (torch is slow to import)
    for node, rank in (("node110", 0), ("node111", 3)):
        name = hang_dump.FLIGHT_RECORDER_NAME.format(job=41, restart=0, node=node, rank=rank)
        (tmp_path / name).write_bytes(pickle.dumps({"entries": [], "version": "2.10", "pg_config": {}}))
    details, version = loader.read_dir(type("Args", (), {"trace_dir": str(tmp_path), "prefix": "nccl-rank"})())
    assert version == "2.10"
    assert sorted(detail["rank"] for detail in details.values()) == [0, 3]


def test_the_job_script_dumps_on_timeout_unless_a_site_or_user_said_otherwise_and_leaves_the_buffer_to_torch():
    for hang_minutes in (0, 30):
        lines = render(job(hang_minutes=hang_minutes, hang_dump="/d/hang_dump.py")).splitlines()
        assert 'export TORCH_NCCL_DUMP_ON_TIMEOUT="${TORCH_NCCL_DUMP_ON_TIMEOUT:-1}"' in lines
        # PyTorch 2.13 records 2000 by default and warns on every rank of its old name's use.
        assert not [line for line in lines if line.startswith("export") and "BUFFER_SIZE" in line], lines
    script = render(job())
    # After the node group's NCCL env file and the launch's env, which may set it.
    assert script.index("TORCH_NCCL_DUMP_ON_TIMEOUT=") > script.index("source /starmap/nas/env/nccl-gpu_A6000.sh")


# A training of one worker with real torchrun (torch from this virtualenv) on gloo: the recorder's
# names reach it, in a private folder of the node; gloo makes no pipe; a dump the worker writes there
# itself (as NCCL's own timeout would) is kept for the user when torchrun ends, never through a link.
GLOO_WORKER = '''\
import os, stat, sys
import torch, torch.distributed as dist
stem, trace = os.environ["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"], os.environ["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"]
folder = os.path.dirname(stem)
assert os.path.dirname(trace) == folder and stat.S_IMODE(os.stat(folder).st_mode) == 0o700, (stem, trace)
assert folder.startswith(os.environ["TMPDIR"]), folder
dist.init_process_group("gloo")
value = torch.ones(1)
dist.all_reduce(value)
print("pipe there:", os.path.exists(stem + os.environ["RANK"] + ".pipe"), "buffer:",
      os.environ.get("TORCH_NCCL_TRACE_BUFFER_SIZE"), flush=True)
with open(trace + os.environ["RANK"], "wb") as out:
    out.write(b"trace written on a timeout")
dist.destroy_process_group()
'''


@pytest.mark.parametrize("planted", [False, True])
def test_the_wrapper_names_the_recorders_files_privately_and_keeps_a_dump_on_timeout(tmp_path, planted):
    wrapper = torchrun_wrapper(render(job()))
    (tmp_path / "train.py").write_text(GLOO_WORKER)
    staged = stage_hang_dump(tmp_path)
    (tmp_path / "scratch").mkdir()
    keep = tmp_path / "nccl-41-0"
    kept = tmp_path / "nccl-41-0-node7-rank0"
    if planted:
        (tmp_path / "victim").write_text("mine")
        kept.symlink_to(tmp_path / "victim")
    env = {key: value for key, value in os.environ.items() if not key.startswith(("TORCH_NCCL_", "TORCH_FR_"))}
    env.update({"TRAINING_FAILURE_RECORD": str(tmp_path / ".41.failure"), "SLURM_NODEID": "0",
                "SLURMD_NODENAME": "node7", "TMPDIR": str(tmp_path / "scratch"), "TRAINING_FLIGHT_RECORDER_KEEP": str(keep),
                "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000", "GLOO_SOCKET_IFNAME": "lo", **staged})
    proc = subprocess.run(
        [sys.executable, "-c", wrapper, "--nnodes=1", "--nproc-per-node=1", "--master-addr=127.0.0.1",
         f"--master-port={29700 + os.getpid() % 1000 + planted}", str(tmp_path / "train.py")],
        env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "[rank0@node7] pipe there: False buffer: 2000\n" in proc.stdout
    assert not list((tmp_path / "scratch").iterdir()), "the recorder's folder was removed"
    if planted:
        assert (tmp_path / "victim").read_text() == "mine" and kept.is_symlink()
        assert f"NCCL flight recorder of rank 0 not kept in {kept}: [Errno 40] Too many levels of symbolic links" in proc.stdout
    else:
        assert kept.read_bytes() == b"trace written on a timeout"
        assert stat.S_IMODE(kept.stat().st_mode) == 0o600
        assert f"NCCL flight recorder of rank 0 kept in {kept}\n" in proc.stdout


def own_timeout_folder(tmp_path, *names):
    """The wrapper's private folder of the node, with a dump file per name (its content the name)."""
    folder = tmp_path / "torch-flight-recorder-x"
    folder.mkdir(mode=0o700)
    for name in names:
        (folder / name).write_text(f"dump {name}")
    return folder


def test_the_dumps_nccl_wrote_itself_are_kept_for_the_user_with_a_line_each(tmp_path):
    # Only trace-<rank> is a dump: the pipes, a name without a rank or with more after it are not.
    folder = own_timeout_folder(tmp_path, "trace-0", "trace-12", "pipe-0.pipe", "trace-", "trace-3.tmp", "trace-x",
                                "xtrace-4", "comm_lib_trace_rank_5")
    keep = tmp_path / "nccl-41-0"
    lines = hang_dump.keep_own_timeout_dumps(str(folder), str(keep), "node110")
    assert lines == [f"NCCL flight recorder of rank 0 kept in {keep}-node110-rank0",
                     f"NCCL flight recorder of rank 12 kept in {keep}-node110-rank12"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["nccl-41-0-node110-rank0", "nccl-41-0-node110-rank12",
                                                              folder.name]
    for rank in ("0", "12"):
        kept = tmp_path / f"nccl-41-0-node110-rank{rank}"
        assert kept.read_text() == f"dump trace-{rank}"
        assert stat.S_IMODE(kept.stat().st_mode) == 0o600


def test_a_dump_nccl_wrote_itself_is_kept_0600_over_an_open_file_at_its_name(tmp_path):
    # A file of an earlier copy under that name, readable by all: overwritten whole, and made private.
    folder = own_timeout_folder(tmp_path, "trace-1")
    kept = tmp_path / "nccl-41-0-node110-rank1"
    kept.write_text("an older and much longer dump")
    kept.chmod(0o644)
    assert hang_dump.keep_own_timeout_dumps(str(folder), str(tmp_path / "nccl-41-0"), "node110") == [
        f"NCCL flight recorder of rank 1 kept in {kept}"]
    assert kept.read_text() == "dump trace-1" and stat.S_IMODE(kept.stat().st_mode) == 0o600


def test_a_link_planted_where_a_dump_nccl_wrote_itself_goes_is_refused_and_the_others_kept(tmp_path):
    folder = own_timeout_folder(tmp_path, "trace-0", "trace-1")
    victim = tmp_path / "victim"
    victim.write_text("mine")
    planted = tmp_path / "nccl-41-0-node110-rank0"
    planted.symlink_to(victim)
    lines = hang_dump.keep_own_timeout_dumps(str(folder), str(tmp_path / "nccl-41-0"), "node110")
    assert lines == [f"NCCL flight recorder of rank 0 not kept in {planted}: [Errno 40] Too many levels of symbolic "
                     f"links: '{planted}'",
                     f"NCCL flight recorder of rank 1 kept in {tmp_path}/nccl-41-0-node110-rank1"]
    assert victim.read_text() == "mine" and planted.is_symlink()
    assert (tmp_path / "nccl-41-0-node110-rank1").read_text() == "dump trace-1"


def test_a_link_in_the_folder_in_place_of_a_dump_nccl_wrote_itself_is_not_followed(tmp_path):
    folder = own_timeout_folder(tmp_path)
    (tmp_path / "secret").write_text("not a dump")
    (folder / "trace-2").symlink_to(tmp_path / "secret")
    lines = hang_dump.keep_own_timeout_dumps(str(folder), str(tmp_path / "nccl-41-0"), "node110")
    assert lines == [f"NCCL flight recorder of rank 2 not kept in {tmp_path}/nccl-41-0-node110-rank2: [Errno 40] Too "
                     f"many levels of symbolic links: '{folder}/trace-2'"]
    assert not (tmp_path / "nccl-41-0-node110-rank2").exists()


def test_a_large_dump_is_copied_whole(tmp_path, node111):
    procs = [worker(tmp_path, 0, "dump", TRACE="x" * 100_000)]
    try:
        hang_dump.dump(JOB_ID, 0, str(tmp_path), flight_recorder_seconds=20)
    finally:
        stop(procs)
    assert recorded(tmp_path, 0).read_bytes() == b"x" * 100_000 + b" of rank 0"


def recorder_env(folder, rank, pipe=True):
    """A worker's variables, as ask_flight_recorders finds them, with its files in ``folder``."""
    return {"RANK": str(rank), "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": f"{folder}/pipe-" if pipe else "",
            "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": f"{folder}/trace-"}


def test_a_rank_without_a_pipe_does_not_keep_the_later_ranks_from_being_asked(tmp_path):
    # Rank 0 runs without NCCL (no pipe's name), rank 1 without its pipe made yet, rank 2 with one.
    os.mkfifo(tmp_path / "pipe-2.pipe")
    reader = os.open(tmp_path / "pipe-2.pipe", os.O_RDONLY | os.O_NONBLOCK)
    try:
        asked, lines = hang_dump.ask_flight_recorders({10: recorder_env(tmp_path, 0, pipe=False),
                                                       11: recorder_env(tmp_path, 1), 12: recorder_env(tmp_path, 2)})
        assert os.read(reader, 128) == b"1"
    finally:
        os.close(reader)
    assert asked == {"2": (f"{tmp_path}/trace-2", None)} and lines == []


def test_a_pipe_full_of_unread_requests_is_reported_as_not_asked(tmp_path):
    # A heartbeat monitor that stopped reading: its pipe fills, and the request cannot go in.
    pipe = tmp_path / "pipe-0.pipe"
    os.mkfifo(pipe)
    reader = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
    writer = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)
    try:
        with pytest.raises(BlockingIOError):
            while True:
                os.write(writer, b"1" * 4096)
        assert hang_dump._ask(str(pipe)) == "Resource temporarily unavailable"
    finally:
        os.close(writer)
        os.close(reader)


def keep(tmp_path, target, seconds):
    return hang_dump.keep_flight_recorders({"0": (str(target), None)}, JOB_ID, 0, "node111", str(tmp_path),
                                           time.monotonic() + seconds)


def test_a_one_byte_dump_is_kept(tmp_path):
    target = tmp_path / "trace-0"
    target.write_bytes(b"x")
    kept, lines = keep(tmp_path, target, 5)
    assert kept == {"0": recorded(tmp_path, 0).name} and recorded(tmp_path, 0).read_bytes() == b"x"
    assert lines == [f"# NCCL flight recorder of rank 0: {recorded(tmp_path, 0).name}"]


def test_a_dump_file_created_but_still_empty_is_no_dump(tmp_path):
    # PyTorch's ofstream creates or truncates the file before it writes the trace.
    target = tmp_path / "trace-0"
    target.write_bytes(b"")
    kept, lines = keep(tmp_path, target, 0.5)
    assert kept == {} and not recorded(tmp_path, 0).exists()
    assert lines == ["# NCCL flight recorder of rank 0: no dump in time (its NCCL heartbeat monitor did not answer)"]


def test_a_dump_still_being_written_is_copied_only_once_it_stops_changing(tmp_path, monkeypatch):
    target = tmp_path / "trace-0"
    target.write_bytes(b"first half")
    waits = []

    def writer_goes_on(seconds):
        # The rest of the trace is written while the watchdog waits between two looks.
        if not waits:
            with open(target, "ab") as out:
                out.write(b", second half")
        waits.append(seconds)
    monkeypatch.setattr(hang_dump.time, "sleep", writer_goes_on)
    kept, _ = keep(tmp_path, target, 30)
    assert kept == {"0": recorded(tmp_path, 0).name}
    assert recorded(tmp_path, 0).read_bytes() == b"first half, second half"


def test_a_link_in_place_of_a_dump_is_not_followed(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("not the trace")
    (tmp_path / "trace-0").symlink_to(secret)
    with pytest.raises(OSError):
        hang_dump._copy_private(str(tmp_path / "trace-0"), str(tmp_path / "copy"))
    assert not (tmp_path / "copy").exists()
