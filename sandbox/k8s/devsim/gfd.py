# SPDX-License-Identifier: GPL-3.0-or-later
"""GPU feature discovery (GFD, k8s-device-plugin v0.20.0) in the simulator: which pods run it, and the labels it
computes for a node from the node's GPU profile (the JSON the fake NVML reads) and the plugin config GFD reads.

This is the simulator's own reading of GFD's rules (NVIDIA/k8s-device-plugin ``internal/lm``), written apart from the
collection's (``plugins/module_utils/_nvidia/gfd.py``); tests/sandbox/unit/test_gfd_matches_devsim.py compares the
two on every shipped profile. Pure functions; the loop that writes the ``NodeFeature`` object is in ``nfd.py``.

Rules (files under ``internal/``):

* A GFD pod has a container whose image contains ``k8s-device-plugin`` and whose command is
  ``gpu-feature-discovery`` (the plugin's chart and the collection run it so). Its config comes as the plugin's does
  (``--config-file``/``CONFIG_FILE``, mounted ConfigMap; ``MIG_STRATEGY``/``--mig-strategy`` override it), read with
  ``podconfig``; ``flags.gfd.noTimestamp``, ``GFD_NO_TIMESTAMP`` or ``--no-timestamp`` drop ``gfd.timestamp``.
* GFD writes its labels to a ``NodeFeature`` named ``nvidia-features-for-<node>`` in its own namespace, labelled
  ``nfd.node.kubernetes.io/node-name=<node>``, with empty features (lm/output.go); creating it fails while the
  NodeFeature CRD is not served.
* Labelers, merged in this order, later ones overriding (lm/labeler.go, lm/nvml.go NewDeviceLabeler):
  ``gpu.machine`` (the DMI product name, ``unknown`` where it cannot be read: here always), the driver and CUDA
  version labels (new and deprecated forms; revision ``""`` for a two-part driver version), ``mig.capable`` (any GPU),
  ``mps.capable`` (``false`` unless MPS shares the GPUs; GFD fails with MPS on a GPU in MIG mode), the resource labels
  (lm/mig-strategy.go, lm/resource.go), ``gpu.mode`` (the GPUs' PCI class, ``unknown`` when they differ), then
  ``gfd.timestamp``.
* Whole GPUs: one labeler per model, counting every GPU of that model; models with MIG on get no sharing (replicas
  0, strategy none), the others the config. All write ``nvidia.com/gpu.*``, so with two models the winner is Go's map
  order; the simulator takes the model of the first GPU with MIG off (or the first GPU when all have MIG on), the
  rule the collection documents.
* ``mig.strategy`` unless ``none``. single: MIG devices of one profile on GPUs that all have MIG on, else
  ``<model>-MIG-INVALID`` with count, replicas and memory 0; mixed: ``nvidia.com/mig-<profile>.*`` per profile. MIG
  labels: product ``<model>-MIG-<profile>`` (``+`` in a profile becomes ``.``), count, replicas, sharing-strategy and the
  device's attributes (memory, multiprocessors, slices, shared engines).
* Product: each part with characters other than ``[A-Za-z0-9-_. ]`` dropped and blanks joined by ``-``; ``-SHARED``
  when the resource has more than one replica and is not renamed (``renameByDefault``).

Where the simulator guesses (no GPU, no sysfs here): the PCI class, which the profiles do not hold, is ``0x030000``
(VGA, ``graphics``) for GeForce GPUs and ``0x030200`` (3D controller, ``compute``) for the others; the timestamp is
the pod's start time, written once (GFD rewrites it every ``sleepInterval``); vGPU, IMEX and fabric (``gpu.clique``)
labels are not simulated. GFD fails (and writes nothing) where an NVML call it makes fails: init, device count, handle,
name, the compute capability of the GPU it labels for a model, MIG mode, a MIG device's profile (which needs its GPU's
memory) or attributes, the driver or CUDA version (the entry points go-nvml binds, ``nvmlDeviceGetMemoryInfo`` and
``nvmlSystemGetCudaDriverVersion``, not their ``_v2``). A whole GPU's memory that does not answer is only a warning in
GFD: no ``gpu.memory`` label. An invalid ``single`` layout writes an empty ``gpu.sharing-strategy``
(lm/mig-strategy.go newInvalidMigStrategyLabeler).
"""

