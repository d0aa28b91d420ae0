# SPDX-License-Identifier: GPL-3.0-or-later
"""Sandbox stand-in for NVIDIA's device plugin (``nvidia-device-plugin``), serving the kubelet's device plugin API.

Not NVIDIA's software: a stand-in of the sandbox (sandbox/standins/README.md). It does what k8s-device-plugin v0.20.0
does on its start-up path and while it serves, with the simulator's rules (sandbox/k8s/devsim/rules.py) deciding what
it serves:

1. Config: ``--config-file`` / ``CONFIG_FILE`` (the file the collection's ConfigMap puts at /config/config.yaml), the
   environment and the command line, through ``rules.parse_config`` (command line > environment > file). A config
   the plugin refuses ends this process with the plugin's reason (exit 1).
2. GPUs: through NVML (pynvml and the container's libnvidia-ml.so.1), read into a profile-shaped dict
   (nvml_view.py), then ``rules.plugin_devices``: one resource per name, its devices with their ids (``<uuid>::<n>``
   for replicas), indexes and minor numbers. nvmlInit failing: exit 1 with ``failOnInitError`` (the default), else
   the plugin logs and waits (cmd/nvidia-device-plugin/main.go). No devices: it logs and waits, as NVIDIA's does.
3. Per resource (internal/plugin/server.go): a gRPC server on ``<socket dir>/nvidia-<name>.sock`` (getPluginSocketPath:
   ``nvidia.com/gpu`` -> ``nvidia-gpu.sock``, ``nvidia.com/mig-1g.10gb`` -> ``nvidia-mig-1g.10gb.sock``) serving
   GetDevicePluginOptions (GetPreferredAllocationAvailable), ListAndWatch (every device Healthy, then a new list when
   the health check marks one Unhealthy), GetPreferredAllocation and Allocate (allocate.py), PreStartContainer (empty);
   then Register with the kubelet (``--kubelet-socket`` / ``KUBELET_SOCKET``, default
   /var/lib/kubelet/device-plugins/kubelet.sock): version v1beta1, endpoint the socket's base name, the resource name,
   options {get_preferred_allocation_available: true}.
4. The kubelet deletes every socket when it restarts; NVIDIA's plugin watches for kubelet.sock being created again and
   restarts its servers (main.go, fsnotify). The stand-in polls kubelet.sock's identity (inode) every second and does
   the same. SIGHUP restarts too; SIGTERM/SIGINT stop the servers and remove the sockets.
5. Health (internal/rm/health.go): unless every XID is disabled (DP_DISABLE_HEALTHCHECKS), an NVML event set with
   every GPU registered for XID critical errors; an event the check does not ignore marks the device
   ``rules.xid_hit`` names Unhealthy; a GPU whose registration fails (not NOT_SUPPORTED), or a failing wait, marks
   devices Unhealthy as ``rules.unhealthy_device_ids`` does.
6. CDI (cmd/nvidia-device-plugin/plugin-manager.go: CreateSpecFile before serving): with a CDI device list strategy,
   the spec of vendor k8s.device-plugin.nvidia.com in /var/run/cdi, made by the node's nvidia-ctk (cdi.py).
7. MPS (internal/plugin/mps.go waitForDaemon): before serving, the plugin asks the MPS control daemon; the stand-in
   waits for the daemon's ``/mps/<resource>/.started`` file (cmd/mps-control-daemon/mps/root.go startedFile), which
   the MPS daemon stand-in writes.

Stand-in differences: the sockets go in the kubelet socket's directory (the plugin uses the constant
/var/lib/kubelet/device-plugins/, the same directory unless ``KUBELET_SOCKET`` moves it: tests use a temporary one);
whole-GPU preferred allocations ignore the NVLink topology (allocate.py).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
import uuid

import grpc

from sandbox.k8s.devsim import rules

from . import allocate, api, cdi, nvml_view
from . import config as shared
from .api import pb

LOG = logging.getLogger("nvidia-device-plugin")
RESTART_POLL_S = 1.0
REGISTER_RETRY_S = 5.0


def socket_name(resource):
    """getPluginSocketPath: ``nvidia-`` + the resource's name without its ``nvidia.com/`` prefix, ``.sock``."""
    return "nvidia-%s.sock" % resource.split("/", 1)[1]


