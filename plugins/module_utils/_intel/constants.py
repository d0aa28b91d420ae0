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
