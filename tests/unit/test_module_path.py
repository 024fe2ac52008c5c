"""roles/module_path's profile.d script, rendered as the role renders it and sourced as a login
shell sources /etc/profile.d: with Lmod's own init (Debian's lmod package, the local cluster's
module system, scripts/install-deps) `module avail` and `module load` find the NAS module files;
without a module system the script does nothing and fails nothing. The module file is the one
roles/cuda_toolkit renders (Tcl, which Lmod reads through its tcl2lua), so Lmod is shown to take
it as written. Environment Modules is not tested here: Debian's package conflicts with lmod."""

import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from conftest import init_plugin_loader

ROLE = Path(__file__).resolve().parents[2] / "roles" / "module_path"
# Debian's lmod: what a login shell sources (it sets MODULEPATH from /etc/lmod/modulespath and
# sources Lmod's init for the shell).
LMOD_INIT = Path("/etc/profile.d/lmod.sh")
CUDA_ROLE = ROLE.parent / "cuda_toolkit"
PROFILE = "/etc/profile.d/zz-ansible-slurm-train-modules"


def run_render(dirs, profile=PROFILE, check_mode=False, **more):
    """The role's module_path_render task's result for these settings (its action plugin, with the
    role's search path, as Ansible runs it: a connection with no temporary directory made yet)."""
    from ansible_collections.hpc.slurm_train.plugins.action import module_path_render as action
    loader = DataLoader()
    args = {"dirs": dirs, "profile": profile, **more}
    task = SimpleNamespace(args={key: value for key, value in args.items() if value is not None}, async_val=0,
                           check_mode=check_mode, action="module_path_render")
    connection = mock.MagicMock()
    connection._shell.tmpdir = None
    plugin = action.ActionModule(task, connection, mock.MagicMock(), loader, Templar(loader=loader),
                                 init_plugin_loader())
    plugin._load_name = "module_path_render"  # as the plugin loader names it
    return plugin.run(task_vars={"ansible_search_path": [str(ROLE)]})


def render(name, dirs):
    """The script the role renders from template ``name`` for ``dirs``."""
    suffix = {"modules.sh.j2": ".sh", "modules.csh.j2": ".csh"}[name]
    result = run_render(dirs)
    assert not result.get("failed"), result.get("msg")
    return next(one["content"] for one in result["files"] if one["path"] == PROFILE + suffix)


def cuda_modulefiles(root, home, version="11.8.0"):
    """roles/cuda_toolkit's module file and its `.version` (the default), rendered as the role
    renders them, for a toolkit at ``home`` whose bin/nvcc prints its release."""
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "nvcc").write_text("#!/bin/sh\necho 'Cuda compilation tools, release 11.8, V11.8.89'\n")
    (home / "bin" / "nvcc").chmod(0o755)
    templar = Templar(loader=DataLoader(), variables={
        "_cuda_toolkit_release": {"version": version}, "_cuda_toolkit_home": str(home),
        "ansible_managed": "Ansible managed"})
    (root / "cuda").mkdir(parents=True)
    template = (CUDA_ROLE / "templates" / "modulefile.tcl.j2").read_text()
    (root / "cuda" / "11.8").write_text(templar.template(trust_as_template(template)))
    # The default's text as tasks/main.yml writes it.
    main = (CUDA_ROLE / "tasks" / "main.yml").read_text()
    assert 'set ModulesVersion "{{ cluster_cuda_version.split' in main
    (root / "cuda" / ".version").write_text('#%Module1.0\nset ModulesVersion "11.8"\n')
    return root


def lmod_login(profile, commands):
    """A login shell's order under Lmod: Lmod's profile.d script (it sorts before the role's),
    then the role's script, then what the user types. A clean environment, as a fresh login."""
    return subprocess.run(["bash", "-c", f'source {LMOD_INIT} && source "$1" && {commands}', "bash", str(profile)],
                          capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(profile.parent), "USER": "alice"})


