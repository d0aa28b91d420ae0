# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""Every Intel fact the collection's code uses, written once. One section per concern; the host's (PCI, sysfs, the
kernel drivers) first, the cluster's (Intel's GPU device plugin) after it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# ===================================================================== the host (gpu_facts, the driver check)
VENDOR = "intel"
VENDOR_NAME = "Intel"
PCI_VENDOR_ID = 0x8086
# The kernel drivers Intel's GPU plugin serves, one resource each (intel-device-plugins-for-kubernetes
# cmd/gpu_plugin/gpu_plugin.go: deviceTypeI915 "i915", deviceTypeXe "xe", deviceTypeDefault i915; device_props.go
# takes the driver bound to each card, i915 when it cannot read one).
KERNEL_MODULES = ("i915", "xe")
DEFAULT_KERNEL_MODULE = "i915"
# The PCI classes (class << 8 | subclass) of Intel GPUs: VGA (0x0300: integrated and Arc) and other display controller
# (0x0380: Data Center GPU Flex and Max, lspci's "Display controller"). Not 0x1200: Intel's processing accelerators
# on that class are NPUs, not GPUs.
PCI_CLASSES = (0x0300, 0x0302, 0x0380)
# Local (device) memory per tile in bytes, where i915 publishes it: /sys/class/drm/cardN/lmem_total_bytes (the
# plugin's labeler, cmd/internal/labeler/labeler.go legacyFallback, multiplies it by the tile count).
LMEM_TOTAL_FILE = "lmem_total_bytes"
# Tiles: i915 has cardN/gt/gt<n>, xe has cardN/device/tile<n> (labeler.go GetTileCount).
I915_TILE_GLOB = "gt/gt*"
XE_TILE_GLOB = "device/tile?"
# xe's VRAM per tile in bytes (Linux drivers/gpu/drm/xe/xe_tile_sysfs.c / xe_vram.c: tile<n>/physical_vram_size_bytes).
XE_TILE_VRAM_FILE = "physical_vram_size_bytes"

# Product names by PCI device id (pciutils' pci.ids, vendor 8086; Linux include/drm/intel/pciids.h), for the data
# centre and discrete GPUs the plugin is used with. A device id not listed gives the name null.
DEVICE_NAMES = {
    0x56C0: "Intel Data Center GPU Flex 170",
    0x56C1: "Intel Data Center GPU Flex 140",
    0x0BD5: "Intel Data Center GPU Max 1550",
    0x0BD6: "Intel Data Center GPU Max 1550",
    0x0BDA: "Intel Data Center GPU Max 1100",
    0x56A0: "Intel Arc A770",
    0x56A1: "Intel Arc A750",
    0x56A5: "Intel Arc A380",
    0xE20B: "Intel Arc B580",
    0xE20C: "Intel Arc B570",
}


# --- Intel's GPU device plugin (intel/intel-device-plugins-for-kubernetes), cluster side ---------------------------
DEVICE_PLUGIN_VERSION = "0.34.0"
DEVICE_PLUGIN_IMAGE_REPOSITORY = "intel/intel-gpu-plugin"  # deployments/gpu_plugin/base/intel-gpu-plugin.yaml

# cmd/gpu_plugin/gpu_plugin.go: namespace "gpu.intel.com", one resource per kernel driver of the cards (deviceTypeI915
# "i915", deviceTypeXe "xe"), each card listed shared-dev-num times ("card0-0", "card0-1", ...); with
# -enable-monitoring also "<driver>_monitoring" (monitorSuffix), one device "all" per driver.
RESOURCE_PREFIX = "gpu.intel.com"
DRIVERS = ("i915", "xe")
MONITOR_SUFFIX = "_monitoring"
# gpu_plugin.go main(): -shared-dev-num default 1, below 1 the plugin exits; -allocation-policy one of these, default
# "none", anything else exits; -enable-monitoring default false.
DEFAULT_SHARED_DEV_NUM = 1
ALLOCATION_POLICIES = ("none", "balanced", "packed")
DEFAULT_ALLOCATION_POLICY = "none"
PLUGIN_CONTAINER = "intel-gpu-plugin"

# --- The NFD rule (deployments/nfd/overlays/node-feature-rules/node-feature-rules.yaml, rule "intel.gpu"): an Intel
# PCI device of class 0300 or 0380 with the i915 or xe module loaded or enabled labels the node
# intel.feature.node.kubernetes.io/gpu=true, which the plugin's NFD overlays select on
# (deployments/gpu_plugin/overlays/monitoring_shared-dev_nfd/add-nodeselector-intel-gpu.yaml).
LABEL_GPU = "intel.feature.node.kubernetes.io/gpu"
NFD_RULE_NAME = "intel-dp-gpu"
NFD_RULE = {
    "name": "intel.gpu",
    "labels": {LABEL_GPU: "true"},
    "matchFeatures": [{"feature": "pci.device", "matchExpressions": {
        "vendor": {"op": "In", "value": ["8086"]}, "class": {"op": "In", "value": ["0300", "0380"]}}}],
    "matchAny": [{"matchFeatures": [{"feature": "kernel.%s" % source, "matchExpressions": {module: {"op": "Exists"}}}]}
                 for module in DRIVERS for source in ("loadedmodule", "enabledmodule")],
}

# --- The deployment
DEVICE_PLUGIN_NAMESPACE = "intel-gpu-plugin"
APP_NAME = "intel-gpu-plugin"
PLUGIN_NAME = "intel-gpu-plugin"  # deployments/gpu_plugin/base/intel-gpu-plugin.yaml
KUBELET_DEVICE_PLUGINS = "/var/lib/kubelet/device-plugins"
SYSFS_DRM = "/sys/class/drm"  # what the plugin scans (gpu_plugin.go sysfsDrmDirectory), mounted read-only
DEVFS_DRI = "/dev/dri"  # gpu_plugin.go devfsDriDirectory, mounted read-only
DEFAULT_NODE_SELECTOR = {LABEL_GPU: "true"}
DEFAULT_TOLERATIONS = [{"key": "CriticalAddonsOnly", "operator": "Exists"}]
LABELS_FIELD_MANAGER = "kubegpu.cluster/labels-intel"
PLUGIN_COMPONENT = "device-plugin"


def default_image(version=DEVICE_PLUGIN_VERSION):
    """The plugin image of ``version``."""
    return "%s:%s" % (DEVICE_PLUGIN_IMAGE_REPOSITORY, version)


# --- The proof workload (kubegpu.cluster.gpu_proof vendor=intel): Intel's OpenCL demo image (demo/intel-opencl-icd,
# published with each release of the plugins) running clinfo, as demo/intelgpu-job.yaml does; clinfo names each
# device it finds ("Device Name"), which it prints only when the GPU the plugin handed over (/dev/dri) works.
PROOF_IMAGE = "docker.io/intel/intel-opencl-icd:" + DEVICE_PLUGIN_VERSION
PROOF_COMMAND = ["clinfo"]
PROOF_PATTERN = "Device Name"
PROOF_TOLERATIONS = []
