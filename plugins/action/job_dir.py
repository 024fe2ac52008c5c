"""job_dir action: stage the training code from the controller into the job's directory on the NAS.

The controller side lists the code (in a git work tree: tracked and untracked-but-not-ignored
files; elsewhere every regular file), refuses more than ``max_mb``, hashes the content, and asks
the module on the submit host whether ``<job dir>/code/<hash>/`` is there. Code whose archive is
small (INLINE_MAX_BYTES) goes with that request, base64 in the module's arguments, and is
extracted only if missing. Larger code is packed into one archive, transferred and extracted by a
second module run, only when the first finds it missing (and not in check mode or a probe).
Unchanged code is never copied twice.
"""

import base64
import hashlib
import io
import os
import stat
import subprocess
import tarfile
import tempfile

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

# Never part of the code a job runs, and often large.
SKIPPED_DIRS = {".git", "__pycache__", ".venv", ".mypy_cache", ".pytest_cache", "outputs"}
HASH_DIGITS = 20
# Code up to this size (its archive) goes with the module's first run, base64 in its arguments:
# no transfer and no second run when it is missing (a new job name, changed code). Larger code is
# sent as a file, and only when the module finds it missing.
INLINE_MAX_BYTES = 256 * 1024
MODULE_ARGS = ("jobs_root", "job_name", "mode", "probe", "resume", "request", "force", "expect_files",
               "min_free_mb", "files", "placeholders")


def git(code_dir, *argv):
    proc = subprocess.run(["git", "-C", code_dir, *argv], capture_output=True, check=False)
    return proc.stdout if proc.returncode == 0 else None


def list_code(code_dir):
    """(relative paths of the regular files to stage, git facts), sorted so the hash is stable."""
    facts = {"git_commit": "", "git_dirty": False, "source": "directory"}
    listed = git(code_dir, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", ".")
    if listed is not None:
        facts["source"] = "git"
        facts["git_commit"] = (git(code_dir, "rev-parse", "HEAD") or b"").decode().strip()
        facts["git_dirty"] = bool(git(code_dir, "status", "--porcelain", "--", "."))
        names = [name.decode() for name in listed.split(b"\0") if name]
        names = [name for name in names if not set(name.split("/")) & SKIPPED_DIRS]
    else:
        names = []
        for top, dirs, files in os.walk(code_dir):
            dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)  # not walked at all: often large
            names += [os.path.relpath(os.path.join(top, f), code_dir) for f in files if f not in SKIPPED_DIRS]
    files, skipped = [], []
    for name in sorted(set(names)):
        info = os.lstat(os.path.join(code_dir, name)) if os.path.lexists(os.path.join(code_dir, name)) else None
        if info is None:
            continue  # tracked, deleted in the work tree
        if stat.S_ISREG(info.st_mode):
            files.append((name, info))
        else:
            skipped.append(name)  # a link may point outside the code; it is not followed
    return files, skipped, facts


def named_files(paths):
    """Files named one by one (the preflight's programs), staged side by side under their names."""
    files, sources = [], {}
    for path in paths:
        name = os.path.basename(path)
        info = os.stat(path)
        if name in sources or not stat.S_ISREG(info.st_mode):
            raise AnsibleActionFail(f"code_files: {path} is not a regular file of its own name")
        files.append((name, info))
        sources[name] = path
    return sorted(files), sources


def content_hash(files, source):
    digest = hashlib.sha256()
    for name, info in files:
        with open(source(name), "rb") as handle:
            file_digest = hashlib.file_digest(handle, "sha256").hexdigest()
        executable = "x" if info.st_mode & stat.S_IXUSR else "-"
        digest.update(f"{name}\0{executable}\0{file_digest}\n".encode())
    return digest.hexdigest()[:HASH_DIGITS]


def pack(files, source, archive):
    """A gzipped tar of the files into ``archive``, a path or a binary file object."""
    opened = (tarfile.open(archive, "w:gz", compresslevel=1) if isinstance(archive, str)
              else tarfile.open(fileobj=archive, mode="w:gz", compresslevel=1))
    with opened as tar:
        for name, info in files:
            member = tarfile.TarInfo(name)
            member.size = info.st_size
            member.mode = 0o755 if info.st_mode & stat.S_IXUSR else 0o644
            member.mtime = int(info.st_mtime)
            with open(source(name), "rb") as handle:
                tar.addfile(member, handle)


