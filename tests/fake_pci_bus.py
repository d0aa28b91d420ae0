# SPDX-License-Identifier: GPL-3.0-or-later
"""A fake PCI bus for a fake NVML profile: the GPUs as /sys/bus/pci/devices shows them (the files the collection's
_host.pci_gpus reads, where mig-parted's device filters are matched), and a command prefix that runs a command with
that folder bound over /sys/bus/pci/devices in a mount namespace of its own (root only; the host's view is untouched).
Shared by the MIG tests."""

import os
import subprocess

PCI_DEVICES = "/sys/bus/pci/devices"


def write(profile, folder):
    """Write the profile's (a parsed fake NVML profile) GPUs under ``folder``: vendor, device, class (3D controller)
    and, where the profile has one, the subsystem ids."""
    os.makedirs(folder)
    for device in profile["devices"]:
        domain, rest = device["pci_bus_id"].lower().split(":", 1)
        address = os.path.join(folder, "%04x:%s" % (int(domain, 16), rest))
        os.makedirs(address)
        ids = int(device["pci_device_id"], 16)
        values = {"vendor": ids & 0xFFFF, "device": ids >> 16, "class": 0x030200}
        if device.get("pci_subsystem_id"):
            sub = int(device["pci_subsystem_id"], 16)
            values.update(subsystem_vendor=sub & 0xFFFF, subsystem_device=sub >> 16)
        for name, value in values.items():
            with open(os.path.join(address, name), "w", encoding="utf-8") as handle:
                handle.write("0x%04x\n" % value)
    return folder


def prefix(folder):
    """The command prefix that runs a command with ``folder`` as /sys/bus/pci/devices."""
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            'mount --bind "$0" %s && exec "$@"' % PCI_DEVICES, folder]


def why_not():
    """Why a command cannot be run with a fake PCI bus here (a sentence), or None when it can."""
    if os.geteuid() != 0:
        return "binding a fake PCI bus over %s needs root (a mount namespace)" % PCI_DEVICES
    try:
        proc = subprocess.run(prefix("/tmp") + ["true"], capture_output=True, text=True, timeout=30, check=False)
    except OSError as exc:
        return "unshare cannot run: %s" % exc
    if proc.returncode != 0:
        return "unshare --mount with a bind mount fails here: %s" % proc.stderr.strip()
    return None
