#!/usr/bin/env python3
"""A user's bad nodes: the nodes that failed one of their jobs, kept out of their next ones.

One record per user, ``<jobs>/<user>/nodes.json`` on the NAS (RECORD_NAME), in the user's own job
tree: node -> why (REASONS), since when, until when, and the job that found it. The job script
marks a node (``mark_bad_node NODE REASON``, which runs this file as a program with the job's
Python); a launch by node group leaves the unexpired ones out (``sbatch --exclude``), a launch given
a node list holding one is refused; jobs.yml lists them and forgets one.

Standard library only and whole in itself: the job side runs this very file, staged into the run's
directory, where no collection is installed. Opened as job_dirs.py opens the NAS: each directory
without following a link and the user's own, the record the user's regular file, written to a
temporary file and renamed (0600); a planted link or another user's file is refused, naming it.

    python bad_nodes.py mark JOBS_ROOT NODE REASON HOURS JOB_ID
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import pwd
import re
import stat
import sys
import time

RECORD_NAME = "nodes.json"
# Held while the record is read, changed and written: two jobs of the user may mark at once. A
# file, not the directory: an exclusive flock on NFS is a write lock, which needs a file open for writing.
LOCK_NAME = ".nodes.json.lock"
# NODE_FAIL: a node Slurm found failed under the job; GPU_CHECK: the job's GPU check failed there;
# HUNG: the hang watchdog named it; HEALTH: the health gate found it failing or slow.
REASONS = ("NODE_FAIL", "GPU_CHECK", "HUNG", "HEALTH")
# Slurm's node names (module_utils/slurm.py's rule, restated: this file stands alone on the nodes).
NODE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
USER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
MAX_RECORD_BYTES = 1024 * 1024


class Refused(Exception):
    """A record this file will not read or write, said plainly."""


class UserDirRefused(Refused):
    """The user's own directory under the jobs root is not theirs to use: the staging of a launch
    refuses the same directory with the admin's fix, so a launch leaves the telling to it."""


def owner_name(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def record_path(jobs_root, user):
    return os.path.join(jobs_root, user, RECORD_NAME)


# ---------------------------------------------------------------------------
# The rules: read, add, expire, forget (pure; ``now`` in seconds since the epoch)
# ---------------------------------------------------------------------------

def check_node(node):
    if not isinstance(node, str) or not NODE_RE.match(node):
        raise ValueError(f"node {node!r} is no node name (letters, digits, '.', '_' and '-')")
    return node


def parse(data):
    """{node: record} of a record file's JSON, every well-formed entry; what is not is left out
    (a hand edit gone wrong costs that entry, not the user's launches)."""
    nodes = data.get("nodes") if isinstance(data, dict) else None
    records = {}
    for node, entry in (nodes or {}).items() if isinstance(nodes, dict) else ():
        if not (isinstance(node, str) and NODE_RE.match(node) and isinstance(entry, dict)):
            continue
        since, until, job_id = entry.get("since"), entry.get("until"), entry.get("job_id")
        if entry.get("reason") not in REASONS or not all(
                isinstance(value, (int, float)) and not isinstance(value, bool) for value in (since, until)):
            continue
        records[node] = {"reason": entry["reason"], "since": int(since), "until": int(until),
                         "job_id": job_id if isinstance(job_id, int) and not isinstance(job_id, bool) else None}
    return records


def add(records, node, reason, job_id, hours, now):
    """``records`` with ``node`` marked bad for ``reason`` by ``job_id`` from ``now`` for ``hours``:
    the newest mark says why; it is kept until the later of the two ends."""
    check_node(node)
    if reason not in REASONS:
        raise ValueError(f"reason {reason!r} is not one of {', '.join(REASONS)}")
    if isinstance(hours, bool) or not isinstance(hours, (int, float)) or hours <= 0:
        raise ValueError(f"hours {hours!r}: give how many hours to keep the node out, more than 0")
    until = int(now + hours * 3600)
    earlier = records.get(node)
    if earlier:
        until = max(until, earlier["until"])
    return {**records, node: {"reason": reason, "since": int(now), "until": until, "job_id": job_id}}


def unexpired(records, now=None):
    now = time.time() if now is None else now
    return {node: record for node, record in records.items() if record["until"] > now}


def forget(records, node):
    return {name: record for name, record in records.items() if name != node}


def _when(seconds):
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(seconds))


def describe(node, record):
    """'node111: NODE_FAIL in job 12 at 2026-12-07 05:50 UTC, kept out until 2026-12-08 05:50 UTC'."""
    job = f" in job {record['job_id']}" if record.get("job_id") is not None else ""
    return f"{node}: {record['reason']}{job} at {_when(record['since'])}, kept out until {_when(record['until'])}"


def listed(records):
    """The records as a list, each with its line, oldest mark first (what jobs.yml shows)."""
    return [{"node": node, **record, "line": describe(node, record)}
            for node, record in sorted(records.items(), key=lambda item: (item[1]["since"], item[0]))]


# ---------------------------------------------------------------------------
# The record on the NAS
# ---------------------------------------------------------------------------