class CodeToStage:
    """The code a job runs, as the controller has it: listed (``code_dir``, or ``code_files`` one
    by one), held to ``max_mb``, hashed. ``args`` are the job_dir module's options; shared with the
    slurm_job action plugin, whose O(stage) takes the same."""

    def __init__(self, args):
        script = os.path.realpath(str(args.get("script", "")))
        max_mb = int(args.get("max_mb", 100))
        if args.get("code_files"):
            files, sources = named_files([str(path) for path in args["code_files"]])
            code_dir, skipped, facts = os.path.dirname(script), [], {"git_commit": "", "git_dirty": False,
                                                                      "source": "files"}
            self.source = sources.__getitem__
            relative_script = os.path.basename(script)
        else:
            code_dir = os.path.realpath(str(args.get("code_dir", "")))
            if not os.path.isdir(code_dir):
                raise AnsibleActionFail(f"code_dir {code_dir} is not a directory on the controller")
            if os.path.commonpath([code_dir, script]) != code_dir:
                raise AnsibleActionFail(f"the script {script} is not inside code_dir {code_dir}: set -e code_dir= "
                                        "to a directory that holds it")
            files, skipped, facts = list_code(code_dir)
            self.source = lambda name: os.path.join(code_dir, name)  # noqa: E731
            relative_script = os.path.relpath(script, code_dir)
        if relative_script not in {name for name, _ in files}:
            raise AnsibleActionFail(f"the script {script} is not among the files staged from {code_dir} "
                                    "(ignored by git, a link, or in a skipped directory such as .venv)")
        total = sum(info.st_size for _, info in files)
        if total > max_mb * 1024 * 1024:
            biggest = sorted(files, key=lambda item: -item[1].st_size)[:3]
            raise AnsibleActionFail(
                f"the code to stage from {code_dir} is {total / 1048576:.1f} MB in {len(files)} files, over "
                f"slurm_launch_code_max_mb={max_mb} (largest: "
                + ", ".join(f"{name} {info.st_size / 1048576:.1f} MB" for name, info in biggest)
                + "); point -e code_dir= at the training code only, add data to .gitignore, or raise the limit")
        self.files, self.relative_script = files, relative_script
        self.digest = content_hash(files, self.source)
        self.summary = {"hash": self.digest, "files": len(files), "bytes": total, "skipped": skipped,
                        "source_dir": code_dir, **facts}

    def inline(self, dry):
        """The archive as base64 text for the module's first run, or None: dry runs extract nothing,
        and code over INLINE_MAX_BYTES goes as a file when it is missing."""
        if dry or sum(info.st_size for _, info in self.files) > 4 * INLINE_MAX_BYTES:
            return None  # not even packed: it would not compress to the limit
        buffer = io.BytesIO()
        pack(self.files, self.source, buffer)
        data = buffer.getvalue()
        return base64.b64encode(data).decode("ascii") if len(data) <= INLINE_MAX_BYTES else None

    def stage(self, action, run, dry, staged_of):
        """The module's answer once the code is where the job runs it: ``run(extra)`` runs the module
        with ``extra`` added to its staging options, first with the code inline (when small), then,
        only if ``staged_of(answer)`` (what staging did, None when the run failed before) says the
        code is missing, again with the code sent as a file. The code's summary goes into what
        staging did."""
        answer = run({"code_archive_inline": self.inline(dry)})
        first = staged_of(answer)
        if first is not None and not (first.get("code_present") or first.get("code_copied") or dry
                                      or first.get("missing_files")):
            answer = self.send(action, lambda archive: run({"code_archive": archive}))
            staged = staged_of(answer)
            if staged is not None:
                staged["made"] = first["made"] + staged["made"]
                answer["changed"] = True
        staged = staged_of(answer)
        if staged is not None:
            staged.update(self.result(staged))
        return answer

    def send(self, action, run_with_archive):
        """Pack the code, put the archive on the host, and return run_with_archive(its path): the
        module's run that extracts it."""
        with tempfile.TemporaryDirectory(prefix="job-code-") as scratch:
            archive = os.path.join(scratch, "code.tar.gz")
            pack(self.files, self.source, archive)
            tmp = action._make_tmp_path()
            try:
                remote = action._connection._shell.join_path(tmp, "code.tar.gz")
                action._transfer_file(archive, remote)
                action._fixup_perms2((tmp, remote))
                return run_with_archive(remote)
            finally:
                action._remove_tmp_path(tmp)

    def result(self, staged):
        """What a task reports of the code: its summary, whether it was copied, and the script's path."""
        return {"code": {**self.summary, "copied": bool(staged.get("code_copied"))},
                "script": os.path.join(staged["code_dir"], self.relative_script) if staged.get("code_dir") else ""}


class ActionModule(ActionBase):
    # Not TRANSFERS_FILES: that makes a remote tmp before run(), which send()'s own (made only when
    # the code is sent, and removed after) replaced as the shell's tmpdir, so it was never removed.

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        code = CodeToStage(args)
        module_args = {key: args[key] for key in MODULE_ARGS if key in args}
        module_args["code_hash"] = code.digest
        answer = code.stage(
            self, lambda extra: self._execute_module("job_dir", module_args={**module_args, **extra}, task_vars=task_vars),
            bool(module_args.get("probe")) or self._task.check_mode,
            lambda answer: None if answer.get("failed") else answer)
        return {**result, **answer}
