#!/usr/bin/env python3
"""A preflight's checks of one node, run by Slurm as one task per node of a short job (srun), so
that it works where users cannot SSH to compute nodes (pam_slurm_adopt) or cannot reach them.

Each task looks at what a job on its node would use: the CUDA toolkit (nvcc), the training env
(activated as the job activates it, then `import torch`), on a GPU job the GPUs as the job's own
check sees them (gpu_check.py: driver, GPU count, torch's CUDA and NCCL), the node group's NCCL env file and
/etc/nccl.conf read as NCCL reads them, and the node's HCAs, GPUs and interfaces with the settings
provision.yml would propose for them (its detection, nccl_network_facts.py's site proposal, staged
beside this file, from the same inputs). Then every node listens on a
fresh port on the address NCCL's sockets would use and connects to every other one.

It judges nothing: it writes what it found as JSON, <results>/<node>.json, and the first node
gathers them all into <results>/all.json, which the submit host reads and reports.
Standard library only: it runs with the node's own python3.
"""

import argparse
import glob
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nccl_env  # noqa: E402  (plugins/filter/nccl_env.py, staged here)
import nccl_network_facts  # noqa: E402  (library/nccl_network_facts.py, staged here)
import gpu_check  # noqa: E402  (files/gpu_check.py, the job's own GPU check, staged here)

BARRIER_TIMEOUT = 120


def write_json(path, data):
    partial = f"{path}.partial"
    with open(partial, "w") as handle:
        json.dump(data, handle, indent=1, sort_keys=True)
    os.replace(partial, path)


def run(argv, timeout=120):
    """(rc, stdout, stderr) of a program; rc None when it could not start."""
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                              timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as error:
        return None, "", str(error)
    return proc.returncode, proc.stdout, proc.stderr


def check_cuda(cuda_home):
    if not cuda_home:
        return {"cuda": "", "cuda_error": ""}
    rc, out, err = run([os.path.join(cuda_home, "bin", "nvcc"), "--version"])
    found = re.search(r"release [0-9.]+", out)
    if rc == 0 and found:
        return {"cuda": found.group(0), "cuda_error": ""}
    return {"cuda": "", "cuda_error": (err or out).strip()[-200:] or f"exit {rc}"}


def check_python(config):
    """The job script's own activation, then the import every training needs."""
    if config["venv"]:
        activate, target = 'source "$1/bin/activate"', config["venv"]
    elif config["conda_env"]:
        activate = 'source "$1/etc/profile.d/conda.sh" && conda activate "$2"'
        target = config["conda_root"]
    else:
        return {"python": "", "python_error": ""}
    prefix = os.path.join(config["conda_root"], "envs", config["conda_env"]) if config["conda_env"] else ""
    code = 'import sys, torch; print(f"torch {torch.__version__} ({sys.executable})")'
    rc, out, err = run(["bash", "-c", f"{activate} && python -c '{code}'", "preflight", target, prefix])
    if rc == 0:
        return {"python": out.strip(), "python_error": ""}
    return {"python": "", "python_error": (err or out).strip()[-200:] or f"exit {rc}"}


def check_gpus(config):
    """What the job's GPU check finds (gpu_check.py --facts), with torch asked in the training env."""
    if not config.get("gpus_per_node"):
        return {}
    program = gpu_check.__file__
    if config["venv"]:
        activate, target = 'source "$1/bin/activate"', config["venv"]
    elif config["conda_env"]:
        activate, target = 'source "$1/etc/profile.d/conda.sh" && conda activate "$2"', config["conda_root"]
    else:
        activate, target = "true", ""
    prefix = os.path.join(config["conda_root"], "envs", config["conda_env"]) if config["conda_env"] else ""
    rc, out, err = run(["bash", "-c", f'{activate} && exec python "$3" --facts --cuda-home "$4"', "preflight",
                        target, prefix, program, config["cuda_home"]])
    if rc == 0:
        try:
            return json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            pass
    drivers, driver_error = gpu_check.driver_versions()
    return {"drivers": drivers, "driver_error": driver_error, "cuda_home": config["cuda_home"], "toolkit": None,
            "toolkit_error": "", "torch_error": (err or out).strip()[-200:] or f"exit {rc}"}


def read_settings(path):
    try:
        with open(path) as handle:
            return nccl_env.nccl_env_read(handle.read())
    except OSError:
        return None


def ipv4_addresses():
    """{interface: [addresses]} from iproute2, as Ansible's gathered facts give them to provision."""
    rc, out, _ = run(["ip", "-j", "-4", "addr", "show"])
    if rc != 0:
        return None
    return {link["ifname"]: [a["local"] for a in link.get("addr_info", []) if a.get("local")]
            for link in json.loads(out or "[]")}


def env_prefix(config):
    """The training env's prefix, as provision.yml's nccl_env role reads NCCL's version from it."""
    if config["venv"]:
        return config["venv"]
    return os.path.join(config["conda_root"], "envs", config["conda_env"]) if config["conda_env"] else ""


