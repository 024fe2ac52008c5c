"""Detect InfiniBand/RoCE HCAs and network interfaces and propose NCCL settings."""

DOCUMENTATION = r"""
---
module: nccl_network_facts
short_description: Detect InfiniBand/RoCE HCAs and network interfaces and propose NCCL settings
description:
  - Reads RDMA devices from C(<sysfs_root>/class/infiniband) and network interfaces from
    C(<sysfs_root>/class/net) and returns them as the fact C(nccl_network).
  - Reads NVIDIA GPUs from C(<sysfs_root>/bus/pci/devices) and the PCI path of every device, to
    tell the compute fabric (HCAs sharing a PCIe switch with a GPU) from storage and in-band ports.
  - Proposes values for C(NCCL_IB_DISABLE), C(NCCL_IB_HCA) (the compute fabric's ports of one link
    layer, exact with C(=); unset where the topology cannot tell), C(NCCL_IB_GID_INDEX) (only for
    NCCL before 2.21) and C(NCCL_SOCKET_IFNAME) (the one interface holding O(cluster_address)),
    with the reason for each in C(nccl_network.reasons). Problems that make a proposal doubtful are
    listed in C(nccl_network.warnings), faults of the node's own hardware (a compute rail down) in
    C(nccl_network.faults); both are raised as module warnings.
  - The module only reads; it never reports a change.
options:
  sysfs_root:
    description:
      - Where sysfs is mounted. Tests point this at recorded trees.
    type: path
    default: /sys
  exclude_interfaces:
    description:
      - Interface names or C(fnmatch) globs never proposed for C(NCCL_SOCKET_IFNAME).
      - Setting this replaces the default list.
      - Loopback is never proposed, whether it is listed here or not.
    type: list
    elements: str
    default: ['lo', 'docker*', 'veth*', 'virbr*', 'br-*']
  prefer_gid_type:
    description:
      - RoCE GID type that C(NCCL_IB_GID_INDEX) should point at.
    type: str
    choices: ['RoCE v2', 'IB/RoCE v1']
    default: RoCE v2
  ipv4_addresses:
    description:
      - IPv4 addresses per interface name (sysfs does not hold addresses); with O(detect_ipv4), they
        replace the detected ones of the interfaces they name.
      - C(NCCL_SOCKET_IFNAME) is proposed from these addresses only (the interface holding
        O(cluster_address), or one in O(cluster_cidr)); where none holds it, it is left unset and a
        warning says so.
    type: dict
  detect_ipv4:
    description:
      - Read the node's IPv4 addresses from C(ip -o -4 addr show) (iproute2), the primary address of
        each interface first, as fact gathering's network subset would give them, without its
        round trip. Where C(ip) is missing or fails, a warning says so and only O(ipv4_addresses) count.
    type: bool
    default: false
  cluster_address:
    description:
      - The node's IPv4 address on the cluster network, or a host name the node resolves to it
        (what the other nodes reach it by, as C(ansible_host)). The interface holding it is proposed
        as C(NCCL_SOCKET_IFNAME).
    type: str
    default: ""
  cluster_cidr:
    description:
      - The cluster network, as C(10.77.0.0/24). When no interface holds O(cluster_address), the one
        interface with an address in it is proposed. Link-local addresses (169.254/16) never count.
    type: str
    default: ""
  nccl_version:
    description:
      - NCCL version of the training env. From 2.21 on NCCL detects each port's GID (its
        C(NCCL_IB_GID_INDEX) default is -1), so none is proposed.
      - Empty asks the torch of O(env_prefix) (C(torch.cuda.nccl.version()), the NCCL it loads, which a
        static build links in), where the node has RoCE ports (the only use of the version), else reads
        it from O(env_prefix)'s files; unknown proposes the index as older NCCL needs it.
    type: str
    default: ""
  env_prefix:
    description:
      - The training env (conda env or venv) whose C(conda-meta/nccl-*.json) or
        C(nvidia_nccl_cu*-*.dist-info) gives the NCCL version when O(nccl_version) is empty.
    type: path
    default: ""
  conf_path:
    description:
      - The node's NCCL configuration file (C(/etc/nccl.conf)). The keys of the one found there that
        O(role_keys) does not name are returned in C(nccl_network.kept) and said in a warning, to be
        written back (an Azure HPC image's C(NCCL_TOPO_FILE), for one). In a file this role wrote,
        only the keys it kept before count.
      - Empty reads none.
    type: path
    default: ""
  role_keys:
    description:
      - The keys the role sets itself besides the detected ones (its base settings and the inventory's).
    type: list
    elements: str
    default: []
  overrides:
    description:
      - The inventory's settings for this node, checked against its HCAs and interfaces as NCCL
        parses them; what NCCL would read otherwise than meant is said in a warning.
    type: dict
    default: {}
author:
  - ansible-slurm-train maintainers
notes:
  - Supports check mode; the module only reads sysfs.
  - C(NCCL_IB_HCA) and C(NCCL_SOCKET_IFNAME) are prefix matches in NCCL (C(mlx5_1) also matches
    C(mlx5_10)); the proposals carry C(=) for exact matching.
"""

EXAMPLES = r"""
- name: Detect HCAs, interfaces and their IPv4 addresses and propose NCCL settings
  nccl_network_facts:
    detect_ipv4: true

- name: Prefer RoCE v1 GIDs and keep management NICs out of NCCL_SOCKET_IFNAME
  nccl_network_facts:
    prefer_gid_type: IB/RoCE v1
    exclude_interfaces: ['lo', 'docker*', 'veth*', 'virbr*', 'br-*', 'eno*']
    ipv4_addresses:
      ens1f0: ['10.10.0.11']
      ens1f1: ['10.10.1.11']

- name: Propose settings for the cluster network the nodes reach each other on
  nccl_network_facts:
    ipv4_addresses: "{{ nccl_ipv4_addresses | default({}) }}"
    cluster_address: "{{ ansible_host }}"
    env_prefix: /nas/anaconda3/envs/train

- name: Show the proposal
  ansible.builtin.debug:
    var: ansible_facts.nccl_network.proposed
"""

