# SPDX-License-Identifier: GPL-3.0-or-later
"""The generic Kubernetes helpers: change detection and watch-based waits, with a fake dynamic client."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import subprocess
import sys

import pytest

from ansible_collections.kubegpu.cluster.plugins.module_utils import _errors
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import client as _k8s, objects, retry


def test_compare_ignores_server_fields():
    before = {"kind": "ConfigMap", "data": {"k": "v"},
              "metadata": {"name": "a", "resourceVersion": "1", "generation": 1, "managedFields": [1], "creationTimestamp": "t"}}
    after = {"kind": "ConfigMap", "data": {"k": "v"}, "status": {"x": 1},
             "metadata": {"name": "a", "resourceVersion": "2", "generation": 2, "managedFields": [2]}}
    assert objects.compare(before, after) == "unchanged"
    assert objects.compare(None, after) == "created"
    assert objects.compare(before, dict(after, data={"k": "w"})) == "updated"
    assert objects.key({"kind": "Node", "metadata": {"name": "n"}}) == "Node/n"


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
    with pytest.raises(_errors.WaitTimeout) as err:
        client.wait("v1", "Node", done, 10)
    assert err.value.last["n1"]["status"]["allocatable"]["nvidia.com/gpu"] == "2"


class FakeTime(object):
    """A clock that only moves when ``sleep`` is called, and the pauses asked for."""

    def __init__(self):
        self.now = 0.0
        self.pauses = []

    def clock(self):
        return self.now

    def sleep(self, seconds):
        assert seconds > 0
        self.pauses.append(seconds)
        self.now += seconds


def test_retry_pause_doubles_up_to_a_cap():
    assert [retry.pause(n) for n in range(1, 8)] == [0.5, 1, 2, 4, 4, 4, 4]
    assert retry.pause(10 ** 6) == 4  # no overflow however long the run of errors
    assert retry.pause(3, first=0.1, cap=10) == pytest.approx(0.4)


def test_wait_retries_disconnects_with_doubling_pauses_then_fails_clearly(fake_watch):
    boom = OSError("connection refused")
    fake = FakeTime()
    client = _k8s.Client(dynamic=FakeDynamic(FakeResource([boom] * 10)), retries=3, clock=fake.clock, sleep=fake.sleep)
    with pytest.raises(_errors.K8sError) as err:
        client.wait("v1", "Node", done, 60)
    assert not isinstance(err.value, _errors.WaitTimeout)
    assert fake.pauses == [0.5, 1, 2]  # a pause before each of the 3 retries, none after the last error
    assert str(err.value) == ("lost the Kubernetes API server while waiting for Node: 4 errors in a row over 3.5s, the last: "
                              "connection refused. What was applied stays; run it again once the API server answers: "
                              "the module is idempotent and resumes from there")
    assert err.value.last == {}


def test_wait_reports_the_api_servers_own_message(fake_watch):
    fake = FakeTime()
    unavailable = _k8s.ApiException(status=503, reason="Service Unavailable")
    client = _k8s.Client(dynamic=FakeDynamic(FakeResource([unavailable] * 3)), retries=2, clock=fake.clock, sleep=fake.sleep)
    with pytest.raises(_errors.K8sError, match=r"while waiting for Node: 3 errors in a row over 1\.5s, the last: "
                       r"HTTP 503 Service Unavailable\. "):
        client.wait("v1", "Node", done, 60)


def test_wait_pauses_never_past_the_deadline(fake_watch):
    fake = FakeTime()
    client = _k8s.Client(dynamic=FakeDynamic(FakeResource([OSError("refused")] * 10)), retries=5,
                         clock=fake.clock, sleep=fake.sleep)
    with pytest.raises(_errors.K8sError, match="while waiting for Node: 3 errors in a row over "):
        client.wait("v1", "Node", done, 1.25)
    assert fake.pauses == [0.5, 0.75]  # the second pause is cut to the deadline; then no more retries
    assert fake.now == 1.25


def test_wait_survives_a_disconnect(fake_watch):
    fake_watch.events = [[OSError("reset")], [{"type": "ADDED", "object": node("n1", 4)}]]
    fake = FakeTime()
    client = _k8s.Client(dynamic=FakeDynamic(FakeResource([[node("n1", 0)], [node("n1", 0)]])),
                         clock=fake.clock, sleep=fake.sleep)
    assert done(client.wait("v1", "Node", done, 10))
    assert fake.pauses == [0.5]


def test_wait_an_event_ends_a_run_of_errors(fake_watch):
    """Errors count in a row: after an event the next error pauses 0.5 s again, and the bound starts over."""
    fake_watch.events = [[OSError("reset")], [{"type": "MODIFIED", "object": node("n1", 2)}, OSError("reset")],
                         [{"type": "MODIFIED", "object": node("n1", 4)}]]
    fake = FakeTime()
    client = _k8s.Client(dynamic=FakeDynamic(FakeResource([[node("n1", 0)]] * 3)), retries=1,
                         clock=fake.clock, sleep=fake.sleep)
    assert done(client.wait("v1", "Node", done, 10))
    assert fake.pauses == [0.5, 0.5]


def test_wait_relists_at_once_on_gone(fake_watch):
    fake_watch.events = [[_k8s.ApiException(status=410, reason="Gone")], [{"type": "ADDED", "object": node("n1", 4)}]]
    fake = FakeTime()
    client = _k8s.Client(dynamic=FakeDynamic(FakeResource([[node("n1", 0)], [node("n1", 0)]])), retries=0,
                         clock=fake.clock, sleep=fake.sleep)
    assert done(client.wait("v1", "Node", done, 10))
    assert fake.pauses == []  # not an error: no pause, and not counted against retries=0


def test_connect_reports_a_broken_kubeconfig_by_position_without_its_contents(tmp_path):
    broken = tmp_path / "kubeconfig"
    broken.write_text("token: do-not-print-me\nclusters: [unclosed\n")
    with pytest.raises(_errors.K8sError) as info:
        _k8s.connect(str(broken))
    message = str(info.value)
    assert message.startswith("cannot load kubeconfig %s: not valid YAML (line " % broken)
    assert "do-not-print-me" not in message and "unclosed" not in message


def test_connect_reports_a_missing_kubeconfig():
    with pytest.raises(_errors.K8sError, match="cannot load kubeconfig /nonexistent/kubeconfig"):
        _k8s.connect("/nonexistent/kubeconfig")


def _core_requests(status=200, body=b'{"kind": "Node"}'):
    """CoreRequests on a real ApiClient whose HTTP call is replaced: returns (core, the requests it sent)."""
    from kubernetes import client as k8s_client
    from kubernetes.client import rest
    from urllib3.response import HTTPResponse

    configuration = k8s_client.Configuration(host="https://api.example:6443")
    configuration.api_key = {"BearerToken": "Bearer do-not-print-me"}
    api_client = k8s_client.ApiClient(configuration)
    sent = []

    def call_api(method, url, header_params=None, body=None, post_params=None, _request_timeout=None):
        sent.append({"method": method, "url": url, "headers": header_params, "body": body, "timeout": _request_timeout})
        return rest.RESTResponse(HTTPResponse(body=body_bytes, status=status, reason="Not Found" if status == 404 else "OK",
                                              headers={"content-type": "application/json"}, preload_content=True))

    body_bytes = body
    api_client.call_api = call_api
    return _k8s.CoreRequests(api_client), sent


def test_core_requests_send_what_corev1api_would():
    core, sent = _core_requests()
    core.list_node(limit=500, _continue=None, _preload_content=False, _request_timeout=30)
    core.patch_node("gpu-1", {"metadata": {"labels": {"a": "b"}}}, field_manager="kubegpu", force=True, dry_run="All",
                    _content_type="application/apply-patch+yaml", _preload_content=False)
    core.patch_node("gpu/1", {"metadata": {}}, _content_type="application/merge-patch+json")
    assert core.read_node("gpu-1").data == b'{"kind": "Node"}'
    listed, applied, merged, read = sent
    assert (listed["method"], listed["url"], listed["timeout"]) == ("GET", "https://api.example:6443/api/v1/nodes?limit=500", 30)
    assert applied["method"] == "PATCH"
    assert applied["url"] == "https://api.example:6443/api/v1/nodes/gpu-1?fieldManager=kubegpu&force=true&dryRun=All"
    assert applied["headers"]["Content-Type"] == "application/apply-patch+yaml"
    assert applied["headers"]["authorization"] == "Bearer do-not-print-me"  # the kubeconfig's credentials go along
    assert applied["body"] == {"metadata": {"labels": {"a": "b"}}}
    assert merged["url"].endswith("/api/v1/nodes/gpu%2F1")  # a name is one path segment
    assert read["url"].endswith("/api/v1/nodes/gpu-1") and read["method"] == "GET"


def test_core_requests_raise_the_api_servers_error():
    core, _sent = _core_requests(404, b'{"kind": "Status", "message": "nodes \\"x\\" not found", "code": 404}')
    with pytest.raises(_k8s.ApiException) as info:
        core.read_node("x")
    assert info.value.status == 404
    assert _k8s.api_error_text(info.value) == 'HTTP 404 Not Found: nodes "x" not found'


def test_pod_log_is_text():
    core, sent = _core_requests(body=b"GPU 0: Tesla T4\n")
    assert core.read_namespaced_pod_log("proof-abc", "kubegpu-proof", container="gpu-proof") == "GPU 0: Tesla T4\n"
    assert sent[0]["url"].endswith("/api/v1/namespaces/kubegpu-proof/pods/proof-abc/log?container=gpu-proof")


def test_the_typed_core_api_is_never_imported(tmp_path):
    """Importing kubernetes 37's CoreV1Api costs about 0.6 s of CPU per module run (CoreRequests' docstring); a module
    that labels nodes or reads a pod's log must not pay it."""
    script = ("import sys\n"
              "from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import client, node_labels\n"
              "from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import proof\n"
              "c = client.Client(client.connect('%s'))\n"
              "c.core\n"
              "print(sorted(m for m in sys.modules if m.endswith('core_v1_api')))\n")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
                          "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
                          "current-context: x\n")
    out = subprocess.run([sys.executable, "-c", script % kubeconfig], capture_output=True, text=True, check=True,
                         env=dict(os.environ, PYTHONPATH=":".join(sys.path)))
    assert out.stdout.strip() == "[]"


