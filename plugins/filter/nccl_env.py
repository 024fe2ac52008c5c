"""Pure logic of the nccl_env role: merging detected and inventory NCCL settings, and the
checks that refuse a setting NCCL would misread or a node group whose nodes disagree."""

import re
import shlex


# library/nccl_network_facts.py: the one rule of what "an interface is up" means and how NCCL reads
# a list. On a node, where the preflight stages both files side by side with no collection around
# them, a plain import.
try:
    from ansible_collections.hpc.slurm_train.plugins.modules import nccl_network_facts as _facts
except ImportError:
    import nccl_network_facts as _facts
interface_is_up = _facts.interface_is_up
nccl_list_entries = _facts.nccl_list_entries

KEY_RE = re.compile(r"^[A-Z][A-Z0-9_]*$")
GROUP_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
IB_ONLY_KEYS = ("NCCL_IB_HCA", "NCCL_IB_GID_INDEX")
# Settings whose value names hardware that must exist on every node of the group.
HARDWARE_KEYS = ("NCCL_IB_HCA", "NCCL_SOCKET_IFNAME")


def _text(value):
    # YAML booleans would otherwise render as True/False, which NCCL does not read as 1/0.
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def nccl_env_overrides_of(overrides, host_overrides=None):
    """A node's inventory overrides: its group's nccl_env_overrides with its own
    nccl_env_host_overrides merged over them, key by key (Ansible would replace the whole dict
    of a group by a host's dict of the same name, dropping the group's other keys)."""
    return {**(overrides or {}), **(host_overrides or {})}


def nccl_env_merge(proposed, base, overrides, host_overrides=None):
    """base < detected < nccl_env_overrides < nccl_env_host_overrides. With IB disabled (sockets
    only), the detected IB settings are dropped: they would only confuse a reader; an override is
    kept as given."""
    settings = {key: _text(value) for key, value in (base or {}).items()}
    detected = {key: _text(value) for key, value in (proposed or {}).items()}
    wanted = {key: _text(value) for key, value in nccl_env_overrides_of(overrides, host_overrides).items()}
    settings.update(detected)
    settings.update(wanted)
    if settings.get("NCCL_IB_DISABLE") == "1":
        for key in IB_ONLY_KEYS:
            if key not in wanted:
                settings.pop(key, None)
    return dict(sorted(settings.items()))


def nccl_env_conf_settings(settings, overrides=None, host_overrides=None):
    """What a node's nccl.conf gets of its settings: the NCCL_* keys (NCCL reads no others there),
    but a GID index only where the inventory sets it: a detected one is forced for the env's NCCL
    (before 2.21) and belongs in the group's env file, which only the project's jobs source; in
    nccl.conf every NCCL on the node, a newer one in a container too, would take it."""
    given = nccl_env_overrides_of(overrides, host_overrides)
    return {key: value for key, value in (settings or {}).items()
            if key.startswith("NCCL_") and (key != "NCCL_IB_GID_INDEX" or key in given)}


def _list_entries(value):
    """NCCL_IB_HCA / NCCL_SOCKET_IFNAME: (exclude, exact, [names]) as NCCL splits them (spaces kept)."""
    exclude, exact, entries = nccl_list_entries(value)
    return exclude, exact, [prefix for prefix, _port, _rest in entries]


def nccl_env_input_problems(ipv4_addresses, cluster_cidr, nccl_version):
    """The role's settings that need no node to check (nccl_network_facts' rules, which the module
    applies to its own options), named as the role's variables."""
    return _facts.input_problems(ipv4_addresses, cluster_cidr, nccl_version, prefix="nccl_env_")


def nccl_env_setting_problems(settings, where):
    """Problems with one node's settings that NCCL or PyTorch would misread."""
    return [problem for _key, problem in _keyed_setting_problems(settings, where)]


