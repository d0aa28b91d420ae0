# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""A host's Intel GPUs as the i915 and xe kernel drivers show them in sysfs, without any Intel library: the PCI
devices, their DRM nodes, the driver bound to each, tiles and local memory where sysfs has them, and the state of the
i915 and xe modules.

Every reader takes the sysfs root (``/sys``) and the /proc/modules path, so tests give it a tree of their own."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import os

from ansible_collections.kubegpu.cluster.plugins.module_utils import _host
from ansible_collections.kubegpu.cluster.plugins.module_utils._intel import constants as C
from ansible_collections.kubegpu.cluster.plugins.module_utils._intel import driver

MIB = 1024 * 1024


def tiles(card_path):
    """The tile count of one card as Intel's labeler counts it (labeler.go GetTileCount): i915's gt/gt* plus xe's
    device/tile?, at least 1."""
    found = glob.glob(os.path.join(card_path, C.I915_TILE_GLOB)) + glob.glob(os.path.join(card_path, C.XE_TILE_GLOB))
    return len(found) or 1


def memory_bytes(card_path):
    """Local memory in bytes: xe's tile<n>/physical_vram_size_bytes summed over tiles, else i915's lmem_total_bytes
    times the tile count (labeler.go legacyFallback); None where sysfs has neither (integrated GPUs, mainline i915)."""
    xe = [_host.read_int(os.path.join(path, C.XE_TILE_VRAM_FILE))
          for path in sorted(glob.glob(os.path.join(card_path, C.XE_TILE_GLOB)))]
    xe = [value for value in xe if value is not None]
    if xe:
        return sum(xe)
    lmem = _host.read_int(os.path.join(card_path, C.LMEM_TOTAL_FILE))
    return None if lmem is None else lmem * tiles(card_path)


def driver_state(sys_root=_host.SYS_ROOT, proc_modules=_host.PROC_MODULES_PATH):
    """``{name: {module, loaded, version}}`` for i915 and xe."""
    return dict((name, _host.kernel_module(name, sys_root, proc_modules)) for name in C.KERNEL_MODULES)


def devices(pci, sys_root=_host.SYS_ROOT):
    """One entry per Intel GPU of ``pci`` (``_host.pci_gpus`` entries of vendor 0x8086): ``address``, ``device_id``,
    ``subsystem_id``, ``name`` (from the device-id table, else None), ``driver`` (the bound kernel driver: i915, xe,
    vfio-pci, None), ``card``, ``render``, ``tiles`` and ``memory_total_mib`` (None where sysfs has no size)."""
    drm = _host.drm_nodes(sys_root)
    found = []
    for entry in pci:
        nodes_of = drm.get(entry["address"], {})
        card = nodes_of.get("card")
        card_path = os.path.join(sys_root, "class", "drm", card) if card else None
        memory = memory_bytes(card_path) if card_path else None
        try:
            device_id = int(entry.get("device_id") or "", 16)
        except ValueError:
            device_id = None
        found.append({
            "address": entry["address"],
            "device_id": entry.get("device_id"),
            "subsystem_id": entry.get("subsystem_id"),
            "name": C.DEVICE_NAMES.get(device_id),
            "driver": entry.get("driver"),
            "memory_total_mib": None if memory is None else memory // MIB,
            "tiles": tiles(card_path) if card_path else None,
            "card": card,
            "render": nodes_of.get("render"),
        })
    return found


def gather(pci, sys_root=_host.SYS_ROOT, proc_modules=_host.PROC_MODULES_PATH):
    """The ``gpu.intel`` fact: ``{count, devices, driver, modules, status}`` from the Intel entries of ``pci`` and the
    host's sysfs (documented in the gpu_facts module). ``driver`` is the module the GPUs use: the one bound to them,
    else the one loaded, else i915 (the plugin's default)."""
    mine = [entry for entry in pci if entry.get("vendor_id") == "0x%04x" % C.PCI_VENDOR_ID]
    modules = driver_state(sys_root, proc_modules)
    found = devices(mine, sys_root)
    bound = [d["driver"] for d in found if d["driver"] in C.KERNEL_MODULES]
    loaded = [name for name in C.KERNEL_MODULES if modules[name]["loaded"]]
    name = (bound or loaded or [C.DEFAULT_KERNEL_MODULE])[0]
    fact = {"count": len(mine), "devices": found, "driver": dict(modules[name]),
            "modules": dict((n, modules[n]["loaded"]) for n in C.KERNEL_MODULES)}
    fact["status"] = driver.status(fact)
    return fact
