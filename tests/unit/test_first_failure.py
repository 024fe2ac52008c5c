"""cluster_rules.first_failure: the first failed rank's exception read from a job's log, on logs
recorded on the local cluster (tests/unit/fixtures/logs/: 4 ranks on node110 and node111 with the
job script's "[rank<N>@<node>] " prefix) and on variants made from them."""

import pytest
from ansible_collections.hpc.slurm_train.plugins.module_utils import cluster_rules

from conftest import FIXTURES_DIR

LOGS = FIXTURES_DIR / "logs"


def recorded(name):
    return (LOGS / name).read_text().splitlines()


def test_the_rank_that_raised_is_named_not_the_ranks_that_failed_after_it():
    failure = cluster_rules.first_failure(recorded("raise-on-rank-1.out"))
    assert (failure["rank"], failure["node"], failure["type"], failure["message"]) == (
        1, "node110", "ValueError", "bad batch at step 3: 31 rows, expected 32")
    assert failure["traceback"][-2:] == [
        'File "/starmap/nas/jobs/alice/wf-raise/code/340c6a65925097e17809/raise_on_rank.py", line 11, in check_batch',
        'raise ValueError(f"bad batch at step {step}: {batch} rows, expected 32")']
    assert len(failure["traceback"]) == 6, "three frames, each with its source line"


def test_a_missing_module_is_named_with_the_line_that_imports_it():
    failure = cluster_rules.first_failure(recorded("missing-import.out"))
    assert (failure["rank"], failure["node"], failure["type"], failure["message"]) == (
        0, "node110", "ModuleNotFoundError", "No module named 'numpy_not_installed_here'")
    assert failure["traceback"][1] == "import numpy_not_installed_here"


def test_ranks_interleaved_line_by_line_are_read_apart():
    lines = recorded("missing-import.out")
    rank = {n: [line for line in lines if line.startswith(f"[rank{n}@")] for n in range(4)}
    # rank 3's lines and rank 1's alternate, rank 3's exception line first.
    mixed = [line for pair in zip(rank[3], rank[1]) for line in pair]
    failure = cluster_rules.first_failure(mixed)
    assert (failure["rank"], failure["node"], failure["traceback"][1]) == (3, "node111", "import numpy_not_installed_here")
    assert cluster_rules.first_failure(mixed[1:] + mixed[:1]) is not None


def test_the_last_frames_only_and_the_last_exception_of_a_chain():
    lines = ["[rank2@n1] Traceback (most recent call last):"]
    lines += [f'[rank2@n1]   File "/code/t.py", line {n}, in f{n}\n[rank2@n1]     f{n + 1}()'.split("\n")[i]
              for n in range(6) for i in (0, 1)]
    lines += ["[rank2@n1] KeyError: 'lr'", "[rank2@n1] ",
              "[rank2@n1] During handling of the above exception, another exception occurred:", "[rank2@n1] ",
              "[rank2@n1] Traceback (most recent call last):", '[rank2@n1]   File "/code/t.py", line 9, in load',
              "[rank2@n1]     raise RuntimeError('no lr in the config')", "[rank2@n1] RuntimeError: no lr in the config",
              "[rank0@n0] Traceback (most recent call last):", '[rank0@n0]   File "/code/t.py", line 3, in g',
              "[rank0@n0] RuntimeError: Connection closed by peer"]
    failure = cluster_rules.first_failure(lines)
    assert (failure["rank"], failure["type"], failure["message"]) == (2, "RuntimeError", "no lr in the config")
    two = cluster_rules.first_failure(lines[:14], frames=2)
    assert two["traceback"] == ['File "/code/t.py", line 4, in f4', "f5()", 'File "/code/t.py", line 5, in f5', "f6()"]


def test_a_log_without_rank_prefixes_is_read_with_rank_and_node_unknown():
    lines = [cluster_rules.rank_line(line)[2] for line in recorded("missing-import.out")]
    failure = cluster_rules.first_failure(lines)
    assert (failure["rank"], failure["node"], failure["type"]) == (None, None, "ModuleNotFoundError")


def test_torchrun_stopped_by_a_signal_and_torchruns_own_tracebacks_beside_ranks_are_not_the_failure():
    lines = recorded("raise-on-rank-1.out")
    # Without the ranks' lines, what is left is torchrun's SignalException (srun stopped it).
    assert cluster_rules.first_failure([line for line in lines if not line.startswith("[rank")]) is None
    # A traceback of torchrun's own, before the ranks' in the log, does not go before them.
    own = ["Traceback (most recent call last):", '  File "<string>", line 15, in <module>',
           "torch.distributed.DistStoreError: timed out"]
    assert cluster_rules.first_failure(own + lines)["rank"] == 1
    assert cluster_rules.first_failure(own)["type"] == "torch.distributed.DistStoreError"


@pytest.mark.parametrize("lines", [
    [],
    ["step=1", "training step finished with exit code 137"],
    ["[rank0@n0] Traceback (most recent call last):", '[rank0@n0]   File "t.py", line 1, in <module>'],  # cut off
    ["[rank0@n0] ValueError: printed by the training, no traceback"],
])
def test_no_exception_without_a_traceback_ending_in_one(lines):
    assert cluster_rules.first_failure(lines) is None


def test_a_syntax_error_has_no_traceback_header():
    lines = ['[rank0@n0]   File "/code/t.py", line 4', "[rank0@n0]     def (", "[rank0@n0]         ^",
             "[rank0@n0] SyntaxError: invalid syntax"]
    failure = cluster_rules.first_failure(lines)
    assert (failure["type"], failure["message"], failure["traceback"]) == (
        "SyntaxError", "invalid syntax", ['File "/code/t.py", line 4', "def ("])


def test_a_line_is_a_ranks_only_with_the_whole_prefix():
    assert cluster_rules.rank_line("[rank12@node-1.a] [rank12]: x") == (12, "node-1.a", "x")
    assert cluster_rules.rank_line("[rank1] step=3") == (None, None, "[rank1] step=3")
    assert cluster_rules.rank_line("[rank1@a b] x") == (None, None, "[rank1@a b] x")
