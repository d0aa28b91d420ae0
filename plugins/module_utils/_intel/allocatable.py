# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""What Intel's GPU plugin makes a node advertise, from the host's ``gpu.intel`` fact, by the plugin's own rules
(intel/intel-device-plugins-for-kubernetes cmd/gpu_plugin/gpu_plugin.go, scan()). Pure functions; the sandbox's
simulator (sandbox/k8s/devsim/vendors.py) follows the same rules from a profile."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import OptionError
from ansible_collections.kubegpu.cluster.plugins.module_utils._intel.constants import (
    DEFAULT_SHARED_DEV_NUM, DRIVERS, MONITOR_SUFFIX, RESOURCE_PREFIX,
)


def resources(drivers, shared_dev_num=DEFAULT_SHARED_DEV_NUM, monitoring=False):
    """``{resource: count}`` for cards bound to ``drivers`` (one entry per card, ``i915`` or ``xe``).

    gpu_plugin.go scan(): each card is added ``shared-dev-num`` times under its driver's name (devProps.driver());
    with -enable-monitoring each driver also gets ``<driver>_monitoring`` with the one device ``all``. A card of any
    other driver is not the plugin's (it reads /sys/class/drm, which only a bound DRM driver fills)."""
    out = {}
    for driver in drivers:
        if driver not in DRIVERS:
            continue
        name = "%s/%s" % (RESOURCE_PREFIX, driver)
        out[name] = out.get(name, 0) + shared_dev_num
        if monitoring:
            out["%s/%s%s" % (RESOURCE_PREFIX, driver, MONITOR_SUFFIX)] = 1
    return out


def card_drivers(intel):
    """The kernel driver of each card of a ``gpu.intel`` fact: the device's ``driver``, else the fact's module."""
    module = (intel.get("driver") or {}).get("module")
    devices = list(intel.get("devices") or [])
    if not devices:
        return [module] * int(intel.get("count") or 0)
    return [device.get("driver") or module for device in devices]


def expected(host, intel, shared_dev_num=DEFAULT_SHARED_DEV_NUM, monitoring=False):
    """What ``host`` (its ``gpu.intel`` fact) will advertise; raises :class:`OptionError` naming the host where the
    plugin finds no card."""
    driver = intel.get("driver") or {}
    status = intel.get("status")
    if driver.get("loaded") is False or status == "driver_not_loaded":
        raise OptionError("facts", "host %s: neither i915 nor xe is loaded, so Intel's GPU plugin finds no card in "
                                   "/sys/class/drm there (load the driver and gather facts again)" % host)
    if status not in (None, "ok"):
        raise OptionError("facts", "host %s: gpu.intel.status is %s, so Intel's GPU plugin would advertise nothing "
                                   "there; fix the host first (see kubegpu.cluster.gpu_facts)" % (host, status))
    drivers = card_drivers(intel)
    unknown = sorted(set(str(d) for d in drivers if d not in DRIVERS))
    if unknown:
        raise OptionError("facts", "host %s: card(s) bound to %s, which Intel's GPU plugin does not serve (it serves "
                                   "%s)" % (host, ", ".join(unknown), " and ".join(DRIVERS)))
    return resources(drivers, shared_dev_num, monitoring)
