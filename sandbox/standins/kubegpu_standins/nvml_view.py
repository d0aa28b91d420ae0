# SPDX-License-Identifier: GPL-3.0-or-later
"""The GPUs as the NVIDIA device plugin reads them through NVML, as a dict of the GPU profile's shape.

The stand-in plugin reads the node's GPUs through the real Python bindings (pynvml, from nvidia-ml-py) and whatever
``libnvidia-ml.so.1`` the container has (the sandbox's fake NVML, put there by NVIDIA's runtime or a test). The
simulator's rules (sandbox/k8s/devsim/rules.py) take a GPU profile, the JSON the fake NVML answers from; this module
builds that same shape from NVML's answers, so the stand-in applies the simulator's rules and no second copy of them:

* the values the rules read (UUIDs, minor numbers, memory, MIG mode and MIG devices with their attributes and profile
  constants);
* every call that failed, under ``errors`` by its NVML name (``nvmlDeviceGetUUID: GPU_IS_LOST``), at the top level or
  on the GPU or MIG device it was made for: the rules decide what the plugin does with a failure (exit, warn, skip),
  as they do with a profile's injected errors.

The calls are the ones the plugin makes on its start-up path (go-nvlib VisitDevices / VisitMigDevices / GetProfile,
k8s-device-plugin internal/rm/nvml_devices.go; sandbox/fakenvml/README.md lists them by program).
"""

from __future__ import annotations

import os

import pynvml

# go-nvlib GetProfile walks every GPU instance profile constant below NVML_GPU_INSTANCE_PROFILE_COUNT and every compute
# instance profile constant below NVML_COMPUTE_INSTANCE_PROFILE_COUNT (pkg/nvlib/device/mig_device.go)
GI_PROFILE_COUNT = getattr(pynvml, "NVML_GPU_INSTANCE_PROFILE_COUNT", 18)
CI_PROFILE_COUNT = getattr(pynvml, "NVML_COMPUTE_INSTANCE_PROFILE_COUNT", 9)
_CODES = {getattr(pynvml, name): name[len("NVML_ERROR_"):] for name in dir(pynvml)
          if name.startswith("NVML_ERROR_") and isinstance(getattr(pynvml, name), int)}


class NvmlInitError(Exception):
    """nvmlInit failed: the plugin cannot start (``code``: the NVML error's name)."""

    def __init__(self, code, text):
        super().__init__(text)
        self.code = code


def error_code(exc):
    """The profile's name of an NVML error (``GPU_IS_LOST``), as rules._nvml_error compares them."""
    return _CODES.get(getattr(exc, "value", None), "UNKNOWN")


class _Reader:
    def __init__(self):
        self.top = {}

    def call(self, where, name, fn, *args):
        """``fn(*args)``, or None with the failure recorded as ``where["errors"][name]``."""
        try:
            return fn(*args)
        except pynvml.NVMLError as exc:
            where.setdefault("errors", {})[name] = error_code(exc)
            return None


def text(value):
    return value.decode() if isinstance(value, bytes) else value