from __future__ import annotations

import datetime
import posixpath
import re

import yaml

from .rules import PluginConfig, _nvml_error

GFD_PROGRAM = "gpu-feature-discovery"
PLUGIN_IMAGE_MARK = "k8s-device-plugin"
NODE_FEATURE_PREFIX = "nvidia-features-for-"
NS = "nvidia.com/"
GPU = NS + "gpu"

_FAMILIES = {1: "tesla", 2: "fermi", 3: "kepler", 5: "maxwell", 6: "pascal", 9: "hopper", 10: "blackwell",
             12: "blackwell"}


class GFDFailure(Exception):
    """GFD exits with this error and labels nothing."""


def gfd_container(pod: dict) -> dict | None:
    """Return the GFD container of ``pod``, or None when the pod does not run GFD."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        command = container.get("command") or []
        if PLUGIN_IMAGE_MARK in (container.get("image") or "") and command \
                and posixpath.basename(str(command[0])) == GFD_PROGRAM:
            return container
    return None


def no_timestamp(text, env: dict, argv) -> bool:
    """Whether GFD leaves ``gfd.timestamp`` out: ``--no-timestamp`` > ``GFD_NO_TIMESTAMP`` > ``flags.gfd.noTimestamp``."""
    for arg in argv or []:
        name, _sep, value = str(arg).lstrip("-").partition("=")
        if name == "no-timestamp":
            return value.lower() not in ("false", "0", "f") if value else True
    if "GFD_NO_TIMESTAMP" in env:
        return str(env["GFD_NO_TIMESTAMP"]).lower() in ("true", "1", "t")
    try:
        doc = yaml.safe_load(text) if text else {}
    except yaml.YAMLError:
        return False
    gfd = ((doc or {}).get("flags") or {}).get("gfd") or {}
    return bool(gfd.get("noTimestamp"))


def _error(profile: dict, obj: dict, call: str):
    """The error a profile injects on ``call`` (that exact entry point: GFD binds the first versions through
    go-nvml, nvmlInit aside, where any version counts)."""
    if call.startswith("nvmlInit"):
        return _nvml_error(obj, call, profile)
    for errors in ((obj or {}).get("errors") or {}, profile.get("errors") or {}):
        if call in errors:
            return errors[call]
    return None


def _check(profile: dict, obj: dict, *calls):
    for call in calls:
        code = _error(profile, obj, call)
        if code:
            raise GFDFailure("%s returned %s" % (call, code))


def _clean(part: str) -> str:
    return "-".join(re.sub(r"[^A-Za-z0-9\-_. ]", "", part).split())


def _product(parts, shared: bool) -> str:
    words = [_clean(p) for p in parts if p]
    if shared:
        words.append("SHARED")
    value = "-".join(words)
    value = value.lstrip("-_.")[:63]
    return value.rstrip("-_.")


def _mig_on(device: dict, profile: dict) -> bool:
    if _error(profile, device, "nvmlDeviceGetMigMode") == "NOT_SUPPORTED":
        return False
    return bool((device.get("mig") or {}).get("current"))


def _mig_capable(device: dict, profile: dict) -> bool:
    if _error(profile, device, "nvmlDeviceGetMigMode") == "NOT_SUPPORTED":
        return False
    return bool((device.get("mig") or {}).get("capable"))


def _sharing(config: PluginConfig):
    """``(strategy, {resource: (replicas, renamed)})``; the simulator's config parser keeps only a sharing section
    with every resource replicated (replicas >= 2), so its presence is the strategy."""
    sharing = config.sharing
    if sharing is None:
        return "none", {}
    return sharing.strategy, {r.name: (r.replicas, bool(r.rename)) for r in sharing.resources}


class _Resource:
    """The labels of one resource name (lm/resource.go)."""

    def __init__(self, name, strategy, replicated, no_sharing=False):
        self.name = name
        self.strategy = strategy
        self.info = None if no_sharing else replicated.get(name)
        self.no_sharing = no_sharing

    def base(self, count: int, parts) -> dict:
        if self.no_sharing:
            replicas = 0
        else:
            replicas = self.info[0] if self.info and self.info[0] > 0 else 1
        shared = bool(self.info) and self.info[0] > 1 and not self.info[1]
        out = {self.name + ".count": str(count), self.name + ".replicas": str(replicas),
               self.name + ".sharing-strategy": self.strategy if not self.no_sharing and replicas > 1 else "none"}
        product = _product(parts, shared)
        if product:
            out[self.name + ".product"] = product
        return out


def _mig_name(mig: dict) -> str:
    return (mig.get("profile") or "").replace("+", ".")


def _mig_attributes(name: str, mig: dict) -> dict:
    fields = (("memory", "memory_mib"), ("multiprocessors", "multiprocessor_count"),
              ("slices.gi", "gpu_instance_slices"), ("slices.ci", "compute_instance_slices"),
              ("engines.copy", "copy_engine_count"), ("engines.decoder", "decoder_count"),
              ("engines.encoder", "encoder_count"), ("engines.jpeg", "jpeg_count"), ("engines.ofa", "ofa_count"))
    return {"%s.%s" % (name, suffix): str(int(mig.get(key) or 0)) for suffix, key in fields}


def _whole_gpus(profile, devices, strategy, replicated) -> dict:
    off = [d for d in devices if not _mig_on(d, profile)]
    chosen = off[0] if off else devices[0]
    # one labeler per model, built from the last GPU of that model (a Go map from name to device, among the GPUs with
    # MIG on and apart among the others): its compute capability must answer; its memory is only a warning
    # (lm/resource.go "Ignoring error getting memory info"), and no memory label then
    last = {}
    for device in devices:
        last[(_mig_on(device, profile), device["name"])] = device
    for device in last.values():
        _check(profile, device, "nvmlDeviceGetCudaComputeCapability")
    count = len([d for d in devices if d["name"] == chosen["name"]])
    out = _Resource(GPU, strategy, replicated, no_sharing=not off).base(count, [chosen["name"]])
    chosen = last[(_mig_on(chosen, profile), chosen["name"])]  # memory and compute capability: that model's labeler's
    memory = 0 if _error(profile, chosen, "nvmlDeviceGetMemoryInfo") else int(chosen.get("memory_total_mib") or 0)
    if memory:
        out[GPU + ".memory"] = str(memory)
    major, _dot, minor = str(chosen.get("compute_capability") or "0.0").partition(".")
    if int(major):
        major, minor = int(major), int(minor or 0)
        if major == 7:
            family = "turing" if minor >= 5 else "volta"
        elif major == 8:
            family = "ada-lovelace" if minor >= 9 else "ampere"
        else:
            family = _FAMILIES.get(major, "undefined")
        out.update({GPU + ".family": family, GPU + ".compute.major": str(major), GPU + ".compute.minor": str(minor)})
    return out


def _migs(profile, devices):
    """``[(profile name, parent, first MIG device, count)]`` in NVML order."""
    seen = {}
    for device in devices:
        if not _mig_on(device, profile):
            continue
        for mig in (device.get("mig") or {}).get("devices") or []:
            # the name is go-nvlib's GetProfile (the GPU's memory, the instances and their profiles), then the
            # attributes (resource/nvml-mig-device.go GetName, GetAttributes)
            _check(profile, device, "nvmlDeviceGetMemoryInfo")
            _check(profile, mig, "nvmlDeviceGetGpuInstanceId", "nvmlDeviceGetComputeInstanceId",
                   "nvmlDeviceGetAttributes")
            name = _mig_name(mig)
            if name in seen:
                seen[name][3] += 1
            else:
                seen[name] = [name, device, mig, 1]
    return [tuple(v) for v in seen.values()]


def _mig_strategy_labels(profile, devices, config, strategy, replicated) -> dict:
    mode = config.mig_strategy
    if mode == "none":
        return {}
    out = {NS + "mig.strategy": mode}
    on = [d for d in devices if _mig_on(d, profile)]
    if mode == "single":
        if not on:
            return out
        migs = _migs(profile, devices)
        empty = any(not (d.get("mig") or {}).get("devices") for d in on)
        if empty or len(on) != len(devices) or len(migs) != 1:
            out.update({GPU + ".product": _product([on[0]["name"], "MIG", "INVALID"], False), GPU + ".count": "0",
                        GPU + ".replicas": "0", GPU + ".memory": "0", GPU + ".sharing-strategy": ""})
            return out
        name, parent, mig, count = migs[0]
        out.update(_Resource(GPU, strategy, replicated).base(count, [parent["name"], "MIG", name]))
        out.update(_mig_attributes(GPU, mig))
        return out
    for name, parent, mig, count in _migs(profile, devices):
        resource = NS + "mig-" + name
        out.update(_Resource(resource, strategy, replicated).base(count, [parent["name"], "MIG", name]))
        out.update(_mig_attributes(resource, mig))
    return out


def pci_class(device: dict) -> str:
    """The guessed PCI class of a profile's GPU (see the module's doc)."""
    return "0x030000" if str(device.get("brand") or "").lower() == "geforce" else "0x030200"


def labels(profile: dict | None, config: PluginConfig, timestamp: datetime.datetime | None = None) -> dict:
    """GFD's labels for a node with this GPU profile (None: no GPU, no labels) under ``config``; ``timestamp``
    None leaves ``gfd.timestamp`` out. Raises :class:`GFDFailure` where GFD fails."""
    if not profile:
        return {}
    _check(profile, {}, "nvmlInit", "nvmlInitWithFlags", "nvmlDeviceGetCount")
    devices = profile.get("devices") or []
    if not devices:
        return {}
    for device in devices:
        _check(profile, device, "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetName")
    out = {NS + "gpu.machine": "unknown"}
    _check(profile, {}, "nvmlSystemGetDriverVersion", "nvmlSystemGetCudaDriverVersion")
    driver = str(profile.get("driver_version") or "").split(".")
    if not 2 <= len(driver) <= 3:
        raise GFDFailure("driver version %r does not match format X.Y[.Z]" % profile.get("driver_version"))
    rev = driver[2] if len(driver) == 3 else ""
    cuda = int(profile.get("cuda_driver_version") or 0)
    cuda_major, cuda_minor = str(cuda // 1000), str(cuda % 1000 // 10)
    out.update({
        NS + "cuda.driver.major": driver[0], NS + "cuda.driver.minor": driver[1], NS + "cuda.driver.rev": rev,
        NS + "cuda.runtime.major": cuda_major, NS + "cuda.runtime.minor": cuda_minor,
        NS + "cuda.driver-version.major": driver[0], NS + "cuda.driver-version.minor": driver[1],
        NS + "cuda.driver-version.revision": rev, NS + "cuda.driver-version.full": ".".join(driver),
        NS + "cuda.runtime-version.major": cuda_major, NS + "cuda.runtime-version.minor": cuda_minor,
        NS + "cuda.runtime-version.full": "%s.%s" % (cuda_major, cuda_minor),
    })
    for device in devices:
        code = _error(profile, device, "nvmlDeviceGetMigMode")
        if code and code != "NOT_SUPPORTED":
            raise GFDFailure("nvmlDeviceGetMigMode returned %s" % code)
    out[NS + "mig.capable"] = "true" if any(_mig_capable(d, profile) for d in devices) else "false"
    strategy, replicated = _sharing(config)
    if strategy == "mps" and any(_mig_on(d, profile) for d in devices):
        raise GFDFailure("failed to check MPS-capable: MPS sharing is not supported for mig devices")
    out[NS + "mps.capable"] = "true" if strategy == "mps" else "false"
    out.update(_whole_gpus(profile, devices, strategy, replicated))
    out.update(_mig_strategy_labels(profile, devices, config, strategy, replicated))
    classes = {pci_class(d) for d in devices}  # lm/nvml.go getModeForClasses: one class for all, else unknown
    out[NS + "gpu.mode"] = {"0x030000": "graphics", "0x030200": "compute"}.get(classes.pop(), "unknown") \
        if len(classes) == 1 else "unknown"
    if timestamp is not None:
        out[NS + "gfd.timestamp"] = str(int(timestamp.timestamp()))
    return out


def node_feature(node: str, namespace: str, gfd_labels: dict) -> dict:
    """The NodeFeature object GFD writes (lm/output.go)."""
    return {"apiVersion": "nfd.k8s-sigs.io/v1alpha1", "kind": "NodeFeature",
            "metadata": {"name": NODE_FEATURE_PREFIX + node, "namespace": namespace,
                         "labels": {"nfd.node.kubernetes.io/node-name": node}},
            "spec": {"features": {"flags": {}, "attributes": {}, "instances": {}}, "labels": dict(gfd_labels)}}