# Found by the fault suite (tests/faults, api-server-gone): get, list, apply and delete sent one request and failed at
# the first refused connection, so an API server restart of a few seconds failed device_plugin_deploy's applies at
# once, while its waits rode the same restart out. They retry with the one policy now.
class _Applied(object):
    def __init__(self, value):
        self.value = value

    def to_dict(self):
        return self.value


class FlakyDynamic(FakeDynamic):
    """A dynamic client whose get and server-side apply fail with ``errors`` (in order) before they answer."""

    def __init__(self, errors):
        res = FakeResource([])
        res.namespaced = True
        res.get = self._get
        super(FlakyDynamic, self).__init__(res)
        self.errors = list(errors)
        self.calls = 0

    def _next(self):
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)

    def _get(self, **kwargs):
        self._next()
        return _Applied(dict(CONFIG_MAP))

    def server_side_apply(self, res, body=None, **kwargs):
        self._next()
        return _Applied(body)


CONFIG_MAP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"}, "data": {"k": "v"}}


def test_apply_rides_out_a_restarting_api_server():
    fake = FakeTime()
    refused = OSError("connection refused")
    dynamic = FlakyDynamic([refused, refused, _k8s.ApiException(status=503, reason="Service Unavailable"), refused])
    client = _k8s.Client(dynamic=dynamic, clock=fake.clock, sleep=fake.sleep)
    action, _before, after = client.apply(CONFIG_MAP)
    assert action == "unchanged" and after == CONFIG_MAP
    assert fake.pauses == [0.5, 1, 2, 4]  # four errors in a row (the read before the apply), each paused after
    assert dynamic.calls == 6  # five reads, one apply