RETURN = r"""
ansible_facts:
  description: Facts about the RDMA devices and interfaces of the host.
  returned: always
  type: dict
  sample: {"nccl_network": {"hcas": [], "gpus": [], "interfaces": [], "proposed": {"NCCL_IB_DISABLE": "1"},
           "reasons": {}, "faults": [], "nccl_version": null, "warnings": []}}
  contains:
    nccl_network:
      description: What was detected and the NCCL settings proposed from it.
      returned: always
      type: dict
      sample: {"hcas": [], "interfaces": [], "proposed": {"NCCL_IB_DISABLE": "1"}, "warnings": []}
      contains:
        hcas:
          description: RDMA devices found under C(class/infiniband), sorted by name; empty when there are none.
          returned: always
          type: list
          elements: dict
          sample: [{"name": "mlx5_0", "node_guid": "0c42:a103:008b:6f5c", "fw_ver": "20.39.1002",
                    "board_id": "MT_0000000223", "ports": []}]
          contains:
            name:
              description: Device name.
              returned: always
              type: str
              sample: mlx5_0
            node_guid:
              description: Node GUID, or null when sysfs does not have it.
              returned: always
              type: str
              sample: "0c42:a103:008b:6f5c"
            fw_ver:
              description: Firmware version, or null when sysfs does not have it.
              returned: always
              type: str
              sample: "20.39.1002"
            board_id:
              description: Board (PSID) identifier, or null when sysfs does not have it.
              returned: always
              type: str
              sample: MT_0000000223
            pci_path:
              description: PCI functions from the root port down to the device; empty when unreadable.
              returned: always
              type: list
              elements: str
              sample: ["0000:15:01.0", "0000:16:00.0", "0000:17:00.0", "0000:18:00.0"]
            numa_node:
              description: NUMA node of the device, or null when sysfs does not have it.
              returned: always
              type: int
              sample: 0
            ports:
              description: Ports of the device, sorted by port number.
              returned: always
              type: list
              elements: dict
              sample: [{"port": 1, "state": "ACTIVE", "active": true, "link_layer": "InfiniBand",
                        "rate": "100 Gb/sec (4X EDR)", "gids": []}]
              contains:
                port:
                  description: Port number.
                  returned: always
                  type: int
                  sample: 1
                state:
                  description: Port state name without its numeric prefix, or null when unreadable.
                  returned: always
                  type: str
                  sample: ACTIVE
                active:
                  description: Whether the port state is C(ACTIVE).
                  returned: always
                  type: bool
                  sample: true
                link_layer:
                  description: C(InfiniBand) or C(Ethernet) (RoCE).
                  returned: always
                  type: str
                  sample: Ethernet
                rate:
                  description: Link rate as sysfs reports it.
                  returned: always
                  type: str
                  sample: 100 Gb/sec (4X EDR)
                gids:
                  description: Populated (non-zero) GID table entries, sorted by index.
                  returned: always
                  type: list
                  elements: dict
                  sample: [{"index": 3, "gid": "0000:0000:0000:0000:0000:ffff:0a0a:000b",
                            "type": "RoCE v2", "ndev": "ens1f0"}]
                  contains:
                    index:
                      description: GID table index, the value C(NCCL_IB_GID_INDEX) takes.
                      returned: always
                      type: int
                      sample: 3
                    gid:
                      description: The GID.
                      returned: always
                      type: str
                      sample: "0000:0000:0000:0000:0000:ffff:0a0a:000b"
                    type:
                      description: C(IB/RoCE v1) or C(RoCE v2); null when unreadable.
                      returned: always
                      type: str
                      sample: RoCE v2
                    ndev:
                      description: Network device the RoCE GID belongs to; null for InfiniBand.
                      returned: always
                      type: str
                      sample: ens1f0
        gpus:
          description: NVIDIA GPUs (PCI class 0x0302 or 0x0300, vendor 0x10de) under C(bus/pci/devices).
          returned: always
          type: list
          elements: dict
          sample: [{"pci_address": "0000:1b:00.0", "pci_path": ["0000:15:01.0", "0000:16:00.0",
                    "0000:17:01.0", "0000:1b:00.0"], "numa_node": 0}]
          contains:
            pci_address:
              description: PCI address.
              returned: always
              type: str
              sample: "0000:1b:00.0"
            pci_path:
              description: PCI functions from the root port down to the GPU.
              returned: always
              type: list
              elements: str
              sample: ["0000:15:01.0", "0000:16:00.0", "0000:17:01.0", "0000:1b:00.0"]
            numa_node:
              description: NUMA node, or null when sysfs does not have it.
              returned: always
              type: int
              sample: 0
        nccl_version:
          description: NCCL version from O(nccl_version) or O(env_prefix); null when unknown.
          returned: always
          type: str
          sample: "2.21.5"
        reasons:
          description: Why each of C(NCCL_IB_HCA), C(NCCL_IB_GID_INDEX), C(NCCL_SOCKET_IFNAME) is set or left unset.
          returned: always
          type: dict
          sample: {"NCCL_IB_HCA": "no NVIDIA GPU under bus/pci/devices, so the compute fabric cannot be told from storage and in-band ports; NCCL_IB_HCA left unset (NCCL chooses)"}
        faults:
          description: Faults of the node's own hardware, such as a compute rail whose port is not active.
          returned: always
          type: list
          elements: str
          sample: ["mlx5_5:1 is a compute rail (its HCA shares a PCIe switch with a GPU) but its port is DOWN, not ACTIVE"]
        interfaces:
          description: Network interfaces found under C(class/net), sorted by name.
          returned: always
          type: list
          elements: dict
          sample: [{"name": "eth0", "operstate": "up", "type": 1, "virtual": false, "mtu": 1500,
                    "address": "52:54:00:12:34:56", "ipv4": ["10.0.0.5"]}]
          contains:
            name:
              description: Interface name.
              returned: always
              type: str
              sample: eth0
            operstate:
              description: Operational state (C(up), C(down), C(unknown), ...), or null when unreadable.
              returned: always
              type: str
              sample: up
            type:
              description: ARPHRD hardware type; 1 Ethernet, 32 InfiniBand (IPoIB), 772 loopback.
              returned: always
              type: int
              sample: 1
            virtual:
              description:
                - Whether the kernel lists the interface under C(devices/virtual).
                - Null when C(class/net/<name>) is not a symlink, so it cannot be told.
              returned: always
              type: bool
              sample: false
            mtu:
              description: MTU in bytes, or null when unreadable.
              returned: always
              type: int
              sample: 1500
            address:
              description: Hardware address, or null when unreadable.
              returned: always
              type: str
              sample: "52:54:00:12:34:56"
            ipv4:
              description: IPv4 addresses passed in O(ipv4_addresses) for this interface.
              returned: always
              type: list
              elements: str
              sample: ["10.0.0.5"]
        proposed:
          description: Proposed NCCL environment variables; keys without a sound value are left out.
          returned: always
          type: dict
          sample: {"NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": "=mlx5_0:1,mlx5_3:1", "NCCL_SOCKET_IFNAME": "=eth0"}
          contains:
            NCCL_IB_DISABLE:
              description: C(0) when at least one IB/RoCE port is active, C(1) (sockets only) otherwise.
              returned: always
              type: str
              sample: "0"
            NCCL_IB_HCA:
              description: C(=) and the comma-separated C(hca:port) of the compute fabric's active ports.
              returned: when GPUs and the PCI topology show HCAs sharing a PCIe switch with them, one port active
              type: str
              sample: =mlx5_0:1,mlx5_3:1
            NCCL_IB_GID_INDEX:
              description:
                - GID index of type O(prefer_gid_type) on the active RoCE ports, IPv4-mapped GIDs first.
                - When the ports disagree, the index most of them share (lowest on a tie), with a warning.
              returned: for NCCL before 2.21 (or of unknown version) when the RoCE ports share one GID index of type O(prefer_gid_type)
              type: str
              sample: "3"
            NCCL_SOCKET_IFNAME:
              description: C(=) and the one interface that is up, not excluded, and holds O(cluster_address) (or an address in O(cluster_cidr)).
              returned: when one interface qualifies
              type: str
              sample: =eth0
        kept:
          description: Keys of the O(conf_path) found on the node that the role does not set, and their values.
          returned: always
          type: dict
          sample: {"NCCL_TOPO_FILE": "/opt/microsoft/ndv5/topo.xml"}
        warnings:
          description: Reasons to doubt the proposal.
          returned: always
          type: list
          elements: str
          sample: ["NCCL_SOCKET_IFNAME left unset: no interface that is up holds the address 10.77.0.110."]
"""

