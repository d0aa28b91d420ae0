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
STATUS_VERSION_MISMATCH = "version_mismatch"  # NVML_ERROR_LIB_RM_VERSION_MISMATCH: a driver upgraded, not rebooted
STATUS_ERROR = "error"
STATUS_BINDINGS_MISSING = "bindings_missing"  # no nvidia-ml-py (pynvml) for the Python that runs the module
BINDINGS_MISSING = ("nvidia-ml-py (the pynvml module) is not installed for this Python, so NVML was not asked; the NVIDIA "
                    "GPUs on the PCI bus are listed all the same (pip install nvidia-ml-py, or the python_env role, "
                    "which gpu_driver runs, to read them through NVML)")

# NVML return codes that mean "this GPU or driver does not have that", not "something broke".
_ABSENT_CODES = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND", "NVML_ERROR_NOT_FOUND")
# The attribute fields of nvmlDeviceAttributes_t, in the struct's order (the device plugin compares the whole struct)
# At most this many events are read from one event set: a GPU that floods XIDs still gives a bounded read.
_MAX_EVENTS = 64
# An event's instance id for "the whole GPU" (nvml.h: the ids are 0xFFFFFFFF when not a MIG device's)
_WHOLE_GPU = 0xFFFFFFFF
_ATTRIBUTE_FIELDS = (
    "multiprocessorCount", "sharedCopyEngineCount", "sharedDecoderCount", "sharedEncoderCount", "sharedJpegCount",
    "sharedOfaCount", "gpuInstanceSliceCount", "computeInstanceSliceCount", "memorySizeMB",
)


