# SPDX-License-Identifier: GPL-3.0-or-later
"""NVIDIA's DRA kubelet plugin (kubernetes-sigs/dra-driver-nvidia-gpu, the `gpus` container) on kwok nodes.

While a pod running ``gpu-kubelet-plugin`` from the DRA driver's image is Running on kwok node X, X's GPUs are
published in one ResourceSlice of the driver ``gpu.nvidia.com`` (pool X, the node as owner), as the plugin publishes
them through the kubelet-plugin helper: one device per full GPU named ``gpu-<minor>`` with the attributes of
cmd/gpu-kubelet-plugin/deviceinfo.go (GpuInfo.Attributes: type, uuid, productName, brand, architecture,
cudaComputeCapability, driverVersion and cudaDriverVersion as semantic versions, resource.kubernetes.io/pciBusID) and
the capacity ``memory`` (partitions.go fullGpuCapacity), the strings as go-nvlib names NVML's enums
(pkg/nvlib/device/device.go GetBrandAsString, GetArchitectureAsString) and the versions as Masterminds semver prints
them (nvlib.go: the CUDA driver version as "<major>.<minor>"). When the pod goes, the slice goes (the kubelet wipes a
departed plugin's slices 30 s later: pkg/kubelet/cm/dra/manager.go defaultWipingDelay; here at once).

Only on kwok nodes: a kubelet node runs the stand-in plugin for real (sandbox/standins), which publishes its own
slices. Not simulated: MIG devices (a GPU in MIG mode is left out), NodePrepareResources (a kwok pod runs nothing),
health, the optional pcieRoot/numaNode/addressingMode attributes.
"""

from __future__ import annotations

import json
import logging
import posixpath

from kubernetes import client
from kubernetes.client.rest import ApiException

from .agents import NodeAgents, kwok_node
from .watcher import read_node_profile

LOG = logging.getLogger("devsim.dra")

DRIVER = "gpu.nvidia.com"  # plugins/module_utils/_nvidia/constants.py DRA_DRIVER_NAME
# The slice the simulator writes for a node: its own name and label, so that it never touches a slice someone else
# published (a test playing the plugin, the real plugin on a kubelet node)
SIMULATED_LABEL = {"sandbox.kubegpu.io/simulated": "dra-kubelet-plugin"}
SLICE_SUFFIX = "-" + DRIVER + "-devsim"
PROGRAM = "gpu-kubelet-plugin"
IMAGE_MARK = "dra-driver-nvidia-gpu"
STANDARD = "resource.kubernetes.io/"
ARCHITECTURES = {"kepler": "Kepler", "maxwell": "Maxwell", "pascal": "Pascal", "volta": "Volta", "turing": "Turing",
                 "ampere": "Ampere", "ada": "Ada Lovelace", "hopper": "Hopper", "blackwell": "Blackwell"}
BRANDS = {"unknown": "Unknown", "quadro": "Quadro", "tesla": "Tesla", "nvs": "NVS", "grid": "Grid",
          "geforce": "GeForce", "titan": "Titan", "nvidia_vapps": "NvidiaVApps", "nvidia_vpc": "NvidiaVPC",
          "nvidia_vcs": "NvidiaVCS", "nvidia_vws": "NvidiaVWS", "nvidia_cloud_gaming": "NvidiaCloudGaming",
          "quadro_rtx": "QuadroRTX", "nvidia_rtx": "NvidiaRTX", "nvidia": "Nvidia", "geforce_rtx": "GeForceRTX",
          "titan_rtx": "TitanRTX"}


def plugin_container(pod: dict):
    """The container of ``pod`` that runs NVIDIA's GPU kubelet plugin (the chart runs it through ``bash -c``)."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        words = " ".join(str(w) for w in (container.get("command") or []) + (container.get("args") or []))
        if IMAGE_MARK in (container.get("image") or "") and PROGRAM in words.replace("/", " ").split():
            return container
        if IMAGE_MARK in (container.get("image") or "") and any(posixpath.basename(w) == PROGRAM for w in words.split()):
            return container
    return None


def semver(text: str) -> str:
    """A version as Masterminds semver's MustParse(...).String() prints it: three numeric parts, leading zeros gone."""
    parts = [int(p) for p in str(text).split(".")[:3]]
    return ".".join(str(p) for p in parts + [0] * (3 - len(parts)))


