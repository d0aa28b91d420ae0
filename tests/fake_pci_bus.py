# SPDX-License-Identifier: GPL-3.0-or-later
"""A fake PCI bus for a fake NVML profile: the GPUs as /sys/bus/pci/devices shows them (the files the collection's
_host.pci_gpus reads, where mig-parted's device filters are matched, and those go-nvlib's nvpci reads for GPU feature
discovery and nvidia-ctk), and a command prefix that runs a command with that folder bound over /sys/bus/pci/devices
in a mount namespace of its own (root only; the host's view is untouched). The files are the node images' own
(sandbox/images/fake_pci.py device_files), so the tests and the node containers show one PCI bus. Shared by the MIG
and CDI tests."""

import os
import subprocess

from sandbox.images import fake_pci

PCI_DEVICES = "/sys/bus/pci/devices"


def write(profile, folder):
    """Write the profile's (a parsed fake NVML profile) GPUs under ``folder``, one directory per GPU with the files of
    :func:`sandbox.images.fake_pci.device_files` (ids, class, configuration space, NUMA node, resources)."""
    os.makedirs(folder)
    for device in profile["devices"]:
        address = os.path.join(folder, fake_pci.sysfs_bdf(device["pci_bus_id"]))
        os.makedirs(address)
        for name, content in fake_pci.device_files(device).items():
            with open(os.path.join(address, name), "wb") as handle:
                handle.write(content if isinstance(content, bytes) else content.encode())
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
