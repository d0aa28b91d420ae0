# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""A host's AMD GPUs as the amdgpu kernel driver shows them in sysfs, without ROCm or any AMD library: the PCI
devices, their DRM nodes, VRAM, the KFD topology ROCm computes through, and the state of the amdgpu module.

Every reader takes the sysfs root (``/sys``) and the /proc/modules path, so tests give it a tree of their own."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.kubegpu.cluster.plugins.module_utils import _host
from ansible_collections.kubegpu.cluster.plugins.module_utils._amd import constants as C
from ansible_collections.kubegpu.cluster.plugins.module_utils._amd import driver

MIB = 1024 * 1024
_PROPERTY_RE = re.compile(r"^([A-Za-z0-9_]+)\s+(-?[0-9]+)$")


def gfx_target(version):
    """The LLVM target name (``gfx90a``) of a KFD ``gfx_target_version`` (``90010``: major 9, minor 0, stepping 10,
    the last two as one hex digit each: Linux amdkfd kfd_topology.c builds it as major*10000 + minor*100 + stepping,
    and ROCm's runtime names the target gfx<major><minor hex><stepping hex>); None for 0 or an unreadable value."""
    if not isinstance(version, int) or version <= 0:
        return None
    major, minor, stepping = version // 10000, (version // 100) % 100, version % 100
    return "gfx%d%x%x" % (major, minor, stepping)


def kfd_properties(path):
    """``{name: int}`` of one KFD topology ``properties`` file (one ``<name> <value>`` line each; amdgpu.go
    ParseTopologyProperties reads it the same way); {} when unreadable."""
    text = _host.read_text(path)
    found = {}
    for line in (text or "").splitlines():
        match = _PROPERTY_RE.match(line.strip())
        if match:
            found[match.group(1)] = int(match.group(2))
    return found


def kfd_nodes(sys_root=_host.SYS_ROOT):
    """The GPU nodes of the KFD topology: ``[{node, gpu_id, name, properties}]`` sorted by node number. CPU nodes
    (``gpu_id`` 0) are left out. None when /sys/class/kfd/kfd/topology/nodes is missing (KFD absent)."""
    base = os.path.join(sys_root, C.SYSFS_KFD_TOPOLOGY_NODES)
    try:
        names = [n for n in os.listdir(base) if n.isdigit()]
    except (IOError, OSError):
        return None
    nodes = []
    for name in sorted(names, key=int):
        gpu_id = _host.read_int(os.path.join(base, name, "gpu_id"))
        if not gpu_id:
            continue
        properties = kfd_properties(os.path.join(base, name, "properties"))
        nodes.append({"node": int(name), "gpu_id": gpu_id, "name": _host.read_text(os.path.join(base, name, "name")),
                      "properties": dict((k, v) for k, v in properties.items() if k in C.KFD_PROPERTIES)})
    return nodes


def _kfd_address(properties):
    """The PCI address of a KFD node from its ``domain`` and ``location_id`` ((bus << 8) | devfn, kfd_topology.c
    pci_dev_id of the device), or None."""
    location = properties.get("location_id")
    if location is None:
        return None
    domain = properties.get("domain", 0)
    return "%04x:%02x:%02x.%x" % (domain, (location >> 8) & 0xFF, (location >> 3) & 0x1F, location & 0x7)


def _match_kfd(device, nodes):
    """The KFD node of one GPU: the one whose drm_render_minor is its render node's minor (what the ROCm plugin
    uses, amdgpu.go GetNodeIdsFromTopology), else the one at its PCI address."""
    render = device.get("render")
    minor = int(render[len("renderD"):]) if render else None
    for node in nodes or []:
        if minor is not None and node["properties"].get("drm_render_minor") == minor:
            return node
    for node in nodes or []:
        if _kfd_address(node["properties"]) == device["address"]:
            return node
    return None


