"""Figure 6, scale (issue 13): a 16-node local cluster, provisioned and running a 16-rank job.

bench/inventory/bench16 (16 compute nodes of 1 CPU, 10.96.0.0/24) is brought up unless it is up;
the first provision.yml installs, then `reps` more must change nothing: their median against
the 2-node no-change provision.yml on bench2, whose runs alternate with them (figure 4's own
helper), so that both figures are taken in the same minutes. Then launch.yml of a 16-node job, one rank
per node (16 gloo ranks of examples/train_ddp.py, a few steps), followed to its end. Memory and
load are sampled all along: 16 slurmd, 16 sshd and 16 ranks share this machine's cores.

Called from bench/run.py (`--only scale`) with run.py's own helpers (`bench`: the module), so
that this figure times and profiles runs exactly as the others do.
"""

import json
import os
import re
import threading
import time
from pathlib import Path

import benchlib

BENCH = Path(__file__).resolve().parent
INVENTORY_16 = BENCH / "inventory" / "bench16"
NODE_COUNT = 16
NODES_16 = ",".join(f"b16-n{i}" for i in range(1, NODE_COUNT + 1))
FIGURE = "6 scale"
PROVISION_GOAL = 1.5  # no-change provision.yml on 16 nodes within 1.5x of 2 nodes


