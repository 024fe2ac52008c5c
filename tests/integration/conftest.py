"""The shared local cluster: brought up once for the whole session from inventory/local,
provisioned with provision.yml (a no-op when it already is), and removed at the end, unless
it was already up before the session (a developer's cluster)."""

import subprocess

import pytest

from cluster import REPO, Cluster, local_cluster, status

INVENTORY = REPO / "inventory" / "local"


@pytest.fixture(scope="session")
def cluster():
    was_up = status(INVENTORY)["up"]
    local_cluster("up", "-i", str(INVENTORY))
    provision = subprocess.run(["ansible-playbook", "-i", str(INVENTORY), "provision.yml"], cwd=REPO,
                               capture_output=True, text=True, timeout=900)
    assert provision.returncode == 0, provision.stdout[-4000:] + provision.stderr
    yield Cluster(INVENTORY)
    if not was_up:
        local_cluster("down", "-i", str(INVENTORY))