def detect_network(config, node, torch_nccl=""):
    """What provision.yml's nccl_env role detects on this node (nccl_network_facts' site
    proposal, from the same inputs: the node's cluster address, the cluster network, NCCL's
    version), in the shape of its `nccl_network` facts, so both judge a node alike."""
    addresses = ipv4_addresses()
    if addresses is not None:
        addresses.update(config["ipv4_overrides"])
    warnings = []
    if addresses is None:
        warnings.append("ip -j addr show failed: the interfaces' IPv4 addresses are unknown")
    try:
        cluster_address = nccl_network_facts.resolve_cluster_address((config.get("cluster_addresses") or {}).get(node))
    except ValueError as error:
        cluster_address = None
        warnings.append(str(error))
    # As provision asks the env's torch (torch_nccl: gpu_check's answer on a GPU job), then its files.
    nccl_version = (config.get("nccl_version") or torch_nccl
                    or nccl_network_facts.nccl_version_from_env(env_prefix(config)) or None)
    hcas = nccl_network_facts.read_hcas(config["sysfs_root"])
    gpus = nccl_network_facts.read_gpus(config["sysfs_root"])
    interfaces = nccl_network_facts.read_interfaces(config["sysfs_root"], addresses or {})
    proposed, site_warnings, reasons, faults = nccl_network_facts.propose_site_settings(
        hcas, gpus, interfaces, config["exclude_interfaces"], config["prefer_gid_type"],
        cluster_address, config.get("cluster_cidr") or None, nccl_version)
    try:
        with open(config.get("nccl_conf") or "") as handle:
            kept = nccl_network_facts.kept_conf_keys(handle.read(), [])
    except OSError:
        kept = {}
    return {"hcas": hcas, "gpus": gpus, "interfaces": interfaces, "nccl_version": nccl_version,
            "proposed": proposed, "reasons": reasons, "faults": faults, "kept": kept,
            "warnings": warnings + site_warnings}


def user_conf_path(environ):
    """The file NCCL reads before /etc/nccl.conf (src/misc/param.cc, initEnvFunc): $NCCL_CONF_FILE
    where set and not empty, else ~/.nccl.conf."""
    if environ.get("NCCL_CONF_FILE"):
        return environ["NCCL_CONF_FILE"]
    return os.path.join(environ["HOME"], ".nccl.conf") if environ.get("HOME") else ""


def job_settings(conf, user_conf, env_file):
    """What NCCL in the job reads: each file only fills in what is not set yet (setenv without
    overwrite), so the env file (the job's environment) wins, then the user's file, then nccl.conf."""
    return {**(conf or {}), **(user_conf or {}), **(env_file or {})}


def wait_for_files(pattern, count, timeout):
    deadline = time.monotonic() + timeout
    while len(glob.glob(pattern)) < count and time.monotonic() < deadline:
        time.sleep(0.1)
    return sorted(glob.glob(pattern))


def serve(listener):
    while True:
        try:
            connection, _ = listener.accept()
        except OSError:
            return
        connection.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="the preflight's settings (JSON)")
    parser.add_argument("--results", required=True, help="directory every node writes its findings to")
    args = parser.parse_args()
    with open(args.config) as handle:
        config = json.load(handle)
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    nodes = int(os.environ.get("SLURM_JOB_NUM_NODES", "1"))
    os.makedirs(args.results, exist_ok=True)

    found = {"node": node}
    found.update(check_cuda(config["cuda_home"]))
    found.update(check_python(config))
    found["gpu"] = check_gpus(config)
    conf = read_settings(config["nccl_conf"])
    env_file = read_settings(config["nccl_env_file"]) if config["nccl_env_file"] else {}
    found["nccl_env_file_found"] = env_file is not None
    found["conf"] = conf
    user_path = user_conf_path(dict(os.environ, **({"NCCL_CONF_FILE": env_file["NCCL_CONF_FILE"]}
                                                   if (env_file or {}).get("NCCL_CONF_FILE") else {})))
    user_conf = read_settings(user_path) if user_path else None
    found["user_conf"] = {"path": user_path, "settings": user_conf} if user_conf is not None else None
    found["job"] = job_settings(conf, user_conf, env_file)
    found["network"] = detect_network(config, node, (found["gpu"] or {}).get("nccl") or "")
    interface, address = nccl_env.nccl_env_socket_interface(found["job"], found["network"])
    # The interface as `ip addr` names it, and the setting as nccl.conf spells it (=eth0).
    found["interface"] = interface or ""
    found["socket_ifname"] = found["job"].get("NCCL_SOCKET_IFNAME", "")
    found["address"] = address or socket.gethostbyname(node)

    # A fresh port the system picks, on the address the job's sockets would use.
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind((found["address"], 0))
    listener.listen(64)
    threading.Thread(target=serve, args=(listener,), daemon=True).start()
    write_json(os.path.join(args.results, f"{node}.addr"),
               {"node": node, "address": found["address"], "port": listener.getsockname()[1]})
    peers = [json.load(open(path)) for path in wait_for_files(os.path.join(args.results, "*.addr"), nodes,
                                                              BARRIER_TIMEOUT)]
    found["reach"] = {}
    for peer in peers:
        if peer["node"] == node:
            continue
        try:
            socket.create_connection((peer["address"], peer["port"]), timeout=config["connect_timeout"]).close()
            found["reach"][peer["node"]] = ""
        except OSError as error:
            found["reach"][peer["node"]] = f"{peer['address']}:{peer['port']}: {error}"
    found["peers_seen"] = len(peers)
    write_json(os.path.join(args.results, f"{node}.json"), found)
    # Keep listening until every node has tried every other.
    results = wait_for_files(os.path.join(args.results, "*.json"), nodes, BARRIER_TIMEOUT)
    if os.environ.get("SLURM_NODEID", "0") == "0":
        results = [json.load(open(path)) for path in results if not path.endswith("all.json")]
        write_json(os.path.join(args.results, "all.json"), {"nodes": nodes, "results": results})
    listener.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