def driver_state(sys_root=_host.SYS_ROOT, proc_modules=_host.PROC_MODULES_PATH):
    """``{module, loaded, version, kfd, bound}``: the amdgpu module (loaded, its version where sysfs has one),
    whether KFD is there (/sys/class/kfd/kfd), and the PCI addresses bound to amdgpu
    (/sys/module/amdgpu/drivers/pci:amdgpu/<address>, the list the ROCm plugin takes its GPUs from)."""
    state = _host.kernel_module(C.KERNEL_MODULE, sys_root, proc_modules)
    state["kfd"] = os.path.isdir(os.path.join(sys_root, C.SYSFS_KFD))
    pci_driver = os.path.join(sys_root, "module", C.KERNEL_MODULE, C.MODULE_PCI_DRIVER)
    try:
        state["bound"] = sorted(n for n in os.listdir(pci_driver) if re.match(r"^[0-9a-fA-F]{4}:", n))
    except (IOError, OSError):
        state["bound"] = []
    return state


def devices(pci, sys_root=_host.SYS_ROOT, kfd=None):
    """One entry per AMD GPU of ``pci`` (``_host.pci_gpus`` entries of vendor 0x1002): ``address``, ``device_id``,
    ``subsystem_id``, ``name`` (from the device-id table, else None), ``driver`` (bound kernel driver),
    ``memory_total_mib`` (amdgpu's mem_info_vram_total; None without it), ``card``, ``render``, and from the KFD
    topology ``kfd_node``, ``gpu_id``, ``gfx_target_version``, ``gfx_target``, ``simd_count``, ``cu_count``,
    ``num_xcc`` (None where KFD has no node for the GPU). ``kfd``: :func:`kfd_nodes` already read, or None to read."""
    drm = _host.drm_nodes(sys_root)
    nodes = kfd_nodes(sys_root) if kfd is None else kfd
    found = []
    for entry in pci:
        nodes_of = drm.get(entry["address"], {})
        card = nodes_of.get("card")
        # cardN/device is the PCI device's folder: read it there, so that a GPU without a DRM node still has its VRAM
        vram = _host.read_int(os.path.join(sys_root, "bus", "pci", "devices", entry["address"], C.VRAM_TOTAL_FILE))
        try:
            device_id = int(entry.get("device_id") or "", 16)
        except ValueError:
            device_id = None
        device = {
            "address": entry["address"],
            "device_id": entry.get("device_id"),
            "subsystem_id": entry.get("subsystem_id"),
            "name": C.DEVICE_NAMES.get(device_id),
            "driver": entry.get("driver"),
            "memory_total_mib": None if vram is None else vram // MIB,
            "card": card,
            "render": nodes_of.get("render"),
        }
        node = _match_kfd(device, nodes)
        properties = node["properties"] if node else {}
        simd, simd_per_cu = properties.get("simd_count"), properties.get("simd_per_cu")
        device.update({
            "kfd_node": node["node"] if node else None,
            "gpu_id": node["gpu_id"] if node else None,
            "gfx_target_version": properties.get("gfx_target_version"),
            "gfx_target": gfx_target(properties.get("gfx_target_version")),
            "simd_count": simd,
            "cu_count": simd // simd_per_cu if simd and simd_per_cu else None,
            "num_xcc": properties.get("num_xcc"),
        })
        found.append(device)
    return found


def gather(pci, sys_root=_host.SYS_ROOT, proc_modules=_host.PROC_MODULES_PATH):
    """The ``gpu.amd`` fact: ``{count, devices, driver, status}`` from the AMD entries of ``pci`` (every GPU on the
    bus, as ``_host.pci_gpus(None)`` gives them) and the host's sysfs (documented in the gpu_facts module)."""
    mine = [entry for entry in pci if entry.get("vendor_id") == "0x%04x" % C.PCI_VENDOR_ID]
    state = driver_state(sys_root, proc_modules)
    fact = {"count": len(mine), "devices": devices(mine, sys_root),
            "driver": {"module": state["module"], "loaded": state["loaded"], "version": state["version"],
                       "kfd": state["kfd"]}}
    fact["status"] = driver.status(fact)
    return fact
