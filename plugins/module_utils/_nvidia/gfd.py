# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The labels GPU feature discovery (GFD, k8s-device-plugin v0.20.0) writes for a node, computed from the node's
``gpu`` fact and the device plugin config GFD reads (the dict :func:`.plugin_config.build_config` returns). Pure
functions: :func:`labels` is GFD's whole label set as far as the fact tells it; :func:`owns` says which keys are GFD's.

Rules, each from NVIDIA/k8s-device-plugin (files under ``internal/``):

* ``lm/nvml.go`` NewDeviceLabeler merges, later winning: the version labels, ``mig.capable``, ``mps.capable``, the
  resource labels, ``gpu.mode``. newVersionLabeler splits the driver version ``X.Y[.Z]`` (``revision`` is ``""`` for
  ``X.Y``), writes ``cuda.driver-version.*`` and ``cuda.runtime-version.*`` (the CUDA version of the driver) and the
  deprecated ``cuda.driver.*`` / ``cuda.runtime.*``. ``mig.capable`` is true when any GPU is MIG capable.
  newSharingLabeler: ``mps.capable`` is ``false`` unless the sharing strategy is MPS; with MPS it is ``true``, and GFD
  fails when a GPU has MIG enabled (isMPSCapable). newGPUModeLabeler: the PCI class of the GPUs (``0x030000``
  graphics, ``0x030200`` compute, anything else, or GPUs of different classes, unknown), read from sysfs.
* ``lm/mig-strategy.go`` newGPULabelers: whole-GPU labels per model, counted over every GPU of that model; GPUs with
  MIG enabled are labelled without sharing (``replicas`` 0, no ``-SHARED``), GPUs without MIG with the config, and the
  latter are merged last. With two models on a node every model writes the same ``nvidia.com/gpu.*`` keys and Go's
  random map order picks the winner, so GFD's choice is random and this module does not claim to match it: it is
  deterministic instead, the model of the first GPU (NVML index order) among those without MIG (or, when every GPU
  has MIG enabled, among all), with the count of that model.
  ``mig.strategy`` is written unless the strategy is ``none``. ``single``: nothing more without MIG-enabled GPUs; a
  MIG-enabled GPU without MIG devices, a mix of MIG-enabled and other GPUs, or more than one MIG profile give
  ``<model>-MIG-INVALID`` with count, replicas and memory 0 and an empty ``sharing-strategy``; else ``nvidia.com/gpu.*`` describes the MIG devices.
  ``mixed``: ``nvidia.com/mig-<profile>.*`` per profile (MIG-enabled GPUs without MIG devices are ignored).
