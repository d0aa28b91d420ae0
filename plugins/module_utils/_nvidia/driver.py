# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The verdict on a host's NVIDIA driver from its ``gpu`` fact: each problem in one sentence that says what was found
and what to do. Pure functions."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.cluster.plugins.module_utils import _host
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import KubegpuError, OptionError
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.constants import DRIVER_MIN_VERSION, VENDOR
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.naming import parse_version


_STATUS_ADVICE = {
    "library_not_found": (
        "the NVIDIA driver is not installed (libnvidia-ml.so.1 not found); install it with your distribution's packages "
        "or set gpu_driver_install: true, then run again"
    ),
    "driver_not_loaded": (
        "the NVIDIA driver's libraries are installed but its kernel module is not loaded; run 'modprobe nvidia' or reboot "
        "after a driver install, and check 'dmesg | grep -i nvrm' for why it failed to load"
    ),
    "no_permission": "NVML refused access to the GPUs; run the play with become: true or fix the permissions of /dev/nvidia*",
    "bindings_missing": (
        "nvidia-ml-py is not installed for the Python that read the GPUs, so the driver could not be asked; let the "
        "gpu_driver role manage the collection's virtualenv (gpu_driver_python_manage: true) or install nvidia-ml-py "
        "there, then run again"
    ),
    "version_mismatch": (
        "the NVIDIA driver was upgraded but the kernel module still loaded is the old one (Driver/library version "
        "mismatch); reboot the node (drained first), or run kubegpu.cluster.driver_upgrade, which drains, reboots and "
        "proves it"
    ),
}


def _summary(gpu):
    names = {}
    for device in gpu.get("devices") or []:
        name = device.get("name") or "unreadable GPU"
        names[name] = names.get(name, 0) + 1
    parts = ["%d x %s" % (count, name) for name, count in sorted(names.items())]
    pci = _host.pci_of(gpu, VENDOR, untagged=True)
    if not parts and pci:
        parts = ["%d NVIDIA GPU(s) on the PCI bus" % len(pci)]
    text = ", ".join(parts) or "no NVIDIA GPU"
    if gpu.get("driver_version"):
        text += ", driver %s" % gpu["driver_version"]
    return text


def verdict(gpu, min_version=DRIVER_MIN_VERSION, require_gpu=False, check_nouveau=True):
    """Return ``{status, problems, summary}`` for one host's ``gpu`` fact (``gpu_facts``): ``ok``, ``failed`` with
    one actionable sentence per problem, or ``skipped`` for a host without a GPU that is not required to have one."""
    if not isinstance(gpu, dict) or "nvml" not in gpu:
        raise KubegpuError("driver_verdict expects the 'gpu' fact from kubegpu.cluster.gpu_facts, got %r" % (type(gpu).__name__,))
    try:
        wanted = parse_version(min_version)
    except ValueError as exc:
        raise OptionError("gpu_driver_min_version", str(exc))

    summary = _summary(gpu)
    pci = _host.pci_of(gpu, VENDOR, untagged=True)  # the PCI bus's NVIDIA GPUs (gpu.pci lists every vendor's)
    nvml = gpu["nvml"]
    modules = gpu.get("kernel_modules") or {}
    problems = []

    if not gpu.get("present"):
        if not require_gpu:
            return {"status": "skipped", "problems": [], "summary": summary}
        problems.append(
            "no NVIDIA GPU was found (PCI bus: none; NVML: %s); this host is required to have one (gpu_driver_require_gpu): "
            "check the hardware or remove the host from the GPU group" % nvml["status"])
        return {"status": "failed", "problems": problems, "summary": summary}

    if check_nouveau and modules.get("nouveau"):
        problems.append(
            "the nouveau kernel module is loaded and keeps the NVIDIA driver from binding the GPUs; blacklist it "
            "('blacklist nouveau' in /etc/modprobe.d/), rebuild the initramfs and reboot")

    if nvml["status"] != "ok":
        advice = _STATUS_ADVICE.get(nvml["status"], "NVML failed: %s" % nvml["message"])
        seen = "%d NVIDIA GPU(s) on the PCI bus" % len(pci) if pci else "NVML: %s" % nvml["message"]
        problems.append("%s (%s)" % (advice, seen))
        return {"status": "failed", "problems": problems, "summary": summary}

    driver = gpu.get("driver_version")
    try:
        too_old = driver is None or parse_version(driver) < wanted
    except ValueError:
        too_old = True
    if too_old:
        problems.append("NVIDIA driver %s is older than the required %s (gpu_driver_min_version); install driver %s or newer"
                        % (driver or "of unknown version", min_version, min_version))

    pci_count = len(pci)
    if pci_count > gpu.get("count", 0):
        problems.append("the PCI bus shows %d NVIDIA GPU(s) but NVML sees %d; a GPU has fallen off the bus or is held by another "
                        "driver (see the 'driver' of each entry in gpu.pci and 'dmesg | grep -i xid')" % (pci_count, gpu.get("count", 0)))

    for device in gpu.get("devices") or []:
        if not device.get("healthy", True):
            reasons = "; ".join("%s: %s" % item for item in sorted((device.get("errors") or {}).items()))
            problems.append("GPU %s does not answer NVML (%s); check 'nvidia-smi' and 'dmesg | grep -i xid', a GPU reset or a reboot "
                            "may be needed" % (device.get("index"), reasons))

    return {"status": "failed" if problems else "ok", "problems": problems, "summary": summary}