def _user_dir(jobs_root, uid):
    """A descriptor of ``<jobs_root>/<user>/``, opened without following a link; it must be uid's."""
    user = owner_name(uid)
    if not USER_RE.match(user):
        raise Refused(f"user name {user!r} cannot be a path component")
    path = os.path.join(jobs_root, user)
    try:
        # O_PATH: the jobs root is 0711 (searched, not read) for users.
        root_fd = os.open(jobs_root, os.O_PATH | os.O_DIRECTORY)
    except OSError as error:
        if error.errno == errno.ENOENT:
            return None, path  # nothing recorded where nothing was made
        raise Refused(f"jobs directory {jobs_root}: {error.strerror}") from None
    try:
        try:
            fd = os.open(user, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=root_fd)
        except OSError as error:
            if error.errno == errno.ENOENT:
                return None, path
            if error.errno in (errno.ELOOP, errno.ENOTDIR):
                raise UserDirRefused(f"{path} is a link or not a directory: refusing to read or write your bad nodes "
                              "through it (another user may have planted it); an admin moves it away and runs "
                              "provision.yml, which makes it yours") from None
            raise Refused(f"cannot open {path}: {error.strerror}") from None
    finally:
        os.close(root_fd)
    owner = os.fstat(fd).st_uid
    if owner != uid:
        os.close(fd)
        raise UserDirRefused(f"{path} belongs to {owner_name(owner)}, not to {user}: refusing to keep your bad nodes in a "
                      "directory another user controls")
    return fd, path


def _read_at(dir_fd, path, uid):
    try:
        fd = os.open(RECORD_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError as error:
        if error.errno == errno.ENOENT:
            return {}
        if error.errno == errno.ELOOP:
            raise Refused(f"{path} is a symbolic link: refusing to read it as your bad nodes (another user may "
                          f"have planted it); remove it (rm {path})") from None
        raise Refused(f"cannot read {path}: {error.strerror}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):  # checked before fdopen, which refuses a directory in its own words
        os.close(fd)
        raise Refused(f"{path} is not a regular file: remove it")
    with os.fdopen(fd, "rb") as handle:
        if info.st_uid != uid:
            raise Refused(f"{path} belongs to {owner_name(info.st_uid)}, not to {owner_name(uid)}: refusing to "
                          f"take another user's file for your bad nodes; remove it (rm {path})")
        try:
            data = json.loads(handle.read(MAX_RECORD_BYTES).decode("utf-8"))
        except ValueError:
            return {}
    return parse(data)


def read(jobs_root, uid=None):
    """The user's records ({} when there are none yet); Refused for a planted link or another's file."""
    uid = os.geteuid() if uid is None else uid
    dir_fd, path = _user_dir(jobs_root, uid)
    if dir_fd is None:
        return {}
    try:
        return _read_at(dir_fd, os.path.join(path, RECORD_NAME), uid)
    finally:
        os.close(dir_fd)


def _write_at(dir_fd, records):
    partial = f".{RECORD_NAME}.{os.getpid()}.{os.urandom(4).hex()}"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            os.fchmod(out.fileno(), 0o600)
            json.dump({"nodes": records}, out, indent=1, sort_keys=True)
            out.write("\n")
        os.rename(partial, RECORD_NAME, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(partial, dir_fd=dir_fd)
        except OSError:
            pass
        raise


def update(jobs_root, change, now=None, uid=None, dry=False):
    """Apply ``change`` (records -> records) to the user's record under its lock, expired entries
    dropped; written only when something changed, never when ``dry``. Returns (before, after),
    both unexpired."""
    uid = os.geteuid() if uid is None else uid
    now = time.time() if now is None else now
    dir_fd, path = _user_dir(jobs_root, uid)
    if dir_fd is None:
        raise Refused(f"{path} does not exist: provision.yml makes each user's directory (or a first launch does)")
    try:
        lock = None
        if not dry:
            lock = os.open(LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd)
            if os.fstat(lock).st_uid != uid:
                os.close(lock)
                raise Refused(f"{os.path.join(path, LOCK_NAME)} belongs to another user: remove it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            stored = _read_at(dir_fd, os.path.join(path, RECORD_NAME), uid)
            before = unexpired(stored, now)
            after = unexpired(change(before), now)
            if after != stored and not dry:
                _write_at(dir_fd, after)
            return before, after
        finally:
            if lock is not None:
                os.close(lock)
    finally:
        os.close(dir_fd)


def mark_once(jobs_root, nodes, reason, job_id, hours, now=None, uid=None):
    """``nodes`` marked bad for ``reason`` by ``job_id`` in the user's record, but for those this
    job marked already: whoever reports the end of a job again (a second follow of it) does not
    push their expiry. Returns the records of ``nodes`` after (Refused, ValueError as update and add)."""
    now = time.time() if now is None else now

    def change(records):
        for node in nodes:
            if (records.get(node) or {}).get("job_id") != job_id:
                records = add(records, node, reason, job_id, hours, now)
        return records

    _, after = update(jobs_root, change, now=now, uid=uid)
    return {node: after[node] for node in nodes if node in after}


def main(argv):
    """The job side: ``mark JOBS_ROOT NODE REASON HOURS JOB_ID``; prints the node's line."""
    if len(argv) != 6 or argv[0] != "mark":
        print("usage: bad_nodes.py mark JOBS_ROOT NODE REASON HOURS JOB_ID", file=sys.stderr)
        return 2
    _, jobs_root, node, reason, hours, job_id = argv
    try:
        hours, job_id = float(hours), int(job_id)
        _, after = update(jobs_root, lambda records: add(records, node, reason, job_id, hours, time.time()))
    except (ValueError, Refused, OSError) as error:
        print(f"bad node {node} not recorded: {error}", file=sys.stderr)
        return 1
    print(f"bad node {describe(node, after[node])} ({record_path(jobs_root, owner_name(os.geteuid()))})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
