"""The rules a launch holds what users type to (docs/hostile-input.md): the values that reach
the job script (train_job's value_problems), the script's path, and the -e keys it knows."""

from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.hpc.slurm_train.plugins.plugin_utils import launch_request
from ansible_collections.hpc.slurm_train.plugins.plugin_utils.launch_request import script_path

ROOT = Path(__file__).resolve().parents[2]


def problems(**values):
    return launch_request.value_problems(values)


@pytest.mark.parametrize("limit", ["0", "90", 90, "90:30", "2:00:00", "1-12", "1-12:30", "1-12:30:15", "14-00:00:00",
                                   "UNLIMITED", "infinite"])
def test_slurm_time_formats_are_accepted(limit):
    assert problems(time_limit=limit) == []


@pytest.mark.parametrize("limit", ["1 day", "-5", "", "1:2:3:4", "1-2-3", "1-123", "60\n#SBATCH --x", "٣", True,
                                   "1h", "UNLIMITED;id"])
def test_other_time_limits_are_refused_naming_the_formats(limit):
    [message] = problems(time_limit=limit)
    assert message.startswith(f"time_limit={limit!r} is not allowed") and "D-HH:MM:SS" in message


@pytest.mark.parametrize("name", ["train", "sweep_lr.0.1", "...", ".x"])
def test_job_names_that_are_safe_file_names_are_accepted(name):
    assert problems(job_name=name, job_dir=f"/nas/jobs/{name}", end_marker=".%j.ended") == []


@pytest.mark.parametrize("name", [".", "..", "a b", "a/b", "it's", 'a"b', "x" * 129, "", 5, None])
def test_job_names_that_are_no_safe_file_names_are_refused(name):
    [message] = problems(job_name=name, job_dir=f"/nas/jobs/{name}", end_marker="")
    assert message.startswith(f"job_name={name!r} is not allowed: a job name is 1 to 128 letters")


@pytest.mark.parametrize("path", ["jobs", "/tmp/../etc", "/tmp/a b", "/tmp/$(id)", '/tmp/"x', "/tmp/x\n"])
def test_jobs_dirs_that_are_not_plain_absolute_paths_are_refused(path):
    assert problems(jobs_dir=path) == [f"slurm_launch_jobs_dir={path!r} is not allowed: an absolute path of letters, "
                                       "digits, '_', '.', '+', '-' and '/', without '..'"]


def test_the_derived_job_dir_names_the_jobs_dir_setting():
    [message] = problems(job_name="train", job_dir="/tmp/a b/train", end_marker=".%j.ended")
    assert message.startswith("job_dir='/tmp/a b/train' is not allowed: the jobs directory (slurm_launch_jobs_dir)")


@pytest.mark.parametrize("marker", ["/nas/jobs/train/.%j.ended", "../.%j.ended", "$SLURM_SUBMIT_DIR/.%j", "a b", ".."])
def test_the_end_mark_is_a_file_of_the_run_directory(marker):
    [message] = problems(job_name="train", end_marker=marker)
    assert message == (f"end_marker={marker!r} is not allowed: a file name of the run's directory (letters, digits, "
                       "'_', '.', '+', '-') ('%j' is the job id)")


def test_the_gpu_check_is_a_plain_absolute_path_or_a_file_of_the_run_directory():
    assert problems(gpu_check="gpu_check.py") == [] and problems(gpu_check="/nas/templates/gpu_check.py") == []
    assert problems(gpu_check="../gpu_check.py")[0].startswith("gpu_check='../gpu_check.py' is not allowed")


@pytest.mark.parametrize("key", ["cuda_home", "conda_root", "venv", "nccl_env_dir"])
def test_paths_the_job_script_reads_are_plain_absolute_paths(key):
    assert problems(**{key: "/starmap/nas/x-1.2_3"}) == [] and problems(**{key: ""}) == []
    assert problems(**{key: '/opt/v"; id; "'})[0].startswith(f"{key}='/opt/v\"; id; \"' is not allowed")


@pytest.mark.parametrize("key, good, bad", [
    ("account", "proj-1.a_b", "a;b"), ("account", "", "x\nrm -rf ~"), ("partition", "gpu_A6000", "a b"),
    ("partition", "", "-p"), ("conda_env", "magicdrivedit", "$(id)"), ("conda_env", "", "-x"),
    ("nodelist", "node[110-111],gpu07", "node1;id"), ("rendezvous", "c10d", "etcd"),
])
def test_names_in_sbatch_lines_and_commands(key, good, bad):
    assert problems(**{key: good}) == []
    [message] = problems(**{key: bad})
    assert message.startswith(f"{key}={bad!r} is not allowed")


