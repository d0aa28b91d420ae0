# SPDX-License-Identifier: GPL-3.0-or-later
"""Fixtures for tests against the sandbox control plane.

``sandbox`` (session scope) uses the running sandbox (``make sandbox-up``) or builds the binaries
if needed, brings one up, and then takes down only what it started. A failing build or start is an
error, not a skip.
"""

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kubernetes import client, config  # noqa: E402  pylint: disable=wrong-import-position

from sandbox.k8s import cluster, nodes, paths  # noqa: E402  pylint: disable=wrong-import-position
from k8s_helpers import delete_quietly  # noqa: E402  pylint: disable=wrong-import-position


class Sandbox:
    """A running sandbox and API clients for it."""

    def __init__(self, layout, state):
        self.layout = layout
        self.state = state
        self.kubeconfig = str(layout.kubeconfig)
        self.api_client = config.new_client_from_config(config_file=self.kubeconfig)
        self.core = client.CoreV1Api(self.api_client)
        self.apps = client.AppsV1Api(self.api_client)
        self.batch = client.BatchV1Api(self.api_client)
        self.kube_version = paths.read_versions()["KUBE_VERSION"]


def _ensure_binaries():
    """Run build/build.sh (a no-op when the binaries are cached; about 6 minutes cold on 2 cores)."""
    proc = subprocess.run([str(paths.HERE / "build" / "build.sh")], capture_output=True, text=True, timeout=3600, check=False)
    assert proc.returncode == 0, "building the sandbox binaries failed:\n%s%s" % (proc.stdout[-4000:], proc.stderr[-4000:])


@pytest.fixture(scope="session")
def sandbox():
    """The sandbox cluster for the whole test session."""
    layout = cluster.Layout()
    state = cluster.running(layout)
    started = False
    if state is None:
        _ensure_binaries()
        state = cluster.up(layout)
        started = True
    yield Sandbox(layout, state)
    if started:
        cluster.down(layout)


@pytest.fixture
def namespace(sandbox):  # pylint: disable=redefined-outer-name
    """A fresh namespace, deleted after the test."""
    name = "test-" + uuid.uuid4().hex[:10]
    sandbox.core.create_namespace({"metadata": {"name": name}})
    yield name
    delete_quietly(sandbox.core.delete_namespace, name)


@pytest.fixture
def test_nodes(sandbox):  # pylint: disable=redefined-outer-name
    """``make(count, profile)`` creates kwok nodes only this test uses; they are deleted afterwards."""
    made = []

    def make(count=1, profile=None, gpu_taint=False):
        prefix = "kg-test-" + uuid.uuid4().hex[:6]
        manifests = nodes.scale_manifests(count, sandbox.kube_version, profile, gpu_taint, prefix=prefix,
                                          labels={"sandbox.kubegpu.io/test-node": prefix})
        cluster.create_nodes(sandbox.layout, manifests)
        names = [m["metadata"]["name"] for m in manifests]
        made.extend(names)
        return names

    yield make
    for name in made:
        delete_quietly(sandbox.core.delete_node, name)
