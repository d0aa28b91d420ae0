# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""Apply the plan of :mod:`.mig_config` on a host's GPUs through NVML (``pynvml``, passed in as ``nvml``).

What NVIDIA's mig-parted does, and what this does:

- MIG mode is set with ``nvmlDeviceSetMigMode``; where the GPU cannot switch at once (a GPU reset or a reboot is
  needed), NVML's pending mode differs from the current one until then (mig-parted ``pkg/mig/mode/nvml.go``,
  ``SetMigMode`` and ``IsMigModeChangePending``). The activation status NVML returns says so too; this records it.
- A layout is applied by destroying every compute and GPU instance (``ClearMigConfig``: compute instances first, then
  their GPU instance) and creating the asked ones: a GPU instance per ``<g>g`` device and its compute instance, a GPU
  instance reused for further ``<c>c.<g>g`` devices while it has room (``SetMigConfig``, ``pkg/mig/config/config.go``).
  mig-parted tries orderings of the devices until one fits; here the GPU instances' placements are chosen first from
  what NVML offers (``nvmlDeviceGetGpuInstancePossiblePlacements``), so that a layout that fits is found without
  trial, and created with those placements (plain creation, in the same order, where the driver lacks placements).
- A profile name is matched to NVML's GPU and compute instance profiles as go-nvlib names them
  (:func:`.naming.mig_profile_name`, ``pkg/nvlib/device/mig_profile.go``).
- When creating fails, the GPU's instances are cleared and its previous layout is created again (mig-parted only
  clears), and the error names the GPU and NVML's answer.
- Whether a mode switch waits for a reset, before anything is set (check mode): nvml.h says
  ``nvmlDeviceSetMigMode`` resets the GPU itself to activate the mode, except "on certain platforms like pass-through
  virtualization, where reset functionality may not be exposed directly", where a VM reboot is needed and the
  activation status is ``NVML_ERROR_RESET_REQUIRED``; NVML tells a pass-through GPU by
  ``nvmlDeviceGetVirtualizationMode`` (:func:`mode_switch_waits`).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import KubegpuError
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import naming
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.nvml import _code_names

MIG_DISABLE = 0  # NVML_DEVICE_MIG_DISABLE
# nvmlGpuVirtualizationMode_t values where a MIG mode switch cannot reset the GPU by itself: pass-through, and a vGPU
# guest (nvml.h NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH 1, _VGPU 2; bare metal is 0, a vGPU or vSGA host 3 and 4)
_NO_RESET_VIRTUALIZATION = (1, 2)
MIG_ENABLE = 1  # NVML_DEVICE_MIG_ENABLE
MAX_INSTANCES = 64  # more GPU or compute instances than any GPU has (7 on A100/H100)
# The compute instance profile constant of each slice count, the plain ones (NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE)
_CI_CONSTANT_OF_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}


class MigError(KubegpuError):
    """A MIG layout that could not be applied (or restored); the message names the GPU and NVML's answer."""


def _code(nvml, exc):
    """NVML's name of the error (``IN_USE``), as gpu_facts names it."""
    value = getattr(exc, "value", None)
    return _code_names(nvml).get(value, str(value))


def _skipped(nvml):
    """The answers with which a profile constant is skipped, as go-nvlib skips it (VisitMigProfiles)."""
    return set(getattr(nvml, name) for name in ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_INVALID_ARGUMENT")
               if hasattr(nvml, name))


def _fits(c, g):
    """go-nvlib's rule for a compute instance profile in a GPU instance profile (VisitMigProfiles)."""
    return c == g or (c < g and c * 2 <= g + 1)


def profile_table(nvml, handle, total_bytes):
    """``{profile name: {"gi": constant, "gi_id": NVML's profile id, "g": slices, "ci": constant, "c": slices}}`` of
    every MIG profile the GPU offers: every GPU instance profile NVML answers for (``NOT_SUPPORTED`` and
    ``INVALID_ARGUMENT`` skip a constant, as go-nvlib skips it), with every plain compute instance size that fits."""
    skip = _skipped(nvml)
    table = {}
    for constant in range(naming.GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, constant, 1)
        except nvml.NVMLError as exc:
            if getattr(exc, "value", None) in skip:
                continue
            raise
        g = naming.gpu_instance_slices(constant)
        if g is None or not info.instanceCount:
            continue
        for c, ci_constant in sorted(_CI_CONSTANT_OF_SLICES.items()):
            if not _fits(c, g):
                continue
            name = naming.mig_profile_name(constant, ci_constant, int(info.memorySizeMB), total_bytes)
            table.setdefault(name, {"gi": constant, "gi_id": int(info.id), "g": g, "ci": ci_constant, "c": c,
                                    "count": int(info.instanceCount)})
    return table


