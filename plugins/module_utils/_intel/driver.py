# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The verdict on a host's Intel GPU driver from its ``gpu.intel`` fact: what Intel's GPU device plugin needs (i915
or xe loaded and bound to each GPU, a DRM card for it), each problem in one sentence that says what was found and
what to do. Installing Intel's driver is not this collection's: the advice names Intel's own way. Pure functions."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.cluster.plugins.module_utils._intel import constants as C

STATUS_OK = "ok"
STATUS_NO_GPU = "no_gpu"
STATUS_NOT_LOADED = "driver_not_loaded"
STATUS_NOT_BOUND = "driver_not_bound"

INSTALL_ADVICE = (
    "this collection does not install Intel drivers: use a kernel whose i915 or xe supports the GPU, or Intel's "
    "out-of-tree driver for data centre GPUs (intel-i915-dkms, https://dgpu-docs.intel.com/)")


def status(fact):
    """``ok``, ``no_gpu``, ``driver_not_loaded`` (neither i915 nor xe loaded), ``driver_not_bound`` (one is loaded
    but a GPU is held by another driver or none: e.g. an id the loaded driver does not probe) for a ``gpu.intel``
    fact. Intel's plugin serves the cards of either driver (gpu_plugin.go: one resource per driver, i915 and xe)."""
    if not fact.get("count"):
        return STATUS_NO_GPU
    modules = fact.get("modules") or {}
    drivers = [device.get("driver") for device in fact.get("devices") or []]
    if not any(modules.get(name) for name in C.KERNEL_MODULES) and not any(d in C.KERNEL_MODULES for d in drivers):
        return STATUS_NOT_LOADED
    return STATUS_OK if all(d in C.KERNEL_MODULES for d in drivers) else STATUS_NOT_BOUND


def summary(fact):
    """One line: ``1 x Intel Data Center GPU Flex 170, i915`` (unknown device ids by id)."""
    names = {}
    for device in fact.get("devices") or []:
        name = device.get("name") or "Intel GPU %s" % device.get("device_id")
        names[name] = names.get(name, 0) + 1
    text = ", ".join("%d x %s" % (count, name) for name, count in sorted(names.items())) or "no Intel GPU"
    drivers = sorted(set(d.get("driver") for d in fact.get("devices") or [] if d.get("driver") in C.KERNEL_MODULES))
    if drivers:
        version = (fact.get("driver") or {}).get("version")
        text += ", %s%s" % ("/".join(drivers), " " + version if version and len(drivers) == 1 else "")
    return text


def problems(fact):
    """One actionable sentence per problem of a ``gpu.intel`` fact ([] when the driver is fine or there is no GPU)."""
    found = []
    state = status(fact)
    if state == STATUS_NO_GPU:
        return found
    if state == STATUS_NOT_LOADED:
        ids = ", ".join(sorted(set(str(d.get("device_id")) for d in fact.get("devices") or [])))
        found.append(
            "%d Intel GPU(s) on the PCI bus (device id %s) but neither the i915 nor the xe kernel module is loaded, and "
            "Intel's GPU device plugin needs one; run 'modprobe i915' ('modprobe xe' for Xe2 GPUs such as Arc B-series, "
            "which may also need the kernel parameter xe.force_probe=<device id>) and check "
            "'dmesg | grep -iE \"i915|xe\"' for why it did not load; %s" % (fact.get("count"), ids, INSTALL_ADVICE))
        return found
    for device in fact.get("devices") or []:
        if device.get("driver") not in C.KERNEL_MODULES:
            found.append(
                "Intel GPU %s (%s) is bound to %s, not i915 or xe, so Intel's GPU device plugin does not see it; if it is "
                "held by vfio-pci release it ('driverctl unset-override %s'), otherwise the loaded driver does not probe "
                "device id %s: boot with i915.force_probe=%s or xe.force_probe=%s, or use a newer kernel or driver; %s"
                % (device.get("address"), device.get("name") or device.get("device_id"), device.get("driver") or "no driver",
                   device.get("address"), device.get("device_id"), _bare(device.get("device_id")),
                   _bare(device.get("device_id")), INSTALL_ADVICE))
    return found


def _bare(device_id):
    """``56c0`` from ``0x56c0`` (the form force_probe takes)."""
    text = str(device_id or "")
    return text[2:] if text.startswith("0x") else text


def verdict(fact):
    """``{status, problems, summary}`` for one host's ``gpu.intel`` fact: ``ok``, ``failed``, or ``skipped`` for a
    host without an Intel GPU (whether the host must have some GPU is the caller's to judge)."""
    fact = fact or {}
    if not fact.get("count"):
        return {"status": "skipped", "problems": [], "summary": summary(fact)}
    found = problems(fact)
    return {"status": "failed" if found else "ok", "problems": found, "summary": summary(fact)}
