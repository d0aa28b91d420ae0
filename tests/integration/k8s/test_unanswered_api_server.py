# SPDX-License-Identifier: GPL-3.0-or-later
"""Every module that takes the Kubernetes auth options, pointed at an API server that accepts the connection and
never answers, fails within its ``request_timeout``: one connection (no retry), one message naming the server and
what was done. Run through the real ``ansible`` command line; the server is a TCP socket on 127.0.0.1 (no control
plane needed).

Before the bound, ``device_plugin_deploy`` and ``gpu_proof`` waited in API discovery for ever and ``gpu_node_labels``
gave up after about 10 minutes (issue 26)."""

import json
import socket
import threading
import time

import pytest

from ansible_cli import modules_extending, run_module

REQUEST_TIMEOUT = 2  # seconds, the option the modules get (a retry is caught by its second connection)
# What a run may take beyond its bound once the module's request timed out: the module's exit and ansible's own end
# (about a second; more on a busy 2-core machine). Without the bound's "no retry", urllib3 alone would take
# 3 * REQUEST_TIMEOUT more.
AFTER_S = 6
GUARD_S = 240  # only against hanging: the test fails, naming the module, instead of waiting for ever

# The options each module needs besides the auth options, to reach its first request.
ARGS = {
    "amd_device_plugin_deploy": {},
    "device_plugin_deploy": {},
    "dra_driver_deploy": {},
    "dra_migration": {"nodes": ["gpu-1"]},
    "gpu_fleet_audit": {"hosts": {}},
    "gpu_node_labels": {"nodes": {}},
    "gpu_node_maintenance": {"node": "gpu-1"},
    "gpu_proof": {},
    "intel_device_plugin_deploy": {},
    "nano_gpu_deploy": {},
    "node_feature_discovery": {},
}


class SilentServer:
    """Accepts every connection on 127.0.0.1 and never sends a byte; records when each was accepted."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _address = self.sock.accept()
            except OSError:
                return
            self.accepted.append((time.monotonic(), conn))

    def close(self):
        self.sock.close()
        for _when, conn in self.accepted:
            conn.close()


@pytest.fixture
def silent():
    server = SilentServer()
    yield server
    server.close()


def test_every_module_with_the_auth_options_is_covered():
    assert sorted(ARGS) == modules_extending("kubegpu.cluster.k8s_auth")


@pytest.mark.parametrize("module", sorted(ARGS))
def test_a_module_fails_within_its_request_timeout(module, silent, tmp_path):
    server = "https://127.0.0.1:%d" % silent.port
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "silent",
        "clusters": [{"name": "silent", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "do-not-print-me"}}],
        "contexts": [{"name": "silent", "context": {"cluster": "silent", "user": "u"}}]}))
    args = dict(ARGS[module], kubeconfig=str(kubeconfig), request_timeout=REQUEST_TIMEOUT)
    rc, result = run_module("kubegpu.cluster." + module, args, timeout=GUARD_S,
                            env={"XDG_CACHE_HOME": str(tmp_path / "cache")})
    ended = time.monotonic()
    assert rc != 0 and result.get("failed"), result
    assert len(silent.accepted) == 1, "%s connected %d times: a timed-out request was retried" % (
        module, len(silent.accepted))
    took = ended - silent.accepted[0][0]
    assert took < REQUEST_TIMEOUT + AFTER_S, "%s ran %.1fs after it connected" % (module, took)
    assert result["msg"].startswith("the Kubernetes API server %s did not answer " % server), result["msg"]
    assert "within %ds (request_timeout); it had answered no request of this run, so nothing was changed" % (
        REQUEST_TIMEOUT) in result["msg"]
    assert "do-not-print-me" not in json.dumps(result)


def test_a_missing_exec_credential_plugin_is_named_not_403(silent, tmp_path):
    """Issue 26: the Python client logs a missing exec plugin and goes on without credentials, into
    ``403 ... system:anonymous``; the module names the plugin instead, before any request."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "eks",
        "clusters": [{"name": "eks", "cluster": {"server": "https://127.0.0.1:%d" % silent.port,
                                                 "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1", "command": "kubegpu-test-no-such-plugin",
            "args": ["token"]}}}],
        "contexts": [{"name": "eks", "context": {"cluster": "eks", "user": "u"}}]}))
    rc, result = run_module("kubegpu.cluster.gpu_proof", {"kubeconfig": str(kubeconfig)}, timeout=GUARD_S)
    assert rc != 0 and result["msg"] == (
        "cannot load kubeconfig %s: its exec credential plugin 'kubegpu-test-no-such-plugin' is not installed on the "
        "host that runs the module (not found on its PATH); install it there, or use a kubeconfig whose user has a "
        "token or a client certificate" % kubeconfig)
    assert silent.accepted == []  # refused before any request
