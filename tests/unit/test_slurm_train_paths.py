"""Where slurm_train finds the collection: in a checkout, the checkout's own (its collections/ link
first on sys.path, ahead of any installed copy); installed from the wheel, the copy beside it in
site-packages. Each case in a fresh interpreter, as a user's program imports the package."""

import json
import shutil
import subprocess
import sys

from conftest import PROJECT_ROOT

PROBE = ("import json, sys; sys.path.insert(0, sys.argv[1]) if len(sys.argv) > 1 else None; "
         "from slurm_train import _collection as c; "
         "print(json.dumps({'checkout': c.CHECKOUT and str(c.CHECKOUT), 'root': str(c.ROOT), 'path': sys.path}))")


def probe(cwd, *argv, env=None):
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=cwd, capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_in_a_checkout_its_own_collection_goes_first_on_the_path(tmp_path):
    found = probe(tmp_path, str(PROJECT_ROOT))
    collections = str(PROJECT_ROOT / "collections")
    assert (found["checkout"], found["root"]) == (str(PROJECT_ROOT), str(PROJECT_ROOT))
    assert found["path"][0] == collections and found["path"].count(collections) == 1


def test_installed_it_uses_the_collection_beside_it(tmp_path):
    site = tmp_path / "site-packages"
    shutil.copytree(PROJECT_ROOT / "slurm_train", site / "slurm_train",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (site / "ansible_collections" / "hpc").mkdir(parents=True)
    (site / "ansible_collections" / "hpc" / "slurm_train").symlink_to(PROJECT_ROOT, target_is_directory=True)
    found = probe(tmp_path, str(site))
    assert (found["checkout"], found["root"]) == (None, str(PROJECT_ROOT))
    assert str(PROJECT_ROOT / "collections") not in found["path"]
