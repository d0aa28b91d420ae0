# SPDX-License-Identifier: GPL-3.0-or-later
"""Every request to the API server is bounded (discovery included), a timed-out one is not retried and ends the run
with one message naming the server, the request and what the run had done; the discovery cache is private; a
kubeconfig whose exec credential plugin is missing says so. Against small HTTP servers on 127.0.0.1 that answer, or
accept and never answer."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import os
import socket
import stat
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.kubegpu.cluster.plugins.module_utils import _errors
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import client as _k8s

pytest.importorskip("kubernetes", reason="the kubernetes library is what these tests bound")

from kubernetes import client as k8s_client  # noqa: E402  pylint: disable=wrong-import-position
from urllib3.exceptions import (  # noqa: E402  pylint: disable=wrong-import-position
    ConnectTimeoutError, MaxRetryError, NewConnectionError, ProtocolError, ReadTimeoutError,
)

TIMEOUT = 1  # seconds: the bound these tests give the client
SLACK = 1.5  # seconds a run may take beyond its bound on a busy 2-core machine


class SilentServer(object):
    """A TCP server on 127.0.0.1 that accepts every connection and never sends a byte."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted = []
        self.stopped = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while not self.stopped:
            try:
                conn, _address = self.sock.accept()
            except OSError:
                return
            self.accepted.append((time.monotonic(), conn))

    def close(self):
        self.stopped = True
        self.sock.close()
        for _when, conn in self.accepted:
            conn.close()


DISCOVERY = {
    "/version": {"major": "1", "minor": "34", "gitVersion": "v1.34.0"},
    "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": []},
    "/api/v1": {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
        {"name": "nodes", "singularName": "node", "namespaced": False, "kind": "Node", "verbs": ["get", "list", "patch"]}]},
}


class FakeApiServer(object):
    """An HTTP server on 127.0.0.1 answering the discovery above, nodes ``a`` and ``b`` and their patches; a path in
    ``silent`` gets no answer at all, one in ``stalled`` gets its headers and part of its body, then nothing."""

    def __init__(self, silent=(), stalled=()):
        self.silent = set(silent)
        self.stalled = set(stalled)
        self.release = threading.Event()
        self.requests = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # pylint: disable=arguments-differ
                pass

            def _answer(self):
                path = self.path.split("?")[0]
                server.requests.append((self.command, self.path))
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                if path in server.silent:
                    server.release.wait(30)
                    return
                body = json.dumps(DISCOVERY.get(path) or {"kind": "Node", "metadata": {"name": path.rsplit("/", 1)[-1]}})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body) + (100 if path in server.stalled else 0)))
                self.end_headers()
                self.wfile.write(body.encode())
                self.wfile.flush()
                if path in server.stalled:
                    server.release.wait(30)

            do_GET = do_PATCH = do_POST = _answer

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def silent():
    server = SilentServer()
    yield server
    server.close()


@pytest.fixture
def api():
    servers = []

    def start(**kwargs):
        servers.append(FakeApiServer(**kwargs))
        return servers[-1]
    yield start
    for server in servers:
        server.close()


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """The discovery cache of these tests: under the test's own directory, never the user's."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "kubegpu" / "discovery"


def kubeconfig(tmp_path, server, user=None):
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": user or {"token": "do-not-print-me"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}]}))
    return str(path)


def library_default_cache(host):
    """The kubernetes library's own default cache file for ``host`` (kubernetes/dynamic/discovery.py), never used."""
    return os.path.join(tempfile.gettempdir(), "osrcp-%s.json" % hashlib.md5(host.encode("utf-8")).hexdigest())


def within(seconds, work):
    """``work()``'s exception (or None) and how long it took; fails the test when it runs past ``seconds`` (it is
    left running, in a daemon thread, rather than hanging the session)."""
    outcome = {}

    def run():
        start = time.monotonic()
        try:
            work()
        except Exception as exc:  # pylint: disable=broad-except
            outcome["error"] = exc
        outcome["took"] = time.monotonic() - start
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "still waiting after %ss: the request is not bounded" % seconds
    return outcome.get("error"), outcome["took"]


@pytest.mark.parametrize("scheme", ["https", "http"])
def test_discovery_against_a_server_that_never_answers_fails_within_the_timeout(tmp_path, silent, scheme):
    server = "%s://127.0.0.1:%d" % (scheme, silent.port)
    client = _k8s.Client(_k8s.connect(kubeconfig(tmp_path, server), timeout=TIMEOUT))
    error, took = within(4 * TIMEOUT + 5, lambda: client.resource("apps/v1", "DaemonSet"))
    assert isinstance(error, _k8s.NoAnswer), error
    assert took < TIMEOUT + SLACK  # one timeout: urllib3 does not ask three times more
    assert len(silent.accepted) == 1
    message = str(error)
    assert message.startswith("the Kubernetes API server %s did not answer GET /version (API discovery) within 1s "
                              "(request_timeout); it had answered no request of this run, so nothing was changed"
                              % server), message
    assert error.details["server"] == server
    assert "do-not-print-me" not in message


