# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""What each node will advertise once the NVIDIA device plugin runs there, from its ``gpu`` fact and the plugin's
config, following the plugin's rules, and what a node advertises now. Pure functions.

The rules, as the plugin v0.20.0 applies them (NVIDIA/k8s-device-plugin):
- MIG strategies: ``none`` advertises every GPU as ``nvidia.com/gpu``; ``single`` one ``nvidia.com/gpu`` per MIG
  device when every GPU has MIG on with one profile; ``mixed`` ``nvidia.com/mig-<profile>`` per MIG device plus
  ``nvidia.com/gpu`` per GPU with MIG off (cmd/nvidia-device-plugin/mig-strategy.go, internal/rm/devices.go).
- Sharing: time-slicing and MPS multiply each listed resource by its replicas, renamed to ``<name>.shared`` with
  ``renameByDefault`` (api/config/v1/replicas.go); MPS is refused with ``mixed`` (cmd/nvidia-device-plugin/main.go,
  validateFlags) and on MIG devices.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import OptionError
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import objects as k8s_objects
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.constants import (
    MIG_RESOURCE_PREFIX, RESOURCE_GPU, RESOURCE_PREFIX, SHARED_SUFFIX,
)
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.plugin_config import build_config, expected_counts


def advertised(node):
    """What a node advertises: its ``nvidia.com/*`` allocatable counts."""
    return k8s_objects.allocatable(node, RESOURCE_PREFIX)


def _fact_devices(gpu):
    """The healthy GPUs of a ``gpu`` fact (the plugin only advertises devices NVML answers for)."""
    return [d for d in (gpu or {}).get("devices") or [] if d.get("uuid") or d.get("name")]


def expected_from_fact(config, gpu, node="node"):
    """What a node with the ``gpu`` fact advertises under ``config`` (:func:`build_config`'s result), as
    ``{resource: count}``, following the plugin's rules; ``{}`` for a node without GPUs. Raises
    :class:`OptionError` for a node the plugin would refuse (mixed MIG layouts with ``single``, MPS on MIG
    devices), naming the node."""
    gpu = gpu or {}
    if not gpu.get("present") or not gpu.get("count"):
        return {}
    flags = config.get("flags") or {}
    mig_strategy = flags.get("migStrategy") or "none"
    devices = _fact_devices(gpu)
    counts = {}

    def add(name, number=1):
        counts[name] = counts.get(name, 0) + number

    mig_on = [d for d in devices if ((d.get("mig") or {}).get("current"))]
    if mig_strategy != "none":
        for device in mig_on:
            if not (device.get("mig") or {}).get("devices"):
                raise OptionError("mig_strategy", "node %s: GPU %s has MIG mode on but no MIG devices, which "
                                  "the plugin refuses: create MIG devices or turn MIG off"
                                  % (node, device.get("index", "?")))
    if mig_strategy == "none" or not mig_on:
        add(RESOURCE_GPU, len(devices))
    elif mig_strategy == "single":
        if len(mig_on) != len(devices):
            raise OptionError("mig_strategy", "node %s mixes GPUs with MIG on and off, which the single "
                              "strategy refuses: use mixed" % node)
        profiles = set(m.get("profile") for d in mig_on for m in (d.get("mig") or {}).get("devices") or [])
        if len(profiles) > 1:
            raise OptionError("mig_strategy", "node %s has MIG devices of several profiles (%s), which the "
                              "single strategy refuses: use mixed"
                              % (node, ", ".join(sorted(profiles))))
        add(RESOURCE_GPU, sum(len((d.get("mig") or {}).get("devices") or []) for d in mig_on))
    else:
        for device in devices:
            mig = device.get("mig") or {}
            if mig.get("current"):
                for part in mig.get("devices") or []:
                    add(MIG_RESOURCE_PREFIX + str(part.get("profile")))
            else:
                add(RESOURCE_GPU)
    counts = dict((k, v) for k, v in counts.items() if v > 0)
    sharing = config.get("sharing") or {}
    for strategy, section in sharing.items():
        if strategy == "mps" and mig_on and mig_strategy != "none":
            raise OptionError("sharing.strategy", "node %s has MIG devices, and MPS sharing is not "
                              "supported for MIG devices" % node)
        shared = {}
        for res in section.get("resources") or []:
            have = counts.pop(res["name"], 0)
            if not have:
                continue
            target = res["name"] + SHARED_SUFFIX if section.get("renameByDefault") else res["name"]
            shared[target] = shared.get(target, 0) + have * res["replicas"]
        counts.update(shared)
    return dict(sorted(counts.items()))


def expected_from_facts(params, facts, config=None):
    """``{node: {resource: count}}`` for every node of ``facts`` (node name to ``gpu`` fact) that has GPUs, under
    ``config`` (built from ``params`` when not given)."""
    config = config if config is not None else build_config(params)
    out = {}
    for node, gpu in sorted((facts or {}).items()):
        counts = expected_from_fact(config, gpu, node)
        if counts:
            out[node] = counts
    return out


def expected(params, config):
    """``{node: {resource: count}}`` to wait for: ``expected`` as given, else worked out from ``facts`` (node name, or
    inventory name mapped by ``node_names``, to its ``gpu`` fact) under ``config``."""
    if params.get("expected"):
        return expected_counts(params["expected"])
    facts = params.get("facts") or {}
    names = params.get("node_names") or {}
    by_node = {}
    for host, gpu in facts.items():
        if not isinstance(gpu, dict) or "present" not in gpu:
            raise OptionError("facts", "%s has no gpu fact (run kubegpu.cluster.gpu_facts on it first)" % host)
        by_node[names.get(host) or host] = gpu
    return expected_from_facts(params, by_node, config)