class ResourcePlugin:
    """One resource's gRPC server (the DevicePlugin service) and its registration."""

    def __init__(self, resource, devices, config, socket_dir, mps_root="/mps"):
        self.resource = resource
        self.devices = list(devices)
        self.config = config
        self.socket = os.path.join(socket_dir, socket_name(resource))
        self.mps_root = mps_root
        self.unhealthy = set()
        self._changed = threading.Condition()
        self._generation = 0
        self._stopped = threading.Event()
        self.server = None

    # --- DevicePlugin service
    def GetDevicePluginOptions(self, request, context):
        return pb.DevicePluginOptions(get_preferred_allocation_available=True)

    def _api_devices(self):
        out = []
        for dev in self.devices:
            item = pb.Device(ID=dev.id, health=api.UNHEALTHY if dev.id in self.unhealthy else api.HEALTHY)
            if dev.numa is not None:
                item.topology.nodes.add(ID=dev.numa)
            out.append(item)
        return out

    def ListAndWatch(self, request, context):
        with self._changed:
            seen = self._generation
        yield pb.ListAndWatchResponse(devices=self._api_devices())
        while not self._stopped.is_set() and context.is_active():
            with self._changed:
                self._changed.wait(timeout=1.0)
                if self._generation == seen:
                    continue
                seen = self._generation
            yield pb.ListAndWatchResponse(devices=self._api_devices())

    def GetPreferredAllocation(self, request, context):
        response = pb.PreferredAllocationResponse()
        for req in request.container_requests:
            try:
                ids = allocate.preferred(self.devices, self.config, list(req.available_deviceIDs),
                                         list(req.must_include_deviceIDs), req.allocation_size)
            except allocate.AllocateError as exc:
                context.abort(grpc.StatusCode.UNKNOWN, "error getting list of preferred allocation devices: %s" % exc)
            response.container_responses.add(deviceIDs=ids)
        return response

    def Allocate(self, request, context):
        response = pb.AllocateResponse()
        for req in request.container_requests:
            try:
                answer = allocate.container_response(self.resource, self.devices, self.config, list(req.devices_ids),
                                                     str(uuid.uuid4()), mps_container_root=self.mps_root)
            except allocate.AllocateError as exc:
                LOG.error("Allocate %s: %s", list(req.devices_ids), exc)
                context.abort(grpc.StatusCode.UNKNOWN, str(exc))
            item = response.container_responses.add()
            item.envs.update(answer["envs"])
            item.annotations.update(answer["annotations"])
            for mount in answer["mounts"]:
                item.mounts.add(**mount)
            for spec in answer["devices"]:
                item.devices.add(**spec)
            for name in answer["cdi_devices"]:
                item.cdi_devices.add(name=name)
            LOG.info("Allocate for '%s': %s -> %s", self.resource, list(req.devices_ids),
                     dict(answer["envs"]) or answer["cdi_devices"] or answer["annotations"])
        return response

    def PreStartContainer(self, request, context):
        return pb.PreStartContainerResponse()

    # --- life cycle
    def mark_unhealthy(self, ids):
        new = set(ids) - self.unhealthy
        if not new:
            return
        for dev_id in sorted(new):
            LOG.info("'%s' device marked unhealthy: %s", self.resource, dev_id)
        with self._changed:
            self.unhealthy |= new
            self._generation += 1
            self._changed.notify_all()

    def wait_for_mps_daemon(self, timeout=None, stop=None):
        """True once the MPS daemon stand-in marked this resource started (or MPS is off); False on ``stop``."""
        if self.config.sharing is None or self.config.sharing.strategy != "mps":
            return True
        started = os.path.join(self.mps_root, self.resource, ".started")
        deadline = None if timeout is None else time.monotonic() + timeout
        logged = False
        while not os.path.exists(started):
            if not logged:
                LOG.info("Waiting for the MPS control daemon of '%s' (%s)", self.resource, started)
                logged = True
            if (stop or self._stopped).wait(1.0) or (deadline is not None and time.monotonic() > deadline):
                return False
        LOG.info("MPS daemon is healthy for '%s'", self.resource)
        return True

    def serve(self):
        self._stopped.clear()
        LOG.info("Starting GRPC server for '%s'", self.resource)
        self.server = api.serve_device_plugin(self.socket, self, workers=8)
        LOG.info("Starting to serve '%s' on %s", self.resource, self.socket)

    def register(self, kubelet_socket):
        api.register(kubelet_socket, self.socket, self.resource,
                     pb.DevicePluginOptions(get_preferred_allocation_available=True))
        LOG.info("Registered device plugin for '%s' with Kubelet", self.resource)

    def stop(self):
        self._stopped.set()
        with self._changed:
            self._changed.notify_all()
        if self.server is not None:
            LOG.info("Stopping to serve '%s' on %s", self.resource, self.socket)
            self.server.stop(grace=1).wait()
            self.server = None
        try:
            os.unlink(self.socket)
        except FileNotFoundError:
            pass


