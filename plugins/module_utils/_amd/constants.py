# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""Every AMD fact the collection's code uses, written once. One section per concern; the host's (PCI, sysfs, the
kernel driver) first, the cluster's (the ROCm device plugin, its node labeller) after it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# ===================================================================== the host (gpu_facts, the driver check)
VENDOR = "amd"
VENDOR_NAME = "AMD"
PCI_VENDOR_ID = 0x1002
# The kernel driver the ROCm device plugin needs (ROCm/k8s-device-plugin internal/pkg/amdgpu/amdgpu.go GetAMDGPUs:
# it lists the GPUs under /sys/module/amdgpu/drivers/pci:amdgpu/<address> and gives up when /sys/module/amdgpu/drivers
# is missing).
KERNEL_MODULE = "amdgpu"
# The PCI classes (class << 8 | subclass) of AMD GPUs: VGA (0x0300, Radeon), 3D (0x0302), other display controller
# (0x0380: Instinct MI100/MI200, lspci's "Display controller") and processing accelerator (0x1200: Instinct MI300).
# NFD's PCI source labels the same families by default (deviceClassWhitelist 03, 12).
PCI_CLASSES = (0x0300, 0x0302, 0x0380, 0x1200)
# The sysfs driver directory of the module's PCI driver, under /sys/module/amdgpu (the path GetAMDGPUs globs).
MODULE_PCI_DRIVER = "drivers/pci:amdgpu"
# KFD, the compute interface ROCm uses: the plugin maps render nodes to KFD nodes through the topology
# (amdgpu.go GetNodeIdsFromTopology / renderNodeSetFromTopology read <kfd>/topology/nodes/*/properties).
# Relative to the sysfs root (the readers take the root, so tests give them a tree); KFD_PATH below is the class
# folder the plugin itself checks.
SYSFS_KFD = "class/kfd/kfd"
SYSFS_KFD_TOPOLOGY_NODES = SYSFS_KFD + "/topology/nodes"
# VRAM size in bytes, an amdgpu attribute of the PCI device (Linux drivers/gpu/drm/amd/amdgpu/amdgpu_vram_mgr.c:
# mem_info_vram_total), read as /sys/class/drm/cardN/device/mem_info_vram_total.
VRAM_TOTAL_FILE = "mem_info_vram_total"
# The KFD node properties gpu_facts reports (Linux drivers/gpu/drm/amd/amdkfd/kfd_topology.c node_show: one
# "<name> <value>" line each). drm_render_minor ties a node to its renderD<minor> (what the plugin keys on).
KFD_PROPERTIES = ("simd_count", "simd_per_cu", "array_count", "cu_per_simd_array", "simd_arrays_per_engine",
                  "gfx_target_version", "num_xcc", "drm_render_minor", "location_id", "domain", "device_id",
                  "vendor_id", "family_id", "unique_id", "local_mem_size")

# Product names by PCI device id (pciutils' pci.ids, vendor 1002; the ids Linux amdgpu_drv.c binds), for the GPUs
# the ROCm device plugin is used with. A device id not listed gives the name null.
DEVICE_NAMES = {
    0x66A0: "AMD Radeon Instinct MI50/MI60",
    0x66A1: "AMD Radeon Instinct MI50 32GB",
    0x738C: "AMD Instinct MI100",
    0x7408: "AMD Instinct MI250X",
    0x740C: "AMD Instinct MI250X/MI250",
    0x740F: "AMD Instinct MI210",
    0x74A0: "AMD Instinct MI300A",
    0x74A1: "AMD Instinct MI300X",
    0x74A5: "AMD Instinct MI325X",
    0x7448: "AMD Radeon Pro W7900",
    0x744C: "AMD Radeon RX 7900 XT/7900 XTX",
}


# --- The ROCm device plugin and its node labeller (ROCm/k8s-device-plugin), cluster side -------------------------
# The release: the device plugin image tag and the labeller's ("labeller-<release>"), as the project's Helm chart
# pairs them (helm/amd-gpu/values.yaml dp.image.tag / lbl.image.tag). 1.31.0.10: the release the AMD GPU operator's
# DeviceConfig examples deploy (devicePluginImage / nodeLabellerImage), whose plugin takes -resource_naming_strategy
# (cmd/k8s-device-plugin/main.go).
DEVICE_PLUGIN_VERSION = "1.31.0.10"
DEVICE_PLUGIN_IMAGE_REPOSITORY = "docker.io/rocm/k8s-device-plugin"
LABELLER_TAG_PREFIX = "labeller-"  # helm/amd-gpu/values.yaml lbl.image.tag: "labeller-<release>"

