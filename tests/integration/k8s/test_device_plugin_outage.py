# SPDX-License-Identifier: GPL-3.0-or-later
"""The API server goes away while device_plugin_deploy waits: the module gives up after bounded retries with one
clear message, and a re-run once the API server is back converges without changing anything.

Uses a second sandbox of its own (the shared one is never stopped), always taken down at the end. Synchronisation is
by conditions, never by sleeps: the module is known to be inside its Node watch when the API server's own gauge of
open Node watches rises above what the sandbox's components hold.
"""

import socket
import time

import pytest
from kubernetes import client, config

from ansible_cli import BackgroundModule, run_module
from sandbox.k8s import cluster, procs

MODULE = "kubegpu.cluster.device_plugin_deploy"
NAMESPACE = "nvidia-device-plugin"
PLUGIN_DS = "nvidia-device-plugin-daemonset"
LABEL = "kubegpu.test/outage"
NODE = "kg-v100"
EXPECTED = {NODE: {"nvidia.com/gpu": 4}}
GUARD_S = 240  # only against hanging: the module gives up after about 12 s of retries (wait_timeout is 120)


def _port_open(port):
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _node_watches(layout, server):
    """How many Node watches the API server serves now (its ``apiserver_longrunning_requests`` gauge)."""
    code, body = cluster.http_get(server + "/metrics", cluster.client_context(layout), timeout=10)
    assert code == 200, body[:500]
    total = 0
    for line in body.splitlines():
        if (line.startswith("apiserver_longrunning_requests{") and 'resource="nodes"' in line and 'verb="WATCH"' in line
                and 'subresource=""' in line):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _rolled_out(apps, name):
    ds = apps.read_namespaced_daemon_set(name, NAMESPACE)
    return (ds.status.observed_generation or 0) >= ds.metadata.generation and not ds.status.desired_number_scheduled


def _wait_in_node_watch(layout, state, apps, module, baseline, timeout=120):
    """Poll (bounded) until the module's DaemonSet is rolled out (on no node) and one more Node watch is open than
    before the module started: the module is then inside ``Client.wait`` for the nodes."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        assert module.running(), "the module ended before it waited for the nodes: %s" % (module.result(10),)
        try:
            last = (_rolled_out(apps, PLUGIN_DS), _node_watches(layout, state["server"]))
        except client.ApiException as exc:
            if exc.status != 404:  # the DaemonSet is not there yet
                raise
            last = None
        if last and last[0] and last[1] > baseline:
            return
        time.sleep(0.2)
    pytest.fail("the module did not start watching the nodes within %ss (rolled out, Node watches: %s; baseline %s)"
                % (timeout, last, baseline))


def test_component_functions_refuse_what_they_cannot_do(tmp_path):
    layout = cluster.Layout(tmp_path / "state", tmp_path / "kubeconfig")
    with pytest.raises(cluster.SandboxError, match="unknown component 'apiserver'"):
        cluster.stop_component(layout, "apiserver")
    with pytest.raises(cluster.SandboxError, match="no sandbox recorded"):
        cluster.start_component(layout, "kube-apiserver")
    with pytest.raises(cluster.SandboxError, match="no sandbox recorded"):
        cluster.stop_component(layout, "kube-apiserver")


def test_api_server_lost_during_the_wait_then_a_rerun_converges(tmp_path, sandbox):
    layout = cluster.Layout(tmp_path / "state", tmp_path / "kubeconfig")
    state = cluster.up(layout, timeout=120)
    records = list(state["processes"].values())
    try:
        _outage(layout, state, records)
    finally:
        stopped = cluster.down(layout)
    assert stopped == 0
    assert not any(procs.is_alive(r) for r in records)
    assert not any(_port_open(port) for port in state["ports"].values())
    # The session sandbox is untouched.
    assert cluster.running(sandbox.layout)


def _outage(layout, state, records):
    kubeconfig = str(layout.kubeconfig)
    apps = client.AppsV1Api(config.new_client_from_config(config_file=kubeconfig))
    # the test's own label places the pods; no node of this control plane carries the operand deploy labels
    args = dict(kubeconfig=kubeconfig, node_selector={LABEL: "true"}, expected=EXPECTED, wait_timeout=120, deploy_labels=False)
    baseline = _node_watches(layout, state["server"])

    with BackgroundModule(MODULE, args) as module:
        _wait_in_node_watch(layout, state, apps, module, baseline)
        old = cluster.stop_component(layout, "kube-apiserver", timeout=5)
        assert old is not None and not procs.is_alive(old)
        assert not _port_open(state["ports"]["kube-apiserver"])
        assert "kube-apiserver" not in cluster.load_state(layout)["processes"]
        assert cluster.running(layout) is None
        assert cluster.stop_component(layout, "kube-apiserver") is None  # already stopped: nothing to do
        rc, result = module.result(GUARD_S)

    msg = result.get("msg", "")
    assert rc != 0 and result.get("failed"), result
    assert msg.startswith("lost the Kubernetes API server while waiting for Node: "), msg
    assert " errors in a row over " in msg and "Connection refused" in msg, msg
    assert "run it again once the API server answers" in msg, msg
    # one line, and no traceback: an expected failure (ansible-core 2.19 says "(traceback unavailable)" then)
    assert "\n" not in msg and "Traceback" not in msg + str(result.get("exception", "")), result

    new = cluster.start_component(layout, "kube-apiserver", timeout=120)
    restarted = cluster.load_state(layout)
    records.append(new)
    assert new["pid"] != old["pid"] and procs.is_alive(new)
    assert restarted["ports"] == state["ports"] and restarted["server"] == state["server"]
    assert cluster.start_component(layout, "kube-apiserver") == new  # running: left alone
    assert cluster.running(layout), "a component did not survive the outage; see %s" % layout.logs

    core = client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))
    core.patch_node(NODE, {"metadata": {"labels": {LABEL: "true"}}})
    rc, again = run_module(MODULE, args)
    assert rc == 0, again
    assert again["changed"] is False, again["objects"]
    assert again["resources"] == EXPECTED
    assert cluster.running(layout), "devsim or another component gave up; see %s" % layout.log("devsim")
