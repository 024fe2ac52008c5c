"""Detect InfiniBand/RoCE HCAs and network interfaces and propose NCCL settings."""

DOCUMENTATION = r"""
---
module: nccl_network_facts
short_description: Detect InfiniBand/RoCE HCAs and network interfaces and propose NCCL settings
description:
  - Reads RDMA devices from C(<sysfs_root>/class/infiniband) and network interfaces from
    C(<sysfs_root>/class/net) and returns them as the fact C(nccl_network).
  - Proposes values for C(NCCL_IB_DISABLE), C(NCCL_IB_HCA), C(NCCL_IB_GID_INDEX) and
    C(NCCL_SOCKET_IFNAME) from what it found. Problems that make a proposal doubtful are
    listed in C(nccl_network.warnings) and raised as module warnings.
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
      - IPv4 addresses per interface name, for example built from the C(ansible_<iface>) facts.
        sysfs does not hold addresses.
      - When given, only interfaces with at least one address are proposed for C(NCCL_SOCKET_IFNAME).
      - When omitted, addresses are unknown, every other eligible interface is proposed and a
        warning says so.
    type: dict
author:
  - ansible-slurm-train maintainers
notes:
  - Supports check mode; the module only reads sysfs.
  - C(NCCL_IB_HCA) and C(NCCL_SOCKET_IFNAME) are prefix matches in NCCL (C(mlx5_1) also matches
    C(mlx5_10)); prepend C(=) to the value when exact matching is required.
"""

EXAMPLES = r"""
- name: Collect IPv4 addresses per interface from the gathered facts
  ansible.builtin.set_fact:
    nccl_ipv4_addresses: >-
      {{ nccl_ipv4_addresses | default({})
         | combine({item: [ansible_facts[item | replace('-', '_')].ipv4.address]}) }}
  loop: "{{ ansible_facts.interfaces }}"
  when: ansible_facts[item | replace('-', '_')].ipv4.address is defined

- name: Detect HCAs and interfaces and propose NCCL settings
  nccl_network_facts:
    ipv4_addresses: "{{ nccl_ipv4_addresses | default({}) }}"

- name: Prefer RoCE v1 GIDs and keep management NICs out of NCCL_SOCKET_IFNAME
  nccl_network_facts:
    prefer_gid_type: IB/RoCE v1
    exclude_interfaces: ['lo', 'docker*', 'veth*', 'virbr*', 'br-*', 'eno*']
    ipv4_addresses:
      ens1f0: ['10.10.0.11']
      ens1f1: ['10.10.1.11']

- name: Show the proposal
  ansible.builtin.debug:
    var: ansible_facts.nccl_network.proposed
"""

RETURN = r"""
ansible_facts:
  description: Facts about the RDMA devices and interfaces of the host.
  returned: always
  type: dict
  sample: {"nccl_network": {"hcas": [], "interfaces": [], "proposed": {"NCCL_IB_DISABLE": "1"}, "warnings": []}}
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
          sample: {"NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": "mlx5_0:1,mlx5_1:1", "NCCL_IB_GID_INDEX": "3",
                   "NCCL_SOCKET_IFNAME": "ens1f0,ens1f1"}
          contains:
            NCCL_IB_DISABLE:
              description: C(0) when at least one IB/RoCE port is active, C(1) (sockets only) otherwise.
              returned: always
              type: str
              sample: "0"
            NCCL_IB_HCA:
              description: Comma-separated C(hca:port) of the active ports.
              returned: when at least one IB/RoCE port is active
              type: str
              sample: mlx5_0:1,mlx5_1:1
            NCCL_IB_GID_INDEX:
              description:
                - GID index of type O(prefer_gid_type) on the active RoCE ports, IPv4-mapped GIDs first.
                - When the ports disagree, the index most of them share (lowest on a tie), with a warning.
              returned: when an active port has an Ethernet link layer and a GID of type O(prefer_gid_type)
              type: str
              sample: "3"
            NCCL_SOCKET_IFNAME:
              description: Comma-separated interfaces that are up, not loopback, not excluded and have an IPv4 address.
              returned: when at least one interface qualifies
              type: str
              sample: ens1f0,ens1f1
        warnings:
          description: Reasons to doubt the proposal.
          returned: always
          type: list
          elements: str
          sample: ["No interface qualifies for NCCL_SOCKET_IFNAME (up, not loopback, not excluded, with an IPv4 address)."]
"""

import fnmatch
import os
from collections import Counter


