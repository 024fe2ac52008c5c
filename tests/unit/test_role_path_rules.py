"""The conda and cuda_toolkit roles hold their paths to the project's one safe-path rule
(plugins/module_utils/cluster_rules.py, through the cluster_path_problems filter), and say so in its
words: each bad path named with its value, before anything is installed. Run as an admin runs
them: ansible-playbook, the role's own validate tasks, the values given with -e."""

from conftest import failed_task, run_role_tasks

RULE = "is not allowed: an absolute path of letters, digits, '_', '.', '+', '-' and '/', without '..'"


def validate(role, tmp_path, **extra_vars):
    """The role's tasks/validate.yml run by ansible-playbook; (returncode, output)."""
    return run_role_tasks(tmp_path, role, "validate", **extra_vars)


def test_conda_refuses_each_bad_path_by_name_in_the_shared_rules_words(tmp_path):
    rc, out = validate("conda", tmp_path, cluster_conda_root="/nas/conda root", conda_temp_parent="/scratch/..",
                       conda_installer_nas_path="relative/Miniforge3.sh")
    assert rc != 0
    task, message = failed_task(out)
    assert task.startswith("TASK [hpc.slurm_train.conda : Check the conda paths.]"), out
    assert f"cluster_conda_root='/nas/conda root' {RULE}" in message
    assert f"conda_temp_parent='/scratch/..' {RULE}" in message
    assert f"conda_installer_nas_path='relative/Miniforge3.sh' {RULE}" in message
    # The paths left empty (the defaults) are not named.
    assert "conda_pack_archive" not in message and "conda_environment_file" not in message, message


def test_conda_takes_a_path_with_a_plus_as_the_launch_does(tmp_path):
    # Past the path check, the next check (the installer's checksum) is the one that fails.
    rc, out = validate("conda", tmp_path, cluster_conda_root="/nas/conda+cu118", conda_temp_parent="/scratch")
    assert rc != 0
    task, message = failed_task(out)
    assert task.startswith("TASK [hpc.slurm_train.conda : Check the conda settings.]"), out
    assert "conda_installer_checksum= must be <algorithm>:<hex>" in message, message


def test_cuda_toolkit_refuses_each_bad_path_by_the_name_it_is_set_under(tmp_path):
    rc, out = validate("cuda_toolkit", tmp_path, cluster_cuda_home="/nas/cuda/../cuda-11.8",
                       cuda_toolkit_modulefiles_dir="/nas/module files")
    assert rc != 0
    task, message = failed_task(out)
    assert task.startswith("TASK [hpc.slurm_train.cuda_toolkit : Check the CUDA paths.]"), out
    assert f"cluster_cuda_home='/nas/cuda/../cuda-11.8' {RULE}" in message
    assert f"cuda_toolkit_modulefiles_dir='/nas/module files' {RULE}" in message
    assert "cuda_toolkit_runfile_symlink" not in message and "cuda_toolkit_temp_parent" not in message, message


def test_cuda_toolkit_names_an_extra_releases_runfile_path_by_its_index(tmp_path):
    good = {"version": "12.1.1", "checksum": "md5:" + "0" * 32, "url": "https://example.invalid/cuda_12.1.1_linux.run"}
    bad = {"version": "12.2.0", "checksum": "md5:" + "0" * 32, "controller_path": "/home/me/cuda 12.2.run"}
    rc, out = validate("cuda_toolkit", tmp_path, cluster_cuda_home="/nas/cuda/cuda-11.8+extras",
                       cuda_toolkit_runfile_nas_path="/nas/runfiles/cuda_11.8.0_520.61.05_linux.run",
                       cuda_toolkit_runfile_checksum="md5:" + "0" * 32,
                       cuda_toolkit_extra_releases=[good, bad])
    assert rc != 0
    task, message = failed_task(out)
    # cluster_cuda_home with '+' passed the first check; the release check names the one bad path.
    assert task.startswith("TASK [hpc.slurm_train.cuda_toolkit : Check each CUDA release's runfile paths.]"), out
    assert f"cuda_toolkit_extra_releases[1].controller_path='/home/me/cuda 12.2.run' {RULE}" in message, message
    assert out.count("[ERROR]") == 1 and "cuda_toolkit_runfile_nas_path=" not in message, out
