"""Make a user's private job directory on a shared NAS, refusing what another user planted there,
and put the staged training code into it."""

DOCUMENTATION = r"""
---
module: job_dir
short_description: Make a user's private job directory on a shared NAS and stage code into it
description:
  - Makes C(<jobs_root>/<user>/<job_name>/) and its C(code/) directory, where C(<user>) is the user
    the module runs as. The jobs root is the NAS owner's (mode 0711), and C(<jobs_root>/<user>/) is
    made for each user by C(provision.yml) (C(cluster_users)), so that no user can make another's
    first; what is below it is the user's own.
  - Before it writes anything it refuses a directory on that path that is a symbolic link (or is
    reached through one) or that another user owns, naming the path and its owner. Directories are
    opened with C(O_NOFOLLOW) one component at a time, so a link planted between the check and the
    write is not followed either.
  - Directories get O(mode) (private, C(0700), by default). Staged files get the same permissions
    as their directory, less the execute bit where the file had none.
  - With O(code_archive) (a tar archive on the host, as the C(job_dir) action plugin of the
    slurm_launch role transfers it) the code is extracted into a temporary directory beside
    C(code/<code_hash>/) and renamed into place, so a job never sees half of it; code of the same
    hash already there is not copied again.
  - The C(job_dir) action plugin of the slurm_launch role computes the code's content hash on the
    controller and transfers the archive only when the module reports it missing. Outside check
    mode and O(probe), code of O(code_hash) that is missing with no O(code_archive) stops the
    module there, before it takes a run or writes a file; the action plugin then runs it again
    with the archive.
  - While a file of O(expect_files) is missing, nothing is made (outside check mode and O(probe)).
  - With O(resume), the job name is an experiment and each launch a run of it, in
    C(<job_dir>/runs/<run id>/) (script, log, checkpoints, and the C(run.json) the job writes as it
    ends and the launch rewrites with Slurm's final state). A run belongs to one request,
    O(request), recorded in its C(request.json) when it is taken; only a launch of the same
    request resumes it. The module reads those records and picks the run (RV(run_id)) under the
    job's lock, C(runs/.lock), held until the module ends (C(slurm_job) holds it until its job is
    submitted), so two launches at once share a run only when their requests are the same.
options:
  jobs_root:
    description: The shared jobs directory (C(cluster_jobs_dir)); it must exist.
    type: path
    required: true
  job_name:
    description: The job's name, one path component (letters, digits, C(_), C(.), C(-)).
    type: str
    required: true
  mode:
    description: Mode of the user's directories, an octal string such as V(0700) or V(0750).
    type: str
    default: "0700"
  code_hash:
    description: Content hash of the code to stage; the result says whether C(code/<code_hash>) exists.
    type: str
  code_archive:
    description:
      - A tar archive of regular files and directories to extract into C(code/<code_hash>) when it
        is missing. Removed afterwards.
    type: path
  code_archive_inline:
    description:
      - The same archive as O(code_archive), base64-encoded and sent with the module's arguments,
        so that small code needs no transfer and no second module run. Extracted only when the
        code is missing; ignored when O(code_archive) is given.
    type: str
  resume:
    description:
      - Which run the launch is. V(auto) resumes the newest run of the same O(request) when it
        ended by its time limit, its requeue limit, preemption or a node failure (C(run.json) state
        C(TIMEOUT), C(REQUEUE_LIMIT), C(PREEMPTED), C(NODE_FAIL), or C(FAILED) with exit code 75),
        or has not recorded an end (still pending or running, or ended without a word); otherwise
        (no run of that request, or it C(COMPLETED), failed or was cancelled) it starts a fresh run.
      - V(never) always starts a fresh run; a run id (V(2)) resumes that run, refused when the run
        is another request unless O(force).
      - Empty (the default) makes no run at all (the preflight's directory).
    type: str
    default: ""
  request:
    description:
      - What the run trains, recorded in a fresh run's C(request.json) with O(code_hash) added. The
        launch gives the script, its arguments, the sweep's points, the env names and the job's
        shape; the dict is compared whole, so a caller may add any value.
    type: dict
    default: {}
  force:
    description: With a run id in O(resume), resume it even when its request differs (RV(request_differences)).
    type: bool
    default: false
  probe:
    description: Check and report only; make nothing (as in check mode).
    type: bool
    default: false
  expect_files:
    description:
      - Files the job will read (the NCCL env file of its node group); the result lists in
        RV(missing_files) those that are not readable regular files, so that a launch stops before
        it submits. While one is missing nothing is made or written.
    type: list
    elements: path
    default: []
  min_free_mb:
    description:
      - Free space, in MB, that the jobs directory's filesystem must have for the user. When set,
        the jobs directory is also checked writable (outside check mode a temporary file is
        really made and removed, which catches root squash and quotas), before anything is made,
        as the C(writable_dir) module checks it; a full or read-only NAS fails the task, naming it.
    type: int
  files:
    description:
      - Files of the job to write into the run's directory (the job's directory without
        O(resume)), such as the job script rendered on the controller, in the same look at the
        NAS that makes the directories.
      - Each is written through a temporary file in the same directory and renamed into place, so a
        job never reads half of one; a file whose content and mode are already those is left alone.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The file's name, one path component (letters, digits, C(_), C(.), C(-)).
        type: str
        required: true
      content:
        description: Its text; not logged, since a job script may hold tokens (the launch's C(slurm_launch_env)).
        type: str
        required: true
      mode:
        description: Its mode, an octal string.
        type: str
        default: "0644"
  code_dir:
    description:
      - The directory of the code on the controller. Read by the action plugin, which lists, hashes
        and packs it; the module itself ignores it.
    type: path
  script:
    description: The training script on the controller, inside O(code_dir); read by the action plugin.
    type: path
  code_files:
    description:
      - Instead of O(code_dir), files on the controller staged side by side under their own names;
        read by the action plugin.
    type: list
    elements: path
  max_mb:
    description: Largest size of the code to stage, in MB; read by the action plugin, which refuses more.
    type: int
    default: 100
author: ansible-slurm-train
"""

