"""Where the collection hpc.slurm_train is, and its modules importable by their collection names.

In a checkout the repo root is the collection (collections/ansible_collections/hpc/slurm_train
links back to it), so that directory goes first on ``sys.path``: the checkout's own code wins over
any installed copy. Installed from the wheel, the collection sits in site-packages beside this
package (site-packages/ansible_collections/hpc/slurm_train), where Ansible looks for it too.
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent.parent
# The checkout this package is part of, or None when it was installed.
CHECKOUT = _HERE if (_HERE / "galaxy.yml").is_file() and (_HERE / "collections").is_dir() else None
if CHECKOUT is not None and str(CHECKOUT / "collections") not in sys.path:
    sys.path.insert(0, str(CHECKOUT / "collections"))

import ansible_collections.hpc.slurm_train as _collection  # noqa: E402

# The collection's root: roles/, playbooks/, plugins/.
ROOT = Path(next(iter(_collection.__path__))).resolve()
