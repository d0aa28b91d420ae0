# SPDX-License-Identifier: GPL-3.0-or-later
"""A second, independent sandbox: up, down (every process gone, ports closed), and up again."""

import socket

from sandbox.k8s import cluster, procs


def _port_open(port):
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_up_down_up(tmp_path, sandbox):
    layout = cluster.Layout(tmp_path / "state", tmp_path / "kubeconfig")
    first = cluster.up(layout, timeout=120)
    try:
        assert first["server"] != sandbox.state["server"]
        records = list(first["processes"].values())
        assert {r["name"] for r in records} == set(cluster.COMPONENTS)
        assert all(procs.is_alive(r) for r in records)
    finally:
        assert cluster.down(layout) == 0
    assert not any(procs.is_alive(r) for r in records)
    assert not any(_port_open(port) for port in first["ports"].values())
    assert cluster.load_state(layout) is None
    second = cluster.up(layout, timeout=120)
    try:
        code, body = cluster.http_get(second["server"] + "/readyz", cluster.client_context(layout))
        assert (code, body.strip()) == (200, "ok")
    finally:
        assert cluster.down(layout) == 0
    # The session sandbox is untouched.
    assert cluster.running(sandbox.layout)
