"""Submit a Slurm batch job and follow it to its end; query or cancel a job."""

DOCUMENTATION = r"""
---
module: slurm_job
short_description: Submit a Slurm batch job and follow it to its end, query it or cancel it
description:
  - Submits a batch script with C(sbatch) and follows the job until it reaches a final state,
    asking Slurm less and less often while the job does not change (see O(poll_min), O(poll_max)).
  - Submitting is idempotent. The job carries the comment C(fingerprint:<hash>), the first 16 hex
    digits of the SHA-256 of O(job_name) followed by the script's content. When a pending or
    running job of the current user with the same name and fingerprint exists, the module follows
    it instead of submitting a copy (O(force) submits anyway). A launch's run that this module run
    took afresh (its directory made now, with O_EXCL) is in no submitted script, so no copy can
    exist, and C(squeue) is not asked before its submission.
  - The job's state comes from C(scontrol show job) (with C(--local) for a job id that is not a
    federation's, which spares slurmctld a federation lookup per query); a job that slurmctld has forgotten (it ended
    more than C(MinJobAge) ago) is looked up with C(sacct) when accounting is available
    (O(accounting)).
  - A job that ends in a final state other than COMPLETED makes the task fail, with the job's
    exit code, reason and the tail of its output log in the result.
  - A job array (C(--array) in the script or in O(sbatch_args)) is followed as one job, by its array
    job id, until every task is final; RV(tasks) lists each task. It COMPLETED when every task did;
    otherwise the result's state, exit code and log are those of its first task that did not.
  - Transient errors of slurmctld or slurmdbd (timeouts, connection refused, standby controller)
    are retried with exponential back-off. A submission that failed that way is retried only
    after C(squeue) shows that the controller did not queue the job after all; with O(force) it
    is retried without that check.
options:
  state:
    description:
      - V(present) submits O(script), or follows an identical pending or running job, or with
        O(job_id) follows that job.
      - V(query) reports the state of the job O(job_id) once, without waiting and without failing
        for a job that failed.
      - V(absent) cancels the job O(job_id) with C(scancel) and, with O(wait), waits until it is in
        a final state. A job that is already final or unknown to Slurm is left alone.
      - V(list) reports the current user's pending and running jobs (C(squeue -u)) in RV(jobs).
    type: str
    choices: [present, query, absent, list]
    default: present
  script:
    description:
      - Path of the rendered batch script on the host the module runs on.
      - Required with O(job_name) for O(state=present) unless O(job_id) is given.
    type: path
  job_name:
    description:
      - Name of the job (C(sbatch --job-name)), made of 1 to 128 letters, digits, C(-), C(_) or C(.).
      - Part of the fingerprint that identifies an already submitted copy.
    type: str
  chdir:
    description:
      - Directory C(sbatch) is run in, which becomes the job's working directory unless
        O(sbatch_args) sets C(--chdir).
    type: path
  sbatch_args:
    description:
      - Further C(sbatch) options, one per list item (for example C(--nodes=2)); they are passed as
        separate arguments, never through a shell.
      - Options the module sets itself are refused (C(--job-name), C(--comment), C(--parsable),
        C(--test-only), C(--wait)).
      - C(--clusters) (C(-M)) is refused too. The module asks the local cluster only (no C(-M) on
        its queries), so it would lose a job sent elsewhere; submit from a host of that cluster or
        point O(environment)'s C(SLURM_CONF) at its configuration.
    type: list
    elements: str
    default: []
  job_id:
    description:
      - Job to query (O(state=query)), cancel (O(state=absent)) or follow (O(state=present)).
    type: int
  wait:
    description:
      - Follow the job until it is in a final state. With V(false) the module reports the state
        seen right after submitting or cancelling.
      - Not used with O(state=query).
    type: bool
    default: true
  timeout:
    description:
      - Seconds to follow the job; V(0) follows without a limit.
      - When the time is up the module returns the current state with RV(timed_out=true); it does
        not fail and does not cancel the job.
    type: int
    default: 0
  poll_min:
    description:
      - First interval in seconds between two looks at the job, used again after each change of
        state.
    type: float
    default: 1
  poll_max:
    description:
      - Longest interval in seconds between two looks at the job; the interval doubles from
        O(poll_min) up to this while the state stays the same.
    type: float
    default: 30
  marked_poll_interval:
    description:
      - With O(end_marker), while the job runs, the longest interval in seconds between two looks
        at it. The marker answers its end, so Slurm is asked only this often (for a job that ends
        without writing it, after a node failure or a kill), as soon as the marker appears, and
        as the job's time limit passes. While the job is pending, its log appearing (the job
        started) is looked for the same way and ends the wait.
    type: float
    default: 60
  accounting:
    description:
      - Whether C(sacct) (slurmdbd) may be asked about a job slurmctld no longer knows.
      - V(auto) asks C(sacct) once when it is needed and uses it from then on if slurmdbd answers.
      - V(yes) requires an answer from C(sacct); its errors fail the task.
      - V(no) never runs C(sacct).
    type: str
    choices: [auto, 'yes', 'no']
    default: auto
  force:
    description:
      - Submit a new copy even when an identical job is pending or running.
    type: bool
    default: false
  log_tail_lines:
    description:
      - Number of lines from the end of the job's output file to return in RV(log_tail), when that
        file is readable on the host the module runs on. V(0) reads nothing.
      - The lines are looked for in the last MiB of the file; C(\n), C(\r\n) and C(\r) end a line;
        control characters other than tab are shown as C(\xNN), so that a log's escape sequences
        never reach a terminal.
      - Of another user's job (followed by root or an operator), only a log that is a regular file
        of that user inside O(run_records)C(/<user>/), reached without a link, is read.
    type: int
    default: 40
  end_marker:
    description:
      - A file the job writes when its batch script ends (C(%j) stands for the job id), on a
        filesystem the host the module runs on sees. While following, the module looks for it
        every 0.05 s, which costs the controller nothing, and asks Slurm again as soon as it
        appears; so the answer comes within a second of the job's end even when O(poll_max)
        is long. A job that ends without writing it (cancelled, timed out, node failure) is
        still found by the regular polls. A marker that is already there when following starts
        (a requeued job) counts only once it changes.
    type: str
  controller_timeout:
    description:
      - While following, how many seconds in a row slurmctld may fail to answer (restart,
        failover, overload) before the module gives up. The job runs on meanwhile; every answer
        that comes back in time is reported in RV(controller_outage_seconds) and a warning.
    type: int
    default: 600
  progress_every:
    description:
      - While following, show the job's progress at least this often, in seconds, in the
        playbook's output as it happens, and at once on each change of state (PENDING with its
        reason, RUNNING on which nodes, requeued, final), with the new lines of the job's log,
        which come as the job writes them. V(0) shows nothing until the task ends.
      - Done by the project's C(slurm_job) action plugin (C(plugins/action/slurm_job.py)),
        which follows the job in slices; Slurm is not asked more often for it.
    type: int
    default: 30
  environment:
    description:
      - Variables for the Slurm commands, for example C(SLURM_CONF). C(LC_ALL) is always C(C), so
        that the output parses the same everywhere.
      - C(SLURM_CLUSTERS) and C(SBATCH_CLUSTERS) are refused, as C(--clusters) is in O(sbatch_args).
    type: dict
    default: {}
  secret_env:
    description:
      - Names of variables whose values the script sets (C(export NAME=VALUE), the value quoted as
        a shell quotes it) and that may be secrets. Their values are left out of the fingerprint,
        which the job's comment shows to every user.
    type: list
    elements: str
    default: []
  run_records:
    description:
      - The jobs directory (C(<jobs>/<user>/<job name>/runs/<run id>/), as the project's C(job_dir)
        module lays it out). When the job is final, its run's end record C(run.json) (job id,
        state, exit code, restarts, as Slurm has them) is written beside its log, in the same
        module run that saw the end; the next launch of the name reads it to resume or start
        afresh. Only for a log in a run directory of the module user's own C(<jobs>/<user>/);
        another user's job (followed by root or an operator) is never written into.
      - Not in check mode.
    type: path
  private_output:
    description:
      - Submit with umask C(077), so that the job's output files are readable by the user alone
        (Slurm creates them with the submitting process's umask). For jobs whose script or log
        carries secrets.
    type: bool
    default: false
  internal:
    description:
      - The project's C(slurm_job) action plugin's own protocol with the module (a launch's staging
        and check of its nodes, the slices of a follow, the files of a finished job); not a task's
        to set. Its keys are the module's C(INTERNAL_SPEC).
    type: dict
notes:
  - A job given by O(job_id) must be the user's own, unless the module runs as root or as a Slurm
    operator or administrator (C(sacctmgr) C(AdminLevel)); another user's job is refused before it
    is followed, cancelled or its log read. Its owner is the numeric user id C(squeue -o %U) prints
    (C(sacct)'s C(UID) for a job only accounting knows), fields its user cannot shape; the record's
    C(UserId) is not used, as a job name such as C(x UserId=alice(2001)) can fake it.
  - Supports check mode. O(state=present) then runs C(sbatch --test-only) and returns its
    prediction in RV(test_only) (RV(changed=true)), or reports the identical job already queued
    (RV(changed=false)); nothing is submitted or cancelled and nothing is followed.
  - RV(queries) counts every Slurm command the module ran, retries included.
  - 'How each Slurm job state ends a follow (final states make the module return; a final state other
    than C(COMPLETED) makes it fail):'
  - 'C(BOOT_FAIL): RV(outcome=node_failure), final, failure; terminated because its nodes failed to boot.'
  - 'C(CANCELLED): RV(outcome=cancelled), final, failure; cancelled by the user or an administrator.'
  - 'C(COMPLETED): RV(outcome=succeeded), final, success; every process on every node exited with code 0.'
  - 'C(COMPLETING): RV(outcome=finishing), not final, followed on; processes ending; the epilog may still run.'
  - 'C(CONFIGURING): RV(outcome=waiting), not final, followed on; allocated; waiting for its nodes to become ready.'
  - 'C(DEADLINE): RV(outcome=timeout), final, failure; terminated on reaching its --deadline.'
  - 'C(EXPEDITING): RV(outcome=requeued), not final, followed on; checked for an expedited requeue; it may run again at once.'
  - 'C(FAILED): RV(outcome=failed), final, failure; terminated with a non-zero exit code or another failure.'
  - 'C(NODE_FAIL): RV(outcome=node_failure), final, failure; terminated because an allocated node failed.'
  - 'C(OUT_OF_MEMORY): RV(outcome=out_of_memory), final, failure; killed after running out of memory.'
  - 'C(PENDING): RV(outcome=waiting), not final, followed on; waiting for a resource allocation.'
  - 'C(PREEMPTED): RV(outcome=preempted), final, failure; terminated by preemption.'
  - 'C(REQUEUED): RV(outcome=requeued), not final, followed on; being requeued; it will run again.'
  - 'C(REQUEUE_FED): RV(outcome=requeued), not final, followed on; being requeued by the federation.'
  - 'C(REQUEUE_HOLD): RV(outcome=held), not final, followed on; requeued and held until ''scontrol release''.'
  - 'C(RESIZING): RV(outcome=running), not final, followed on; about to change size.'
  - 'C(RESV_DEL_HOLD): RV(outcome=held), not final, followed on; held because its reservation was deleted.'
  - 'C(REVOKED): RV(outcome=revoked), final, failure; federation sibling removed: another cluster runs it.'
  - 'C(RUNNING): RV(outcome=running), not final, followed on; running on its allocation.'
  - 'C(SIGNALING): RV(outcome=running), not final, followed on; being signaled.'
  - 'C(SPECIAL_EXIT): RV(outcome=held), not final, followed on; requeued and held after a special exit code.'
  - 'C(STAGE_OUT): RV(outcome=finishing), not final, followed on; staging out files.'
  - 'C(STOPPED): RV(outcome=suspended), not final, followed on; stopped with SIGSTOP; keeps its CPUs.'
  - 'C(SUSPENDED): RV(outcome=suspended), not final, followed on; suspended; its CPUs were released.'
  - 'C(TIMEOUT): RV(outcome=timeout), final, failure; terminated on reaching its time limit.'
author:
  - ansible-slurm-train maintainers
"""

