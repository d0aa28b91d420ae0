# SPDX-License-Identifier: GPL-3.0-or-later
"""The control plane of the AMD and Intel device plugin end-to-end tests, and their nodes.

``vendor_cluster`` (module scope) is the test session's own sandbox (tests/conftest.py ``sandbox``; ``TEST_STATE_DIR``
moves it, sandbox/k8s/paths.py). ``vendor_nodes(count, profile)`` makes kwok nodes only the test uses
(the profile's annotation on them) and deletes them afterwards."""

import uuid

import pytest

from k8s_helpers import delete_quietly


@pytest.fixture(scope="module")
def vendor_cluster(request):
    yield request.getfixturevalue("sandbox")


@pytest.fixture
def vendor_nodes(vendor_cluster):  # pylint: disable=redefined-outer-name
    from sandbox.k8s import cluster, nodes  # pylint: disable=import-outside-toplevel
    made = []

    def make(count=1, profile=None):
        prefix = "kg-v-" + uuid.uuid4().hex[:6]
        manifests = nodes.scale_manifests(count, vendor_cluster.kube_version, profile, False, prefix=prefix,
                                          labels={"sandbox.kubegpu.io/test-node": prefix})
        cluster.create_nodes(vendor_cluster.layout, manifests)
        names = [m["metadata"]["name"] for m in manifests]
        made.extend(names)
        return names

    yield make
    for name in made:
        delete_quietly(vendor_cluster.core.delete_node, name)