def test_a_timed_out_request_ends_the_run_naming_what_it_had_done(tmp_path, api):
    server = api(silent=["/api/v1/nodes/b"])
    core = _k8s.Client(_k8s.connect(kubeconfig(tmp_path, server.url), timeout=TIMEOUT)).core
    core.list_node()
    core.patch_node("a", {"metadata": {"labels": {"x": "y"}}})
    core.patch_node("a", {"metadata": {"labels": {"x": "y"}}}, dry_run="All")  # a dry run changes nothing
    error, took = within(TIMEOUT + 5, lambda: core.read_node("b"))
    assert isinstance(error, _k8s.NoAnswer) and took < TIMEOUT + SLACK
    assert str(error).startswith(
        "the Kubernetes API server %s did not answer GET /api/v1/nodes/b within 1s (request_timeout); before that it "
        "answered 3 request(s) of this run and accepted 1 change(s), which stay: PATCH /api/v1/nodes/a. Check that it "
        "is up" % server.url), str(error)
    # the server is written off: what the run still asks (a cleanup) fails at once, with the same message
    sent = len(server.requests)
    again, took = within(TIMEOUT + 5, lambda: core.read_node("a"))
    assert isinstance(again, _k8s.NoAnswer) and str(again) == str(error) and took < 0.5
    assert len(server.requests) == sent


def test_a_body_that_stops_coming_is_bounded_too(tmp_path, api):
    server = api(stalled=["/api/v1/nodes/b"])
    core = _k8s.Client(_k8s.connect(kubeconfig(tmp_path, server.url), timeout=TIMEOUT)).core
    error, took = within(TIMEOUT + 5, lambda: core.read_node("b"))
    assert isinstance(error, _k8s.NoAnswer) and took < TIMEOUT + SLACK
    assert "did not answer GET /api/v1/nodes/b within 1s" in str(error)


def test_a_callers_own_timeout_fails_that_request_but_does_not_write_the_server_off(tmp_path, api):
    server = api(silent=["/api/v1/namespaces/p/pods/x/log"])
    client = _k8s.Client(_k8s.connect(kubeconfig(tmp_path, server.url), timeout=TIMEOUT))
    error, took = within(5, lambda: client.core.read_namespaced_pod_log("x", "p", _request_timeout=0.5))
    assert isinstance(error, _k8s.NoAnswer) and took < 0.5 + SLACK
    assert "within 0.5s;" in str(error)  # not request_timeout's
    log, why = client.pod_log("x", "p", timeout=0.5)
    assert log is None and "did not answer GET /api/v1/namespaces/p/pods/x/log" in why
    assert client.core.read_node("a").status == 200


def test_discovery_and_verbs_work_and_the_cache_is_private(tmp_path, api, private_cache):
    server = api()
    client = _k8s.Client(_k8s.connect(kubeconfig(tmp_path, server.url), timeout=TIMEOUT))
    assert client.get("v1", "Node", "a")["metadata"]["name"] == "a"
    (cache,) = list(private_cache.iterdir())
    assert stat.S_IMODE(os.stat(str(private_cache)).st_mode) == 0o700
    assert json.load(cache.open())["library_version"]
    assert not os.path.exists(library_default_cache(server.url))
    assert client.api_client.answered == len(server.requests)


def test_the_discovery_cache_directory_is_made_private_or_not_used(tmp_path, monkeypatch):
    base = tmp_path / "xdg"
    (base / "kubegpu" / "discovery").mkdir(parents=True, mode=0o755)
    os.chmod(str(base / "kubegpu" / "discovery"), 0o755)
    found = _k8s.discovery_cache_file("https://api.example:6443", environ={"XDG_CACHE_HOME": str(base)})
    assert os.path.dirname(found) == str(base / "kubegpu" / "discovery") and found.endswith(".json")
    assert stat.S_IMODE(os.stat(os.path.dirname(found)).st_mode) == 0o700  # group and others' access taken away
    assert found != _k8s.discovery_cache_file("https://other.example:6443", environ={"XDG_CACHE_HOME": str(base)})
    # a link where the directory should be, or a directory someone else owns: no cache on disk
    linked = tmp_path / "linked"
    (linked / "kubegpu").mkdir(parents=True)
    (linked / "kubegpu" / "discovery").symlink_to(tmp_path)
    assert _k8s.discovery_cache_file("https://api.example:6443", environ={"XDG_CACHE_HOME": str(linked)}) is None
    monkeypatch.setattr(_k8s.os, "geteuid", lambda: os.stat(str(base)).st_uid + 1)
    assert _k8s.discovery_cache_file("https://api.example:6443", environ={"XDG_CACHE_HOME": str(base)}) is None


def test_without_a_private_cache_directory_discovery_stays_in_memory(tmp_path, api, monkeypatch):
    server = api()
    monkeypatch.setattr(_k8s, "discovery_cache_file", lambda host: None)
    client = _k8s.Client(_k8s.connect(kubeconfig(tmp_path, server.url), timeout=TIMEOUT))
    assert client.get("v1", "Node", "a")["metadata"]["name"] == "a"
    assert not os.path.exists(library_default_cache(server.url))


