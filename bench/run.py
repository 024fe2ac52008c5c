#!/usr/bin/env python3
"""make bench: the launcher's figures, each against a baseline measured in the same run.

1. submission: launch.yml -e wait=false against a hand sbatch of the same rendered script and
   against the floor of Ansible (bench/floor.yml, one task that runs that sbatch);
2. time to answer: from the job's end (the training's last line, and the end marker the job
   script writes) to the launch returning with the collected outputs, against a hand sbatch
   followed by a one-second squeue loop and one scontrol for the exit code;
3. controller load: slurmctld RPCs (sdiag) and slurmdbd RPCs (sacctmgr show stats) received
   while following that job, launch against the hand loop (measured in the same runs as 2);
4. provisioning: a second, no-change provision.yml on 2 nodes and on 4 nodes, and how many
   times the NAS installers ran (bench/standins count them);
5. rendering at scale: launch.yml --check for a 1,000-node inventory group, against the same
   for 2 nodes (Slurm's answers played back by bench/fakeslurm: no machine here runs 1,000 slurmd).

It brings up its own clusters from bench/inventory (never inventory/local), runs each
measurement several times, prints a table (median, min, max, ratio), writes it and the
profiles behind it as JSON to bench/results/, and takes the clusters down again unless they
were up before. Figures are printed, never asserted: a slow machine fails nothing.
"""

import argparse
import hashlib
import json
import os
import platform
import re
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from pathlib import Path

import benchlib
import scale

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
RESULTS = BENCH / "results"
BIN = Path(sys.executable).parent
TOOL = REPO / "bin" / "local-cluster"
TRAINER = "examples/train_ddp.py"
INVENTORY_2 = BENCH / "inventory" / "bench2"
INVENTORY_4 = BENCH / "inventory" / "bench4"
NODES_2 = "b2-n1,b2-n2"
# The ordinary user who submits from the bench clusters' login host (their login.yml).
LOGIN_USER = "alice"
FIGURES = ("submission", "answer", "peers", "provision", "render", "scale")
# RPCs nobody's follower sends: the probe's own (sdiag) and slurmd's periodic registration.
CTLD_IGNORED = {"REQUEST_STATS_INFO", "MESSAGE_NODE_REGISTRATION_STATUS"}


def log(message):
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def ansible_env(extra=None):
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
            # Each run's task timeline (bench/callback_plugins) is the profile behind its figure.
            "ANSIBLE_CALLBACK_PLUGINS": str(BENCH / "callback_plugins"),
            "ANSIBLE_CALLBACKS_ENABLED": "bench_timeline", **(extra or {})}