EXAMPLES = r"""
- name: Train on two GPU nodes and wait for the result
  slurm_job:
    script: /nas/runs/train-ddp/train-ddp.sbatch
    job_name: train-ddp
    chdir: /nas/runs/train-ddp
    sbatch_args:
      - --nodes=2
      - --partition=gpu_A6000
    timeout: 7200
  register: train

- name: Submit without waiting, then follow later
  slurm_job:
    script: /nas/runs/sweep/lr-0.1.sbatch
    job_name: sweep-lr-0.1
    wait: false
  register: sweep

- name: Follow the job submitted above
  slurm_job:
    job_id: "{{ sweep.job_id }}"
    environment:
      SLURM_CONF: /srv/local-cluster/etc/slurm.conf

- name: Look at a job without waiting
  slurm_job:
    state: query
    job_id: 1234
  register: job

- name: Cancel a job and wait until Slurm has stopped it
  slurm_job:
    state: absent
    job_id: 1234
    timeout: 120

- name: List my pending and running jobs
  slurm_job:
    state: list
  register: mine
"""

RETURN = r"""
nodes_checked:
  description:
    - Of a launch, what the check of its nodes against Slurm found. C(partition); C(unusable),
      each unusable node's state; C(bad_nodes), the user's unexpired bad nodes among the job's
      (C(node), C(reason), C(since), C(until), C(job_id), C(line)); C(excluded), those a node
      group's job leaves out; C(notes), one line per usable node that may delay the job or is left out.
  returned: always (null but for a launch's submission)
  type: dict
  sample: {"partition": "gpu_A6000", "unusable": {}, "bad_nodes": [], "excluded": [],
           "notes": ["node111 (idle~) is powered down: it boots first"]}
collected_files:
  description:
    - When the job is final and the action plugin collects it, the job's files read on the host, as
      a mapping of each path to its content, base64.
  returned: always (null unless the job is final and collected)
  type: dict
  sample: {"/starmap/nas/jobs/alice/train/runs/1/train-1234.out": "W3JhbmswXSB0cmFpbmluZyBjb21wbGV0ZQo="}
collected_truncated:
  description:
    - The files of RV(collected_files) that did not fit in its 8 MiB, each
      with its whole size in bytes; RV(collected_files) holds the file's end.
  returned: always (null unless the job is final and collected)
  type: dict
  sample: {"/starmap/nas/jobs/alice/train/runs/1/train-1234.out": 67108864}
collected_skipped:
  description:
    - Of a job collected, its files that were not read, each with why (not there, a link
      on the way, not the job owner's, not a regular file).
  returned: always (null unless the job is final and collected)
  type: dict
  sample: {"/starmap/nas/jobs/bob/train/runs/1/train.sbatch": "a link or not a directory on the way"}
node_states:
  description:
    - After a node failure (RV(outcome) C(node_failure)), the job's nodes as C(sinfo) shows them
      then (C(state), C(markers), C(partitions), C(cpus), C(gpus)), so that the failed one can be named.
  returned: always (null unless the job ended in a node failure)
  type: dict
  sample: {"node111": {"state": "down", "markers": "*", "partitions": ["gpu"], "cpus": 64, "gpus": 8}}
marked_bad_nodes:
  description:
    - After a node failure that Slurm did not requeue (the job final in it), the job's nodes that
      C(sinfo) then shows down, drained, failing or not responding, recorded in the user's
      C(<run_records>/<user>/nodes.json) with reason C(NODE_FAIL) (C(node), C(reason), C(since),
      C(until), C(job_id), C(line)). The job script, killed with its node, cannot record them.
    - Only for the module user's own job, with the launch's C(bad_node_hours); a record that
      cannot be written is a warning, and the job's result stands.
  returned: always (null unless nodes were recorded)
  type: list
  elements: dict
  sample: [{node: node111, reason: NODE_FAIL, since: 1796623800, until: 1796710200, job_id: 12,
            line: "node111: NODE_FAIL in job 12 at 2026-12-07 05:50 UTC, kept out until 2026-12-08 05:50 UTC"}]
job_id:
  description: The Slurm job id; null when nothing was submitted (check mode).
  returned: always
  type: int
  sample: 1234
user:
  description:
    - The user the job belongs to (C(squeue)'s numeric user id, or C(sacct)'s C(UID) for a job only
      accounting knows); null when neither says.
    - With O(state=list), the user whose jobs RV(jobs) lists (the user the module ran as).
  returned: always
  type: str
  sample: alice
state:
  description: Base state of the job as Slurm reports it; null when Slurm does not know the job.
  returned: always
  type: str
  sample: COMPLETED
outcome:
  description:
    - One word for what the state means, for example C(waiting), C(running), C(succeeded),
      C(failed), C(cancelled), C(timeout), C(node_failure), C(out_of_memory), C(requeued).
  returned: always
  type: str
  sample: succeeded
final:
  description: Whether the job is in a final state; null when the state is unknown.
  returned: always
  type: bool
  sample: true
state_description:
  description: One line about the state, for people.
  returned: always
  type: str
  sample: every process on every node exited with code 0
exit_code:
  description: Exit code of the batch script (the first half of Slurm's C(ExitCode=2:0)).
  returned: always
  type: int
  sample: 0
exit_signal:
  description: Signal that ended the batch script, 0 if none.
  returned: always
  type: int
  sample: 0
reason:
  description: Slurm's reason for the state (C(Resources), C(NonZeroExitCode), ...); null for C(None).
  returned: always
  type: str
  sample: Resources
nodes:
  description: Names of the nodes allocated to the job; empty while it waits.
  returned: always
  type: list
  elements: str
  sample: [node110, node111]
elapsed_seconds:
  description: Run time of the job so far, in seconds.
  returned: always
  type: int
  sample: 3723
restarts:
  description: How many times Slurm requeued the job.
  returned: always
  type: int
  sample: 0
stdout_path:
  description:
    - The job's output file.
    - For a job only C(sacct) still knows (it ended more than C(MinJobAge) ago), C(sacct)'s
      C(StdOut) on Slurm 24.05 and later; before 24.05, whose C(sacct) has no C(StdOut), the log
      in the job's directory (C(sacct)'s C(WorkDir)) that a launch's job writes,
      C(<name>-<job id>.out), or else Slurm's default C(slurm-<job id>.out), when that file
      exists on the host the module runs on; null otherwise.
  returned: always
  type: str
  sample: /nas/runs/train-ddp/train-ddp-1234.out
stderr_path:
  description:
    - The job's error file; the same as RV(stdout_path) unless C(--error) was given (from C(sacct)
      before 24.05, always the same).
  returned: always
  type: str
  sample: /nas/runs/train-ddp/train-ddp-1234.out
log_tail:
  description: The last O(log_tail_lines) lines of RV(stdout_path), when it is readable here.
  returned: always
  type: list
  elements: str
  sample: ["epoch 10 loss 0.031", "training done"]
name:
  description: The job's name.
  returned: always
  type: str
  sample: train-ddp
partition:
  description: The partition the job runs in; null when Slurm does not tell (state from C(sacct)).
  returned: always
  type: str
  sample: gpu_A6000
state_source:
  description: Where the state came from, C(scontrol) or C(sacct); null when no job was looked at.
  returned: always
  type: str
  sample: scontrol
submitted:
  description: Whether this run submitted the job.
  returned: always
  type: bool
  sample: true
found_existing:
  description: Whether an identical pending or running job was found and followed instead.
  returned: always
  type: bool
  sample: false
timed_out:
  description: Whether following stopped at O(timeout) before the job reached a final state.
  returned: always
  type: bool
  sample: false
changed:
  description: Whether a job was submitted or cancelled (in check mode, would be).
  returned: always
  type: bool
  sample: true
progress:
  description:
    - Of a follow in slices (the action plugin's), where this slice ended, for the next one; null otherwise.
  returned: always
  type: dict
  sample: {"state": "RUNNING", "restarts": 0, "next_poll": 8.0, "marker": null, "log_offset": 5120,
           "log_lines": ["[rank0] step=10 loss=0.42"]}
  contains:
    log_lines:
      description: Complete lines added to the job's output since the previous slice (at most the slice's line limit, the newest).
      type: list
      elements: str
    log_offset:
      description: Byte offset in the output up to which lines were read.
      type: int
    log_path:
      description: The output those lines and the offset are of (an array's changes with the task shown).
      type: str
    log_size:
      description: The output's size as this slice read it; the next slice ends once it differs.
      type: int
    tasks_done:
      description: For a job array, how many of its tasks were final; null otherwise.
      type: int
    owner:
      description:
        - Who owns the job (C(uid), C(user), C(name) as C(squeue) gave it), found by the first slice,
          so that later slices need not ask again.
      type: dict
run_record:
  description:
    - The C(run.json) this run wrote for the final job (O(run_records)); null when none was written.
  returned: always
  type: str
  sample: /starmap/nas/jobs/alice/train/runs/3/run.json
cost:
  description:
    - What the final job cost, across every attempt and every array task
      (C(plugins/module_utils/run_cost.py)). C(hours) are GPU-hours (AllocTRES C(gres/gpu) times the
      elapsed time; CPU-hours when the job had no GPU, C(unit) says which); C(lost_hours) (what
      failed attempts and attempts cut by a node failure did after their last checkpoint),
      C(steps_redone) (steps trained again after each resume), C(queue_seconds) (time waiting
      in the queue, null without accounting) and C(attempts), one line each (with C(hang), its
      C(suspect_nodes), C(step), C(stack_dumps) and C(flight_recorder_dumps), where the job
      script's hang watchdog stopped it, see C(templates/train.sbatch.j2)). C(source) says
      where the figures come from, slurmctld's record of a job that ran once (what slurmdbd
      keeps of it), C(sacct) for a requeued job or an array, or the job script's own record when
      accounting does not answer. Null before the job is final, or when none tells.
  returned: always
  type: dict
  sample: {source: sacct, unit: GPU, hours: 0.0133, lost_hours: 0.0067, steps_redone: 1, queue_seconds: 3,
           attempts: [{job_id: 41, restart: 0, state: REQUEUED, elapsed_seconds: 12, gpus: 2, cpus: 4,
                       queue_seconds: 0, lost_seconds: 2}]}
health:
  description:
    - The health gate's record of each attempt of the final job, as the job script wrote it beside
      the log (C(health-<job id>.jsonl)). Each has C(restart); C(seconds), what the gate cost;
      C(nodes), each node's matmul C(seconds) and C(device), or its C(error) or C(gpu_check)
      problems; C(allreduce) (C(backend), C(bytes), C(time_us) of the slowest node); C(named), the
      nodes named, each with C(node), C(reason) (C(HEALTH) or C(GPU_CHECK)), C(why), and for a slow
      one its C(seconds) against C(median_seconds), the median of the other nodes'; C(action)
      (C(pass), C(requeue) or C(fail)), C(message), and C(summary), the gate's line of it as the
      log and C(summary.txt) say it.
    - Null for a job without the gate, or a job array.
  returned: always
  type: list
  elements: dict
  sample: [{restart: 0, seconds: 9.1, slow_factor: 1.5, action: fail,
            message: "not training on node111, the node list was given",
            nodes: {node110: {seconds: 0.25, device: cpu}, node111: {seconds: 2.61, device: cpu}},
            allreduce: {backend: gloo, bytes: 1048576, time_us: 3650.2, wrong: 0},
            named: [{node: node111, reason: HEALTH, seconds: 2.61, median_seconds: 0.25, ratio: 10.44,
                     why: "slow, matmul 2.610 s against 0.250 s, the median of the other nodes (10.44x, over 1.5x)"}]}]
no_progress:
  description:
    - When the job script stopped the job because a failed attempt did not advance its checkpoint
      (its C(run.json) says C(NO_PROGRESS)), C(step) (the last step the training printed before it
      failed, null when it printed none) and C(checkpoint_step) (the step it kept resuming from);
      null otherwise. C(run.json) then keeps C(NO_PROGRESS), the steps and the log's last lines.
  returned: always
  type: dict
  sample: {step: 5, checkpoint_step: 0}
controller_outage_seconds:
  description: Seconds the module waited, while following, for a slurmctld that did not answer.
  returned: always
  type: float
  sample: 0
jobs:
  description:
    - With O(state=list), the user's pending and running jobs, newest first as C(squeue) lists
      them; null otherwise. C(nodes) is Slurm's hostlist, C(elapsed) squeue's C(%M) text.
  returned: always
  type: list
  elements: dict
  sample: [{job_id: 1234, name: train, state: RUNNING, reason: null, nodes: "node[110-111]",
            elapsed: "1:05", work_dir: /starmap/nas/jobs/alice/train/runs/3}]
tasks:
  description:
    - For a job array, its tasks by task id, each with C(task) (the task id, or the text of a range
      of tasks still pending together, such as C(2-3)), C(job_id) (the task's own job id; null
      from C(sacct)), C(state), C(reason), C(exit_code), C(exit_signal), C(restarts), C(nodes),
      C(elapsed_seconds), C(stdout_path), C(final), C(log_last_line) (the last line of its log,
      when readable here) and, once final, C(no_progress) (as RV(no_progress), of the task's own
      C(run.json) in its point's directory C(points/<task>/)); null for a job that is not an array.
  returned: always
  type: list
  elements: dict
  sample: [{task: 0, job_id: 6, state: COMPLETED, reason: null, exit_code: 0, exit_signal: 0, restarts: 0,
            nodes: [node110], elapsed_seconds: 8, stdout_path: /nas/runs/sweep/sweep-5_0.out, final: true,
            log_last_line: "training step finished with exit code 0", no_progress: null}]
log_task:
  description: For a job array, the task whose state, exit code and log the result shows; null otherwise.
  returned: always
  type: raw
  sample: 2
tasks_done:
  description: For a job array, how many of its tasks are final; null otherwise.
  returned: always
  type: int
  sample: 2
tasks_total:
  description: For a job array, how many tasks it has; null otherwise.
  returned: always
  type: int
  sample: 4
queries:
  description: How many Slurm commands the module ran, retries included.
  returned: always
  type: int
  sample: 9
test_only:
  description: The prediction of C(sbatch --test-only); null outside check mode.
  returned: always
  type: dict
  sample: {"job_id": 1234, "start": "2026-12-02T13:40:01", "processors": 16,
           "nodes": ["node110", "node111"], "partition": "gpu_A6000", "cluster": null}
  contains:
    job_id:
      description: Job id sbatch would have given.
      returned: always
      type: int
      sample: 1234
    start:
      description: Expected start time.
      returned: always
      type: str
      sample: "2026-12-02T13:40:01"
    processors:
      description: Number of processors the job would get.
      returned: always
      type: int
      sample: 16
    nodes:
      description: Nodes the job would run on.
      returned: always
      type: list
      elements: str
      sample: [node110, node111]
    partition:
      description: Partition the job would run in.
      returned: always
      type: str
      sample: gpu_A6000
    cluster:
      description: Cluster of a federation the job would run on; null outside a federation.
      returned: always
      type: str
      sample: null
end_marker:
  description: The end marker followed (O(end_marker), or a launch's run's); later slices of the follow take it.
  returned: always
  type: str
  sample: /starmap/nas/jobs/alice/train/runs/2/.%j.ended
staged:
  description:
    - Of a launch, what staging did or found, as the C(job_dir) module returns it (C(job_dir),
      C(code_dir), C(code_present), C(run_id), C(run_dir), C(resumed), C(run_reason),
      C(missing_files), C(files_written), ...); null without it.
  returned: always
  type: dict
  sample: {"job_dir": "/starmap/nas/jobs/alice/train", "run_id": 2, "run_dir": "/starmap/nas/jobs/alice/train/runs/2",
           "resumed": false, "run_reason": "run 1 ended COMPLETED", "code_present": true, "missing_files": []}
"""

