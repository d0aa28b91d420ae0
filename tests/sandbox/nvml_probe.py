# SPDX-License-Identifier: GPL-3.0-or-later
"""Print, as one JSON document, everything the real pynvml reads from libnvidia-ml.so.1.

Run by tests/sandbox/test_fake_nvml.py in a subprocess whose environment points
LD_LIBRARY_PATH at the fake library and FAKE_NVML_PROFILE at a profile. Every
NVML answer is recorded either as its value or as {"error": "<pynvml exception class>"}.
"""

import ctypes
import json
import sys

import pynvml


def call(function, *args, **kwargs):
    """Value of an NVML call, or the name of the pynvml exception it raised."""
    try:
        return function(*args, **kwargs)
    except pynvml.NVMLError as exc:
        return {'error': type(exc).__name__}


def failed(value):
    return isinstance(value, dict) and 'error' in value


def plain(value):
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, ctypes.c_uint):
        return value.value
    return value


def fields(struct, names):
    if failed(struct):
        return struct
    return {name: plain(getattr(struct, name)) for name in names}


def address(handle):
    return ctypes.cast(handle, ctypes.c_void_p).value


def index_of(lookup, *args):
    """Look a device up again and report the index NVML gives the handle found."""
    handle = call(lookup, *args)
    if failed(handle):
        return handle
    return call(pynvml.nvmlDeviceGetIndex, handle)


ATTRIBUTE_FIELDS = [field[0] for field in pynvml.c_nvmlDeviceAttributes._fields_]
MEMORY_FIELDS = ['total', 'free', 'used']
MEMORY_V2_FIELDS = ['version', 'total', 'reserved', 'free', 'used']
PCI_FIELDS = ['busIdLegacy', 'domain', 'bus', 'device', 'pciDeviceId', 'pciSubSystemId', 'busId']


def common(handle):
    return {
        'name': call(pynvml.nvmlDeviceGetName, handle),
        'uuid': call(pynvml.nvmlDeviceGetUUID, handle),
        'memory': fields(call(pynvml.nvmlDeviceGetMemoryInfo, handle), MEMORY_FIELDS),
        'memory_v2': fields(call(pynvml.nvmlDeviceGetMemoryInfo, handle, version=pynvml.nvmlMemory_v2),
                            MEMORY_V2_FIELDS),
        'attributes': fields(call(pynvml.nvmlDeviceGetAttributes, handle), ATTRIBUTE_FIELDS),
        'is_mig': plain(call(pynvml.nvmlDeviceIsMigDeviceHandle, handle)),
        'cuda_compute_capability': call(pynvml.nvmlDeviceGetCudaComputeCapability, handle),
        'architecture': call(pynvml.nvmlDeviceGetArchitecture, handle),
        'brand': call(pynvml.nvmlDeviceGetBrand, handle),
    }


def probe_mig(handle, parent):
    result = common(handle)
    result['gpu_instance_id'] = call(pynvml.nvmlDeviceGetGpuInstanceId, handle)
    result['compute_instance_id'] = call(pynvml.nvmlDeviceGetComputeInstanceId, handle)
    owner = call(pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle, handle)
    result['parent_is_gpu'] = owner if failed(owner) else address(owner) == address(parent)
    again = call(pynvml.nvmlDeviceGetHandleByUUID, result['uuid']) if not failed(result['uuid']) else result['uuid']
    result['by_uuid_same_handle'] = again if failed(again) else address(again) == address(handle)
    return result


def probe_gpu(index):
    handle = call(pynvml.nvmlDeviceGetHandleByIndex, index)
    if failed(handle):
        return {'handle': handle}
    again = pynvml.nvmlDeviceGetHandleByIndex(index)
    result = common(handle)
    result['handle_is_stable'] = address(again) == address(handle)
    result['index'] = call(pynvml.nvmlDeviceGetIndex, handle)
    result['serial'] = call(pynvml.nvmlDeviceGetSerial, handle)
    result['minor_number'] = call(pynvml.nvmlDeviceGetMinorNumber, handle)
    result['pci'] = fields(call(pynvml.nvmlDeviceGetPciInfo, handle), PCI_FIELDS)
    result['persistence_mode'] = call(pynvml.nvmlDeviceGetPersistenceMode, handle)
    result['mig_mode'] = call(pynvml.nvmlDeviceGetMigMode, handle)
    result['max_mig_device_count'] = call(pynvml.nvmlDeviceGetMaxMigDeviceCount, handle)
    if not failed(result['uuid']):
        result['by_uuid'] = index_of(pynvml.nvmlDeviceGetHandleByUUID, result['uuid'])
    if not failed(result['pci']):
        result['by_pci_bus_id'] = index_of(pynvml.nvmlDeviceGetHandleByPciBusId, result['pci']['busId'])
    migs = []
    if not failed(result['max_mig_device_count']):
        for slot in range(result['max_mig_device_count']):
            mig = call(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, slot)
            migs.append(mig if failed(mig) else probe_mig(mig, handle))
    result['mig_devices'] = migs
    return result


def main():
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        report = {'init': type(exc).__name__}
        if exc.value == pynvml.NVML_ERROR_UNKNOWN:
            report['error_string'] = pynvml.nvmlErrorString(exc.value)
        json.dump(report, sys.stdout, sort_keys=True)
        return 0
    report = {
        'init': 'ok',
        'driver_version': call(pynvml.nvmlSystemGetDriverVersion),
        'nvml_version': call(pynvml.nvmlSystemGetNVMLVersion),
        'cuda_driver_version': call(pynvml.nvmlSystemGetCudaDriverVersion),
        'cuda_driver_version_v2': call(pynvml.nvmlSystemGetCudaDriverVersion_v2),
        'count': call(pynvml.nvmlDeviceGetCount),
    }
    count = report['count'] if not failed(report['count']) else 0
    report['devices'] = [probe_gpu(index) for index in range(count)]
    pynvml.nvmlShutdown()
    json.dump(report, sys.stdout, sort_keys=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