def machine_cpu_seconds():
    """CPU seconds every core of this machine has spent busy since boot (/proc/stat's user, nice,
    system, irq and softirq: not idle, iowait, or steal, the hypervisor's)."""
    user, nice, system, _idle, _iowait, irq, softirq = (
        int(value) for value in Path("/proc/stat").read_text().splitlines()[0].split()[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds():
    """CPU seconds (user and system) of this process's finished children and theirs."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class Run:
    """One finished ansible-playbook run: exit code, wall-clock start and end, output, timeline,
    and CPU seconds: the playbook's own (ansible-playbook, its workers and the ssh clients they
    waited for: the controller) and the whole machine's over the run. The rest is mostly the hosts'
    side (sshd, sudo, the modules' Python, Slurm's daemons: the local cluster's hosts share this
    machine's cores, as a real cluster's do not), with ssh's persistent connection masters
    (ControlPersist: nobody waits for them) and anything else running."""

    def __init__(self, rc, started, ended, output, timeline, cpu=None):
        self.rc, self.started, self.ended, self.output, self.timeline = rc, started, ended, output, timeline
        self.cpu = cpu or {}

    @property
    def seconds(self):
        return self.ended - self.started

    def tail(self, lines=30):
        return "\n".join(self.output.splitlines()[-lines:])

    def recap(self):
        """{host: {ok, changed, failed, ...}} from the PLAY RECAP."""
        return {host: {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", counts)}
                for host, counts in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", self.output, re.M)}


def playbook(inventory, play, *extra_vars, check=False, env=None, timeout=1800):
    """ansible-playbook -i INVENTORY PLAY -e ... as a user runs it, from the repo root.

    Output goes to a file, not a pipe, and the end is taken when the process exits: that is
    the moment the user has the answer."""
    argv = [str(BIN / "ansible-playbook"), "-i", str(inventory), str(play)]
    if check:
        argv.append("--check")
    for item in extra_vars:
        argv += ["-e", item]
    tmp = RESULTS / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w+", dir=tmp, suffix=".out") as out, \
            tempfile.NamedTemporaryFile("r", dir=tmp, suffix=".timeline.json") as timeline:
        machine_before, controller_before = machine_cpu_seconds(), children_cpu_seconds()
        started = time.time()
        proc = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=ansible_env({"BENCH_TIMELINE": timeline.name, **(env or {})}))
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
        ended = time.time()
        machine = machine_cpu_seconds() - machine_before
        controller = children_cpu_seconds() - controller_before
        cpu = {"controller_s": round(controller, 2), "machine_s": round(machine, 2),
               "rest_s": round(max(machine - controller, 0.0), 2)}
        out.seek(0)
        output = out.read()
        try:
            data = json.loads(Path(timeline.name).read_text() or "null")
        except (OSError, ValueError):
            data = None
    return Run(rc, started, ended, output, data, cpu)


def local_cluster(*args):
    proc = subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"local-cluster {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return proc.stdout


class Cluster:
    """A benchmark cluster from bench/inventory: brought up if it is not, taken down only if it
    was brought up here."""

    def __init__(self, inventory, accounting=False):
        self.inventory = inventory
        self.accounting = accounting
        self.brought_up = False
        self.report = None

    def status(self):
        return json.loads(local_cluster("status", "-i", str(self.inventory), "--json"))

    def up(self):
        report = self.status()
        if not report["up"]:
            log(f"bringing up {report['cluster']} ({self.inventory.relative_to(REPO)})")
            local_cluster("up", "-i", str(self.inventory), *(["--accounting"] if self.accounting else []))
            self.brought_up = True
            report = self.status()
        elif self.accounting and not report.get("accounting"):
            log(f"{report['cluster']} was already up without accounting: slurmdbd figures are left out")
        self.report = report
        self.env = {**os.environ, "SLURM_CONF": report["slurm_conf"]}
        self.nas = Path(report["nas"])
        self.has_dbd = bool(report.get("accounting"))
        self.state = Path(report["state_dir"])
        # The user's jobs directory on the NAS (roles/slurm_launch: <jobs>/<user>/<job>/runs/<id>/).
        self.jobs = self.nas / "jobs" / LOGIN_USER
        login = next((s for s in report.get("services", []) if s["name"].endswith("-login")), None)
        if login is None:
            raise RuntimeError(f"{report['cluster']} has no login host (bench/inventory: group login)")
        self.login_name, self.login_address = login["name"], login["address"]
        # The SSH that Ansible makes to the login host (its default ssh_args: -C, a control
        # master kept 60 s; login.yml: the user's key, the cluster's known_hosts), so the hand
        # baselines pay what the floor pays to reach it.
        ssh_dir = self.state / "ssh"
        self.ssh_argv = ["ssh", "-C", "-o", "ControlMaster=auto", "-o", "ControlPersist=60s",
                         "-o", f"ControlPath={RESULTS / 'tmp' / 'ssh-%C'}", "-o", "BatchMode=yes",
                         "-i", str(ssh_dir / f"id_ed25519_{LOGIN_USER}"),
                         "-o", f"UserKnownHostsFile={ssh_dir / 'known_hosts'}", "-o", "StrictHostKeyChecking=yes",
                         f"{LOGIN_USER}@{self.login_address}"]
        return self

    def down(self, keep):
        if self.brought_up and not keep:
            log(f"taking down {self.report['cluster']}")
            local_cluster("down", "-i", str(self.inventory))

    def slurm(self, *argv, cwd=None):
        """A Slurm command as the admin on this machine (the probes: sdiag, sacctmgr, scancel)."""
        return subprocess.run(list(argv), capture_output=True, text=True, env=self.env, cwd=cwd, timeout=120)

    def login(self, *argv, cwd=None, env=None, timeout=120):
        """A command as the user on the login host, over SSH. The remote side is a shell: every
        word is quoted (shlex), so nothing in a path or argument is run as shell code."""
        words = [*(["cd", str(cwd), "&&"] if cwd else []), *(["env", *(f"{k}={v}" for k, v in (env or {}).items())]
                                                              if env else []), *map(str, argv)]
        command = " ".join(w if w == "&&" else shlex.quote(w) for w in words)
        return subprocess.run([*self.ssh_argv, command], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    def job_dir(self, name):
        return self.jobs / name

    def run_dir(self, name):
        """The newest run directory of a job name (the one its launch made)."""
        # Runs are numbered directories; runs/.lock beside them is the launches' lock file.
        runs = sorted((path for path in (self.job_dir(name) / "runs").glob("*") if path.name.isdigit()),
                      key=lambda path: (len(path.name), path.name))
        return runs[-1] if runs else None

    def ctld_rpcs(self):
        return benchlib.rpc_counts(self.slurm("sdiag").stdout)

    def dbd_rpcs(self):
        return benchlib.rpc_counts(self.slurm("sacctmgr", "show", "stats").stdout) if self.has_dbd else {}


class LoadProbe:
    """Slurm RPCs received between two snapshots: sdiag for slurmctld, `sacctmgr show stats`
    for slurmdbd. The probes' own RPCs are taken out: sdiag's by type, sacctmgr's as
    calibrated on an idle cluster (the difference between two snapshots in a row)."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.dbd_probe_cost = {}
        if cluster.has_dbd:
            first = cluster.dbd_rpcs()
            second = cluster.dbd_rpcs()
            self.dbd_probe_cost = benchlib.rpc_delta(first, second)

    def start(self):
        self.before = (self.cluster.ctld_rpcs(), self.cluster.dbd_rpcs())

    def stop(self):
        after = (self.cluster.ctld_rpcs(), self.cluster.dbd_rpcs())
        ctld = {kind: n for kind, n in benchlib.rpc_delta(self.before[0], after[0]).items() if kind not in CTLD_IGNORED}
        dbd = benchlib.rpc_delta(self.before[1], after[1], minus=self.dbd_probe_cost) if self.cluster.has_dbd else None
        return ctld, dbd


class LogWatcher(threading.Thread):
    """Notes when the training's last line ("training complete") shows up in the job's log,
    looking every 10 ms: the training prints no timestamps, and this is the moment a person
    watching the log would see it."""

    LAST_LINE = "training complete"

    def __init__(self, root, pattern):
        super().__init__(daemon=True)
        self.root, self.pattern = Path(root), pattern
        self.ignore = set(self.root.glob(pattern)) if self.root.is_dir() else set()  # an earlier job's log
        self.last_line_at = None
        self.done = threading.Event()

    def run(self):
        offsets = {}
        while not self.done.is_set() and self.last_line_at is None:
            for path in self.root.glob(self.pattern) if self.root.is_dir() else ():
                if path in self.ignore:
                    continue
                try:
                    with open(path, "rb") as handle:
                        handle.seek(offsets.get(path, 0))
                        data = handle.read()
                except OSError:
                    continue
                complete = data[:data.rfind(b"\n") + 1]
                offsets[path] = offsets.get(path, 0) + len(complete)
                if self.LAST_LINE.encode() in complete:
                    self.last_line_at = time.time()
            self.done.wait(0.01)

    def stop(self):
        self.done.set()
        self.join(timeout=5)
        return self.last_line_at


def marker_time(run_dir, job_id):
    """When the job script ended: the mtime of the end marker it writes (templates/train.sbatch.j2)."""
    try:
        return (Path(run_dir) / f".{job_id}.ended").stat().st_mtime_ns / 1e9
    except (OSError, TypeError):
        return None


# ---------------------------------------------------------------------------------------------
# Profiles: what dominates a run, from its task timeline.
# ---------------------------------------------------------------------------------------------

def phases(run):
    """Process start to first task (interpreter, imports, inventory, playbook and roles), the
    tasks, and last task to exit."""
    tasks = (run.timeline or {}).get("tasks", [])
    if not tasks:
        return None
    first, last = tasks[0]["start"], max((t["end"] or t["start"]) for t in tasks)
    ran = [t for t in tasks if set(t["status"]) - {"skipped"}]
    return {"startup": first - run.started, "tasks": last - first, "exit": run.ended - last,
            "tasks_run": len(ran), "tasks_skipped": len(tasks) - len(ran)}


def profile(runs, top=8):
    """Median of each phase and of the slowest tasks over several runs of the same playbook."""
    per_phase = [p for p in (phases(run) for run in runs) if p]
    per_task, per_action = {}, {}
    for index, run in enumerate(runs):
        for task in (run.timeline or {}).get("tasks", []):
            seconds = (task["end"] or task["start"]) - task["start"]
            per_task.setdefault(task["name"], []).append(seconds)
            # Per run, the time spent in each kind of task (modules, set_fact, assert, ...).
            action = per_action.setdefault(task["action"].rsplit(".", 1)[-1], [0.0] * len(runs))
            action[index] += seconds
    slowest = sorted(((benchlib.summary(v)["median"], name) for name, v in per_task.items()), reverse=True)[:top]
    return {
        "phases": {key: benchlib.summary([p[key] for p in per_phase])["median"] for key in
                   ("startup", "tasks", "exit", "tasks_run", "tasks_skipped")} if per_phase else None,
        "slowest_tasks": [{"task": name, "median_s": round(seconds, 3)} for seconds, name in slowest],
        "task_medians": {name: round(benchlib.summary(v)["median"], 3) for name, v in per_task.items()},
        "seconds_by_action": dict(sorted(((action, round(benchlib.summary(v)["median"], 3))
                                          for action, v in per_action.items()), key=lambda item: -item[1])),
        # CPU seconds of a run (medians): the controller's, the machine's, the rest (see Run).
        "cpu": {key: benchlib.summary([run.cpu[key] for run in runs if run.cpu])["median"]
                for key in ("controller_s", "machine_s", "rest_s")} if any(run.cpu for run in runs) else None,
    }


def after_end(run, end):
    """The tasks that were running or ran after the job's end, with the time each took after it."""
    spans = []
    for task in (run.timeline or {}).get("tasks", []):
        finish = task["end"] or task["start"]
        if end is not None and finish > end:
            spans.append({"task": task["name"], "after_end_s": round(finish - max(task["start"], end), 3),
                          "skipped": set(task["status"]) == {"skipped"}})
    return spans


# ---------------------------------------------------------------------------------------------
# The figures. Each returns (rows, details); a row is what the table prints.
# ---------------------------------------------------------------------------------------------

def row(figure, measured, samples, unit, ratios=(), goal=None, **extra):
    return {"figure": figure, "measured": measured, "unit": unit, "samples": samples,
            **benchlib.summary(samples), "ratios": list(ratios), "goal": goal, **extra}


def against(value_row, base_row, name):
    return {"against": name, "ratio": benchlib.ratio(value_row["median"], base_row["median"])}


def verdict(met, text):
    if met is None:
        return f"{text}: not measured"
    return f"{text}: {'met' if met else 'missed'}"


def launch_args(name, *extra):
    return [f"nodes={NODES_2}", f"script={TRAINER}", "nproc_per_node=2", f"job_name={name}",
            f"slurm_launch_outputs_dir={RESULTS / 'outputs'}", *extra]


def job_id_of(run):
    match = re.search(r"Job (\d+) \(", run.output) or re.search(r"^job\s+(\d+) \(", run.output, re.M)
    return int(match.group(1)) if match else None


def bench_submission(cluster, reps):
    """launch.yml -e wait=false, the one-task floor and a hand sbatch, on the same script. Jobs
    are submitted held (--hold, a directive of the rendered script) and cancelled at once: the
    figure is the submission, not the job."""
    held = json.dumps({"slurm_launch_extra_directives": ["--hold"]})
    times = {"launch": [], "floor": [], "sbatch": []}
    launches, floors = [], []
    for rep in range(reps + 1):  # the first is a warm-up (page cache, .pyc), not counted
        name = unique("bench-sub")
        launch = playbook(INVENTORY_2, "launch.yml", *launch_args(name, "wait=false"), held)
        if launch.rc != 0:
            raise RuntimeError(f"launch.yml wait=false failed:\n{launch.tail()}")
        script = cluster.run_dir(name) / f"{name}.sbatch"
        floor = playbook(INVENTORY_2, BENCH / "floor.yml", f"bench_script={script}")
        if floor.rc != 0:
            raise RuntimeError(f"bench/floor.yml failed:\n{floor.tail()}")
        # By hand: the same sbatch, as the same user on the login host, over the same SSH.
        started = time.time()
        hand = cluster.login("sbatch", "--parsable", script, cwd=script.parent)
        hand_seconds = time.time() - started
        if hand.returncode != 0:
            raise RuntimeError(f"sbatch failed: {hand.stderr}")
        cluster.slurm("scancel", "--name", name)
        if rep:
            times["launch"].append(launch.seconds)
            times["floor"].append(floor.seconds)
            times["sbatch"].append(hand_seconds)
            launches.append(launch)
            floors.append(floor)
        log(f"submission {rep or 'warm-up'}: launch {launch.seconds:.2f} s, floor {floor.seconds:.2f} s, "
            f"sbatch {hand_seconds:.3f} s")
    sbatch = row("1 submission", "hand sbatch (same script, over SSH on the login host)", times["sbatch"], "s")
    floor = row("1 submission", "Ansible floor (one-task playbook running that sbatch)", times["floor"], "s")
    launch = row("1 submission", "launch.yml -e wait=false", times["launch"], "s")
    launch["ratios"] = [against(launch, floor, "floor"), against(launch, sbatch, "sbatch")]
    ratio_value = launch["ratios"][0]["ratio"]
    launch["goal"] = verdict(None if ratio_value is None else ratio_value <= 1.5, "<= 1.5x floor") + (
        "" if ratio_value is None else f"; stretch 1.25x: {'met' if ratio_value <= 1.25 else 'missed'}")
    details = {"launch_profile": profile(launches), "floor_profile": profile(floors),
               "module_floor": module_floor()}
    return [sbatch, floor, launch], details


def module_floor(reps=5):
    """Where a module task's time goes (medians, seconds): a bare Python start; one importing
    AnsibleModule from the virtualenv; the AnsiballZ payload of ansible.builtin.command alone
    (what Ansible runs on the host: unpack, import module_utils from the zip, run `true`),
    kept with ANSIBLE_KEEP_REMOTE_FILES from an ad-hoc run; and ansible-playbook --version
    (the controller's own interpreter and imports)."""
    def timed(argv, env=None):
        samples = []
        for _ in range(reps):
            started = time.time()
            subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env)
            samples.append(time.time() - started)
        return benchlib.summary(samples)["median"]

    timings = {"python_start_s": timed([sys.executable, "-c", "pass"]),
               "import_ansible_module_s": timed([sys.executable, "-c", "import ansible.module_utils.basic"]),
               "ansible_playbook_version_s": timed([str(BIN / "ansible-playbook"), "--version"], ansible_env())}
    with tempfile.TemporaryDirectory(dir=RESULTS / "tmp") as tmp:
        env = ansible_env({"ANSIBLE_KEEP_REMOTE_FILES": "1", "ANSIBLE_PIPELINING": "0", "ANSIBLE_REMOTE_TMP": tmp})
        subprocess.run([str(BIN / "ansible"), "localhost", "-i", "localhost,", "-c", "local", "-e",
                        f"ansible_python_interpreter={sys.executable}", "-m", "ansible.builtin.command", "-a", "true"],
                       check=True, stdout=subprocess.DEVNULL, env=env, cwd=REPO)
        payload = next(Path(tmp).rglob("AnsiballZ_command.py"), None)
        timings["ansiballz_command_payload_s"] = timed([sys.executable, str(payload)]) if payload else None
    return timings