class HealthCheck(threading.Thread):
    """internal/rm/health.go checkHealth over every resource's devices, through NVML events."""

    XID_CRITICAL = 0x8  # nvmlEventTypeXidCriticalError

    def __init__(self, profile, plugins, config):
        super().__init__(name="health", daemon=True)
        self.profile, self.plugins, self.config = profile, plugins, config
        self.stopped = threading.Event()

    def _members(self, index):
        return [(plugin, [d for d in plugin.devices if d.gpu == index]) for plugin in self.plugins]

    def _all_of(self, index=None):
        for plugin in self.plugins:
            plugin.mark_unhealthy(d.id for d in plugin.devices if index is None or d.gpu == index)

    def run(self):
        import pynvml  # pylint: disable=import-outside-toplevel
        health = self.config.health or rules.health_checks({})
        if health.all_disabled():
            LOG.info("Health checks disabled")
            return
        try:
            event_set = pynvml.nvmlEventSetCreate()
        except pynvml.NVMLError as exc:
            LOG.warning("Failed to start health check: %s; continuing with health checks disabled", exc)
            return
        by_uuid = {}
        for index, device in enumerate(self.profile.get("devices") or []):
            handle = device.get("_handle")
            if handle is None:
                continue
            by_uuid[device.get("uuid")] = index
            try:
                supported = pynvml.nvmlDeviceGetSupportedEventTypes(handle)
                pynvml.nvmlDeviceRegisterEvents(handle, supported & self.XID_CRITICAL, event_set)
            except pynvml.NVMLError as exc:
                if nvml_view.error_code(exc) == "NOT_SUPPORTED":
                    LOG.warning("Device %s is too old to support health checking", device.get("uuid"))
                    continue
                LOG.warning("Marking device %s as unhealthy: %s", device.get("uuid"), exc)
                self._all_of(index)
        while not self.stopped.is_set():
            try:
                event = pynvml.nvmlEventSetWait(event_set, 5000)
            except pynvml.NVMLError as exc:
                if nvml_view.error_code(exc) == "TIMEOUT":
                    continue
                LOG.warning("Error waiting for event: %s; marking all devices as unhealthy", exc)
                self._all_of()
                return
            if event.eventType != self.XID_CRITICAL:
                continue
            try:
                index = by_uuid.get(nvml_view.text(pynvml.nvmlDeviceGetUUID(event.device)))
            except pynvml.NVMLError:
                index = None
            LOG.info("Processing event XID=%d", event.eventData)
            xid = {"xid": event.eventData, "gpu_instance_id": event.gpuInstanceId,
                   "compute_instance_id": event.computeInstanceId}
            for plugin, devs in self._members(index):
                hit = rules.xid_hit(health, devs, xid)
                if hit is not None:
                    plugin.mark_unhealthy([hit.id])


def _kubelet_identity(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_ctime_ns)  # a new socket can reuse the old one's inode: its ctime differs


