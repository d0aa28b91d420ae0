# SPDX-License-Identifier: GPL-3.0-or-later
"""The taint patches: only our entry changes, and each patch tests what it was computed from. The API server's answers
to them (a refused test, another writer's taint kept) are proven in tests/integration/k8s/test_readiness_taint.py."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

import pytest

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import K8sError
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import taints

OURS = {"key": "kubegpu.cluster/gpu-unproven", "value": "true", "effect": "NoSchedule"}
ADMIN = {"key": "example.com/dedicated", "value": "ml", "effect": "NoSchedule"}


def node(*entries, **meta):
    return {"metadata": dict({"name": "n1", "resourceVersion": "7"}, **meta), "spec": {"taints": list(entries)}}


def test_adding_to_a_node_without_taints_creates_the_list_and_tests_the_version():
    assert taints.patch({"metadata": {"resourceVersion": "7"}, "spec": {}}, OURS, True) == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
        {"op": "add", "path": "/spec/taints", "value": [OURS]}]


def test_adding_appends_after_the_others():
    assert taints.patch(node(ADMIN), OURS, True)[-1] == {"op": "add", "path": "/spec/taints/-", "value": OURS}


def test_a_taint_of_our_key_and_effect_is_there_whatever_its_value():
    assert taints.patch(node(ADMIN, dict(OURS, value="other")), OURS, True) is None
    assert taints.has(node(dict(OURS, value="other")), OURS)
    assert not taints.has(node(dict(OURS, effect="NoExecute")), OURS)


def test_removal_tests_each_entry_it_removes_from_the_end():
    found = node(OURS, ADMIN, OURS)
    assert taints.patch(found, OURS, False) == [
        {"op": "test", "path": "/spec/taints/2", "value": OURS}, {"op": "remove", "path": "/spec/taints/2"},
        {"op": "test", "path": "/spec/taints/0", "value": OURS}, {"op": "remove", "path": "/spec/taints/0"}]
    assert taints.patch(node(ADMIN), OURS, False) is None


class Core(object):
    """Answers patch_node with a refusal ``refusals`` times, then accepts; read_node returns ``fresh``."""

    def __init__(self, refusals, fresh, status=422):
        self.refusals, self.fresh, self.status, self.patches = refusals, fresh, status, []

    def patch_node(self, name, body, _content_type=None):
        self.patches.append((name, body, _content_type))
        if self.refusals:
            self.refusals -= 1
            error = Exception("refused")
            error.status = self.status
            raise error

    def read_node(self, name):
        return type("Response", (), {"data": json.dumps(self.fresh)})()


def test_a_refused_patch_is_computed_again_from_the_node_as_it_now_is():
    core = Core(1, dict(node(ADMIN), metadata={"name": "n1", "resourceVersion": "8"}))
    assert taints.ensure(core, {"n1": node()}, OURS, True) == ["n1"]
    assert [p[2] for p in core.patches] == [taints.JSON_PATCH] * 2
    assert core.patches[1][1][0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "8"}


def test_check_mode_and_nodes_already_right_send_nothing():
    core = Core(0, None)
    assert taints.ensure(core, {"n1": node(), "n2": node(OURS)}, OURS, True, check_mode=True) == ["n1"]
    assert taints.ensure(core, {"n2": node(OURS)}, OURS, True) == [] and core.patches == []


def test_a_node_that_keeps_changing_or_a_real_error_is_one_clear_error():
    with pytest.raises(K8sError, match="kept changing under other writers"):
        taints.ensure(Core(99, node()), {"n1": node()}, OURS, True)
    with pytest.raises(K8sError, match="adding taint kubegpu.cluster/gpu-unproven on node n1"):
        taints.ensure(Core(1, node(), status=403), {"n1": node()}, OURS, True)


def test_a_server_that_stopped_answering_leaves_the_nodes_not_started_alone():
    """Connection errors (no HTTP status) on every node: the threads' first nodes are tried, the rest are not; a
    refusal about one node (403) does not stop the others (tests/faults, api-server-gone; _k8s/parallel.py)."""
    names = ["n%02d" % i for i in range(30)]
    gone = Core(999, None, status=None)
    with pytest.raises(K8sError, match=r"adding taint .* on node n.*\((\d+) node\(s\) not tried after it\)$") as info:
        taints.ensure(gone, dict((n, node()) for n in names), OURS, True, concurrency=4)
    assert 1 <= len(gone.patches) <= 4
    assert "(%d node(s) not tried after it)" % (30 - len(gone.patches)) in str(info.value)
    refused = Core(1, None, status=403)
    with pytest.raises(K8sError, match="HTTP 403|refused"):
        taints.ensure(refused, dict((n, node()) for n in names), OURS, True, concurrency=4)
    assert len(refused.patches) == 30