def pack(mig_devices, table):
    """The GPU instances that give ``mig_devices`` (``{profile: count}``): ``[{"gi", "gi_id", "g", "cis": [(ci
    constant, c), ...]}, ...]``, larger GPU instances first. A ``<g>g`` device is a GPU instance with one compute
    instance of all its slices; ``<c>c.<g>g`` devices share GPU instances of their profile while the slices last
    (as mig-parted reuses the last GPU instance). Raises :class:`MigError` for a name the GPU does not offer."""
    unknown = sorted(name for name, count in mig_devices.items() if count and name not in table)
    if unknown:
        raise MigError("no MIG profile %s on this GPU (it offers %s)" % (", ".join(unknown), ", ".join(sorted(table))))
    instances = []
    partial = {}  # gi constant -> the instances of that profile still being filled
    for name in sorted(mig_devices, key=lambda n: (-table[n]["g"], -table[n]["c"], n)):
        entry = table[name]
        for _count in range(mig_devices[name]):
            if entry["c"] == entry["g"]:
                instances.append({"gi": entry["gi"], "gi_id": entry["gi_id"], "g": entry["g"],
                                  "cis": [(entry["ci"], entry["c"])]})
                continue
            room = [gi for gi in partial.get(entry["gi"], []) if sum(c for _ci, c in gi["cis"]) + entry["c"] <= gi["g"]]
            if room:
                room[0]["cis"].append((entry["ci"], entry["c"]))
            else:
                gi = {"gi": entry["gi"], "gi_id": entry["gi_id"], "g": entry["g"], "cis": [(entry["ci"], entry["c"])]}
                partial.setdefault(entry["gi"], []).append(gi)
                instances.append(gi)
    # NVML's instanceCount bounds a profile's GPU instances whatever the placements (one "+me" per GPU: nvidia-smi
    # mig -lgip's "1/1"); refused here, before any change, rather than by NVML halfway through a create.
    for name, entry in sorted(table.items()):
        asked = sum(1 for gi in instances if gi["gi"] == entry["gi"])
        if "count" in entry and asked > entry["count"] and entry["c"] == entry["g"]:
            raise MigError("%d GPU instances of profile %s asked for; this GPU has room for %d"
                           % (asked, name, entry["count"]))
    instances.sort(key=lambda gi: -gi["g"])
    return instances


def choose_placements(instances, possible):
    """A placement ``(start, size)`` for each GPU instance, in order, so that none overlap: ``possible`` maps a GPU
    instance profile constant to the placements NVML offers for it. Returns the list, or ``None`` when no choice
    fits. Exhaustive (backtracking): a GPU has at most 8 memory slices and 7 instances."""
    chosen = []

    def walk(i, used):
        if i == len(instances):
            return True
        for start, size in possible.get(instances[i]["gi"], []):
            span = set(range(start, start + size))
            if span & used:
                continue
            chosen.append((start, size))
            if walk(i + 1, used | span):
                return True
            chosen.pop()
        return False

    return list(chosen) if walk(0, set()) else None


def _possible_placements(nvml, handle, gi_id):
    """The placements NVML offers for a GPU instance profile id, or ``None`` where the driver cannot say."""
    func = getattr(nvml, "nvmlDeviceGetGpuInstancePossiblePlacements", None)
    placement_t = getattr(nvml, "c_nvmlGpuInstancePlacement_t", None)
    if func is None or placement_t is None:
        return None
    array = (placement_t * MAX_INSTANCES)()
    count = nvml.c_uint(MAX_INSTANCES)
    try:
        func(handle, gi_id, array, nvml.byref(count))
    except nvml.NVMLError as exc:
        if getattr(exc, "value", None) in (getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", None),
                                           getattr(nvml, "NVML_ERROR_FUNCTION_NOT_FOUND", None)):
            return None
        raise
    return [(int(array[i].start), int(array[i].size)) for i in range(min(int(count.value), MAX_INSTANCES))]


def _instances(nvml, getter, parent, profile_id):
    """The instances ``getter`` (``nvmlDeviceGetGpuInstances`` or ``nvmlGpuInstanceGetComputeInstances``) lists."""
    kind = nvml.c_nvmlGpuInstance_t if getter == "nvmlDeviceGetGpuInstances" else nvml.c_nvmlComputeInstance_t
    array = (kind * MAX_INSTANCES)()
    count = nvml.c_uint(MAX_INSTANCES)
    getattr(nvml, getter)(parent, profile_id, array, nvml.byref(count))
    return [array[i] for i in range(min(int(count.value), MAX_INSTANCES))]


