# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.kubegpu.cluster.plugins.module_utils import _host
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.constants import KERNEL_MODULES, PCI_VENDOR_ID


def _pci(root, address, vendor, device, pci_class, driver=None):
    path = root / address
    path.mkdir(parents=True)
    for name, value in (("vendor", vendor), ("device", device), ("class", pci_class),
                        ("subsystem_vendor", "0x10de"), ("subsystem_device", "0x1214")):
        (path / name).write_text(value + "\n")
    if driver:
        target = root.parent / "drivers" / driver
        target.mkdir(parents=True, exist_ok=True)
        os.symlink(str(target), str(path / "driver"))


def test_nvidia_pci_devices_keeps_only_nvidia_gpus(tmp_path):
    root = tmp_path / "devices"
    _pci(root, "0000:3b:00.0", "0x10de", "0x1db4", "0x030200", driver="nvidia")
    _pci(root, "0000:af:00.0", "0x10de", "0x1c03", "0x030000")              # GeForce, no driver bound
    _pci(root, "0000:3b:00.1", "0x10de", "0x10f9", "0x040300")              # NVIDIA HDMI audio: not a GPU
    _pci(root, "0000:00:02.0", "0x8086", "0x3e92", "0x030000", driver="i915")  # Intel GPU
    found = _host.pci_gpus(PCI_VENDOR_ID, str(root))
    assert found == [
        {"address": "0000:3b:00.0", "device_id": "0x1db4", "subsystem_id": "0x121410de", "class": "0x030200", "driver": "nvidia"},
        {"address": "0000:af:00.0", "device_id": "0x1c03", "subsystem_id": "0x121410de", "class": "0x030000", "driver": None},
    ]


def test_nvidia_pci_devices_without_sysfs_is_empty(tmp_path):
    assert _host.pci_gpus(PCI_VENDOR_ID, str(tmp_path / "missing")) == []


def test_loaded_kernel_modules(tmp_path):
    modules = tmp_path / "modules"
    modules.write_text("nvidia_uvm 1437696 0 - Live 0x0000000000000000\nnvidia 56745984 2 nvidia_uvm, Live 0x0\n")
    assert _host.loaded_kernel_modules(str(modules), KERNEL_MODULES) == {"nvidia": True, "nouveau": False}


def test_loaded_kernel_modules_unknown_when_unreadable(tmp_path):
    assert _host.loaded_kernel_modules(str(tmp_path / "nope"), KERNEL_MODULES) == {"nvidia": None, "nouveau": None}


def test_nvml_bus_ids_become_sysfs_addresses():
    assert _host.sysfs_address("00000000:3B:00.0") == "0000:3b:00.0"
    assert _host.sysfs_address("00000001:07:00.0") == "0001:07:00.0"
    assert _host.sysfs_address("0000:3b:00.0") == "0000:3b:00.0"  # already one
    assert _host.sysfs_address(None) == "" and _host.sysfs_address("not an address") == "not an address"