def test_apply_gives_up_with_the_policy_and_names_the_object():
    fake = FakeTime()
    dynamic = FlakyDynamic([OSError("connection refused")] * 10)
    client = _k8s.Client(dynamic=dynamic, retries=2, clock=fake.clock, sleep=fake.sleep)
    with pytest.raises(_errors.K8sError) as err:
        client.get("v1", "ConfigMap", "c", "ns")
    assert str(err.value) == "cannot read ConfigMap c: connection refused (3 errors in a row over 1.5s)"
    assert fake.pauses == [0.5, 1]


def test_a_throttled_request_waits_what_the_server_asks():
    fake = FakeTime()
    throttled = _k8s.ApiException(status=429, reason="Too Many Requests")
    throttled.headers = {"Retry-After": "3"}
    client = _k8s.Client(dynamic=FlakyDynamic([throttled]), clock=fake.clock, sleep=fake.sleep)
    assert client.get("v1", "ConfigMap", "c", "ns")["data"] == {"k": "v"}
    assert len(fake.pauses) == 1 and 3.0 <= fake.pauses[0] <= 6.0  # Retry-After, stretched by up to as much again


def test_a_throttling_server_is_asked_again_past_the_error_budget():
    # regression (tests/faults, throttled): a priority level of 3 seats turned one request away 5 times in a row and
    # the module gave up, though the server answered every time and asked to be asked again
    fake = FakeTime()
    throttled = _k8s.ApiException(status=429, reason="Too Many Requests")
    throttled.headers = {"Retry-After": "1"}
    client = _k8s.Client(dynamic=FlakyDynamic([throttled] * 12), retries=2, clock=fake.clock, sleep=fake.sleep,
                         policy=retry.RetryPolicy(2, jitter=lambda: 0.5))
    assert client.get("v1", "ConfigMap", "c", "ns")["data"] == {"k": "v"}
    assert fake.pauses == [1.5] * 12
    client = _k8s.Client(dynamic=FlakyDynamic([throttled] * (retry.THROTTLED_RETRIES + 1)), clock=fake.clock,
                         sleep=fake.sleep)
    with pytest.raises(_errors.K8sError, match=r"HTTP 429 Too Many Requests \(%d errors in a row"
                       % (retry.THROTTLED_RETRIES + 1)):
        client.get("v1", "ConfigMap", "c", "ns")