* ``lm/resource.go``: per resource ``product`` (parts sanitised and joined with ``-``; ``-SHARED`` appended when the
  resource has more than one replica and is not renamed), ``count``, ``replicas`` (0 without sharing config, the
  configured replicas, else 1), ``sharing-strategy`` (the node's strategy when replicas > 1, else ``none``);
  ``memory`` (MiB, when not 0), ``family``, ``compute.major``, ``compute.minor`` (when the major is not 0) for whole
  GPUs; for MIG devices ``<model>-MIG-<profile>`` and the attributes of ``resource/nvml-mig-device.go`` GetAttributes
  (``memory``, ``multiprocessors``, ``slices.gi``, ``slices.ci``, ``engines.{copy,decoder,encoder,jpeg,ofa}``); a MIG
  device's name is its profile with ``+`` turned into ``.``.
* The sharing strategy and replicated resources follow the plugin config (``api/config/v1/sharing.go``): MPS when an
  MPS resource has more than one replica, else time-slicing when a time-slicing one does, else none;
  ``renameByDefault`` renames every shared resource.

* GFD exits, and labels nothing, where a step of that path fails (:func:`exit_reason`): a lost GPU, a driver or CUDA
  driver version NVML does not give, a compute capability NVML does not give, a MIG mode other than "not supported"
  it cannot read, MPS on a GPU in MIG mode, a MIG device it cannot name. :func:`labels` is then ``{}``.

What the fact cannot tell is left to GFD: ``gpu.machine`` (DMI), ``gfd.timestamp``, vGPU, IMEX and fabric labels,
``gpu.mode`` when the fact's PCI scan does not hold the GPU, and MIG engine counts when the fact lacks the device's
NVML attributes. Label values are also cut to 63 characters and trimmed to a valid value, where GFD would write a
value Kubernetes refuses.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from collections.abc import Mapping

from ansible_collections.kubegpu.cluster.plugins.module_utils import _host
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import OptionError
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import names
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import naming
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.constants import (
    DEFAULT_MIG_STRATEGY, LABEL_DRIVER_FULL, LABEL_DRIVER_MAJOR, LABEL_DRIVER_MAJOR_OLD, LABEL_DRIVER_MINOR,
    LABEL_DRIVER_MINOR_OLD, LABEL_DRIVER_REV_OLD, LABEL_DRIVER_REVISION, LABEL_GPU_MODE, LABEL_MIG_CAPABLE,
    LABEL_MIG_STRATEGY, LABEL_MPS_CAPABLE, LABEL_RUNTIME_FULL, LABEL_RUNTIME_MAJOR, LABEL_RUNTIME_MAJOR_OLD,
    LABEL_RUNTIME_MINOR, LABEL_RUNTIME_MINOR_OLD, MIG_RESOURCE_PREFIX, NOT_GFD_LABELS, NOT_GFD_PREFIXES, RESOURCE_GPU,
    RESOURCE_PREFIX, resource,
)

# GFD's label families (internal/lm): everything it writes starts with one of these.
GFD_PREFIXES = (RESOURCE_GPU + ".", MIG_RESOURCE_PREFIX, RESOURCE_PREFIX + "/cuda.", RESOURCE_PREFIX + "/vgpu.",
                RESOURCE_PREFIX + "/gfd.")
GFD_LABELS = (LABEL_MIG_CAPABLE, LABEL_MIG_STRATEGY, LABEL_MPS_CAPABLE)

# resource/nvml-mig-device.go GetAttributes: label suffix -> nvmlDeviceAttributes_t field (gpu_facts' attributes)
MIG_ATTRIBUTES = (
    ("memory", "memorySizeMB"),
    ("multiprocessors", "multiprocessorCount"),
    ("slices.gi", "gpuInstanceSliceCount"),
    ("slices.ci", "computeInstanceSliceCount"),
    ("engines.copy", "sharedCopyEngineCount"),
    ("engines.decoder", "sharedDecoderCount"),
    ("engines.encoder", "sharedEncoderCount"),
    ("engines.jpeg", "sharedJpegCount"),
    ("engines.ofa", "sharedOfaCount"),
)
# lm/nvml.go newGPUModeLabeler
GPU_MODES = {"0x030000": "graphics", "0x030200": "compute"}
_PROFILE_SLICES = re.compile(r"^(?:(?P<c>\d+)c\.)?(?P<g>\d+)g\.")


def owns(key):
    """Whether ``key`` is one of GPU feature discovery's labels (``nvidia.com/gpu.present`` and the deploy labels are
    not: they are ours and the GPU Operator's)."""
    if key in NOT_GFD_LABELS or key.startswith(NOT_GFD_PREFIXES):
        return False
    return key in GFD_LABELS or key.startswith(GFD_PREFIXES)


def gfd_sanitise(text):
    """GFD's ``sanitise`` (lm/resource.go): drop what is not a letter, digit, ``-``, ``_``, ``.`` or blank, and join the
    blank-separated words with ``-``."""
    kept = re.sub(r"[^A-Za-z0-9_. -]", "", text or "", flags=re.ASCII)
    return "-".join(kept.split())


def valid_value(text):
    """``text`` made a valid label value: leading and trailing characters that are not alphanumeric stripped, at most
    63 characters. May return ``""``."""
    value = re.sub(r"^[^A-Za-z0-9]+", "", text or "")
    value = value[:names.LABEL_VALUE_MAX]
    return re.sub(r"[^A-Za-z0-9]+$", "", value)


def split_driver_version(version):
    """``510.47.03`` -> ``("510", "47", "03")``; ``390.30`` -> ``("390", "30", None)``; anything else -> None.

    Parts are kept as text (GFD keeps ``03``, not ``3``); a fourth part stays in the revision (``03.1``).
    """
    if not isinstance(version, str):
        return None
    parts = version.strip().split(".", 2)
    if len(parts) < 2 or not all(parts) or not all(names.is_valid_label_value(part) for part in parts):
        return None
    return parts[0], parts[1], parts[2] if len(parts) == 3 else None


def has_gpu(facts):
    """A node has GPUs for labelling when its facts say so and NVML counted at least one."""
    try:
        count = int(facts.get("count") or 0)
    except (TypeError, ValueError):
        count = 0
    return bool(facts.get("present")) and count > 0


# ---- the plugin config GFD reads ----------------------------------------------------------------------------


def mig_strategy(config):
    return ((config or {}).get("flags") or {}).get("migStrategy") or DEFAULT_MIG_STRATEGY


def _replicated(section):
    return any(isinstance(r, Mapping) and isinstance(r.get("replicas"), int) and r["replicas"] > 1
               for r in (section or {}).get("resources") or [])


def sharing(config):
    """``(strategy, {resource name: (replicas, renamed)})`` of the config: ``mps``, ``time-slicing`` or ``none``, and
    the resources of the active section (api/config/v1 SharingStrategy, ReplicatedResources)."""
    section = (config or {}).get("sharing") or {}
    if _replicated(section.get("mps")):
        strategy, active = "mps", section["mps"]
    elif _replicated(section.get("timeSlicing")):
        strategy, active = "time-slicing", section["timeSlicing"]
    else:
        strategy, active = "none", section.get("timeSlicing") or {}
    rename = bool(active.get("renameByDefault"))
    replicated = {}
    for entry in active.get("resources") or []:
        if isinstance(entry, Mapping) and entry.get("name"):
            replicas = entry.get("replicas")
            replicated[resource(entry["name"])] = (replicas if isinstance(replicas, int) else 0,
                                                   rename or bool(entry.get("rename")))
    return strategy, replicated


# ---- the devices in the fact --------------------------------------------------------------------------------


def named_devices(facts):
    """The GPUs of the fact that have a name, in NVML index order."""
    return [d for d in facts.get("devices") or [] if isinstance(d, Mapping) and d.get("name")]


def mig_enabled(device):
    return bool((device.get("mig") or {}).get("current"))


def mig_devices(device):
    return [m for m in (device.get("mig") or {}).get("devices") or [] if isinstance(m, Mapping)]


def mig_name(mig):
    """A MIG device's name as GFD gives it: its profile with ``+`` turned into ``.`` (``1g.10gb+me`` ->
    ``1g.10gb.me``); None when the fact has no profile."""
    profile = mig.get("profile")
    return profile.replace("+", ".") if isinstance(profile, str) and profile else None


def mig_attributes(mig):
    """``{suffix: value}`` of the MIG attribute labels the fact can tell: from its NVML ``attributes`` when present,
    else memory and multiprocessors from their own keys and the slices from the profile name."""
    attributes = mig.get("attributes")
    out = {}
    if isinstance(attributes, Mapping):
        for suffix, field in MIG_ATTRIBUTES:
            if isinstance(attributes.get(field), int):
                out[suffix] = attributes[field]
        return out
    if isinstance(mig.get("memory_mib"), int):
        out["memory"] = mig["memory_mib"]
    if isinstance(mig.get("multiprocessor_count"), int):
        out["multiprocessors"] = mig["multiprocessor_count"]
    match = _PROFILE_SLICES.match(mig.get("profile") or "")
    if match:
        out["slices.gi"] = int(match.group("g"))
        out["slices.ci"] = int(match.group("c") or match.group("g"))
    return out


def _compute_capability(device):
    text = device.get("compute_capability")
    match = re.match(r"^(\d+)\.(\d+)$", text) if isinstance(text, str) else None
    return (int(match.group(1)), int(match.group(2))) if match else None


# ---- label builders -----------------------------------------------------------------------------------------


def _resource_labels(name, config, node_strategy, replicated, count, parts):
    """product, count, replicas and sharing-strategy of one resource (lm/resource.go baseLabeler). ``config`` None:
    sharing disabled (GPUs with MIG enabled)."""
    info = None if config is None else replicated.get(name)
    if config is None:
        replicas = 0
    elif info is not None and info[0] > 0:
        replicas = info[0]
    else:
        replicas = 1
    product = [gfd_sanitise(p) for p in parts if p]
    if info is not None and info[0] > 1 and not info[1]:
        product.append("SHARED")
    labels = {name + ".count": str(count), name + ".replicas": str(replicas),
              name + ".sharing-strategy": node_strategy if config is not None and replicas > 1 else "none"}
    value = valid_value("-".join(product))
    if value:
        labels[name + ".product"] = value
    return labels


def node_model(devices):
    """``(device, sharing applies)``: the GPU whose model the whole-GPU labels describe (see the module's doc)."""
    full = [d for d in devices if not mig_enabled(d)]
    return (full[0], True) if full else (devices[0], False)


def _whole_gpu_labels(devices, config, node_strategy, replicated):
    device, shared = node_model(devices)
    with_config = config if shared else None
    count = sum(1 for d in devices if d["name"] == device["name"])
    labels = _resource_labels(RESOURCE_GPU, with_config, node_strategy, replicated, count, [device["name"]])
    # memory and compute capability come from the GPU GFD builds the model's labeler from: the model's last one
    device = [d for d in _last_of_each_model(devices)
              if d["name"] == device["name"] and mig_enabled(d) == mig_enabled(device)][0]
    memory = device.get("memory_total_mib")
    if isinstance(memory, int) and not isinstance(memory, bool) and memory > 0:
        labels[RESOURCE_GPU + ".memory"] = str(memory)
    capability = _compute_capability(device)
    if capability is not None and capability[0] != 0:
        labels[RESOURCE_GPU + ".family"] = naming.architecture_family(capability) or "undefined"
        labels[RESOURCE_GPU + ".compute.major"] = str(capability[0])
        labels[RESOURCE_GPU + ".compute.minor"] = str(capability[1])
    return labels


def _mig_resource_labels(name, config, node_strategy, replicated, parent, mig, count):
    labels = _resource_labels(name, config, node_strategy, replicated, count, [parent["name"], "MIG", mig_name(mig)])
    for suffix, value in mig_attributes(mig).items():
        labels["%s.%s" % (name, suffix)] = str(value)
    return labels


def _invalid_single(device):
    """lm/mig-strategy.go newInvalidMigStrategyLabeler: count, replicas and memory 0, and an empty sharing strategy
    (merged after the whole-GPU labels, so it replaces their ``none`` or ``time-slicing``)."""
    labels = {RESOURCE_GPU + ".count": "0", RESOURCE_GPU + ".replicas": "0", RESOURCE_GPU + ".memory": "0",
              RESOURCE_GPU + ".sharing-strategy": ""}
    value = valid_value("-".join([gfd_sanitise(device["name"]), "MIG", "INVALID"]))
    if value:
        labels[RESOURCE_GPU + ".product"] = value
    return labels


def _profiles_in_order(devices):
    """``[(name, parent, first MIG device, count)]`` of every MIG profile, in the order GFD meets them."""
    found = {}
    order = []
    for device in devices:
        if not mig_enabled(device):
            continue
        for mig in mig_devices(device):
            name = mig_name(mig)
            if name is None:
                continue
            if name not in found:
                found[name] = [device, mig, 0]
                order.append(name)
            found[name][2] += 1
    return [(name, found[name][0], found[name][1], found[name][2]) for name in order]


def _mig_labels(devices, config, strategy, node_strategy, replicated):
    enabled = [d for d in devices if mig_enabled(d)]
    if strategy == "single":
        if not enabled:
            return {}
        if any(not mig_devices(d) for d in enabled) or len(enabled) != len(devices):
            return _invalid_single(enabled[0])
        profiles = _profiles_in_order(devices)
        if len(profiles) != 1:
            return _invalid_single(enabled[0])
        name, parent, mig, count = profiles[0]
        return _mig_resource_labels(RESOURCE_GPU, config, node_strategy, replicated, parent, mig, count)
    labels = {}
    for name, parent, mig, count in _profiles_in_order(devices):
        labels.update(_mig_resource_labels(MIG_RESOURCE_PREFIX + name, config, node_strategy, replicated, parent, mig,
                                           count))
    return labels


def version_labels(facts):
    """The driver and CUDA version labels, new and deprecated (lm/nvml.go newVersionLabeler)."""
    labels = {}
    driver = split_driver_version(facts.get("driver_version"))
    if driver is not None:
        revision = driver[2] or ""
        labels.update({LABEL_DRIVER_MAJOR: driver[0], LABEL_DRIVER_MINOR: driver[1], LABEL_DRIVER_REVISION: revision,
                       LABEL_DRIVER_FULL: facts["driver_version"].strip(), LABEL_DRIVER_MAJOR_OLD: driver[0],
                       LABEL_DRIVER_MINOR_OLD: driver[1], LABEL_DRIVER_REV_OLD: revision})
    cuda = split_driver_version(facts.get("cuda_driver_version"))
    if cuda is not None and cuda[2] is None:
        labels.update({LABEL_RUNTIME_MAJOR: cuda[0], LABEL_RUNTIME_MINOR: cuda[1],
                       LABEL_RUNTIME_FULL: "%s.%s" % cuda[:2], LABEL_RUNTIME_MAJOR_OLD: cuda[0],
                       LABEL_RUNTIME_MINOR_OLD: cuda[1]})
    return labels


def gpu_mode(facts, devices):
    """``gpu.mode`` from the PCI classes of the GPUs (lm/nvml.go getModeForClasses: ``unknown`` unless they are all
    the same), or None when the fact's PCI scan does not hold every GPU."""
    classes = dict((str(p.get("address", "")).lower(), p.get("class")) for p in facts.get("pci") or []
                   if isinstance(p, Mapping))
    found = []
    for device in devices:
        address = _host.sysfs_address(device.get("pci_bus_id"))
        if address not in classes:
            return None
        found.append(classes[address])
    if not found:
        return None
    return GPU_MODES.get(found[0], "unknown") if len(set(found)) == 1 else "unknown"


def _returned(obj, *calls):
    """The first of ``calls`` NVML did not answer for ``obj`` (a fact, a GPU or a MIG device), as ``(call, code)``."""
    returns = (obj or {}).get("nvml_returns") or {}
    return next(((call, returns[call]) for call in calls if call in returns), None)


def _last_of_each_model(devices):
    """The GPU whose labels GFD builds for each model (lm/mig-strategy.go newGPULabelers keeps a Go map from name to
    device, each GPU of the model overwriting the one before): the last one, among the GPUs with MIG on and apart
    among the others."""
    kept = {}
    for device in devices:
        kept[(mig_enabled(device), device["name"])] = device
    return list(kept.values())


def exit_reason(facts, config):
    """Why GPU feature discovery would exit on a node with this ``gpu`` fact under ``config`` (and so label nothing
    there), in GFD's words; None where it labels. Read from GFD's path (internal/lm/nvml.go NewDeviceLabeler, in that
    order): the GPUs (go-nvlib VisitDevices: a lost GPU, a name NVML does not give), the version labeler (the driver
    version, ``X.Y[.Z]``, and the CUDA driver version from the first ``nvmlSystemGetCudaDriverVersion``), the MIG
    capability, the MPS labeler (MPS with a GPU in MIG mode), and the resource labels (the compute capability of the
    GPU labelled for each model, and under ``single`` or ``mixed`` the MIG devices' profiles and attributes). A memory
    size NVML does not give is only a warning in GFD (lm/resource.go) and leaves ``gpu.memory`` out; a PCI class it
    cannot read gives ``gpu.mode=unknown``."""
    if not isinstance(facts, Mapping) or not has_gpu(facts):
        return None
    for index, device in enumerate(facts.get("devices") or []):
        if not isinstance(device, Mapping):
            continue
        failed = _returned(device, "nvmlDeviceGetHandleByIndex")
        lost = (device.get("errors") or {}).get("handle")
        if failed or lost:
            return "error getting devices: error getting device handle for index '%d': %s" % (
                device.get("index", index), failed[1] if failed else lost)
        failed = _returned(device, "nvmlDeviceGetName")
        if failed:
            return "error getting devices: error getting device name: %s" % failed[1]
    failed = _returned(facts, "nvmlSystemGetDriverVersion")
    version = facts.get("driver_version")
    if failed or (version is not None and split_driver_version(version) is None):
        return ("failed to construct version labeler: error getting driver version: %s"
                % (failed[1] if failed else "Version %r does not match format X.Y[.Z]" % facts.get("driver_version")))
    failed = _returned(facts, "nvmlSystemGetCudaDriverVersion")
    if failed:
        return "failed to construct version labeler: error getting cuda driver version: %s" % failed[1]
    devices = named_devices(facts)
    for device in devices:
        failed = _returned(device, "nvmlDeviceGetMigMode")
        if failed and failed[1] != "NOT_SUPPORTED":
            return ("error creating mig capability labeler: error getting mig capability: error getting MIG mode: %s"
                    % failed[1])
    if sharing(config)[0] == "mps" and any(mig_enabled(d) for d in devices):
        return ("error creating sharing labeler: failed to check MPS-capable: MPS sharing is not supported for mig "
                "devices")
    for device in _last_of_each_model(devices):
        failed = _returned(device, "nvmlDeviceGetCudaComputeCapability")
        if failed:
            return ("error creating resource labeler: failed to construct GPU labeler: failed to construct labeler: "
                    "failed to create architecture labels: failed to determine CUDA compute capability: %s" % failed[1])
    if mig_strategy(config) != "none":
        for device in devices:
            if not mig_enabled(device):
                continue
            failed = _returned(device, "nvmlDeviceGetMaxMigDeviceCount", "nvmlDeviceGetMigDeviceHandleByIndex")
            if failed:
                return ("error creating resource labeler: failed to construct MIG resource labeler: unable to "
                        "retrieve list of MIG devices: %s" % failed[1])
            for mig in mig_devices(device):
                failed = _returned(mig, "nvmlDeviceGetAttributes")
                if not mig.get("profile") or failed:
                    return ("error creating resource labeler: failed to construct MIG resource labeler: %s"
                            % ("unable to get MIG device name: failed to get MIG profile" if not mig.get("profile")
                               else "faled to get MIG attribute labels: unable to get attributes of MIG device: %s"
                               % failed[1]))
    return None


def labels(facts, config):
    """GFD's labels for a node with this ``gpu`` fact under the plugin ``config``; ``{}`` for a node without GPUs, and
    for a node GFD would exit on (:func:`exit_reason`), where GFD labels nothing.

    Raises :class:`OptionError` (option ``sharing``) where the config is what makes GFD fail: MPS sharing on a node
    with a GPU in MIG mode.
    """
    if not isinstance(facts, Mapping) or not has_gpu(facts):
        return {}
    config = config or {}
    devices = named_devices(facts)
    node_strategy, replicated = sharing(config)
    if node_strategy == "mps" and any(mig_enabled(d) for d in devices):
        raise OptionError("sharing", "MPS sharing is not supported for MIG devices: a GPU of this node has MIG "
                          "enabled, and GPU feature discovery (and the device plugin) refuse MPS there; disable MIG "
                          "on it or choose time-slicing")
    if exit_reason(facts, config):
        return {}
    out = version_labels(facts)
    out[LABEL_MIG_CAPABLE] = "true" if any((d.get("mig") or {}).get("capable") for d in devices) else "false"
    out[LABEL_MPS_CAPABLE] = "true" if node_strategy == "mps" else "false"
    if devices:
        out.update(_whole_gpu_labels(devices, config, node_strategy, replicated))
        strategy = mig_strategy(config)
        if strategy != "none":
            out[LABEL_MIG_STRATEGY] = strategy
            out.update(_mig_labels(devices, config, strategy, node_strategy, replicated))
        mode = gpu_mode(facts, devices)
        if mode is not None:
            out[LABEL_GPU_MODE] = mode
    return out
