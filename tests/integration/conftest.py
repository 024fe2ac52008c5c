"""The shared local cluster: brought up once for the whole session from inventory/local and
removed at the end, unless it was already up before the session (a developer's cluster)."""

import pytest

from cluster import REPO, Cluster, local_cluster, status

INVENTORY = REPO / "inventory" / "local"


@pytest.fixture(scope="session")
def cluster():
    was_up = status(INVENTORY)["up"]
    local_cluster("up", "-i", str(INVENTORY))
    yield Cluster(INVENTORY)
    if not was_up:
        local_cluster("down", "-i", str(INVENTORY))