def clear(nvml, handle, label):
    """Destroy every compute instance and then every GPU instance of a GPU with MIG enabled (ClearMigConfig)."""
    skip = _skipped(nvml)
    for constant in range(naming.GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, constant, 1)
        except nvml.NVMLError as exc:
            if getattr(exc, "value", None) in skip:
                continue
            raise MigError("%s: cannot read GPU instance profile %d: %s" % (label, constant, _code(nvml, exc)))
        try:
            gis = _instances(nvml, "nvmlDeviceGetGpuInstances", handle, int(info.id))
        except nvml.NVMLError as exc:
            raise MigError("%s: cannot list its GPU instances: %s" % (label, _code(nvml, exc)))
        for gi in gis:
            for ci_constant in range(naming.COMPUTE_INSTANCE_PROFILE_COUNT):
                try:
                    ci_info = nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, ci_constant, 0, 1)
                    cis = _instances(nvml, "nvmlGpuInstanceGetComputeInstances", gi, int(ci_info.id))
                except nvml.NVMLError as exc:
                    if getattr(exc, "value", None) in skip:
                        continue
                    raise MigError("%s: cannot list the compute instances of a GPU instance: %s"
                                   % (label, _code(nvml, exc)))
                for ci in cis:
                    _destroy(nvml, "nvmlComputeInstanceDestroy", ci, label, "a compute instance")
            _destroy(nvml, "nvmlGpuInstanceDestroy", gi, label, "a GPU instance")


def _destroy(nvml, func, instance, label, what):
    try:
        getattr(nvml, func)(instance)
    except nvml.NVMLError as exc:
        hint = ""
        if getattr(exc, "value", None) == getattr(nvml, "NVML_ERROR_IN_USE", None):
            hint = "; a process still uses it: stop the GPU's clients (the mig role drains the node) and run again"
        raise MigError("%s: cannot destroy %s: %s%s" % (label, what, _code(nvml, exc), hint))


def create(nvml, handle, instances, placements, label):
    """Create the GPU instances of :func:`pack` (at ``placements`` where given) and their compute instances."""
    for i, gi_wanted in enumerate(instances):
        try:
            if placements:
                placement = nvml.c_nvmlGpuInstancePlacement_t()
                placement.start, placement.size = placements[i]
                # pynvml hands the argument to NVML as it is, and NVML takes a pointer to the placement
                gi = nvml.nvmlDeviceCreateGpuInstanceWithPlacement(handle, gi_wanted["gi_id"], nvml.byref(placement))
            else:
                gi = nvml.nvmlDeviceCreateGpuInstance(handle, gi_wanted["gi_id"])
        except nvml.NVMLError as exc:
            raise MigError("%s: cannot create a %dg GPU instance: %s" % (label, gi_wanted["g"], _code(nvml, exc)))
        for ci_constant, c in gi_wanted["cis"]:
            try:
                ci_info = nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, ci_constant, 0, 1)
                nvml.nvmlGpuInstanceCreateComputeInstance(gi, int(ci_info.id))
            except nvml.NVMLError as exc:
                raise MigError("%s: cannot create a %dc compute instance in a %dg GPU instance: %s"
                               % (label, c, gi_wanted["g"], _code(nvml, exc)))


def set_mode(nvml, handle, enabled, label):
    """Set MIG mode; returns True when it took effect at once, False when it waits for a GPU reset or reboot."""
    try:
        status = nvml.nvmlDeviceSetMigMode(handle, MIG_ENABLE if enabled else MIG_DISABLE)
    except nvml.NVMLError as exc:
        hint = ""
        if getattr(exc, "value", None) == getattr(nvml, "NVML_ERROR_IN_USE", None):
            hint = "; a process still uses the GPU: stop its clients and run again"
        raise MigError("%s: cannot turn MIG mode %s: %s%s" % (label, "on" if enabled else "off", _code(nvml, exc), hint))
    try:
        current, pending = nvml.nvmlDeviceGetMigMode(handle)
    except nvml.NVMLError as exc:
        raise MigError("%s: cannot read MIG mode back: %s" % (label, _code(nvml, exc)))
    wanted = MIG_ENABLE if enabled else MIG_DISABLE
    if pending != wanted:
        raise MigError("%s: MIG mode %s was accepted but NVML's pending mode is %s (activation status %s)"
                       % (label, "on" if enabled else "off", pending, status))
    return current == wanted


