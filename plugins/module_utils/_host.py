# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""What the kernel says about a host's GPUs, independently of any vendor's driver or library: the GPUs on the PCI bus
(by vendor ID) and the kernel modules loaded."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

# PCI base class 0x03 (display controller): subclass 0x00 VGA, 0x02 3D controller (datacenter GPUs).
GPU_PCI_CLASSES = (0x0300, 0x0302)

SYS_ROOT = "/sys"
PCI_DEVICES_PATH = SYS_ROOT + "/bus/pci/devices"
PROC_MODULES_PATH = "/proc/modules"
# DRM device nodes as the kernel names them in /sys/class/drm (the primary node cardN and the render node renderDN;
# connectors such as card0-DP-1 are neither)
DRM_CARD_RE = re.compile(r"^card[0-9]+$")
DRM_RENDER_RE = re.compile(r"^renderD[0-9]+$")


def _read_hex(path):
    try:
        with open(path) as handle:
            return int(handle.read().strip(), 16)
    except (IOError, OSError, ValueError):
        return None


def sysfs_address(bus_id):
    """A GPU's PCI address as sysfs names it (``0000:3b:00.0``, the ``address`` of :func:`pci_gpus`) from the bus id
    NVML reports (``00000000:3B:00.0``: an 8-digit domain, upper case); text that is not an address, lower-cased."""
    text = str(bus_id or "").lower()
    domain, _colon, rest = text.partition(":")
    try:
        return "%04x:%s" % (int(domain, 16), rest) if rest else text
    except ValueError:
        return text


def pci_gpus(vendor_id, devices_path=PCI_DEVICES_PATH, classes=GPU_PCI_CLASSES):
    """List the GPUs of one vendor (its PCI vendor ID; ``None``: every vendor, each entry then with ``vendor_id``) on
    the PCI bus as sysfs shows them, sorted by address. ``classes``: the PCI class and subclass codes taken as GPUs.

    Each entry: ``address``, ``device_id``, ``subsystem_id`` (hex strings such as ``0x1db4``), ``class``
    (``0x030200``) and ``driver``, the kernel driver bound to it (``nvidia``, ``nouveau``, ``vfio-pci``) or ``None``.
    A missing or unreadable sysfs gives an empty list: the caller reports, it does not fail.
    """
    try:
        addresses = sorted(os.listdir(devices_path))
    except (IOError, OSError):
        return []
    found = []
    for address in addresses:
        base = os.path.join(devices_path, address)
        vendor = _read_hex(os.path.join(base, "vendor"))
        if vendor is None or (vendor_id is not None and vendor != vendor_id):
            continue
        pci_class = _read_hex(os.path.join(base, "class"))
        if pci_class is None or (pci_class >> 8) not in classes:
            continue
        driver_link = os.path.join(base, "driver")
        driver = os.path.basename(os.readlink(driver_link)) if os.path.islink(driver_link) else None
        device_id = _read_hex(os.path.join(base, "device"))
        subsystem_vendor = _read_hex(os.path.join(base, "subsystem_vendor"))
        subsystem_device = _read_hex(os.path.join(base, "subsystem_device"))
        entry = {} if vendor_id is not None else {"vendor_id": "0x%04x" % vendor}
        entry.update({
            "address": address,
            "device_id": None if device_id is None else "0x%04x" % device_id,
            "subsystem_id": None if subsystem_device is None or subsystem_vendor is None
            else "0x%04x%04x" % (subsystem_device, subsystem_vendor),
            "class": "0x%06x" % pci_class,
            "driver": driver,
        })
        found.append(entry)
    return found


def loaded_kernel_modules(proc_modules, names):
    """Return ``{name: loaded}`` for the given kernel modules, from ``/proc/modules``.

    An unreadable file gives ``None`` for each name: unknown, not "not loaded".
    """
    try:
        with open(proc_modules) as handle:
            loaded = set(line.split(" ", 1)[0] for line in handle if line.strip())
    except (IOError, OSError):
        return dict((name, None) for name in names)
    return dict((name, name in loaded) for name in names)


def read_text(path):
    """The stripped content of a sysfs/proc file, or None where it cannot be read."""
    try:
        with open(path) as handle:
            return handle.read().strip()
    except (IOError, OSError, UnicodeDecodeError):
        return None


def read_int(path):
    """A sysfs number (decimal, or hex with 0x), or None."""
    text = read_text(path)
    try:
        return int(text, 0) if text else None
    except ValueError:
        return None


def drm_nodes(sys_root=SYS_ROOT):
    """``{PCI address: {"card": "card0", "render": "renderD128"}}`` from /sys/class/drm: each cardN and renderDN entry
    is tied to its PCI device by its ``device`` link (``.../0000:03:00.0``), the way GPU device plugins do
    (intel-device-plugins-for-kubernetes cmd/gpu_plugin/gpu_plugin.go reads card*/device/vendor and the card's link;
    ROCm/k8s-device-plugin internal/pkg/amdgpu/amdgpu.go the card and renderD entries of each device's drm folder).
    A name missing for a device is None; an unreadable /sys/class/drm gives ``{}``."""
    base = os.path.join(sys_root, "class", "drm")
    try:
        names = sorted(os.listdir(base), key=lambda n: (len(n), n))
    except (IOError, OSError):
        return {}
    found = {}
    for name in names:
        kind = "card" if DRM_CARD_RE.match(name) else "render" if DRM_RENDER_RE.match(name) else None
        if kind is None:
            continue
        device = os.path.join(base, name, "device")
        if not os.path.exists(device):
            continue
        address = os.path.basename(os.path.realpath(device))
        entry = found.setdefault(address, {"card": None, "render": None})
        if entry[kind] is None:
            entry[kind] = name
    return found


def kernel_module(name, sys_root=SYS_ROOT, proc_modules=PROC_MODULES_PATH):
    """``{"module", "loaded", "version"}`` of one kernel module: loaded when /proc/modules lists it or
    /sys/module/<name> exists (a module built into the kernel has no /proc/modules line); None when neither can be
    read. ``version``: /sys/module/<name>/version, which out-of-tree builds (amdgpu-dkms) have, else None."""
    listed = loaded_kernel_modules(proc_modules, (name,))[name]
    module_root = os.path.join(sys_root, "module")
    in_sysfs = os.path.isdir(os.path.join(module_root, name)) if os.path.isdir(module_root) else None
    if listed or in_sysfs:
        loaded = True
    elif listed is None and in_sysfs is None:
        loaded = None
    else:
        loaded = False
    version = read_text(os.path.join(module_root, name, "version")) if loaded else None
    return {"module": name, "loaded": loaded, "version": version or None}


def pci_of(gpu, vendor, untagged=False):
    """The entries of a ``gpu`` fact's ``pci`` list (every GPU on the bus, each with its ``vendor``) that are one
    vendor's. ``untagged``: also take entries without a ``vendor`` (the NVIDIA-only list of an older gpu_facts)."""
    return [entry for entry in (gpu or {}).get("pci") or []
            if isinstance(entry, dict) and (entry.get("vendor") == vendor or (untagged and "vendor" not in entry))]
