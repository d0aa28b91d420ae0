# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The work of ``dra_migration``: move GPU nodes from NVIDIA's device plugin to NVIDIA's DRA driver, or back, one
node set at a time, through the two operand deploy labels, and watch (bounded) until each node's kubelet shows it.

What a node is, read from the cluster alone (no host access):

* **device plugin**: it advertises an ``nvidia.com/*`` extended resource (allocatable > 0);
* **DRA**: ResourceSlices of the driver ``gpu.nvidia.com`` for the node list its GPUs;
* **both** (wrong): both at once - the DRA driver's chart forbids it (templates/validation.yaml);
* **none**.

Moving to DRA sets ``nvidia.com/gpu.deploy.device-plugin=false`` (our device plugin's DaemonSet selects ``true``, so
its pod leaves) and ``nvidia.com/gpu.deploy.dra-driver=true`` (the DRA kubelet plugin's DaemonSet selects it, as the GPU
Operator's does), in one server-side apply per node under this module's own field manager. It is done when the node's
allocatable ``nvidia.com/*`` device-plugin resources are 0 or gone (the scheduler then sends an ``nvidia.com/gpu``
request through DRA where a DeviceClass names it: kubernetes v1.36.3
pkg/scheduler/framework/plugins/dynamicresources/extendeddynamicresources.go filterExtendedResources) and its
ResourceSlices list its GPUs. The kubelet keeps the old capacity for 5 minutes after a device plugin leaves
(pkg/kubelet/cm/devicemanager/types.go endpointStopGracePeriod) and only then sets it to 0
(pkg/kubelet/nodestatus/setters.go): capacity is reported, not waited for.

The way back applies ``device-plugin=true`` under the same field manager, so server-side apply removes the
``dra-driver`` label this module set; where someone else set it to true as well, it is set to false. It is done when no ResourceSlice of the driver
is left for the node (the kubelet wipes them 30 s after the plugin unregisters: pkg/kubelet/cm/dra/manager.go
defaultWipingDelay) and the node advertises ``nvidia.com/*`` again.

Refused before any change, with the reason: a node that is not there, a cluster that serves no resource.k8s.io API or
has no DeviceClass ``gpu.nvidia.com`` (the driver is not deployed), a node whose runtime cannot hand CDI devices to a
container (the kubelet passes a claim's CDI devices only in the CRI field CDIDevices since Kubernetes 1.31:
pkg/kubelet/cm/dra/manager.go), and a node with running pods that hold its GPUs (they would keep GPUs the other side
hands out again): drain it first (``gpu_node_maintenance``) or set ``allow_busy``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import K8sError, OptionError
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.client import WaitTimeout
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.objects import quantity
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import KubegpuError
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import constants as nv
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.dra import matrix

FIELD_MANAGER = "kubegpu.cluster/dra-migration"
TO_DRA = "dra"
TO_DEVICE_PLUGIN = "device_plugin"
KINDS = ("device_plugin", "dra", "both", "none")
TERMINAL_PHASES = ("Succeeded", "Failed")


# --------------------------------------------------------------------------------------------- pure part

def device_plugin_resources(node):
    """``{name: allocatable}`` of the node's ``nvidia.com/*`` device-plugin resources (whole GPUs, shared replicas,
    MIG devices), zeros included."""
    allocatable = ((node.get("status") or {}).get("allocatable") or {})
    return dict((name, quantity(value)) for name, value in allocatable.items()
                if name.startswith(nv.RESOURCE_PREFIX + "/"))


def node_capacity(node):
    return quantity(((node.get("status") or {}).get("capacity") or {}).get(nv.RESOURCE_GPU, 0))


def kind_of(node, devices):
    """What the node is for GPU allocation (see the module's description)."""
    plugin = any(v > 0 for v in device_plugin_resources(node).values())
    if plugin and devices:
        return "both"
    return "device_plugin" if plugin else ("dra" if devices else "none")


_RUNTIME = re.compile(r"^([a-z0-9.-]+)://v?(\d+)\.(\d+)(?:\.(\d+))?")


def runtime_refusal(runtime_version):
    """Why a node whose ``status.nodeInfo.containerRuntimeVersion`` is ``runtime_version`` cannot run DRA GPU
    containers, or None. The kubelet hands a claim's CDI devices to the runtime only in the CRI field CDIDevices
    (Kubernetes 1.31 and later): containerd reads it from 1.7 (with ``enable_cdi``; on by default from 2.0), CRI-O
    does; cri-dockerd (which reports ``docker://``) does not."""
    match = _RUNTIME.match(runtime_version or "")
    if not match:
        return None  # an unknown runtime: the host preparation checks it on the node
    name, major, minor = match.group(1), int(match.group(2)), int(match.group(3))
    if name == "docker":
        return ("its runtime is %s: cri-dockerd does not pass CDI devices to containers, so a DRA claim's GPU never "
                "reaches the container; move the node to containerd >= 1.7 or CRI-O first" % runtime_version)
    if name == "containerd" and (major, minor) < (1, 7):
        return ("its runtime is %s: containerd reads the kubelet's CDI devices from 1.7 on (with enable_cdi), so a DRA "
                "claim's GPU never reaches the container; upgrade containerd to 1.7 or later (2.x has CDI on by "
                "default) and run the dra role's host preparation" % runtime_version)
    return None


def labels_for(to, node):
    """The labels this module's field manager applies to move ``node`` ``to`` a side. The way back leaves the
    ``dra-driver`` label out, so that server-side apply removes it where only this module set it; where someone else
    set it to true too (an admin, the GPU Operator), it is set to false instead, or the node would run both plugins."""
    if to == TO_DRA:
        return {nv.LABEL_DEPLOY_DEVICE_PLUGIN: "false", nv.LABEL_DEPLOY_DRA_DRIVER: nv.DEPLOY_LABEL_ON}
    wanted = {nv.LABEL_DEPLOY_DEVICE_PLUGIN: nv.DEPLOY_LABEL_ON}
    labels = ((node or {}).get("metadata") or {}).get("labels") or {}
    value, owned = labels.get(nv.LABEL_DEPLOY_DRA_DRIVER), owners(node, nv.LABEL_DEPLOY_DRA_DRIVER)
    if (value == nv.DEPLOY_LABEL_ON and owned - {FIELD_MANAGER}) or (value == "false" and FIELD_MANAGER in owned):
        wanted[nv.LABEL_DEPLOY_DRA_DRIVER] = "false"  # ours from an earlier way back: kept, so a rerun changes nothing
    return wanted


def owners(node, key):
    """The field managers that own label ``key`` of ``node`` (``metadata.managedFields``); a label set with no
    managed fields recorded counts as someone else's."""
    found = set()
    for entry in ((node or {}).get("metadata") or {}).get("managedFields") or []:
        fields = ((entry.get("fieldsV1") or {}).get("f:metadata") or {}).get("f:labels") or {}
        if "f:" + key in fields:
            found.add(entry.get("manager"))
    labels = ((node or {}).get("metadata") or {}).get("labels") or {}
    return found or ({None} if key in labels else set())


def label_changes(to, node):
    """``{key: (before, after)}`` of the labels the move changes on ``node`` (after None: removed)."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    wanted = labels_for(to, node)
    changes = dict((k, (labels.get(k), v)) for k, v in wanted.items() if labels.get(k) != v)
    if to == TO_DEVICE_PLUGIN and nv.LABEL_DEPLOY_DRA_DRIVER in labels and nv.LABEL_DEPLOY_DRA_DRIVER not in wanted \
            and owners(node, nv.LABEL_DEPLOY_DRA_DRIVER) == {FIELD_MANAGER}:
        changes[nv.LABEL_DEPLOY_DRA_DRIVER] = (labels[nv.LABEL_DEPLOY_DRA_DRIVER], None)
    return changes


def arrived(to, node, devices):
    """Whether ``node`` (with ``devices`` in its ResourceSlices) has reached the side ``to``; and what is missing."""
    plugin = dict((k, v) for k, v in device_plugin_resources(node).items() if v > 0)
    if to == TO_DRA:
        want = matrix.expected_gpus(node)
        missing = []
        if plugin:
            missing.append("it still advertises %s" % ", ".join("%s=%d" % kv for kv in sorted(plugin.items())))
        if not devices or (want is not None and len(devices) < want):
            missing.append("its ResourceSlices list %d of %s GPUs" % (len(devices), want if want is not None else "its"))
        return not missing, "; ".join(missing)
    missing = []
    if devices:
        missing.append("ResourceSlices of %s still list %s" % (nv.DRA_DRIVER_NAME, ", ".join(devices)))
    if not plugin:
        missing.append("it advertises no %s/* resource yet" % nv.RESOURCE_PREFIX)
    return not missing, "; ".join(missing)


def gpu_pods(pods, node_name):
    """``namespace/name`` of the running pods on the node that hold a GPU: an ``nvidia.com/*`` request, or a
    ResourceClaim (its allocation is checked by the caller)."""
    held = []
    for pod in pods:
        spec = pod.get("spec") or {}
        if spec.get("nodeName") != node_name or (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
            continue
        if any(owner.get("kind") == "DaemonSet" for owner in (pod.get("metadata") or {}).get("ownerReferences") or []):
            continue  # operands (the plugins themselves, GFD, exporters) follow their deploy labels
        wants = False
        for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
            resources = container.get("resources") or {}
            names = list((resources.get("limits") or {})) + list((resources.get("requests") or {}))
            if any(n.startswith(nv.RESOURCE_PREFIX + "/") for n in names) or resources.get("claims"):
                wants = True
        if wants or spec.get("resourceClaims"):
            held.append("%s/%s" % (pod["metadata"].get("namespace"), pod["metadata"]["name"]))
    return sorted(held)


# --------------------------------------------------------------------------------------------- the cluster part

def served_resource_version(api):
    """The newest ``resource.k8s.io/<version>`` the API server serves (discovery), as NVIDIA's chart picks it
    (templates/_helpers.tpl resourceApiVersion), or None."""
    served = api.served_versions(nv.DRA_API_GROUP)
    for version in nv.DRA_API_VERSIONS:
        if version in served:
            return "%s/%s" % (nv.DRA_API_GROUP, version)
    return None


def list_slices(api, version, node_name=None):
    selector = "spec.driver=%s" % nv.DRA_DRIVER_NAME
    if node_name:
        selector += ",spec.nodeName=%s" % node_name
    return api.list(version, "ResourceSlice", field_selector=selector)


class Migration(object):
    """One run: ``nodes`` to the side ``to``."""

    def __init__(self, api, params):
        self.api = api
        self.params = params
        self.to = params["to"]
        self.names = list(dict.fromkeys(params["nodes"]))

    def _nodes(self):
        found = dict((n["metadata"]["name"], n) for n in self.api.list("v1", "Node"))
        missing = [n for n in self.names if n not in found]
        if missing:
            raise OptionError("nodes", "no such node: %s; name the nodes as 'kubectl get nodes' does"
                              % ", ".join(missing))
        return found

    def precheck(self, nodes, slices, version):
        """Refuse, before any change, what cannot work (see the module's description)."""
        if version is None:
            try:  # the version matrix's own refusal: too old, the gates to turn on, or v1 turned off
                matrix.api_version(matrix.minor_of(self.api.server_version()), [])
            except KubegpuError as exc:
                raise K8sError("cannot move nodes between the device plugin and DRA: %s" % exc)
        if self.to == TO_DRA:
            if self.api.get(version, "DeviceClass", nv.DRA_DEVICE_CLASS_GPU) is None:
                raise K8sError("DeviceClass %s is missing: NVIDIA's DRA driver is not deployed; deploy it first "
                               "(kubegpu.cluster.dra_driver_deploy, or the kubegpu.cluster.dra role)"
                               % nv.DRA_DEVICE_CLASS_GPU)
            refusals = []
            for name in self.names:
                why = runtime_refusal(((nodes[name].get("status") or {}).get("nodeInfo") or {}).get(
                    "containerRuntimeVersion"))
                if why:
                    refusals.append("node %s: %s" % (name, why))
            if refusals:
                raise K8sError("cannot move to DRA: " + " | ".join(refusals))
        if not self.params.get("allow_busy"):
            pods = self.api.list("v1", "Pod")
            busy = []
            for name in self.names:
                if label_changes(self.to, nodes[name]):  # only a node that would change
                    held = gpu_pods(pods, name)
                    if held:
                        busy.append("node %s: %s" % (name, ", ".join(held)))
            if busy:
                raise K8sError("pods hold GPUs on the nodes to move (they would keep a GPU the other side hands out "
                               "again): %s; drain the nodes first (kubegpu.cluster.gpu_node_maintenance) or set "
                               "allow_busy" % " | ".join(busy))

    def _apply(self, node, dry_run):
        name = node["metadata"]["name"]
        body = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": labels_for(self.to, node)}}
        self.api.apply(body, dry_run=dry_run)

    def status(self, nodes, slices):
        out = {}
        for name in self.names:
            node = nodes[name]
            devices = matrix.slice_gpus(slices, name)
            done, missing = arrived(self.to, node, devices)
            out[name] = {"kind": kind_of(node, devices), "allocatable": device_plugin_resources(node),
                         "capacity_gpu": node_capacity(node), "slice_devices": devices,
                         "expected_gpus": matrix.expected_gpus(node), "arrived": done, "missing": missing}
        return out

    def wait(self, version, timeout):
        """Watch nodes, then ResourceSlices, until every node arrived; bounded by ``timeout`` in all."""
        clock = self.api.clock
        deadline = clock() + timeout
        slices_now = {"items": list_slices(self.api, version)}
        names = set(self.names)

        def nodes_done(objects):
            # the node side: device-plugin resources gone (to DRA) or back (to the device plugin)
            for name in names:
                node = objects.get(name)
                if node is None:
                    return False
                plugin = any(v > 0 for v in device_plugin_resources(node).values())
                if plugin == (self.to == TO_DRA):
                    return False
            return True

        def slices_done(objects):
            items = list(objects.values())
            for name in names:
                devices = matrix.slice_gpus(items, name)
                if self.to == TO_DRA:
                    want = matrix.expected_gpus(nodes_seen.get(name) or {})
                    if not devices or (want is not None and len(devices) < want):
                        return False
                elif devices:
                    return False
            return True

        nodes_seen = {}
        try:
            nodes_seen = self.api.wait("v1", "Node", nodes_done, max(0.0, deadline - clock()))
            slices_now["items"] = list(self.api.wait(
                version, "ResourceSlice", slices_done, max(0.0, deadline - clock()),
                field_selector="spec.driver=%s" % nv.DRA_DRIVER_NAME).values())
        except WaitTimeout:
            pass
        return nodes_seen

    def run(self, check_mode):
        version = served_resource_version(self.api)
        nodes = self._nodes()
        slices = list_slices(self.api, version) if version else []
        self.precheck(nodes, slices, version)
        before = self.status(nodes, slices)
        changes = dict((n, label_changes(self.to, nodes[n])) for n in self.names)
        moved = sorted(n for n, c in changes.items() if c)
        result = {"to": self.to, "moved": moved, "changed": bool(moved), "resource_api": version,
                  "diff": {"before": dict((n, dict((k, b) for k, (b, _a) in c.items())) for n, c in changes.items() if c),
                           "after": dict((n, dict((k, a) for k, (_b, a) in c.items())) for n, c in changes.items() if c)}}
        for name in moved:
            self._apply(nodes[name], dry_run=check_mode)
        if check_mode or not self.params.get("wait"):
            result["nodes"] = before
            return result
        if not all(s["arrived"] for s in before.values()) or moved:
            self.wait(version, self.params["wait_timeout"])
            nodes = self._nodes()
            slices = list_slices(self.api, version)
        result["nodes"] = self.status(nodes, slices)
        late = dict((n, s["missing"]) for n, s in result["nodes"].items() if not s["arrived"])
        if late:
            side = "DRA" if self.to == TO_DRA else "the device plugin"
            result["failed_msg"] = (
                "not on %s after %ss: %s. The labels are set, so a rerun waits again; see the node's %s pod "
                "(kubectl -n <namespace> get pods -o wide --field-selector spec.nodeName=<node>) and its log"
                % (side, self.params["wait_timeout"], " | ".join("node %s: %s" % kv for kv in sorted(late.items())),
                   "DRA kubelet plugin" if self.to == TO_DRA else "device plugin"))
        return result


def run(params, check_mode=False, api=None):
    if api is None:
        from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import client as k8s_client  # pylint: disable=import-outside-toplevel
        api = k8s_client.from_params(params, field_manager=FIELD_MANAGER)
    return Migration(api, params).run(check_mode)
