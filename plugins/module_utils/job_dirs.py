"""A user's private job directory on a shared NAS: made refusing what another user planted there,
the training code staged into it, the launch's run picked and made, the job's files written.

The rules of the job_dir module, shared with slurm_job, which stages a launch's job and submits it
in one module run (its internal `stage` takes the job_dir module's options, STAGE_SPEC)."""

import base64
import binascii
import difflib
import errno
import hashlib
import fcntl
import io
import json
import os
import pwd
import re
import shutil
import stat
import tarfile
import tempfile

# Whether a directory (maybe not made yet) can take writes: the rule of the writable_dir module too,
# which the launch's staging applies to the jobs directory in the same look at the NAS.
MB = 1024 * 1024


def existing_directory(path):
    """The path, or its nearest ancestor that exists."""
    while not os.path.lexists(path):
        path = os.path.dirname(path)
    return path


def problem_with(directory, min_free_mb, try_write, writes_here=True):
    """Why the directory cannot take the writes, or None; and its free space in MB.

    With try_write, a temporary file is really made and removed: that also catches root squash
    and quotas, which access() does not see. Without writes_here only its filesystem's free space
    counts (the writes go to a directory below it that someone else makes)."""
    if not os.path.isdir(directory):
        return f"{directory} is not a directory", None
    stats = os.statvfs(directory)
    free_mb = stats.f_bavail * stats.f_frsize // MB
    # Whoever makes the directories below, nothing is written on a read-only filesystem.
    if stats.f_flag & os.ST_RDONLY:
        return f"{directory} is not writable (read-only filesystem)", free_mb
    if not writes_here:
        try_write = False
    elif not os.access(directory, os.W_OK | os.X_OK):
        return f"{directory} is not writable", free_mb
    if try_write:
        try:
            handle, name = tempfile.mkstemp(prefix=".write-test-", dir=directory)
            os.close(handle)
            os.unlink(name)
        except OSError as error:
            return f"{directory} cannot be written: {error.strerror}", free_mb
    if free_mb < min_free_mb:
        return f"{directory} has {free_mb} MB free, {min_free_mb} MB are needed (is the filesystem full?)", free_mb
    return None, free_mb


NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
HASH_RE = re.compile(r"^[0-9a-f]{8,64}$")
MODE_RE = re.compile(r"^0?[0-7]{3}$")
RUN_ID_RE = re.compile(r"^[1-9][0-9]{0,8}$")
# How a run ended that leaves work to do: its checkpoint is resumed by the next launch.
# REQUEUE_LIMIT (and FAILED with exit code 75) is templates/train.sbatch.j2's run over its restarts.
RESUMABLE_STATES = ("TIMEOUT", "PREEMPTED", "NODE_FAIL", "REQUEUE_LIMIT")
REQUEUE_LIMIT_EXIT_CODE = 75
# templates/train.sbatch.j2's word for a run whose failed attempt did not advance its checkpoint.
NO_PROGRESS = "NO_PROGRESS"
# A run's request (what it trains), written when the run is taken: only a launch of the same
# request resumes the run.
REQUEST_FILE = "request.json"
# The job's own files in its run's directory (the directory it runs in), which the job script
# names relative to it: the mark the job leaves as it ends ('%j': the job id), for the launch that
# follows it; and the staged code, <job dir>/code/<hash>/, from <job dir>/runs/<id>/.
END_MARKER_NAME = ".%j.ended"


def code_dir_from_run(code_hash):
    return f"../../code/{code_hash}"
# Held from the look at the runs until the run's job is submitted (release_runs_lock, or the
# module's end): two launches of one job name take a run and submit one at a time. A file, not
# the directory: an exclusive flock on NFS is a write lock, which needs a descriptor open for writing.
RUNS_LOCK = ".lock"
_held_locks = []


class Refused(Exception):
    """A path the module will not write to, said plainly."""


