"""The parsers of plugins/module_utils/slurm.py and slurm_job's collection against what each Slurm
release from 22.05 to 25.11 prints: fixtures/slurm/<version>/, derived from SchedMD's sources
at each release's tag (the README's table names the source line of each file)."""

import os
import pytest
from ansible_collections.hpc.slurm_train.plugins.module_utils import slurm
from ansible_collections.hpc.slurm_train.plugins.modules import slurm_job
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

VERSIONS = ("22.05", "23.02", "23.11", "24.05", "24.11", "25.05", "25.11")
RUN_DIR = "/var/lib/ansible-slurm-train/rec/nas/runs/train-ddp"
LOG = f"{RUN_DIR}/train-ddp-20.out"
FINGERPRINT = "fingerprint:3f9a1c27d4e5b680"


def at_least(version, other):
    return tuple(map(int, version.split("."))) >= tuple(map(int, other.split(".")))


@pytest.fixture(params=VERSIONS)
def version(request):
    return request.param


@pytest.fixture
def output(slurm_output, version):
    """Text of this version's fixture ``name``."""
    return lambda name: slurm_output(f"{version}/{name}")


def test_sbatch_parsable(output):
    assert slurm.parse_sbatch_parsable(output("sbatch_parsable.txt")) == (20, None)


def test_sbatch_parsable_with_clusters(output):
    assert slurm.parse_sbatch_parsable(output("sbatch_parsable_cluster.txt")) == (20, "rec")


def test_sbatch_test_only(output):
    assert slurm.parse_sbatch_test_only(output("sbatch_test_only.stderr")) == {
        "job_id": 20, "start": "2026-12-02T14:41:03", "processors": 2, "nodes": ["rec1", "rec2"],
        "partition": "gpu", "cluster": None,
    }


def test_sbatch_test_only_with_clusters(output, version):
    # Only 25.05's format names the cluster (" on cluster rec a using ...").
    prediction = slurm.parse_sbatch_test_only(output("sbatch_test_only_cluster.stderr"))
    assert (prediction["job_id"], prediction["nodes"], prediction["partition"], prediction["cluster"]) == (
        20, ["rec1", "rec2"], "gpu", "rec" if at_least(version, "25.05") else None)


def test_scontrol_show_job(output, version):
    job = slurm.parse_scontrol_job(output("scontrol_show_job.txt"))
    assert {key: job[key] for key in slurm.NORMALIZED_JOB_KEYS} == {
        "job_id": 20, "name": "train-ddp", "state": "RUNNING", "reason": None, "exit_code": 0, "exit_signal": 0,
        "restarts": 0, "nodes": ["rec1", "rec2"], "batch_host": "rec1", "elapsed_seconds": 4,
        "stdout_path": LOG, "stderr_path": LOG, "partition": "gpu", "comment": FINGERPRINT,
    }
    # The keys printed right after free text are keys, not part of the text.
    assert (job["Command"], job["WorkDir"]) == (f"{RUN_DIR}/train-ddp.sbatch 300", RUN_DIR)
    assert job.get("Extra") == ("rack=a1" if at_least(version, "23.02") else None)
    assert job.get("SegmentSize") == ("2" if at_least(version, "25.05") else None)
    assert job.get("SubmitLine", "").startswith("sbatch --parsable") == at_least(version, "25.11")


HOSTILE_NAME = ("x UserId=alice(2001) StdOut=/var/lib/ansible-slurm-train/rec/nas/jobs/alice/train/runs/1/train-1.out "
                "Comment=")


def test_a_job_name_shaped_like_fields_is_read_as_the_name_squeue_gives(output, version):
    uid, name = slurm.parse_job_identity(output("squeue_job_identity.txt"))
    assert (uid, name) == (2002, HOSTILE_NAME)
    job = slurm.parse_scontrol_job(output("scontrol_show_job_hostile_name.txt"), job_name=name)
    assert (job["name"], job["UserId"], job["stdout_path"], job["comment"], job["state"]) == (
        HOSTILE_NAME, "bob(2002)", LOG, FINGERPRINT, "RUNNING")
    assert job.get("SubmitLine", "").startswith(f"sbatch --parsable --job-name={HOSTILE_NAME} ") == at_least(
        version, "25.11")
    # Without the name, the record is read as the name says: why the owner is squeue's uid.
    fooled = slurm.parse_scontrol_job(output("scontrol_show_job_hostile_name.txt"))
    assert (fooled["name"], fooled["UserId"]) == ("x", "alice(2001)")


