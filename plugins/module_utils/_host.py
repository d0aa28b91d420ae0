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

# PCI base class 0x03 (display controller): subclass 0x00 VGA, 0x02 3D controller (datacenter GPUs).
GPU_PCI_CLASSES = (0x0300, 0x0302)

PCI_DEVICES_PATH = "/sys/bus/pci/devices"
PROC_MODULES_PATH = "/proc/modules"


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


def pci_gpus(vendor_id, devices_path=PCI_DEVICES_PATH):
    """List the GPUs of one vendor (its PCI vendor ID) on the PCI bus as sysfs shows them, sorted by address.

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
        if _read_hex(os.path.join(base, "vendor")) != vendor_id:
            continue
        pci_class = _read_hex(os.path.join(base, "class"))
        if pci_class is None or (pci_class >> 8) not in GPU_PCI_CLASSES:
            continue
        driver_link = os.path.join(base, "driver")
        driver = os.path.basename(os.readlink(driver_link)) if os.path.islink(driver_link) else None
        device_id = _read_hex(os.path.join(base, "device"))
        subsystem_vendor = _read_hex(os.path.join(base, "subsystem_vendor"))
        subsystem_device = _read_hex(os.path.join(base, "subsystem_device"))
        found.append({
            "address": address,
            "device_id": None if device_id is None else "0x%04x" % device_id,
            "subsystem_id": None if subsystem_device is None or subsystem_vendor is None
            else "0x%04x%04x" % (subsystem_device, subsystem_vendor),
            "class": "0x%06x" % pci_class,
            "driver": driver,
        })
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