def hand_follow(cluster, script):
    """What a person does by hand: sbatch, then `squeue -j ID` every second until the job is
    gone from it, then one scontrol for the exit code, each as the user on the login host over
    SSH. Returns (job id, exit code, state, answer time)."""
    submitted = cluster.login("sbatch", "--parsable", script, cwd=script.parent)
    if submitted.returncode != 0:
        raise RuntimeError(f"sbatch failed: {submitted.stderr}")
    job_id = int(submitted.stdout.strip().split(";")[0])
    while cluster.login("squeue", "-h", "-j", job_id, "-o", "%T").stdout.strip():
        time.sleep(1)
    record = cluster.login("scontrol", "show", "job", "-o", job_id).stdout
    answered = time.time()
    match = re.search(r"\bExitCode=(\d+):\d+", record)
    state = re.search(r"\bJobState=(\S+)", record)
    return job_id, (int(match.group(1)) if match else None), (state.group(1) if state else None), answered


def bench_answer(cluster, probe, kind, reps, steps, step_sleep, log_every, warm_up=False):
    """Launches followed to their end, each followed by a hand run of the very script it
    rendered (its checkpoints removed first, so that it trains from scratch as well)."""
    script_args = json.dumps({"script_args": f"--steps {steps} --step-sleep {step_sleep} --log-every {log_every}"})
    samples = {k: [] for k in ("launch_line", "launch_marker", "hand_line", "hand_marker", "launch_ctld",
                               "hand_ctld", "launch_dbd", "hand_dbd", "launch_job_s", "hand_job_s", "job_elapsed_s", "job_tail")}
    runs, rpc_breakdown, answer_profiles = [], [], []
    if warm_up:
        # The first job on a cluster pays for cold caches (torch from the NAS env): not counted.
        started = time.time()
        playbook(INVENTORY_2, "launch.yml", *launch_args(unique(f"bench-{kind}-warm-up")), script_args)
        log(f"{kind} warm-up job: {time.time() - started:.1f} s")
    for rep in range(reps):
        name = unique(f"bench-{kind}")
        job_dir = cluster.job_dir(name)
        watcher = LogWatcher(job_dir, f"runs/*/{name}-*.out")
        watcher.start()
        probe.start()
        launch = playbook(INVENTORY_2, "launch.yml", *launch_args(name), script_args)
        ctld, dbd = probe.stop()
        line_at = watcher.stop()
        if launch.rc != 0:
            raise RuntimeError(f"launch.yml failed:\n{launch.tail()}")
        job = next((json.loads(path.read_text()) for path in (RESULTS / "outputs").glob(f"{name}-*/job.json")), {})
        job_id = job.get("job_id") or job_id_of(launch)
        samples["job_elapsed_s"].append(job.get("elapsed_seconds"))
        run_dir = cluster.run_dir(name)
        marker_at = marker_time(run_dir, job_id)
        samples["launch_line"].append(None if line_at is None else launch.ended - line_at)
        samples["launch_marker"].append(None if marker_at is None else launch.ended - marker_at)
        samples["job_tail"].append(None if None in (marker_at, line_at) else marker_at - line_at)
        samples["launch_ctld"].append(sum(ctld.values()))
        samples["launch_dbd"].append(None if dbd is None else sum(dbd.values()))
        samples["launch_job_s"].append(launch.seconds)
        runs.append(launch)
        answer_profiles.append({"answer_after_last_line_s": samples["launch_line"][-1],
                                "answer_after_marker_s": samples["launch_marker"][-1],
                                "after_job_end": after_end(launch, marker_at)})

        # The hand run of the same script.
        shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
        script = run_dir / f"{name}.sbatch"
        watcher = LogWatcher(job_dir, f"runs/*/{name}-*.out")
        watcher.start()
        probe.start()
        started = time.time()
        hand_id, exit_code, state, answered = hand_follow(cluster, script)
        hand_ctld, hand_dbd = probe.stop()
        hand_line = watcher.stop()
        hand_marker = marker_time(run_dir, hand_id)
        samples["hand_line"].append(None if hand_line is None else answered - hand_line)
        samples["hand_marker"].append(None if hand_marker is None else answered - hand_marker)
        samples["job_tail"].append(None if None in (hand_marker, hand_line) else hand_marker - hand_line)
        samples["hand_ctld"].append(sum(hand_ctld.values()))
        samples["hand_dbd"].append(None if hand_dbd is None else sum(hand_dbd.values()))
        samples["hand_job_s"].append(answered - started)
        rpc_breakdown.append({"launch": {"slurmctld": ctld, "slurmdbd": dbd},
                              "hand": {"slurmctld": hand_ctld, "slurmdbd": hand_dbd}})
        log(f"{kind} {rep + 1}/{reps}: launch job {job_id} ({job.get('state')}, {job.get('elapsed_seconds')} s) answered {samples['launch_line'][-1]:.2f} s after the "
            f"last line, {samples['launch_ctld'][-1]} slurmctld + {samples['launch_dbd'][-1]} slurmdbd RPCs; "
            f"hand job {hand_id} ({state}, exit {exit_code}) {samples['hand_line'][-1]:.2f} s, "
            f"{samples['hand_ctld'][-1]} + {samples['hand_dbd'][-1]} RPCs")

    label = {"short": "short job", "long": "long job"}[kind]
    figure2, figure3 = f"2 answer, {label}", f"3 load, {label}"
    hand_line = row(figure2, "hand sbatch + 1 s squeue loop: after the training's last line", samples["hand_line"], "s")
    launch_line = row(figure2, "launch.yml: after the training's last line", samples["launch_line"], "s")
    launch_line["ratios"] = [against(launch_line, hand_line, "hand")]
    answer = launch_line["median"]
    launch_line["goal"] = verdict(None if answer is None else answer <= 0.5, "<= 0.5 s") + (
        "" if answer is None else f"; stretch 0.25 s: {'met' if answer <= 0.25 else 'missed'}")
    hand_marker = row(figure2, "hand: after the job script's end marker", samples["hand_marker"], "s")
    launch_marker = row(figure2, "launch.yml: after the job script's end marker", samples["launch_marker"], "s")
    launch_marker["ratios"] = [against(launch_marker, hand_marker, "hand")]
    # The part of the answer time no follower can save: the job script ends (srun, torchrun and
    # the batch shell exit) this long after the training's last line.
    tail = row(figure2, "job script's end marker after the training's last line (both)", samples["job_tail"], "s")
    wall = row(figure2, "launch.yml wall time, submission to answer", samples["launch_job_s"], "s")
    hand_wall = row(figure2, "hand wall time, sbatch to answer", samples["hand_job_s"], "s")
    wall["ratios"] = [against(wall, hand_wall, "hand")]

    # The goal: the follower's own slurmctld RPCs (the job's own and sbatch's left out).
    share = 0.25 if kind == "short" else 0.03
    hand_ctld = row(figure3, "hand loop: slurmctld RPCs", samples["hand_ctld"], "")
    launch_ctld = row(figure3, "launch.yml: slurmctld RPCs", samples["launch_ctld"], "")
    launch_ctld["ratios"] = [against(launch_ctld, hand_ctld, "hand")]
    rows = [hand_line, launch_line, tail, hand_marker, launch_marker, hand_wall, wall, hand_ctld, launch_ctld]
    totals_hand = [c + (d or 0) for c, d in zip(samples["hand_ctld"], samples["hand_dbd"])]
    totals_launch = [c + (d or 0) for c, d in zip(samples["launch_ctld"], samples["launch_dbd"])]
    if cluster.has_dbd:
        hand_dbd = row(figure3, "hand loop: slurmdbd RPCs", samples["hand_dbd"], "")
        launch_dbd = row(figure3, "launch.yml: slurmdbd RPCs", samples["launch_dbd"], "")
        launch_dbd["ratios"] = [against(launch_dbd, hand_dbd, "hand")]
        rows += [hand_dbd, launch_dbd]
    hand_total = row(figure3, "hand loop: slurmctld + slurmdbd RPCs", totals_hand, "")
    launch_total = row(figure3, "launch.yml: slurmctld + slurmdbd RPCs", totals_launch, "")
    launch_total["ratios"] = [against(launch_total, hand_total, "hand")]
    ratio_value = launch_total["ratios"][0]["ratio"]
    rows += [hand_total, launch_total]
    own = {side: [benchlib.split_rpcs(b[side]["slurmctld"])["own"] for b in rpc_breakdown] for side in ("launch", "hand")}
    hand_own = row(figure3, "hand loop: its own slurmctld RPCs (the job's and sbatch's left out)", own["hand"], "")
    launch_own = row(figure3, "launch.yml: its own slurmctld RPCs (the job's and sbatch's left out)", own["launch"], "")
    launch_own["ratios"] = [against(launch_own, hand_own, "hand")]
    own_ratio = launch_own["ratios"][0]["ratio"]
    launch_own["goal"] = verdict(None if own_ratio is None else own_ratio <= share, f"<= {share}x hand")
    rows += [hand_own, launch_own]
    if cluster.has_dbd:
        queries = [benchlib.dbd_queries(b["launch"]["slurmdbd"]) for b in rpc_breakdown]
        rows.append(row(figure3, "launch.yml: slurmdbd queries (DBD_GET_*; slurmctld knew the job throughout)",
                        queries, "", goal=verdict(max(queries, default=0) == 0, "none")))
    by_type = {side: {daemon: {kind: benchlib.summary([(b[side][daemon] or {}).get(kind, 0) for b in rpc_breakdown])["median"]
                               for kind in sorted({k for b in rpc_breakdown for k in (b[side][daemon] or {})})}
                      for daemon in ("slurmctld", "slurmdbd")} for side in ("launch", "hand")}
    details = {"rpc_median_by_type": by_type, "job": {"steps": steps, "step_sleep": step_sleep, "log_every": log_every, "nodes": 2,
                       "nproc_per_node": 2},
               "samples": samples, "rpc_breakdown": rpc_breakdown, "launch_profile": profile(runs),
               "answer_profiles": answer_profiles}
    return rows, details


