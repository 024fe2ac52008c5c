# -*- coding: utf-8 -*-
"""Action plugin for the slurm_job module: follows a job in slices, so that a person sees it move.

A module cannot print while it runs. While a job is followed, this runs the module again and
again, each run ending at the job's next change of state or after ``progress_every`` seconds,
and prints between runs what changed: the state (with Slurm's reason, the nodes, the restart
count) and the newest lines of the job's log. Each slice carries on the poll schedule of the
previous one (``progress_from``), so Slurm is asked no more often than by one long run.

The module's documented options are what a user of it calls. The project's roles give this
action more: ``stage`` and ``nodes`` (a launch), ``collect`` and ``progress_log_lines``; those
the module takes, and the slices' own, reach it under its one ``internal`` option
(INTERNAL_SPEC), which no task sets itself.

With ``stage`` (the job_dir module's options: the job's directory, code and files), the code is
listed and hashed here (CodeToStage: in a git work tree, tracked and untracked-but-not-ignored
files; elsewhere every regular file; at most ``max_mb``), and the module on the submit host is
asked whether ``<job dir>/code/<hash>/`` is there. Small code (INLINE_MAX_BYTES) goes with the
module's first run, which stages and submits; larger code is packed into one archive and sent
as a file only when that run finds it missing, and the module runs again with it: unchanged code
is never copied twice. ``stage.expect_files_message`` is the task's message when a file of
``stage.expect_files`` is missing (nothing is staged then).

With ``collect`` (job_outputs.COLLECT_SPEC: the outputs folder, the jobs' root, the sweep's
points), a job that is final when the task ends has its outputs written on the controller here,
from the module's last answer (``collect_files``): job.json, summary.txt, its log and script. The
summary is shown, and a job that did not succeed fails the task, with its log's last lines. Of a
job that is not final yet (wait=false), and in check mode, one line says what was done or predicted.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import stat
import subprocess
import tarfile
import tempfile
import time

from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()

# The rule of which Python ansible-core runs modules on (the target_python action's).
from ansible_collections.hpc.slurm_train.plugins.module_utils import cluster_rules as _rules  # noqa: E402
# The outputs of a finished job, written on the controller.
from ansible_collections.hpc.slurm_train.plugins.plugin_utils import job_outputs as _job_outputs  # noqa: E402
# The options of the module that are this action's protocol with it, not a task's.
from ansible_collections.hpc.slurm_train.plugins.modules.slurm_job import INTERNAL_SPEC  # noqa: E402

# Never part of the code a job runs, and often large.
SKIPPED_DIRS = {".git", "__pycache__", ".venv", ".mypy_cache", ".pytest_cache", "outputs"}
HASH_DIGITS = 20
# Code up to this size (its archive) goes with the module's first run, base64 in its arguments:
# no transfer and no second run when it is missing (a new job name, changed code). Larger code is
# sent as a file, and only when the module finds it missing.
INLINE_MAX_BYTES = 256 * 1024
MODULE_ARGS = ("jobs_root", "job_name", "mode", "probe", "resume", "request", "force", "expect_files",
               "min_free_mb", "files")


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
    by one), held to ``max_mb``, hashed. ``args`` are the job_dir module's options, which the
    launch's `stage` takes too; the preflight's job_dir action stages its programs with it."""

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


# Arguments that only the submission needs; later slices follow the job by its id.
SUBMIT_ONLY = ("script", "job_name", "chdir", "sbatch_args", "force", "stage", "nodes")

# What a failed task's result keeps: the message (and Ansible's own words of a module that did not
# answer), what became of the job, where its outputs went (collected's dest and written, which
# slurm_train's API reads). The callback prints a failed result whole, and the rest is this
# action's protocol with the module (the run's end marker, the poll state, the staging's
# details): a person would read it in place of the sentence. -v keeps it all, for whoever debugs
# the launch.
FAILURE_KEYS = ("failed", "changed", "msg", "exception", "warnings", "deprecations", "module_stdout", "module_stderr",
                "job_id", "name", "state", "exit_code", "outcome", "final")