class Sampler(threading.Thread):
    """This machine's available memory and load average, every second, while a phase runs."""

    def __init__(self):
        super().__init__(daemon=True)
        self.samples = []
        self.done = threading.Event()

    @staticmethod
    def snapshot():
        meminfo = {}
        for line in Path("/proc/meminfo").read_text().splitlines():
            key, _, value = line.partition(":")
            meminfo[key] = int(value.split()[0])
        return {"t": time.time(), "mem_available_mb": meminfo.get("MemAvailable", 0) // 1024,
                "mem_total_mb": meminfo.get("MemTotal", 0) // 1024, "load1": os.getloadavg()[0]}

    def run(self):
        while not self.done.is_set():
            self.samples.append(self.snapshot())
            self.done.wait(1.0)

    def stop(self):
        self.done.set()
        self.join(timeout=5)
        if not self.samples:
            return {}
        available = [s["mem_available_mb"] for s in self.samples]
        load = [s["load1"] for s in self.samples]
        return {"seconds": round(self.samples[-1]["t"] - self.samples[0]["t"], 1),
                "mem_total_mb": self.samples[0]["mem_total_mb"],
                "mem_available_mb_start": available[0], "mem_available_mb_min": min(available),
                "mem_used_mb_peak_over_start": available[0] - min(available),
                "load1_max": max(load), "load1_end": load[-1]}


def watched(what, function, *args):
    sampler = Sampler()
    sampler.start()
    try:
        value = function(*args)
    finally:
        usage = sampler.stop()
    return value, usage


def training_log_facts(outputs):
    """From the collected log: the world size the ranks saw, how many hosts ran a rank, the
    allreduce check and the training's last line."""
    logs = sorted(outputs.glob("*.out")) if outputs else []
    text = "\n".join(path.read_text(errors="replace") for path in logs)
    world = sorted({int(w) for w in re.findall(r"world_size=(\d+)", text)})
    hosts = sorted(set(re.findall(r"rank=\d+ local_rank=\d+ host=(\S+)", text)))
    return {"log": [str(p) for p in logs], "world_size": world, "rank_hosts": len(hosts),
            "allreduce_ok": "allreduce_check" in text and "FAILED" not in text,
            "training_complete": "training complete" in text}


def bench_scale(bench, reps, keep_up, steps=5):
    rows, details = [], {"nodes": NODE_COUNT, "inventory": str(INVENTORY_16.relative_to(bench.REPO))}
    clusters = []
    try:
        cluster16 = bench.Cluster(INVENTORY_16)
        started = time.time()
        _, usage = watched("up", cluster16.up)
        clusters.append(cluster16)
        details["up"] = {"brought_up": cluster16.brought_up, "seconds": round(time.time() - started, 1), "usage": usage}
        if cluster16.brought_up:
            rows.append(bench.row(FIGURE, f"bin/local-cluster up, {NODE_COUNT} nodes of 1 CPU",
                                  [time.time() - started], "s"))
        bench.log(f"bench16: {'brought up' if cluster16.brought_up else 'already up'}; usage {usage}")

        # Provisioning: the 2-node baseline measured here, its no-change runs alternating with the
        # 16-node ones (figure 4's helper), so that the ratio's two figures share this machine's drift.
        prov16 = bench.Provisioner(cluster16, INVENTORY_16)
        cluster2 = bench.Cluster(bench.INVENTORY_2, accounting=True).up()
        clusters.append(cluster2)
        provisioners = [(2, bench.Provisioner(cluster2, bench.INVENTORY_2)), (NODE_COUNT, prov16)]
        details["baseline"] = "bench2, its no-change runs alternating with bench16's"
        (prov_rows, prov_details), usage = watched("provision", bench.bench_provision, provisioners, reps)
        details["provision"] = {**prov_details, "usage": usage}
        for prov_row in prov_rows:
            prov_row["figure"] = FIGURE
        second16 = next(r for r in prov_rows if r["measured"].startswith(f"second provision.yml, {NODE_COUNT} nodes"))
        base = next(r for r in prov_rows if r["measured"].startswith("second provision.yml, 2 nodes"))
        second16["ratios"] = [bench.against(second16, base, "2 nodes")]
        ratio = second16["ratios"][0]["ratio"]
        second16["goal"] = bench.verdict(None if ratio is None else ratio <= PROVISION_GOAL, f"<= {PROVISION_GOAL}x 2 nodes")
        details["provision"]["first_16_seconds"] = prov16.first.seconds if prov16.first else None
        rows += prov_rows
        bench.log(f"no-change provision.yml: {NODE_COUNT} nodes {second16['median']:.1f} s, 2 nodes "
                  f"{base['median']:.1f} s ({ratio}x); usage {usage}")

        # The 16-rank job: one gloo rank on each node.
        name = bench.unique("bench-scale")
        outputs_dir = bench.RESULTS / "outputs"
        script_args = json.dumps({"script_args": f"--steps {steps} --step-sleep 0.25 --log-every {steps}"})
        launch, usage = watched("job", bench.playbook, INVENTORY_16, "launch.yml", f"nodes={NODES_16}",
                                f"script={bench.TRAINER}", "nproc_per_node=1", f"job_name={name}",
                                f"slurm_launch_outputs_dir={outputs_dir}", script_args)
        job_json = next(iter(sorted(outputs_dir.glob(f"{name}-*/job.json"))), None)
        job = json.loads(job_json.read_text()) if job_json else {}
        facts = training_log_facts(job_json.parent if job_json else None)
        state, exit_code = job.get("state"), job.get("exit_code")
        bench.log(f"16-rank job {job.get('job_id') or bench.job_id_of(launch)}: launch rc {launch.rc}, {state}, "
                  f"exit {exit_code}, {launch.seconds:.1f} s (Slurm elapsed {job.get('elapsed_seconds')} s); "
                  f"log {facts}; usage {usage}")
        ok = launch.rc == 0 and state == "COMPLETED" and exit_code in (0, "0", "0:0")
        label = f"{NODE_COUNT} nodes x 1 rank ({state or 'no record'}, exit code {exit_code}"
        label += f", world_size {','.join(map(str, facts['world_size'])) or '?'} on {facts['rank_hosts']} hosts)"
        rows.append(bench.row(FIGURE, f"launch.yml wall time, submission to answer, {label}", [launch.seconds], "s",
                              goal=bench.verdict(ok, "COMPLETED")))
        if job.get("elapsed_seconds") is not None:
            rows.append(bench.row(FIGURE, f"job's elapsed time in Slurm, {NODE_COUNT} nodes x 1 rank",
                                  [job["elapsed_seconds"]], "s"))
        details["job"] = {"name": name, "record": job, "launch_rc": launch.rc, "launch_seconds": launch.seconds,
                          "steps": steps, "nproc_per_node": 1, "log": facts, "usage": usage,
                          "launch_profile": bench.profile([launch]),
                          "output_tail": launch.tail(40) if launch.rc != 0 else None}
        if launch.rc != 0:
            # The rows say it (goal missed); the launch's own output is in the details.
            bench.log(f"launch.yml of the 16-rank job failed:\n{launch.tail(40)}")
    finally:
        for cluster in clusters:
            cluster.down(keep_up)
    return rows, details
