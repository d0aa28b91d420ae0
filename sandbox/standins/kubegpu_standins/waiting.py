# SPDX-License-Identifier: GPL-3.0-or-later
"""A vendor program the stand-in images do not implement yet: it says so in its log and waits for SIGTERM, so its pod
runs (as kwok's pods did) while the device-manager simulator (sandbox/k8s/devsim: gfd.py, nfd.py, vendors.py) keeps
doing that program's part for the node.

A program whose manifests probe it (NFD's master, worker and gc: ``httpGet /healthz`` on the container port ``http``,
plugins/module_utils/_nfd/manifests.py) answers ``GET /healthz`` with 200 on that port (NFD v0.19 serves /healthz and
its metrics on 8080 unless ``-port`` says otherwise: _nfd/constants.py HTTP_PORT), so a kubelet keeps it Ready: the
answer says only that the waiting process lives."""

from __future__ import annotations

import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# program -> the port its /healthz is probed on
HEALTH_PORTS = {"nfd-master": 8080, "nfd-worker": 8080, "nfd-gc": 8080}


def _port(name, args):
    port = HEALTH_PORTS.get(name)
    for n, arg in enumerate(args):
        flag = arg.lstrip("-")
        if flag.startswith("port="):
            port = int(flag.split("=", 1)[1])
        elif flag == "port" and n + 1 < len(args):
            port = int(args[n + 1])
    return port


class _Health(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802  pylint: disable=invalid-name
        body = b"ok (kubegpu sandbox stand-in: the process waits)\n" if self.path == "/healthz" else b"not found\n"
        self.send_response(200 if self.path == "/healthz" else 404)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        pass


def main(name, args):
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    sys.stderr.write("kubegpu sandbox stand-in for %s %s: not implemented in the stand-in image yet (not the vendor's "
                     "software); the sandbox's device-manager simulator does its part. Waiting.\n" % (name, args))
    port = _port(name, args)
    if port:
        httpd = ThreadingHTTPServer(("", port), _Health)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        sys.stderr.write("kubegpu sandbox stand-in for %s: GET /healthz on :%d\n" % (name, port))
    sys.stderr.flush()
    stop.wait()
    return 0