@pytest.mark.skipif(not LMOD_INIT.exists(), reason="Lmod is not installed (scripts/install-deps installs it)")
def test_with_lmod_module_load_cuda_puts_the_roles_nvcc_on_path(tmp_path):
    home = tmp_path / "nas" / "cuda" / "cuda-11.8"
    nas = cuda_modulefiles(tmp_path / "nas" / "modulefiles", home)
    profile = tmp_path / "zz-modules.sh"
    profile.write_text(render("modules.sh.j2", [str(nas)]))
    without = subprocess.run(["bash", "-c", f"source {LMOD_INIT} && module load cuda/11.8"], capture_output=True,
                             text=True, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert without.returncode != 0, without.stderr
    assert 'The following module(s) are unknown: "cuda/11.8"' in " ".join(without.stderr.split()), without.stderr
    proc = lmod_login(profile, "module -t avail 2>&1 && module load cuda/11.8 && command -v nvcc && nvcc && "
                               'echo "$CUDA_HOME $CUDA_PATH" && echo "$LD_LIBRARY_PATH" && module -t list 2>&1')
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    # Lmod's terse listing: the directory, then the module.
    assert lines[:3] == [f"{nas}:", "cuda/", "cuda/11.8"], lines
    assert f"{home}/bin/nvcc" in lines, lines
    assert "Cuda compilation tools, release 11.8, V11.8.89" in lines
    assert f"{home} {home}" in lines and f"{home}/lib64" in lines, lines
    assert lines[-1] == "cuda/11.8", lines
    # Never two CUDAs in one shell: Lmod swaps a module of the same name (its one-name rule, before
    # the file's `conflict cuda` is asked), taking 11.8's PATH and LD_LIBRARY_PATH entries away.
    other = nas / "cuda" / "12.1"
    other.write_text((nas / "cuda" / "11.8").read_text().replace(str(home), str(tmp_path / "cuda-12.1")))
    swap = lmod_login(profile, 'module load cuda/11.8 && module load cuda/12.1 && module -t list 2>&1 && '
                               'echo "$CUDA_HOME" && echo "$PATH:$LD_LIBRARY_PATH"')
    assert swap.returncode == 0, swap.stdout + swap.stderr
    assert swap.stdout.splitlines()[-3:-1] == ["cuda/12.1", str(tmp_path / "cuda-12.1")], swap.stdout
    assert str(home) not in swap.stdout.splitlines()[-1], swap.stdout
    # The plain `module load cuda` a user types gets the role's default (.version), not the
    # highest version Lmod would otherwise pick; `module whatis` reads the file's Tcl as written.
    default = lmod_login(profile, 'module load cuda && echo "$CUDA_HOME" && module whatis cuda 2>&1')
    assert default.returncode == 0 and default.stdout.splitlines()[0] == str(home), default.stdout + default.stderr
    assert re.search(r"(?m)^cuda/11\.8 +: CUDA toolkit 11\.8\.0$", default.stdout), default.stdout


@pytest.mark.skipif(not LMOD_INIT.exists(), reason="Lmod is not installed (scripts/install-deps installs it)")
def test_lmod_reads_the_roles_module_file_without_a_warning(tmp_path):
    nas = cuda_modulefiles(tmp_path / "nas" / "modulefiles", tmp_path / "cuda-11.8")
    profile = tmp_path / "zz-modules.sh"
    profile.write_text(render("modules.sh.j2", [str(nas)]))
    # Lmod's own check of a module file's syntax (tcl2lua translation included).
    proc = lmod_login(profile, "module --checkSyntax load cuda/11.8 2>&1; echo rc=$?")
    assert proc.stdout.splitlines()[-1] == "rc=0", proc.stdout
    assert not re.search(r"(?i)error|warning", proc.stdout), proc.stdout


def test_the_script_quotes_each_dir_and_keeps_their_order(tmp_path):
    script = render("modules.sh.j2", ["/nas/first", "/nas/second"])
    # `module use` prepends: the first dir is added last, so it is searched first.
    assert script.splitlines()[3:5] == ["  module use /nas/second", "  module use /nas/first"]
    assert "module use /nas/first" in render("modules.csh.j2", ["/nas/first"])


def test_without_a_module_system_the_script_does_nothing(tmp_path):
    profile = tmp_path / "zz-modules.sh"
    profile.write_text(render("modules.sh.j2", ["/nas/modulefiles"]))
    for shell in filter(shutil.which, ["sh", "bash", "dash"]):
        proc = subprocess.run([shell, "-c", '. "$1" && echo sourced', shell, str(profile)],
                              capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
        assert (proc.returncode, proc.stdout, proc.stderr) == (0, "sourced\n", ""), shell


def test_the_task_gives_both_scripts_as_node_files_takes_them():
    result = run_render(["/nas/modulefiles"])
    assert result["changed"] is False
    assert [{key: one[key] for key in ("path", "owner", "group", "mode")} for one in result["files"]] == [
        {"path": PROFILE + ".sh", "owner": "root", "group": "root", "mode": "0644"},
        {"path": PROFILE + ".csh", "owner": "root", "group": "root", "mode": "0644"}]
    assert result["files"][0]["content"].startswith("# Ansible managed")


@pytest.mark.parametrize("dirs, profile", [
    ([], PROFILE), (["relative/modulefiles"], PROFILE), (["/nas/a b"], PROFILE), (["/nas/$(reboot)"], PROFILE),
    (["/nas/../etc"], PROFILE), (["/nas/.."], PROFILE), ("/nas/modulefiles", PROFILE), ([None], PROFILE),
    (["/nas/modulefiles"], "/etc/bashrc"), (["/nas/modulefiles"], "/etc/profile.d/a b"),
    (["/nas/modulefiles"], "/etc/profile.d/../x")])
def test_settings_that_cannot_go_into_a_shell_script_are_refused_naming_both(dirs, profile):
    result = run_render(dirs, profile)
    assert result["failed"] is True and "files" not in result
    assert result["msg"].startswith(f"module_path_dirs={dirs} must be absolute paths")
    assert f"module_path_profile={profile} a name in /etc/profile.d" in result["msg"]


def test_an_unknown_option_is_refused_in_ansibles_words():
    from ansible.errors import AnsibleActionFail

    with pytest.raises(AnsibleActionFail, match=r"^Unsupported parameters for \(module_path_render\) module: dir\."):
        run_render(["/nas/modulefiles"], dir="/nas/other")


def test_check_mode_renders_the_same_and_nothing_is_asked_of_the_host():
    plain, checked = run_render(["/nas/modulefiles"]), run_render(["/nas/modulefiles"], check_mode=True)
    assert checked == plain and not plain.get("failed")


@pytest.mark.parametrize("missing", ["dirs", "profile"])
def test_a_missing_option_is_refused_in_ansibles_words(missing):
    from ansible.errors import AnsibleActionFail

    given = {"dirs": ["/nas/modulefiles"], "profile": PROFILE, missing: None}
    with pytest.raises(AnsibleActionFail, match=rf"^missing required arguments: {missing}"):
        run_render(**given)
