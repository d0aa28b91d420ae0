# SPDX-License-Identifier: GPL-3.0-or-later
"""AMD and Intel GPU profiles of the sandbox (``sandbox/profiles/<name>.json`` with a ``vendor``): what they may hold
and a check of it. Standard library only: the fake NVML's profile checker (sandbox/fakenvml/check_profiles.py) and
the fake sysfs generator (fake_pci.py) use it.

These profiles are not NVML's: no fake NVML reads them. They say what the node's sysfs shows (fake_pci.py): the PCI
devices, the DRM nodes, AMD's KFD topology and the kernel module. A profile without ``vendor`` is an NVIDIA (fake
NVML) profile.

    { "description": "...", "vendor": "amd" | "intel",
      "kernel_driver": "amdgpu" | "i915" | "xe" | null,   (null: GPUs on the bus, no driver loaded)
      "driver_version": "6.8.5",                         (optional: /sys/module/<driver>/version)
      "devices": [ { "name", "pci_bus_id", "pci_device_id" ((device << 16) | vendor), "pci_subsystem_id",
                     "pci_class" (default 0x038000), "memory_total_mib", "numa_node", "tiles" (Intel),
                     "family", "gfx_target_version", "simd_count", "simd_per_cu", "cu_count", "num_xcc" (AMD) } ] }
"""

from __future__ import annotations

import json
import re

NVIDIA = "nvidia"
# vendor -> PCI vendor id, the kernel drivers a profile may name
VENDORS = {
    "amd": (0x1002, ("amdgpu",)),
    "intel": (0x8086, ("i915", "xe")),
}
TOP_KEYS = ("description", "vendor", "kernel_driver", "driver_version", "devices")
COMMON_DEVICE_KEYS = ("name", "pci_bus_id", "pci_device_id", "pci_subsystem_id", "pci_class", "memory_total_mib",
                      "numa_node")
DEVICE_KEYS = {
    "amd": COMMON_DEVICE_KEYS + ("family", "gfx_target_version", "simd_count", "simd_per_cu", "cu_count", "num_xcc"),
    "intel": COMMON_DEVICE_KEYS + ("tiles",),
}
REQUIRED_DEVICE_KEYS = ("name", "pci_bus_id", "pci_device_id")
BUS_ID_RE = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")
HEX32_RE = re.compile(r"^0[xX][0-9A-Fa-f]{8}$")
HEX24_RE = re.compile(r"^0[xX][0-9A-Fa-f]{6}$")
INTEGER_KEYS = ("memory_total_mib", "numa_node", "tiles", "gfx_target_version", "simd_count", "simd_per_cu",
                "cu_count", "num_xcc")


class VendorProfileError(ValueError):
    """One problem in a vendor profile: the field path and what is wrong with it."""


def vendor_of(data):
    """``amd``, ``intel``, or ``nvidia`` for a profile without ``vendor`` (the fake NVML's)."""
    return data.get("vendor", NVIDIA) if isinstance(data, dict) else NVIDIA


def is_vendor_profile(data):
    """Whether a profile is an AMD or Intel (sysfs-only) one."""
    return vendor_of(data) != NVIDIA


def vendor_of_file(path):
    """The vendor of the profile file at ``path`` (``nvidia`` when it cannot be read: the NVML checks report that)."""
    try:
        with open(path, encoding="utf-8") as handle:
            return vendor_of(json.load(handle))
    except (OSError, ValueError):
        return NVIDIA


def validate(data):
    """Raise :class:`VendorProfileError` naming the field of the first problem of a vendor profile."""
    if not isinstance(data, dict):
        raise VendorProfileError("(top): not an object")
    vendor = data.get("vendor")
    if vendor not in VENDORS:
        raise VendorProfileError("vendor: %r is not one of %s" % (vendor, ", ".join(sorted(VENDORS))))
    for key in data:
        if key not in TOP_KEYS:
            raise VendorProfileError("%s: unknown key (a %s profile has %s)" % (key, vendor, ", ".join(TOP_KEYS)))
    pci_vendor, drivers = VENDORS[vendor]
    if "kernel_driver" not in data or (data["kernel_driver"] is not None and data["kernel_driver"] not in drivers):
        raise VendorProfileError("kernel_driver: must be one of %s, or null (no driver loaded)" % ", ".join(drivers))
    if "driver_version" in data and not isinstance(data["driver_version"], str):
        raise VendorProfileError("driver_version: not a string")
    if not isinstance(data.get("description"), str):
        raise VendorProfileError("description: missing or not a string")
    devices = data.get("devices")
    if not isinstance(devices, list) or not devices:
        raise VendorProfileError("devices: missing or empty list")
    seen = set()
    for index, device in enumerate(devices):
        where = "devices[%d]" % index
        if not isinstance(device, dict):
            raise VendorProfileError("%s: not an object" % where)
        for key in device:
            if key not in DEVICE_KEYS[vendor]:
                raise VendorProfileError("%s.%s: unknown key for an %s device" % (where, key, vendor))
        for key in REQUIRED_DEVICE_KEYS:
            if key not in device:
                raise VendorProfileError("%s.%s: missing" % (where, key))
        if not BUS_ID_RE.match(str(device["pci_bus_id"])):
            raise VendorProfileError("%s.pci_bus_id: %r is not a PCI address" % (where, device["pci_bus_id"]))
        if device["pci_bus_id"].lower() in seen:
            raise VendorProfileError("%s.pci_bus_id: %s twice" % (where, device["pci_bus_id"]))
        seen.add(device["pci_bus_id"].lower())
        for key in ("pci_device_id", "pci_subsystem_id"):
            if key in device and not HEX32_RE.match(str(device[key])):
                raise VendorProfileError("%s.%s: not a 0x-prefixed 32-bit hex value" % (where, key))
        if int(device["pci_device_id"], 16) & 0xFFFF != pci_vendor:
            raise VendorProfileError("%s.pci_device_id: %s is not an %s device (vendor 0x%04x)"
                                     % (where, device["pci_device_id"], vendor, pci_vendor))
        if "pci_class" in device and (not HEX24_RE.match(str(device["pci_class"]))
                                      or int(device["pci_class"], 16) >> 16 not in (0x03, 0x12)):
            raise VendorProfileError("%s.pci_class: not a display (0x03....) or accelerator (0x12....) class" % where)
        for key in INTEGER_KEYS:
            if key in device and (not isinstance(device[key], int) or isinstance(device[key], bool)
                                  or device[key] < (-1 if key == "numa_node" else 0)):
                raise VendorProfileError("%s.%s: not a non-negative integer" % (where, key))