# The plugin's resources: "amd.com/<name>", name "gpu", or with the mixed strategy on partitioned GPUs the partition
# type "<compute>_<memory>" in lower case (cmd/k8s-device-plugin/main.go getResourceList; the dpm manager's
# "amd.com" namespace in internal/pkg/plugin).
RESOURCE_PREFIX = "amd.com"
RESOURCE_GPU = RESOURCE_PREFIX + "/gpu"
# cmd/k8s-device-plugin/main.go: flag -resource_naming_strategy, default "single"; ParseStrategy refuses anything else
RESOURCE_NAMING_STRATEGIES = ("single", "mixed")
DEFAULT_RESOURCE_NAMING_STRATEGY = "single"
PLUGIN_PROGRAM = "./k8s-device-plugin"  # the image's CMD (Dockerfile: WORKDIR /root/, CMD ["./k8s-device-plugin", ...])
PLUGIN_LOG_ARGS = ("-logtostderr=true", "-stderrthreshold=INFO", "-v=5")  # the rest of the image's CMD
# The plugin registers nothing where /sys/class/kfd is missing (main.go: "/sys/class/kfd only exists if ROCm
# kernel/driver is installed").
KFD_PATH = "/sys/class/kfd"

# The node labeller (cmd/k8s-node-labeller): its program and the label flags the project's manifests pass
# (k8s-ds-amdgpu-labeller.yaml, helm/amd-gpu/templates/labeller.yaml args).
LABELLER_PROGRAM = "./k8s-node-labeller"
LABELLER_WORKDIR = "/root"
LABELLER_FLAGS = ("vram", "cu-count", "simd-count", "device-id", "family", "product-name", "driver-version",
                  "driver-src-version", "firmware")  # main.go labelGenerators: every flag it knows
DEFAULT_LABELLER_FLAGS = ("vram", "cu-count", "simd-count", "device-id", "family")
# The labeller's Reconcile (cmd/k8s-node-labeller/controller.go) deletes every node label under these prefixes, then
# writes its own: they are the labeller's, and our state=absent removes them with it.
LABELLER_LABEL_PREFIXES = ("amd.com/", "beta.amd.com/")
# It watches, gets, lists and updates Node objects and nothing else (controller-runtime cache + client.Update;
# helm/amd-gpu/templates/rbac.yaml, cmd/k8s-node-labeller/README.md "watch, get, list, update").
LABELLER_NODE_VERBS = ("get", "list", "watch", "update")

# --- The deployment
DEVICE_PLUGIN_NAMESPACE = "amd-gpu-device-plugin"
APP_NAME = "amd-gpu-device-plugin"
PLUGIN_NAME = "amdgpu-device-plugin-daemonset"  # k8s-ds-amdgpu-dp.yaml
LABELLER_NAME = "amdgpu-labeller-daemonset"  # k8s-ds-amdgpu-labeller.yaml
LABELLER_SERVICE_ACCOUNT = "amd-gpu-node-labeller"
KUBELET_DEVICE_PLUGINS = "/var/lib/kubelet/device-plugins"
# The node selector: the label AMD's own NFD rule writes on nodes with an AMD GPU (the AMD GPU operator's
# NodeFeatureRule "amd-gpu", and its DeviceConfig selector). Not under amd.com/: the labeller deletes those.
LABEL_GPU = "feature.node.kubernetes.io/amd-gpu"
DEFAULT_NODE_SELECTOR = {LABEL_GPU: "true"}
# The project's manifests tolerate CriticalAddonsOnly (k8s-ds-amdgpu-dp.yaml, helm values tolerations); and amd.com/gpu
# NoSchedule, the taint one puts on GPU nodes, so that the plugin runs where only GPU pods may.
DEFAULT_TOLERATIONS = [{"key": "CriticalAddonsOnly", "operator": "Exists"},
                       {"key": RESOURCE_GPU, "operator": "Exists", "effect": "NoSchedule"}]
# Our node labels, under a field manager of their own, so that AMD's labels never touch another vendor's.
LABELS_FIELD_MANAGER = "kubegpu.cluster/labels-amd"
PLUGIN_COMPONENT = "device-plugin"
LABELLER_COMPONENT = "node-labeller"


def default_image(version=DEVICE_PLUGIN_VERSION):
    """The plugin image of ``version``."""
    return "%s:%s" % (DEVICE_PLUGIN_IMAGE_REPOSITORY, version)


def default_labeller_image(version=DEVICE_PLUGIN_VERSION):
    """The labeller image of ``version`` (same repository, tag ``labeller-<version>``)."""
    return "%s:%s%s" % (DEVICE_PLUGIN_IMAGE_REPOSITORY, LABELLER_TAG_PREFIX, version)


# --- The proof workload (kubegpu.cluster.gpu_proof vendor=amd): a ROCm image whose rocminfo lists every HSA agent the
# container was given; a GPU agent's name is its gfx target (gfx90a on an MI210), which a CPU agent never shows.
# ROCm's developer images carry rocminfo (the rocm-dev meta-package); the device plugin hands /dev/kfd and the GPU's
# /dev/dri nodes to the container (internal/pkg/plugin/plugin.go Allocate), so no runtime hook or privilege is needed.
PROOF_IMAGE = "docker.io/rocm/dev-ubuntu-22.04:6.2"
PROOF_COMMAND = ["rocminfo"]
PROOF_PATTERN = "gfx"
PROOF_TOLERATIONS = [{"key": RESOURCE_GPU, "operator": "Exists", "effect": "NoSchedule"}]
