# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""What the ROCm device plugin makes a node advertise, from the host's ``gpu.amd`` fact, by the plugin's own rules
(ROCm/k8s-device-plugin cmd/k8s-device-plugin/main.go, getResourceList). Pure functions; the sandbox's simulator
(sandbox/k8s/devsim/vendors.py) follows the same rules from a profile."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import OptionError
from ansible_collections.kubegpu.cluster.plugins.module_utils._amd.constants import RESOURCE_GPU, RESOURCE_PREFIX


def partition_type(device):
    """A device's partition type as the plugin names its resource, ``<compute>_<memory>`` in lower case (``cpx_nps4``),
    or None where the fact gives no partition mode (a GPU that cannot be partitioned)."""
    compute, memory = device.get("compute_partition"), device.get("memory_partition")
    if not compute or not memory:
        return None
    return ("%s_%s" % (compute, memory)).lower()


def resources(devices, strategy):
    """``{resource: count}`` for these devices under ``strategy`` (single|mixed).

    main.go getResourceList: no device, nothing. All devices of one partition type (homogeneous): ``single`` gives
    ``gpu``; ``mixed`` gives the partition type's name, or ``gpu`` where the GPUs have no partition modes. Several
    types: ``mixed`` gives one resource per type; ``single`` makes the plugin exit ("Partitions of different styles
    across GPUs in a node is not supported with single strategy"), raised here as :class:`ValueError`."""
    if not devices:
        return {}
    types = {}
    for device in devices:
        kind = partition_type(device)
        types[kind] = types.get(kind, 0) + 1
    if len(types) > 1:
        if strategy == "single":
            raise ValueError("its GPUs are in different partition modes (%s), which the plugin refuses with "
                             "resource_naming_strategy=single and exits; use mixed"
                             % ", ".join(sorted(str(k) for k in types)))
        return dict(("%s/%s" % (RESOURCE_PREFIX, kind or "gpu"), count) for kind, count in types.items())
    kind = list(types)[0]
    if strategy == "single" or kind is None:
        return {RESOURCE_GPU: len(devices)}
    return {"%s/%s" % (RESOURCE_PREFIX, kind): len(devices)}


def expected(host, amd, strategy):
    """What ``host`` (its ``gpu.amd`` fact) will advertise; raises :class:`OptionError` naming the host where the
    plugin advertises nothing (no amdgpu, no /sys/class/kfd) or exits."""
    devices = list(amd.get("devices") or [])
    driver = amd.get("driver") or {}
    status = amd.get("status")
    if driver.get("loaded") is False or status == "driver_not_loaded":
        raise OptionError("facts", "host %s: the amdgpu driver is not loaded, so the ROCm device plugin finds no GPU "
                                   "there (load amdgpu, or install the AMD GPU driver, and gather facts again)" % host)
    if driver.get("kfd") is False or status == "no_kfd":
        # main.go: the plugin lists resources only where /sys/class/kfd exists
        raise OptionError("facts", "host %s: /sys/class/kfd is missing (amdgpu without its KFD/ROCm compute part), "
                                   "so the ROCm device plugin advertises nothing there (use an amdgpu build with "
                                   "HSA_AMD/KFD, and gather facts again)" % host)
    if status not in (None, "ok"):
        raise OptionError("facts", "host %s: gpu.amd.status is %s, so the ROCm device plugin would advertise nothing "
                                   "there; fix the host first (see kubegpu.cluster.gpu_facts)" % (host, status))
    if not devices:
        devices = [{}] * int(amd.get("count") or 0)
    try:
        return resources(devices, strategy)
    except ValueError as exc:
        raise OptionError("resource_naming_strategy", "host %s: %s" % (host, exc))