def _keyed_setting_problems(settings, where):
    """(key, problem) for each of nccl_env_setting_problems, the key it is about."""
    problems = []
    for key, value in sorted((settings or {}).items()):
        value = _text(value)
        if not KEY_RE.match(key):
            problems.append((key, f"{where}: {key!r} is no environment variable name (use upper case, digits, '_')"))
        if any(char in value for char in "\n\r\0"):
            problems.append((key, f"{where}: {key} holds a line break; give a single-line value"))
    ib_disable = _text(settings.get("NCCL_IB_DISABLE", "0"))
    if ib_disable not in ("0", "1"):
        problems.append(("NCCL_IB_DISABLE",
                         f"{where}: NCCL_IB_DISABLE={ib_disable}; use 1 (sockets only) or 0 (use IB/RoCE)"))
    for key in HARDWARE_KEYS:
        if key not in settings:
            continue
        value = _text(settings[key])
        _exclude, _exact, entries = nccl_list_entries(value)
        for prefix, port, rest in entries:
            if prefix != prefix.strip() or any(char.isspace() for char in port + rest):
                problems.append((key, f"{where}: {key}={value} has a space in {prefix + (':' + port if port else '')!r}: "
                                      "NCCL splits at ',' only and keeps it, so the entry matches nothing; write "
                                      f"{value.replace(' ', '')}"))
            elif (port and not port.isdigit()) or any(part and not part.isdigit() for part in rest.split(":")):
                problems.append((key, f"{where}: {key}={value}: {prefix}:{port}{':' + rest if rest else ''} is no "
                                      "hca:port[:rail:plane] with numbers (NCCL reads a port it cannot parse as 0)"))
    ifname = settings.get("NCCL_SOCKET_IFNAME")
    if ifname is not None:
        exclude, _exact, names = _list_entries(_text(ifname))
        if not exclude and "lo" in names:
            problems.append(("NCCL_SOCKET_IFNAME",
                             f"{where}: NCCL_SOCKET_IFNAME={ifname} includes the loopback interface lo; "
                             "other nodes cannot reach it: name the cluster network's interface"))
        if not names:
            problems.append(("NCCL_SOCKET_IFNAME",
                             f"{where}: NCCL_SOCKET_IFNAME is empty; name an interface or leave it unset"))
    return problems


def _matches(name, candidates, exact):
    return [c for c in candidates if (c == name if exact else c.startswith(name))]


def _hardware_problems(node):
    """(key, problem): a node's settings naming an HCA port or interface it does not have (or that is down)."""
    problems = []
    settings, network, name = node["settings"], node.get("network") or {}, node["name"]
    if settings.get("NCCL_IB_DISABLE", "0") != "1" and "NCCL_IB_HCA" in settings:
        exclude, exact, entries = nccl_list_entries(settings["NCCL_IB_HCA"])
        active = [f"{h['name']}:{p['port']}" for h in network.get("hcas", []) for p in h["ports"] if p["active"]]
        present = [h["name"] for h in network.get("hcas", [])]
        for hca, port, _rest in [] if exclude else entries:
            entry = f"{hca}:{port}" if port else hca
            found = [a for a in active if (a.split(":")[0] == hca if exact else a.startswith(hca))
                     and (not port or a.split(":")[1] == port)]
            if not found:
                problems.append(("NCCL_IB_HCA", f"{name}: NCCL_IB_HCA names {entry}, which {name} does not have "
                                                f"as an active port (active: {', '.join(active) or 'none'}; HCAs: "
                                                f"{', '.join(present) or 'none'})"))
    if "NCCL_SOCKET_IFNAME" in settings:
        exclude, exact, entries = _list_entries(settings["NCCL_SOCKET_IFNAME"])
        up = [i["name"] for i in network.get("interfaces", []) if interface_is_up(i)]
        for entry in [] if exclude else entries:
            if not _matches(entry, up, exact):
                problems.append(("NCCL_SOCKET_IFNAME", f"{name}: NCCL_SOCKET_IFNAME names {entry}, which {name} "
                                                       f"does not have up (up: {', '.join(up) or 'none'})"))
    return problems


def _suspects(members, key, overrides, host_overrides, own_failures):
    """{node: why} for the nodes whose own findings make them the likely odd one out on key:
    their own check of that key failed (it names hardware the node lacks: that decides it), else
    their detection reports a fault of their own hardware, or their value comes from an
    inventory override the rest of the group does not share (nccl_env_host_overrides, or an
    nccl_env_overrides of its own); else a node whose own check failed on another key."""
    on_key = [node["name"] for node in members if key in (own_failures.get(node["name"]) or {})]
    if on_key:
        return {name: f"its own check of {key} failed, above" for name in on_key}
    found = {}
    for node in members:
        faults = (node.get("network") or {}).get("faults") or []
        if faults:
            found[node["name"]] = f"its own detection reports: {'; '.join(faults)}"
    # A host's own override of a key is the departure from its group, whatever the group's
    # nccl_env_overrides say; without one, an nccl_env_overrides the group does not share is.
    for name_of, source in (("nccl_env_host_overrides", host_overrides), ("nccl_env_overrides", overrides)):
        given = {node["name"]: _text(source[node["name"]][key]) for node in members
                 if key in (source.get(node["name"]) or {})}
        if given and (len(given) < len(members) or len(set(given.values())) > 1):
            for name, value in given.items():
                found.setdefault(name, f"its {name_of} sets {key}={value}, which the rest of its group does not share")
            break
    if not found:
        for node in members:
            failed = own_failures.get(node["name"]) or {}
            if failed:
                found[node["name"]] = f"its own check failed on {', '.join(sorted(failed))}"
    return found