import fnmatch
import glob
import ipaddress
import json
import os
import re
import socket
from collections import Counter


DEFAULT_EXCLUDE_INTERFACES = ["lo", "docker*", "veth*", "virbr*", "br-*"]
ARPHRD_LOOPBACK = 772
ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
IPV4_MAPPED_GID_PREFIX = "0000:0000:0000:0000:0000:ffff:"
NVIDIA_VENDOR = "0x10de"
# PCI class codes: 0x0302 3D controller (data-center GPUs: H100, A100), 0x0300 VGA.
GPU_CLASS_PREFIXES = ("0x0302", "0x0300")
PCI_ADDRESS_RE = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def read_sysfs_value(path):
    """Stripped content of a sysfs attribute; None when missing, unreadable or empty.

    The kernel answers EINVAL when reading the type or ndev of an unused GID, so an
    OSError here means "no value", not a failure.
    """
    try:
        with open(path, encoding="ascii", errors="replace") as attribute:
            value = attribute.read().strip()
    except OSError:
        return None
    return value or None


def read_sysfs_int(path):
    value = read_sysfs_value(path)
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def numeric_entries(directory):
    """Sorted integer entries of a directory (ports, GID indexes); empty when it is missing."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return sorted(int(name) for name in names if name.isdigit())


def sorted_entries(directory):
    try:
        return sorted(os.listdir(directory))
    except OSError:
        return []


def natural_key(name):
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def parse_port_state(raw_state):
    """'4: ACTIVE' -> 'ACTIVE'."""
    if raw_state is None:
        return None
    return raw_state.partition(":")[2].strip() or raw_state


def is_ipv4_mapped_gid(gid):
    return gid.startswith(IPV4_MAPPED_GID_PREFIX)


def read_gids(port_dir):
    gids = []
    for index in numeric_entries(os.path.join(port_dir, "gids")):
        gid = read_sysfs_value(os.path.join(port_dir, "gids", str(index)))
        if gid is None or gid == ZERO_GID:
            continue
        gids.append(
            {
                "index": index,
                "gid": gid,
                "type": read_sysfs_value(
                    os.path.join(port_dir, "gid_attrs", "types", str(index))
                ),
                "ndev": read_sysfs_value(
                    os.path.join(port_dir, "gid_attrs", "ndevs", str(index))
                ),
            }
        )
    return gids


def read_port(port_dir, port):
    state = parse_port_state(read_sysfs_value(os.path.join(port_dir, "state")))
    return {
        "port": port,
        "state": state,
        "active": state == "ACTIVE",
        "link_layer": read_sysfs_value(os.path.join(port_dir, "link_layer")),
        "rate": read_sysfs_value(os.path.join(port_dir, "rate")),
        "gids": read_gids(port_dir),
    }


def read_hcas(sysfs_root):
    hcas = []
    infiniband_dir = os.path.join(sysfs_root, "class", "infiniband")
    # Natural order (mlx5_9 before mlx5_10), as the vendor's port tables list them.
    for name in sorted(sorted_entries(infiniband_dir), key=natural_key):
        hca_dir = os.path.join(infiniband_dir, name)
        ports_dir = os.path.join(hca_dir, "ports")
        hcas.append(
            {
                "name": name,
                "node_guid": read_sysfs_value(os.path.join(hca_dir, "node_guid")),
                "fw_ver": read_sysfs_value(os.path.join(hca_dir, "fw_ver")),
                "board_id": read_sysfs_value(os.path.join(hca_dir, "board_id")),
                "pci_path": read_pci_path(sysfs_root, os.path.join(hca_dir, "device")),
                "numa_node": read_sysfs_int(os.path.join(hca_dir, "device", "numa_node")),
                # An SR-IOV virtual function links its physical function as device/physfn.
                "virtual_function": os.path.exists(os.path.join(hca_dir, "device", "physfn")),
                "netdevs": sorted_entries(os.path.join(hca_dir, "device", "net")),
                "ports": [
                    read_port(os.path.join(ports_dir, str(port)), port)
                    for port in numeric_entries(ports_dir)
                ],
            }
        )
    return hcas


def is_virtual_interface(sysfs_root, name):
    """Whether class/net/<name> links into devices/virtual; None when it is no link to tell by."""
    class_entry = os.path.join(sysfs_root, "class", "net", name)
    if not os.path.islink(class_entry):
        return None
    virtual_root = os.path.realpath(os.path.join(sysfs_root, "devices", "virtual"))
    device = os.path.realpath(class_entry)
    return os.path.commonpath([device, virtual_root]) == virtual_root


def parse_ip_ipv4(stdout):
    """{interface: [IPv4 addresses]} from `ip -o -4 addr show`, one address a line, each interface's
    primary address first (ip lists them so), as fact gathering gives them."""
    found = {}
    for line in stdout.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] == "inet":
            # "eth0@if5": a veth names its peer after '@'.
            found.setdefault(fields[1].split("@")[0], []).append(fields[3].split("/")[0])
    return found


def detect_ipv4_addresses(module):
    """The node's IPv4 addresses per interface (parse_ip_ipv4), and a warning ('' for none)."""
    ip = module.get_bin_path("ip")
    if ip is None:
        return {}, "ip (iproute2) not found: the node's IPv4 addresses were not detected."
    rc, out, err = module.run_command([ip, "-o", "-4", "addr", "show"], environ_update={"LC_ALL": "C"})
    if rc != 0:
        return {}, f"ip -o -4 addr show failed ({err.strip() or 'exit ' + str(rc)}): the node's IPv4 addresses " \
                   "were not detected."
    return parse_ip_ipv4(out), ""


def read_interfaces(sysfs_root, ipv4_addresses):
    interfaces = []
    net_dir = os.path.join(sysfs_root, "class", "net")
    for name in sorted_entries(net_dir):
        iface_dir = os.path.join(net_dir, name)
        interfaces.append(
            {
                "name": name,
                "operstate": read_sysfs_value(os.path.join(iface_dir, "operstate")),
                "type": read_sysfs_int(os.path.join(iface_dir, "type")),
                "virtual": is_virtual_interface(sysfs_root, name),
                "mtu": read_sysfs_int(os.path.join(iface_dir, "mtu")),
                "address": read_sysfs_value(os.path.join(iface_dir, "address")),
                # Mb/s; the kernel answers EINVAL (None here) where the driver does not know.
                "speed": read_sysfs_int(os.path.join(iface_dir, "speed")),
                # A bond's or VLAN's underlying devices (lower_<name> links, as the kernel makes them).
                "lower": sorted(entry[len("lower_"):] for entry in sorted_entries(iface_dir)
                                if entry.startswith("lower_")),
                "ipv4": list(ipv4_addresses.get(name, [])),
            }
        )
    return interfaces