def test_a_record_whose_name_is_not_squeues_is_refused(output):
    with pytest.raises(slurm.JobNameMismatch, match="is not 'train-ddp', the name squeue gave"):
        slurm.parse_scontrol_job(output("scontrol_show_job_hostile_name.txt"), job_name="train-ddp")


def test_scontrol_show_job_of_a_forgotten_job(output):
    with pytest.raises(slurm.JobNotFound):
        slurm.parse_scontrol_job("", output("scontrol_show_job_invalid_id.stderr"))
    assert not slurm.is_transient_error(1, output("scontrol_show_job_invalid_id.stderr"))


def test_scontrol_timeout_is_transient(output):
    assert slurm.is_transient_error(1, output("scontrol_show_job_socket_timeout.stderr"))


def test_sacct_version(output, version):
    major, minor, _ = slurm.parse_slurm_version(output("sacct_version.txt"))
    assert f"{major}.{minor:02d}" == version


def test_sacct_fields_of_each_version(output, version):
    options, fields = slurm.sacct_query(slurm.parse_slurm_version(output("sacct_version.txt")))
    has_stdio = at_least(version, "24.05")
    assert ("StdOut" in fields, options == ["--expand-patterns"]) == (has_stdio, has_stdio)
    runs, summary = slurm.parse_sacct(output("sacct.txt"), fields)
    assert [run["work_dir"] for run in runs] == [RUN_DIR]
    assert (summary["job_id"], summary["state"], summary["nodes"], summary["comment"]) == (
        20, "COMPLETED", ["rec1", "rec2"], None)
    assert (summary["stdout_path"], summary["stderr_path"]) == ((LOG, LOG) if has_stdio else (None, None))


@pytest.mark.parametrize("old", [version for version in VERSIONS if not at_least(version, "24.05")])
def test_sacct_before_24_05_rejects_stdout_and_expand_patterns(old, slurm_output):
    # What an old sacct answers to the newer query: errors, not transient ones to retry.
    assert slurm_output(f"{old}/sacct_expand_patterns_rejected.stderr") == (
        "sacct: unrecognized option '--expand-patterns'\n")
    assert slurm_output(f"{old}/sacct_stdout_rejected.stderr") == 'sacct: error: Invalid field requested: "StdOut"\n'
    assert not slurm.is_transient_error(1, slurm_output(f"{old}/sacct_stdout_rejected.stderr"))


def test_squeue(output, version):
    jobs = slurm.parse_squeue(output("squeue.txt"))
    assert [(job["job_id"], job["state"], job["reason"]) for job in jobs][:3] == [
        (21, "PENDING", "Resources"), (22, "PENDING", "ReqNodeNotAvail,_UnavailableNodes:rec2"),
        (20, "RUNNING", None)]
    assert all(job["comment"] == FINGERPRINT for job in jobs)
    for job in jobs:
        slurm.job_state(job["state"])  # every state each version prints is known
    if at_least(version, "25.11"):
        assert (jobs[3]["state"], slurm.outcome(jobs[3]["state"]), slurm.is_final(jobs[3]["state"])) == (
            "EXPEDITING", "requeued", False)


def test_every_job_state_of_each_version_is_known(output):
    states = set(output("job_states.txt").split())
    assert states <= set(slurm.JOB_STATES), sorted(states - set(slurm.JOB_STATES))


def test_sinfo_nodes(output, version):
    nodes = slurm.parse_sinfo_nodes(output("sinfo_nodes.txt"))
    expected = {"rec1": ("mixed", ""), "rec2": ("planned", ""), "rec3": ("idle", "~"), "rec4": ("drained", "*")}
    if at_least(version, "24.05"):
        expected["rec5"] = ("blocked", "")
    if at_least(version, "25.05"):
        expected["rec6"] = ("external", "")
    assert {name: (node["state"], node["markers"]) for name, node in nodes.items()} == expected
    assert all(node["cpus"] == 2 and node["gres"] == "gpu:2" and node["partitions"] == ["gpu"]
               for node in nodes.values())


# ---------------------------------------------------------------------------
# slurm_job collecting a job that slurmctld forgot, on each version
# ---------------------------------------------------------------------------


class Exited(Exception):
    def __init__(self, failed, result):
        super().__init__(result.get("msg"))
        self.failed, self.result = failed, result