def mode_switch_waits(nvml, index):
    """Whether a MIG mode switch of GPU ``index`` waits for a GPU reset or a reboot: True on a GPU passed through to a
    VM (or a vGPU guest), False on bare metal (or a vGPU host), where NVML resets the GPU itself; None where NVML
    cannot say (an older driver or binding without ``nvmlDeviceGetVirtualizationMode``). Read-only. NVML initialised
    by the caller."""
    if not hasattr(nvml, "nvmlDeviceGetVirtualizationMode"):
        return None
    try:
        mode = nvml.nvmlDeviceGetVirtualizationMode(nvml.nvmlDeviceGetHandleByIndex(index))
    except nvml.NVMLError:
        return None
    return int(mode) in _NO_RESET_VIRTUALIZATION


def _total_bytes(nvml, handle, label):
    """The GPU's memory in bytes, which its MIG profiles are named from (go-nvlib getMigMemorySizeGB)."""
    try:
        return int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
    except nvml.NVMLError as exc:
        raise MigError("%s: NVML does not tell its memory size (%s), from which its MIG profiles are named; no MIG "
                       "device can be created on it by name" % (label, _code(nvml, exc)))


def _layout(nvml, handle, label, mig_devices):
    if not any(mig_devices.values()):
        return [], None  # MIG on without instances: nothing to name or place
    table = profile_table(nvml, handle, _total_bytes(nvml, handle, label))
    try:
        instances = pack(mig_devices, table)
    except MigError as exc:
        raise MigError("%s: %s" % (label, exc))
    possible = {}
    for gi in instances:
        if gi["gi"] not in possible:
            possible[gi["gi"]] = _possible_placements(nvml, handle, gi["gi_id"])
    placements = None
    if instances and all(value is not None for value in possible.values()):
        placements = choose_placements(instances, possible)
        if placements is None:
            raise MigError("%s: the MIG devices %s do not fit together on this GPU (no placement of their GPU "
                           "instances leaves them apart)" % (label, _describe(mig_devices)))
    return instances, placements


def _describe(mig_devices):
    return ", ".join("%s: %d" % (name, count) for name, count in sorted(mig_devices.items()) if count) or "none"


def check_steps(nvml, steps):
    """Refuse, before any GPU is changed, a step whose MIG devices cannot be created on its GPU: a profile the GPU does
    not offer, more GPU instances than NVML counts, no placement that keeps them apart. Read-only (profile infos and
    possible placements), so check mode says it too. NVML initialised by the caller."""
    for step in steps:
        if step["action"] in ("none", "refuse", "disable"):
            continue
        handle = nvml.nvmlDeviceGetHandleByIndex(step["index"])
        _layout(nvml, handle, "GPU %s (%s)" % (step["index"], step.get("name") or "unknown"),
                step["wanted"]["mig_devices"])


def apply_step(nvml, step):
    """Carry out one GPU's step of :func:`.mig_config.plan` (NVML initialised by the caller). Returns ``{"index",
    "action", "mode_now": bool, "reset_required": bool}``; raises :class:`MigError`, naming the GPU, where NVML
    refuses, after putting the previous instances back where instances were replaced."""
    index = step["index"]
    label = "GPU %s (%s)" % (index, step.get("name") or "unknown")
    outcome = {"index": index, "action": step["action"], "reset_required": False}
    if step["action"] in ("none", "refuse"):
        return outcome
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    wanted = step["wanted"]
    current = step["current"]
    if step["action"] == "disable":
        if current["mig_enabled"]:
            clear(nvml, handle, label)
        outcome["reset_required"] = not set_mode(nvml, handle, False, label)
        return outcome
    instances, placements = _layout(nvml, handle, label, wanted["mig_devices"])  # refuses before a change
    if step["set_mode"]:
        if not set_mode(nvml, handle, True, label):
            outcome["reset_required"] = True  # the instances are created by the run after the reset
            return outcome
    if current["mig_enabled"]:
        clear(nvml, handle, label)
    try:
        create(nvml, handle, instances, placements, label)
    except MigError as failed:
        _restore(nvml, handle, label, current, failed)
    return outcome


def _restore(nvml, handle, label, current, failed):
    """Clear what was created and create the previous layout again; raise ``failed`` saying whether that worked."""
    try:
        clear(nvml, handle, label)
        if current["mig_enabled"] and current["mig_devices"]:
            instances, placements = _layout(nvml, handle, label, current["mig_devices"])
            create(nvml, handle, instances, placements, label)
    except MigError as again:
        raise MigError("%s; restoring the previous MIG devices (%s) failed too: %s"
                       % (failed, _describe(current["mig_devices"]), again))
    raise MigError("%s; the previous MIG devices (%s) were put back" % (failed, _describe(current["mig_devices"])))