DEFAULT_EXCLUDE_INTERFACES = ["lo", "docker*", "veth*", "virbr*", "br-*"]
ARPHRD_LOOPBACK = 772
ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
IPV4_MAPPED_GID_PREFIX = "0000:0000:0000:0000:0000:ffff:"


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
    for name in sorted_entries(infiniband_dir):
        hca_dir = os.path.join(infiniband_dir, name)
        ports_dir = os.path.join(hca_dir, "ports")
        hcas.append(
            {
                "name": name,
                "node_guid": read_sysfs_value(os.path.join(hca_dir, "node_guid")),
                "fw_ver": read_sysfs_value(os.path.join(hca_dir, "fw_ver")),
                "board_id": read_sysfs_value(os.path.join(hca_dir, "board_id")),
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
                "ipv4": list(ipv4_addresses.get(name, [])),
            }
        )
    return interfaces


def active_ports(hcas):
    """(hca name, port) for every active port, in device and port order."""
    return [
        (hca["name"], port) for hca in hcas for port in hca["ports"] if port["active"]
    ]


def choose_gid_index(gids, prefer_gid_type):
    """Lowest index of the preferred type, IPv4-mapped GIDs first.

    An IPv4-mapped GID carries the routable address; a link-local one only works in one L2 segment.
    """
    candidates = [gid for gid in gids if gid["type"] == prefer_gid_type]
    ipv4_mapped = [gid for gid in candidates if is_ipv4_mapped_gid(gid["gid"])]
    chosen = ipv4_mapped or candidates
    return chosen[0]["index"] if chosen else None


def propose_gid_index(ports, prefer_gid_type):
    """One NCCL_IB_GID_INDEX for the RoCE ports among (hca, port) pairs, and warnings.

    NCCL takes a single index for all HCAs, so when ports disagree the index most of them
    share wins (lowest on a tie) and the disagreement is reported.
    """
    warnings = []
    index_by_port = {}
    for hca_name, port in ports:
        if port["link_layer"] != "Ethernet":
            continue
        label = f"{hca_name}:{port['port']}"
        index = choose_gid_index(port["gids"], prefer_gid_type)
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


def select_socket_interfaces(interfaces, exclude_patterns, addresses_known):
    """Names for NCCL_SOCKET_IFNAME: up, not loopback, not excluded, with an IPv4 address.

    Without addresses_known every interface passes the address check, as it cannot be made.
    """
    return [
        iface["name"]
        for iface in interfaces
        if iface["operstate"] == "up"
        and iface["type"] != ARPHRD_LOOPBACK
        and not is_excluded(iface["name"], exclude_patterns)
        and (iface["ipv4"] or not addresses_known)
    ]


def propose_nccl_settings(
    hcas, interfaces, exclude_patterns, prefer_gid_type, addresses_known
):
    """The NCCL environment proposal and the warnings that go with it."""
    warnings = []
    proposed = {}
    ports = active_ports(hcas)
    proposed["NCCL_IB_DISABLE"] = "0" if ports else "1"
    if ports:
        proposed["NCCL_IB_HCA"] = ",".join(
            f"{hca_name}:{port['port']}" for hca_name, port in ports
        )
    gid_index, gid_warnings = propose_gid_index(ports, prefer_gid_type)
    warnings.extend(gid_warnings)
    if gid_index is not None:
        proposed["NCCL_IB_GID_INDEX"] = str(gid_index)
    socket_interfaces = select_socket_interfaces(
        interfaces, exclude_patterns, addresses_known
    )
    if socket_interfaces:
        proposed["NCCL_SOCKET_IFNAME"] = ",".join(socket_interfaces)
        if not addresses_known:
            warnings.append(
                "ipv4_addresses not given; NCCL_SOCKET_IFNAME lists up interfaces without knowing "
                "whether they have an IPv4 address."
            )
    else:
        warnings.append(
            "No interface qualifies for NCCL_SOCKET_IFNAME "
            "(up, not loopback, not excluded, with an IPv4 address)."
        )
    return proposed, warnings


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
        },
        supports_check_mode=True,
    )
    sysfs_root = module.params["sysfs_root"]
    if not os.path.isdir(sysfs_root):
        module.fail_json(
            msg=f"sysfs_root {sysfs_root} does not exist or is not a directory"
        )

    ipv4_addresses = module.params["ipv4_addresses"]
    addresses_known = ipv4_addresses is not None
    for name, addresses in (ipv4_addresses or {}).items():
        # A bare string would otherwise be taken apart character by character.
        if not isinstance(addresses, list):
            module.fail_json(
                msg=f"ipv4_addresses[{name}] must be a list of addresses, got {addresses!r}"
            )

    hcas = read_hcas(sysfs_root)
    interfaces = read_interfaces(sysfs_root, ipv4_addresses or {})
    proposed, warnings = propose_nccl_settings(
        hcas,
        interfaces,
        module.params["exclude_interfaces"],
        module.params["prefer_gid_type"],
        addresses_known,
    )
    for warning in warnings:
        module.warn(warning)
    module.exit_json(
        changed=False,
        ansible_facts={
            "nccl_network": {
                "hcas": hcas,
                "interfaces": interfaces,
                "proposed": proposed,
                "warnings": warnings,
            }
        },
    )


if __name__ == "__main__":
    main()
