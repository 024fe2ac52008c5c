"""roles/module_path's profile.d script, rendered as the role renders it and sourced as a login
shell sources /etc/profile.d: with environment-modules' own init (Debian's environment-modules
package, /usr/share/modules/init) `module avail` and `module load` find the NAS module files;
without a module system the script does nothing and fails nothing. (Lmod's init is not
installed here: Debian's lmod and environment-modules each claim `module` in /etc/profile.d on
one machine; the script only calls `module use`, which both take.)"""

import shutil
import subprocess
from pathlib import Path

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

ROLE = Path(__file__).resolve().parents[2] / "roles" / "module_path"
MODULES_INIT = Path("/usr/share/modules/init/bash")


def render(name, dirs):
    templar = Templar(loader=DataLoader(), variables={"module_path_dirs": dirs, "ansible_managed": "Ansible managed"})
    return templar.template(trust_as_template((ROLE / "templates" / name).read_text()))


def modulefiles(root, version):
    """A module file as roles/cuda_toolkit writes it (Tcl, #%Module1.0)."""
    (root / "cuda").mkdir(parents=True)
    (root / "cuda" / version).write_text(f"#%Module1.0\nsetenv CUDA_HOME /nas/cuda/cuda-{version}\n")
    return root


def test_the_script_quotes_each_dir_and_keeps_their_order(tmp_path):
    script = render("modules.sh.j2", ["/nas/first", "/nas/second"])
    # `module use` prepends: the first dir is added last, so it is searched first.
    assert script.splitlines()[3:5] == ["  module use /nas/second", "  module use /nas/first"]
    assert "module use /nas/first" in render("modules.csh.j2", ["/nas/first"])


@pytest.mark.skipif(not MODULES_INIT.exists(), reason="environment-modules is not installed")
def test_with_environment_modules_a_login_shell_finds_the_nas_module_files(tmp_path):
    nas = modulefiles(tmp_path / "nas" / "modulefiles", "11.8")
    profile = tmp_path / "zz-modules.sh"
    profile.write_text(render("modules.sh.j2", [str(nas)]))
    without = subprocess.run(["bash", "-c", f'source {MODULES_INIT} && module load cuda/11.8'],
                             capture_output=True, text=True)
    assert without.returncode != 0 and "Unable to locate a modulefile for 'cuda/11.8'" in without.stderr
    proc = subprocess.run(["bash", "-c", f'source {MODULES_INIT} && source "$1" && module -t avail 2>&1 && '
                                         'module load cuda/11.8 && echo "$CUDA_HOME"', "bash", str(profile)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1] == "/nas/cuda/cuda-11.8" and lines[0] == f"{nas}:" and lines[1] == "cuda/11.8", lines


def test_without_a_module_system_the_script_does_nothing(tmp_path):
    profile = tmp_path / "zz-modules.sh"
    profile.write_text(render("modules.sh.j2", ["/nas/modulefiles"]))
    for shell in filter(shutil.which, ["sh", "bash", "dash"]):
        proc = subprocess.run([shell, "-c", '. "$1" && echo sourced', shell, str(profile)],
                              capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
        assert (proc.returncode, proc.stdout, proc.stderr) == (0, "sourced\n", ""), shell