EXAMPLES = r"""
- name: Make the job's directory and stage the code.
  job_dir:
    jobs_root: /starmap/nas/jobs
    job_name: train
    code_hash: 3f2a9c0d1e2b4a6f8c10
"""

RETURN = r"""
user:
  description: The user the directory belongs to (the user the module ran as).
  returned: always
  type: str
  sample: alice
job_dir:
  description: The job's directory.
  returned: always
  type: str
  sample: /starmap/nas/jobs/alice/train
code_dir:
  description: Where the staged code lives (C(<job_dir>/code/<code_hash>)); empty without O(code_hash).
  returned: always
  type: str
  sample: /starmap/nas/jobs/alice/train/code/3f2a9c0d1e2b4a6f8c10
code_present:
  description: Whether C(code_dir) already held the code before this run.
  returned: always
  type: bool
  sample: false
code_copied:
  description: Whether this run extracted O(code_archive) into place.
  returned: always
  type: bool
  sample: true
run_id:
  description: The run this launch is (planned, with O(probe) or in check mode); null without O(resume).
  returned: always
  type: int
  sample: 3
run_dir:
  description: The run's directory, C(<job_dir>/runs/<run_id>); empty without O(resume).
  returned: always
  type: str
  sample: /starmap/nas/jobs/alice/train/runs/3
resumed:
  description: Whether the run is an existing one resumed (its checkpoints kept) rather than a fresh one.
  returned: always
  type: bool
  sample: false
resumed_step:
  description: The step of the resumed run's checkpoint (C(checkpoints/checkpoint.json)), if it has one.
  returned: always
  type: int
  sample: 30
run_reason:
  description: Why this run was chosen, in words.
  returned: always
  type: str
  sample: run 2 ended COMPLETED
other_request:
  description: Why the newest run was not resumed when it is another request (a fresh run, or an older run of this request resumed); empty otherwise.
  returned: always
  type: str
  sample: "run 1 is another request: --lr 0.1, not --lr 0.01"
request_differences:
  description: How the resumed run's recorded request differs from O(request) (resumed with O(force)); [] otherwise.
  returned: always
  type: list
  elements: str
  sample: ["--lr 0.1, not --lr 0.01"]
missing_files:
  description: The O(expect_files) that are missing or not readable regular files.
  returned: always
  type: list
  elements: str
  sample: [/starmap/nas/env/nccl-gpu_A6000.sh]
files_written:
  description:
    - The O(files) that this run wrote (or would write, in check mode or with O(probe)); the ones
      already there as given are not listed.
  returned: always
  type: list
  elements: str
  sample: [train.sbatch, gpu_check.py]
free_mb:
  description: Free space of the jobs directory's filesystem for the user, in MB, with O(min_free_mb).
  returned: always
  type: int
  sample: 80371
made:
  description: The directories this run made (or would make, in check mode or with O(probe)).
  returned: always
  type: list
  elements: str
  sample: [/starmap/nas/jobs/alice, /starmap/nas/jobs/alice/train]
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.hpc.slurm_train.plugins.module_utils.job_dirs import STAGE_SPEC, Refused, release_runs_lock, stage




ARGUMENT_SPEC = STAGE_SPEC


def run(module):
    try:
        return stage(module.params, module.check_mode)
    finally:
        release_runs_lock()


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        module.exit_json(**run(module))
    except Refused as error:
        module.fail_json(msg=str(error), changed=False)
    except OSError as error:
        path = error.filename or os.path.join(module.params["jobs_root"], module.params["job_name"])
        module.fail_json(msg=f"{path}: {error.strerror}", changed=False)


if __name__ == "__main__":
    main()