def nccl_env_own_failures(names, settings, networks):
    """{node: {key: problem}}: each node's own failed checks of its settings (what NCCL would
    misread, hardware it lacks), the evidence that makes it the odd one in its group."""
    found = {}
    for name, node_settings, network in zip(names, settings, networks):
        node = {"name": name, "settings": node_settings, "network": network}
        for key, problem in _keyed_setting_problems(node_settings, name) + _hardware_problems(node):
            found.setdefault(name, {}).setdefault(key, problem)
    return found


def nccl_env_group_outliers(names, node_groups, settings, networks, overrides=None, host_overrides=None,
                            known_failures=None):
    """{node: [problems]} for every node whose settings cannot be written: it names hardware it
    lacks, or it disagrees with its group (whose env file holds one value per setting). Of nodes
    that disagree, the odd one is the one whose own check says so (a failed check of that key, a
    fault, a host override); else the minority; on a tie every side is named, as nothing tells
    which is right. overrides and host_overrides: each node's nccl_env_overrides and
    nccl_env_host_overrides; known_failures: own failures found elsewhere ({node: {key: problem}},
    such as its nccl.conf's where these are the settings a job reads), evidence only."""
    overrides = dict(zip(names, overrides)) if overrides is not None else {}
    host_overrides = dict(zip(names, host_overrides)) if host_overrides is not None else {}
    nodes = [{"name": n, "group": g, "settings": s, "network": net}
             for n, g, s, net in zip(names, node_groups, settings, networks)]
    outliers = {}

    def name(node, problem):
        outliers.setdefault(node, [])
        if problem not in outliers[node]:
            outliers[node].append(problem)

    own_failures = nccl_env_own_failures(names, settings, networks)
    for node in nodes:
        for _key, problem in _keyed_setting_problems(node["settings"], node["name"]) + _hardware_problems(node):
            name(node["name"], problem)
    for node, failed in (known_failures or {}).items():
        for key, problem in failed.items():
            own_failures.setdefault(node, {}).setdefault(key, problem)
    by_group = {}
    for node in nodes:
        by_group.setdefault(node["group"], []).append(node)
    for group, members in sorted(by_group.items()):
        for key in sorted({key for node in members for key in node["settings"]}):
            values = {node["name"]: node["settings"].get(key) for node in members}
            if len(set(values.values())) < 2:
                continue
            listing = ", ".join(f"{n}={v if v is not None else '(unset)'}" for n, v in values.items())
            where = f"group {group}: {key} differs between its nodes ({listing})"
            suspects = _suspects(members, key, overrides, host_overrides, own_failures)
            rest = {values[n] for n in values if n not in suspects}
            counts = {v: list(values.values()).count(v) for v in set(values.values())}
            majority = [v for v, c in counts.items() if c * 2 > len(values)]
            if suspects and len(rest) == 1:
                right = rest.pop()
                for odd in (n for n in suspects if values[n] != right):
                    name(odd, f"{where}; {odd} is the odd one: {suspects[odd]}")
            elif majority:
                for odd in (n for n, v in values.items() if v != majority[0]):
                    name(odd, f"{where}; check {odd} (a missing or down interface or HCA?), or set {key} "
                              "for the group in nccl_env_overrides")
            else:
                sides = ", ".join(values)
                for odd in values:
                    name(odd, f"{where}; no node's own check tells which is right, so every side ({sides}) "
                              f"is named: check them, or set {key} for the group in nccl_env_overrides")
    return outliers


def nccl_env_group_problems(names, node_groups, settings, networks, overrides=None, host_overrides=None,
                            known_failures=None):
    """Every reason the nodes' settings cannot be written (nccl_env_group_outliers), as one list."""
    problems = []
    for found in nccl_env_group_outliers(names, node_groups, settings, networks, overrides,
                                         host_overrides, known_failures).values():
        problems.extend(problem for problem in found if problem not in problems)
    return problems


def nccl_env_cluster_addresses(nodes, hostvars):
    """{node: its cluster address} as this role's default takes it on the node itself
    (nccl_env_cluster_address, else ansible_host, else the inventory name), for a play that runs
    elsewhere (the preflight, on the submit host)."""
    found = {}
    for node in nodes:
        own = hostvars.get(node) or {}
        found[node] = str(own.get("nccl_env_cluster_address") or own.get("ansible_host") or node)
    return found


