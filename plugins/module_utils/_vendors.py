# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""Every GPU vendor the collection knows, by name: the one list, NVIDIA on it like AMD and Intel. gpu_facts (the
``gpu`` fact and its driver verdict, :mod:`._gpus`), the fleet audit, gpu_proof (each vendor's proof workload, run by
:mod:`._k8s.proof`) read it here; the roles' vendor tables are checked against it by tests/unit/test_vendors.py, which
names every place a new entry is still missing from.

A new vendor is a package of its own (``_<vendor>/``, see CONTRIBUTING.md) and one :class:`GpuVendor` in
:data:`VENDORS`. Pure: nothing here talks to a host or a cluster."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.cluster.plugins.module_utils import _host
from ansible_collections.kubegpu.cluster.plugins.module_utils._amd import constants as amd
from ansible_collections.kubegpu.cluster.plugins.module_utils._amd import driver as amd_driver
from ansible_collections.kubegpu.cluster.plugins.module_utils._amd import sysfs as amd_sysfs
from ansible_collections.kubegpu.cluster.plugins.module_utils._intel import constants as intel
from ansible_collections.kubegpu.cluster.plugins.module_utils._intel import driver as intel_driver
from ansible_collections.kubegpu.cluster.plugins.module_utils._intel import sysfs as intel_sysfs
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import constants as nv
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import driver as nvidia_driver


class GpuVendor(object):
    """One GPU vendor.

    ``name``: the vendor in the ``gpu`` fact (``gpu.vendors``, ``gpu.pci[].vendor``), gpu_proof's ``vendor`` and the
    roles' tables; ``label``: how sentences name it. ``pci_vendor_id`` and ``pci_classes``: its GPUs on the PCI bus.
    ``fact_key``: the part of the ``gpu`` fact that holds its GPUs (``gpu.amd``), read by ``gather(pci, sys_root,
    proc_modules)``; None for NVIDIA, whose keys are the fact's own (``present``, ``count``, ``devices``, read through
    NVML: gpu_facts' documented layout). ``judge(gpu, min_version, check_nouveau)``: the verdict
    (``{status, problems, summary}``) of its driver on one host's ``gpu`` fact. ``resource_prefix``: what its device
    plugin advertises (``amd.com``). ``device_plugin_module``: the module that deploys its device plugin (the
    device_plugin role calls it). ``proof``: its proof workload, the arguments of :class:`._k8s.proof.Workload`.
    """

    def __init__(self, name, label, pci_vendor_id, pci_classes, fact_key, judge, resource_prefix, device_plugin_module,
                 proof, gather=None):
        self.name = name
        self.label = label
        self.pci_vendor_id = pci_vendor_id
        self.pci_classes = tuple(pci_classes)
        self.fact_key = fact_key
        self.gather = gather
        self.judge = judge
        self.resource_prefix = resource_prefix
        self.device_plugin_module = device_plugin_module
        self.proof = proof

    def __repr__(self):
        return "GpuVendor(%r)" % self.name

    def part(self, gpu):
        """Its part of a host's ``gpu`` fact: ``gpu[fact_key]``, or the fact itself for NVIDIA (``{}`` when none)."""
        gpu = gpu if isinstance(gpu, dict) else {}
        part = gpu.get(self.fact_key) if self.fact_key else gpu
        return part if isinstance(part, dict) else {}

    def count(self, gpu):
        """How many of its GPUs a host's ``gpu`` fact counts (0 when none, or no such key)."""
        try:
            return int(self.part(gpu).get("count") or 0)
        except (TypeError, ValueError):
            return 0


def _nvidia_judge(gpu, min_version, check_nouveau):
    return nvidia_driver.verdict(gpu, min_version, require_gpu=False, check_nouveau=check_nouveau)


def _part_judge(fact_key, verdict):
    def judge(gpu, _min_version, _check_nouveau):
        return verdict(gpu.get(fact_key))
    return judge


NVIDIA = GpuVendor(
    name=nv.VENDOR, label="NVIDIA", pci_vendor_id=nv.PCI_VENDOR_ID, pci_classes=_host.GPU_PCI_CLASSES, fact_key=None,
    judge=_nvidia_judge, resource_prefix=nv.RESOURCE_PREFIX, device_plugin_module="device_plugin_deploy",
    proof=dict(resource_prefixes=[nv.RESOURCE_PREFIX], image=nv.PROOF_IMAGE, success_pattern=nv.PROOF_PATTERN,
               tolerations=nv.PROOF_TOLERATIONS, preference=nv.PROOF_RESOURCE_PREFERENCE,
               then_prefix=nv.MIG_RESOURCE_PREFIX, hints=nv.PROOF_HINTS))
AMD = GpuVendor(
    name=amd.VENDOR, label=amd.VENDOR_NAME, pci_vendor_id=amd.PCI_VENDOR_ID, pci_classes=amd.PCI_CLASSES,
    fact_key=amd.VENDOR, gather=amd_sysfs.gather, judge=_part_judge(amd.VENDOR, amd_driver.verdict),
    resource_prefix=amd.RESOURCE_PREFIX, device_plugin_module="amd_device_plugin_deploy",
    proof=dict(resource_prefixes=[amd.RESOURCE_PREFIX], image=amd.PROOF_IMAGE, command=amd.PROOF_COMMAND,
               success_pattern=amd.PROOF_PATTERN, tolerations=amd.PROOF_TOLERATIONS))
INTEL = GpuVendor(
    name=intel.VENDOR, label=intel.VENDOR_NAME, pci_vendor_id=intel.PCI_VENDOR_ID, pci_classes=intel.PCI_CLASSES,
    fact_key=intel.VENDOR, gather=intel_sysfs.gather, judge=_part_judge(intel.VENDOR, intel_driver.verdict),
    resource_prefix=intel.RESOURCE_PREFIX, device_plugin_module="intel_device_plugin_deploy",
    proof=dict(resource_prefixes=[intel.RESOURCE_PREFIX], image=intel.PROOF_IMAGE, command=intel.PROOF_COMMAND,
               success_pattern=intel.PROOF_PATTERN, tolerations=intel.PROOF_TOLERATIONS))

# In the order reports list them (the gpu fact's pci entries are sorted by address, its vendors by name)
VENDORS = (NVIDIA, AMD, INTEL)
NAMES = [vendor.name for vendor in VENDORS]
BY_NAME = dict((vendor.name, vendor) for vendor in VENDORS)
# The vendors whose GPUs are a part of the gpu fact of their own (gpu.amd, gpu.intel), read from sysfs
WITH_PART = tuple(vendor for vendor in VENDORS if vendor.fact_key)


def get(name):
    """The vendor called ``name``; a KeyError names the known ones."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError("unknown GPU vendor %r (one of: %s)" % (name, ", ".join(NAMES)))


def labels_text(vendors=VENDORS):
    """``NVIDIA, AMD or Intel``: the vendors' labels, for sentences."""
    labels = [vendor.label for vendor in vendors]
    return labels[0] if len(labels) == 1 else "%s or %s" % (", ".join(labels[:-1]), labels[-1])
