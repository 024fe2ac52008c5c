#!/bin/bash
# STAND-IN for the Miniforge3 installer (Miniforge3-Linux-x86_64.sh), for tests only.
# The real installer cannot be downloaded on the test machines. This one takes the real
# installer's command line (-b batch, -p PREFIX, -u update, -f force, -h) and leaves the real
# layout: bin/conda, bin/python, condabin/conda, etc/profile.d/conda.sh (a `conda` shell
# function with activate/deactivate), conda-meta/history and envs/. Like the real one, the
# install is not relocatable: PREFIX is written into bin/conda's shebang and conda.sh.
# Its `conda env create` makes a Python venv per env; a `file://DIR` channel in environment.yml
# is taken as a directory of already installed packages (a site-packages), linked into the env
# with a .pth file. Each listed package must be importable from those channels or conda fails
# with PackagesNotFoundError, as the real one does.
# Test hook (not in the real installer): MINIFORGE_STANDIN_KILL_AFTER=payload makes it SIGKILL
# itself halfway through, as an interrupted install would be.
set -euo pipefail

usage() {
  cat <<USAGE
usage: $0 [options]

Installs Miniforge3 24.9.2-0 (stand-in)

-b           run install in batch mode (without manual intervention),
             it is expected the license terms (if any) are agreed upon
-f           no error if install prefix already exists
-h           print this help message and exit
-p PREFIX    install prefix, defaults to \$HOME/miniforge3, must not contain spaces.
-s           skip running pre/post-link/install scripts
-u           update an existing installation
-t           run package tests after installation (may install conda-build)
USAGE
}

batch=0 force=0 update=0 prefix="${HOME:-/root}/miniforge3"
while getopts "bfhp:sut" opt; do
  case "$opt" in
    b) batch=1 ;;
    f) force=1 ;;
    h) usage; exit 2 ;;
    p) prefix=$OPTARG ;;
    s|t) ;;
    u) update=1 ;;
    *) usage >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