def _text(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def _code_names(nvml):
    """NVML's return code values to their names without the ``NVML_ERROR_`` prefix (``GPU_IS_LOST``)."""
    names = {}
    for attr in dir(nvml):
        if attr.startswith("NVML_ERROR_") and isinstance(getattr(nvml, attr), int):
            names.setdefault(getattr(nvml, attr), attr[len("NVML_ERROR_"):])
    return names


class _Reader(object):
    """Calls NVML functions and records what did not succeed: per object, every NVML function that answered
    something else than success, by its return code's name (``returns``, what NVIDIA's device plugin decides on), and
    the failures other than "not supported" with NVML's text (``errors``, for people)."""

    def __init__(self, nvml):
        self.nvml = nvml
        self.absent_codes = set(getattr(nvml, name) for name in _ABSENT_CODES if hasattr(nvml, name))
        self.code_names = _code_names(nvml)

    def code(self, exc):
        value = getattr(exc, "value", None)
        return self.code_names.get(value, str(value))

    def call(self, errors, field, func_name, *args, **kwargs):
        """Return ``func(*args)`` or ``None``; a failure is noted in ``returns[func_name]`` (when given) and, unless
        it means "not supported", in ``errors[field]``."""
        returns = kwargs.get("returns")
        func = getattr(self.nvml, func_name, None)
        if func is None:
            return None  # an older nvidia-ml-py without this call: the value is simply unknown
        try:
            return func(*args)
        except self.nvml.NVMLError as exc:
            if returns is not None:
                returns[func_name] = self.code(exc)
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
    if code == getattr(nvml, "NVML_ERROR_LIB_RM_VERSION_MISMATCH", None):
        return STATUS_VERSION_MISMATCH, ("the NVIDIA driver's library and its loaded kernel module are different versions "
                                         "(%s)" % _library_error_string(nvml, code, message))
    return STATUS_ERROR, "NVML failed to initialise: %s" % _library_error_string(nvml, code, message)


def _library_error_string(nvml, code, fallback):
    """The library's own text for an error code (pynvml's str() uses a fixed table for the codes it knows)."""
    try:
        text = _text(nvml.nvmlErrorString(code))
    except (nvml.NVMLError, TypeError, AttributeError):
        return fallback
    return text or fallback


def _gpu_instance_profiles(reader, handle, returns):
    """``{NVML GPU instance profile constant: profile info}`` of every profile the GPU answers for, probed as go-nvlib
    does (pkg/nvlib/device/device.go VisitMigProfiles: NOT_SUPPORTED and INVALID_ARGUMENT skip a constant; any other
    failure is recorded under ``nvmlDeviceGetGpuInstanceProfileInfo`` and ends the walk, as it ends go-nvlib's)."""
    nvml = reader.nvml
    skip = set(getattr(nvml, name) for name in ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_INVALID_ARGUMENT")
               if hasattr(nvml, name))
    found = {}
    func = getattr(nvml, "nvmlDeviceGetGpuInstanceProfileInfo", None)
    if func is None:
        return found
    for constant in range(naming.GPU_INSTANCE_PROFILE_COUNT):
        try:
            found[constant] = func(handle, constant, 1)  # version 1: the entry point go-nvlib calls (pynvml's default is V)
        except nvml.NVMLError as exc:
            if getattr(exc, "value", None) in skip:
                continue
            returns["nvmlDeviceGetGpuInstanceProfileInfo"] = reader.code(exc)
            break
    return found


def _supported_profiles(gi_profiles, total_bytes):
    """The MIG profile names a GPU offers, in go-nvlib's order (VisitMigProfiles: every GPU instance profile, every
    compute instance profile that fits it by go-nvlib's rule ``c <= g`` and, when smaller, ``2c <= g + 1``)."""
    names = []
    for constant, info in sorted(gi_profiles.items()):
        g = naming.gpu_instance_slices(constant)
        if g is None:
            continue
        for ci in range(naming.COMPUTE_INSTANCE_PROFILE_COUNT):
            name = naming.mig_profile_name(constant, ci, int(info.memorySizeMB), total_bytes)
            c, g, _gb, _attrs = naming.mig_profile_parts(name)
            if c > g or (c < g and c * 2 > g + 1):
                continue
            if name not in names:
                names.append(name)
    return names


def _mig_profile(reader, handle, ids, attrs, total_bytes, gi_profiles, returns):
    """``(gpu instance profile, compute instance profile, name)`` of a MIG device, found as go-nvlib's GetProfile
    finds it (pkg/nvlib/device/mig_device.go): its GPU and compute instance by id, their profile ids matched against
    the GPU's profile infos; ``(None, None, None)`` when a call fails (recorded in ``returns``)."""
    nvml = reader.nvml
    none = (None, None, None)
    errors = {}
    gi_id, ci_id = ids
    if gi_id is None or ci_id is None or attrs is None or not total_bytes:
        return none
    gi = reader.call(errors, "gi", "nvmlDeviceGetGpuInstanceById", handle, gi_id, returns=returns)
    ci = reader.call(errors, "ci", "nvmlGpuInstanceGetComputeInstanceById", gi, ci_id, returns=returns) if gi else None
    gi_info = reader.call(errors, "gi", "nvmlGpuInstanceGetInfo", gi, returns=returns) if gi else None
    ci_info = reader.call(errors, "ci", "nvmlComputeInstanceGetInfo", ci, returns=returns) if ci else None
    if gi_info is None or ci_info is None:
        return none
    skip = set(getattr(nvml, name) for name in ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_INVALID_ARGUMENT")
               if hasattr(nvml, name))
    for constant, info in sorted(gi_profiles.items()):
        if info.id != gi_info.profileId:
            continue
        for ci_profile in range(naming.COMPUTE_INSTANCE_PROFILE_COUNT):
            for engine in range(naming.COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT):
                try:
                    ci_profile_info = nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, ci_profile, engine, 1)
                except nvml.NVMLError as exc:
                    if getattr(exc, "value", None) in skip:
                        continue
                    returns["nvmlGpuInstanceGetComputeInstanceProfileInfo"] = reader.code(exc)
                    return none
                if ci_profile_info.id != ci_info.profileId:
                    continue
                try:
                    name = naming.mig_profile_name(constant, ci_profile, int(attrs.memorySizeMB), total_bytes)
                except ValueError:
                    returns["profile"] = "INVALID_PROFILE"
                    return none
                return constant, ci_profile, name
    returns["profile"] = "NO_MATCHING_PROFILE_ID"  # go-nvlib: "no matching profile IDs found"
    return none


def _mig_devices(reader, handle, total_bytes, gi_profiles, errors, returns):
    nvml = reader.nvml
    found = []
    slots = reader.call(errors, "mig.devices", "nvmlDeviceGetMaxMigDeviceCount", handle, returns=returns) or 0
    for slot in range(slots):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except nvml.NVMLError as exc:
            if getattr(exc, "value", None) not in reader.absent_codes:
                errors["mig.devices[%d]" % slot] = str(exc)
                returns["nvmlDeviceGetMigDeviceHandleByIndex"] = reader.code(exc)
            continue  # an empty slot answers NOT_FOUND
        mig_errors = {}
        mig_returns = {}
        attrs = reader.call(mig_errors, "attributes", "nvmlDeviceGetAttributes", mig, returns=mig_returns)
        ids = (reader.call(mig_errors, "gpu_instance_id", "nvmlDeviceGetGpuInstanceId", mig, returns=mig_returns),
               reader.call(mig_errors, "compute_instance_id", "nvmlDeviceGetComputeInstanceId", mig,
                           returns=mig_returns))
        gi_profile, ci_profile, profile = _mig_profile(reader, handle, ids, attrs, total_bytes, gi_profiles,
                                                       mig_returns)
        entry = {
            "uuid": _text(reader.call(mig_errors, "uuid", "nvmlDeviceGetUUID", mig, returns=mig_returns)),
            "gpu_instance_id": ids[0],
            "compute_instance_id": ids[1],
            "gpu_instance_profile": gi_profile,
            "compute_instance_profile": ci_profile,
            "profile": profile,
            "memory_mib": None,
            "multiprocessor_count": None,
            "attributes": None,
            "nvml_returns": mig_returns,
        }
        if attrs is not None:
            entry["memory_mib"] = int(attrs.memorySizeMB)
            entry["multiprocessor_count"] = int(attrs.multiprocessorCount)
            entry["attributes"] = dict((field, int(getattr(attrs, field, 0))) for field in _ATTRIBUTE_FIELDS)
        for field, message in mig_errors.items():
            errors["mig.devices[%d].%s" % (slot, field)] = message
        found.append(entry)
    return found


