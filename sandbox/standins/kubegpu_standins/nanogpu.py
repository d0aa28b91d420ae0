# SPDX-License-Identifier: GPL-3.0-or-later
"""Sandbox stand-ins for nano-gpu's images (``nanogpu/nano-gpu-agent``, ``nanogpu/nano-gpu-scheduler``): not nano-gpu's
software (sandbox/standins/README.md).

* ``nano-gpu-agent`` (the agent's container, ``kubegpu.cluster.nano_gpu_deploy``): a device plugin of the kubelet's API
  v1beta1, as nano-gpu-agent's NanoServer (pkg/plugins/server.go; now elastic-ai/elastic-gpu-agent, whose history
  holds it): it counts the GPUs through NVML (the container's libnvidia-ml.so.1, which NVIDIA's runtime injects:
  the image sets NVIDIA_VISIBLE_DEVICES=all), lists 100 devices per GPU (``nano-<gpu>-<nn>``, all Healthy:
  common.GPUPercentEachCard), serves them on ``<socket dir>/nano-gpu.sock`` and registers ``nano-gpu/gpu-percent``
  (pkg/types ResourceName) with the kubelet, with ``pre_start_required`` as upstream. So the kubelet advertises
  ``nano-gpu/gpu-percent`` = 100 x GPUs. NVML failing: exit 1 with the reason.
  Stand-in differences: Allocate answers upstream's environment (``GPU`` = a hash of the device IDs,
  ``NVIDIA_VISIBLE_DEVICES=none``) but no ``/dev/elastic-gpu-<hash>`` device nodes, and PreStartContainer creates no
  GPU share (upstream's operator makes those device nodes; here nothing shares a GPU's memory or time); no state file.
* ``install.sh`` (the agent's init container, tools/install.sh): upstream swaps the host's NVIDIA hook binaries for
  nano-gpu's. The stand-in changes nothing on the node and says so (``kubegpu.cluster.nano_gpu_host`` is the
  collection's host side and is tested on its own); exit 0.
* ``nano-gpu-scheduler`` (the extender's Deployment): serves ``GET /version`` (``0.1.0``, pkg/routes/routes.go) on
  ``$PORT`` (default 39999) for the Deployment's readiness probe. The extender's decisions are the sandbox's
  extender process on the host (sandbox/nanogpu), which the kube-scheduler calls and which answers only while this
  pod runs; the stand-in's other routes answer 503 saying so.
"""

from __future__ import annotations

import hashlib
import logging
import os
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc

from . import api
from . import config as shared
from .api import pb

LOG = logging.getLogger("nano-gpu")
RESOURCE_NAME = "nano-gpu/gpu-percent"
PERCENT_PER_GPU = 100
SOCKET_NAME = "nano-gpu.sock"
SCHEDULER_VERSION = "0.1.0"
DEFAULT_PORT = 39999
RESTART_POLL_S = 1.0
REGISTER_RETRY_S = 5.0
STANDIN = "kubegpu sandbox stand-in, not nano-gpu's software"


def device_ids(gpus):
    """NewNanoServer: ``nano-<gpu>-<nn>`` for nn in 0..99, per GPU."""
    return ["nano-%d-%02d" % (gpu, n) for gpu in range(gpus) for n in range(PERCENT_PER_GPU)]


def count_gpus():
    """The GPUs NVML sees (operator.DetectNumber); raises pynvml.NVMLError."""
    import pynvml  # pylint: disable=import-outside-toplevel
    pynvml.nvmlInit()
    try:
        return int(pynvml.nvmlDeviceGetCount())
    finally:
        pynvml.nvmlShutdown()


