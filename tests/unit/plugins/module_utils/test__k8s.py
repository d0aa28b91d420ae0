# SPDX-License-Identifier: GPL-3.0-or-later
"""The generic Kubernetes helpers: change detection and watch-based waits, with a fake dynamic client."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.kubegpu.cluster.plugins.module_utils import _k8s


def test_compare_ignores_server_fields():
    before = {"kind": "ConfigMap", "data": {"k": "v"},
              "metadata": {"name": "a", "resourceVersion": "1", "generation": 1, "managedFields": [1], "creationTimestamp": "t"}}
    after = {"kind": "ConfigMap", "data": {"k": "v"}, "status": {"x": 1},
             "metadata": {"name": "a", "resourceVersion": "2", "generation": 2, "managedFields": [2]}}
    assert _k8s.compare(before, after) == "unchanged"
    assert _k8s.compare(None, after) == "created"
    assert _k8s.compare(before, dict(after, data={"k": "w"})) == "updated"
    assert _k8s.key({"kind": "Node", "metadata": {"name": "n"}}) == "Node/n"


class _Listed(object):
    def __init__(self, items, rv="1"):
        self.value = {"items": items, "metadata": {"resourceVersion": rv}}

    def to_dict(self):
        return self.value


class FakeResource(object):
    namespaced = False

    def __init__(self, lists):
        self.lists = list(lists)

    def get(self, **kwargs):
        item = self.lists.pop(0)
        if isinstance(item, Exception):
            raise item
        return _Listed(item)


class FakeDynamic(object):
    def __init__(self, res):
        self.resources = self
        self.res = res

    def get(self, **kwargs):
        return self.res


class FakeWatch(object):
    events = []

    def stream(self, *args, **kwargs):
        assert kwargs["timeout_seconds"] >= 1  # bounded on the server side too
        for event in FakeWatch.events.pop(0) if FakeWatch.events else []:
            if isinstance(event, Exception):
                raise event
            yield event

    def stop(self):
        pass


@pytest.fixture
def fake_watch(monkeypatch):
    monkeypatch.setattr(_k8s, "_watch", type("W", (), {"Watch": FakeWatch}))
    FakeWatch.events = []
    return FakeWatch


def node(name, gpus):
    return {"metadata": {"name": name}, "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}}}


def done(objects):
    return objects.get("n1", {}).get("status", {}).get("allocatable", {}).get("nvidia.com/gpu") == "4"


def test_wait_returns_when_a_watch_event_satisfies(fake_watch):
    fake_watch.events = [[{"type": "MODIFIED", "object": node("n1", 2)}, {"type": "MODIFIED", "object": node("n1", 4)}]]
    client = _k8s.Client(dynamic=FakeDynamic(FakeResource([[node("n1", 0)]])))
    assert done(client.wait("v1", "Node", done, 10))


def test_wait_times_out_with_the_last_state(fake_watch):
    now = [0.0]

    def clock():
        now[0] += 4
        return now[0]
    fake_watch.events = [[{"type": "MODIFIED", "object": node("n1", 2)}]] * 5
    client = _k8s.Client(dynamic=FakeDynamic(FakeResource([[node("n1", 0)]] * 5)), clock=clock)
    with pytest.raises(_k8s.WaitTimeout) as err:
        client.wait("v1", "Node", done, 10)
    assert err.value.details["last"]["n1"]["status"]["allocatable"]["nvidia.com/gpu"] == "2"


def test_wait_retries_disconnects_then_fails_clearly(fake_watch):
    boom = OSError("connection reset")
    client = _k8s.Client(dynamic=FakeDynamic(FakeResource([boom] * 10)), retries=3)
    with pytest.raises(_k8s.K8sError) as err:
        client.wait("v1", "Node", done, 10)
    assert "4 errors in a row" in str(err.value)


def test_wait_survives_a_disconnect(fake_watch):
    fake_watch.events = [[OSError("reset")], [{"type": "ADDED", "object": node("n1", 4)}]]
    client = _k8s.Client(dynamic=FakeDynamic(FakeResource([[node("n1", 0)], [node("n1", 0)]])))
    assert done(client.wait("v1", "Node", done, 10))


def test_connect_reports_a_broken_kubeconfig_by_position_without_its_contents(tmp_path):
    broken = tmp_path / "kubeconfig"
    broken.write_text("token: do-not-print-me\nclusters: [unclosed\n")
    with pytest.raises(_k8s.K8sError) as info:
        _k8s.connect(str(broken))
    message = str(info.value)
    assert message.startswith("cannot load kubeconfig %s: not valid YAML (line " % broken)
    assert "do-not-print-me" not in message and "unclosed" not in message


def test_connect_reports_a_missing_kubeconfig():
    with pytest.raises(_k8s.K8sError, match="cannot load kubeconfig /nonexistent/kubeconfig"):
        _k8s.connect("/nonexistent/kubeconfig")
