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
# The sysfs driver directory of the module's PCI driver, under /sys/module/amdgpu (the path GetAMDGPUs globs).
MODULE_PCI_DRIVER = "drivers/pci:amdgpu"
# KFD, the compute interface ROCm uses: the plugin maps render nodes to KFD nodes through the topology
# (amdgpu.go GetNodeIdsFromTopology / renderNodeSetFromTopology read <kfd>/topology/nodes/*/properties).
KFD_PATH = "class/kfd/kfd"
KFD_TOPOLOGY_NODES = KFD_PATH + "/topology/nodes"
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