class VersionedSlurm:
    """run_command as this version's commands answer for job 20 once slurmctld forgot it:
    scontrol does not know it, sacct refuses what it does not know (its recorded errors)."""

    def __init__(self, output, version, work_dir, log):
        self.output, self.version, self.work_dir, self.log = output, version, work_dir, log
        self.argvs = []

    def __call__(self, argv):
        self.argvs.append(argv)
        if argv[:3] == ["scontrol", "show", "job"] or argv[0] == "squeue":
            # squeue prints slurm_load_jobs()'s error as scontrol does
            return 1, "", self.output("scontrol_show_job_invalid_id.stderr")
        assert argv[0] == "sacct", argv
        if argv == ["sacct", "--version"]:
            return 0, self.output("sacct_version.txt"), ""
        if argv[-2:] == ["-o", "UID"]:
            return 0, f"{os.geteuid()}\n", ""
        old = not at_least(self.version, "24.05")
        if old and "--expand-patterns" in argv:
            return 1, "", self.output("sacct_expand_patterns_rejected.stderr")
        fields = argv[argv.index("-o") + 1]
        if fields == "JobIDRaw,JobID,State,ElapsedRaw,AllocTRES,Eligible,Start":
            return 0, "", ""  # the cost ledger's attempts: not this test's
        if old and "StdOut" in fields.split(","):
            return 1, "", self.output("sacct_stdout_rejected.stderr")
        assert fields == ",".join(slurm.sacct_query(tuple(map(int, self.version.split("."))))[1])
        return 0, self.output("sacct.txt").replace(LOG, self.log).replace(RUN_DIR, self.work_dir), ""


def run_slurm_job(monkeypatch, answer, args):
    """slurm_job's main() with run_command answered by ``answer(argv)``; the Exited it ends with."""
    monkeypatch.setattr(basic.AnsibleModule, "run_command", lambda module, argv, **kwargs: answer(argv))

    def leave(failed):
        def leave_with(module, msg=None, **result):
            raise Exited(failed, {"msg": msg, **result})
        return leave_with

    monkeypatch.setattr(basic.AnsibleModule, "exit_json", leave(False))
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", leave(True))
    with patch_module_args(args), pytest.raises(Exited) as exited:
        slurm_job.main()
    return exited.value


def test_check_mode_predicts(monkeypatch, tmp_path, output):
    script = tmp_path / "train-ddp.sbatch"
    script.write_text("#!/bin/bash\nsrun true\n")

    def answer(argv):
        if argv[0] == "squeue":
            return 0, "", ""
        assert argv[:2] == ["sbatch", "--test-only"], argv
        return 0, "", output("sbatch_test_only.stderr")

    exited = run_slurm_job(monkeypatch, answer, {"script": str(script), "job_name": "train-ddp",
                                                 "_ansible_check_mode": True})
    assert exited.failed is False, exited.result["msg"]
    assert exited.result["test_only"] == {"job_id": 20, "start": "2026-12-02T14:41:03", "processors": 2,
                                          "nodes": ["rec1", "rec2"], "partition": "gpu", "cluster": None}


def test_job_collected_after_min_job_age_gets_its_log(monkeypatch, tmp_path, output, version):
    # From 24.05 sacct's StdOut names the log, here one outside the job's directory; before, the
    # log a launch's job writes in its directory (sacct's WorkDir) is the one found.
    log = (tmp_path / "logs" / "custom-20.out") if at_least(version, "24.05") else (tmp_path / "train-ddp-20.out")
    log.parent.mkdir(exist_ok=True)
    log.write_text("step 1\ntraining done\n")
    cli = VersionedSlurm(output, version, str(tmp_path), str(log))

    exited = run_slurm_job(monkeypatch, cli, {"state": "query", "job_id": 20})

    result = exited.result
    assert exited.failed is False, result["msg"]
    assert (result["state"], result["state_source"], result["stdout_path"], result["log_tail"]) == (
        "COMPLETED", "sacct", str(log), ["step 1", "training done"])
    # Who owns it first (squeue no longer knows it: accounting's UID), then its record, then its cost.
    assert [argv[:2] for argv in cli.argvs] == [["squeue", "-h"], ["sacct", "-j"], ["scontrol", "show"],
                                                ["sacct", "--version"], ["sacct", "-j"], ["sacct", "-j"]]
    assert cli.argvs[1] == ["sacct", "-j", "20", "-n", "-P", "-X", "-o", "UID"]