def _device(reader, index):
    nvml = reader.nvml
    errors = {}
    returns = {}
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
    except nvml.NVMLError as exc:
        return {"index": index, "healthy": False, "errors": {"handle": str(exc)},
                "nvml_returns": {"nvmlDeviceGetHandleByIndex": reader.code(exc)}}, None

    def call(field, func_name, *args):
        return reader.call(errors, field, func_name, *args, returns=returns)

    name = _text(call("name", "nvmlDeviceGetName", handle))
    memory = call("memory_total_mib", "nvmlDeviceGetMemoryInfo", handle)
    pci = call("pci_bus_id", "nvmlDeviceGetPciInfo", handle)
    capability = call("compute_capability", "nvmlDeviceGetCudaComputeCapability", handle)
    arch = call("architecture", "nvmlDeviceGetArchitecture", handle)
    persistence = call("persistence_mode", "nvmlDeviceGetPersistenceMode", handle)
    minor = call("minor_number", "nvmlDeviceGetMinorNumber", handle)
    mig_mode = call("mig", "nvmlDeviceGetMigMode", handle)
    total_bytes = None if memory is None else int(memory.total)

    mig = {"capable": mig_mode is not None, "current": False, "pending": False, "profiles": [], "devices": []}
    if mig_mode is not None:
        mig["current"] = bool(mig_mode[0])
        mig["pending"] = bool(mig_mode[1])
        gi_profiles = _gpu_instance_profiles(reader, handle, returns)
        if total_bytes:
            mig["profiles"] = _supported_profiles(gi_profiles, total_bytes)
        if mig["current"]:
            mig["devices"] = _mig_devices(reader, handle, total_bytes, gi_profiles, errors, returns)

    capability = tuple(int(part) for part in capability) if capability is not None else None
    return {
        "index": index,
        "uuid": _text(call("uuid", "nvmlDeviceGetUUID", handle)),
        "name": name,
        "product_slug": naming.product_slug(name) if name else None,
        "memory_total_mib": None if memory is None else int(memory.total) // (1024 * 1024),
        "pci_bus_id": None if pci is None else _text(pci.busId),
        "minor_number": minor,
        "compute_capability": None if capability is None else "%d.%d" % capability,
        "architecture": naming.architecture_family(capability, arch),
        "persistence_mode": None if persistence is None else bool(persistence),
        "mig": mig,
        # Anything other than "not supported" on the identity calls means the GPU cannot be trusted.
        "healthy": not (set(errors) & set(("name", "uuid", "memory_total_mib"))),
        "errors": errors,
        "nvml_returns": returns,
    }, handle