import base64
import datetime
import errno
import hashlib
import itertools
import json
import os
import pwd
import re
import stat
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.hpc.slurm_train.plugins.module_utils import bad_nodes
from ansible_collections.hpc.slurm_train.plugins.module_utils.cluster_rules import (
    collected_paths, job_script_name, run_of_path, visible,
)
from ansible_collections.hpc.slurm_train.plugins.module_utils.job_dirs import (
    END_MARKER_NAME, STAGE_SPEC, Refused, open_owned_file, owner_name, release_runs_lock, stage,
)
from ansible_collections.hpc.slurm_train.plugins.module_utils.run_cost import (
    ATTEMPTS_FILE, COST_FIELDS, HEALTH_FILE, SOURCE_SACCT, SOURCE_SLURMCTLD, ledger, parse_attempts, parse_cost_sacct,
    parse_health, scontrol_attempt,
)
from ansible_collections.hpc.slurm_train.plugins.module_utils.slurm import (
    INVALID_JOB_ID,
    JOB_IDENTITY_FORMAT,
    JobNameMismatch,
    SQUEUE_FORMAT,
    MY_JOBS_FORMAT,
    JobNotFound,
    PollSchedule,
    SinfoError,
    SlurmParseError,
    UnknownJobState,
    array_job_id,
    array_summary,
    array_tasks_of_sacct,
    backoff_delays,
    check_job_nodes,
    is_transient_error,
    job_state,
    parse_sacct,
    parse_accounting_uid,
    parse_job_identity,
    parse_my_jobs,
    parse_sbatch_parsable,
    parse_sbatch_test_only,
    parse_scontrol_job,
    parse_slurm_version,
    parse_squeue,
    retry_command,
    sacct_query,
    sinfo_nodes,
    unusable_nodes,
    validate_job_name,
    validate_node_name,
)

# The slurm_job action plugin's protocol with the module, under its one option `internal`: what a
# launch and a follow in slices need that no task sets itself.
INTERNAL_SPEC = {
    # Before submitting, make the job's directory on the NAS, stage its code, take its run and write
    # its files (the job script among them), in this module run, by the job_dir module's rules; the
    # script (`script`, one of its files) is submitted from the run's directory it is written into.
    # Nothing is submitted while an expected file is missing, or while the code is missing and no
    # archive of it came (the action then sends it and runs the module again).
    "stage": {"type": "dict", "options": STAGE_SPEC},
    # Before anything is staged, the job's nodes checked against one sinfo: known, in one partition,
    # the inventory's counts, enough usable; a script without a partition goes to theirs.
    "nodes": {"type": "dict", "options": {
        "names": {"type": "list", "elements": "str", "required": True},
        "num_nodes": {"type": "int", "required": True},
        "partition": {"type": "str", "default": ""},
        "group": {"type": "str", "default": ""},
        "node_group": {"type": "str", "default": ""},
        "inventory": {"type": "dict", "default": {}},
        # The jobs directory whose <user>/nodes.json keeps the user's bad nodes (empty: none read):
        # a group's job leaves the unexpired ones out, a node list holding one is refused unless forced.
        "bad_nodes_root": {"type": "path", "default": ""},
        "force_bad_nodes": {"type": "bool", "default": False},
    }},
    # After a node failure Slurm did not requeue, the job's nodes it has down are recorded bad for
    # this many hours (0: none) in <run_records>/<user>/nodes.json: the job script's own record
    # needs a next attempt, and a job not requeued has none.
    "bad_node_hours": {"type": "float", "default": 0},
    # A follow in slices: return at the next change of state (or at timeout) with `progress`, from
    # which the next slice carries on without asking Slurm again at once; a slice also ends once the
    # log grew and progress_log_every seconds passed, with at most progress_log_lines new lines.
    "return_on_change": {"type": "bool", "default": False},
    "progress_from": {"type": "dict"},
    "progress_log_lines": {"type": "int", "default": 20},
    "progress_log_every": {"type": "float", "default": 2},
    # When the job is final, return its log and script (an array's every task's log and sweep.tsv)
    # for the controller to write: only the owner's regular files of its own directory under
    # run_records/<user>/, reached without a link, up to COLLECT_INLINE_MAX_BYTES.
    "collect_files": {"type": "bool", "default": False},
}

ARGUMENT_SPEC = {
    "state": {"type": "str", "choices": ["present", "query", "absent", "list"], "default": "present"},
    "script": {"type": "path"},
    "job_name": {"type": "str"},
    "chdir": {"type": "path"},
    "sbatch_args": {"type": "list", "elements": "str", "default": []},
    "job_id": {"type": "int"},
    "wait": {"type": "bool", "default": True},
    "timeout": {"type": "int", "default": 0},
    "poll_min": {"type": "float", "default": 1},
    "poll_max": {"type": "float", "default": 30},
    "marked_poll_interval": {"type": "float", "default": 60},
    "accounting": {"type": "str", "choices": ["auto", "yes", "no"], "default": "auto"},
    "force": {"type": "bool", "default": False},
    "log_tail_lines": {"type": "int", "default": 40},
    "environment": {"type": "dict", "default": {}},
    "end_marker": {"type": "str"},
    "controller_timeout": {"type": "int", "default": 600},
    "progress_every": {"type": "int", "default": 30},
    "private_output": {"type": "bool", "default": False},
    "secret_env": {"type": "list", "elements": "str", "default": []},
    "run_records": {"type": "path"},
    # apply_defaults: the protocol's defaults without it too (a default dict would be filled in place).
    "internal": {"type": "dict", "options": INTERNAL_SPEC, "apply_defaults": True},
}