def read():
    """Initialise NVML and return the node's GPUs as a profile dict (NVML stays initialised for the health check)."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise NvmlInitError(error_code(exc), "failed to initialize NVML: %s" % exc) from exc
    reader = _Reader()
    profile = {"devices": []}
    version = reader.call(profile, "nvmlSystemGetDriverVersion", pynvml.nvmlSystemGetDriverVersion)
    if version:
        profile["driver_version"] = text(version)
    count = reader.call(profile, "nvmlDeviceGetCount", pynvml.nvmlDeviceGetCount)
    for index in range(count or 0):
        profile["devices"].append(_gpu(reader, index))
    return profile


def _gpu(reader, index):
    device = {}
    handle = reader.call(device, "nvmlDeviceGetHandleByIndex", pynvml.nvmlDeviceGetHandleByIndex, index)
    if handle is None:
        return device
    device["_handle"] = handle
    name = reader.call(device, "nvmlDeviceGetName", pynvml.nvmlDeviceGetName, handle)
    if name is not None:
        device["name"] = text(name)
    uuid = reader.call(device, "nvmlDeviceGetUUID", pynvml.nvmlDeviceGetUUID, handle)
    if uuid is not None:
        device["uuid"] = text(uuid)
    minor = reader.call(device, "nvmlDeviceGetMinorNumber", pynvml.nvmlDeviceGetMinorNumber, handle)
    if minor is not None:
        device["minor_number"] = minor
    pci = reader.call(device, "nvmlDeviceGetPciInfo", pynvml.nvmlDeviceGetPciInfo, handle)
    if pci is not None:
        device["pci_bus_id"] = text(pci.busId)
    reader.call(device, "nvmlDeviceGetCudaComputeCapability", pynvml.nvmlDeviceGetCudaComputeCapability, handle)
    memory = reader.call(device, "nvmlDeviceGetMemoryInfo", pynvml.nvmlDeviceGetMemoryInfo, handle)
    if memory is not None:
        device["memory_total_mib"] = memory.total // (1024 * 1024)
    mode = reader.call(device, "nvmlDeviceGetMigMode", pynvml.nvmlDeviceGetMigMode, handle)
    if mode is not None:
        device["mig"] = {"capable": True, "current": bool(mode[0]), "devices": []}
        # GetProfile's first step: the GPU's own GPU instance profiles (rules: offered_profiles)
        gi_ids = {}
        for constant in range(GI_PROFILE_COUNT):
            info = reader.call({}, "", pynvml.nvmlDeviceGetGpuInstanceProfileInfo, handle, constant)
            if info is not None:
                gi_ids[info.id] = constant
        if mode[0]:
            device["mig"]["devices"] = _migs(reader, device, handle, gi_ids)
    return device


def _migs(reader, device, handle, gi_ids):
    count = reader.call(device, "nvmlDeviceGetMaxMigDeviceCount", pynvml.nvmlDeviceGetMaxMigDeviceCount, handle)
    migs = []
    for slot in range(count or 0):
        try:
            mig_handle = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except pynvml.NVMLError as exc:
            if error_code(exc) in ("NOT_FOUND", "INVALID_ARGUMENT"):
                continue  # go-nvlib VisitMigDevices skips a free slot
            device.setdefault("errors", {})["nvmlDeviceGetMigDeviceHandleByIndex"] = error_code(exc)
            break
        migs.append(_mig(reader, handle, mig_handle, slot, gi_ids))
    return migs


def _mig(reader, gpu_handle, handle, slot, gi_ids):
    mig = {"slot": slot}
    uuid = reader.call(mig, "nvmlDeviceGetUUID", pynvml.nvmlDeviceGetUUID, handle)
    if uuid is not None:
        mig["uuid"] = text(uuid)
    attrs = reader.call(mig, "nvmlDeviceGetAttributes", pynvml.nvmlDeviceGetAttributes, handle)
    if attrs is not None:
        mig.update(multiprocessor_count=attrs.multiprocessorCount, copy_engine_count=attrs.sharedCopyEngineCount,
                   decoder_count=attrs.sharedDecoderCount, encoder_count=attrs.sharedEncoderCount,
                   jpeg_count=attrs.sharedJpegCount, ofa_count=attrs.sharedOfaCount,
                   gpu_instance_slices=attrs.gpuInstanceSliceCount,
                   compute_instance_slices=attrs.computeInstanceSliceCount, memory_mib=attrs.memorySizeMB)
    gi_id = reader.call(mig, "nvmlDeviceGetGpuInstanceId", pynvml.nvmlDeviceGetGpuInstanceId, handle)
    ci_id = reader.call(mig, "nvmlDeviceGetComputeInstanceId", pynvml.nvmlDeviceGetComputeInstanceId, handle)
    mig["gpu_instance_id"], mig["compute_instance_id"] = gi_id, ci_id
    if gi_id is None or ci_id is None:
        return mig
    gi = reader.call(mig, "nvmlDeviceGetGpuInstanceById", pynvml.nvmlDeviceGetGpuInstanceById, gpu_handle, gi_id)
    if gi is None:
        return mig
    gi_info = reader.call(mig, "nvmlGpuInstanceGetInfo", pynvml.nvmlGpuInstanceGetInfo, gi)
    if gi_info is not None and gi_info.profileId in gi_ids:
        mig["gpu_instance_profile"] = gi_ids[gi_info.profileId]
    ci = reader.call(mig, "nvmlGpuInstanceGetComputeInstanceById", pynvml.nvmlGpuInstanceGetComputeInstanceById,
                     gi, ci_id)
    ci_info = reader.call(mig, "nvmlComputeInstanceGetInfo", pynvml.nvmlComputeInstanceGetInfo, ci) if ci else None
    if ci_info is not None:
        for constant in range(CI_PROFILE_COUNT):
            info = reader.call({}, "", pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo, gi, constant, 0)
            if info is not None and info.id == ci_info.profileId:
                mig["compute_instance_profile"] = constant
                break
    return mig


def numa_node(pci_bus_id, sys_root="/sys"):
    """The NUMA node of a GPU from sysfs, as GetNumaNode reads it (internal/rm/nvml_devices.go: the bus id in lower
    case with a 4-digit domain; a negative or missing value: no NUMA node)."""
    if not pci_bus_id:
        return None
    bus = pci_bus_id.lower()
    if len(bus.split(":", 1)[0]) == 8:
        bus = bus[4:]
    try:
        with open(os.path.join(sys_root, "bus/pci/devices", bus, "numa_node"), encoding="ascii") as handle:
            value = int(handle.read().strip())
    except (OSError, ValueError):
        return None
    return value if value >= 0 else None