if (($#)); then
  echo "ERROR: did not recognize argument '$1'" >&2; usage >&2; exit 2
fi
if ((batch == 0)); then
  echo "stand-in: without -b the real installer asks to accept the license interactively; use -b" >&2
  exit 1
fi
case "$prefix" in
  /*) ;;
  *) prefix="$PWD/$prefix" ;;
esac
if [[ "$prefix" == *" "* ]]; then
  echo "ERROR: Cannot install into directories with spaces" >&2; exit 1
fi
if [[ -e "$prefix" ]] && ((force == 0 && update == 0)); then
  echo "ERROR: File or directory already exists: '$prefix'" >&2
  echo "If you want to update an existing installation, use the -u option." >&2
  exit 1
fi

base_python=/usr/bin/python3
[[ -x $base_python ]] || base_python=$(command -v python3)
echo "PREFIX=$prefix"
echo "Unpacking payload ..."
mkdir -p "$prefix/bin" "$prefix/condabin" "$prefix/etc/profile.d" "$prefix/conda-meta" "$prefix/envs" "$prefix/pkgs"
ln -sfn "$base_python" "$prefix/bin/python"
ln -sfn python "$prefix/bin/python3"
if [[ "${MINIFORGE_STANDIN_KILL_AFTER:-}" == payload ]]; then kill -KILL $$; fi

cat > "$prefix/bin/conda" <<CONDA
#!$prefix/bin/python
# stand-in conda (see the installer stand-in's header): env create/update/list, --version.
CONDA_ROOT = "$prefix"
CONDA
cat >> "$prefix/bin/conda" <<'CONDA'
import argparse
import datetime
import json
import os
import re
import subprocess
import sys

VERSION = "24.9.2"
# conda package name -> Python import name, where they differ.
IMPORT_NAMES = {"pytorch": "torch", "pyyaml": "yaml", "scikit-learn": "sklearn", "pillow": "PIL",
                "opencv": "cv2", "python-dateutil": "dateutil", "beautifulsoup4": "bs4"}
# Packages that are no Python module (present whenever the env exists).
NOT_MODULES = {"pip", "setuptools", "wheel", "cudatoolkit", "pytorch-cuda", "cuda-version", "_libgcc_mutex"}


def fail(kind, message, code=1):
    print(f"\n{kind}: {message}\n", file=sys.stderr)
    sys.exit(code)


def parse_environment_file(path):
    try:
        import yaml
    except ImportError:
        fail("CondaError", "the stand-in needs PyYAML in its base python")
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except OSError as exc:
        fail("EnvironmentFileNotFound", f"'{path}' file not found ({exc.strerror})")
    except yaml.YAMLError as exc:
        fail("CondaValueError", f"invalid YAML in {path}: {exc}")
    if not isinstance(data, dict):
        fail("CondaValueError", f"{path}: an environment file is a mapping with name/channels/dependencies")
    deps = data.get("dependencies") or []
    specs = [d for d in deps if isinstance(d, str)]
    for d in deps:
        if isinstance(d, dict) and set(d) - {"pip"}:
            fail("CondaValueError", f"{path}: unsupported dependency entry {d!r}")
    return data.get("name"), [str(c) for c in data.get("channels") or []], specs


def spec_name(spec):
    # 'pytorch=2.1', 'numpy>=1.24', 'conda-forge::numpy', 'python 3.11.*' -> name
    spec = spec.split("::")[-1]
    return re.split(r"[\s=<>!~\[]", spec.strip(), 1)[0].lower()


def channel_dirs(channels):
    dirs = []
    for channel in channels:
        if channel.startswith("file://"):
            path = channel[len("file://"):]
            if not os.path.isdir(path):
                fail("UnavailableInvalidChannel", f"HTTP 404 NOT FOUND for channel {channel}")
            dirs.append(path)
    return dirs


def solve(channels, specs):
    """The packages' import names that are missing from the channels; python checked apart."""
    dirs = channel_dirs(channels)
    missing = []
    for spec in specs:
        name = spec_name(spec)
        if name == "python":
            wanted = re.sub(r"^python\s*[=<>~!]*\s*", "", spec.split("::")[-1]).rstrip(".*")
            have = "%d.%d.%d" % sys.version_info[:3]
            if wanted and not (have == wanted or have.startswith(wanted + ".")):
                missing.append(spec)
            continue
        if name in NOT_MODULES:
            continue
        module = IMPORT_NAMES.get(name, name.replace("-", "_"))
        probe = subprocess.run([sys.executable, "-S", "-c", f"import sys; sys.path[:0] = {dirs!r}; import {module}"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if probe.returncode != 0:
            missing.append(spec)
    if missing:
        listing = "".join(f"\n  - {m}" for m in missing)
        chans = "".join(f"\n  - {c}" for c in channels) or "\n  - (none)"
        fail("PackagesNotFoundError", "The following packages are not available from current channels:\n"
             f"{listing}\n\nCurrent channels:\n{chans}\n")
    return dirs


def env_prefix(args, file_name):
    if args.prefix:
        return os.path.abspath(args.prefix)
    name = args.name or file_name
    if not name:
        fail("CondaValueError", "either -n NAME or -p PREFIX option required,\n"
             "try \"conda env create -f FILE -n NAME\"")
    if name == "base":
        return CONDA_ROOT
    if "/" in name or " " in name:
        fail("CondaValueError", f"Invalid environment name: '{name}'")
    return os.path.join(CONDA_ROOT, "envs", name)


def site_packages(prefix):
    return os.path.join(prefix, "lib", "python%d.%d" % sys.version_info[:2], "site-packages")


def link_channels(prefix, dirs, specs, command):
    with open(os.path.join(site_packages(prefix), "_conda_standin_channels.pth"), "w") as handle:
        handle.write("".join(d + "\n" for d in dirs))
    meta = os.path.join(prefix, "conda-meta")
    os.makedirs(meta, exist_ok=True)
    with open(os.path.join(meta, "history"), "a") as handle:
        handle.write(f"==> {datetime.datetime.now():%Y-%m-%d %H:%M:%S} <==\n# cmd: {command}\n"
                     f"# conda version: {VERSION}\n")
        handle.write("".join(f"+standin::{spec_name(s)}\n" for s in specs))
        handle.write(f"# update specs: {json.dumps(specs)}\n")


def write_activate(prefix):
    with open(os.path.join(prefix, "bin", "activate"), "w") as handle:
        handle.write(f'# stand-in: source the base conda.sh, then activate\n. "{CONDA_ROOT}/etc/profile.d/conda.sh"\n'
                     f'conda activate "{prefix}"\n')


def env_create(args):
    file_name, channels, specs = parse_environment_file(args.file)
    prefix = env_prefix(args, file_name)
    if os.path.exists(prefix):
        fail("CondaValueError", f"prefix already exists: {prefix}")
    dirs = solve(channels, specs)
    print("Collecting package metadata (repodata.json): done\nSolving environment: done")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", prefix], check=True)
    link_channels(prefix, dirs, specs, " ".join(sys.argv))
    write_activate(prefix)
    print(f"#\n# To activate this environment, use\n#\n#     $ conda activate {os.path.basename(prefix)}\n#")


def env_update(args):
    file_name, channels, specs = parse_environment_file(args.file)
    prefix = env_prefix(args, file_name)
    if not os.path.isdir(os.path.join(prefix, "conda-meta")):
        fail("EnvironmentLocationNotFound", f"Not a conda environment: {prefix}")
    dirs = solve(channels, specs)
    print("Collecting package metadata (repodata.json): done\nSolving environment: done")
    link_channels(prefix, dirs, specs, " ".join(sys.argv))


def env_list(_args):
    print("# conda environments:\n#")
    active = os.environ.get("CONDA_PREFIX")
    rows = [("base", CONDA_ROOT)]
    envs = os.path.join(CONDA_ROOT, "envs")
    for name in sorted(os.listdir(envs)) if os.path.isdir(envs) else []:
        if os.path.isdir(os.path.join(envs, name, "conda-meta")):
            rows.append((name, os.path.join(envs, name)))
    for name, path in rows:
        print(f"{name:<25}{'*' if path == active else ' '}  {path}")


def main():
    parser = argparse.ArgumentParser(prog="conda")
    parser.add_argument("--version", "-V", action="store_true")
    sub = parser.add_subparsers(dest="command")
    env = sub.add_parser("env").add_subparsers(dest="env_command", required=True)
    for name, func in (("create", env_create), ("update", env_update)):
        cmd = env.add_parser(name)
        cmd.add_argument("-f", "--file", default="environment.yml")
        cmd.add_argument("-n", "--name")
        cmd.add_argument("-p", "--prefix")
        cmd.add_argument("-q", "--quiet", action="store_true")
        cmd.add_argument("-y", "--yes", action="store_true")
        if name == "update":
            cmd.add_argument("--prune", action="store_true")
        cmd.set_defaults(func=func)
    env.add_parser("list").set_defaults(func=env_list)
    args = parser.parse_args()
    if args.version:
        print(f"conda {VERSION}")
        return
    if not getattr(args, "func", None):
        parser.print_help()
        sys.exit(2)
    args.func(args)


main()
CONDA
chmod 0755 "$prefix/bin/conda"
ln -sfn ../bin/conda "$prefix/condabin/conda"

cat > "$prefix/etc/profile.d/conda.sh" <<CONDASH
# stand-in conda.sh: defines the conda shell function, as Miniforge's does.
export CONDA_EXE='$prefix/bin/conda'
export CONDA_PYTHON_EXE='$prefix/bin/python'
_CONDA_ROOT='$prefix'
CONDASH
cat >> "$prefix/etc/profile.d/conda.sh" <<'CONDASH'
export CONDA_SHLVL="${CONDA_SHLVL:-0}"
__conda_standin_deactivate() {
  if [ -n "${CONDA_PREFIX:-}" ]; then
    PATH=$(printf '%s' ":$PATH:" | sed "s#:$CONDA_PREFIX/bin:#:#g; s#^:##; s#:\$##")
    export PATH
    unset CONDA_PREFIX CONDA_DEFAULT_ENV
    CONDA_SHLVL=$((CONDA_SHLVL - 1)); export CONDA_SHLVL
  fi
}
__conda_standin_activate() {
  __conda_target="${1:-base}"
  case "$__conda_target" in
    base) __conda_dir="$_CONDA_ROOT" ;;
    */*) __conda_dir="$__conda_target" ;;
    *) __conda_dir="$_CONDA_ROOT/envs/$__conda_target" ;;
  esac
  if [ ! -d "$__conda_dir/conda-meta" ]; then
    echo "EnvironmentNameNotFound: Could not find conda environment: $__conda_target" >&2
    echo "You can list all discoverable environments with \`conda info --envs\`." >&2
    return 1
  fi
  __conda_standin_deactivate
  export CONDA_PREFIX="$__conda_dir"
  export CONDA_DEFAULT_ENV="$(basename "$__conda_dir")"
  [ "$__conda_dir" = "$_CONDA_ROOT" ] && CONDA_DEFAULT_ENV=base
  export PATH="$__conda_dir/bin:$PATH"
  CONDA_SHLVL=$((CONDA_SHLVL + 1)); export CONDA_SHLVL
}
conda() {
  case "${1:-}" in
    activate) shift; __conda_standin_activate "$@" ;;
    deactivate) __conda_standin_deactivate ;;
    *) "$CONDA_EXE" "$@" ;;
  esac
}
CONDASH

{
  echo "==> $(date '+%Y-%m-%d %H:%M:%S') <=="
  echo "# cmd: $0 -b -p $prefix"
  echo "# conda version: 24.9.2"
  echo "+conda-forge::conda-24.9.2"
  echo "+conda-forge::python-$("$base_python" -c 'import platform; print(platform.python_version())')"
} >> "$prefix/conda-meta/history"
echo "installation finished."