def _xid_events(reader, devices, returns):
    """Critical XID errors NVML reports now, read as NVIDIA's device plugin's health check reads them
    (k8s-device-plugin v0.20.0 internal/rm/health.go checkHealth): one event set, every GPU registered for XID critical
    errors and both ECC error types as far as it supports them, then the set drained without waiting. Each GPU gets
    ``xid_events`` (``{"xid", "gpu_instance_id", "compute_instance_id"}``, the ids ``None`` for the whole GPU); a
    failed ``nvmlDeviceGetSupportedEventTypes`` or ``nvmlDeviceRegisterEvents`` (other than NOT_SUPPORTED, "too old
    for health checks" in the plugin) lands in that GPU's ``nvml_returns``, where the plugin marks the GPU unhealthy;
    a failed wait or event UUID in the fact's own ``nvml_returns``, where the plugin marks every GPU unhealthy. NVML
    reports only the events after a registration, so an XID seen here is one the GPU raises while it is watched."""
    nvml = reader.nvml
    if not all(hasattr(nvml, name) for name in ("nvmlEventSetCreate", "nvmlEventSetWait_v2", "nvmlEventSetFree")):
        return
    for device, _handle in devices:
        device["xid_events"] = []
    try:
        event_set = nvml.nvmlEventSetCreate()
    except nvml.NVMLError as exc:
        returns["nvmlEventSetCreate"] = reader.code(exc)
        return
    mask = 0
    for name in ("nvmlEventTypeXidCriticalError", "nvmlEventTypeDoubleBitEccError", "nvmlEventTypeSingleBitEccError"):
        mask |= getattr(nvml, name, 0)
    by_uuid = {}
    try:
        for device, handle in devices:
            if handle is None:
                continue
            by_uuid[device.get("uuid")] = device
            try:
                supported = nvml.nvmlDeviceGetSupportedEventTypes(handle)
            except nvml.NVMLError as exc:
                device["nvml_returns"]["nvmlDeviceGetSupportedEventTypes"] = reader.code(exc)
                continue
            try:
                nvml.nvmlDeviceRegisterEvents(handle, mask & supported, event_set)
            except nvml.NVMLError as exc:
                if getattr(exc, "value", None) != getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", None):
                    device["nvml_returns"]["nvmlDeviceRegisterEvents"] = reader.code(exc)
        for _event_number in range(_MAX_EVENTS):
            try:
                event = nvml.nvmlEventSetWait_v2(event_set, 0)
            except nvml.NVMLError as exc:
                if getattr(exc, "value", None) != getattr(nvml, "NVML_ERROR_TIMEOUT", None):
                    returns["nvmlEventSetWait"] = reader.code(exc)
                break
            if int(event.eventType) != getattr(nvml, "nvmlEventTypeXidCriticalError", 0x8):
                continue
            try:
                uuid = _text(nvml.nvmlDeviceGetUUID(event.device))
            except nvml.NVMLError as exc:
                returns["nvmlDeviceGetUUID(event)"] = reader.code(exc)
                continue
            if uuid in by_uuid:
                by_uuid[uuid]["xid_events"].append({
                    "xid": int(event.eventData),
                    "gpu_instance_id": _instance_id(event.gpuInstanceId),
                    "compute_instance_id": _instance_id(event.computeInstanceId),
                })
    finally:
        try:
            nvml.nvmlEventSetFree(event_set)
        except nvml.NVMLError:
            pass  # the events are read; a set that does not free changes none of them


def _instance_id(value):
    """An event's GPU or compute instance id; ``None`` for NVML's "the whole GPU" (0xFFFFFFFF)."""
    value = int(value)
    return None if value == _WHOLE_GPU else value


def gather_gpu_facts(nvml, pci_devices_path=_host.PCI_DEVICES_PATH, proc_modules=_host.PROC_MODULES_PATH):
    """Return the ``gpu`` fact dictionary (documented in the gpu_facts module's RETURN). ``nvml`` is pynvml, or None
    where it is not installed: the PCI bus and the kernel modules are read all the same."""
    facts = {
        "present": False,
        "nvml": {"status": STATUS_OK, "message": ""},
        "driver_version": None,
        "cuda_driver_version": None,
        "nvml_version": None,
        "count": 0,
        "devices": [],
        "nvml_returns": {},
        "pci": _host.pci_gpus(PCI_VENDOR_ID, pci_devices_path),
        "kernel_modules": _host.loaded_kernel_modules(proc_modules, KERNEL_MODULES),
    }
    if nvml is None:
        facts["nvml"] = {"status": STATUS_BINDINGS_MISSING, "message": BINDINGS_MISSING}
        facts["present"] = bool(facts["pci"])
        return facts
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
        returns = facts["nvml_returns"]

        def call(field, func_name):
            return reader.call(system_errors, field, func_name, returns=returns)

        facts["driver_version"] = _text(call("driver_version", "nvmlSystemGetDriverVersion"))
        facts["nvml_version"] = _text(call("nvml_version", "nvmlSystemGetNVMLVersion"))
        # GPU feature discovery asks the first version (go-nvml's SystemGetCudaDriverVersion) and exits when it does
        # not answer, so both are asked and both answers recorded; the value is the newer one's where it answers.
        cuda = call("cuda_driver_version", "nvmlSystemGetCudaDriverVersion_v2")
        cuda_v1 = call("cuda_driver_version", "nvmlSystemGetCudaDriverVersion")
        facts["cuda_driver_version"] = naming.cuda_version_string(cuda if cuda is not None else cuda_v1)
        if facts["cuda_driver_version"] is not None:
            system_errors.pop("cuda_driver_version", None)
        count = call("count", "nvmlDeviceGetCount") or 0
        facts["count"] = count
        devices = [_device(reader, index) for index in range(count)]
        _xid_events(reader, devices, returns)
        facts["devices"] = [device for device, _handle in devices]
        if system_errors:
            facts["nvml"]["message"] = "; ".join("%s: %s" % item for item in sorted(system_errors.items()))
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass  # the facts are already read; a failed shutdown changes none of them
    facts["present"] = bool(facts["count"] or facts["pci"])
    return facts
