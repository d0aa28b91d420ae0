# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""Every GPU vendor of a host in one ``gpu`` fact, and one driver verdict over them, for each vendor of the vendor
registry (:mod:`._vendors`): NVIDIA through NVML (``_nvidia.nvml``), AMD and Intel through sysfs (``_amd.sysfs``,
``_intel.sysfs``), and the PCI bus for all of them."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.kubegpu.cluster.plugins.module_utils import _host, _vendors
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import constants as nvidia_constants
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import driver as nvidia_driver
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.nvml import gather_gpu_facts


def pci_gpus(sys_root=_host.SYS_ROOT):
    """Every GPU of a vendor of the registry on the PCI bus (each vendor's GPU classes), sorted by address, each as
    ``_host.pci_gpus`` gives it with ``vendor`` (``nvidia``, ``amd``, ``intel``) and ``vendor_id`` (``0x1002``)."""
    known = dict(("0x%04x" % vendor.pci_vendor_id, vendor) for vendor in _vendors.VENDORS)
    every_class = tuple(sorted(set(c for vendor in _vendors.VENDORS for c in vendor.pci_classes)))
    found = []
    for entry in _host.pci_gpus(None, os.path.join(sys_root, "bus", "pci", "devices"), classes=every_class):
        vendor = known.get(entry["vendor_id"])
        if vendor is None or int(entry["class"], 16) >> 8 not in vendor.pci_classes:
            continue  # a BMC's display controller (ASPEED, Matrox), an Intel NPU: not a GPU any plugin serves
        ordered = {"address": entry["address"], "vendor": vendor.name, "vendor_id": entry["vendor_id"]}
        ordered.update((key, value) for key, value in entry.items() if key not in ordered)
        found.append(ordered)
    return found


def gather(nvml, sys_root=_host.SYS_ROOT, proc_modules=_host.PROC_MODULES_PATH):
    """The ``gpu`` fact (documented in the gpu_facts module's RETURN): NVIDIA's keys as ``_nvidia.nvml`` reads them
    (``present``, ``count``, ``devices`` are NVIDIA's only), ``pci`` with every vendor's GPUs, ``vendors``, and each
    other vendor's part (``amd``, ``intel``) from sysfs."""
    facts = gather_gpu_facts(nvml, os.path.join(sys_root, "bus", "pci", "devices"), proc_modules)
    pci = pci_gpus(sys_root)
    facts["pci"] = pci
    for vendor in _vendors.WITH_PART:
        facts[vendor.fact_key] = vendor.gather(pci, sys_root, proc_modules)
    vendors = set(entry["vendor"] for entry in pci)
    if facts.get("count"):
        vendors.add(_vendors.NVIDIA.name)  # NVML sees GPUs the PCI scan could not read (no sysfs)
    facts["vendors"] = sorted(vendors)
    return facts


def verdict(gpu, min_version=nvidia_constants.DRIVER_MIN_VERSION, require_gpu=False, check_nouveau=True):
    """``{status, problems, summary}`` over every vendor of one host's ``gpu`` fact: each vendor with a GPU judged by
    its own rules (its registry entry's ``judge``: ``_nvidia.driver``, ``_amd.driver``, ``_intel.driver``);
    ``failed`` when any is, ``ok`` when one is and none failed, ``skipped`` for a host without any GPU unless
    ``require_gpu``. A fact without any other vendor's part (an older, NVIDIA-only gpu_facts) gets NVIDIA's verdict
    exactly as before."""
    if not isinstance(gpu, dict) or not any(vendor.fact_key in gpu for vendor in _vendors.WITH_PART):
        return nvidia_driver.verdict(gpu, min_version, require_gpu=require_gpu, check_nouveau=check_nouveau)
    judged = [vendor.judge(gpu, min_version, check_nouveau) for vendor in _vendors.VENDORS]
    ran = [item for item in judged if item["status"] != "skipped"]
    if not ran:
        if not require_gpu:
            return {"status": "skipped", "problems": [], "summary": "no GPU"}
        return {"status": "failed", "summary": "no GPU", "problems": [
            "no GPU was found (PCI bus: no %s display or 3D controller; NVML: %s); this host is "
            "required to have one (gpu_driver_require_gpu): check the hardware or remove the host from the GPU group"
            % (_vendors.labels_text(), gpu["nvml"]["status"])]}
    problems = [problem for item in ran for problem in item["problems"]]
    return {"status": "failed" if problems else "ok", "problems": problems,
            "summary": "; ".join(item["summary"] for item in ran)}
