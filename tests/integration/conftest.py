"""The shared local cluster: brought up once for the whole session from inventory/local,
provisioned with provision.yml (a no-op when it already is), and removed at the end, unless
it was already up before the session (a developer's cluster); and a 3-node cluster of its own,
built once for the tests that need a spare node."""

import subprocess

import pytest

from cluster import REPO, THREE_NODES_HOSTS, Cluster, local_cluster, own_cluster, status

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


@pytest.fixture(scope="session")
def three_nodes(tmp_path_factory):
    """Three CPU nodes of one group (cluster.THREE_NODES_GROUP) for a 2-of-3-node group launch,
    shared by the session's tests: each leaves the nodes up and resumed (see bad_nodes_cleared)."""
    with own_cluster(tmp_path_factory.mktemp("bad"), "badn", THREE_NODES_HOSTS, "10.87.0.0/24",
                     (46917, 46919, 43406)) as cluster:
        yield cluster


@pytest.fixture
def bad_nodes_cleared(three_nodes):
    """root's bad-nodes record on the 3-node cluster gone before and after the test: a node one test
    marked would otherwise be left out of the next test's group launch."""
    record = three_nodes.nas / "jobs" / "root" / "nodes.json"
    record.unlink(missing_ok=True)
    yield record
    record.unlink(missing_ok=True)


@pytest.fixture
def state_dir(request):
    """A state directory for a cluster of the test's own. Not under /tmp: the controller's /tmp
    is hidden from a cluster's hosts, as a laptop's is from a site's nodes."""
    import shutil
    import uuid
    from pathlib import Path
    # Short: slurmd's step sockets live below it, and a Unix socket's path holds 107 bytes at most.
    path = Path("/var/lib/ansible-slurm-train/tests") / uuid.uuid4().hex[:8]
    yield path
    if path.exists():
        local_cluster("down", "-i", str(request.getfixturevalue("tmp_path") / "inv"), check=False)
        shutil.rmtree(path, ignore_errors=True)
    shutil.rmtree(path.with_name(path.name + "-bin"), ignore_errors=True)
