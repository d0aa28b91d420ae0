# SPDX-License-Identifier: GPL-3.0-or-later
"""A test double of the kubelet's device plugin Registration service, and only of that: it serves ``kubelet.sock`` in
a directory and records every RegisterRequest. The stand-in device plugin's tests (test_standin_deviceplugin.py,
test_standin_images.py) register against it and then speak the DevicePlugin API to the plugin as the kubelet would.
The real kubelet is tested with the kubelet nodes (sandbox/kubelet)."""

import os
import sys
import threading
from concurrent import futures
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sandbox" / "standins"))

from kubegpu_standins import api  # noqa: E402  pylint: disable=wrong-import-position
from kubegpu_standins.api import pb  # noqa: E402  pylint: disable=wrong-import-position

WAIT_S = 20


class KubeletRegistration:
    """Test double of the kubelet's Registration service (and only that): serves kubelet.sock, records requests."""

    def __init__(self, directory):
        self.socket = os.path.join(directory, "kubelet.sock")
        self.requests = []
        self.cond = threading.Condition()
        self.server = None

    def Register(self, request, context):  # pylint: disable=invalid-name
        with self.cond:
            self.requests.append(request)
            self.cond.notify_all()
        return pb.Empty()

    def start(self):
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self.server.add_generic_rpc_handlers((api.generic_handler("Registration", self),))
        self.server.add_insecure_port(api.unix_target(self.socket))
        self.server.start()

    def stop(self):
        self.server.stop(0).wait()
        if os.path.exists(self.socket):
            os.unlink(self.socket)

    def wait_for(self, count, timeout=WAIT_S):
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.requests) >= count, timeout), \
                "the plugin registered %d times, not %d, within %d s" % (len(self.requests), count, timeout)
            return list(self.requests)