# ---------------------------------------------------------------------------------------------
# Peers: other launchers submit the same training on the same cluster, from the login host.
# ---------------------------------------------------------------------------------------------

PEERS_REQUIREMENTS = BENCH / "requirements-peers.txt"
PEERS_CONSTRAINTS = BENCH / "constraints-peers.txt"
# NeMo-Run in a venv of its own: it registers torchx schedulers (slurm_tunnel, ...), and torchx
# then offers only the registered ones, so beside it `torchx run -s slurm` fails ("invalid choice").
NEMO_RUN_REQUIREMENTS = BENCH / "peers" / "requirements-nemo_run.txt"
# Outside every cluster's state dir (kept across `down`, so a run does not reinstall it) and
# outside the checkout: the login host and the nodes run this venv's Python (submitit's job
# does), and they see neither the checkout nor /root.
PEERS_ROOT = Path("/var/lib/ansible-slurm-train/bench-peers")
# What a site's hosts all run: a venv made from the controller's Python would point into /root.
SYSTEM_PYTHON = "/usr/bin/python3"
CONDA_ENV = "magicdrivedit"  # bench/environment.yml


def peers_venv(requirements=PEERS_REQUIREMENTS, prefix="venv"):
    """A peers' venv (bench/requirements-peers.txt, or NeMo-Run's; pins of what they pull in,
    torch held to the local CPU build, in bench/constraints-peers.txt), made once per content
    of those files."""
    digest = hashlib.sha256(requirements.read_bytes() + PEERS_CONSTRAINTS.read_bytes()).hexdigest()[:8]
    venv = PEERS_ROOT / f"{prefix}-{digest}"
    if not (venv / ".complete").exists():
        log(f"installing the peers into {venv}")
        shutil.rmtree(venv, ignore_errors=True)
        PEERS_ROOT.mkdir(parents=True, exist_ok=True)
        PEERS_ROOT.chmod(0o755)
        subprocess.run([SYSTEM_PYTHON, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
        proc = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "-r", str(requirements),
                               "-c", str(PEERS_CONSTRAINTS)], capture_output=True, text=True, timeout=1200)
        if proc.returncode != 0:
            raise RuntimeError(f"pip install of the peers failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        (venv / ".complete").touch()
    return venv


def peer_versions(venv):
    proc = subprocess.run([str(venv / "bin" / "pip"), "list", "--format=json"], capture_output=True, text=True)
    try:
        return {p["name"].lower(): p["version"] for p in json.loads(proc.stdout)}
    except ValueError:
        return {}


def peer_files(cluster):
    """The drivers (bench/peers) and the trainer, where the login host and the nodes see them."""
    directory = cluster.state / "bench-peers"
    directory.mkdir(exist_ok=True)
    directory.chmod(0o755)
    for source in (BENCH / "peers" / "submitit_ddp.py", BENCH / "peers" / "torchx_ddp.sh",
                   BENCH / "peers" / "nemo_run_ddp.py", REPO / TRAINER):
        shutil.copyfile(source, directory / source.name)
        (directory / source.name).chmod(0o755)
    # bin: first on the jobs' PATH; nemo_run_ssh: first on NeMo-Run's PATH here (its rsync's ssh),
    # kept apart so that no job's ssh is the wrapper.
    for folder, source in (("bin", BENCH / "peers" / "torchrun"),
                           ("nemo_run_ssh", BENCH / "peers" / "nemo_run_ssh" / "ssh")):
        (directory / folder).mkdir(exist_ok=True)
        (directory / folder).chmod(0o755)
        shutil.copyfile(source, directory / folder / source.name)
        (directory / folder / source.name).chmod(0o755)
    return directory


def job_state(cluster, job_id):
    """(state, exit code) of a finished job, from accounting (as the admin, after the measurement)."""
    if not job_id:
        return None, None
    return benchlib.sacct_state(cluster.slurm("sacct", "-n", "-X", "-P", "-j", str(job_id), "-o", "State,ExitCode").stdout)


NEMO_RUN_LABEL = "NeMo-Run {version} (SlurmExecutor over SSHTunnel, torchrun launcher, Experiment.run)"


class Peer:
    """One launcher run as the user, on the login host (or here, through its own SSH tunnel to
    it): its command, the glob of its job's log under its folder, and how to read its job id
    from what it printed."""

    def __init__(self, key, label, argv, log_pattern, on_login=True, env=None, workdir=None):
        self.key, self.label, self.argv, self.log_pattern = key, label, argv, log_pattern
        # on_login: run on the login host over SSH; else on this machine (NeMo-Run, which
        # reaches the login host through its own SSH tunnel), in workdir, with env added.
        self.on_login, self.env, self.workdir = on_login, env, workdir

    def job_id(self, output):
        return benchlib.peer_job_id(self.key, output)


def peers(cluster, venv, nemo_run_venv, files, steps, step_sleep, log_every):
    conda = cluster.nas / "anaconda3"
    nccl_env = cluster.nas / "env" / "nccl-bench_cpu.sh"
    trainer = files / Path(TRAINER).name
    train_args = ["--steps", str(steps), "--step-sleep", str(step_sleep), "--log-every", str(log_every)]
    versions = peer_versions(venv)
    # The same env as the launch's job script: conda env by prefix, the node group's NCCL file,
    # OMP_NUM_THREADS = cpus per task / processes per node.
    setup = [f"source {shlex.quote(str(conda / 'etc/profile.d/conda.sh'))}",
             f'conda activate "{shlex.quote(str(conda / "envs"))}/$(readlink {shlex.quote(str(conda / "envs" / CONDA_ENV))} '
             f'|| echo {CONDA_ENV})"',
             f"source {shlex.quote(str(nccl_env))}", "export OMP_NUM_THREADS=2",
             f'export PATH={shlex.quote(str(files / "bin"))}:"$PATH"']  # torchrun (bench/peers/torchrun)
    submitit_argv = lambda folder, name: [  # noqa: E731 - one command line per run
        venv / "bin" / "python", files / "submitit_ddp.py", "--folder", folder, "--job-name", name,
        "--partition", "bench_cpu", "--nodes", "2", "--nproc-per-node", "2", "--cpus-per-task", "4",
        *[arg for line in setup for arg in ("--setup", line)], "--script", trainer, "--", *train_args]
    torchx_argv = lambda folder, name: [  # noqa: E731
        files / "torchx_ddp.sh", conda, CONDA_ENV, nccl_env, "2", venv / "bin" / "torchx",
        "run", "-s", "slurm", "--wait", "-cfg", "partition=bench_cpu,time=10",
        "dist.ddp", "-j", "2x2", "--name", name, "--cpu", "4", "--script", trainer, "--", *train_args]
    # NeMo-Run runs here and submits through its SSHTunnel to the login host as the user, with
    # the key and known_hosts that Cluster.ssh_argv uses; the folder is its tunnel's job_dir.
    ssh_dir = cluster.state / "ssh"
    nemo_run_argv = lambda folder, name: [  # noqa: E731
        nemo_run_venv / "bin" / "python", files / "nemo_run_ddp.py", "--job-dir", folder, "--job-name", name,
        "--host", cluster.login_address, "--user", LOGIN_USER, "--identity", ssh_dir / f"id_ed25519_{LOGIN_USER}",
        "--known-hosts", ssh_dir / "known_hosts", "--partition", "bench_cpu", "--nodes", "2",
        "--nproc-per-node", "2", "--cpus-per-task", "4",
        *[arg for line in setup for arg in ("--setup", line)], "--script", trainer, "--", *train_args]
    nemo_run_home = PEERS_ROOT / "nemo_run-home"  # its local experiment records (NEMORUN_HOME)
    nemo_run_home.mkdir(parents=True, exist_ok=True)
    nemo_run_env = {"PATH": f"{files / 'nemo_run_ssh'}:{os.environ.get('PATH', '/usr/bin:/bin')}",
                    "BENCH_KNOWN_HOSTS": str(ssh_dir / "known_hosts"), "NEMORUN_HOME": str(nemo_run_home)}
    nemo_run_versions = peer_versions(nemo_run_venv) if nemo_run_venv else {}
    nemo_run_version = nemo_run_versions.get("nemo_run", nemo_run_versions.get("nemo-run", "?"))
    runners = [
        Peer("submitit", f"submitit {versions.get('submitit', '?')} (SlurmExecutor, job.results())",
             submitit_argv, "*_log.out"),
        Peer("torchx", f"torchx {versions.get('torchx', '?')} (run -s slurm --wait dist.ddp -j 2x2)",
             torchx_argv, "slurm-*.out"),
        Peer("nemo_run", NEMO_RUN_LABEL.format(version=nemo_run_version), nemo_run_argv, "**/log-*.out",
             on_login=False, env=nemo_run_env, workdir=nemo_run_home),
    ]
    # No venv (its install failed): no NeMo-Run run; bench_peers reports why.
    return [peer for peer in runners if peer.key != "nemo_run" or nemo_run_venv], versions, nemo_run_versions


def bench_peers(cluster, probe, reps, steps, step_sleep, log_every, warm_up=True):
    """Each peer launches the answer figure's short job from the login host, as the user
    (NeMo-Run from here, through its SSH tunnel to the login host as the user), and waits for it
    its own way; measured as bench_answer measures launch.yml: wall time from the command's start
    to its exit, the exit after the training's last line (the harness polls the job's log), and
    the slurmctld and slurmdbd RPCs between the two (LoadProbe)."""
    venv = peers_venv()
    errors = {}
    try:
        nemo_run_venv = peers_venv(NEMO_RUN_REQUIREMENTS, "venv-nemo_run")
    except (RuntimeError, subprocess.SubprocessError) as error:
        # Reported as NeMo-Run's row; the other peers are still measured.
        log(f"peer nemo_run could not be installed: {error}")
        nemo_run_venv, errors["nemo_run"] = None, str(error)
    files = peer_files(cluster)
    runners, versions, nemo_run_versions = peers(cluster, venv, nemo_run_venv, files, steps, step_sleep, log_every)
    home = Path(f"/home/{LOGIN_USER}/bench-peers")
    samples = {peer.key: {k: [] for k in ("line", "wall", "ctld", "dbd")} for peer in runners}
    breakdown, outcomes = {peer.key: [] for peer in runners}, {peer.key: [] for peer in runners}

    def once(peer, counted):
        name = unique(f"bench-{peer.key}")
        folder = home / name
        made = cluster.login("mkdir", "-p", folder)
        if made.returncode != 0:
            raise RuntimeError(f"mkdir on {cluster.login_name} failed: {made.stderr}")
        watcher = LogWatcher(folder, peer.log_pattern)
        watcher.start()
        probe.start()
        started = time.time()
        if peer.on_login:
            proc = cluster.login(*peer.argv(folder, name), cwd=folder, timeout=900)
        else:
            proc = subprocess.run(list(map(str, peer.argv(folder, name))), capture_output=True, text=True, timeout=900,
                                  stdin=subprocess.DEVNULL, cwd=peer.workdir, env={**os.environ, **(peer.env or {})})
        answered = time.time()
        ctld, dbd = probe.stop()
        line_at = watcher.stop()
        output = proc.stdout + proc.stderr
        job_id = peer.job_id(output)
        state, exit_code = job_state(cluster, job_id)
        outcome = {"job_id": job_id, "rc": proc.returncode, "state": state, "exit_code": exit_code,
                   "output_tail": output[-1500:], "folder": str(folder), "counted": counted}
        outcomes[peer.key].append(outcome)
        if proc.returncode != 0 or line_at is None:
            raise RuntimeError(f"{peer.key} (exit {proc.returncode}, job {job_id} {state}) did not train to its "
                               f"end:\n{output[-3000:]}")
        if counted:
            samples[peer.key]["line"].append(answered - line_at)
            samples[peer.key]["wall"].append(answered - started)
            samples[peer.key]["ctld"].append(sum(ctld.values()))
            samples[peer.key]["dbd"].append(None if dbd is None else sum(dbd.values()))
            breakdown[peer.key].append({"slurmctld": ctld, "slurmdbd": dbd})
        log(f"{peer.key} {'warm-up' if not counted else 'run'}: job {job_id} ({state}, exit {exit_code}) "
            f"{answered - started:.1f} s, answered {answered - line_at:.2f} s after the last line, "
            f"{sum(ctld.values())} slurmctld + {None if dbd is None else sum(dbd.values())} slurmdbd RPCs")

    for peer in runners:
        try:
            if warm_up:
                # The first job pays for cold caches (the venv and torch read from disk): not counted.
                once(peer, False)
            for _ in range(reps):
                once(peer, True)
        except (RuntimeError, subprocess.TimeoutExpired) as error:
            # One peer that cannot run is reported; the others are still measured.
            log(f"peer {peer.key} could not be measured: {error}")
            errors[peer.key] = str(error)

    figure2, figure3 = "2 answer, short job (peers)", "3 load, short job (peers)"
    rows = []
    if nemo_run_venv is None:
        rows.append(row(figure2, f"{NEMO_RUN_LABEL.format(version='?')}: not measured: "
                        f"{errors['nemo_run'].splitlines()[0]}", [], "s"))
    for peer in runners:
        s = samples[peer.key]
        if not s["wall"]:
            rows.append(row(figure2, f"{peer.label}: not measured: {errors.get(peer.key, '?').splitlines()[0]}",
                            [], "s"))
            continue
        rows += [row(figure2, f"{peer.label}: after the training's last line", s["line"], "s"),
                 row(figure2, f"{peer.label}: wall time, submission to answer", s["wall"], "s"),
                 row(figure3, f"{peer.label}: slurmctld RPCs", s["ctld"], "")]
        if cluster.has_dbd:
            rows += [row(figure3, f"{peer.label}: slurmdbd RPCs", s["dbd"], ""),
                     row(figure3, f"{peer.label}: slurmctld + slurmdbd RPCs",
                         [c + (d or 0) for c, d in zip(s["ctld"], s["dbd"])], "")]
    by_type = {key: {daemon: {kind: benchlib.summary([(b[daemon] or {}).get(kind, 0) for b in runs])["median"]
                              for kind in sorted({k for b in runs for k in (b[daemon] or {})})}
                     for daemon in ("slurmctld", "slurmdbd")} for key, runs in breakdown.items()}
    rows += unavailable_rows()
    details = {"versions": versions, "venv": str(venv), "nemo_run_versions": nemo_run_versions,
               "nemo_run_venv": None if nemo_run_venv is None else str(nemo_run_venv), "samples": samples,
               "rpc_breakdown": breakdown, "rpc_median_by_type": by_type, "outcomes": outcomes, "errors": errors,
               "job": {"steps": steps, "step_sleep": step_sleep, "log_every": log_every, "nodes": 2,
                       "nproc_per_node": 2},
               "not_run": json.loads(UNAVAILABLE.read_text()) if UNAVAILABLE.exists() else {}}
    return rows, details


# Launchers tried on this machine that could not run the job here, with the measured reason
# (the failing command and its error), kept so the table and docs cite what was seen.
UNAVAILABLE = BENCH / "peers" / "unavailable.json"


def unavailable_rows():
    if not UNAVAILABLE.exists():
        return []
    return [row("2 answer, short job (peers)", f"{entry['launcher']}: not run here: {entry['reason']}", [], "s",
                note=entry) for entry in json.loads(UNAVAILABLE.read_text()).values()]


INSTALLERS = (("cuda_toolkit_runfile_checksum", "cuda_11.8.0_520.61.05_linux.run"),
              ("conda_installer_checksum", "Miniforge3-Linux-x86_64.sh"))


def counted_installers(cluster):
    """The counting wrappers of bench/standins, their paths filled in, with a copy of each
    project stand-in, in the cluster's state dir (which the NAS owner can read, unlike the
    checkout). Returns (their run log, the -e of their checksums)."""
    directory = cluster.state / "bench-standins"
    (directory / "real").mkdir(parents=True, exist_ok=True)
    directory.chmod(0o755)
    (directory / "real").chmod(0o755)
    log_path = directory / "installers.log"
    log_path.touch()
    log_path.chmod(0o666)  # the installers run as the NAS owner
    digest = {}
    for key, name in INSTALLERS:
        real = directory / "real" / name
        shutil.copyfile(REPO / "tests" / "standins" / name, real)
        real.chmod(0o755)
        text = (BENCH / "standins" / name).read_text().replace("@LOG@", str(log_path)).replace("@REAL@", str(real))
        (directory / name).write_text(text)
        (directory / name).chmod(0o755)
        digest[key] = "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    return log_path, json.dumps(digest)


class Provisioner:
    """provision.yml on a benchmark cluster, the NAS installers' runs counted."""

    def __init__(self, cluster, inventory):
        self.cluster, self.inventory = cluster, inventory
        self.installer_log, self.checksums = counted_installers(cluster)
        self.first = None
        # Whether the NAS had never been provisioned through the counted installers: then its
        # first provision.yml must run each installer once, and only then is that goal measured.
        self.fresh = None

    def run(self):
        before = len(self.installer_log.read_text().splitlines())
        run = playbook(self.inventory, "provision.yml", self.checksums)
        if run.rc != 0:
            raise RuntimeError(f"provision.yml on {self.inventory.name} failed:\n{run.tail(40)}")
        lines = self.installer_log.read_text().splitlines()[before:]
        run.installers = {kind: sum(1 for line in lines if line.startswith(kind + " ")) for kind in ("cuda", "miniforge")}
        return run

    def first_run(self):
        """The first provision.yml of this cluster (a no-op if its NAS was provisioned before)."""
        if self.first is None:
            self.fresh = not self.installer_log.read_text().strip()
            self.first = self.run()
            log(f"first provision.yml on {self.inventory.name}: {self.first.seconds:.1f} s, "
                f"installers ran {self.first.installers}")
        return self.first


def bench_provision(provisioners, reps):
    """Each cluster's first provision.yml, then `reps` no-change runs of each, alternating between
    the clusters (2, 4, 2, 4, ...): the ratio's two figures are taken in the same minutes, so that
    this machine's drift (shared cores; runs minutes apart differ by a quarter) falls on both alike."""
    rows, details, base = [], {}, None
    def changed(run):
        return sum(host.get("changed", 0) for host in run.recap().values())

    for _, prov in provisioners:
        prov.first_run()
    taken = {nodes: [] for nodes, _ in provisioners}
    for rep in range(reps):
        for nodes, prov in provisioners:
            run = prov.run()
            taken[nodes].append(run)
            log(f"second provision.yml on {nodes} nodes, {rep + 1}/{reps}: {run.seconds:.1f} s, "
                f"changed={changed(run)}")
    for nodes, prov in provisioners:
        first, runs = prov.first, taken[nodes]
        seconds, changed_counts = [run.seconds for run in runs], [changed(run) for run in runs]
        second = row("4 provision", f"second provision.yml, {nodes} nodes (changed={max(changed_counts)})", seconds,
                     "s")
        if base is None:
            base = second
        else:
            second["ratios"] = [against(second, base, "2 nodes")]
        runs_total = sum(first.installers.values()) + sum(sum(r.installers.values()) for r in runs)
        # Not whether the first run changed anything: a changed job template changes it on any NAS.
        fresh = prov.fresh
        installers = row("4 provision", f"NAS installer runs, {nodes}-node cluster, all {reps + 1} provisions "
                         f"(cuda {first.installers['cuda']}, miniforge {first.installers['miniforge']})",
                         [runs_total], "",
                         goal=verdict(runs_total == 2 if fresh else None, "once each per NAS"))
        rows += [second, installers]
        details[f"{nodes}_nodes"] = {"first_seconds": first.seconds, "first_installers": first.installers,
                                     "first_changed": first.recap(), "nas_was_fresh": fresh,
                                     "second_changed": changed_counts, "profile": profile(runs)}
    return rows, details


# ---------------------------------------------------------------------------------------------
# Rendering at scale: a generated inventory, Slurm played back by bench/fakeslurm.
# ---------------------------------------------------------------------------------------------

def scale_inventory(directory, count):
    """An inventory with `count` nodes in group bench_big, and what fake Slurm answers for them.
    The inventory has a folder of its own: Ansible reads every file of an inventory folder as an
    inventory source (fake Slurm's answers and the NAS beside it were read as INI inventories)."""
    inventory = directory / "inventory"
    inventory.mkdir(parents=True, exist_ok=True)
    names = [f"big{i:04d}" for i in range(1, count + 1)]
    nas = directory / "nas"
    (nas / "jobs").mkdir(parents=True, exist_ok=True)
    # The node group's NCCL env file, which launch.yml requires on the NAS (provision.yml writes it).
    (nas / "env").mkdir(exist_ok=True)
    (nas / "env" / "nccl-bench_big.sh").write_text("export NCCL_SOCKET_IFNAME==eth0\n")
    hosts = {"all": {"children": {
        "submit": {"hosts": {"localhost": {"ansible_connection": "local",
                                           "ansible_python_interpreter": "{{ ansible_playbook_python }}"}}},
        "compute": {"children": {"bench_big": {
            "hosts": {name: {"ansible_host": f"10.{90 + i // 65000}.{(i // 250) % 256}.{i % 250 + 1}"}
                      for i, name in enumerate(names)},
            "vars": {"cluster_node_gpus": 8, "cluster_node_cpus": 16}}}}}}}
    (inventory / "hosts.yml").write_text(json.dumps(hosts))
    (inventory / "group_vars").mkdir(exist_ok=True)
    (inventory / "group_vars" / "all.yml").write_text(json.dumps({
        "cluster_name": "benchbig", "cluster_nas_root": str(nas), "cluster_venv": str(REPO / ".venv")}))
    fake = directory / "fakeslurm"
    fake.mkdir(exist_ok=True)
    (fake / "sinfo.out").write_text("".join(f"{name}|bench_big|idle|16|gpu:8\n" for name in names))
    (fake / "squeue.out").write_text("")
    (fake / "sbatch-test-only.err").write_text(
        f"sbatch: Job 1 to start at 2030-01-01T00:00:00 using {16 * count} processors on nodes "
        f"big[0001-{count:04d}] in partition bench_big\n")
    return inventory, fake, names


def bench_render(reps):
    """launch.yml --check of each variant, the variants alternating in each round (2, 1,000, 1,000,
    2, ...) so that the ratios' figures share this machine's drift; the first round is a warm-up."""
    rows, details, runs_by = [], {}, {}
    variants = [("2 nodes, group=bench_big num_nodes=2", 2, ["group=bench_big", "num_nodes=2"]),
                ("1,000 nodes, group=bench_big num_nodes=1000", 1000, ["group=bench_big", "num_nodes=1000"]),
                ("1,000 nodes, nodes=big[0001-1000]", 1000, ["nodes=big[0001-1000]"])]
    taken = {label: [] for label, _, _ in variants}
    with tempfile.TemporaryDirectory(dir=RESULTS / "tmp") as tmp:
        made = {count: scale_inventory(Path(tmp) / f"nodes{count}", count) for count in (2, 1000)}
        envs = {count: {"PATH": f"{BENCH / 'fakeslurm'}{os.pathsep}{BIN}{os.pathsep}{os.environ['PATH']}",
                        "BENCH_FAKE_SLURM": str(fake)} for count, (_, fake, _) in made.items()}
        for rep in range(reps + 1):  # the first round is a warm-up
            for label, count, request in variants:
                inventory, env = made[count][0], envs[count]
                run = playbook(inventory, "launch.yml", f"script={TRAINER}", "nproc_per_node=2",
                               f"job_name={unique('bench-render')}", *request, check=True, env=env)
                if run.rc != 0:
                    raise RuntimeError(f"launch.yml --check ({label}) failed:\n{run.tail(40)}")
                if rep:
                    taken[label].append(run)
    base = None
    for label, _, _ in variants:
        seconds = [run.seconds for run in taken[label]]
        log(f"render {label}: median {benchlib.summary(seconds)['median']:.2f} s")
        result = row("5 render", f"launch.yml --check, {label}", seconds, "s")
        if base is None:
            base = result
        else:
            result["ratios"] = [against(result, base, "2 nodes")]
            grown = result["ratios"][0]["ratio"]
            result["goal"] = verdict(None if grown is None else grown <= 1.1, "<= 1.1x 2 nodes")
        rows.append(result)
        runs_by[label] = profile(taken[label])
    details["profiles"] = runs_by
    return rows, details


# ---------------------------------------------------------------------------------------------

def machine():
    cpu = ""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    # slurmctld -V needs no slurm.conf (sinfo -V does).
    slurm = subprocess.run(["slurmctld", "-V"], capture_output=True, text=True).stdout.strip()
    ansible = subprocess.run([str(BIN / "ansible-playbook"), "--version"], capture_output=True, text=True,
                             env=ansible_env()).stdout.splitlines()[:1]
    return {"cores": os.cpu_count(), "cpu": cpu, "kernel": platform.release(), "python": platform.python_version(),
            "slurm": slurm, "ansible": ansible[0] if ansible else "", "load_average_at_start": os.getloadavg()}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     epilog="make bench BENCH_ARGS='--only answer --reps 1 --long-seconds 0'")
    parser.add_argument("--only", default=",".join(FIGURES),
                        help=f"comma-separated figures to measure, of {', '.join(FIGURES)} (default all)")
    parser.add_argument("--reps", type=int, default=None,
                        help="repetitions of every short measurement (default: submission 5, answer 3, "
                             "peers 3, provision 3, render 3)")
    parser.add_argument("--long-reps", type=int, default=1, help="repetitions of the long job (default 1)")
    parser.add_argument("--long-seconds", type=int, default=300,
                        help="about how long the long job trains, in seconds; 0 skips it (default 300)")
    parser.add_argument("--short-steps", type=int, default=10,
                        help="steps of the short job, 0.25 s each: about 10 s in Slurm (default 10)")
    parser.add_argument("--keep-up", action="store_true", help="leave the benchmark clusters up afterwards")
    args = parser.parse_args(argv)
    args.only = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = set(args.only) - set(FIGURES)
    if unknown:
        parser.error(f"unknown figure(s) {', '.join(sorted(unknown))}; choose from {', '.join(FIGURES)}")
    return args


