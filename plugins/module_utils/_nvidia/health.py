# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""NVIDIA's device plugin marks devices unhealthy on XID errors; an unhealthy device stays in the node's capacity and
leaves its allocatable. Pure functions: the ``health_checks`` option (what the plugin's environment says), and which
devices of a node the plugin marks unhealthy, from the ``gpu`` fact.

The rules, as k8s-device-plugin v0.20.0 ``internal/rm/health.go`` (checkHealth, getDisabledHealthCheckXids,
newHealthCheckXIDs) and ``internal/plugin/server.go`` (ListAndWatch) have them:

* XIDs 13, 31, 43, 45 and 68 (application errors) and 109 are ignored. ``DP_DISABLE_HEALTHCHECKS`` adds XIDs to
  ignore, or turns the checks off with ``all`` (or ``xids``, or ``0``: XID 0 is the plugin's "all"). XIDs in
  ``DP_ENABLE_HEALTHCHECKS`` are checked even when ignored, but not when the checks are off: v0.20.0 asks only whether
  "all" is disabled before it starts (``IsAllDisabled``), whatever the comment above that variable says.
* The check runs once per resource (one resource manager each), over that resource's devices after sharing (every
  replica is a device). It registers every device's GPU for XID and ECC events: a GPU whose supported event types
  NVML does not give, or whose registration fails other than NOT_SUPPORTED ("too old"), has all its devices marked
  unhealthy at once. A failed wait, or an event whose GPU has no UUID, marks every device.
* An XID event that is not ignored marks one device of its GPU per resource: the plugin keeps one device per GPU UUID
  (``parentToDeviceMap``; replicas and MIG devices of one GPU overwrite each other), so with time-slicing one replica
  of the GPU goes, not all (NVIDIA/k8s-device-plugin issue #1929, fixed after v0.20.0 by PR #1930). An event for one
  MIG instance (its GPU and compute instance ids set) marks that device only if it is the one kept; which device is
  kept follows Go's map order, so where a resource has several MIG devices on that GPU the outcome is a coin toss:
  this module counts the event's own device as marked, which is the rule from PR #1930 on.
* Unhealthy is for good: nothing marks a device healthy again until the plugin restarts (``FIXME`` in ListAndWatch).

The fact's XID events are those NVML reported while gpu_facts read the GPUs (``xid_events``, read as the plugin reads
them): an XID the GPU raises later is not foreseen.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import OptionError
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.constants import (
    HEALTH_ENV_DISABLE, HEALTH_ENV_ENABLE, HEALTH_IGNORED_XIDS,
)

# Paired with the health_checks option of device_plugin_deploy and gpu_expected_resources: change them together.
HEALTH_CHECKS_SPEC = dict(
    enabled=dict(type="bool", default=True),
    ignore_xids=dict(type="list", elements="int", default=[]),
    check_xids=dict(type="list", elements="int", default=[]),
)

# Event-set calls whose failure marks every device of every GPU (checkHealth's "Marking all devices as unhealthy")
_ALL_UNHEALTHY = ("nvmlEventSetWait", "nvmlDeviceGetUUID(event)")
# ... and the one whose failure ends the check before it starts ("continuing with health checks disabled")
_NO_CHECK = ("nvmlEventSetCreate",)
# Per-GPU calls whose failure marks every device of that GPU
_GPU_UNHEALTHY = ("nvmlDeviceGetSupportedEventTypes", "nvmlDeviceRegisterEvents")


def _xids(values, option):
    out = []
    for value in values or []:
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise OptionError(option, "%r is not an XID: write whole numbers from 1 (the plugin reads 0 as 'every "
                                      "XID', so write enabled: false for that)" % (value,))
        if value not in out:
            out.append(value)
    return tuple(sorted(out))


def settings(option):
    """``{"enabled", "ignore", "check"}`` from the ``health_checks`` option (None: the plugin's defaults). Raises
    :class:`OptionError` for what the plugin would not do as written."""
    option = option or {}
    enabled = option.get("enabled", True)
    enabled = True if enabled is None else enabled
    ignore = _xids(option.get("ignore_xids"), "health_checks.ignore_xids")
    check = _xids(option.get("check_xids"), "health_checks.check_xids")
    if not enabled and check:
        raise OptionError("health_checks.check_xids", "the plugin v0.20.0 checks no XID at all once the checks are "
                                                      "off (it reads %s only when %s is not 'all'): drop check_xids, or "
                                                      "turn the checks on and list the XIDs to leave out in ignore_xids"
                          % (HEALTH_ENV_ENABLE, HEALTH_ENV_DISABLE))
    both = sorted(set(ignore) & set(check))
    if both:
        raise OptionError("health_checks", "XID %s is in both ignore_xids and check_xids; the plugin would check it "
                                           "(check_xids wins): keep it in one list" % ", ".join(str(x) for x in both))
    return {"enabled": bool(enabled), "ignore": ignore, "check": check}


def env(option):
    """The plugin container's environment for the ``health_checks`` option: nothing for the defaults."""
    health = settings(option)
    out = []
    if not health["enabled"]:
        out.append({"name": HEALTH_ENV_DISABLE, "value": "all"})
    elif health["ignore"]:
        out.append({"name": HEALTH_ENV_DISABLE, "value": ",".join(str(x) for x in health["ignore"])})
    if health["check"]:
        out.append({"name": HEALTH_ENV_ENABLE, "value": ",".join(str(x) for x in health["check"])})
    return out


def ignored(health, xid):
    """Whether the plugin ignores ``xid`` under ``health`` (:func:`settings`' result)."""
    if xid in health["check"]:
        return False
    return not health["enabled"] or xid in HEALTH_IGNORED_XIDS or xid in health["ignore"]


def _triggers(device, health):
    """The XID events of a GPU (its fact) the plugin acts on."""
    return [event for event in device.get("xid_events") or []
            if isinstance(event, dict) and isinstance(event.get("xid"), int) and not ignored(health, event["xid"])]


def _matches(event, mig):
    """checkHealth's MIG test: an event for one GPU and compute instance hits only the MIG device with those ids."""
    if mig is None or event.get("gpu_instance_id") is None or event.get("compute_instance_id") is None:
        return True
    return (mig.get("gpu_instance_id"), mig.get("compute_instance_id")) == (event["gpu_instance_id"],
                                                                            event["compute_instance_id"])


def unhealthy(fact, devices, health):
    """``{resource: count}`` of the devices the plugin marks unhealthy on a node with the ``gpu`` fact ``fact``.

    ``devices`` is ``{resource: [(GPU index, MIG device fact or None), ...]}``, every device the plugin advertises
    (one per replica); ``health`` :func:`settings`' result."""
    if not health["enabled"] and not health["check"]:
        return {}
    returns = fact.get("nvml_returns") or {}
    if any(call in returns for call in _NO_CHECK):
        return {}
    gpus = dict((d.get("index", i), d) for i, d in enumerate(fact.get("devices") or []) if isinstance(d, dict))
    everything = any(call in returns for call in _ALL_UNHEALTHY)
    out = {}
    for resource, members in devices.items():
        bad = 0
        by_gpu = {}
        for index, mig in members:
            by_gpu.setdefault(index, []).append(mig)
        for index, migs in by_gpu.items():
            gpu = gpus.get(index) or {}
            gpu_returns = gpu.get("nvml_returns") or {}
            if everything or any(call in gpu_returns for call in _GPU_UNHEALTHY):
                bad += len(migs)
            elif any(_matches(event, mig) for event in _triggers(gpu, health) for mig in migs):
                bad += 1
        if bad:
            out[resource] = bad
    return out