CLUSTERS_RULE = ("the module follows jobs of the local cluster only (its queries have no -M); submit from a host "
                 "of that cluster, or set environment SLURM_CONF to its slurm.conf")
# Options the module sets itself, or that would break following one job.
RESERVED_SBATCH_OPTIONS = {
    "--job-name": "use job_name", "-J": "use job_name",
    "--comment": "the module sets it to the fingerprint",
    "--parsable": "the module sets it", "--test-only": "use check mode",
    "--wait": "use wait", "-W": "use wait",
    # sbatch would print "JOBID;CLUSTER", and the job would be lost to the module's queries, which
    # ask the local slurmctld only.
    "--clusters": CLUSTERS_RULE, "-M": CLUSTERS_RULE,
}
# The variables sbatch (and squeue, scontrol, scancel) take as -M (src/sbatch/opt.c env_vars).
CLUSTERS_VARIABLES = ("SLURM_CLUSTERS", "SBATCH_CLUSTERS")
# Where a job's log is when only sacct knows it and sacct has no StdOut (before 24.05):
# templates/train.sbatch.j2's --output=<job dir>/%x-%j.out, the launch submitting from the
# job dir (sacct's WorkDir), or sbatch's default slurm-%j.out there.
JOB_DIR_LOGS = ("{name}-{job_id}.out", "slurm-{job_id}.out")
SUBMIT_ATTEMPTS = 5
# What the result reports of a job record (parse_scontrol_job or parse_sacct, plus its source).
JOB_KEYS = (
    "job_id", "state", "exit_code", "exit_signal", "reason", "nodes", "elapsed_seconds",
    "restarts", "stdout_path", "stderr_path", "name", "partition", "state_source",
    "tasks", "tasks_done", "tasks_total", "log_task",
)
# What a slice hands the next of the job it saw (progress.job), so that a slice that ends without
# a look need not ask Slurm: the job's record as find_job gives it.
JOB_RECORD_KEYS = JOB_KEYS + ("EndTime",)
LOG_READ_BLOCK = 64 * 1024
# The most of a log's end that its tail is looked for in: a log without line ends (a progress
# bar drawn with \r, binary output) costs this much to read, however large it is.
LOG_TAIL_SCAN_BYTES = 1024 * 1024
# A log's lines end at \n, \r\n or \r (a progress bar's \r shows one line per update).
_LINE_END_RE = re.compile(rb"\r\n|\r|\n")
# How often the end marker is looked for: a stat of a local or NAS file, no controller RPC. The
# job is final in Slurm about 0.05 s after its batch script wrote the marker (bench2), so a
# check every 0.2 s made the answer wait 0.1 s on average for nothing.
MARKER_CHECK_INTERVAL = 0.05
# Longest pause between two tries to reach a controller that does not answer while following.
CONTROLLER_RETRY_MAX_DELAY = 15.0
# What a run's end record keeps of the job (job_dir.py reads it).
RUN_RECORD_KEYS = ("job_id", "state", "exit_code", "restarts")
# After the marker, Slurm is asked this many times at that pace before the regular schedule.
MARKER_QUICK_POLLS = 10
# Seconds between looks at a followed log's size, once a slice may end for its new lines.
LOG_CHECK_INTERVAL = 0.5
# The most that the files of a finished job (collect_files) add to the module's answer; a larger
# file is left for the controller to fetch.
COLLECT_INLINE_MAX_BYTES = 8 * 1024 * 1024
# A job id at or above 2**26 carries a federation's cluster id in its upper bits (Slurm's
# fed_mgr.c); one below it was submitted to this cluster alone, so `scontrol --local` shows it
# as well, without the federation lookup (REQUEST_FED_INFO) that every scontrol makes first:
# half of a follower's slurmctld RPCs.
FEDERATED_JOB_ID_MIN = 1 << 26


# How long the cost waits for slurmdbd to record a final job's last attempt (seen: about 2.5 s).
COST_SACCT_LOOKS = 11
COST_SACCT_WAIT_SECONDS = 0.5
# What sacct says of a started attempt whose end slurmdbd has not been told yet.
UNENDED_SACCT_STATES = ("RUNNING", "COMPLETING")