def main(argv=None):
    args = parse_args(argv)
    reps = {"submission": 5, "answer": 3, "peers": 3, "provision": 3, "render": 3, "scale": 3}
    if args.reps is not None:
        reps = dict.fromkeys(reps, args.reps)
    (RESULTS / "tmp").mkdir(parents=True, exist_ok=True)
    shutil.rmtree(RESULTS / "outputs", ignore_errors=True)
    started = time.time()
    result = {"date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "machine": machine(),
              "config": {**vars(args), "reps": reps}, "rows": [], "details": {}, "errors": []}
    clusters = []

    def measure(name, function, *fargs):
        # A failed figure is reported and the others still run: a benchmark prints, it does not fail.
        try:
            rows, details = function(*fargs)
            result["rows"] += rows
            result["details"][name] = details
        except Exception as error:  # noqa: BLE001 - reported in the table's output and JSON
            log(f"{name} could not be measured: {error}\n{traceback.format_exc()}")
            result["errors"].append({"figure": name, "error": str(error), "traceback": traceback.format_exc()})

    try:
        need_2 = {"submission", "answer", "peers", "provision"} & set(args.only)
        if need_2:
            bench2 = Cluster(INVENTORY_2, accounting=True).up()
            clusters.append(bench2)
            prov2 = Provisioner(bench2, INVENTORY_2)
            # Jobs activate the conda env provision.yml installs on the NAS.
            prov2.first_run()
        if "submission" in args.only:
            measure("submission", bench_submission, bench2, reps["submission"])
        if {"answer", "peers"} & set(args.only):
            probe = LoadProbe(bench2)
        if "answer" in args.only:
            measure("answer_short", bench_answer, bench2, probe, "short", reps["answer"], args.short_steps, 0.25, 5,
                    True)
            if args.long_seconds > 0 and args.long_reps > 0:
                measure("answer_long", bench_answer, bench2, probe, "long", args.long_reps, args.long_seconds, 1.0, 30)
        if "peers" in args.only:
            # The answer figure's short job, so the peers' rows sit beside launch.yml's and the hand loop's.
            measure("peers", bench_peers, bench2, probe, reps["peers"], args.short_steps, 0.25, 5)
        if "provision" in args.only:
            bench4 = Cluster(INVENTORY_4).up()
            clusters.append(bench4)
            measure("provision", bench_provision, [(2, prov2), (4, Provisioner(bench4, INVENTORY_4))],
                    reps["provision"])
            bench4.down(args.keep_up)
            clusters.remove(bench4)
        if "render" in args.only:
            measure("render", bench_render, reps["render"])
        if "scale" in args.only:
            # bench/scale.py: bench16 (16 nodes) provisioned and running a 16-rank job.
            measure("scale", scale.bench_scale, sys.modules[__name__], reps["scale"], args.keep_up)
    finally:
        for cluster in clusters:
            cluster.down(args.keep_up)
    result["seconds"] = time.time() - started
    result["machine"]["load_average_at_end"] = os.getloadavg()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    # latest.* is the last run of every figure (what docs/benchmarks.md reports); a run of some
    # (--only) is kept as latest-only.*, so that it does not hide the whole table.
    latest = "latest" if set(args.only) == set(FIGURES) else "latest-only"
    for path in (RESULTS / f"bench-{stamp}.json", RESULTS / f"{latest}.json"):
        path.write_text(json.dumps(result, indent=2, default=str) + "\n")
    (RESULTS / f"{latest}.md").write_text(benchlib.markdown_table(result["rows"]) + "\n")
    print()
    print(benchlib.text_table(result["rows"]))
    for error in result["errors"]:
        print(f"not measured: {error['figure']}: {error['error'].splitlines()[0]}")
    print(f"\n{len(result['rows'])} figures in {result['seconds'] / 60:.1f} min; JSON in "
          f"{(RESULTS / f'{latest}.json').relative_to(REPO)}, table in {(RESULTS / f'{latest}.md').relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
