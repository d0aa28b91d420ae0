# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""What each node will advertise once the NVIDIA device plugin runs there, from its ``gpu`` fact and the plugin's
config, following the plugin's own start-up path, and what a node advertises now. Pure functions.

The path, as NVIDIA/k8s-device-plugin v0.20.0 walks it (each step read in its source):

1. Every GPU is visited (go-nvlib VisitDevices): a handle or name NVML cannot give ends the plugin (a lost GPU
   takes the whole node down, not just itself); a MIG mode other than "not supported" that cannot be read too.
2. ``mixed`` only: the default MIG resources come from every MIG profile the MIG-capable GPUs offer
   (internal/rm/rm.go AddDefaultResourcesToConfig, go-nvlib VisitMigProfiles): one ``mig-<profile>`` resource per
   profile whose compute and GPU instance sizes are equal, ``+`` turned into ``.``. That walk reads each
   MIG-capable GPU's memory and GPU instance profiles; a failure there ends the plugin.
3. GPUs with MIG off (or every GPU under ``none``) become ``nvidia.com/gpu`` devices (internal/rm/device_map.go
   buildGPUDeviceMap, internal/rm/devices.go BuildDevice): UUID, minor number, PCI info and compute capability must
   answer (a failed memory read is only a warning there).
4. ``single``/``mixed``: every MIG device of every MIG-capable GPU is named by go-nvlib's GetProfile and matched
   against the MIG resources; patterns match whole names (api/config/v1/resources.go, resources_test.go), so a
   ``1c.2g.20gb`` device matches nothing and ends the plugin. ``single`` puts every MIG device under
   ``nvidia.com/gpu``.