def failure_result(result):
    """A failed result cut down to FAILURE_KEYS that have a value (no job: no job_id, state, ...),
    and collected's dest and written."""
    kept = {key: result[key] for key in FAILURE_KEYS if result.get(key) is not None}
    if result.get("collected"):
        kept["collected"] = {key: result["collected"][key] for key in ("dest", "written") if key in result["collected"]}
    return kept


def describe(result):
    """One line for a person: the job, its state, and what goes with that state."""
    state = result.get("state") or "unknown to Slurm"
    visible = _rules.visible  # the name and reason are the job's user's text
    line = f"job {result.get('job_id')} ({visible(result.get('name'))}): {state}"
    if result.get("reason") and state != "RUNNING":
        line += f" ({visible(result['reason'])})"
    if state == "RUNNING" and result.get("nodes"):
        line += f" on {','.join(result['nodes'])}"
    if result.get("restarts"):
        line += f", restart {result['restarts']}"
    if result.get("tasks_total"):
        line += f", {result.get('tasks_done')} of {result['tasks_total']} array tasks final"
    if result.get("final"):
        line += f", exit code {result.get('exit_code')}, {result.get('elapsed_seconds')} s"
    return line


def newly_final_tasks(result, previous):
    """The array tasks that are final in ``result`` and were not in ``previous``, one line each."""
    def final(one):
        return {task["task"]: task for task in (one or {}).get("tasks") or []
                if task.get("final")}
    before = final(previous)
    return [f"  {result['job_id']}_{task_id}: {task['state']}, exit code {task.get('exit_code')}"
            + (f" | {task['log_last_line']}" if task.get("log_last_line") else "")
            for task_id, task in final(result).items() if task_id not in before]


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = self.outcome(tmp, task_vars)
        return failure_result(result) if result.get("failed") and display.verbosity < 1 else result

    def outcome(self, tmp, task_vars):
        super().run(tmp, task_vars)
        args = dict(self._task.args)
        collect = args.pop("collect", None)
        if collect is not None:
            collect = self.collect_options(collect)
            args["collect_files"] = True
        result = self.follow(args, task_vars)
        files = result.pop("collected_files", None) or {}
        staged = result.get("staged") or {}
        if staged.get("missing_files") and (self._task.args.get("stage") or {}).get("expect_files_message"):
            result.update(failed=True, msg=self._task.args["stage"]["expect_files_message"])
            # Ansible's error line says the task's message, not the module's it replaced.
            result.pop("exception", None)
            return result
        if collect is None:
            return result
        check_mode, following = bool(self._task.check_mode), self._task.args.get("job_id") is not None
        if check_mode or not result.get("final"):
            if not result.get("failed") and (not check_mode or not following):
                display.display(_job_outputs.report_line(result, staged, check_mode))
            return result
        job = {**result, "collected_files": files}
        collected, failure = _job_outputs.collect(self, job, collect, staged, task_vars, display)
        result["collected"] = collected
        result["changed"] = bool(result.get("changed")) or collected["changed"]
        if failure is not None:
            # The job's own failure, now with its outputs and log tail; the module's message said less.
            result.update(failed=True, msg=failure)
            result.pop("exception", None)
        elif not (result.get("failed") and result.get("outcome") == "succeeded"):
            # A job cancelled as asked; a succeeded job fails the task only for the module's own reasons
            # (its run record could not be written).
            result["failed"] = False
            result.pop("msg", None)
        return result

    @staticmethod
    def collect_options(given):
        if not isinstance(given, dict):
            raise AnsibleActionFail(f"slurm_job: collect must be a dict of {', '.join(_job_outputs.COLLECT_SPEC)}")
        unknown = sorted(set(given) - set(_job_outputs.COLLECT_SPEC))
        missing = [key for key, spec in _job_outputs.COLLECT_SPEC.items() if spec.get("required") and not given.get(key)]
        if unknown or missing:
            raise AnsibleActionFail(f"slurm_job: collect has unknown keys {unknown} or lacks {missing} "
                                    f"(keys: {', '.join(_job_outputs.COLLECT_SPEC)})")
        options = {key: given.get(key, spec.get("default")) for key, spec in _job_outputs.COLLECT_SPEC.items()}
        for key, spec in _job_outputs.COLLECT_SPEC.items():
            if spec["type"] == "bool":
                options[key] = boolean(options[key], strict=False)
        return options

    def follow(self, args, task_vars):
        """Stage and submit (or find the job given), then follow it in slices until it is final."""
        code = None
        if args.get("stage"):
            code = CodeToStage(args["stage"])
            rendered = args["stage"].get("code_hash")
            if rendered and rendered != code.digest:
                # The job script names the code by the hash it had when it was rendered.
                raise AnsibleActionFail(f"the code in {code.summary['source_dir']} changed while the job was put "
                                        f"together (its hash was {rendered}, is {code.digest}): launch again")
            args["stage"] = {key: value for key, value in args["stage"].items() if key in MODULE_ARGS}
            args["stage"]["code_hash"] = code.digest
        every = int(args.pop("progress_every", 30) or 0)
        live = (every > 0 and args.get("state", "present") == "present" and boolean(args.get("wait", True))
                and not self._task.check_mode)
        if not live:
            return self.submit(code, args, task_vars)

        total = int(args.get("timeout") or 0)
        started = time.monotonic()
        result = self.submit(code, {**args, "return_on_change": True,
                                    "timeout": min(every, total) if total else every}, task_vars)
        first = result
        self.show(result, None)
        while not result.get("failed") and result.get("final") is False:
            left = total - (time.monotonic() - started) if total else None
            if left is not None and left <= 0:
                result["timed_out"] = True
                break
            follow = {key: value for key, value in args.items() if key not in SUBMIT_ONLY}
            # The marker's path in the run the first slice took.
            follow.update(job_id=result["job_id"], return_on_change=True, progress_from=result["progress"],
                          end_marker=first.get("end_marker", args.get("end_marker")),
                          timeout=max(1, int(min(every, left) if left is not None else every)))
            previous, result = result, self.run_module(follow, task_vars)
            result["queries"] = result.get("queries", 0) + previous.get("queries", 0)
            result["controller_outage_seconds"] = (result.get("controller_outage_seconds", 0)
                                                   + previous.get("controller_outage_seconds", 0))
            # Only the returned result's warnings are shown: an earlier slice's (a controller
            # outage, say) would otherwise be lost.
            for key in ("warnings", "deprecations"):
                carried = (previous.get(key) or []) + (result.get(key) or [])
                if carried:
                    result[key] = carried
            self.show(result, previous)
        # What the first slice did (stage, submit, or find the same job) is what this task did.
        for key in ("changed", "submitted", "found_existing", "staged"):
            result[key] = first.get(key, False)
        return result

    def submit(self, code, args, task_vars):
        """The module's first run; with ``code`` (a CodeToStage), the code goes with it, or is sent
        when that run finds it missing and the module runs again with it, which then submits. What
        the nodes' check noted of usable nodes that may delay the job is shown."""
        if code is None:
            result = self.run_module(args, task_vars)
        else:
            result = code.stage(self, lambda extra: self.run_module({**args, "stage": {**args["stage"], **extra}},
                                                                   task_vars),
                self._task.check_mode, lambda answer: answer.get("staged"))
        result = _rules.explain_module_failure(self, result, task_vars)
        for note in (result.get("nodes_checked") or {}).get("notes") or []:
            display.display(note)
        return result

    def run_module(self, args, task_vars):
        """The module run with ``args``, the protocol's (INTERNAL_SPEC's) under its `internal`."""
        internal = {key: args[key] for key in INTERNAL_SPEC if key in args}
        module_args = {key: value for key, value in args.items() if key not in INTERNAL_SPEC}
        if internal:
            module_args["internal"] = internal
        return self._execute_module("slurm_job", module_args=module_args, task_vars=task_vars)

    def show(self, result, previous):
        if result.get("job_id") is None:
            return
        key = (result.get("state"), result.get("restarts"), result.get("tasks_done"))
        if previous is None or key != (previous.get("state"), previous.get("restarts"), previous.get("tasks_done")):
            display.display(describe(result))
        for line in newly_final_tasks(result, previous):
            display.display(line)
        label = result["job_id"] if result.get("log_task") is None else f"{result['job_id']}_{result['log_task']}"
        for line in (result.get("progress") or {}).get("log_lines", []):
            display.display(f"  {label} | {line}")