class NanoServer:
    """The DevicePlugin service of nano-gpu's agent, as the stand-in serves it."""

    def __init__(self, ids, socket_dir):
        self.ids = list(ids)
        self.socket = os.path.join(socket_dir, SOCKET_NAME)
        self.server = None
        self.stopped = threading.Event()

    def GetDevicePluginOptions(self, request, context):  # pylint: disable=unused-argument
        return pb.DevicePluginOptions(pre_start_required=True)

    def ListAndWatch(self, request, context):  # pylint: disable=unused-argument
        yield pb.ListAndWatchResponse(devices=[pb.Device(ID=i, health=api.HEALTHY) for i in self.ids])
        while not self.stopped.wait(1.0) and context.is_active():
            pass

    def GetPreferredAllocation(self, request, context):  # pylint: disable=unused-argument
        return pb.PreferredAllocationResponse()

    def Allocate(self, request, context):  # pylint: disable=unused-argument
        response = pb.AllocateResponse()
        for req in request.container_requests:
            ids = sorted(req.devices_ids)
            digest = hashlib.sha256(",".join(ids).encode()).hexdigest()[:16]
            item = response.container_responses.add()
            item.envs.update({"GPU": digest, "NVIDIA_VISIBLE_DEVICES": "none", "ku": str(len(ids))})
            LOG.info("AllocateRequest sorted DevicesIDs: %s (%s: no GPU share device is made)", ids, STANDIN)
        return response

    def PreStartContainer(self, request, context):  # pylint: disable=unused-argument
        LOG.info("PreStartContainerRequest DevicesIDs: %d (%s: no GPU share is created)", len(request.devices_ids),
                 STANDIN)
        return pb.PreStartContainerResponse()

    def serve(self):
        self.stopped.clear()
        self.server = api.serve_device_plugin(self.socket, self, workers=4)
        LOG.info("serving %s on %s", RESOURCE_NAME, self.socket)

    def register(self, kubelet_socket):
        api.register(kubelet_socket, self.socket, RESOURCE_NAME, pb.DevicePluginOptions(pre_start_required=True))
        LOG.info("registered %s with the kubelet (%d devices)", RESOURCE_NAME, len(self.ids))

    def stop(self):
        self.stopped.set()
        if self.server is not None:
            self.server.stop(grace=1).wait()
            self.server = None
        try:
            os.unlink(self.socket)
        except FileNotFoundError:
            pass


def _identity(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_ctime_ns)


def _on_stop(stop):
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())


def agent(argv):
    LOG.info("Starting nano-gpu-agent (%s) %s", STANDIN, argv)
    stop = threading.Event()
    _on_stop(stop)
    kubelet_socket = os.environ.get("KUBELET_SOCKET") or api.KUBELET_SOCKET
    try:
        gpus = count_gpus()
    except Exception as exc:  # pylint: disable=broad-except  # pynvml.NVMLError and a missing library alike
        LOG.error("detect GPU number failed: %s", exc)
        return 1
    LOG.info("%d GPU(s) through NVML: %d devices of %s", gpus, gpus * PERCENT_PER_GPU, RESOURCE_NAME)
    server = NanoServer(device_ids(gpus), os.path.dirname(kubelet_socket))
    while not stop.is_set():
        identity = _identity(kubelet_socket)
        server.serve()
        try:
            server.register(kubelet_socket)
        except (grpc.RpcError, grpc.FutureTimeoutError) as exc:
            LOG.error("register failed: %s; retrying in %.0f s", exc, REGISTER_RETRY_S)
            server.stop()
            stop.wait(REGISTER_RETRY_S)
            continue
        while not stop.wait(RESTART_POLL_S):
            now = _identity(kubelet_socket)
            if now is not None and now != identity:
                LOG.info("%s created again (kubelet restart): registering again", kubelet_socket)
                break
        server.stop()
    LOG.info("Exiting.")
    return 0


def installer(argv):
    LOG.info("nano-gpu installer (%s) %s: leaves the node's NVIDIA hook binaries as they are (upstream's tools/"
             "install.sh swaps them for nano-gpu's; kubegpu.cluster.nano_gpu_host is the collection's host side)", STANDIN,
             argv)
    return 0


class _Handler(BaseHTTPRequestHandler):
    def _answer(self, code, body):
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802  pylint: disable=invalid-name
        if self.path == "/version":
            self._answer(200, SCHEDULER_VERSION)
        else:
            self._answer(404, "not found\n")

    def do_POST(self):  # noqa: N802  pylint: disable=invalid-name
        self._answer(503, "%s: the sandbox's extender process on the host (sandbox/nanogpu) answers the "
                          "kube-scheduler, not this pod\n" % STANDIN)

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        LOG.debug(format, *args)


def scheduler(argv):
    port = int(os.environ.get("PORT") or DEFAULT_PORT)
    LOG.info("Starting nano-gpu-scheduler (%s) %s: GET /version on :%d; the extender's decisions are the sandbox's "
             "extender process (sandbox/nanogpu)", STANDIN, argv, port)
    httpd = ThreadingHTTPServer(("", port), _Handler)
    stop = threading.Event()
    _on_stop(stop)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    stop.wait()
    httpd.shutdown()
    return 0


def main(program, argv):
    shared.setup_logging()
    started = time.monotonic()
    code = {"nano-gpu-agent": agent, "install.sh": installer, "nano-gpu-scheduler": scheduler}[program](argv)
    LOG.debug("%s ran %.1f s", program, time.monotonic() - started)
    return code