5. MIG checks (assertAllMigDevicesAreValid): a GPU with MIG on and no MIG devices ends the plugin under ``single``
   ("has no MIG devices configured") and is only a warning under ``mixed``, where that GPU advertises nothing
   (k8s-device-plugin PR #806); ``single`` needs every MIG device's attributes to be equal ("more than one MIG
   device type present on node") and no mix of GPUs with MIG on and off.
6. Sharing: every device of each shared resource is replicated (the plugin ignores per-resource ``devices`` and
   ``rename``), renamed to ``<name>.shared`` with ``renameByDefault`` (api/config/v1/replicas.go); MPS is refused
   on MIG devices (internal/plugin/mps.go). A resource with no devices is not advertised.
7. MPS: the plugin starts serving only once NVIDIA's MPS control daemon answers (internal/plugin/server.go Start,
   waitForDaemon); the daemon runs where ``nvidia.com/mps.capable=true`` (the Helm chart's node selector, ours too),
   which GPU feature discovery writes only where it labels the node at all (:func:`.gfd.exit_reason`: not with a GPU
   in MIG mode, a lost GPU, ...), so elsewhere the plugin waits and advertises nothing.
8. Health (internal/rm/health.go, :mod:`.health`): devices the plugin marks unhealthy on the fact's XID events stay in
   capacity and leave allocatable, which is what is counted here.

Where the plugin would exit, :func:`expected_from_fact` raises :class:`PluginExit` with the plugin's own reason; where
it would wait for an MPS control daemon that cannot run, :class:`NoMpsDaemon` with GFD's.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import KubegpuError, OptionError
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import objects as k8s_objects
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import gfd, naming
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import health as health_rules
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.constants import (
    LABEL_MPS_CAPABLE, MIG_RESOURCE_PREFIX, RESOURCE_GPU, RESOURCE_PREFIX, SHARED_SUFFIX,
)
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.plugin_config import build_config, expected_counts

# What to do about each reason the plugin exits for, keyed by a word of the reason.
_HINTS = (
    ("GPU_IS_LOST", "the GPU fell off the bus: drain the node and reset or replace the GPU, or leave the node out"),
    ("does not match any resource patterns", "the plugin advertises only MIG devices whose compute instance fills "
                                             "its GPU instance: recreate them without compute-instance profiles"),
    ("has no MIG devices configured", "create MIG devices on that GPU, turn MIG off, or use mig_strategy mixed"),
    ("more than one MIG device type", "make every MIG device on the node the same profile on the same GPU model, "
                                      "or use mig_strategy mixed"),
    ("same migEnabled value", "turn MIG on or off on every GPU of the node, or use mig_strategy mixed"),
    ("MPS is not supported for MIG devices", "use time-slicing on this node, or mig_strategy none"),
)


class PluginExit(KubegpuError):
    """NVIDIA's device plugin would exit on ``node`` (and advertise nothing there) for ``reason``, its own words."""

    def __init__(self, node, reason, message=None):
        self.node = node
        self.reason = reason
        hint = next((text for word, text in _HINTS if word in reason), "")
        default = "node %s: NVIDIA's device plugin would exit there: %s%s" % (node, reason, "; " + hint if hint else "")
        super(PluginExit, self).__init__(message or default, nodes={node: reason})


class NoMpsDaemon(PluginExit):
    """NVIDIA's device plugin would wait on ``node`` for an MPS control daemon that cannot run there, and so advertise
    nothing: the daemon runs only on nodes labelled ``nvidia.com/mps.capable=true``, and GPU feature discovery (like
    gpu_node_labels, which follows it) does not label this node so, for ``reason`` (GFD's own)."""

    def __init__(self, node, reason):
        super(NoMpsDaemon, self).__init__(
            node, reason,
            "node %s: NVIDIA's device plugin would advertise nothing there: it shares the GPUs with MPS and waits for "
            "NVIDIA's MPS control daemon, which runs only on nodes labelled %s=true, and GPU feature discovery labels "
            "nothing on this node (%s); %s" % (node, LABEL_MPS_CAPABLE, reason, _mps_hint(reason)))


def _mps_hint(reason):
    if "mig devices" in reason:
        return ("turn MIG off on its GPUs (mig_config all-disabled), or give the node a config without MPS "
                "(time-slicing, or mig_strategy single or mixed for its MIG devices)")
    return "mend what GFD reports (gpu_facts shows the NVML answers), or give the node a config without MPS"


class _Exit(Exception):
    """The plugin's reason to exit, raised inside the walk."""


def advertised(node):
    """What a node advertises: its ``nvidia.com/*`` allocatable counts."""
    return k8s_objects.allocatable(node, RESOURCE_PREFIX)


def _failed(obj, *calls):
    """The first of ``calls`` NVML did not answer for ``obj`` (a fact's device or MIG device), as ``(call, code)``."""
    returns = obj.get("nvml_returns") or {}
    for call in calls:
        if call in returns:
            return call, returns[call]
    return None


def _mig_mode(device, index):
    """``(capable, enabled)`` as go-nvlib's IsMigCapable/IsMigEnabled answer: NOT_SUPPORTED means no MIG; any other
    failure ends the walk."""
    failed = _failed(device, "nvmlDeviceGetMigMode")
    if failed and failed[1] != "NOT_SUPPORTED":
        raise _Exit("error visiting device: error checking if MIG is enabled on GPU %d: error getting MIG mode: %s"
                    % (index, failed[1]))
    mig = device.get("mig") or {}
    enabled = bool(mig.get("current")) and not failed
    return (bool(mig.get("capable")) or enabled) and not failed, enabled


def _migs(device):
    return (device.get("mig") or {}).get("devices") or []


def _visit_devices(devices):
    """go-nvlib VisitDevices: the handle, then the name (isSkipped) of every GPU."""
    for device in devices:
        index = device.get("index", 0)
        failed = _failed(device, "nvmlDeviceGetHandleByIndex")
        lost = (device.get("errors") or {}).get("handle")  # a fact from before nvml_returns was recorded
        if failed or lost:
            raise _Exit("error getting device handle for index '%d': %s" % (index, failed[1] if failed else lost))
        failed = _failed(device, "nvmlDeviceGetName")
        if failed:
            raise _Exit("error visiting device: error getting device name: %s" % failed[1])


def _build_device(device, index):
    """internal/rm/devices.go BuildDevice for a GPU: UUID, paths (minor number), NUMA (PCI info), compute capability."""
    for call, step in (("nvmlDeviceGetUUID", "error getting UUID device"),
                       ("nvmlDeviceGetMinorNumber", "error getting device paths"),
                       ("nvmlDeviceGetPciInfo", "error getting device NUMA node"),
                       ("nvmlDeviceGetCudaComputeCapability", "error getting device compute capability")):
        failed = _failed(device, call)
        if failed:
            raise _Exit("error visiting device %d: %s: %s" % (index, step, failed[1]))


def _mig_resources(devices):
    """The MIG resources the plugin adds under ``mixed``: ``{profile: resource}`` for every profile the MIG-capable
    GPUs offer whose compute and GPU instance sizes are equal (AddDefaultResourcesToConfig, VisitMigProfiles)."""
    resources = {}
    for device in devices:
        if not _mig_mode(device, device.get("index", 0))[0]:
            continue
        failed = _failed(device, "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetGpuInstanceProfileInfo")
        if failed and failed[0] == "nvmlDeviceGetMemoryInfo":
            raise _Exit("unable to add default resources to config: error visiting device: error getting device "
                        "memory info: %s" % failed[1])
        if failed:
            raise _Exit("unable to add default resources to config: error visiting device: error getting GPU "
                        "Instance profile info: %s" % failed[1])
        profiles = list((device.get("mig") or {}).get("profiles") or [])
        # A MIG device's own profile is one the GPU offers, whatever the fact listed.
        profiles.extend(m.get("profile") for m in _migs(device) if m.get("profile"))
        for profile in profiles:
            parts = naming.mig_profile_parts(profile)
            if parts and parts[0] == parts[1]:
                resources.setdefault(profile, MIG_RESOURCE_PREFIX + profile.replace("+", "."))
    return resources


def _mig_device_resource(device, mig, gpu_index, slot, mig_strategy, resources):
    """The resource a MIG device goes under (buildMigDeviceMap), after go-nvlib's GetProfile (the parent's memory
    first, then the device's attributes, instance ids and profile infos) and BuildDevice."""
    failed = _failed(device, "nvmlDeviceGetMemoryInfo") or _failed(
        mig, "nvmlDeviceGetAttributes", "nvmlDeviceGetGpuInstanceId", "nvmlDeviceGetComputeInstanceId",
        "nvmlDeviceGetGpuInstanceById", "nvmlGpuInstanceGetComputeInstanceById", "nvmlGpuInstanceGetInfo",
        "nvmlComputeInstanceGetInfo", "nvmlGpuInstanceGetComputeInstanceProfileInfo", "profile")
    if failed or not mig.get("profile"):
        raise _Exit("error getting MIG profile for MIG device at index '(%d, %d)': %s"
                    % (gpu_index, slot, failed[1] if failed else "no matching profile IDs found"))
    profile = mig["profile"]
    if mig_strategy == "single":
        resource = RESOURCE_GPU
    elif profile in resources:
        resource = resources[profile]
    else:
        raise _Exit("MIG profile '%s' does not match any resource patterns" % profile)
    failed = _failed(mig, "nvmlDeviceGetUUID")
    if failed:
        raise _Exit("error visiting MIG device %d:%d: error getting UUID device: %s" % (gpu_index, slot, failed[1]))
    return resource


def _device_map(devices, mig_strategy):
    """``{resource: [(GPU index, MIG device or None), ...]}`` before sharing, as rm.NewDeviceMap builds it; raises
    :class:`_Exit`."""
    counts = {}

    def add(name, index, mig=None):
        counts.setdefault(name, []).append((index, mig))

    _visit_devices(devices)
    resources = _mig_resources(devices) if mig_strategy == "mixed" else {}
    full = 0
    for device in devices:
        index = device.get("index", 0)
        if _mig_mode(device, index)[1] and mig_strategy != "none":
            continue
        _build_device(device, index)
        add(RESOURCE_GPU, index)
        full += 1
    if mig_strategy == "none":
        return counts

    migs = 0
    for device in devices:
        index = device.get("index", 0)
        if not _mig_mode(device, index)[0]:
            continue
        failed = _failed(device, "nvmlDeviceGetMaxMigDeviceCount", "nvmlDeviceGetMigDeviceHandleByIndex")
        if failed:
            raise _Exit("error visiting MIG devices of device %d: %s" % (index, failed[1]))
        for slot, mig in enumerate(_migs(device)):
            add(_mig_device_resource(device, mig, index, slot, mig_strategy, resources), index, mig)
            migs += 1

    if mig_strategy == "single":
        for device in devices:
            index = device.get("index", 0)
            if _mig_mode(device, index)[1] and not _migs(device):
                raise _Exit("invalid MIG configuration: at least one device with migEnabled=true was not configured "
                            "correctly: error visiting device: device %d has no MIG devices configured" % index)
        # the plugin compares the whole nvmlDeviceAttributes_t; a fact without attributes (an older gpu_facts) still
        # tells different profiles apart, which always differ in them
        types = set((m.get("profile"), repr(sorted((m.get("attributes") or {}).items())))
                    for d in devices for m in _migs(d))
        if len(types) > 1:
            raise _Exit("invalid MIG configuration: more than one MIG device type present on node")
        if full and migs:
            raise _Exit("all devices on the node must be configured with the same migEnabled value")
    return counts


def expected_from_fact(config, gpu, node="node", health=None):
    """What a node with the ``gpu`` fact advertises under ``config`` (:func:`build_config`'s result), as
    ``{resource: allocatable count}``; ``{}`` for a node without GPUs NVML answers for. ``health`` is the
    ``health_checks`` option (:mod:`.health`): devices the plugin marks unhealthy are left out. Raises
    :class:`PluginExit` naming the node and the plugin's reason where the plugin would exit, and :class:`NoMpsDaemon`
    where it would wait for an MPS control daemon that cannot run there (either way it advertises nothing)."""
    gpu = gpu or {}
    if not gpu.get("present") or not gpu.get("count"):
        return {}
    flags = config.get("flags") or {}
    mig_strategy = flags.get("migStrategy") or "none"
    devices = [d for d in gpu.get("devices") or [] if isinstance(d, dict)]
    try:
        members = _device_map(devices, mig_strategy)
        has_mig_devices = mig_strategy != "none" and any(
            _migs(d) for d in devices if _mig_mode(d, d.get("index", 0))[1])
        for strategy, section in (config.get("sharing") or {}).items():
            if strategy == "mps" and has_mig_devices:
                raise _Exit("sharing using MPS is not supported for MIG devices")
            shared = {}
            for res in section.get("resources") or []:
                have = members.pop(res["name"], [])
                if not have:
                    continue
                target = res["name"] + SHARED_SUFFIX if section.get("renameByDefault") else res["name"]
                shared.setdefault(target, []).extend(have * res["replicas"])
            members.update(shared)
    except _Exit as exc:
        raise PluginExit(node, str(exc))
    members = dict((k, v) for k, v in members.items() if v)
    if members and gfd.sharing(config)[0] == "mps":
        # the plugin starts only once NVIDIA's MPS control daemon answers, and that daemon runs only where
        # nvidia.com/mps.capable=true, which GFD (or gpu_node_labels by its rules) writes only where GFD labels
        why = gfd.exit_reason(gpu, config)
        if why:
            raise NoMpsDaemon(node, why)
    bad = health_rules.unhealthy(gpu, members, health_rules.settings(health))
    return dict(sorted((k, len(v) - bad.get(k, 0)) for k, v in members.items()))


def expected_from_facts(params, facts, config=None, configs=None):
    """``{node: {resource: count}}`` for every node of ``facts`` (node name to ``gpu`` fact) that has GPUs, each
    under its config: ``configs`` maps a node to its plugin config, ``config`` (built from ``params`` when not given)
    is the rest's. Every node the plugin would exit on is named in one error."""
    config = config if config is not None else build_config(params)
    configs = configs or {}
    out = {}
    exits = []
    for node, gpu in sorted((facts or {}).items()):
        try:
            counts = expected_from_fact(configs.get(node, config), gpu, node, params.get("health_checks"))
        except PluginExit as exc:
            exits.append(exc)
            continue
        if counts:
            out[node] = counts
    if len(exits) == 1:
        raise exits[0]
    if exits:
        raise KubegpuError("NVIDIA's device plugin would exit on %d nodes: %s"
                           % (len(exits), "; ".join(e.message for e in exits)),
                           nodes=dict((e.node, e.reason) for e in exits))
    return out


def facts_by_node(params):
    """``facts`` keyed by Kubernetes node name (``node_names`` maps inventory names); every value must be a gpu fact."""
    names = params.get("node_names") or {}
    by_node = {}
    for host, gpu in (params.get("facts") or {}).items():
        if not isinstance(gpu, dict) or "present" not in gpu:
            raise OptionError("facts", "%s has no gpu fact (run kubegpu.cluster.gpu_facts on it first)" % host)
        by_node[names.get(host) or host] = gpu
    return by_node


def expected(params, config, configs=None):
    """``{node: {resource: count}}`` to wait for: ``expected`` as given, else worked out from ``facts`` (node name, or
    inventory name mapped by ``node_names``, to its ``gpu`` fact) under ``config`` and the per-node ``configs``."""
    if params.get("expected"):
        return expected_counts(params["expected"])
    return expected_from_facts(params, facts_by_node(params), config, configs)
