# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""Read a host's GPUs through NVML (the nvidia-ml-py bindings, passed in as ``nvml``).

One NVML session per call of :func:`gather_gpu_facts`. It never raises for a host without GPUs or
without a driver: it reports what it found, so the caller (a module, a role's checks) decides.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.cluster.plugins.module_utils import _host
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import naming
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.constants import KERNEL_MODULES, PCI_VENDOR_ID

STATUS_OK = "ok"
STATUS_LIBRARY_NOT_FOUND = "library_not_found"
STATUS_DRIVER_NOT_LOADED = "driver_not_loaded"
STATUS_NO_PERMISSION = "no_permission"
STATUS_ERROR = "error"

# NVML return codes that mean "this GPU or driver does not have that", not "something broke".
_ABSENT_CODES = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND", "NVML_ERROR_NOT_FOUND")


def _text(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


class _Reader(object):
    """Calls NVML functions and records, per device, what could not be read and why."""

    def __init__(self, nvml):
        self.nvml = nvml
        self.absent_codes = set(getattr(nvml, name) for name in _ABSENT_CODES if hasattr(nvml, name))

    def call(self, errors, field, func_name, *args):
        """Return ``func(*args)`` or ``None``; failures other than "not supported" are noted in ``errors[field]``."""
        func = getattr(self.nvml, func_name, None)
        if func is None:
            return None  # an older nvidia-ml-py without this call: the value is simply unknown
        try:
            return func(*args)
        except self.nvml.NVMLError as exc:
            if getattr(exc, "value", None) not in self.absent_codes:
                errors[field] = str(exc)
            return None


def _init_status(nvml, exc):
    code = getattr(exc, "value", None)
    message = str(exc)
    if code == getattr(nvml, "NVML_ERROR_LIBRARY_NOT_FOUND", None):
        return STATUS_LIBRARY_NOT_FOUND, "libnvidia-ml.so.1 could not be loaded (%s): the NVIDIA driver's user-space library is not installed" % message
    if code == getattr(nvml, "NVML_ERROR_DRIVER_NOT_LOADED", None):
        return STATUS_DRIVER_NOT_LOADED, "NVML is installed but the NVIDIA kernel driver is not loaded (%s)" % message
    if code == getattr(nvml, "NVML_ERROR_NO_PERMISSION", None):
        return STATUS_NO_PERMISSION, "NVML refused access to the GPUs (%s): run as root or fix /dev/nvidia* permissions" % message
    return STATUS_ERROR, "NVML failed to initialise: %s" % _library_error_string(nvml, code, message)


def _library_error_string(nvml, code, fallback):
    """The library's own text for an error code (pynvml's str() uses a fixed table for the codes it knows)."""
    try:
        text = _text(nvml.nvmlErrorString(code))
    except (nvml.NVMLError, TypeError, AttributeError):
        return fallback
    return text or fallback


def _mig_devices(reader, handle, total_memory_mib, errors):
    nvml = reader.nvml
    found = []
    slots = reader.call(errors, "mig.devices", "nvmlDeviceGetMaxMigDeviceCount", handle) or 0
    for slot in range(slots):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except nvml.NVMLError as exc:
            if getattr(exc, "value", None) not in reader.absent_codes:
                errors["mig.devices[%d]" % slot] = str(exc)
            continue  # an empty slot answers NOT_FOUND
        mig_errors = {}
        attrs = reader.call(mig_errors, "attributes", "nvmlDeviceGetAttributes", mig)
        entry = {
            "uuid": _text(reader.call(mig_errors, "uuid", "nvmlDeviceGetUUID", mig)),
            "gpu_instance_id": reader.call(mig_errors, "gpu_instance_id", "nvmlDeviceGetGpuInstanceId", mig),
            "compute_instance_id": reader.call(mig_errors, "compute_instance_id", "nvmlDeviceGetComputeInstanceId", mig),
            "profile": None,
            "memory_mib": None,
            "multiprocessor_count": None,
        }
        if attrs is not None:
            entry["memory_mib"] = int(attrs.memorySizeMB)
            entry["multiprocessor_count"] = int(attrs.multiprocessorCount)
        if attrs is not None and total_memory_mib:
            entry["profile"] = naming.mig_profile_name(
                int(attrs.gpuInstanceSliceCount), int(attrs.computeInstanceSliceCount), int(attrs.memorySizeMB), total_memory_mib)
        for field, message in mig_errors.items():
            errors["mig.devices[%d].%s" % (slot, field)] = message
        found.append(entry)
    return found


def _device(reader, index):
    nvml = reader.nvml
    errors = {}
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
    except nvml.NVMLError as exc:
        return {"index": index, "healthy": False, "errors": {"handle": str(exc)}}

    name = _text(reader.call(errors, "name", "nvmlDeviceGetName", handle))
    memory = reader.call(errors, "memory_total_mib", "nvmlDeviceGetMemoryInfo", handle)
    pci = reader.call(errors, "pci_bus_id", "nvmlDeviceGetPciInfo", handle)
    capability = reader.call(errors, "compute_capability", "nvmlDeviceGetCudaComputeCapability", handle)
    arch = reader.call(errors, "architecture", "nvmlDeviceGetArchitecture", handle)
    persistence = reader.call(errors, "persistence_mode", "nvmlDeviceGetPersistenceMode", handle)
    mig_mode = reader.call(errors, "mig", "nvmlDeviceGetMigMode", handle)

    mig = {"capable": mig_mode is not None, "current": False, "pending": False, "devices": []}
    if mig_mode is not None:
        mig["current"] = bool(mig_mode[0])
        mig["pending"] = bool(mig_mode[1])
        if mig["current"]:
            total_mib = None if memory is None else int(memory.total) // (1024 * 1024)
            mig["devices"] = _mig_devices(reader, handle, total_mib, errors)

    capability = tuple(int(part) for part in capability) if capability is not None else None
    return {
        "index": index,
        "uuid": _text(reader.call(errors, "uuid", "nvmlDeviceGetUUID", handle)),
        "name": name,
        "product_slug": naming.product_slug(name) if name else None,
        "memory_total_mib": None if memory is None else int(memory.total) // (1024 * 1024),
        "pci_bus_id": None if pci is None else _text(pci.busId),
        "compute_capability": None if capability is None else "%d.%d" % capability,
        "architecture": naming.architecture_family(capability, arch),
        "persistence_mode": None if persistence is None else bool(persistence),
        "mig": mig,
        # Anything other than "not supported" on the identity calls means the GPU cannot be trusted.
        "healthy": not (set(errors) & set(("name", "uuid", "memory_total_mib"))),
        "errors": errors,
    }


def gather_gpu_facts(nvml, pci_devices_path=_host.PCI_DEVICES_PATH, proc_modules=_host.PROC_MODULES_PATH):
    """Return the ``gpu`` fact dictionary (documented in the gpu_facts module's RETURN)."""
    facts = {
        "present": False,
        "nvml": {"status": STATUS_OK, "message": ""},
        "driver_version": None,
        "cuda_driver_version": None,
        "nvml_version": None,
        "count": 0,
        "devices": [],
        "pci": _host.pci_gpus(PCI_VENDOR_ID, pci_devices_path),
        "kernel_modules": _host.loaded_kernel_modules(proc_modules, KERNEL_MODULES),
    }
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        facts["nvml"]["status"], facts["nvml"]["message"] = _init_status(nvml, exc)
        # NVML answers "no permission" only when the driver's device nodes exist, so a GPU is there.
        facts["present"] = bool(facts["pci"]) or facts["nvml"]["status"] == STATUS_NO_PERMISSION
        return facts

    try:
        reader = _Reader(nvml)
        system_errors = {}
        facts["driver_version"] = _text(reader.call(system_errors, "driver_version", "nvmlSystemGetDriverVersion"))
        facts["nvml_version"] = _text(reader.call(system_errors, "nvml_version", "nvmlSystemGetNVMLVersion"))
        cuda = reader.call(system_errors, "cuda_driver_version", "nvmlSystemGetCudaDriverVersion_v2")
        if cuda is None:
            cuda = reader.call(system_errors, "cuda_driver_version", "nvmlSystemGetCudaDriverVersion")
        facts["cuda_driver_version"] = naming.cuda_version_string(cuda)
        count = reader.call(system_errors, "count", "nvmlDeviceGetCount") or 0
        facts["count"] = count
        facts["devices"] = [_device(reader, index) for index in range(count)]
        if system_errors:
            facts["nvml"]["message"] = "; ".join("%s: %s" % item for item in sorted(system_errors.items()))
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass  # the facts are already read; a failed shutdown changes none of them
    facts["present"] = bool(facts["count"] or facts["pci"])
    return facts