def owner_name(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def user_dir_remedy(path, user):
    """What fixes a user's own <jobs>/<user>/ that someone else made: only an admin can (the jobs
    root is the NAS owner's, 0711), and provision.yml then makes it the user's."""
    return (f"only an admin can fix it: as root or the NAS owner, mv {path} {path}.planted (or remove it), then "
            f"ansible-playbook provision.yml with {user} in cluster_users, which makes {path} {user}'s")


def open_own_dir(parent_fd, name, path, uid, remedy=None):
    """The directory `name` under parent_fd, opened without following a link; it must be uid's.
    ``remedy``: what fixes one that is not (default: another job name)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent_fd)
    except OSError as error:
        if error.errno == errno.ENOENT:
            return None
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            info = os.lstat(name, dir_fd=parent_fd)
            kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a directory"
            raise Refused(f"{path} is {kind}: refusing to write through it (another user may have planted it; "
                          f"it is {owner_name(info.st_uid)}'s); {remedy or 'remove it, or choose another job name'}"
                          ) from None
        raise Refused(f"cannot open {path}: {error.strerror}") from None
    owner = os.fstat(fd).st_uid
    if owner != uid:
        os.close(fd)
        raise Refused(f"{path} belongs to {owner_name(owner)}, not to {owner_name(uid)}: refusing to write "
                      "into a directory another user controls; "
                      f"{remedy or 'choose another job name or ask them to remove it'}")
    return fd


def open_owned_file(jobs_root, user, uid, path):
    """A descriptor of the regular file ``path`` under ``<jobs_root>/<user>/``, each directory below
    the root opened without following a link and the user's, the file too (a hard link to another
    user's file is not). What root or an operator reads of another user's job: nothing that user
    could have swapped for a link to a file only the reader may read. OSError naming why not."""
    root = os.path.normpath(jobs_root)
    path = "/" + os.path.normpath(path).lstrip("/")
    prefix = f"{root.rstrip('/')}/{user}/"
    if not NAME_RE.match(user) or not path.startswith(prefix):
        raise OSError(errno.EACCES, f"not under {prefix}", path)
    names = [user] + path[len(prefix):].split("/")
    # O_PATH: the root is 0711 (searched, not read) for users.
    fd = os.open(root, os.O_PATH | os.O_DIRECTORY)
    try:
        for index, name in enumerate(names):
            last = index == len(names) - 1
            flags = os.O_RDONLY | os.O_NOFOLLOW | (os.O_NONBLOCK if last else os.O_DIRECTORY)
            try:
                opened = os.open(name, flags, dir_fd=fd)
            except OSError as error:
                if error.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise OSError(error.errno, "a link or not a directory on the way", path) from None
                raise OSError(error.errno, error.strerror, path) from None
            os.close(fd)
            fd = opened
            info = os.fstat(fd)
            if info.st_uid != uid:
                raise OSError(errno.EPERM, f"{'file' if last else 'directory'} of {owner_name(info.st_uid)}, "
                              f"not of {user}", path)
            if last and not stat.S_ISREG(info.st_mode):
                raise OSError(errno.EINVAL, "not a regular file", path)
        opened, fd = fd, None
        return opened
    finally:
        if fd is not None:
            os.close(fd)


def extract(archive, destination, file_mode):
    """Regular files and directories only, each inside destination: the archive is ours, but cheap to check.
    ``archive`` is a path, or the archive's bytes (O(code_archive_inline))."""
    opened = tarfile.open(fileobj=io.BytesIO(archive)) if isinstance(archive, bytes) else tarfile.open(archive)
    with opened as tar:
        members = tar.getmembers()
        for member in members:
            parts = member.name.split("/")
            if member.name.startswith("/") or ".." in parts or not (member.isfile() or member.isdir()):
                raise Refused(f"code archive member {member.name!r} is not a plain relative file")
        for member in members:
            target = os.path.join(destination, member.name)
            if member.isdir():
                os.makedirs(target, exist_ok=True)
                continue
            os.makedirs(os.path.dirname(target), exist_ok=True)
            source = tar.extractfile(member)
            mode = file_mode if member.mode & stat.S_IXUSR else file_mode & 0o666
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
            with os.fdopen(fd, "wb") as out:
                shutil.copyfileobj(source, out)
                os.fchmod(out.fileno(), mode)  # the umask narrowed O_CREAT's mode
    # Directories get the mode exactly, as the job's own do (makedirs' is narrowed by the umask);
    # fwalk opens each one without following a link.
    for _, _, _, fd in os.fwalk(destination):
        os.fchmod(fd, file_mode)


def read_json_at(dir_fd, name):
    """A JSON object from the file `name` under dir_fd (not through a link), or None."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError:
        return None
    with os.fdopen(fd) as handle:
        try:
            data = json.load(handle)
        except ValueError:
            return None
    return data if isinstance(data, dict) else None


def open_dir_at(dir_fd, name):
    try:
        return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError:
        return None


def list_runs(runs_fd):
    """{run id: {"record": run.json or None, "request": request.json or None, "step": the
    checkpoint's step or None}}."""
    runs = {}
    for name in os.listdir(runs_fd):
        fd = open_dir_at(runs_fd, name) if RUN_ID_RE.match(name) else None
        if fd is None:
            continue
        try:
            checkpoints = open_dir_at(fd, "checkpoints")
            step = None
            if checkpoints is not None:
                step = (read_json_at(checkpoints, "checkpoint.json") or {}).get("step")
                os.close(checkpoints)
            runs[int(name)] = {"record": read_json_at(fd, "run.json"), "request": read_json_at(fd, REQUEST_FILE),
                               "step": step if isinstance(step, int) and not isinstance(step, bool) else None}
        finally:
            os.close(fd)
    return runs


def end_state(record):
    """The run's final state as its record says it: Slurm's word (CANCELLED by 0 -> CANCELLED)."""
    words = str(record.get("state") or "").split()
    state = words[0] if words else "UNKNOWN"
    if state == "FAILED" and record.get("exit_code") == REQUEUE_LIMIT_EXIT_CODE:
        return "REQUEUE_LIMIT"
    return state


def _words(value):
    """A request's value as a person reads it: arguments as on a command line."""
    if value in ([], None, ""):
        return "(none)"
    if isinstance(value, list) and not any(isinstance(item, (list, dict)) for item in value):
        return " ".join(str(item) for item in value)
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else str(value)


def _args_difference(old, new):
    """'--lr 0.1, not --lr 0.01': the words that differ, each with the option before it."""
    spans = []
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    for tag, old_start, old_end, new_start, new_end in matcher.get_opcodes():
        if tag == "equal":
            continue
        # The option a changed value belongs to, when it is the same on both sides.
        if old_start and new_start and old[old_start - 1] == new[new_start - 1] and str(old[old_start - 1]).startswith("-"):
            old_start, new_start = old_start - 1, new_start - 1
        spans.append(f"{_words(old[old_start:old_end])}, not {_words(new[new_start:new_end])}")
    return "; ".join(spans)


def request_differences(recorded, request):
    """How a run's recorded request differs from a launch's, one phrase per key ([] when the same)."""
    if recorded is None:
        return ["it recorded no request"]
    differences = []
    for key in sorted(set(recorded) | set(request)):
        old, new = recorded.get(key), request.get(key)
        if old == new:
            continue
        if key == "script_args" and isinstance(old, list) and isinstance(new, list):
            differences.append(_args_difference(old, new))
        else:
            differences.append(f"{key} {_words(old)}, not {_words(new)}")
    return differences


def plan_run(runs, resume, request, force=False):
    """What a launch of ``request`` does with the job's runs (list_runs): a dict of run_id,
    resumed, why (a phrase), other_request (why the newest run was not resumed, when it is another
    request) and differences (the resumed run's request against this one, when force took a run
    of another request)."""
    if resume not in ("auto", "never") and not RUN_ID_RE.match(resume):
        raise Refused(f"resume={resume!r} is not allowed: give auto (resume an unfinished run), never "
                      "(always a fresh run) or a run id such as 2")
    newest = max(runs, default=0)
    fresh = {"run_id": newest + 1, "resumed": False, "differences": [], "other_request": ""}
    if resume == "never":
        return {**fresh, "why": "resume=never"}
    if resume != "auto":
        run = int(resume)
        if run not in runs:
            have = ", ".join(str(one) for one in sorted(runs)) or "none yet"
            raise Refused(f"resume={resume}: this job has no run {resume} (its runs: {have})")
        differences = request_differences(runs[run]["request"], request)
        if differences and not force:
            raise Refused(f"resume={resume}: run {resume} is another request: {'; '.join(differences)}. "
                          f"Launch it as it was, or give resume=auto for a fresh run of this one, or force=true "
                          f"to resume run {resume} with this request")
        return {"run_id": run, "resumed": True, "why": f"resume={resume}", "differences": differences,
                "other_request": ""}
    if not newest:
        return {**fresh, "why": "the job's first run"}
    if runs[newest]["request"] != request:
        fresh["other_request"] = (f"run {newest} is another request: "
                                  f"{'; '.join(request_differences(runs[newest]['request'], request))}")
    same = [run for run in sorted(runs, reverse=True) if runs[run]["request"] == request]
    if not same:
        return {**fresh, "why": fresh["other_request"]}
    run, record = same[0], runs[same[0]]["record"]
    resumed = {**fresh, "run_id": run, "resumed": True}
    if record is None:
        return {**resumed, "why": f"run {run} has recorded no end (still pending or running, or ended without a word)"}
    state = end_state(record)
    if state in RESUMABLE_STATES:
        return {**resumed, "why": f"run {run} ended {state}"}
    if state == NO_PROGRESS:
        # Resuming it would fail at the same step again: a person decides.
        at = f" at step {record['step']}" if isinstance(record.get("step"), int) else ""
        raise Refused(f"run {run} of this request stopped NO_PROGRESS: it failed{at} again without advancing "
                      f"its checkpoint (step {record.get('checkpoint_step')}), so resume=auto does not resume it. "
                      f"Give resume={run} to try it again from that checkpoint, or resume=never for a fresh run; "
                      "or change the script, whose new request starts a fresh run")
    return {**fresh, "why": f"run {run} of this request ended {state}"}


def _lock_runs(runs_fd, runs_path, uid):
    """Take the job's runs lock (RUNS_LOCK), held until release_runs_lock or this process's end."""
    fd = os.open(RUNS_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600, dir_fd=runs_fd)
    if os.fstat(fd).st_uid != uid:
        os.close(fd)
        raise Refused(f"{os.path.join(runs_path, RUNS_LOCK)} belongs to another user: remove it")
    fcntl.flock(fd, fcntl.LOCK_EX)
    _held_locks.append(fd)


def release_runs_lock():
    """Let the next launch of the job name look at its runs (slurm_job: once its sbatch is done)."""
    while _held_locks:
        os.close(_held_locks.pop())


def _write_request(run_fd, request):
    fd = os.open(REQUEST_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=run_fd)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(request, out, sort_keys=True)
        out.write("\n")


def take_run(params, job_fd, job_dir, uid, mode, dry, result):
    """Pick the launch's run (plan_run) and, unless dry, make its directory with the request
    recorded in it, under the runs lock; fills result."""
    request = {**(params["request"] or {}), "code_hash": params["code_hash"] or ""}
    runs_path = os.path.join(job_dir, "runs")
    runs_fd = open_own_dir(job_fd, "runs", runs_path, uid) if job_fd is not None else None
    if runs_fd is None and not dry:
        os.mkdir("runs", mode, dir_fd=job_fd)
        result.update(changed=True, made=result["made"] + [runs_path])
        runs_fd = open_own_dir(job_fd, "runs", runs_path, uid)
    try:
        if not dry:
            _lock_runs(runs_fd, runs_path, uid)
        runs = list_runs(runs_fd) if runs_fd is not None else {}
        plan = plan_run(runs, params["resume"], request, params["force"])
        run_id = plan["run_id"]
        if not plan["resumed"] and not dry:
            while True:  # taken by an earlier version's launch, which held no lock
                try:
                    os.mkdir(str(run_id), mode, dir_fd=runs_fd)
                    break
                except FileExistsError:
                    run_id += 1
            run_fd = open_own_dir(runs_fd, str(run_id), os.path.join(runs_path, str(run_id)), uid)
            try:
                _write_request(run_fd, request)
            except BaseException:
                os.rmdir(str(run_id), dir_fd=runs_fd)
                raise
            finally:
                os.close(run_fd)
            result["changed"] = True
        if not plan["resumed"]:
            result["made"] = result["made"] + [os.path.join(runs_path, str(run_id))]
        elif not dry:
            os.close(open_own_dir(runs_fd, str(run_id), os.path.join(runs_path, str(run_id)), uid))
    finally:
        if runs_fd is not None:
            os.close(runs_fd)
    result.update(run_id=run_id, run_dir=os.path.join(runs_path, str(run_id)), resumed=plan["resumed"],
                  resumed_step=runs[run_id]["step"] if plan["resumed"] else None, run_reason=plan["why"],
                  other_request=plan["other_request"], request_differences=plan["differences"])


def missing_files(paths):
    """The paths that are not regular files this user can read (a link to one counts: the job follows it)."""
    return [path for path in paths if not (os.path.isfile(path) and os.access(path, os.R_OK))]


def check_files(files):
    """The files to write, as {name: (text, mode)}; a bad name or mode is refused before anything is made."""
    checked = {}
    for spec in files:
        name = spec["name"]
        if not NAME_RE.match(name) or name in checked:
            raise Refused(f"files: {name!r} is not a file name of one path component (letters, digits, '_', '.', '-') "
                          "given once")
        if not MODE_RE.match(spec["mode"]):
            raise Refused(f"files: {name} has mode={spec['mode']!r}: give an octal string such as 0644")
        checked[name] = (spec["content"], int(spec["mode"], 8))
    return checked


def same_file(dir_fd, name, data, mode):
    """Whether `name` under dir_fd is already a regular file (not a link) of that content and mode;
    a FIFO put there is not waited on."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or stat.S_IMODE(info.st_mode) != mode or info.st_size != len(data):
            return False
        return handle.read() == data


def write_files(dir_fd, files, dry):
    """Write the files that differ into dir_fd, each through a temporary file renamed into place;
    returns their names (those that would be written, if dry)."""
    written = []
    for name, (data, mode) in sorted(files.items()):
        if same_file(dir_fd, name, data, mode):
            continue
        written.append(name)
        if dry:
            continue
        partial = f".{name}.partial-{os.urandom(4).hex()}"
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode, dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                os.fchmod(out.fileno(), mode)  # the umask narrowed O_CREAT's mode
            # A link in its place is replaced, never followed.
            os.rename(partial, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            try:
                os.unlink(partial, dir_fd=dir_fd)
            except OSError:
                pass
            raise
    return written


def write_job_files(params, files, job_fd, uid, dry, result):
    """The job's files into the run's directory (the job's without resume); fills result."""
    if not files:
        return
    files = {name: (text.encode(), mode) for name, (text, mode) in files.items()}
    if job_fd is None:  # dry, and the job's directory is not made yet
        result["files_written"] = sorted(files)
        return
    target_fd, opened = job_fd, []
    try:
        if params["resume"]:
            runs_path = os.path.join(result["job_dir"], "runs")
            runs_fd = open_own_dir(job_fd, "runs", runs_path, uid)
            if runs_fd is not None:
                opened.append(runs_fd)
                target_fd = open_own_dir(runs_fd, str(result["run_id"]), result["run_dir"], uid)
                if target_fd is not None:
                    opened.append(target_fd)
            if runs_fd is None or target_fd is None:  # dry, and the run is not made yet
                result["files_written"] = sorted(files)
                return
        result["files_written"] = write_files(target_fd, files, dry)
        if result["files_written"]:
            result["changed"] = True
    finally:
        for fd in opened:
            os.close(fd)


def stage(params, check_mode, known=None):
    """Make the user's job directory, stage the code, take the run and write the job's files, in
    that order, as STAGE_SPEC's ``params`` say; returns the result the job_dir module documents.
    ``known``: what the caller found out that the result reports (the partition of the nodes).

    Nothing is made while a file of O(expect_files) is missing; nothing past the code's directory
    while the code is missing and no archive of it came (the caller sends it and runs this again)."""
    uid = os.geteuid()
    user = owner_name(uid)
    if not NAME_RE.match(user):
        raise Refused(f"user name {user!r} cannot be a path component")
    if not NAME_RE.match(params["job_name"]):
        raise Refused(f"job_name={params['job_name']!r}: use letters, digits, '_', '.' and '-'")
    if not MODE_RE.match(params["mode"]):
        raise Refused(f"mode={params['mode']!r}: give an octal mode such as 0700 or 0750")
    mode = int(params["mode"], 8)
    if mode & 0o700 != 0o700 or mode & ~0o750:
        # A group that may write could change the staged code, which the job runs as its owner.
        raise Refused(f"mode={params['mode']}: at most 0750 and the owner needs rwx (0700, or 0750 for a group that "
                      "reads the jobs); the group may not write (it could change the code a job runs as its owner), "
                      "others get nothing")
    code_hash = params["code_hash"] or ""
    if code_hash and not HASH_RE.match(code_hash):
        raise Refused(f"code_hash={code_hash!r} is not a hex digest")
    dry = params["probe"] or check_mode
    files = check_files(params["files"])
    root = params["jobs_root"]
    job_dir = os.path.join(root, user, params["job_name"])
    code_dir = os.path.join(job_dir, "code", code_hash) if code_hash else ""
    result = dict(changed=False, user=user, job_dir=job_dir, code_dir=code_dir, code_present=False,
                  code_copied=False, made=[], run_id=None, run_dir="", resumed=False, resumed_step=None,
                  run_reason="", other_request="", request_differences=[], missing_files=missing_files(params["expect_files"]), files_written=[],
                  free_mb=None, **(known or {}))
    if result["missing_files"] and not dry:
        return result  # the job would not find them: nothing is made for it
    if params["min_free_mb"] is not None:
        # The user's own directory takes the writes; the jobs root (0711, the NAS owner's) does not,
        # and one not made yet is refused below, saying who makes it.
        user_dir = os.path.join(os.path.normpath(root), user)
        own = os.path.isdir(user_dir) and not os.path.islink(user_dir)
        problem, result["free_mb"] = problem_with(user_dir if own else existing_directory(os.path.normpath(root)),
                                                  params["min_free_mb"], try_write=not check_mode, writes_here=own)
        if problem:
            raise Refused(f"{root}: {problem}")
    try:
        # O_PATH: the root is 0711 (searched, not read) for users.
        root_fd = os.open(root, os.O_PATH | os.O_DIRECTORY)
    except OSError as error:
        raise Refused(f"jobs directory {root}: {error.strerror} (provision.yml makes it)") from None

    fds = [root_fd]
    try:
        path = root
        for name in (user, params["job_name"], "code"):
            path = os.path.join(path, name)
            remedy = user_dir_remedy(path, user) if name is user else None
            fd = open_own_dir(fds[-1], name, path, uid, remedy)
            if fd is None:
                result["made"].append(path)
                result["changed"] = True
                if dry:
                    job_fd = fds[2] if len(fds) > 2 else None
                    if params["resume"]:  # no runs yet: the first
                        take_run(params, job_fd, job_dir, uid, mode, dry, result)
                    write_job_files(params, files, job_fd, uid, dry, result)
                    return result  # nothing below a missing directory exists yet
                try:
                    os.mkdir(name, mode, dir_fd=fds[-1])
                except PermissionError:
                    if name is not user:
                        raise
                    # The jobs root is the NAS owner's (0711): no user makes a directory there, so no
                    # user can make another's first.
                    raise Refused(f"{path} does not exist, and {user} cannot make it in {root} (provision.yml "
                                  f"makes each user's): ask an admin to add {user} to cluster_users and run "
                                  "ansible-playbook provision.yml") from None
                fd = open_own_dir(fds[-1], name, path, uid, remedy)
            fds.append(fd)
            if stat.S_IMODE(os.fstat(fd).st_mode) != mode:
                result["changed"] = True
                if not dry:
                    os.fchmod(fd, mode)
        if code_hash and not stage_code(params, fds[-1], path, code_dir, uid, mode, dry, result):
            return result  # the code first: the caller sends it, and this runs again
        if params["resume"]:
            take_run(params, fds[2], job_dir, uid, mode, dry, result)
        write_job_files(params, files, fds[2], uid, dry, result)
        return result
    finally:
        for fd in fds:
            os.close(fd)
        if params["code_archive"] and not dry:
            try:
                os.unlink(params["code_archive"])
            except OSError:
                pass


def stage_code(params, code_fd, code_root, code_dir, uid, mode, dry, result):
    """Whether the code of params' hash is in place (or, dry, may be planned around): there
    already, or extracted from O(code_archive) into a temporary directory and renamed into place."""
    code_hash = params["code_hash"]
    existing = open_own_dir(code_fd, code_hash, code_dir, uid)
    if existing is not None:
        try:
            # Staged earlier, maybe changed since (by a group that could write there): what the job
            # runs must still be what its name says.
            check_code(existing, code_fd, code_hash, code_dir)
        finally:
            os.close(existing)
        result["code_present"] = True
        return True
    if dry:
        return True
    archive = params["code_archive"]
    if not archive and params["code_archive_inline"]:
        try:
            archive = base64.b64decode(params["code_archive_inline"], validate=True)
        except binascii.Error:
            raise Refused("code_archive_inline is not base64 text") from None
    if not archive:
        return False
    partial = tempfile.mkdtemp(prefix=f".{code_hash}.partial-", dir=code_root)
    try:
        partial_fd = os.open(partial, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            os.fchmod(partial_fd, mode)
            extract(archive, partial, mode & 0o777)
            manifest = code_manifest(partial_fd)
        finally:
            os.close(partial_fd)
        try:
            os.rename(partial, code_dir)
        except OSError as error:
            if error.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
            # Another launch of the same code got there first: its copy is the same.
            shutil.rmtree(partial)
            check = open_own_dir(code_fd, code_hash, code_dir, uid)
            os.close(check)
        write_manifest(code_fd, code_hash, manifest)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    result.update(changed=True, code_copied=True)
    return True


# Python's bytecode cache, which a job's or the preflight's Python writes beside the staged code it
# imports (the owner's own processes: only the owner may write the code's directory). Never staged
# (the controller's list_code skips it too), so not part of the code's manifest.
BYTECODE_CACHE_DIR = "__pycache__"


def code_manifest(dir_fd, prefix=""):
    """[(relative path, 'x' or '-', sha256)] of every file under dir_fd, sorted, as the launch's
    content hash lists them (plugins/action/slurm_job.py's content_hash), Python's bytecode caches
    left out; anything but a regular file or a directory (a link) is refused, naming it."""
    entries = []
    for name in sorted(os.listdir(dir_fd)):
        path = f"{prefix}{name}"
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if name == BYTECODE_CACHE_DIR and stat.S_ISDIR(info.st_mode):
            continue
        if stat.S_ISDIR(info.st_mode):
            sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
            try:
                entries += code_manifest(sub, f"{path}/")
            finally:
                os.close(sub)
        elif stat.S_ISREG(info.st_mode):
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
            with os.fdopen(fd, "rb") as handle:
                digest = hashlib.file_digest(handle, "sha256").hexdigest()
            entries.append((path, "x" if info.st_mode & stat.S_IXUSR else "-", digest))
        else:
            raise Refused(f"{path} is not a regular file")
    return sorted(entries)


def manifest_digest(entries, digits):
    """The content hash of a manifest's files, as the launch computes it (its first ``digits``)."""
    digest = hashlib.sha256()
    for name, executable, file_digest in entries:
        digest.update(f"{name}\0{executable}\0{file_digest}\n".encode())
    return digest.hexdigest()[:digits]


def write_manifest(code_fd, code_hash, entries):
    """code/<hash>.manifest, read-only: what was staged, to name what changed in place later."""
    partial = f".{code_hash}.manifest.partial-{os.urandom(4).hex()}"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o400, dir_fd=code_fd)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.writelines(f"{executable} {file_digest} {name}\n" for name, executable, file_digest in entries)
        os.fchmod(out.fileno(), 0o400)
    os.rename(partial, f"{code_hash}.manifest", src_dir_fd=code_fd, dst_dir_fd=code_fd)


def read_manifest(code_fd, code_hash):
    """The manifest written as the code was staged, or None (none, or not a plain file of ours)."""
    try:
        fd = os.open(f"{code_hash}.manifest", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=code_fd)
    except OSError:
        return None
    with os.fdopen(fd, encoding="utf-8") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o222:
            return None
        entries = []
        for line in handle:
            parts = line.rstrip("\n").split(" ", 2)
            if len(parts) == 3:
                entries.append((parts[2], parts[0], parts[1]))
    return sorted(entries)


def check_code(dir_fd, code_fd, code_hash, code_dir):
    """Refuse staged code that is no longer what its hash names, naming the files that differ from
    its manifest (or, without one, the code as a whole)."""
    try:
        found = code_manifest(dir_fd)
    except Refused as error:
        raise Refused(f"{code_dir}: {error}, and staged code holds only files: it was changed since it was "
                      f"staged; not running it. Remove {code_dir} (rm -r) and launch again") from None
    # The manifest is the user's own (a group member cannot make a file of theirs); without one
    # (removed, or code staged before manifests), the hash itself.
    staged = read_manifest(code_fd, code_hash)
    if staged is None:
        if manifest_digest(found, len(code_hash)) == code_hash:
            return
        what = f"the code in {code_dir}"
    else:
        before, now = {e[0]: e[1:] for e in staged}, {e[0]: e[1:] for e in found}
        changed = sorted(name for name in set(before) | set(now) if before.get(name) != now.get(name))
        if not changed:
            return
        what = ", ".join(f"{code_dir}/{name}" for name in changed)
    raise Refused(f"{what} changed since it was staged (it no longer matches its hash {code_hash}): not running "
                  f"it as yours. Someone who may write there changed it; remove {code_dir} (rm -r) and launch again "
                  "to stage your code afresh")


# The job_dir module's options; slurm_job's internal `stage` takes the same.
STAGE_SPEC = dict(
    jobs_root=dict(type="path", required=True),
    job_name=dict(type="str", required=True),
    mode=dict(type="str", default="0700"),
    code_hash=dict(type="str"),
    code_archive=dict(type="path"),
    code_archive_inline=dict(type="str", no_log=True),
    probe=dict(type="bool", default=False),
    resume=dict(type="str", default=""),
    # What the run trains (script, arguments, sweep, env names, shape), code_hash added here.
    request=dict(type="dict", default={}),
    force=dict(type="bool", default=False),
    expect_files=dict(type="list", elements="path", default=[]),
    min_free_mb=dict(type="int"),
    files=dict(type="list", elements="dict", default=[], options=dict(
        name=dict(type="str", required=True),
        content=dict(type="str", required=True, no_log=True),
        mode=dict(type="str", default="0644"))),
    # Read by the action plugin on the controller.
    code_dir=dict(type="path"),
    script=dict(type="path"),
    code_files=dict(type="list", elements="path"),
    max_mb=dict(type="int", default=100),
)