# NCCL's IB transport skips every port whose link layer is neither (src/transport/net_ib/init.cc:
# IBV_LINK_LAYER_INFINIBAND, IBV_LINK_LAYER_ETHERNET); EFA reads "Unknown" and goes through a plugin.
NCCL_LINK_LAYERS = ("InfiniBand", "Ethernet")


def active_ports(hcas):
    """(hca name, port) for every active port NCCL's IB transport can use, in device and port order."""
    return [
        (hca["name"], port) for hca in hcas for port in hca["ports"]
        if port["active"] and port["link_layer"] in NCCL_LINK_LAYERS
    ]


# Operational states of Documentation/ABI/testing/sysfs-class-net. "unknown" is what drivers
# without carrier reporting (and loopback, tun, some IPoIB) show for a link that passes traffic;
# "testing", "dormant", "lowerlayerdown", "notpresent" and "down" do not pass traffic.
OPERSTATES_UP = ("up", "unknown")


def interface_is_up(interface):
    """Whether an interface (a dict as read_interfaces returns) can carry NCCL's sockets: its
    operstate passes traffic and it is not loopback. The one rule; the nccl_env filter imports it."""
    return (interface.get("operstate") in OPERSTATES_UP
            and interface.get("type") != ARPHRD_LOOPBACK)


def choose_gid_index(gids, prefer_gid_type, own_netdevs=()):
    """Lowest index of the preferred type, IPv4-mapped GIDs first; of the port's own netdev
    (own_netdevs: its PCI function's, device/net) where it has GIDs of its own, so that a VLAN's or a
    macvlan's GID, listed before it, is not taken.

    An IPv4-mapped GID carries the routable address; a link-local one only works in one L2 segment.
    """
    candidates = [gid for gid in gids if gid["type"] == prefer_gid_type]
    own = [gid for gid in candidates if gid.get("ndev") in set(own_netdevs)]
    candidates = own or candidates
    ipv4_mapped = [gid for gid in candidates if is_ipv4_mapped_gid(gid["gid"])]
    chosen = ipv4_mapped or candidates
    return chosen[0]["index"] if chosen else None


def propose_gid_index(ports, prefer_gid_type, own_netdevs=None):
    """One NCCL_IB_GID_INDEX for the RoCE ports among (hca, port) pairs, and warnings.
    own_netdevs: {hca name: its netdevs} (choose_gid_index's preference).

    NCCL before 2.21 takes a single index for all HCAs, so when ports disagree the index most
    of them share wins (lowest on a tie) and the disagreement is reported.
    """
    warnings = []
    index_by_port = {}
    for hca_name, port in ports:
        if port["link_layer"] != "Ethernet":
            continue
        label = f"{hca_name}:{port['port']}"
        index = choose_gid_index(port["gids"], prefer_gid_type, (own_netdevs or {}).get(hca_name, ()))
        if index is None:
            warnings.append(
                f"{label} has no {prefer_gid_type} GID; NCCL_IB_GID_INDEX does not fit it."
            )
        else:
            index_by_port[label] = index
    if not index_by_port:
        return None, warnings
    counts = Counter(index_by_port.values())
    chosen = min(counts, key=lambda index: (-counts[index], index))
    if len(counts) > 1:
        per_port = ", ".join(
            f"{label}={index}" for label, index in index_by_port.items()
        )
        warnings.append(
            f"Active RoCE ports disagree on the {prefer_gid_type} GID index ({per_port}); "
            f"proposing {chosen}."
        )
    return chosen, warnings


def is_excluded(name, exclude_patterns):
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in exclude_patterns)


def is_link_local(address):
    try:
        return ipaddress.ip_address(address).is_link_local
    except ValueError:
        return False