def test_a_429_without_retry_after_keeps_the_callers_budget():
    fake = FakeTime()
    client = _k8s.Client(dynamic=FlakyDynamic([_k8s.ApiException(status=429, reason="Too Many Requests")] * 5),
                         retries=2, clock=fake.clock, sleep=fake.sleep)
    with pytest.raises(_errors.K8sError, match=r"3 errors in a row"):
        client.get("v1", "ConfigMap", "c", "ns")
    assert fake.pauses == [0.5, 1]


def test_an_error_not_worth_a_retry_ends_at_once():
    fake = FakeTime()
    client = _k8s.Client(dynamic=FlakyDynamic([_k8s.ApiException(status=422, reason="Unprocessable Entity")]),
                         clock=fake.clock, sleep=fake.sleep)
    with pytest.raises(_errors.K8sError, match=r"^cannot read ConfigMap c: HTTP 422 Unprocessable Entity$"):
        client.get("v1", "ConfigMap", "c", "ns")
    assert fake.pauses == []


def test_discovery_rides_out_a_restarting_api_server(monkeypatch):
    fake = FakeTime()
    answers = [OSError("connection refused"), OSError("connection refused")]

    def dynamic_client(api_client, **kwargs):
        if answers:
            raise answers.pop(0)
        return "discovered"

    class Configuration(object):
        host = "https://127.0.0.1:6443"

    class ApiClient(object):
        configuration = Configuration()

    monkeypatch.setattr(_k8s, "DynamicClient", dynamic_client)
    monkeypatch.setattr(_k8s, "discovery_cache_file", lambda host: None)
    assert _k8s.Client(ApiClient(), clock=fake.clock, sleep=fake.sleep).dynamic == "discovered"
    assert fake.pauses == [0.5, 1]


class _Answer(object):
    def __init__(self, body):
        self.data = body


class _DiscoveryCore(object):
    """``get_code`` and ``get_api_group`` as the API server answers them (a 404 where the group is not served)."""

    def __init__(self, groups, version="v1.36.3"):
        self.groups = groups
        self.version = version

    def get_code(self):
        return _Answer(b'{"major": "1", "minor": "36", "gitVersion": "%s"}' % self.version.encode())

    def get_api_group(self, group):
        if group not in self.groups:
            raise _k8s.ApiException(status=404, reason="Not Found")
        versions = ",".join('{"groupVersion": "%s/%s", "version": "%s"}' % (group, v, v) for v in self.groups[group])
        return _Answer(('{"kind": "APIGroup", "name": "%s", "versions": [%s]}' % (group, versions)).encode())


def test_server_version_and_served_versions_from_discovery():
    client = _k8s.Client(dynamic=object())
    client._core = _DiscoveryCore({"resource.k8s.io": ["v1", "v1beta2"]})
    assert client.server_version()["gitVersion"] == "v1.36.3"
    assert client.served_versions("resource.k8s.io") == ["v1", "v1beta2"]
    assert client.served_versions("example.com") == []  # a group the server does not serve: 404, no error