def no_progress_record(run_dir, job_id):
    """{step, checkpoint_step} of the job script's NO_PROGRESS end record of job ``job_id``
    (``run_dir``/run.json, the module user's own, not through a link); None for another record,
    another job's or none."""
    if not isinstance(job_id, int):
        return None
    try:
        fd = os.open(os.path.join(run_dir, "run.json"), os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("state") != "NO_PROGRESS" or record.get("job_id") != job_id:
        return None
    steps = {key: record.get(key) for key in ("step", "checkpoint_step")}
    return {key: value if isinstance(value, int) and not isinstance(value, bool) else None for key, value in steps.items()}


def failed_job_nodes(result):
    """The nodes to record bad of a job final in a node failure (Slurm did not requeue it, so no
    attempt of its script will): of its nodes as sinfo showed them then (collect's node_states),
    those Slurm gives no job now (slurm.unusable_nodes: down, drained, failing, not responding).
    The job's nodes that are well stay out of it; any other end names none."""
    if not result.get("final") or result.get("outcome") != "node_failure":
        return []
    return sorted(unusable_nodes(result.get("node_states") or {}))


def complete_last_attempts(attempts, ended):
    """sacct's attempts, the last of each job in ``ended`` ({job id: (state, elapsed seconds,
    restarts)}) given slurmctld's final state and elapsed time where sacct has the attempt
    started but not ended, and has every attempt before it."""
    rows, last = {}, {}
    for index, attempt in enumerate(attempts):
        rows[attempt["job_id"]] = rows.get(attempt["job_id"], 0) + 1
        last[attempt["job_id"]] = index
    for job_id, index in last.items():
        if job_id not in ended or attempts[index]["state"] not in UNENDED_SACCT_STATES:
            continue
        state, elapsed, restarts = ended[job_id]
        if rows[job_id] == restarts + 1:
            attempts[index] = {**attempts[index], "state": state, "elapsed_seconds": elapsed}
    return attempts


def all_attempts_ended(attempts):
    """Whether the last attempt sacct lists of each job (each array task) is in a final state."""
    last = {}
    for attempt in attempts:
        last[attempt["job_id"]] = attempt["state"]
    try:
        return all(job_state(state).final for state in last.values())
    except UnknownJobState:
        return True  # a state this module does not know: take sacct's answer as it is


def change_key(job):
    """What a change of the job is (a look after one starts the poll schedule over): its state and
    restarts, and for an array how many of its tasks are final."""
    return job["state"], job["restarts"], job.get("tasks_done")


def job_fingerprint(job_name, script_content, secret_env=()):
    """What makes two submissions the same job: its name and the exact script, less the values of
    the variables named in ``secret_env`` (the script's ``export NAME=<quoted value>`` lines): the
    fingerprint is in the job's comment, which every user sees, and a hash of a short token is a
    guess checked offline."""
    for name in secret_env:
        script_content = re.sub(
            rb"^export " + re.escape(name.encode("utf-8")) + rb"=(?:'(?:[^']|'\"'\"')*'|[^\s']*)$",
            b"export " + name.encode("utf-8") + b"=<secret>", script_content, flags=re.MULTILINE)
    return hashlib.sha256(job_name.encode("utf-8") + script_content).hexdigest()[:16]


def reserved_option_problem(sbatch_args):
    """A message about the first option in sbatch_args that the module must own, or None."""
    for arg in sbatch_args:
        option = arg.split("=", 1)[0] if arg.startswith("--") else arg[:2]
        if option in RESERVED_SBATCH_OPTIONS:
            return f"sbatch_args must not contain {arg!r}: {RESERVED_SBATCH_OPTIONS[option]}"
    return None


def job_dir_log(run):
    """The log in the job's directory (JOB_DIR_LOGS) of a run that sacct reports, if it is there."""
    if not run.get("work_dir"):
        return None
    try:
        validate_job_name(run["name"])
        patterns = JOB_DIR_LOGS
    except ValueError:  # a name with '/' (not a launch's job) would lead out of the directory
        patterns = [pattern for pattern in JOB_DIR_LOGS if "{name}" not in pattern]
    for pattern in patterns:
        path = os.path.join(run["work_dir"], pattern.format(name=run["name"], job_id=run["job_id"]))
        if os.path.isfile(path):
            return path
    return None


def open_log(path):
    """A descriptor of the regular file ``path`` (O_NONBLOCK: a FIFO put there would block); OSError
    otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", path)
    return fd


def _line_ends(chunk):
    return chunk.count(b"\n") + chunk.count(b"\r") - chunk.count(b"\r\n")


def _lines(data):
    """The text lines of ``data``, each with its control characters made visible."""
    lines = _LINE_END_RE.split(data)
    if lines and lines[-1] == b"":
        lines.pop()
    return [visible(line.decode("utf-8", "replace")) for line in lines]


def read_log_tail(path, lines, opener=open_log):
    """Last ``lines`` lines of a file, read from its end, and at most LOG_TAIL_SCAN_BYTES of it.
    ``opener(path)`` gives the file's descriptor (open_log, or one that refuses links)."""
    if not path or lines <= 0:
        return []
    try:
        fd = opener(path)
    except OSError:
        return []
    chunks, ends, later = [], 0, b""
    try:
        position = os.fstat(fd).st_size
        floor = max(0, position - LOG_TAIL_SCAN_BYTES)
        # One line end more than lines is needed when the file ends with one.
        while position > floor and ends <= lines:
            step = min(LOG_READ_BLOCK, position - floor)
            position -= step
            chunk = os.pread(fd, step, position)
            ends += _line_ends(chunk) - (chunk.endswith(b"\r") and later.startswith(b"\n"))
            chunks.append(chunk)
            later = chunk
    except OSError:
        return []
    finally:
        os.close(fd)
    found = _lines(b"".join(reversed(chunks)))
    if position > 0 and len(found) > 1:
        found = found[1:]  # the scan began inside a line whose head it lacks
    return found[-lines:]


def read_new_lines(path, offset, lines, opener=open_log):
    """The complete lines written to a file since ``offset`` (at most the last ``lines``), and
    the offset after them. No offset yet: only the newest lines. A file that shrank starts over."""
    if not path or lines <= 0:
        return [], offset
    try:
        fd = opener(path)
    except OSError:
        return [], offset
    try:
        size = os.fstat(fd).st_size
        if offset is None or offset > size:
            os.close(fd)
            fd = None
            return read_log_tail(path, lines, opener), size
        start = max(offset, size - LOG_READ_BLOCK)
        # Past the offset, the block may begin inside a line whose head it lacks: read the
        # byte before it too, and begin after the first line end.
        cut = start > offset
        data = os.pread(fd, size - start + cut, start - cut)
    except OSError:
        return [], offset
    finally:
        if fd is not None:
            os.close(fd)
    head = 0
    if cut:
        first = _LINE_END_RE.search(data)
        head = first.end() if first else len(data)
    # A \r last may be the head of a \r\n still being written: that line ends next time.
    body = data[:-1] if data.endswith(b"\r") else data
    last = max(body.rfind(b"\n"), body.rfind(b"\r"))
    complete = data[head:last + 1] if last >= head else b""
    return _lines(complete)[-lines:], start - cut + head + len(complete)


def log_size(path, opener=open_log):
    """The size of the log, opened with ``opener`` (a file open and fstat, no controller RPC);
    None when it cannot be read."""
    if not path:
        return None
    try:
        fd = opener(path)
    except OSError:
        return None
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def refuse_open(path):
    """The opener of a job whose files may not be read here (another user's, without O(run_records))."""
    raise OSError(errno.EACCES, "another user's job outside the jobs directory", path)


class SlurmCommandError(Exception):
    """A Slurm command failed for a reason that retrying did not (or could not) cure."""

    def __init__(self, command, rc, stderr):
        super().__init__(f"{command} failed (rc={rc}): {stderr.strip() or 'no message'}")
        self.transient = is_transient_error(rc, stderr)


class SlurmClient:
    """The Slurm commands as this module runs them: counted, retried when transient, parsed."""

    def __init__(self, module):
        self.module = module
        self.queries = 0
        self.accounting = module.params["accounting"]
        self.accounting_problem = "accounting=no" if self.accounting == "no" else None
        # LC_ALL last: the parsers expect the C locale whatever the user sets.
        self.environ = {name: str(value) for name, value in module.params["environment"].items()}
        self.environ["LC_ALL"] = "C"
        self.unanswered_since = None
        self.outages = []  # seconds, one entry per outage that ended
        self.sacct_args = None  # (options, fields) for this sacct, once its version is known

    def run_once(self, argv, cwd=None):
        self.queries += 1
        started = time.monotonic()
        # PWD as a shell in cwd has it: sbatch hands it to the job, whose shell then names its
        # working directory as it was given, not with links resolved (a name the nodes may not know).
        environ = {**self.environ, "PWD": cwd} if cwd else self.environ
        rc, out, err = self.module.run_command(argv, cwd=cwd, environ_update=environ, expand_user_and_vars=False)
        # How long Slurm did not answer: from the first failed try to the next answer.
        if is_transient_error(rc, err):
            self.unanswered_since = self.unanswered_since or started
        elif self.unanswered_since is not None:
            self.outages.append(time.monotonic() - self.unanswered_since)
            self.unanswered_since = None
        return rc, out, err

    def run(self, argv, cwd=None):
        return retry_command(lambda args: self.run_once(args, cwd=cwd), argv, sleep=time.sleep)

    def show_job(self, job_id, job_name=None):
        argv = ["scontrol", "show", "job", "-o", str(job_id)]
        if int(str(job_id).split("_")[0]) < FEDERATED_JOB_ID_MIN:
            argv.append("--local")
        rc, out, err = self.run(argv)
        if rc != 0 and INVALID_JOB_ID not in err:
            raise SlurmCommandError("scontrol show job", rc, err)
        # raises JobNotFound for INVALID_JOB_ID
        job = parse_scontrol_job(out, err, array_job_id=job_id, job_name=job_name)
        job["state_source"] = "scontrol"
        return job

    def sacct_version_query(self):
        """sacct's options and fields for its Slurm version: StdOut only from 24.05, which older
        versions refuse with 'Invalid field requested'. ``sacct --version`` reads the Slurm
        configuration but asks slurmdbd nothing."""
        if self.sacct_args is None:
            rc, out, err = self.run(["sacct", "--version"])
            if rc != 0:
                raise SlurmCommandError("sacct --version", rc, err)
            self.sacct_args = sacct_query(parse_slurm_version(out))
        return self.sacct_args

    def accounting_record(self, job_id):
        """The job as slurmdbd knows it (last run), or None if it does not or may not be asked."""
        if self.accounting_problem is not None:
            return None
        try:
            options, fields = self.sacct_version_query()
        except (SlurmCommandError, SlurmParseError) as error:
            if self.accounting != "auto":
                raise
            self.accounting_problem = f"sacct's version is unknown: {error}"
            return None
        argv = ["sacct", "-j", str(job_id), "-n", "-P", "-D", "-X", *options, "-o", ",".join(fields)]
        if self.accounting == "auto":
            # One try decides: a slurmdbd that does not answer now is not waited for.
            rc, out, err = self.run_once(argv)
            if rc != 0:
                self.accounting_problem = f"sacct failed: {err.strip()}"
                return None
            self.accounting = "yes"
        else:
            rc, out, err = self.run(argv)
            if rc != 0:
                raise SlurmCommandError("sacct", rc, err)
        runs, summary = parse_sacct(out, fields)
        if summary is None:
            return None
        tasks = array_tasks_of_sacct(runs, job_id)
        for task in tasks or []:
            if task["stdout_path"] is None:
                task["stdout_path"] = job_dir_log({"work_dir": task.pop("work_dir"), "name": summary["name"],
                                                   "job_id": f"{job_id}_{task['task']}"})
            task.pop("work_dir", None)
        if tasks is not None:
            summary.update(array_summary(job_id, tasks))
        elif summary["stdout_path"] is None:
            summary["stdout_path"] = summary["stderr_path"] = job_dir_log(runs[-1])
        summary["state_source"] = "sacct"
        return summary

    def cost_attempts(self, job_id, ended=None):
        """Every attempt of the job (of each task of an array) as sacct has them, for the cost
        ledger (run_cost.parse_cost_sacct); None without accounting. slurmctld hands a job's end
        to slurmdbd a few seconds after the job ends, so sacct may still show the last attempt
        running: ``ended`` ({job id: (state, elapsed seconds)}, slurmctld's record of the final job,
        the very figures it hands on) completes it. Only a last attempt that neither tells is
        asked about again, while slurmdbd catches up."""
        if self.accounting_problem is not None:
            return None
        argv = ["sacct", "-j", str(job_id), "-n", "-P", "-D", "-X", "-o", ",".join(COST_FIELDS)]
        for look in range(COST_SACCT_LOOKS):
            rc, out, err = self.run_once(argv) if self.accounting == "auto" else self.run(argv)
            if rc != 0:
                if self.accounting != "auto":
                    raise SlurmCommandError("sacct", rc, err)
                self.accounting_problem = f"sacct failed: {err.strip()}"
                return None
            try:
                attempts = complete_last_attempts(parse_cost_sacct(out), ended or {})
            except ValueError:
                return None
            if all_attempts_ended(attempts) or look == COST_SACCT_LOOKS - 1:
                return attempts or None
            time.sleep(COST_SACCT_WAIT_SECONDS)
        return None

    def job_identity(self, job_id):
        """(uid, exact name) of a job slurmctld knows (JOB_IDENTITY_FORMAT), or None."""
        argv = ["squeue", "-h", "-t", "all", "-j", str(job_id), "-o", JOB_IDENTITY_FORMAT]
        if int(str(job_id).split("_")[0]) < FEDERATED_JOB_ID_MIN:
            argv.append("--local")
        rc, out, err = self.run(argv)
        if rc != 0:
            if INVALID_JOB_ID in err:
                return None
            raise SlurmCommandError("squeue", rc, err)
        return parse_job_identity(out)

    def accounting_uid(self, job_id):
        """The uid accounting holds for the job, or None when it cannot be asked or knows none."""
        if self.accounting_problem is not None:
            return None
        argv = ["sacct", "-j", str(job_id), "-n", "-P", "-X", "-o", "UID"]
        rc, out, err = self.run_once(argv) if self.accounting == "auto" else self.run(argv)
        if rc != 0:
            if self.accounting == "auto":
                self.accounting_problem = f"sacct failed: {err.strip()}"
                return None
            raise SlurmCommandError("sacct", rc, err)
        return parse_accounting_uid(out)

    def find_job(self, job_id, job_name=None):
        """The job's current record: slurmctld first (cheap, complete), accounting once it forgot the job.
        ``job_name``: its exact name (job_identity), for a job its user named."""
        try:
            return self.show_job(job_id, job_name)
        except JobNotFound:
            record = self.accounting_record(job_id)
        if record is None:
            raise JobNotFound(
                job_id,
                "slurmctld does not list it (finished jobs are kept MinJobAge seconds) "
                f"and {self.accounting_problem or 'accounting has no record of it'}",
            )
        return record

    @property
    def user(self):
        return pwd.getpwuid(os.geteuid()).pw_name

    def may_act_on(self, owner):
        """The job's own user, root, or a Slurm operator/administrator (asked only when needed)."""
        if os.geteuid() == 0 or owner == self.user:
            return True
        rc, out, _ = self.run_once(["sacctmgr", "-n", "-P", "show", "user", self.user, "format=AdminLevel"])
        return rc == 0 and out.strip() in ("Operator", "Administrator")

    def find_active_copy(self, job_name, comment):
        """Newest pending or running job of this user with this name and fingerprint comment."""
        argv = ["squeue", "-h", "-u", str(os.geteuid()), "-n", job_name, "-o", SQUEUE_FORMAT]
        rc, out, err = self.run(argv)
        if rc != 0:
            raise SlurmCommandError("squeue", rc, err)
        # An array's tasks are listed one by one (5_0, 5_[2-3%2]): the copy is the array.
        copies = [array_job_id(job["job_id"]) for job in parse_squeue(out)
                  if job["comment"] == comment and not job_state(job["state"]).final]
        copy = max((job_id for job_id in copies if job_id is not None), default=None)
        return None if copy is None else {"job_id": copy}

    def submit(self, argv, cwd, find_copy):
        """Run sbatch; return (job id, submitted by this call, cluster: None unless sbatch sent it to
        another cluster).

        A transient error may hide a job the controller did queue before the
        reply was lost, so before trying again ``find_copy`` (if given) looks
        for it.  That is why retry_command is not used here.
        """
        delays = backoff_delays()
        for attempt in itertools.count(1):
            rc, out, err = self.run_once(argv, cwd=cwd)
            if rc == 0:
                job_id, cluster = parse_sbatch_parsable(out)
                return job_id, True, cluster
            if attempt == SUBMIT_ATTEMPTS or not is_transient_error(rc, err):
                raise SlurmCommandError("sbatch", rc, err)
            time.sleep(next(delays))
            copy = find_copy() if find_copy else None
            if copy is not None:
                return copy["job_id"], False, None

    def test_only(self, argv, cwd):
        rc, _, err = self.run(argv, cwd=cwd)
        if rc != 0:
            raise SlurmCommandError("sbatch --test-only", rc, err)
        return parse_sbatch_test_only(err)

    def cancel(self, job_id):
        rc, _, err = self.run(["scancel", str(job_id)])
        # scancel ignores jobs that are already done; these messages say the same when verbose.
        if rc != 0 and not any(text in err for text in ("already completing or completed", INVALID_JOB_ID)):
            raise SlurmCommandError("scancel", rc, err)


def _seconds_until(text):
    """Seconds from now to scontrol's EndTime (2026-12-04T18:10:00, local time); None when unknown."""
    try:
        return (datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S") - datetime.datetime.now()).total_seconds()
    except (TypeError, ValueError, OverflowError):
        return None


def _file_stamp(path):
    """(mtime, size) of a file, None when there is none: a stat, no controller RPC."""
    try:
        stat = os.stat(path) if path else None
    except OSError:
        return None
    return stat and (stat.st_mtime_ns, stat.st_size)


class EndMarker:
    """The file a job writes as its batch script ends, watched so as to answer without polling Slurm."""

    def __init__(self, pattern, job_id, seen=None, quick_polls_left=0, carried=False):
        self.path = pattern.replace("%j", str(job_id)) if pattern else None
        # An earlier run of a requeued job may have left one; an earlier slice of this follow
        # (``carried``) says what it saw, none included: a marker written between two slices is
        # the job's end, not an earlier run's. And how many quick polls are left of the marker's
        # last change (the job turning COMPLETING ends a slice between the marker and the job's end).
        self.seen = tuple(seen) if seen else (None if carried else self._stamp())
        self.quick_polls_left = quick_polls_left

    def _stamp(self):
        return _file_stamp(self.path)

    def wait(self, seconds, also=None):
        """Sleep up to ``seconds``; True once the marker appears or changes, or once the file
        ``also`` (a pending job's log) appears or changes, False when the time is up."""
        deadline = time.monotonic() + seconds
        also_seen = _file_stamp(also)
        while self.path:
            stamp = self._stamp()
            if stamp is not None and stamp != self.seen:
                self.seen, self.quick_polls_left = stamp, MARKER_QUICK_POLLS
                return True
            if also and _file_stamp(also) != also_seen:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(MARKER_CHECK_INTERVAL, left))
        time.sleep(max(0.0, deadline - time.monotonic()))
        return False

    def hurry(self):
        """True for a few polls after the marker changed; then back to the regular schedule."""
        if self.quick_polls_left:
            self.quick_polls_left -= 1
            return True
        return False


class SlurmJobRunner:
    """One run of the module: decides what to do for ``state`` and builds the result."""

    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.slurm = SlurmClient(module)
        # Every documented key, so that a result always has the same shape.
        self.result = dict.fromkeys(JOB_KEYS)
        self.result.update(
            changed=False, submitted=False, found_existing=False, timed_out=False, test_only=None,
            job_id=self.params["job_id"], outcome=None, final=None, state_description=None,
            nodes=[], log_tail=[], controller_outage_seconds=0, progress=None, user=None, jobs=None, run_record=None,
            no_progress=None, cost=None, health=None,
            staged=None, end_marker=self.params["end_marker"], collected_files=None, collected_truncated=None,
            collected_skipped=None, node_states=None, nodes_checked=None, marked_bad_nodes=None,
        )
        # Who owns the job: {"uid", "user", "name"}. The module's user for a job it submitted or
        # found of its own; for one given by id what find() learns from squeue or accounting, never
        # the record's UserId, which a job name such as "x UserId=alice(2001)" could fake.
        self.owner = None
        # The job's record as last looked at (find_job's: scontrol's fields, or sacct's).
        self.job_record = None
        # The partition a job script that names none goes to: the one its nodes share (check_nodes).
        self.partition_option = []
        # A staged job's working directory, its run's, by the name the site gives it: sbatch's own
        # (SLURM_SUBMIT_DIR, Slurm's WorkDir and so the log's path) is its cwd with links resolved.
        self.chdir_option = []
        if self.params["job_id"] is None:
            self.owner = {"uid": os.geteuid(), "user": self.slurm.user, "name": None}
        elif (self.params["progress_from"] or {}).get("owner"):
            self.owner = self.params["progress_from"]["owner"]

    def finish(self, msg=None):
        if self.result.get("final"):
            self.collect()
            self.result["marked_bad_nodes"] = self.mark_failed_nodes()
            self.result["no_progress"] = self.script_stopped()
            self.result["cost"] = self.cost()
            self.result["health"] = self.health()
        self.result["queries"] = self.slurm.queries
        record_error = self.record_run_end()
        if record_error:
            msg = f"{msg}; {record_error}" if msg else record_error
        if msg is None:
            self.module.exit_json(**self.result)
        self.module.fail_json(msg=msg, **self.result)

    def collect(self):
        """For a finished job, what its launch reports and brings back, read now rather than by
        further module runs: after a node failure, the states of its nodes (Slurm's record of the
        job does not say which node failed); with collect_files, its log, script and sweep files
        (cluster_rules.collected_paths), base64, up to COLLECT_INLINE_MAX_BYTES in all."""
        result = self.result
        if result.get("outcome") == "node_failure" and result.get("nodes"):
            try:
                known = sinfo_nodes(self.slurm.run)
            except SinfoError:  # the states are extra: the job's result stands without them
                known = {}
            result["node_states"] = {name: known[name] for name in result["nodes"] if name in known}
        root, owner = self.params["run_records"], self.owner or {}
        if not self.params["collect_files"] or owner.get("uid") is None:
            return
        opened, skipped = [], {}
        try:
            for path in collected_paths(result, root):
                try:
                    fd = open_owned_file(root, owner["user"], owner["uid"], path)
                except OSError as error:
                    skipped[path] = error.strerror  # not there (a point that never started), or refused
                    continue
                opened.append((os.fstat(fd).st_size, path, fd))
            # Smallest first: the script and the sweep's table whole, the log's end with what is left.
            files, truncated, budget = {}, {}, COLLECT_INLINE_MAX_BYTES
            for size, path, fd in sorted(opened):
                keep = min(size, budget)
                data = os.pread(fd, keep, size - keep) if keep else b""
                files[path] = base64.b64encode(data).decode("ascii")
                budget -= len(data)
                if len(data) < size:
                    truncated[path] = size
        finally:
            for _, _, fd in opened:
                os.close(fd)
        result.update(collected_files=files, collected_truncated=truncated, collected_skipped=skipped)

    def mark_failed_nodes(self):
        """The nodes that failed a job Slurm did not requeue (failed_job_nodes), recorded in the
        user's bad nodes by bad_nodes' own rules (a planted record refused); their records, or None."""
        hours, root, owner = self.params["internal"]["bad_node_hours"], self.params["run_records"], self.owner or {}
        nodes = failed_job_nodes(self.result)
        if not nodes or not hours or hours <= 0 or not root or self.module.check_mode or owner.get("uid") != os.geteuid():
            return None
        job_id = self.result.get("job_id")
        try:
            marked = bad_nodes.mark_once(root, nodes, "NODE_FAIL", job_id, hours)
        except (bad_nodes.Refused, ValueError, OSError) as error:
            self.module.warn(f"job {job_id} ended in a node failure on {', '.join(nodes)}, not recorded as your bad "
                             f"node(s): {error}")
            return None
        return bad_nodes.listed(marked) or None

    def cost(self):
        """What the job cost (run_cost.ledger): sacct's attempts joined with the job script's own
        record of each (attempts-<job id>.tsv in each task's run directory); the script's alone
        without accounting. None when neither tells."""
        result, opener = self.result, self.opener()
        log = result.get("stdout_path")
        if not log or result.get("job_id") is None:
            return None
        # A job that ran once and that slurmctld still knows: its record is what sacct would say.
        once = (scontrol_attempt(self.job_record) if self.job_record and result.get("state_source") == "scontrol"
                and not result.get("tasks") and result.get("restarts") == 0 else None)
        accounted, source = ([once], SOURCE_SLURMCTLD) if once else (None, SOURCE_SACCT)
        if accounted is None:
            try:
                accounted = self.slurm.cost_attempts(result["job_id"], self.ended_jobs())
            except SlurmCommandError:
                accounted = None
        # Each task's directory and own job id: a sweep's point trains in points/<task>/.
        places = {}
        if result.get("tasks"):
            for task in result["tasks"]:
                if isinstance(task.get("task"), int) and task.get("job_id"):
                    places[int(task["job_id"])] = os.path.join(os.path.dirname(log), "points", str(task["task"]))
            for row in accounted or []:
                task = str(row.get("task") or "")
                if row["job_id"] not in places and task.isdigit():
                    places[row["job_id"]] = os.path.join(os.path.dirname(log), "points", task)
        else:
            places[int(result["job_id"])] = os.path.dirname(log)
        records = {}
        for job_id, directory in places.items():
            try:
                fd = opener(os.path.join(directory, ATTEMPTS_FILE.format(job_id=job_id)))
            except OSError:
                continue
            with os.fdopen(fd, "rb") as handle:
                records[job_id] = parse_attempts(handle.read(65536).decode("utf-8", "replace"))
        if accounted is None and not records:
            return None
        return ledger(records, accounted, source)

    def ended_jobs(self):
        """{job id: (state, elapsed seconds, restarts)} of the final job, or of each final task of
        an array, as slurmctld recorded them; empty when the state came from sacct."""
        result = self.result
        if result.get("state_source") != "scontrol":
            return {}
        records = result.get("tasks") or [result]
        return {record["job_id"]: (record["state"], record["elapsed_seconds"], record.get("restarts") or 0)
                for record in records
                if isinstance(record.get("job_id"), int) and record.get("elapsed_seconds") is not None
                and job_state(record["state"]).final}

    def health(self):
        """The health gate's record of each attempt (HEALTH_FILE beside the log: the job script's);
        None for a job without the gate, or a job array (each task has its own)."""
        log = self.result.get("stdout_path")
        if not log or self.result.get("job_id") is None or self.result.get("tasks"):
            return None
        try:
            fd = self.opener()(os.path.join(os.path.dirname(log), HEALTH_FILE.format(job_id=self.result["job_id"])))
        except OSError:
            return None
        with os.fdopen(fd, "rb") as handle:
            return parse_health(handle.read(LOG_READ_BLOCK).decode("utf-8", "replace")) or None

    def script_stopped(self):
        """The job script's NO_PROGRESS record of this job (no_progress_record of run.json beside its
        log), or None: a failed attempt that did not advance the checkpoint is not requeued, and
        says at which step. Of an array, each task's own goes into its entry (``no_progress``): a
        sweep's point keeps its run.json in points/<task>/."""
        log, owner = self.result.get("stdout_path"), self.result.get("user")
        if not log or owner != self.slurm.user:
            return None
        run_dir = os.path.dirname(log)
        for task in self.result.get("tasks") or []:
            task["no_progress"] = (no_progress_record(os.path.join(run_dir, "points", str(task["task"])), task.get("job_id"))
                                   if task.get("state") == "FAILED" and isinstance(task.get("task"), int) else None)
        if self.result.get("state") != "FAILED":
            return None
        return no_progress_record(run_dir, self.result.get("job_id"))

    def record_run_end(self):
        """Write the final job's run.json beside its log (O(run_records)); a message if that failed."""
        result, root = self.result, self.params["run_records"]
        log, owner = result.get("stdout_path"), result.get("user")
        if (not root or self.module.check_mode or not result.get("final") or result.get("state") is None
                or not log or owner is None or owner != self.slurm.user):
            return None
        log = "/" + os.path.normpath(log).lstrip("/")
        if not log.startswith(f"{os.path.normpath(root).rstrip('/')}/{owner}/") or run_of_path(log) is None:
            return None
        run_dir = os.path.dirname(log)
        path = os.path.join(run_dir, "run.json")
        record = {key: result.get(key) for key in RUN_RECORD_KEYS}
        stopped = result.get("no_progress")
        if stopped:
            # The job script's own word: Slurm says FAILED, the next launch must see why.
            record.update(state="NO_PROGRESS", step=stopped.get("step"), checkpoint_step=stopped.get("checkpoint_step"),
                          log_tail=result.get("log_tail") or [])
        text = json.dumps(record) + "\n"
        try:
            # A temporary file (0600) beside it, then a rename: a reader never sees half a record.
            handle, scratch = tempfile.mkstemp(dir=run_dir, prefix=".run.json.")
            try:
                with os.fdopen(handle, "w", encoding="utf-8") as out:
                    out.write(text)
                os.replace(scratch, path)
            except BaseException:
                os.unlink(scratch)
                raise
        except OSError as error:
            return f"cannot write the run's end record {path}: {error.strerror or error}"
        result["run_record"] = path
        return None

    def record(self, job):
        """Copy what is known about the job into the result."""
        info = job_state(job["state"])
        opener = self.opener()
        self.job_record = job
        self.result.update(
            {key: job.get(key) for key in JOB_KEYS},
            user=(self.owner or {}).get("user"),
            outcome=info.outcome, final=info.final, state_description=info.description,
            log_tail=read_log_tail(job["stdout_path"], self.params["log_tail_lines"], opener),
        )
        for task in self.result["tasks"] or []:
            task["final"] = job_state(task["state"]).final
            task["log_last_line"] = next(iter(read_log_tail(task["stdout_path"], 1, opener)), None)
        return info

    def opener(self):
        """How the job's logs are opened: the module user's own as they are (open_log); another
        user's only inside O(run_records)/<owner>/, refusing links (open_owned_file), and not at
        all without O(run_records): root or an operator reads nothing that user could point
        elsewhere."""
        owner, root = self.owner or {}, self.params["run_records"]
        if owner.get("uid") == os.geteuid():
            return open_log
        if not root or owner.get("uid") is None:
            return refuse_open
        return lambda path: open_owned_file(root, owner["user"], owner["uid"], path)

    def follow(self, job_id):
        """Look at the job until it is final or the timeout is up; record what was seen last."""
        timeout = self.params["timeout"]
        deadline = time.monotonic() + timeout if timeout else None
        schedule = PollSchedule(self.params["poll_min"], self.params["poll_max"])
        progress = self.params["progress_from"]
        marker = EndMarker(self.params["end_marker"], job_id, seen=(progress or {}).get("marker"),
                           quick_polls_left=(progress or {}).get("marker_quick_polls", 0), carried=bool(progress))
        if progress:
            # A slice after the first: carry on from the last look, and from the job it saw.
            schedule.resume(progress["next_poll"], (progress["state"], progress["restarts"], progress.get("tasks_done")))
            job, seen = None, progress.get("job")
            look_at, watch_log = progress.get("next_look_at"), progress.get("watch_log")
            if look_at is None:  # from a slice that planned no look: the schedule's next interval
                look_at = time.monotonic() + next(schedule)
        else:
            job = seen = self.find_job_patiently(job_id)
            schedule.observe(change_key(job))
            look_at, watch_log = self.plan_look(schedule, marker, job)
        # A slice may end early for new lines of the log, read here between the looks at Slurm.
        opener, log_every = self.opener(), self.params["progress_log_every"] if self.params["return_on_change"] else 0
        log_path = (seen or {}).get("stdout_path")
        log_seen = ((progress or {}).get("log_size") if (progress or {}).get("log_path") == log_path
                    else log_size(log_path, opener))
        next_log_check = time.monotonic() + log_every if log_every > 0 and log_path else None
        while job is None or not job_state(job["state"]).final:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                self.result["timed_out"] = True
                break
            if marker.hurry():
                # The batch script just ended: Slurm makes the job final within moments.
                time.sleep(MARKER_CHECK_INTERVAL if remaining is None else min(MARKER_CHECK_INTERVAL, remaining))
            else:
                wait = max(0.0, look_at - time.monotonic())
                if next_log_check is not None:
                    wait = min(wait, max(0.0, next_log_check - time.monotonic()))
                woke = marker.wait(wait if remaining is None else min(wait, remaining), also=watch_log)
                if not woke and next_log_check is not None and time.monotonic() >= next_log_check:
                    size = log_size(log_path, opener)
                    if size is not None and size != log_seen:
                        break  # its new lines are shown now; Slurm is asked at the look planned
                    next_log_check = time.monotonic() + LOG_CHECK_INTERVAL
                if (self.params["return_on_change"] and not woke
                        and time.monotonic() < look_at - MARKER_CHECK_INTERVAL):
                    continue  # the slice is up before the next look is due: a later slice makes it
            job = seen = self.find_job_patiently(job_id)
            changed = schedule.observe(change_key(job))
            look_at, watch_log = self.plan_look(schedule, marker, job)
            # COMPLETING (the batch script ended, the epilogs run) lasts moments and is no news to a
            # person: the slice goes on to the final state rather than end for it, which would cost
            # the answer a module run more.
            if changed and self.params["return_on_change"] and job_state(job["state"]).outcome != "finishing":
                break
        if job is None:
            # The slice ended before its first look: the job as the last slice saw it (no RPC).
            job = seen if seen is not None else self.find_job_patiently(job_id)
        info = self.record(job)
        if self.params["return_on_change"]:
            # An array's log is that of the task shown, which changes: another file starts with its tail.
            same_log = (progress or {}).get("log_path") == job["stdout_path"]
            # Measured before the read: what is written after it ends the next slice.
            size = log_size(job["stdout_path"], self.opener())
            lines, offset = read_new_lines(job["stdout_path"], progress["log_offset"] if progress and same_log else None,
                                           min(self.params["progress_log_lines"], self.params["log_tail_lines"]),
                                           self.opener())
            self.result["progress"] = {
                "state": job["state"], "restarts": job["restarts"], "tasks_done": job.get("tasks_done"),
                "next_poll": schedule.next_interval, "next_look_at": look_at, "watch_log": watch_log,
                "marker": marker.seen, "marker_quick_polls": marker.quick_polls_left,
                "log_path": job["stdout_path"], "log_offset": offset, "log_lines": lines, "log_size": size,
                "job": {key: job.get(key) for key in JOB_RECORD_KEYS}, "owner": self.owner,
            }
        return info

    def plan_look(self, schedule, marker, job):
        """(when to ask Slurm next, as time.monotonic(), the same clock in every slice's process on
        this host; the file whose change is looked for meanwhile).

        With an end marker, the marker answers a running job's end, so Slurm is asked only at
        marked_poll_interval (for a job that ends without writing it); a pending job's log
        appearing says that it started. A job in any other state (COMPLETING, after its batch
        script ended; REQUEUED; CONFIGURING) is looked at on the regular schedule."""
        interval, watched = next(schedule), None
        if marker.path and not job_state(job["state"]).final:
            state = job["state"].split()[0]
            if state == "PENDING":
                watched = job.get("stdout_path")
            elif state == "RUNNING":
                interval = max(interval, self.params["marked_poll_interval"])
                # A job waiting for its time limit writes no marker: look as the limit passes.
                left = _seconds_until(job.get("EndTime"))
                if left is not None and left > 0:
                    interval = min(interval, left + self.params["poll_min"])
        return time.monotonic() + interval, watched

    def find_job_patiently(self, job_id):
        """The job's record; a controller that does not answer (restart, failover) is waited for.

        A followed job runs on without slurmctld, so an outage shorter than controller_timeout
        only delays the answer.
        """
        delays = backoff_delays(base_delay=1.0, max_delay=CONTROLLER_RETRY_MAX_DELAY)
        while True:
            try:
                job = self.find(job_id)
            except SlurmCommandError as error:
                since = self.slurm.unanswered_since
                if not error.transient or since is None:
                    raise
                if time.monotonic() - since >= self.params["controller_timeout"]:
                    raise SlurmCommandError(
                        "scontrol show job", "-", f"slurmctld did not answer for {time.monotonic() - since:.0f} s "
                        f"(controller_timeout={self.params['controller_timeout']}): {error}") from None
                time.sleep(next(delays))
                continue
            for waited in self.slurm.outages:
                self.result["controller_outage_seconds"] += round(waited, 1)
                self.module.warn(f"slurmctld did not answer for {waited:.0f} s while job {job_id} was followed; "
                                 "it answers again and the job was found")
            self.slurm.outages.clear()
            return job

    def watch(self, job_id):
        """Follow the job when asked to (and not in check mode), else look once."""
        if self.params["wait"] and not self.module.check_mode:
            return self.follow(job_id)
        return self.record(self.find(job_id))

    def fail_unless_succeeded(self, info):
        if info.final and not info.success:
            result = self.result
            self.finish(
                f"Slurm job {result['job_id']} ended in state {result['state']} "
                f"(exit code {result['exit_code']}, signal {result['exit_signal']}, reason {result['reason']})"
            )

    def find(self, job_id):
        """slurm.find_job, and for a job given by id, first who owns it and the check that it is
        the user's (once: a job's owner does not change)."""
        if self.params["job_id"] is None:
            return self.slurm.find_job(job_id)
        first = self.owner is None
        if first:
            self.owner = self.identify(job_id)
        try:
            job = self.slurm.find_job(job_id, self.owner["name"])
        except JobNameMismatch:
            # Renamed since squeue was asked (scontrol update JobName=): ask again, once.
            self.owner["name"] = (self.slurm.job_identity(job_id) or (None, None))[1]
            job = self.slurm.find_job(job_id, self.owner["name"])
        if first:
            self.check_owner(job)
        return job

    def identify(self, job_id):
        """{"uid", "user", "name"} of a job given by id: squeue's numeric user id and exact name for
        a job slurmctld knows, accounting's UID for one only accounting does; uid None when
        neither says."""
        identity = self.slurm.job_identity(job_id)
        uid, name = identity if identity is not None else (self.slurm.accounting_uid(job_id), None)
        return {"uid": uid, "user": None if uid is None else owner_name(uid), "name": name}

    def check_owner(self, job):
        """Refuse another user's job given by id, before anything of it is read or changed."""
        owner = self.owner["user"]
        if self.slurm.may_act_on(owner):
            return
        if owner is None:
            self.finish(f"job {job['job_id']}: neither slurmctld nor accounting says whose job it is "
                        f"({self.slurm.accounting_problem or 'no owner recorded'}): only root or a Slurm operator "
                        "may follow, collect or cancel it")
        self.finish(f"job {job['job_id']} belongs to {owner}, not to {self.slurm.user}: only the job's own user, "
                    "root or a Slurm operator may follow, collect or cancel it")

    def present(self):
        if self.params["job_id"] is None:
            known = self.check_nodes() if self.params["nodes"] is not None else {}
            with tempfile.TemporaryDirectory(prefix="slurm-job-prediction-") as scratch:
                try:
                    if self.params["stage"] is not None and not self.stage(scratch, known):
                        return  # nothing to submit yet: RV(staged) says why
                    self.submit_or_find()
                finally:
                    # The run is taken and its job in Slurm: the next launch of the name may look.
                    release_runs_lock()
        if self.result["job_id"] is not None:
            self.fail_unless_succeeded(self.watch(self.result["job_id"]))

    def check_nodes(self):
        """The job's nodes (internal `nodes`) against one sinfo, before anything is made; what was
        found (the partition the nodes share, which a job script that names none is submitted to)."""
        request = self.params["nodes"]
        try:
            for name in request["names"]:
                validate_node_name(name)
        except ValueError as error:
            self.finish(f"nodes: {error}")
        try:
            known = sinfo_nodes(self.slurm.run)
        except SinfoError as error:
            self.finish(str(error))
        checked = check_job_nodes(known, request)
        if checked["problem"]:
            self.finish(checked["problem"])
        self.result["nodes_checked"] = {key: checked[key] for key in ("partition", "unusable", "notes")}
        if not request["partition"]:
            self.partition_option = [f"--partition={checked['partition']}"]
        self.result["nodes_checked"].update(self.check_bad_nodes(request, checked["unusable"]))
        return {"partition": checked["partition"]}

    def check_bad_nodes(self, request, unusable):
        """The user's unexpired bad nodes among the job's: a node group's job leaves them out
        (sbatch --exclude, when enough usable nodes remain); a node list holding one is refused,
        or with force_bad_nodes warned about."""
        found = {"bad_nodes": [], "excluded": []}
        if not request["bad_nodes_root"]:
            return found
        try:
            records = bad_nodes.unexpired(bad_nodes.read(request["bad_nodes_root"]))
        except bad_nodes.UserDirRefused:
            return found  # the staging that follows refuses that directory, naming the admin's fix
        except (bad_nodes.Refused, OSError) as error:
            self.finish(f"your bad nodes: {error}")
        kept = bad_nodes.listed({node: record for node, record in records.items() if node in request["names"]})
        found["bad_nodes"] = kept
        if not kept:
            return found
        lines = "; ".join(entry["line"] for entry in kept)
        forget = f"ansible-playbook jobs.yml -e forget_node={kept[0]['node']} clears one"
        if not request["group"]:
            if not request["force_bad_nodes"]:
                self.finish(f"The node list holds a bad node of yours: {lines}. Pick other nodes, or launch by node "
                            "group (-e group=<group> -e num_nodes=N), which leaves bad nodes out; "
                            f"{forget}, or -e force=true submits to it anyway.")
            self.module.warn(f"submitting to a bad node of yours, as asked (force): {lines}")
            return found
        usable = [name for name in request["names"] if name not in unusable and name not in records]
        num_nodes = int(request["num_nodes"])
        if len(usable) < num_nodes:
            self.finish(f"{num_nodes} nodes of group {request['group']} are needed and {len(usable)} are usable: "
                        f"{len(unusable)} unusable in Slurm, and bad nodes of yours left out: {lines}. "
                        f"Ask for fewer nodes, or wait until one expires; {forget}.")
        found["excluded"] = [entry["node"] for entry in kept]
        self.params["sbatch_args"] = [*self.params["sbatch_args"], "--exclude=" + ",".join(found["excluded"])]
        self.result["nodes_checked"]["notes"] = [
            *self.result["nodes_checked"]["notes"], *(f"left out, a bad node of yours: {entry['line']}" for entry in kept)]
        return found

    def stage(self, scratch, known):
        """Stage the job (the job_dir module's rules): O(script) names one of its files, written
        into the run's directory, where sbatch runs it and the job leaves its end mark; in check
        mode, the script as it would be written goes to ``scratch`` for Slurm's prediction. False
        when there is nothing to submit yet."""
        params, check_mode = self.params, self.module.check_mode
        name = params["script"]
        content = next((spec["content"] for spec in params["stage"]["files"] if spec["name"] == name), None)
        if content is None:
            self.finish(f"script {name} is not one of stage's files (with stage, the script is the name of the "
                        "file it writes into the run's directory)")
        if not params["stage"]["resume"]:
            # The job script names the staged code from the run's directory (job_dirs.code_dir_from_run).
            self.finish("stage: resume is empty: give auto, never or a run id (a staged job runs in a run of its "
                        "job name)")
        try:
            staged = stage(params["stage"], check_mode, known)
        except Refused as error:
            self.finish(str(error))
        except OSError as error:
            self.finish(f"{error.filename or params['stage']['jobs_root']}: {error.strerror}")
        self.result.update(staged=staged, changed=staged["changed"])
        code_missing = params["stage"]["code_hash"] and not (staged["code_present"] or staged["code_copied"])
        if staged["missing_files"] or (code_missing and not check_mode):
            return False
        params["chdir"] = staged["run_dir"]
        params["script"] = os.path.join(staged["run_dir"], name)
        params["end_marker"] = os.path.join(staged["run_dir"], END_MARKER_NAME)
        self.result["end_marker"] = params["end_marker"]
        if check_mode:
            params["script"], params["chdir"] = os.path.join(scratch, name), scratch
            with open(params["script"], "w", encoding="utf-8") as handle:
                handle.write(content)
        elif not os.path.isdir(params["chdir"]):
            self.finish(f"chdir {params['chdir']} is not a directory")
        self.chdir_option = [f"--chdir={params['chdir']}"]
        return True

    def submit_or_find(self):
        params = self.params
        try:
            with open(params["script"], "rb") as handle:
                content = handle.read()
        except OSError as error:
            self.finish(f"cannot read script {params['script']}: {error.strerror}")
        comment = "fingerprint:" + job_fingerprint(params["job_name"], content, params["secret_env"])
        find_copy = None if params["force"] else (lambda: self.slurm.find_active_copy(params["job_name"], comment))
        copy = find_copy() if find_copy and not self.run_taken_afresh() else None
        if copy is not None:
            self.result.update(job_id=copy["job_id"], found_existing=True)
            return
        options = [f"--job-name={params['job_name']}", f"--comment={comment}", *self.partition_option,
                   *self.chdir_option, *params["sbatch_args"], params["script"]]
        if self.module.check_mode:
            self.result["test_only"] = self.slurm.test_only(["sbatch", "--test-only", *options], params["chdir"])
            self.result["changed"] = True
            return
        if params["private_output"]:
            os.umask(0o077)  # sbatch hands its umask to the job, whose output files Slurm creates with it
        job_id, submitted, cluster = self.slurm.submit(["sbatch", "--parsable", *options], params["chdir"], find_copy)
        self.result.update(job_id=job_id, submitted=submitted, found_existing=not submitted,
                           changed=submitted or self.result["changed"])
        if submitted and params["stage"]:
            self.keep_job_script(job_id)
        if cluster is not None:
            # A -M in the script or a SLURM_CLUSTERS the module did not set: say so, rather than
            # follow an id that the local cluster does not know.
            self.finish(f"sbatch submitted job {job_id} to cluster {cluster} (a --clusters/-M in the script, or "
                        f"{'/'.join(CLUSTERS_VARIABLES)} in the environment); {CLUSTERS_RULE}. Cancel it with "
                        f"'scancel -M {cluster} {job_id}' unless it is wanted there")

    def keep_job_script(self, job_id):
        """The job's own name for the script it was submitted with (a hard link in the run's
        directory): a later job of the same run writes the run's script anew, by a rename, and the
        earlier job's stays as it ran."""
        script = self.params["script"]
        kept = os.path.join(os.path.dirname(script), job_script_name(self.params["job_name"], job_id))
        try:
            os.link(script, kept, follow_symlinks=False)
        except OSError as error:
            self.module.warn(f"job {job_id}'s script is not kept as {kept}: {error.strerror}")

    def run_taken_afresh(self):
        """Whether staging took a new run now: its directory, in the script, did not exist before
        this module run made it, so no earlier submission can carry this fingerprint. A sbatch whose
        reply was lost is still looked for before it is tried again (SlurmClient.submit)."""
        staged = self.result["staged"] or {}
        return bool(staged.get("run_id")) and not staged.get("resumed") and staged.get("run_dir") in staged.get("made", [])

    def query(self):
        self.record(self.find(self.params["job_id"]))

    def list(self):
        rc, out, err = self.slurm.run(["squeue", "-h", "-u", str(os.geteuid()), "-o", MY_JOBS_FORMAT])
        if rc != 0:
            raise SlurmCommandError("squeue", rc, err)
        self.result.update(jobs=parse_my_jobs(out), user=self.slurm.user)

    def absent(self):
        job_id = self.params["job_id"]
        try:
            info = self.record(self.find(job_id))
            if info.final:
                return
            self.result["changed"] = True
            if self.module.check_mode:
                return
            self.slurm.cancel(job_id)
            self.watch(job_id)
        except JobNotFound:
            # Unknown to slurmctld and to accounting: nothing left to cancel.
            self.result.update(state=None, outcome=None, final=True, state_description=str(JobNotFound(job_id)))

    def run(self):
        try:
            getattr(self, self.params["state"])()
        except (SlurmCommandError, SlurmParseError, UnknownJobState, JobNotFound) as error:
            self.finish(str(error))
        self.finish()


def validate(module):
    """Check the parameters before any Slurm command runs; return a message or None."""
    params = module.params
    if params["job_name"] is not None:
        try:
            validate_job_name(params["job_name"])
        except ValueError as error:
            return str(error)
    try:
        PollSchedule(params["poll_min"], params["poll_max"])  # it checks its own bounds
    except ValueError as error:
        return f"poll_min/poll_max: {error}"
    if params["timeout"] < 0:
        return f"timeout must be 0 (no limit) or a number of seconds, got {params['timeout']}"
    if params["controller_timeout"] < 0:
        return f"controller_timeout must be 0 or more seconds, got {params['controller_timeout']}"
    if params["progress_log_every"] < 0:
        return f"progress_log_every must be 0 (off) or more seconds, got {params['progress_log_every']}"
    if params["progress_log_lines"] < 0:
        return f"progress_log_lines must not be negative, got {params['progress_log_lines']}"
    if params["log_tail_lines"] < 0:
        return f"log_tail_lines must not be negative, got {params['log_tail_lines']}"
    for name in CLUSTERS_VARIABLES:
        if name in params["environment"]:
            return f"environment must not set {name}={params['environment'][name]!r}: {CLUSTERS_RULE}"
    # With stage, chdir is the run's directory, which staging makes.
    if params["chdir"] is not None and params["stage"] is None and not os.path.isdir(params["chdir"]):
        return f"chdir {params['chdir']} is not a directory"
    return reserved_option_problem(params["sbatch_args"])


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
        required_if=[
            ("state", "present", ("job_id", "script"), True),
            ("state", "query", ("job_id",)),
            ("state", "absent", ("job_id",)),
        ],
        required_together=[("script", "job_name")],
        mutually_exclusive=[("job_id", "script")],
    )
    # The protocol's values are read as the module's own.
    module.params.update(module.params["internal"])
    problem = validate(module)
    if problem:
        module.fail_json(msg=problem, changed=False)
    SlurmJobRunner(module).run()


if __name__ == "__main__":
    main()
