# SPDX-License-Identifier: GPL-3.0-or-later
"""Fixtures shared by every test folder: the fake NVML library, and the test session's own control plane.

``sandbox`` (session scope) is a control plane of the test session's own, under ``.sandbox/test-k8s``: never the one
``make sandbox-up`` or ``make demo`` left running, so no test depends on what ran before it. It builds the binaries if
needed (a no-op when cached), starts from an empty etcd (taking down what an interrupted session left there first),
and is taken down at the end. A failing build or start is an error, not a skip. Only the tests that ask for it start it.
"""

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FAKENVML_DIR = ROOT / 'sandbox' / 'fakenvml'
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # the sandbox package (sandbox.k8s), for the control plane and its simulator
# The control plane's modules are imported by its fixtures, not here: `ansible-test units` loads this file too, and
# the collection's unit tests need neither the sandbox nor the kubernetes library.


@pytest.fixture(scope='session')
def fake_nvml_dir(tmp_path_factory):
    """Build libnvidia-ml.so.1 once per session with the area's own Makefile."""
    wanted = os.environ.get('FAKENVML_BUILD_DIR')
    build_dir = Path(wanted) if wanted else tmp_path_factory.mktemp('fakenvml')
    proc = subprocess.run(['make', '-s', '-C', str(FAKENVML_DIR), 'BUILD_DIR=%s' % build_dir], capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, 'building the fake NVML library failed:\n%s%s' % (proc.stdout, proc.stderr)
    assert (build_dir / 'libnvidia-ml.so.1').is_file()
    return build_dir


def _ensure_binaries():
    """Run build/build.sh (a no-op when the binaries are cached; about 6 minutes cold on 2 cores)."""
    from sandbox.k8s import paths  # pylint: disable=import-outside-toplevel
    proc = subprocess.run([str(paths.HERE / "build" / "build.sh")], capture_output=True, text=True, timeout=3600, check=False)
    assert proc.returncode == 0, "building the sandbox binaries failed:\n%s%s" % (proc.stdout[-4000:], proc.stderr[-4000:])


@pytest.fixture(scope="session")
def sandbox():
    """The test session's own sandbox cluster, fresh, for the whole session."""
    from sandbox.k8s import cluster, paths  # pylint: disable=import-outside-toplevel
    from k8s_helpers import Sandbox  # pylint: disable=import-outside-toplevel
    layout = cluster.Layout(paths.TEST_STATE_DIR, paths.TEST_KUBECONFIG)
    cluster.down(layout, quiet=True)  # what an interrupted session left: every session starts from an empty etcd
    _ensure_binaries()
    state = cluster.up(layout)
    try:
        yield Sandbox(layout, state)
    finally:
        cluster.down(layout)


@pytest.fixture
def namespace(sandbox):  # pylint: disable=redefined-outer-name
    """A fresh namespace, deleted after the test."""
    from k8s_helpers import delete_quietly  # pylint: disable=import-outside-toplevel
    name = "test-" + uuid.uuid4().hex[:10]
    sandbox.core.create_namespace({"metadata": {"name": name}})
    yield name
    delete_quietly(sandbox.core.delete_namespace, name)


@pytest.fixture
def test_nodes(sandbox):  # pylint: disable=redefined-outer-name
    """``make(count, profile)`` creates kwok nodes only this test uses; they are deleted afterwards. ``runtime``: the
    container runtime the node reports (status.nodeInfo.containerRuntimeVersion), set when it is created: kwok's
    node-initialize stage keeps what the node already says, while a status patch after it can be overwritten by a
    late status write of kwok's (seen: a patched node reported containerd 1.6 again seconds later)."""
    from k8s_helpers import delete_quietly  # pylint: disable=import-outside-toplevel
    from sandbox.k8s import cluster, nodes  # pylint: disable=import-outside-toplevel
    made = []

    def make(count=1, profile=None, gpu_taint=False, runtime=None):
        prefix = "kg-test-" + uuid.uuid4().hex[:6]
        manifests = nodes.scale_manifests(count, sandbox.kube_version, profile, gpu_taint, prefix=prefix,
                                          labels={"sandbox.kubegpu.io/test-node": prefix})
        for manifest in manifests if runtime else ():
            manifest["status"]["nodeInfo"]["containerRuntimeVersion"] = runtime
        cluster.create_nodes(sandbox.layout, manifests)
        names = [m["metadata"]["name"] for m in manifests]
        made.extend(names)
        return names

    yield make
    for name in made:
        delete_quietly(sandbox.core.delete_node, name)