def nccl_env_node_overrides(nodes, hostvars, name="nccl_env_overrides"):
    """{node: its inventory dict ``name``} (nccl_env_overrides or nccl_env_host_overrides; {} where
    unset), for a play that runs elsewhere (the preflight, on the submit host)."""
    return {node: dict((hostvars.get(node) or {}).get(name) or {}) for node in nodes}


def nccl_env_read(text):
    """{KEY: value} from an nccl.conf (KEY=value) or an env file (export KEY='value'); comments skipped."""
    settings = {}
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            words = shlex.split(line)
            line = words[1] if len(words) == 2 else ""
        key, sep, value = line.partition("=")
        if sep and KEY_RE.match(key.strip()):
            settings[key.strip()] = value.strip()
    return settings


def nccl_env_socket_interface(settings, network):
    """(interface, IPv4 address) NCCL's sockets use on this node: the first up interface with an
    address that NCCL_SOCKET_IFNAME selects (=eth0 selects eth0 exactly, eth a prefix);
    (None, None) when it is unset or excludes (NCCL then chooses) or nothing matches."""
    if not (settings or {}).get("NCCL_SOCKET_IFNAME"):
        return None, None
    exclude, exact, entries = _list_entries(settings["NCCL_SOCKET_IFNAME"])
    if exclude:
        return None, None
    for entry in entries:
        for iface in (network or {}).get("interfaces", []):
            if _matches(entry, [iface["name"]], exact) and iface.get("ipv4") and interface_is_up(iface):
                return iface["name"], iface["ipv4"][0]
    return None, None


def nccl_env_socket_address(settings, network):
    """The IPv4 address of nccl_env_socket_interface; None when NCCL chooses."""
    return nccl_env_socket_interface(settings, network)[1]


def nccl_env_check_problems(names, node_groups, conf_settings, job_settings, networks, conf_path="/etc/nccl.conf",
                            overrides=None, host_overrides=None):
    """A preflight's view of the written NCCL settings: what each node's nccl.conf says and what a
    job (nccl.conf, then the group's env file over it) uses, each against the node's hardware
    and the other nodes of its group. A node without an nccl.conf (None) is named once.
    overrides, host_overrides: each node's inventory overrides, which name the odd node as
    provision.yml does."""
    problems = []
    missing = [name for name, conf in zip(names, conf_settings) if conf is None]
    problems += [f"{name}: {conf_path} is missing (NCCL reads it on every node); run provision.yml" for name in missing]
    present = [i for i, conf in enumerate(conf_settings) if conf is not None]
    # A node whose nccl.conf fails its own check is the odd one in what a job reads too, where the
    # group's env file hides the failing value.
    conf_failures = nccl_env_own_failures([names[i] for i in present], [conf_settings[i] for i in present],
                                          [networks[i] for i in present])
    seen = set()
    for where, settings, indexes in (
            (f"in {conf_path}; provision.yml writes it anew", conf_settings, present),
            (f"as a job reads it: {conf_path} with the group's env file over it", job_settings, range(len(names)))):
        found = nccl_env_group_problems([names[i] for i in indexes], [node_groups[i] for i in indexes],
                                        [settings[i] for i in indexes], [networks[i] for i in indexes],
                                        [(overrides or [{}] * len(names))[i] for i in indexes],
                                        [(host_overrides or [{}] * len(names))[i] for i in indexes], conf_failures)
        problems += [f"{problem} ({where})" for problem in found if problem not in seen]
        seen.update(found)
    return problems


class FilterModule:
    def filters(self):
        return {
            "nccl_env_merge": nccl_env_merge,
            "nccl_env_conf_settings": nccl_env_conf_settings,
            "nccl_env_overrides_of": nccl_env_overrides_of,
            "nccl_env_input_problems": nccl_env_input_problems,
            "nccl_env_setting_problems": nccl_env_setting_problems,
            "nccl_env_group_problems": nccl_env_group_problems,
            "nccl_env_group_outliers": nccl_env_group_outliers,
            "nccl_env_read": nccl_env_read,
            "nccl_env_cluster_addresses": nccl_env_cluster_addresses,
            "nccl_env_node_overrides": nccl_env_node_overrides,
            "nccl_env_socket_address": nccl_env_socket_address,
            "nccl_env_check_problems": nccl_env_check_problems,
        }