def test_urllib3_retries_a_dropped_or_refused_connection_but_never_a_timeout():
    retries = _k8s._Retries(total=3)  # pylint: disable=protected-access
    for timeout in (ReadTimeoutError(None, "/version", "timed out"), ConnectTimeoutError("timed out")):
        with pytest.raises(MaxRetryError) as info:
            retries.increment(method="GET", url="/version", error=timeout)
        assert info.value.reason is timeout
    after = retries.increment(method="GET", url="/version", error=ProtocolError("Connection aborted"))
    assert isinstance(after, _k8s._Retries) and after.total == 2  # pylint: disable=protected-access
    # urllib3's NewConnectionError (refused) is a subclass of its ConnectTimeoutError; it is not a timeout
    refused = NewConnectionError(None, "Connection refused")
    assert retries.increment(method="GET", url="/version", error=refused).total == 2


def test_a_refused_connection_is_not_taken_for_an_unanswered_request(tmp_path):
    """An API server that is away (restarting) refuses: that error stays a retriable one, for the waits to retry."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed at once: nothing listens there
    api_client = _k8s.connect(kubeconfig(tmp_path, "http://127.0.0.1:%d" % port), timeout=TIMEOUT)
    error, _took = within(TIMEOUT + 5, lambda: _k8s.CoreRequests(api_client).read_node("a"))
    assert isinstance(error, MaxRetryError) and isinstance(error, _k8s.TRANSIENT), error
    assert api_client.unanswered is None
    assert _k8s.retry.retriable(error)


def test_connect_sets_the_bound_and_the_retries(tmp_path):
    api_client = _k8s.connect(kubeconfig(tmp_path, "https://127.0.0.1:1"), timeout=7)
    assert isinstance(api_client, _k8s.BoundedApiClient) and api_client.request_timeout == 7
    assert isinstance(api_client.configuration.retries, _k8s._Retries)  # pylint: disable=protected-access
    assert _k8s.from_params({"kubeconfig": kubeconfig(tmp_path, "https://127.0.0.1:1"),
                             "request_timeout": 9}).api_client.request_timeout == 9


@pytest.mark.parametrize("describe, wanted", [
    (("get", "https://h:6443/version"), "GET /version (API discovery)"),
    (("GET", "https://h:6443/apis/apps/v1?x=1"), "GET /apis/apps/v1 (API discovery)"),
    (("GET", "https://h:6443/api/v1"), "GET /api/v1 (API discovery)"),
    (("GET", "https://h:6443/api/v1/nodes?labelSelector=a"), "GET /api/v1/nodes"),
    (("PATCH", "https://h:6443/apis/apps/v1/namespaces/n/daemonsets/d"), "PATCH /apis/apps/v1/namespaces/n/daemonsets/d"),
])
def test_requests_are_named_by_method_and_path(describe, wanted):
    assert _k8s.describe(*describe) == wanted


# --- exec credential plugins ---------------------------------------------------------------------------------------

def exec_user(command):
    return {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": command, "interactiveMode": "Never"}}


def test_a_missing_exec_credential_plugin_is_named(tmp_path):
    path = kubeconfig(tmp_path, "https://127.0.0.1:1", user=exec_user("kubegpu-no-such-credential-plugin"))
    with pytest.raises(_errors.K8sError) as info:
        _k8s.connect(path)
    assert str(info.value) == (
        "cannot load kubeconfig %s: its exec credential plugin 'kubegpu-no-such-credential-plugin' is not installed on "
        "the host that runs the module (not found on its PATH); install it there, or use a kubeconfig whose user has "
        "a token or a client certificate" % path)


def test_a_failing_exec_credential_plugin_is_reported_with_its_own_words(tmp_path):
    plugin = tmp_path / "plugin"
    plugin.write_text("#!/bin/sh\necho 'token expired, run sso login' >&2\nexit 3\n")
    plugin.chmod(0o755)
    path = kubeconfig(tmp_path, "https://127.0.0.1:1", user=exec_user(str(plugin)))
    wanted = "its exec credential plugin failed, so there are no credentials: exec: process returned 3. token expired"
    with pytest.raises(_errors.K8sError, match=wanted):
        _k8s.connect(path, context="x")


def test_a_working_exec_credential_plugin_gives_its_token(tmp_path):
    plugin = tmp_path / "plugin"
    plugin.write_text("#!/bin/sh\necho '{\"apiVersion\": \"client.authentication.k8s.io/v1\", \"kind\": "
                      "\"ExecCredential\", \"status\": {\"token\": \"from-the-plugin\"}}'\n")
    plugin.chmod(0o755)
    api_client = _k8s.connect(kubeconfig(tmp_path, "https://127.0.0.1:1", user=exec_user(str(plugin))))
    assert api_client.configuration.api_key["BearerToken"] == "Bearer from-the-plugin"


def test_the_plain_apiclient_still_works_without_our_subclass():
    """CoreRequests over a library ApiClient (the unit tests' stand-in) keeps working: nothing requires the subclass."""
    assert _k8s.CoreRequests(k8s_client.ApiClient(k8s_client.Configuration(host="https://h"))).api_client
