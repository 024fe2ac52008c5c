"""The benchmark harness's pure parts: reading Slurm's RPC statistics, summarising samples and
printing the table. No cluster is needed here, so bench/test_benchlib.py tests them quickly."""

import re
import statistics

# sdiag's and `sacctmgr show stats`' lines under "Remote Procedure Call statistics by message
# type", e.g. "	REQUEST_JOB_INFO_SINGLE  ( 2021) count:3  ave_time:65  total_time:196".
_RPC_LINE = re.compile(r"^\s+([A-Z][A-Z0-9_]+)\s+\(\s*\d+\)\s+count:(\d+)")


def rpc_counts(text):
    """{message type: count} from sdiag or `sacctmgr show stats` output (the by-type section)."""
    counts = {}
    in_section = False
    for line in text.splitlines():
        if line.startswith("Remote Procedure Call statistics by message type"):
            in_section = True
            continue
        if in_section:
            match = _RPC_LINE.match(line)
            if match:
                counts[match.group(1)] = int(match.group(2))
            elif line.strip():
                # The next section ("... by user", "Pending RPC statistics") ends this one.
                break
    return counts


def rpc_delta(before, after, minus=None):
    """Counts received between two snapshots, less a probe's own cost ({type: count})."""
    delta = {}
    for kind in set(before) | set(after):
        count = after.get(kind, 0) - before.get(kind, 0) - (minus or {}).get(kind, 0)
        if count > 0:
            delta[kind] = count
    return dict(sorted(delta.items(), key=lambda item: (-item[1], item[0])))


# What slurmctld gets from a job itself (srun, the batch script, the nodes' slurmd) and from its
# sbatch: paid alike by every launcher, so the following goal leaves them out.
JOB_OWN_RPCS = frozenset({
    "REQUEST_JOB_STEP_CREATE", "REQUEST_STEP_COMPLETE", "REQUEST_COMPLETE_BATCH_SCRIPT", "REQUEST_HET_JOB_ALLOC_INFO",
    "REQUEST_JOB_ALLOC_INFO", "MESSAGE_EPILOG_COMPLETE", "REQUEST_COMPLETE_PROLOG", "REQUEST_JOB_READY",
})
SBATCH_RPCS = frozenset({"REQUEST_SUBMIT_BATCH_JOB"})


def split_rpcs(counts):
    """slurmctld's {type: count} split into the job's own, sbatch's and the follower's own (the rest)."""
    parts = {"job": 0, "sbatch": 0, "own": 0}
    for kind, count in (counts or {}).items():
        parts["job" if kind in JOB_OWN_RPCS else "sbatch" if kind in SBATCH_RPCS else "own"] += count
    return parts


def dbd_queries(counts):
    """How many of slurmdbd's RPCs were a client's questions (sacct, sacctmgr: DBD_GET_*), not the
    job records slurmctld sends."""
    return sum(count for kind, count in (counts or {}).items() if kind.startswith("DBD_GET_"))


def summary(samples):
    """Median, min and max of a list of numbers (None where there are none)."""
    values = [value for value in samples if value is not None]
    if not values:
        return {"n": 0, "median": None, "min": None, "max": None}
    return {"n": len(values), "median": statistics.median(values), "min": min(values), "max": max(values)}


def ratio(value, baseline):
    """value / baseline, or None when either is missing or the baseline is 0."""
    if value is None or not baseline:
        return None
    return value / baseline


def number(value, unit=""):
    """A figure as people read it: 3 significant digits, and the unit."""
    if value is None:
        return "-"
    if isinstance(value, int) or float(value).is_integer() and abs(value) >= 10:
        text = f"{int(round(value))}"
    elif abs(value) >= 100:
        text = f"{value:.0f}"
    elif abs(value) >= 10:
        text = f"{value:.1f}"
    elif abs(value) >= 1:
        text = f"{value:.2f}"
    else:
        text = f"{value:.3f}"
    return f"{text} {unit}".strip()


def ratio_text(value):
    # Small ratios keep a third digit: 0.054x is not "0.05x" next to a goal of 1/20.
    if value is None:
        return "-"
    return f"{value:.3f}x" if value < 0.1 else f"{value:.2f}x"


COLUMNS = ("figure", "measured", "n", "median", "min", "max", "ratio", "goal")


def table_rows(rows):
    """The printable cells of each result row (see run.py's Row for the keys)."""
    cells = []
    for row in rows:
        ratios = "; ".join(f"{ratio_text(r['ratio'])} {r['against']}" for r in row.get("ratios", [])) or "-"
        cells.append((row["figure"], row["measured"], str(row["n"]), number(row["median"], row["unit"]),
                      number(row["min"], row["unit"]), number(row["max"], row["unit"]), ratios,
                      row.get("goal") or ""))
    return cells


def text_table(rows):
    """The table as aligned text, for the terminal."""
    cells = [COLUMNS] + table_rows(rows)
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
    lines = ["  ".join(value.ljust(width) for value, width in zip(line, widths)).rstrip() for line in cells]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def markdown_table(rows):
    """The table in Markdown, for docs/benchmarks.md."""
    def escape(value):
        return value.replace("|", "\\|")
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(escape(value) for value in line) + " |" for line in table_rows(rows)]
    return "\n".join(lines)


# How each peer names the Slurm job it submitted, in what it prints (bench/run.py's peers):
# bench/peers/submitit_ddp.py's JSON line, torchx's "Launched app: slurm://<session>/<id>",
# NeMo-Run's "- Job id: <id>" of the experiment summary it prints once the job is submitted
# (NeMo-Run 0.11.1; its "Launched app" line says slurm_tunnel://, and is a log line, which
# its log level can hide).
PEER_JOB_ID = {
    "submitit": re.compile(r'"job_id": "(\d+)'),
    "torchx": re.compile(r"Launched app: slurm://[^/\s]*/(\d+)"),
    "nemo_run": re.compile(r"^\s*- Job id: (\d+)\s*$", re.M),
}
# Terminal styles (NeMo-Run prints through rich, which styles its output where FORCE_COLOR is set).
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def peer_job_id(peer, output):
    """The job id a peer printed (the first one), or None."""
    match = PEER_JOB_ID[peer].search(_ANSI.sub("", output))
    return int(match.group(1)) if match else None


def sacct_state(text):
    """(state, exit code) from `sacct -n -X -P -o State,ExitCode`: its first line, e.g.
    "COMPLETED|0:0"; (None, None) when there is none. "CANCELLED by 2001" keeps its words."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return None, None
    state, _, code = lines[0].partition("|")
    return state.strip(), code.strip() or None