def parse_nccl_version(text):
    """'2.21.5' (also '2.21.5-1', '2.21.5.post1') -> (2, 21, 5); None when it is no version."""
    match = re.match(r"^\s*(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    if not match:
        return None
    return tuple(int(part or 0) for part in match.groups())


def nccl_version_from_env(prefix):
    """NCCL version installed in a conda env or venv: conda's nccl package record
    (conda-meta/nccl-<version>-<build>.json), else pip's nvidia-nccl-cu* wheel that torch uses."""
    if not prefix:
        return None
    for record in sorted(glob.glob(os.path.join(prefix, "conda-meta", "nccl-[0-9]*.json"))):
        try:
            with open(record, encoding="utf-8") as handle:
                version = json.load(handle).get("version")
        except (OSError, ValueError, AttributeError):
            continue
        if parse_nccl_version(version):
            return version
    pattern = os.path.join(prefix, "lib", "python3*", "site-packages", "nvidia_nccl_cu*-*.dist-info")
    for dist_info in sorted(glob.glob(pattern)):
        version = os.path.basename(dist_info)[:-len(".dist-info")].split("-")[1]
        if parse_nccl_version(version):
            return version
    return None


TORCH_NCCL_CODE = "import torch; print('.'.join(map(str, torch.cuda.nccl.version())))"


def torch_nccl_version(module, prefix):
    """The NCCL the env's torch loads (torch.cuda.nccl.version(): a static build's own), or None."""
    python = os.path.join(prefix or "", "bin", "python")
    if not prefix or not os.access(python, os.X_OK):
        return None
    rc, out, _err = module.run_command([python, "-c", TORCH_NCCL_CODE], environ_update={"LC_ALL": "C"})
    version = out.strip().splitlines()[-1] if rc == 0 and out.strip() else ""
    return version if parse_nccl_version(version) else None


def read_pci_path(sysfs_root, device_link):
    """The PCI functions from the root complex down to a device: 'class/infiniband/mlx5_0/device'
    resolved -> ['0000:15:01.0', '0000:16:00.0', '0000:17:02.0', '0000:19:00.0'] (root port,
    switch ports..., the device). Empty when the link is missing or leads outside devices/pci*."""
    if not os.path.exists(device_link):
        return []
    devices = os.path.realpath(os.path.join(sysfs_root, "devices"))
    resolved = os.path.realpath(device_link)
    if os.path.commonpath([resolved, devices]) != devices:
        return []
    parts = os.path.relpath(resolved, devices).split(os.sep)
    if not parts or not parts[0].startswith("pci"):
        return []
    return [part for part in parts[1:] if PCI_ADDRESS_RE.match(part)]


def read_gpus(sysfs_root):
    """NVIDIA GPUs (PCI class 0x0302xx 3D controller or 0x0300xx VGA, vendor 0x10de) under
    bus/pci/devices, with their PCI path and NUMA node."""
    gpus = []
    devices_dir = os.path.join(sysfs_root, "bus", "pci", "devices")
    for address in sorted_entries(devices_dir):
        device_dir = os.path.join(devices_dir, address)
        pci_class = (read_sysfs_value(os.path.join(device_dir, "class")) or "").lower()
        vendor = (read_sysfs_value(os.path.join(device_dir, "vendor")) or "").lower()
        if vendor != NVIDIA_VENDOR or not pci_class.startswith(GPU_CLASS_PREFIXES):
            continue
        gpus.append({
            "pci_address": address,
            "pci_path": read_pci_path(sysfs_root, device_dir),
            "numa_node": read_sysfs_int(os.path.join(device_dir, "numa_node")),
        })
    return gpus


def pci_distance(hca_path, gpu_path):
    """Hops between two PCI functions that meet below a PCIe switch (NCCL's PIX: one switch, PXB:
    several), counted along both paths from where they part; None when they meet only at the
    root port or the CPU (PHB, SYS) or a path is unreadable."""
    common = 0
    for hca_part, gpu_part in zip(hca_path, gpu_path):
        if hca_part != gpu_part:
            break
        common += 1
    if common < 2 or common >= min(len(hca_path), len(gpu_path)):
        return None
    return len(hca_path) + len(gpu_path) - 2 * common


def shares_pcie_switch(hca_path, gpu_path):
    """Whether two PCI paths meet below a PCIe switch rather than at the root port or the CPU:
    their common part holds the root port and at least one switch port (NCCL's PIX/PXB)."""
    return pci_distance(hca_path, gpu_path) is not None


def hca_netdevs(hca, interfaces=()):
    """The netdevs of an HCA (its PCI function's, its RoCE GIDs'), and every interface built on
    one of them (a bond, a VLAN: their lower_* links)."""
    names = set(hca.get("netdevs") or [])
    names.update(gid["ndev"] for port in hca["ports"] for gid in port["gids"] if gid.get("ndev"))
    for iface in interfaces:
        if names & set(iface.get("lower") or []):
            names.add(iface["name"])
    return names


def port_label(name, port):
    return f"{name}:{port['port']}"


def compute_fabric(hcas, gpus, dropped=()):
    """The HCA ports of the compute fabric, chosen per GPU as NCCL ranks NICs: for each GPU the
    HCA(s) at the smallest PCI distance below a switch (PIX/PXB), else those on its NUMA node,
    then the link layer most of them have. SR-IOV virtual functions, link layers NCCL skips and
    the HCAs in dropped (holding the cluster address) are no candidates.
    Returns (ports, reason, how): ports as (hca, port) of every such port (active or not); empty
    with the reason when nothing tells; how is "pci", "numa" or None."""
    if not gpus:
        return [], ("no NVIDIA GPU under bus/pci/devices, so the compute fabric cannot be told "
                    "from storage and in-band ports; NCCL_IB_HCA left unset (NCCL chooses)"), None
    candidates = [hca for hca in hcas if not hca.get("virtual_function") and hca["name"] not in dropped
                  and any(port["link_layer"] in NCCL_LINK_LAYERS for port in hca["ports"])]
    if not candidates:
        return [], ("no HCA port NCCL's IB transport can use (an InfiniBand or Ethernet link layer, not an "
                    "SR-IOV virtual function); NCCL_IB_HCA left unset"), None
    chosen, how = [], None
    for gpu in gpus:
        distances = {hca["name"]: pci_distance(hca["pci_path"], gpu["pci_path"]) for hca in candidates}
        near = [d for d in distances.values() if d is not None]
        chosen += [name for name, d in distances.items() if near and d == min(near) and name not in chosen]
    if chosen:
        how = "pci"
    else:
        for gpu in gpus:
            numa = gpu.get("numa_node")
            if numa is None or numa < 0:
                continue
            chosen += [hca["name"] for hca in candidates if hca.get("numa_node") == numa and hca["name"] not in chosen]
        how = "numa" if chosen else None
    if not chosen:
        return [], ("no HCA shares a PCIe switch or a NUMA node with a GPU (or their PCI paths and NUMA "
                    "nodes are unreadable); NCCL_IB_HCA left unset (NCCL chooses)"), None
    ports = [(hca["name"], port) for hca in candidates if hca["name"] in chosen for port in hca["ports"]
             if port["link_layer"] in NCCL_LINK_LAYERS]
    layers = Counter(port["link_layer"] for _hca, port in ports)
    if not layers:
        return [], "the GPU-local HCAs' link layers are unreadable; NCCL_IB_HCA left unset (NCCL chooses)", None
    layer = min(layers, key=lambda name: (-layers[name], name))
    return [(name, port) for name, port in ports if port["link_layer"] == layer], None, how


def cluster_interface(interfaces, exclude_patterns, cluster_address, cluster_cidr):
    """The one interface NCCL's sockets should use: the one holding the node's cluster address
    (what the other nodes reach it by), else the one with an address in the cluster CIDR.
    Returns (name or None, reason)."""
    usable = [iface for iface in interfaces
              if interface_is_up(iface) and not is_excluded(iface["name"], exclude_patterns)]
    if cluster_address:
        holding = [iface["name"] for iface in usable if cluster_address in iface["ipv4"]]
        if holding:
            return holding[0], f"it holds the node's cluster address {cluster_address}"
    if cluster_cidr:
        network = ipaddress.ip_network(cluster_cidr, strict=False)
        inside = [iface["name"] for iface in usable
                  if any(not is_link_local(a) and ipaddress.ip_address(a) in network for a in iface["ipv4"])]
        if len(inside) == 1:
            return inside[0], f"its address is in the cluster network {cluster_cidr}"
        if inside:
            return None, (f"{', '.join(inside)} all have addresses in the cluster network {cluster_cidr}; "
                          "NCCL_SOCKET_IFNAME left unset: name one in nccl_env_overrides")
    wanted = " or ".join(filter(None, [cluster_address and f"the address {cluster_address}",
                                       cluster_cidr and f"an address in {cluster_cidr}"]))
    return None, (f"no interface that is up holds {wanted}" if wanted else
                  "neither cluster_address nor cluster_cidr given")


# The socket interface below this speed (Mb/s) carrying all of NCCL's traffic is worth a warning.
SLOW_SOCKET_MBPS = 25000


def propose_site_settings(
    hcas, gpus, interfaces, exclude_patterns, prefer_gid_type,
    cluster_address=None, cluster_cidr=None, nccl_version=None,
):
    """What an admin of a DGX/HGX cluster would set, with the reason for each key.

    NCCL_IB_HCA: the compute fabric (compute_fabric), exact ('=') and with ports; unset, with a
    warning naming the ports, where the topology cannot tell. NCCL_SOCKET_IFNAME: the one cluster
    interface; the HCA whose netdev holds it is no rail. NCCL_IB_GID_INDEX: only for NCCL before
    2.21 (later ones detect it per port). Returns (proposed, warnings, reasons, faults): reasons
    {key: why it is set or unset}, faults what is wrong with this node's own hardware.
    """
    warnings, reasons, faults = [], {}, []
    usable = active_ports([hca for hca in hcas if not hca.get("virtual_function")])
    proposed = {"NCCL_IB_DISABLE": "0" if usable else "1"}
    skipped = [(port_label(hca["name"], port), port["link_layer"] or "unreadable") for hca in hcas
               for port in hca["ports"] if port["active"] and port["link_layer"] not in NCCL_LINK_LAYERS]
    if skipped:
        listed = ", ".join(label for label, _layer in skipped[:4]) + (f" and {len(skipped) - 4} more"
                                                                      if len(skipped) > 4 else "")
        layers = "/".join(sorted({layer for _label, layer in skipped}))
        warnings.append(f"{listed}: active, of link layer {layers}, which NCCL's IB transport skips (EFA and "
                        "other devices without InfiniBand or Ethernet verbs go through an NCCL net plugin, such "
                        "as aws-ofi-nccl): no NCCL_IB_HCA for them; check that the training env has the plugin.")
    name, why = cluster_interface(interfaces, exclude_patterns, cluster_address, cluster_cidr)
    netdevs = {hca["name"]: hca_netdevs(hca, interfaces) for hca in hcas}
    dropped = sorted((hca for hca in netdevs if name and name in netdevs[hca]), key=natural_key)
    # A node whose only RDMA ports carry its address too (one NIC for everything) keeps them.
    if not any(hca not in dropped for hca, _port in usable):
        dropped = []
    fabric, why_not, how = compute_fabric(hcas, gpus, dropped)
    rdma_ports = [(hca, port) for hca, port in fabric if port["active"]]
    held = (f"; {', '.join(dropped)} left out: {'its' if len(dropped) == 1 else 'their'} netdev holds the "
            f"cluster interface {name}" if dropped else "")
    if why_not:
        reasons["NCCL_IB_HCA"] = why_not + held
        candidates = [port_label(hca, port) for hca, port in usable if hca not in dropped]
        if gpus and len(candidates) > 1:
            warnings.append(f"NCCL_IB_HCA left unset, and NCCL then uses every active port ({', '.join(candidates)}), "
                            "a front-end or storage port included: the PCI topology and NUMA nodes do not tell which "
                            "are the compute fabric; name them in nccl_env_overrides (NCCL_IB_HCA: =hca:port,...).")
        rdma_ports = [(hca, port) for hca, port in usable if hca not in dropped]
    elif rdma_ports:
        # "=": exact names; without it mlx5_1 would also match mlx5_10 and mlx5_11.
        proposed["NCCL_IB_HCA"] = "=" + ",".join(port_label(hca, port) for hca, port in rdma_ports)
        reasons["NCCL_IB_HCA"] = ((f"the {fabric[0][1]['link_layer']} ports of the HCAs nearest each GPU below "
                                   "a PCIe switch (NCCL's PIX/PXB: the compute fabric)") if how == "pci" else
                                  (f"the {fabric[0][1]['link_layer']} ports of the HCAs on each GPU's NUMA node "
                                   "(no HCA shares a PCIe switch with a GPU)")) + held
    else:
        reasons["NCCL_IB_HCA"] = "no port of the GPU-local HCAs is active" + held
    for hca, port in fabric if how == "pci" else []:
        if not port["active"]:
            faults.append(f"{hca}:{port['port']} is a compute rail (its HCA shares a PCIe switch with "
                          f"a GPU) but its port is {port['state'] or 'unreadable'}, not ACTIVE")
    version = parse_nccl_version(nccl_version)
    if version and version >= (2, 21):
        reasons["NCCL_IB_GID_INDEX"] = (f"NCCL {nccl_version} finds each port's RoCE v2 GID itself "
                                        "(its default -1 since 2.21); a forced index is left out")
    elif any(port["link_layer"] == "Ethernet" for _name, port in rdma_ports):
        own = {hca["name"]: hca.get("netdevs") or [] for hca in hcas}
        gid_index, gid_warnings = propose_gid_index(rdma_ports, prefer_gid_type, own)
        warnings.extend(gid_warnings)
        if gid_index is not None and not gid_warnings:
            proposed["NCCL_IB_GID_INDEX"] = str(gid_index)
            reasons["NCCL_IB_GID_INDEX"] = (
                f"the {prefer_gid_type} GID index every compute RoCE port has, for "
                + (f"NCCL {nccl_version}, which takes one index for all ports" if version
                   else "an NCCL of unknown version (give nccl_version: 2.21 and later choose per port)"))
        else:
            reasons["NCCL_IB_GID_INDEX"] = ("the compute RoCE ports have no one GID index of type "
                                            f"{prefer_gid_type} and this NCCL takes one for all; left unset, "
                                            "so NCCL before 2.21 uses index 0 (its default), a RoCE v1 or "
                                            "link-local GID on most ports")
            warnings.append(f"NCCL_IB_GID_INDEX left unset: NCCL {nccl_version or 'of unknown version'} then uses "
                            "GID index 0; set it in nccl_env_overrides, or use NCCL 2.21 or later.")
    reasons["NCCL_SOCKET_IFNAME"] = why
    if name:
        # "=": exact; eth0 would also match eth01. One interface: NCCL's bootstrap takes the
        # first match in getifaddrs order, and its socket transport spreads over every match.
        proposed["NCCL_SOCKET_IFNAME"] = "=" + name
        speed = next((iface.get("speed") for iface in interfaces if iface["name"] == name), None)
        if proposed["NCCL_IB_DISABLE"] == "1" and gpus and speed and 0 < speed < SLOW_SOCKET_MBPS:
            warnings.append(f"NCCL_IB_DISABLE=1 (no usable RDMA port): all of NCCL's traffic goes over {name}, "
                            f"a {speed / 1000:g} Gb/s interface, below "
                            f"{SLOW_SOCKET_MBPS / 1000:g} Gb/s: a multi-node training will crawl; give the nodes an "
                            "RDMA fabric or a faster interface (nccl_env_overrides: NCCL_SOCKET_IFNAME).")
    else:
        warnings.append(f"NCCL_SOCKET_IFNAME left unset: {why}.")
    return proposed, warnings, reasons, faults


# What the role writes at the top of an nccl.conf, and the line before the keys it kept there.
CONF_TITLE_PREFIX = "# NCCL settings of "
KEPT_MARKER = "# Kept from the nccl.conf found on this node (keys this role does not set):"
SITE_KEYS = ("NCCL_IB_DISABLE", "NCCL_IB_HCA", "NCCL_IB_GID_INDEX", "NCCL_SOCKET_IFNAME")
NCCL_CONF_LINE_RE = re.compile(r"^([^=#][^=]*)=(.*)$")


def read_nccl_conf(text):
    """{key: value} as NCCL reads a conf file (src/misc/param.cc, setEnvFile): '#' lines skipped,
    a line without '=' skipped, the value everything after the first '=' (spaces kept)."""
    found = {}
    for line in (text or "").splitlines():
        match = NCCL_CONF_LINE_RE.match(line.rstrip("\r"))
        if match:
            found.setdefault(match.group(1), match.group(2))
    return found


def kept_conf_keys(text, role_keys):
    """The keys of an existing nccl.conf to write back: in a file this role wrote, those under its
    KEPT_MARKER; in any other, every key the role does not set (SITE_KEYS, role_keys)."""
    if text is None:
        return {}
    if text.startswith(CONF_TITLE_PREFIX) or f"\n{CONF_TITLE_PREFIX}" in text:
        _before, marker, after = text.partition(KEPT_MARKER)
        return read_nccl_conf(after) if marker else {}
    settings = read_nccl_conf(text)
    return {key: value for key, value in settings.items()
            if key not in SITE_KEYS and key not in set(role_keys)}


def nccl_list_entries(value):
    """(exclude, exact, [entries]) of an NCCL_IB_HCA / NCCL_SOCKET_IFNAME value as NCCL splits it
    (src/misc/utils.cc parseStringList: '^' then '=' prefixes, entries split at ',' only, spaces
    kept, empty entries dropped); each entry (prefix, port, rest) split at ':'."""
    exclude = value.startswith("^")
    value = value[1:] if exclude else value
    exact = value.startswith("=")
    value = value[1:] if exact else value
    entries = []
    for entry in value.split(","):
        prefix, _, rest = entry.partition(":")
        if prefix:
            port, _, more = rest.partition(":")
            entries.append((prefix, port, more))
    return exclude, exact, entries


# Old names NCCL or PyTorch still read, deprecated, and their successors (NCCL src/graph/connect.cc
# "Legacy naming"; PyTorch ProcessGroupNCCL's TORCH_NCCL_* names, the NCCL_* ones warned about).
DEPRECATED = {
    "NCCL_MIN_NRINGS": "NCCL_MIN_NCHANNELS",
    "NCCL_MAX_NRINGS": "NCCL_MAX_NCHANNELS",
    "NCCL_ASYNC_ERROR_HANDLING": "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "NCCL_BLOCKING_WAIT": "TORCH_NCCL_BLOCKING_WAIT",
    "NCCL_DESYNC_DEBUG": "TORCH_NCCL_DESYNC_DEBUG",
}
# NCCL's defaults the warnings compare with (src/transport/net_ib/connect.cc: IB_TIMEOUT 20,
# IB_RETRY_CNT 7; the timeout is 4.096 us * 2^value per retry, the InfiniBand spec's).
NCCL_IB_TIMEOUT_DEFAULT = 20
NCCL_IB_RETRY_DEFAULT = 7


def setting_warnings(settings):
    """Settings that NCCL or PyTorch read, but that are deprecated or risky, each with why."""
    warnings = []
    for key, value in sorted((settings or {}).items()):
        value = str(value)
        if key in DEPRECATED:
            warnings.append(f"{key} is deprecated (still read, for now): use {DEPRECATED[key]}.")
        elif key in ("NCCL_NET_GDR_LEVEL", "NCCL_P2P_LEVEL") and value[:1].isdigit():
            warnings.append(f"{key}={value}: the numeric form is deprecated (NCCL maps it to a path type); write "
                            "LOC, NVL, PIX, PXB, PXN, PHB or SYS (NCCL documentation, Environment Variables).")
        elif key == "NCCL_IB_TIMEOUT" and value.isdigit() and int(value) > NCCL_IB_TIMEOUT_DEFAULT:
            wait = 4.096e-6 * 2 ** int(value)
            warnings.append(f"NCCL_IB_TIMEOUT={value}: each of the {NCCL_IB_RETRY_DEFAULT} retries waits "
                            f"{wait:.0f} s (4.096 us * 2^{value}), so a lost link stalls the job about "
                            f"{wait * (NCCL_IB_RETRY_DEFAULT + 1) / 60:.0f} min before NCCL reports it; NCCL's "
                            f"default is {NCCL_IB_TIMEOUT_DEFAULT} ({4.096e-6 * 2 ** NCCL_IB_TIMEOUT_DEFAULT:.1f} s).")
        elif key in ("NCCL_MIN_NCHANNELS", "NCCL_MIN_CTAS"):
            warnings.append(f"{key}={value} forces what NCCL tunes for each version and machine (and takes SMs "
                            "from the training): keep it only where a measurement on this NCCL shows a gain.")
        elif key == "NCCL_CROSS_NIC" and value == "1":
            warnings.append("NCCL_CROSS_NIC=1 lets rings and trees leave their rail: on a rail-optimized fabric "
                            "(DGX SuperPOD) that traffic crosses the spine; NCCL's default (2) decides per system.")
        elif key == "NCCL_COLLNET_ENABLE" and value == "1":
            warnings.append("NCCL_COLLNET_ENABLE=1 needs SHARP: an InfiniBand fabric with aggregation managers and "
                            "the SHARP NCCL plugin (libnccl-net.so of nccl-rdma-sharp-plugins) in the training env.")
        elif key == "TORCH_NCCL_ASYNC_ERROR_HANDLING" and value == "1":
            warnings.append("TORCH_NCCL_ASYNC_ERROR_HANDLING=1: its ncclCommAbort can itself hang, and the flight "
                            "recorder dumps nothing; PyTorch's default since 2.2 is 3: leave it unset.")
    return warnings


def override_warnings(overrides, hcas, interfaces):
    """What NCCL would read otherwise than the inventory means (src/misc/utils.cc: matchIf is a
    prefix match without '=', an exact one with it), and setting_warnings'."""
    warnings = setting_warnings(overrides)
    for key, names in (("NCCL_IB_HCA", [hca["name"] for hca in hcas]),
                       ("NCCL_SOCKET_IFNAME", [iface["name"] for iface in interfaces])):
        value = (overrides or {}).get(key)
        if value is None:
            continue
        _exclude, exact, entries = nccl_list_entries(str(value))
        for prefix, _port, _more in entries:
            if exact or prefix != prefix.strip():
                continue
            matched = [name for name in names if name.startswith(prefix)]
            if len(matched) > 1:
                warnings.append(f"{key}={value}: without '=' NCCL takes {prefix} as a prefix, which matches "
                                f"{', '.join(sorted(matched, key=natural_key))} here; write ={prefix}... "
                                "for exact names.")
    return warnings


# The rules of the settings that need no node to check, in one place for this module's options and
# for the nccl_env role's (provision.yml's validate tasks and the preflight's, through the
# nccl_env_input_problems filter), each caller naming them as its users set them.
CLUSTER_CIDR_RE = re.compile(r"[0-9]{1,3}(\.[0-9]{1,3}){3}/[0-9]{1,2}")
NCCL_VERSION_RE = re.compile(r"[0-9]+\.[0-9]+(\.[0-9]+)*")


def input_problems(ipv4_addresses, cluster_cidr, nccl_version, prefix=""):
    """One message per bad value, naming it (as ``prefix`` + the option's name) and what would be
    right: ipv4_addresses a mapping of interface to a list of IPv4 addresses (a bare string would
    be read character by character), cluster_cidr empty or an IPv4 network, nccl_version empty or
    a version as 2.21.5."""
    problems = []
    if not isinstance(ipv4_addresses, (dict, type(None))):
        problems.append(f"{prefix}ipv4_addresses={ipv4_addresses!r} must map each interface to a list of IPv4 "
                        'addresses, as {"eth0": ["10.77.0.1"]}')
    for name, addresses in (ipv4_addresses if isinstance(ipv4_addresses, dict) else {}).items():
        if not isinstance(addresses, list):
            example = [addresses] if _is_ipv4_address(addresses) else ["10.77.0.1"]
            problems.append(f"{prefix}ipv4_addresses[{name!r}]={addresses!r} is not a list of IPv4 addresses; "
                            f"give a list, as {json.dumps({str(name): example})}")
            continue
        problems.extend(f"{prefix}ipv4_addresses[{name!r}] holds {address!r}, which is no IPv4 address; "
                        "give addresses as 10.77.0.1"
                        for address in addresses if not _is_ipv4_address(address))
    if cluster_cidr not in ("", None) and not (
            isinstance(cluster_cidr, str) and CLUSTER_CIDR_RE.fullmatch(cluster_cidr) and _is_ipv4_network(cluster_cidr)):
        problems.append(f"{prefix}cluster_cidr={cluster_cidr!r} is no IPv4 network; give it empty or as 10.77.0.0/24")
    # A YAML 2.21 is a float: the version it spells.
    if nccl_version not in ("", None) and not (
            isinstance(nccl_version, (str, float)) and NCCL_VERSION_RE.fullmatch(str(nccl_version))):
        problems.append(f"{prefix}nccl_version={nccl_version!r} is no NCCL version; give it empty or as 2.21.5")
    return problems


def _is_ipv4_address(value):
    try:
        return isinstance(value, str) and bool(ipaddress.IPv4Address(value))
    except ValueError:
        return False


def _is_ipv4_network(value):
    try:
        return bool(ipaddress.IPv4Network(value, strict=False))
    except ValueError:
        return False


def resolve_cluster_address(value):
    """The node's IPv4 cluster address from an address or a host name (ansible_host may be
    either); None for an empty value. Raises ValueError naming the value otherwise."""
    if not value:
        return None
    try:
        return str(ipaddress.IPv4Address(value))
    except ValueError:
        pass
    try:
        found = socket.getaddrinfo(value, None, socket.AF_INET)
    except (OSError, UnicodeError) as error:
        raise ValueError(f"cluster_address {value!r} is neither an IPv4 address nor a host name "
                         f"this node resolves ({error}); give the node's address on the cluster network") from None
    return found[0][4][0]


def main():
    # Imported here: the preflight's node check (roles/slurm_launch/files/preflight/node_check.py)
    # imports this file's detection on nodes that have no Ansible.
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "sysfs_root": {"type": "path", "default": "/sys"},
            "exclude_interfaces": {
                "type": "list",
                "elements": "str",
                "default": DEFAULT_EXCLUDE_INTERFACES,
            },
            "prefer_gid_type": {
                "type": "str",
                "default": "RoCE v2",
                "choices": ["RoCE v2", "IB/RoCE v1"],
            },
            "ipv4_addresses": {"type": "dict"},
            "detect_ipv4": {"type": "bool", "default": False},
            "cluster_address": {"type": "str", "default": ""},
            "cluster_cidr": {"type": "str", "default": ""},
            "nccl_version": {"type": "str", "default": ""},
            "env_prefix": {"type": "path", "default": ""},
            "conf_path": {"type": "path", "default": ""},
            "role_keys": {"type": "list", "elements": "str", "default": []},
            "overrides": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    params = module.params
    sysfs_root = params["sysfs_root"]
    if not os.path.isdir(sysfs_root):
        module.fail_json(
            msg=f"sysfs_root {sysfs_root} does not exist or is not a directory"
        )

    ipv4_addresses = params["ipv4_addresses"]
    problems = input_problems(ipv4_addresses, params["cluster_cidr"], params["nccl_version"])
    if problems:
        module.fail_json(msg="; ".join(problems))
    try:
        cluster_address = resolve_cluster_address(params["cluster_address"])
    except ValueError as error:
        module.fail_json(msg=str(error))
    detect_warning = ""
    if params["detect_ipv4"]:
        detected, detect_warning = detect_ipv4_addresses(module)
        if detected or ipv4_addresses:
            ipv4_addresses = {**detected, **(ipv4_addresses or {})}

    hcas = read_hcas(sysfs_root)
    gpus = read_gpus(sysfs_root)
    interfaces = read_interfaces(sysfs_root, ipv4_addresses or {})
    nccl_version = params["nccl_version"] or None
    # The version only decides the RoCE GID index: torch is asked (seconds) only where it matters.
    if not nccl_version and any(port["link_layer"] == "Ethernet" for _hca, port in active_ports(hcas)):
        nccl_version = torch_nccl_version(module, params["env_prefix"]) or nccl_version_from_env(params["env_prefix"])
    proposed, warnings, reasons, faults = propose_site_settings(
        hcas, gpus, interfaces, params["exclude_interfaces"], params["prefer_gid_type"],
        cluster_address, params["cluster_cidr"], nccl_version,
    )
    if not nccl_version and "NCCL_IB_GID_INDEX" in proposed:
        warnings.append("NCCL version unknown (no nccl_version, none found in env_prefix): "
                        "NCCL_IB_GID_INDEX is forced as NCCL before 2.21 needs it.")
    warnings.extend(override_warnings(params["overrides"], hcas, interfaces))
    kept = {}
    if params["conf_path"]:
        try:
            with open(params["conf_path"], encoding="utf-8", errors="replace") as handle:
                kept = kept_conf_keys(handle.read(), params["role_keys"] + list(params["overrides"]))
        except FileNotFoundError:
            kept = {}
        except OSError as error:
            module.fail_json(msg=f"conf_path {params['conf_path']}: {error}")
    if kept:
        warnings.append(f"Kept from {params['conf_path']}, which this role does not set: {', '.join(sorted(kept))} "
                        "(set them in nccl_env_overrides to manage them for the group).")
    for warning in ([detect_warning] if detect_warning else []) + warnings + faults:
        module.warn(warning)
    module.exit_json(
        changed=False,
        ansible_facts={
            "nccl_network": {
                "hcas": hcas,
                "gpus": gpus,
                "interfaces": interfaces,
                "nccl_version": nccl_version,
                "proposed": proposed,
                "reasons": reasons,
                "faults": faults,
                "kept": kept,
                "warnings": warnings,
            }
        },
    )


if __name__ == "__main__":
    main()