def test_env_names_are_shell_names_and_values_any_text():
    values = {"NCCL_DEBUG": "INFO", "_X1": 3, "QUOTED": "it's \"x\" $(id) `id`; a b\nline"}
    assert problems(env=values) == []
    assert problems(env={"A B": "1", "1X": "1", "X": None, "Y": [1], "Z": True, "N": "a\0b"}) == [
        "env name='A B' is not allowed: a shell variable name: letters, digits and '_', not starting with a digit",
        "env name='1X' is not allowed: a shell variable name: letters, digits and '_', not starting with a digit",
        "env X=None is not allowed: give text or a number (without NUL characters)",
        "env Y=[1] is not allowed: give text or a number (without NUL characters)",
        "env Z=True is not allowed: give text or a number (without NUL characters)",
        "env N='a\\x00b' is not allowed: give text or a number (without NUL characters)",
    ]
    assert problems(env="A=1")[0].startswith("env='A=1' is not allowed: give a mapping")


@pytest.mark.parametrize("directives, bad", [
    (["--exclusive\necho pwned"], "'--exclusive\\necho pwned'"), (["exclusive"], "'exclusive'"),
    (["--x\r"], "'--x\\r'"), ([3], "3"),
])
def test_extra_directives_are_one_option_on_one_line(directives, bad):
    assert problems(extra_directives=["--exclusive", "--mem=4G", "--constraint=a&b"]) == []
    [message] = problems(extra_directives=directives)
    assert message.startswith(f"extra_directives={bad} is not allowed: each is one sbatch option on one line")


@pytest.mark.parametrize("directive", ["--clusters=other", "--clusters other", "--clusters", "-M other", "-Mother",
                                       "-M"])
def test_extra_directives_may_not_send_the_job_to_another_cluster(directive):
    assert problems(extra_directives=[directive]) == [
        f"extra_directives={directive!r} is not allowed: a launch follows its job on the cluster of its submit host "
        "only (its Slurm queries have no -M); to run on another cluster, launch with an inventory whose submit host "
        "belongs to it"]


@pytest.mark.parametrize("directive", ["--chdir=/tmp", "--chdir /tmp", "-D /tmp", "-D/tmp"])
def test_extra_directives_may_not_move_the_job_out_of_its_run_directory(directive):
    assert problems(extra_directives=[directive]) == [
        f"extra_directives={directive!r} is not allowed: a launch's job runs in its run's directory, which holds its "
        "log, checkpoints and end record; the training may change directory itself"]


def test_options_that_only_look_like_clusters_are_not_refused():
    assert problems(extra_directives=["--cluster-constraint=fast", "--mem=4G", "--mail-type=END"]) == []


def test_extra_directives_must_be_a_list():
    assert problems(extra_directives="--exclusive") == [
        "extra_directives='--exclusive' is not allowed: give a list of sbatch options, e.g. [\"--exclusive\"]"]


def test_script_and_arguments_may_hold_anything_but_nul_and_control_characters_in_the_path():
    args = ["a b", "it's", 'say "hi"', "$(id)", "`id`", "a;b", "", "multi\nline"]
    assert problems(script="/nas/a dir/it's \"x\".py", script_args=args) == []
    assert problems(script="/nas/x\n.py")[0].startswith("script='/nas/x\\n.py' is not allowed")
    # The job's script, from the run's directory it runs in.
    assert problems(script="../../code/0123456789abcdef0123/train.py") == []
    assert problems(script_args=["a\0b"]) == [
        "script_args='a\\x00b' is not allowed: each argument is text without NUL or carriage return characters "
        "(sbatch refuses a job script with a CRLF)"]


def test_every_problem_is_reported_at_once():
    assert len(problems(account="a;b", time_limit="1 day", env={"A B": 1})) == 3


@pytest.mark.parametrize("given, path", [
    ("/nas/a dir/it's \"x\".py", "/nas/a dir/it's \"x\".py"),
    ("train.py", "/repo/train.py"),
    ("../other/./train.py", "/other/train.py"),
    ("/nas/jobs/../train.py", "/nas/train.py"),
    ("//nas//train.py", "/nas/train.py"),
    ("", ""),
])
def test_the_script_path_is_absolute_with_dots_resolved_by_name(given, path):
    assert script_path(given, cwd="/repo") == path


@pytest.mark.parametrize("given", ["train\n.py", 7, ["train.py"]])
def test_a_script_path_that_is_no_path_is_refused(given):
    with pytest.raises(AnsibleFilterError, match=r"^script=.* is not allowed"):
        script_path(given, cwd="/repo")


def test_an_unknown_key_gets_the_closest_known_one_and_the_known_keys():
    message = launch_request.unknown_keys_message(["nods", "zzz"], ["nodes", "wait"], {"slurm_launch_wait"},
                                              ("cluster_", "ansible_"), ["cluster_nas_root"])
    assert message == ("Unknown -e keys: -e nods (did you mean 'nodes'?); -e zzz. A launch reads: nodes, wait; "
                       "the role's options slurm_launch_wait; and any variable starting with cluster_, ansible_.")
    assert "did you mean 'cluster_nas_root'?" in launch_request.unknown_keys_message(
        ["clustr_nas_root"], [], set(), ("cluster_",), ["cluster_nas_root"])
