# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The verdict on a host's AMD driver from its ``gpu.amd`` fact: what the ROCm device plugin needs (the amdgpu module
loaded, the GPUs bound to it, KFD present), each problem in one sentence that says what was found and what to do.
Installing AMD's driver is not this collection's: the advice names AMD's own way. Pure functions."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.cluster.plugins.module_utils._amd import constants as C

STATUS_OK = "ok"
STATUS_NO_GPU = "no_gpu"
STATUS_NOT_LOADED = "driver_not_loaded"
STATUS_NOT_BOUND = "driver_not_bound"
STATUS_NO_KFD = "no_kfd"

INSTALL_ADVICE = (
    "this collection does not install AMD drivers: install amdgpu with AMD's amdgpu-install (the amdgpu-dkms package, "
    "https://rocm.docs.amd.com/projects/install-on-linux/) or use a kernel whose in-tree amdgpu supports the GPU")


def status(fact):
    """``ok``, ``no_gpu``, ``driver_not_loaded`` (amdgpu not loaded), ``driver_not_bound`` (loaded, but a GPU is held
    by another driver or none), ``no_kfd`` (no /sys/class/kfd: ROCm cannot compute) for a ``gpu.amd`` fact. An
    unknown module state (None) is judged by the bindings alone."""
    driver = fact.get("driver") or {}
    if not fact.get("count"):
        return STATUS_NO_GPU
    if driver.get("loaded") is False:
        return STATUS_NOT_LOADED
    if any(device.get("driver") != C.KERNEL_MODULE for device in fact.get("devices") or []):
        return STATUS_NOT_BOUND if driver.get("loaded") else STATUS_NOT_LOADED
    if not driver.get("kfd"):
        return STATUS_NO_KFD
    return STATUS_OK


def summary(fact):
    """One line: ``2 x AMD Instinct MI210, amdgpu 6.8.5`` (unknown device ids by id)."""
    names = {}
    for device in fact.get("devices") or []:
        name = device.get("name") or "AMD GPU %s" % device.get("device_id")
        names[name] = names.get(name, 0) + 1
    text = ", ".join("%d x %s" % (count, name) for name, count in sorted(names.items())) or "no AMD GPU"
    driver = fact.get("driver") or {}
    if driver.get("loaded"):
        text += ", %s%s" % (C.KERNEL_MODULE, " " + driver["version"] if driver.get("version") else "")
    return text


def problems(fact):
    """One actionable sentence per problem of a ``gpu.amd`` fact ([] when the driver is fine or there is no GPU)."""
    found = []
    state = status(fact)
    count = fact.get("count") or 0
    if state == STATUS_NO_GPU:
        return found
    if state == STATUS_NOT_LOADED:
        found.append(
            "%d AMD GPU(s) on the PCI bus but the amdgpu kernel module is not loaded, and the ROCm device plugin needs it "
            "(it lists GPUs under /sys/module/amdgpu/drivers/pci:amdgpu); run 'modprobe amdgpu' and check "
            "'dmesg | grep -i amdgpu' for why it did not load (missing firmware: the linux-firmware package; a "
            "'modprobe.blacklist=amdgpu' or 'amdgpu.modeset=0' kernel parameter); %s" % (count, INSTALL_ADVICE))
        return found
    for device in fact.get("devices") or []:
        if device.get("driver") != C.KERNEL_MODULE:
            found.append(
                "AMD GPU %s (%s) is bound to %s, not amdgpu, so the ROCm device plugin does not see it; release it "
                "(e.g. 'driverctl unset-override %s', or drop it from vfio-pci's ids= option) and reload amdgpu"
                % (device.get("address"), device.get("name") or device.get("device_id"),
                   device.get("driver") or "no driver", device.get("address")))
    if not (fact.get("driver") or {}).get("kfd"):
        found.append(
            "amdgpu is loaded but /sys/class/kfd is missing, so ROCm and its device plugin cannot use the GPUs for "
            "compute; the kernel lacks KFD (CONFIG_HSA_AMD) or amdgpu could not start it (see 'dmesg | grep -i kfd'); "
            "use a kernel built with CONFIG_HSA_AMD=y or AMD's amdgpu-dkms")
    return found


def verdict(fact):
    """``{status, problems, summary}`` for one host's ``gpu.amd`` fact: ``ok``, ``failed``, or ``skipped`` for a host
    without an AMD GPU (whether the host must have some GPU is the caller's to judge)."""
    fact = fact or {}
    if not fact.get("count"):
        return {"status": "skipped", "problems": [], "summary": summary(fact)}
    found = problems(fact)
    return {"status": "failed" if found else "ok", "problems": found, "summary": summary(fact)}