class Manager:
    """Every resource's plugin; restarts them when kubelet.sock is made again (a kubelet restart)."""

    def __init__(self, devices_by_resource, config, kubelet_socket, mps_root="/mps"):
        self.kubelet_socket = kubelet_socket
        socket_dir = os.path.dirname(kubelet_socket)
        self.plugins = [ResourcePlugin(name, devs, config, socket_dir, mps_root)
                        for name, devs in sorted(devices_by_resource.items())]
        self.stop_event = threading.Event()
        self.restart_event = threading.Event()

    def start_all(self):
        """Serve and register every plugin; False when the kubelet could not be reached (retried by run)."""
        ok = True
        for plugin in self.plugins:
            if not plugin.wait_for_mps_daemon(stop=self.stop_event):
                return False
            plugin.serve()
            try:
                plugin.register(self.kubelet_socket)
            except (grpc.RpcError, grpc.FutureTimeoutError) as exc:
                LOG.error("Could not register device plugin: %s", getattr(exc, "details", lambda: exc)() or exc)
                ok = False
        return ok

    def stop_all(self):
        for plugin in self.plugins:
            plugin.stop()

    def run(self):
        while not self.stop_event.is_set():
            identity = _kubelet_identity(self.kubelet_socket)
            started = self.start_all()
            if not started:
                self.stop_all()
                LOG.info("Retrying in %.0f s", REGISTER_RETRY_S)
                if self.stop_event.wait(REGISTER_RETRY_S):
                    break
                continue
            self.restart_event.clear()
            while not self.stop_event.wait(RESTART_POLL_S):
                now = _kubelet_identity(self.kubelet_socket)
                if now is None:
                    identity = None  # gone: the kubelet is restarting; its next socket is a new one
                elif self.restart_event.is_set() or now != identity:
                    LOG.info("inotify: %s created, restarting.", self.kubelet_socket)
                    break
            self.stop_all()
        LOG.info("Exiting.")


def main(argv=None):
    shared.setup_logging()
    argv = sys.argv[1:] if argv is None else argv
    kubelet_socket = os.environ.get("KUBELET_SOCKET") or api.KUBELET_SOCKET
    for n, arg in enumerate(argv):
        if arg.lstrip("-").startswith("kubelet-socket"):
            kubelet_socket = arg.split("=", 1)[1] if "=" in arg else argv[n + 1]
    LOG.info("Starting nvidia-device-plugin (kubegpu sandbox stand-in, not NVIDIA's software)")
    stop = threading.Event()
    manager_box = []

    def on_signal(signum, _frame):
        if signum == signal.SIGHUP and manager_box:
            LOG.info("Received SIGHUP, restarting.")
            manager_box[0].restart_event.set()
            return
        LOG.info("Received signal \"%s\", shutting down.", signal.Signals(signum).name)
        stop.set()
        if manager_box:
            manager_box[0].stop_event.set()

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, on_signal)
    try:
        config, _cli = shared.load(argv)
        profile, devices = shared.devices(config)
    except shared.StartError as exc:
        LOG.error("%s", exc)
        if exc.code is not None:
            return exc.code
        LOG.info("Waiting indefinitely (failOnInitError=false)")
        stop.wait()
        return 0
    if cdi.wanted(config):
        try:
            LOG.info("Generating CDI spec for resource: %s/%s", cdi.VENDOR, cdi.CLASS)
            LOG.info("CDI spec written to %s", cdi.write_spec(config))
        except cdi.SpecError as exc:
            LOG.error("error starting plugins: %s", exc)
            return 1
    if not devices:
        LOG.info("No devices found. Waiting indefinitely.")
        stop.wait()
        return 0
    for name, devs in sorted(devices.items()):
        LOG.info("Resource %s: %d devices", name, len(devs))
    manager = Manager(devices, config, kubelet_socket, mps_root=shared.MPS_CONTAINER_ROOT)
    manager_box.append(manager)
    health = HealthCheck(profile, manager.plugins, config)
    health.start()
    try:
        manager.run()
    finally:
        health.stopped.set()
        manager.stop_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