def slice_devices(profile) -> list:
    """The devices NVIDIA's plugin publishes for the full GPUs of a profile (MIG mode on: left out)."""
    if not profile or (profile.get("vendor") or "nvidia") != "nvidia":
        return []
    cuda = int(profile.get("cuda_driver_version") or 0)
    devices = []
    for gpu in profile.get("devices") or []:
        if (gpu.get("mig") or {}).get("current"):
            continue
        attrs = {
            "type": {"string": "gpu"},
            "uuid": {"string": gpu["uuid"]},
            "productName": {"string": gpu["name"]},
            "brand": {"string": BRANDS.get(gpu.get("brand") or "unknown", "Unknown")},
            "architecture": {"string": ARCHITECTURES.get(gpu.get("architecture") or "", "Unknown")},
            "cudaComputeCapability": {"version": semver(gpu.get("compute_capability") or "0.0")},
            "driverVersion": {"version": semver(profile.get("driver_version") or "0")},
            "cudaDriverVersion": {"version": semver("%d.%d" % (cuda // 1000, (cuda % 1000) // 10))},
            STANDARD + "pciBusID": {"string": _bus_id(gpu.get("pci_bus_id") or "")},
        }
        device = {"name": "gpu-%d" % int(gpu.get("minor_number", len(devices))), "attributes": attrs}
        if gpu.get("memory_total_mib"):
            device["capacity"] = {"memory": {"value": "%dMi" % int(gpu["memory_total_mib"])}}
        devices.append(device)
    return devices


def _bus_id(nvml_bus_id: str) -> str:
    """NVML's ``00000000:18:00.0`` as the kubelet-plugin helper's pciBusID attribute (``0000:18:00.0``,
    k8s.io/dynamic-resource-allocation deviceattribute: the 4-digit domain form, lower case)."""
    text = nvml_bus_id.lower()
    if len(text.split(":")[0]) == 8:
        text = text[4:]
    return text


def resource_slice(node: dict, devices: list) -> dict:
    name = node["metadata"]["name"]
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": name + SLICE_SUFFIX,
                     "labels": dict(SIMULATED_LABEL),
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name,
                                          "uid": node["metadata"]["uid"], "controller": True}]},
        "spec": {"driver": DRIVER, "nodeName": name,
                 "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                 "devices": devices},
    }


class DraSimulator(NodeAgents):
    """Publishes and removes the ResourceSlices of NVIDIA's DRA kubelet plugin on kwok nodes."""

    what = "NVIDIA's DRA kubelet plugin"

    def __init__(self, simulator):
        super().__init__(simulator)
        self.resource = client.ResourceV1Api(simulator.api.api_client)

    def match(self, pod):
        return plugin_container(pod)

    def reconcile(self, name):
        node = self.nodes.get(name)
        if node is None or not kwok_node(node):
            return
        slice_name = name + SLICE_SUFFIX
        running = bool(self.pods_on(name))
        devices = slice_devices(read_node_profile(name, (node.get("metadata") or {}).get("annotations") or {},
                                                  self.sim.profiles_dir)) if running else []
        try:
            have = json.loads(self.resource.read_resource_slice(slice_name, _preload_content=False).data)
        except ApiException as exc:
            if exc.status != 404:
                raise
            have = None
        if have is not None and ((have.get("metadata") or {}).get("labels") or {}) != SIMULATED_LABEL:
            LOG.warning("node %s: ResourceSlice %s is not the simulator's; left alone", name, slice_name)
            return
        if not devices:
            if have is not None:
                LOG.info("node %s: DRA kubelet plugin gone; deleting ResourceSlice %s", name, slice_name)
                self.resource.delete_resource_slice(slice_name)
            return
        body = resource_slice(node, devices)
        if have is not None and (have.get("spec") or {}).get("devices") == devices:
            return
        LOG.info("node %s: DRA kubelet plugin runs; publishing %d devices (%s)", name, len(devices),
                 ", ".join(d["name"] for d in devices))
        if have is None:
            self.resource.create_resource_slice(body)
        else:
            body["metadata"]["resourceVersion"] = have["metadata"]["resourceVersion"]
            self.resource.replace_resource_slice(slice_name, body)
