# SPDX-License-Identifier: GPL-3.0-or-later
"""The fake libnvidia-ml.so.1, exercised through the real pynvml (nvidia-ml-py) in child processes."""

import ctypes
import importlib.util
import json
import os
import re
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import pynvml

import nvml_profiles

ROOT = Path(__file__).resolve().parents[2]
FAKENVML_DIR = ROOT / 'sandbox' / 'fakenvml'
PROFILES_DIR = ROOT / 'sandbox' / 'profiles'
FIXTURES_DIR = ROOT / 'tests' / 'fixtures' / 'profiles'
PROFILE_NAMES = sorted(path.stem for path in PROFILES_DIR.glob('*.json'))
REQUIRED_PROFILES = ['v100x4', 't4', 'a100x8-mig-mixed', 'h100', 'gtx1060', 'failure-not-supported',
                     'failure-device-lost', 'failure-no-permission', 'failure-driver-not-loaded']
MIB = 1024 * 1024


def _checker():
    spec = importlib.util.spec_from_file_location('check_profiles', FAKENVML_DIR / 'check_profiles.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CHECKER = _checker()


# --------------------------------------------------------------------------- expected values from a profile

def error_class(code_name):
    return pynvml.nvmlExceptionClass(getattr(pynvml, 'NVML_ERROR_' + code_name)).__name__


def injected(function, *levels):
    """The error a profile injects for function: levels are errors maps, most specific first."""
    base = re.sub(r'_v[0-9]+$', '', function)
    for errors in levels:
        for name in (function, base):
            if name in (errors or {}):
                return {'error': error_class(errors[name])}
    return None


def answer(value, function, *levels):
    return injected(function, *levels) or value


def expected_attributes(mp_count, memory_mib, mig=None):
    mig = mig or {}
    return {
        'multiprocessorCount': mp_count,
        'sharedCopyEngineCount': mig.get('copy_engine_count', 0),
        'sharedDecoderCount': mig.get('decoder_count', 0),
        'sharedEncoderCount': mig.get('encoder_count', 0),
        'sharedJpegCount': mig.get('jpeg_count', 0),
        'sharedOfaCount': mig.get('ofa_count', 0),
        'gpuInstanceSliceCount': mig.get('gpu_instance_slices', 0),
        'computeInstanceSliceCount': mig.get('compute_instance_slices', 0),
        'memorySizeMB': memory_mib,
    }


def expected_common(name, uuid, memory_mib, attributes, gpu, levels, is_mig):
    total = memory_mib * MIB
    major, minor = (int(part) for part in gpu['compute_capability'].split('.'))
    return {
        'name': answer(name, 'nvmlDeviceGetName', *levels),
        'uuid': answer(uuid, 'nvmlDeviceGetUUID', *levels),
        'memory': answer({'total': total, 'free': total, 'used': 0}, 'nvmlDeviceGetMemoryInfo', *levels),
        'memory_v2': answer({'version': pynvml.nvmlMemory_v2, 'total': total, 'reserved': 0, 'free': total, 'used': 0},
                            'nvmlDeviceGetMemoryInfo_v2', *levels),
        'attributes': answer(attributes, 'nvmlDeviceGetAttributes_v2', *levels),
        'is_mig': answer(1 if is_mig else 0, 'nvmlDeviceIsMigDeviceHandle', *levels),
        'cuda_compute_capability': answer([major, minor], 'nvmlDeviceGetCudaComputeCapability', *levels),
        'architecture': answer(getattr(pynvml, 'NVML_DEVICE_ARCH_' + gpu['architecture'].upper()),
                               'nvmlDeviceGetArchitecture', *levels),
        'brand': answer(getattr(pynvml, 'NVML_BRAND_' + gpu['brand'].upper()), 'nvmlDeviceGetBrand', *levels),
    }


def expected_mig(gpu, mig, top):
    levels = (mig.get('errors'), gpu.get('errors'), top)
    result = expected_common('%s MIG %s' % (gpu['name'], mig['profile']), mig['uuid'], mig['memory_mib'],
                             expected_attributes(mig['multiprocessor_count'], mig['memory_mib'], mig), gpu, levels,
                             True)
    result['gpu_instance_id'] = answer(mig['gpu_instance_id'], 'nvmlDeviceGetGpuInstanceId', *levels)
    result['compute_instance_id'] = answer(mig['compute_instance_id'], 'nvmlDeviceGetComputeInstanceId', *levels)
    result['parent_is_gpu'] = answer(True, 'nvmlDeviceGetDeviceHandleFromMigDeviceHandle', *levels)
    result['by_uuid_same_handle'] = answer(True, 'nvmlDeviceGetHandleByUUID', *levels)
    return result


def expected_gpu(index, gpu, top):
    levels = (gpu.get('errors'), top)
    handle_error = injected('nvmlDeviceGetHandleByIndex_v2', *levels)
    if handle_error:
        return {'handle': handle_error}
    # a GPU's own handle has no attributes: NVML answers them for MIG devices only (as a real H200 does)
    result = expected_common(gpu['name'], gpu['uuid'], gpu['memory_total_mib'],
                             {'error': 'NVMLError_NotSupported'}, gpu, levels, False)
    result['handle_is_stable'] = True
    result['index'] = answer(index, 'nvmlDeviceGetIndex', *levels)
    serial = gpu['serial'] if 'serial' in gpu else {'error': 'NVMLError_NotSupported'}
    result['serial'] = answer(serial, 'nvmlDeviceGetSerial', *levels)
    result['minor_number'] = answer(gpu.get('minor_number', index), 'nvmlDeviceGetMinorNumber', *levels)
    bus_id = gpu['pci_bus_id'].upper()
    domain, bus, device = (int(part, 16) for part in re.split('[:.]', bus_id)[:3])
    pci = {'busId': bus_id, 'busIdLegacy': bus_id[4:], 'domain': domain, 'bus': bus, 'device': device,
           'pciDeviceId': int(gpu['pci_device_id'], 16), 'pciSubSystemId': int(gpu.get('pci_subsystem_id', '0x0'), 16)}
    result['pci'] = answer(pci, 'nvmlDeviceGetPciInfo_v3', *levels)
    result['persistence_mode'] = answer(1 if gpu.get('persistence_mode') else 0, 'nvmlDeviceGetPersistenceMode', *levels)
    mig = gpu.get('mig', {})
    capable, current = mig.get('capable', False), mig.get('current', False)
    mig_mode = [int(current), int(mig.get('pending', current))] if capable else {'error': 'NVMLError_NotSupported'}
    result['mig_mode'] = answer(mig_mode, 'nvmlDeviceGetMigMode', *levels)
    max_count = mig.get('max_devices', 7) if capable and current else 0
    result['max_mig_device_count'] = answer(max_count, 'nvmlDeviceGetMaxMigDeviceCount', *levels)
    if 'error' not in result['uuid']:
        result['by_uuid'] = answer(index, 'nvmlDeviceGetHandleByUUID', *levels)
    if 'error' not in result['pci']:
        result['by_pci_bus_id'] = answer(index, 'nvmlDeviceGetHandleByPciBusId_v2', *levels)
    migs = []
    if isinstance(result['max_mig_device_count'], int):
        listed = mig.get('devices', [])
        for slot in range(result['max_mig_device_count']):
            if slot < len(listed):
                migs.append(expected_mig(gpu, listed[slot], top))
            else:
                migs.append({'error': 'NVMLError_NotFound'})
    result['mig_devices'] = migs
    return result


def expected_probe(profile):
    top = profile.get('errors', {})
    init_error = injected('nvmlInitWithFlags', top) or injected('nvmlInit', top)
    if init_error:
        return {'init': init_error['error']}
    count = answer(len(profile['devices']), 'nvmlDeviceGetCount_v2', top)
    nvml_version = profile.get('nvml_version', '%d.%s' % (profile['cuda_driver_version'] // 1000,
                                                          profile['driver_version']))
    return {
        'init': 'ok',
        'driver_version': answer(profile['driver_version'], 'nvmlSystemGetDriverVersion', top),
        'nvml_version': answer(nvml_version, 'nvmlSystemGetNVMLVersion', top),
        'cuda_driver_version': answer(profile['cuda_driver_version'], 'nvmlSystemGetCudaDriverVersion', top),
        'cuda_driver_version_v2': answer(profile['cuda_driver_version'], 'nvmlSystemGetCudaDriverVersion_v2', top),
        'count': count,
        'devices': [expected_gpu(i, gpu, top) for i, gpu in enumerate(profile['devices'])] if isinstance(count, int) else [],
    }


# --------------------------------------------------------------------------- build and ABI

def test_required_profiles_are_shipped():
    assert set(REQUIRED_PROFILES) <= set(PROFILE_NAMES)


def test_library_is_a_real_nvml_stand_in(fake_nvml_dir):
    dynamic = subprocess.run(['objdump', '-p', str(fake_nvml_dir / 'libnvidia-ml.so.1')], capture_output=True,
                             text=True, check=True).stdout
    assert re.search(r'SONAME\s+libnvidia-ml\.so\.1\b', dynamic)
    assert re.search(r'NEEDED\s+libjansson\.so\.4\b', dynamic)
    symbols = subprocess.run(['objdump', '-T', str(fake_nvml_dir / 'libnvidia-ml.so.1')], capture_output=True,
                             text=True, check=True).stdout
    exported = {line.split()[-1] for line in symbols.splitlines() if ' .text' in line and ' g ' in line}
    assert exported == set(CHECKER.api_names()) | {'nvmlErrorString'}


def test_pynvml_resolves_every_versioned_symbol_it_uses(fake_nvml_dir):
    lib = ctypes.CDLL(str(fake_nvml_dir / 'libnvidia-ml.so.1'))
    for name in ('nvmlInitWithFlags', 'nvmlInit_v2', 'nvmlDeviceGetCount_v2', 'nvmlDeviceGetHandleByIndex_v2',
                 'nvmlDeviceGetHandleByPciBusId_v2', 'nvmlDeviceGetPciInfo_v3', 'nvmlDeviceGetMemoryInfo_v2',
                 'nvmlDeviceGetAttributes_v2', 'nvmlSystemGetCudaDriverVersion_v2',
                 'nvmlDeviceGetGpuInstanceProfileInfoV', 'nvmlDeviceGetGpuInstanceProfileInfoByIdV',
                 'nvmlGpuInstanceGetComputeInstanceProfileInfoV', 'nvmlDeviceGetGpuInstancePossiblePlacements_v2'):
        assert hasattr(lib, name), name


def test_struct_sizes_match_pynvml():
    header = (FAKENVML_DIR / 'nvml_abi.h').read_text(encoding='utf-8')
    pinned = re.findall(r'_Static_assert\(sizeof\(\w+\) == (\d+), "pynvml\.(\w+)"\)', header)
    assert len(pinned) >= 5
    for size, name in pinned:
        assert ctypes.sizeof(getattr(pynvml, name)) == int(size), name
    assert re.search(r'#define nvmlMemory_v2 0x%08Xu' % pynvml.nvmlMemory_v2, header)


# --------------------------------------------------------------------------- every shipped profile

@pytest.mark.parametrize('name', nvml_profiles.params(PROFILE_NAMES, lambda n: PROFILES_DIR / ('%s.json' % n)))
def test_profile_seen_through_pynvml(nvml, load_profile, name):
    assert nvml.probe(PROFILES_DIR / ('%s.json' % name)) == expected_probe(load_profile(name))


def test_v100x4_values(nvml):
    seen = nvml.probe(PROFILES_DIR / 'v100x4.json')
    assert (seen['driver_version'], seen['cuda_driver_version'], seen['count']) == ('510.47.03', 11060, 4)
    assert {gpu['name'] for gpu in seen['devices']} == {'Tesla V100-PCIE-16GB'}
    assert {gpu['memory']['total'] for gpu in seen['devices']} == {16160 * MIB}
    assert {tuple(gpu['cuda_compute_capability']) for gpu in seen['devices']} == {(7, 0)}
    assert {gpu['architecture'] for gpu in seen['devices']} == {pynvml.NVML_DEVICE_ARCH_VOLTA}
    assert {gpu['pci']['pciDeviceId'] for gpu in seen['devices']} == {0x1DB410DE}
    assert {gpu['mig_mode']['error'] for gpu in seen['devices']} == {'NVMLError_NotSupported'}
    assert len({gpu['uuid'] for gpu in seen['devices']}) == 4


def test_t4_values(nvml):
    seen = nvml.probe(PROFILES_DIR / 't4.json')
    gpu, = seen['devices']
    assert (seen['driver_version'], seen['cuda_driver_version']) == ('450.102.04', 11000)
    assert (gpu['name'], gpu['memory']['total'], gpu['cuda_compute_capability']) == ('Tesla T4', 15109 * MIB, [7, 5])
    assert gpu['architecture'] == pynvml.NVML_DEVICE_ARCH_TURING


def test_a100_mixed_mig_values(nvml):
    seen = nvml.probe(PROFILES_DIR / 'a100x8-mig-mixed.json')
    assert seen['count'] == 8
    assert {gpu['name'] for gpu in seen['devices']} == {'NVIDIA A100-SXM4-80GB'}
    assert {gpu['memory']['total'] for gpu in seen['devices']} == {81920 * MIB}
    assert {tuple(gpu['mig_mode']) for gpu in seen['devices']} == {(1, 1)}
    layouts = [tuple(sorted(mig['name'].rsplit(' ', 1)[1] for mig in gpu['mig_devices'] if 'error' not in mig))
               for gpu in seen['devices']]
    assert len(set(layouts)) >= 3, 'MIG layout is not mixed: %s' % layouts
    memory = {}
    for gpu in seen['devices']:
        for mig in gpu['mig_devices']:
            if 'error' not in mig:
                assert mig['is_mig'] == 1 and mig['parent_is_gpu'] is True
                assert mig['memory']['total'] == mig['attributes']['memorySizeMB'] * MIB
                memory[mig['name'].rsplit(' ', 1)[1]] = mig['attributes']['memorySizeMB']
    # nvidia-smi mig -lgip on an A100 80GB: 9.50, 19.50, 39.25 GiB
    assert memory['1g.10gb'] == 9728 and memory['2g.20gb'] == 19968 and memory['3g.40gb'] == 40192
    first = seen['devices'][0]['mig_devices'][0]
    assert first['name'] == 'NVIDIA A100-SXM4-80GB MIG 1g.10gb'
    assert (first['attributes']['gpuInstanceSliceCount'], first['attributes']['multiprocessorCount']) == (1, 14)


def test_h100_mig_capable_but_disabled(nvml):
    gpu, = nvml.probe(PROFILES_DIR / 'h100.json')['devices']
    assert (gpu['name'], gpu['memory']['total'], gpu['cuda_compute_capability']) == \
        ('NVIDIA H100 80GB HBM3', 81559 * MIB, [9, 0])
    assert gpu['architecture'] == pynvml.NVML_DEVICE_ARCH_HOPPER
    assert gpu['mig_mode'] == [0, 0] and gpu['max_mig_device_count'] == 0 and gpu['mig_devices'] == []


def test_gtx1060_values(nvml):
    seen = nvml.probe(PROFILES_DIR / 'gtx1060.json')
    gpu, = seen['devices']
    assert (seen['driver_version'], seen['cuda_driver_version']) == ('390.30', 9010)
    assert (gpu['name'], gpu['cuda_compute_capability'], gpu['brand']) == \
        ('GeForce GTX 1060 3GB', [6, 1], pynvml.NVML_BRAND_GEFORCE)
    assert gpu['persistence_mode'] == {'error': 'NVMLError_NotSupported'}
    assert gpu['serial'] == {'error': 'NVMLError_NotSupported'}


def test_uuids_are_well_formed(load_profile):
    for name in [n for n in PROFILE_NAMES if nvml_profiles.is_nvml_profile(PROFILES_DIR / ('%s.json' % n))]:
        for gpu in load_profile(name)['devices']:
            assert re.fullmatch(r'GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}', gpu['uuid'])
            for mig in gpu.get('mig', {}).get('devices', []):
                assert re.fullmatch(r'MIG-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}', mig['uuid'])


# --------------------------------------------------------------------------- failure modes

INIT_ONLY = textwrap.dedent('''
    import json, pynvml
    try:
        pynvml.nvmlInit()
        print(json.dumps({'init': 'ok'}))
    except pynvml.NVMLError as exc:
        print(json.dumps({'init': type(exc).__name__, 'str': str(exc), 'value': exc.value,
                          'error_string': pynvml.nvmlErrorString(exc.value)}))
''')


def test_missing_profile_is_driver_not_loaded(nvml, tmp_path):
    seen = nvml.json(tmp_path / 'absent.json', INIT_ONLY)
    assert seen['init'] == 'NVMLError_DriverNotLoaded'


def test_default_profile_path_when_env_unset(nvml):
    seen = nvml.json(None, INIT_ONLY)
    try:
        with open('/etc/fake-nvml/profile.json', encoding='utf-8'):
            pass
    except FileNotFoundError:
        assert seen['init'] == 'NVMLError_DriverNotLoaded'
    else:
        assert seen['init'] in ('ok', 'NVMLError_Unknown')


def test_empty_env_falls_back_to_default_path(nvml):
    assert nvml.json('', INIT_ONLY)['init'] == nvml.json(None, INIT_ONLY)['init']


def test_no_permission(nvml):
    assert nvml.json(PROFILES_DIR / 'failure-no-permission.json', INIT_ONLY)['init'] == 'NVMLError_NoPermission'


def test_driver_not_loaded_profile(nvml):
    seen = nvml.json(PROFILES_DIR / 'failure-driver-not-loaded.json', INIT_ONLY)
    assert seen['init'] == 'NVMLError_DriverNotLoaded'


def test_not_supported_calls(nvml):
    seen = nvml.probe(PROFILES_DIR / 'failure-not-supported.json')
    gpu, = seen['devices']
    for key in ('persistence_mode', 'serial', 'memory_v2', 'attributes', 'architecture'):
        assert gpu[key] == {'error': 'NVMLError_NotSupported'}, key
    assert seen['cuda_driver_version_v2'] == {'error': 'NVMLError_NotSupported'}
    assert seen['cuda_driver_version'] == 11040
    assert gpu['memory']['total'] == 11441 * MIB
    assert gpu['name'] == 'Tesla K80'


def test_device_lost(nvml):
    code = textwrap.dedent('''
        import json, pynvml
        pynvml.nvmlInit()
        out = {'count': pynvml.nvmlDeviceGetCount(), 'first': pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))}
        try:
            pynvml.nvmlDeviceGetHandleByIndex(1)
        except pynvml.NVMLError_GpuIsLost as exc:
            out['second'] = [type(exc).__name__, str(exc)]
        print(json.dumps(out))
    ''')
    seen = nvml.json(PROFILES_DIR / 'failure-device-lost.json', code)
    assert seen == {'count': 2, 'first': 'Tesla T4', 'second': ['NVMLError_GpuIsLost', 'GPU is lost']}


def test_malformed_profile(nvml):
    fixture = FIXTURES_DIR / 'malformed.json'
    seen = nvml.json(fixture, INIT_ONLY)
    assert seen['init'] == 'NVMLError_Unknown'
    detail = seen['error_string']
    assert '\n' not in detail
    assert detail.startswith('fake NVML: %s: line 4 column ' % fixture), detail
    # pynvml's str() uses its own table for NVML_ERROR_UNKNOWN; the detail comes from nvmlErrorString()
    assert seen['str'] == 'Unknown Error'
    problem = CHECKER.check_file(str(fixture))
    assert problem.startswith('%s: line 4 column ' % fixture), problem


def test_malformed_fixture_is_not_a_shipped_profile():
    assert not (PROFILES_DIR / 'malformed.json').exists()


def _profile(**overrides):
    device = {'name': 'Tesla T4', 'uuid': 'GPU-11111111-2222-3333-4444-555555555555', 'pci_bus_id': '00000000:3B:00.0',
              'pci_device_id': '0x1EB810DE', 'memory_total_mib': 15109, 'compute_capability': '7.5',
              'architecture': 'turing', 'brand': 'tesla'}
    device.update(overrides.pop('device', {}))
    profile = {'driver_version': '450.102.04', 'cuda_driver_version': 11000, 'devices': [device]}
    profile.update(overrides)
    return profile


MIG_DEVICE = {'uuid': 'MIG-11111111-2222-3333-4444-555555555555', 'profile': '1g.10gb', 'gpu_instance_slices': 1,
              'compute_instance_slices': 1, 'memory_mib': 9728, 'multiprocessor_count': 14, 'gpu_instance_id': 7,
              'compute_instance_id': 0}

BROKEN = [
    ('top level', 'expected an object', []),
    ('driver_version', 'missing required field', {'cuda_driver_version': 11000, 'devices': []}),
    ('cuda_driver_version', 'expected an integer', _profile(cuda_driver_version='11.0')),
    ('devices', 'expected an array', _profile(devices={})),
    ('colour', 'unknown field', _profile(colour='green')),
    ('devices[0].memory_total_mib', 'expected an integer', _profile(device={'memory_total_mib': '15109'})),
    ('devices[0].memory_total_mib', 'expected an integer', _profile(device={'memory_total_mib': 15109.0})),
    ('devices[0].persistence_mode', 'expected a boolean', _profile(device={'persistence_mode': 1})),
    ('devices[0].name', 'must not be empty', _profile(device={'name': ''})),
    ('devices[0].uuid', 'not a well-formed UUID', _profile(device={'uuid': 'GPU-1234'})),
    ('devices[0].pci_bus_id', 'not a PCI bus id', _profile(device={'pci_bus_id': '3B:00.0'})),
    ('devices[0].pci_device_id', 'not a 32-bit hex id', _profile(device={'pci_device_id': '1EB8'})),
    ('devices[0].compute_capability', 'not of the form MAJOR.MINOR', _profile(device={'compute_capability': '7'})),
    ('devices[0].architecture', "unknown architecture 'fermi'", _profile(device={'architecture': 'fermi'})),
    ('devices[0].brand', "unknown brand 'radeon'", _profile(device={'brand': 'radeon'})),
    ('devices[0].virtualization_mode', "unknown virtualization mode 'vm'", _profile(device={'virtualization_mode': 'vm'})),
    ('devices[0].serial', 'longer than 29 characters', _profile(device={'serial': '1' * 30})),
    ('errors.nvmlDeviceGetFanSpeed', 'unknown NVML function', _profile(errors={'nvmlDeviceGetFanSpeed': 'UNKNOWN'})),
    ('errors.nvmlInit', "unknown NVML return code 'BROKEN'", _profile(errors={'nvmlInit': 'BROKEN'})),
    ('devices[0].errors.nvmlInit', 'not a per-device NVML function', _profile(device={'errors': {'nvmlInit': 'UNKNOWN'}})),
    ('devices[0].mig.capable', 'missing required field', _profile(device={'mig': {}})),
    ('devices[0].mig.current', 'MIG mode enabled but mig.capable is false',
     _profile(device={'mig': {'capable': False, 'current': True}})),
    ('devices[0].mig.devices', 'MIG devices listed but mig.current is not true',
     _profile(device={'mig': {'capable': True, 'devices': [MIG_DEVICE]}})),
    ('devices[0].mig.devices', 'more MIG devices than max_devices (1)',
     _profile(device={'mig': {'capable': True, 'current': True, 'max_devices': 1, 'devices': [MIG_DEVICE, MIG_DEVICE]}})),
    ('devices[0].mig.devices[0].memory_mib', 'missing required field',
     _profile(device={'mig': {'capable': True, 'current': True,
                              'devices': [{k: v for k, v in MIG_DEVICE.items() if k != 'memory_mib'}]}})),
    ('devices[0].mig.devices[1].uuid', 'duplicate of devices[0].mig.devices[0].uuid',
     _profile(device={'mig': {'capable': True, 'current': True, 'devices': [MIG_DEVICE, dict(MIG_DEVICE, gpu_instance_id=8)]}})),
    ('devices[0].event_types', 'expected an array', _profile(device={'event_types': 'xid_critical'})),
    ('devices[0].event_types[1]', "unknown event type 'xid'", _profile(device={'event_types': ['pstate', 'xid']})),
    ('devices[0].xid_events[0].xid', 'missing required field', _profile(device={'xid_events': [{'after_ms': 5}]})),
    ('devices[0].xid_events[0].after_ms', 'must be between 0 and 86400000',
     _profile(device={'xid_events': [{'xid': 79, 'after_ms': -1}]})),
    ('devices[0].xid_events[0].when', 'unknown field', _profile(device={'xid_events': [{'xid': 79, 'when': 0}]})),
    ('devices[0].mig.devices[0].gpu_instance_profile', 'required when gpu_instance_slices is 5',
     _profile(device={'mig': {'capable': True, 'current': True, 'devices': [dict(MIG_DEVICE, gpu_instance_slices=5)]}})),
    ('devices[0].mig.devices[0].compute_instance_profile', 'must be between 0 and 8',
     _profile(device={'mig': {'capable': True, 'current': True, 'devices': [dict(MIG_DEVICE, compute_instance_profile=9)]}})),
    ('devices[1].uuid', 'duplicate of devices[0].uuid',
     dict(_profile(), devices=[_profile()['devices'][0], dict(_profile()['devices'][0], pci_bus_id='00000000:5E:00.0')])),
    ('devices[0].numa_node', 'must be between 0 and 255', _profile(device={'numa_node': 256})),
    ('devices[0].nvlinks', 'expected an array', _profile(device={'nvlinks': '00000000:05:00.0'})),
    ('devices[0].nvlinks[1]', 'not a PCI bus id', _profile(device={'nvlinks': ['00000000:05:00.0', '05:00.0']})),
    ('devices[0].nvlinks[0]', 'expected a string', _profile(device={'nvlinks': [5]})),
    ('devices[0].nvlinks', 'more than 36 NVLinks', _profile(device={'nvlinks': ['00000000:05:00.0'] * 37})),
    ('devices[0].fabric', 'expected an object', _profile(device={'fabric': 'yes'})),
    ('devices[0].fabric.clique', 'unknown field', _profile(device={'fabric': {'clique': 1}})),
    ('devices[0].fabric.cluster_uuid', 'missing required field', _profile(device={'fabric': {'clique_id': 1}})),
    ('devices[0].fabric.cluster_uuid', 'not a well-formed UUID',
     _profile(device={'fabric': {'cluster_uuid': 'GPU-11111111-2222-3333-4444-555555555555', 'clique_id': 1}})),
    ('devices[0].fabric.clique_id', 'must be between 0 and 4294967295',
     _profile(device={'fabric': {'cluster_uuid': '11111111-2222-3333-4444-555555555555', 'clique_id': -1}})),
    ('devices[0].fabric.state', "unknown fabric state 'done'",
     _profile(device={'fabric': {'cluster_uuid': '11111111-2222-3333-4444-555555555555', 'clique_id': 1,
                                 'state': 'done'}})),
    ('devices[0].fabric.status', "unknown NVML return code 'OK'",
     _profile(device={'fabric': {'cluster_uuid': '11111111-2222-3333-4444-555555555555', 'clique_id': 1,
                                 'status': 'OK'}})),
]


@pytest.mark.parametrize('path, problem, profile', BROKEN, ids=[case[0] + ':' + case[1][:24] for case in BROKEN])
def test_broken_profiles_name_the_field(nvml, tmp_path, path, problem, profile):
    target = tmp_path / 'broken.json'
    target.write_text(json.dumps(profile, indent=2), encoding='utf-8')
    seen = nvml.json(target, INIT_ONLY)
    assert seen['init'] == 'NVMLError_Unknown'
    expected_prefix = 'fake NVML: %s: %s: %s' % (target, path, problem)
    assert seen['error_string'].startswith(expected_prefix), seen['error_string']
    assert '\n' not in seen['error_string']
    # the Python checker reports the same line, without the "fake NVML: " prefix
    assert 'fake NVML: ' + CHECKER.check_file(str(target)) == seen['error_string']


def test_the_virtualization_mode_tells_whether_a_mig_mode_switch_waits_for_a_reset(nvml, tmp_path):
    """nvmlDeviceGetVirtualizationMode answers the profile's virtualization_mode (a MIG handle its GPU's), and a GPU
    passed through to a VM switches MIG mode only at the next reset unless its profile says otherwise (nvml.h,
    nvmlDeviceSetMigMode)."""
    mig = {'capable': True, 'max_devices': 7}
    cases = [({}, 0, 1), ({'virtualization_mode': 'passthrough'}, 1, 0),
             ({'virtualization_mode': 'passthrough', 'mig': dict(mig, mode_change='immediate')}, 1, 1),
             ({'virtualization_mode': 'host_vgpu'}, 3, 1), ({'mig': dict(mig, mode_change='reset')}, 0, 0)]
    code = textwrap.dedent('''
        import json, pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        mode = pynvml.nvmlDeviceGetVirtualizationMode(h)
        pynvml.nvmlDeviceSetMigMode(h, 1)
        print(json.dumps([mode, pynvml.nvmlDeviceGetMigMode(h)[0]]))
    ''')
    for i, (device, mode, current_after) in enumerate(cases):
        device = dict({'mig': mig}, **device)
        target = tmp_path / ('p%d.json' % i)
        target.write_text(json.dumps(_profile(device=device)), encoding='utf-8')
        proc = nvml.run(target, code.replace('pynvml.nvmlInit()', 'import os; os.environ["FAKE_NVML_MIG_STATE"] = %r\n'
                                             'pynvml.nvmlInit()' % str(tmp_path / ('state%d.json' % i))))
        assert json.loads(proc.stdout) == [mode, current_after], device
    seen = nvml.json(PROFILES_DIR / 'a100x8-mig-mixed.json', textwrap.dedent('''
        import json, pynvml
        pynvml.nvmlInit()
        mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(pynvml.nvmlDeviceGetHandleByIndex(0), 0)
        print(json.dumps(pynvml.nvmlDeviceGetVirtualizationMode(mig)))
    '''))
    assert seen == 0


def test_duplicate_keys_are_rejected(nvml, tmp_path):
    target = tmp_path / 'dup.json'
    target.write_text('{"driver_version": "1", "driver_version": "2", "cuda_driver_version": 11000, "devices": []}\n',
                      encoding='utf-8')
    seen = nvml.json(target, INIT_ONLY)
    assert seen['init'] == 'NVMLError_Unknown' and 'line 1 column' in seen['error_string']
    assert 'duplicate' in CHECKER.check_file(str(target))


def test_error_string_is_plain_after_a_good_init(nvml, tmp_path):
    target = tmp_path / 'broken.json'
    target.write_text('{', encoding='utf-8')
    code = textwrap.dedent('''
        import json, os, pynvml
        out = []
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError_Unknown:
            out.append(pynvml.nvmlErrorString(pynvml.NVML_ERROR_UNKNOWN))
        os.environ['FAKE_NVML_PROFILE'] = os.environ['GOOD_PROFILE']
        pynvml.nvmlInit()
        out.append(pynvml.nvmlErrorString(pynvml.NVML_ERROR_UNKNOWN))
        out.append(pynvml.nvmlErrorString(pynvml.NVML_ERROR_NOT_SUPPORTED))
        print(json.dumps(out))
    ''')
    proc = nvml.run(target, 'import os; os.environ["GOOD_PROFILE"] = %r\n%s' % (str(PROFILES_DIR / 't4.json'), code))
    first, second, third = json.loads(proc.stdout)
    assert first.startswith('fake NVML: %s: line 1' % target)
    assert (second, third) == ('Unknown Error', 'Not Supported')


def test_nothing_printed_on_stdout_or_stderr(nvml, tmp_path):
    code = 'import pynvml\ntry:\n    pynvml.nvmlInit()\nexcept pynvml.NVMLError:\n    pass\n'
    for profile in (FIXTURES_DIR / 'malformed.json', tmp_path / 'absent.json', PROFILES_DIR / 'a100x8-mig-mixed.json',
                    PROFILES_DIR / 'failure-no-permission.json'):
        proc = nvml.run(profile, code)
        assert (proc.stdout, proc.stderr) == ('', ''), profile


# --------------------------------------------------------------------------- NVML semantics

def test_calls_before_init_are_uninitialized(nvml):
    code = textwrap.dedent('''
        import ctypes, json, pynvml
        lib = ctypes.CDLL('libnvidia-ml.so.1')
        count = ctypes.c_uint(99)
        buf = ctypes.create_string_buffer(80)
        out = {'count_rc': lib.nvmlDeviceGetCount_v2(ctypes.byref(count)), 'count': count.value,
               'driver_rc': lib.nvmlSystemGetDriverVersion(buf, 80), 'shutdown_rc': lib.nvmlShutdown()}
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        for name, function in (('count', pynvml.nvmlDeviceGetCount), ('driver', pynvml.nvmlSystemGetDriverVersion),
                               ('shutdown', pynvml.nvmlShutdown)):
            try:
                function()
                out[name + '_after'] = 'ok'
            except pynvml.NVMLError as exc:
                out[name + '_after'] = type(exc).__name__
        print(json.dumps(out))
    ''')
    seen = nvml.json(PROFILES_DIR / 'v100x4.json', code)
    assert seen == {'count_rc': pynvml.NVML_ERROR_UNINITIALIZED, 'count': 99,
                    'driver_rc': pynvml.NVML_ERROR_UNINITIALIZED, 'shutdown_rc': pynvml.NVML_ERROR_UNINITIALIZED,
                    'count_after': 'NVMLError_Uninitialized', 'driver_after': 'NVMLError_Uninitialized',
                    'shutdown_after': 'NVMLError_Uninitialized'}


def test_init_shutdown_refcount_and_profile_switch(nvml):
    code = textwrap.dedent('''
        import ctypes, json, os, pynvml
        lib = ctypes.CDLL('libnvidia-ml.so.1')
        out = []
        pynvml.nvmlInit()
        out.append(lib.nvmlInit_v2())
        out.append(lib.nvmlInitWithFlags(0))
        out.append(pynvml.nvmlDeviceGetCount())
        os.environ['FAKE_NVML_PROFILE'] = os.environ['SECOND']
        for _ in range(2):
            pynvml.nvmlShutdown()
            out.append(pynvml.nvmlDeviceGetCount())   # still initialised: same profile
        pynvml.nvmlShutdown()
        try:
            pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError_Uninitialized:
            out.append('uninitialized')
        pynvml.nvmlInit()                              # re-reads the profile
        out.append(pynvml.nvmlDeviceGetCount())
        out.append(pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0)))
        pynvml.nvmlShutdown()
        print(json.dumps(out))
    ''')
    seen = nvml.json(PROFILES_DIR / 'v100x4.json',
                     'import os; os.environ["SECOND"] = %r\n%s' % (str(PROFILES_DIR / 't4.json'), code))
    assert seen == [0, 0, 4, 4, 4, 'uninitialized', 1, 'Tesla T4']


def test_invalid_arguments_and_sizes(nvml):
    code = textwrap.dedent('''
        import ctypes, json, pynvml
        pynvml.nvmlInit()
        lib = ctypes.CDLL('libnvidia-ml.so.1')
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        out = {}
        def error_of(function, *args, **kwargs):
            try:
                function(*args, **kwargs)
                return 'ok'
            except pynvml.NVMLError as exc:
                return type(exc).__name__
        out['index_out_of_range'] = error_of(pynvml.nvmlDeviceGetHandleByIndex, 4)
        out['unknown_uuid'] = error_of(pynvml.nvmlDeviceGetHandleByUUID, 'GPU-00000000-0000-0000-0000-000000000000')
        out['unknown_bus'] = error_of(pynvml.nvmlDeviceGetHandleByPciBusId, '00000000:01:00.0')
        out['garbage_bus'] = error_of(pynvml.nvmlDeviceGetHandleByPciBusId, 'not-a-bus-id')
        bogus = ctypes.cast(ctypes.c_void_p(0x1234), pynvml.c_nvmlDevice_t)
        out['bogus_handle'] = error_of(pynvml.nvmlDeviceGetName, bogus)
        out['null_handle'] = error_of(pynvml.nvmlDeviceGetName, pynvml.c_nvmlDevice_t())
        out['wrong_memory_version'] = error_of(pynvml.nvmlDeviceGetMemoryInfo, handle, version=0x01000028)
        out['null_out'] = lib.nvmlDeviceGetCount_v2(None)
        out['null_name'] = lib.nvmlDeviceGetName(handle, None, 96)
        out['null_cc_minor'] = lib.nvmlDeviceGetCudaComputeCapability(handle, ctypes.byref(ctypes.c_int()), None)
        out['null_uuid_arg'] = lib.nvmlDeviceGetHandleByUUID(None, ctypes.byref(pynvml.c_nvmlDevice_t()))
        small = ctypes.create_string_buffer(8)
        out['small_name'] = lib.nvmlDeviceGetName(handle, small, 8)
        out['small_driver'] = lib.nvmlSystemGetDriverVersion(small, 8)
        found = {}
        for query in ('00000000:5E:00.0', '0000:5e:00.0', '5E:00.0', '00000000:5E:00'):
            found[query] = pynvml.nvmlDeviceGetIndex(pynvml.nvmlDeviceGetHandleByPciBusId(query))
        out['bus_forms'] = found
        uuid = pynvml.nvmlDeviceGetUUID(handle)
        out['uuid_case'] = pynvml.nvmlDeviceGetIndex(pynvml.nvmlDeviceGetHandleByUUID('GPU-' + uuid[4:].upper()))
        print(json.dumps(out))
    ''')
    seen = nvml.json(PROFILES_DIR / 'v100x4.json', code)
    invalid = pynvml.NVML_ERROR_INVALID_ARGUMENT
    assert seen == {
        'index_out_of_range': 'NVMLError_InvalidArgument', 'unknown_uuid': 'NVMLError_NotFound',
        'unknown_bus': 'NVMLError_NotFound', 'garbage_bus': 'NVMLError_InvalidArgument',
        'bogus_handle': 'NVMLError_InvalidArgument', 'null_handle': 'NVMLError_InvalidArgument',
        'wrong_memory_version': 'NVMLError_ArgumentVersionMismatch', 'null_out': invalid, 'null_name': invalid,
        'null_cc_minor': invalid, 'null_uuid_arg': invalid, 'small_name': pynvml.NVML_ERROR_INSUFFICIENT_SIZE,
        'small_driver': pynvml.NVML_ERROR_INSUFFICIENT_SIZE,
        'bus_forms': {'00000000:5E:00.0': 1, '0000:5e:00.0': 1, '5E:00.0': 1, '00000000:5E:00': 1}, 'uuid_case': 0,
    }


def test_mig_semantics(nvml):
    code = textwrap.dedent('''
        import json, pynvml
        pynvml.nvmlInit()
        def error_of(function, *args):
            try:
                return function(*args)
            except pynvml.NVMLError as exc:
                return type(exc).__name__
        gpu = pynvml.nvmlDeviceGetHandleByIndex(2)          # 3x 2g.20gb
        mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 0)
        out = {
            'slot_3_free': error_of(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, gpu, 3),
            'slot_7_beyond_max': error_of(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, gpu, 7),
            'gi_on_gpu': error_of(pynvml.nvmlDeviceGetGpuInstanceId, gpu),
            'ci_on_gpu': error_of(pynvml.nvmlDeviceGetComputeInstanceId, gpu),
            'parent_of_gpu': error_of(pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle, gpu),
            'mig_mode_on_mig': error_of(pynvml.nvmlDeviceGetMigMode, mig),
            'mig_of_mig': error_of(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, mig, 0),
            'index_of_mig': [pynvml.nvmlDeviceGetIndex(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, slot))
                             for slot in range(3)],
            'pci_of_mig': pynvml.nvmlDeviceGetPciInfo(mig).busId,
            'mig_name': pynvml.nvmlDeviceGetName(mig),
            'mig_attributes': [pynvml.nvmlDeviceGetAttributes(mig).sharedCopyEngineCount,
                               pynvml.nvmlDeviceGetAttributes(mig).sharedDecoderCount],
        }
        print(json.dumps(out))
    ''')
    seen = nvml.json(PROFILES_DIR / 'a100x8-mig-mixed.json', code)
    assert seen == {
        'slot_3_free': 'NVMLError_NotFound', 'slot_7_beyond_max': 'NVMLError_InvalidArgument',
        'gi_on_gpu': 'NVMLError_InvalidArgument', 'ci_on_gpu': 'NVMLError_InvalidArgument',
        'parent_of_gpu': 'NVMLError_InvalidArgument', 'mig_mode_on_mig': 'NVMLError_InvalidArgument',
        'mig_of_mig': 'NVMLError_InvalidArgument', 'index_of_mig': [0, 1, 2],
        'pci_of_mig': '00000000:47:00.0', 'mig_name': 'NVIDIA A100-SXM4-80GB MIG 2g.20gb', 'mig_attributes': [2, 1],
    }


STRUCT_GUARD = textwrap.dedent('''
    import ctypes, json, pynvml
    pynvml.nvmlInit()
    lib = ctypes.CDLL('libnvidia-ml.so.1')
    handle = pynvml.nvmlDeviceGetHandleByIndex(1)
    out = {}
    for function, struct, version in (('nvmlDeviceGetPciInfo', pynvml.nvmlPciInfo_v2_t, None),
                                      ('nvmlDeviceGetPciInfo_v2', pynvml.nvmlPciInfo_v2_t, None),
                                      ('nvmlDeviceGetPciInfo_v3', pynvml.nvmlPciInfo_t, None),
                                      ('nvmlDeviceGetMemoryInfo', pynvml.c_nvmlMemory_t, None),
                                      ('nvmlDeviceGetMemoryInfo_v2', pynvml.c_nvmlMemory_v2_t, pynvml.nvmlMemory_v2),
                                      ('nvmlDeviceGetAttributes_v2', pynvml.c_nvmlDeviceAttributes, None)):
        size = ctypes.sizeof(struct)
        raw = (ctypes.c_ubyte * (size + 32))(*([0xAA] * (size + 32)))
        if version is not None:
            ctypes.c_uint.from_buffer(raw).value = version
        rc = getattr(lib, function)(handle, ctypes.byref(raw))
        value = struct.from_buffer_copy(bytes(raw[:size]))
        fields = {}
        for name, _ in struct._fields_:
            item = getattr(value, name)
            fields[name] = item.decode() if isinstance(item, bytes) else item
        out[function] = {'rc': rc, 'tail_untouched': list(raw[size:]) == [0xAA] * 32, 'fields': fields}
    print(json.dumps(out))
''')


def test_struct_layouts_and_no_overflow(nvml):
    seen = nvml.json(PROFILES_DIR / 'v100x4.json', STRUCT_GUARD)
    for function, result in seen.items():
        # a GPU's own handle has no attributes (MIG devices only, as on a real H200): refused, nothing written
        rc = pynvml.NVML_ERROR_NOT_SUPPORTED if function == 'nvmlDeviceGetAttributes_v2' else 0
        assert result['rc'] == rc and result['tail_untouched'], function
    legacy = {'busId': '0000:5E:00.0', 'domain': 0, 'bus': 0x5E, 'device': 0, 'pciDeviceId': 0x1DB410DE,
              'pciSubSystemId': 0x121410DE, 'reserved0': 0, 'reserved1': 0, 'reserved2': 0, 'reserved3': 0}
    assert seen['nvmlDeviceGetPciInfo']['fields'] == legacy
    assert seen['nvmlDeviceGetPciInfo_v2']['fields'] == legacy
    assert seen['nvmlDeviceGetPciInfo_v3']['fields'] == {
        'busIdLegacy': '0000:5E:00.0', 'domain': 0, 'bus': 0x5E, 'device': 0, 'pciDeviceId': 0x1DB410DE,
        'pciSubSystemId': 0x121410DE, 'busId': '00000000:5E:00.0'}
    total = 16160 * MIB
    assert seen['nvmlDeviceGetMemoryInfo']['fields'] == {'total': total, 'free': total, 'used': 0}
    assert seen['nvmlDeviceGetMemoryInfo_v2']['fields'] == {'version': pynvml.nvmlMemory_v2, 'total': total,
                                                            'reserved': 0, 'free': total, 'used': 0}
    assert set(seen['nvmlDeviceGetAttributes_v2']['fields'].values()) == {0xAAAAAAAA, 0xAAAAAAAAAAAAAAAA}


def test_handles_are_shared_across_threads(nvml):
    code = textwrap.dedent('''
        import json, threading, pynvml
        pynvml.nvmlInit()
        names = []
        def work():
            for _ in range(200):
                for i in range(pynvml.nvmlDeviceGetCount()):
                    names.append(pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)))
        threads = [threading.Thread(target=work) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        print(json.dumps({'calls': len(names), 'names': sorted(set(names))}))
    ''')
    assert nvml.json(PROFILES_DIR / 'a100x8-mig-mixed.json', code) == {'calls': 4 * 200 * 8,
                                                                       'names': ['NVIDIA A100-SXM4-80GB']}


# --------------------------------------------------------------------------- the profile checker

def test_check_profiles_accepts_shipped_profiles():
    proc = subprocess.run([sys.executable, str(FAKENVML_DIR / 'check_profiles.py'), str(PROFILES_DIR)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == 'check_profiles: %d of %d profiles valid' % (len(PROFILE_NAMES), len(PROFILE_NAMES))


def test_check_profiles_rejects_malformed_with_one_line(tmp_path):
    wrong = tmp_path / 'wrong.json'
    wrong.write_text(json.dumps(_profile(device={'memory_total_mib': 'lots'})), encoding='utf-8')
    proc = subprocess.run([sys.executable, str(FAKENVML_DIR / 'check_profiles.py'), str(FIXTURES_DIR / 'malformed.json'),
                           str(wrong), str(PROFILES_DIR / 't4.json')], capture_output=True, text=True, check=False)
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith('%s: line 4 column ' % (FIXTURES_DIR / 'malformed.json'))
    assert lines[1] == '%s: devices[0].memory_total_mib: expected an integer' % wrong
    assert proc.stdout.strip() == 'check_profiles: 1 of 3 profiles valid'


# --- events: what NVIDIA's device plugin calls for its health checks (internal/rm/health.go: EventSetCreate,
# GetSupportedEventTypes, RegisterEvents with XID critical and ECC errors, EventSetWait, EventSetFree)

EVENTS_PROFILE = {
    'driver_version': '535.183.01', 'cuda_driver_version': 12020,
    'devices': [
        {'name': 'Tesla T4', 'uuid': 'GPU-11111111-2222-3333-4444-555555555555', 'pci_bus_id': '00000000:3B:00.0',
         'pci_device_id': '0x1EB810DE', 'memory_total_mib': 15109, 'compute_capability': '7.5',
         'architecture': 'turing', 'brand': 'tesla',
         'xid_events': [{'xid': 79}, {'xid': 48, 'after_ms': 400}]},
        {'name': 'NVIDIA GeForce RTX 3090', 'uuid': 'GPU-66666666-2222-3333-4444-555555555555',
         'pci_bus_id': '00000000:5E:00.0', 'pci_device_id': '0x220410DE', 'memory_total_mib': 24576,
         'compute_capability': '8.6', 'architecture': 'ampere', 'brand': 'geforce_rtx',
         'xid_events': [{'xid': 13, 'gpu_instance_id': 1, 'compute_instance_id': 0}]},
        {'name': 'Tesla T4', 'uuid': 'GPU-77777777-2222-3333-4444-555555555555', 'pci_bus_id': '00000000:86:00.0',
         'pci_device_id': '0x1EB810DE', 'memory_total_mib': 15109, 'compute_capability': '7.5',
         'architecture': 'turing', 'brand': 'tesla', 'event_types': ['pstate'],
         'errors': {'nvmlDeviceRegisterEvents': 'GPU_IS_LOST'}},
    ],
}


def test_events_deliver_scheduled_xids_as_the_device_plugin_waits_for_them(nvml, tmp_path):
    target = tmp_path / 'events.json'
    target.write_text(json.dumps(EVENTS_PROFILE), encoding='utf-8')
    code = textwrap.dedent('''
        import json, pynvml
        out = {}
        def name(exc):
            return type(exc).__name__
        def event(data):
            return [pynvml.nvmlDeviceGetUUID(data.device), data.eventType, data.eventData, data.gpuInstanceId,
                    data.computeInstanceId]
        pynvml.nvmlInit()
        gpus = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(3)]
        out['supported'] = [pynvml.nvmlDeviceGetSupportedEventTypes(g) for g in gpus]
        mask = (pynvml.nvmlEventTypeXidCriticalError | pynvml.nvmlEventTypeDoubleBitEccError
                | pynvml.nvmlEventTypeSingleBitEccError)
        events = pynvml.nvmlEventSetCreate()
        pynvml.nvmlDeviceRegisterEvents(gpus[0], mask & out['supported'][0], events)
        try:
            pynvml.nvmlDeviceRegisterEvents(gpus[1], mask, events)  # no ECC events on a GeForce board
        except pynvml.NVMLError as exc:
            out['unsupported'] = name(exc)
        pynvml.nvmlDeviceRegisterEvents(gpus[1], mask & out['supported'][1], events)
        try:
            pynvml.nvmlDeviceRegisterEvents(gpus[2], pynvml.nvmlEventTypePState, events)
        except pynvml.NVMLError as exc:
            out['injected'] = name(exc)
        out['first'] = event(pynvml.nvmlEventSetWait_v2(events, 1000))
        out['second'] = event(pynvml.nvmlEventSetWait(events, 1000))
        try:
            pynvml.nvmlEventSetWait_v2(events, 50)  # the next one is due 400 ms after registration
        except pynvml.NVMLError as exc:
            out['early'] = name(exc)
        out['third'] = event(pynvml.nvmlEventSetWait_v2(events, 5000))
        try:
            pynvml.nvmlEventSetWait_v2(events, 0)
        except pynvml.NVMLError as exc:
            out['drained'] = name(exc)
        other = pynvml.nvmlEventSetCreate()
        pynvml.nvmlDeviceRegisterEvents(gpus[0], pynvml.nvmlEventTypeXidCriticalError, other)
        out['other_set'] = event(pynvml.nvmlEventSetWait_v2(other, 1000))  # each set gets every event once
        pynvml.nvmlEventSetFree(events)
        try:
            pynvml.nvmlEventSetFree(events)
        except pynvml.NVMLError as exc:
            out['freed_twice'] = name(exc)
        pynvml.nvmlShutdown()
        pynvml.nvmlInit()
        try:
            pynvml.nvmlEventSetWait_v2(other, 0)  # the last shutdown ended every set
        except pynvml.NVMLError as exc:
            out['after_shutdown'] = name(exc)
        print(json.dumps(out))
    ''')
    seen = nvml.json(target, code)
    t4, rtx = EVENTS_PROFILE['devices'][0]['uuid'], EVENTS_PROFILE['devices'][1]['uuid']
    assert seen['supported'] == [0x1f, 0x1c, 0x4]  # ECC events where the board has ECC; the profile's own list
    assert seen['unsupported'] == 'NVMLError_NotSupported' and seen['injected'] == 'NVMLError_GpuIsLost'
    whole = 0xFFFFFFFF
    assert seen['first'] == [t4, 8, 79, whole, whole]
    assert seen['second'] == [rtx, 8, 13, 1, 0]
    assert seen['early'] == 'NVMLError_Timeout' and seen['drained'] == 'NVMLError_Timeout'
    assert seen['third'] == [t4, 8, 48, whole, whole]
    assert seen['other_set'] == [t4, 8, 79, whole, whole]
    assert seen['freed_twice'] == 'NVMLError_InvalidArgument' and seen['after_shutdown'] == 'NVMLError_InvalidArgument'


def test_mig_handles_register_no_events(nvml):
    code = textwrap.dedent('''
        import json, pynvml
        pynvml.nvmlInit()
        mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(pynvml.nvmlDeviceGetHandleByIndex(0), 0)
        try:
            pynvml.nvmlDeviceGetSupportedEventTypes(mig)
        except pynvml.NVMLError as exc:
            print(json.dumps(type(exc).__name__))
    ''')
    assert nvml.json(PROFILES_DIR / 'a100x8-mig-mixed.json', code) == 'NVMLError_NotSupported'


# --- GPU and compute instances: what go-nvlib reads to name a MIG device as the device plugin and GFD do
# (pkg/nvlib/device/mig_device.go, GetProfile: the instances by id, their info, then every GPU instance profile
# constant and every compute instance profile and engine profile, matched on the profile ids)

MIG_WALK = textwrap.dedent('''
    import ctypes, json, pynvml
    def address(handle):
        return ctypes.cast(handle, ctypes.c_void_p).value
    def walk(mig):
        parent = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
        gi = pynvml.nvmlDeviceGetGpuInstanceById(parent, pynvml.nvmlDeviceGetGpuInstanceId(mig))
        ci = pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, pynvml.nvmlDeviceGetComputeInstanceId(mig))
        gi_info, ci_info = pynvml.nvmlGpuInstanceGetInfo(gi), pynvml.nvmlComputeInstanceGetInfo(ci)
        assert address(gi_info.device) == address(parent) and address(ci_info.device) == address(parent)
        assert address(ci_info.gpuInstance) == address(gi)
        found = []
        for i in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
            try:
                gi_profile = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(parent, i, version=1)
            except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_InvalidArgument):
                continue
            if gi_profile.id != gi_info.profileId:
                continue
            for j in range(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
                try:
                    ci_profile = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, j, 0, version=1)
                except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_InvalidArgument):
                    continue
                if ci_profile.id == ci_info.profileId:
                    found.append([i, j, gi_profile.id, gi_profile.sliceCount, gi_profile.memorySizeMB,
                                  ci_profile.sliceCount, address(gi)])
        return found
    pynvml.nvmlInit()
    out = []
    for g in range(pynvml.nvmlDeviceGetCount()):
        gpu = pynvml.nvmlDeviceGetHandleByIndex(g)
        for slot in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(gpu)):
            try:
                mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, slot)
            except pynvml.NVMLError_NotFound:
                continue
            out.append([pynvml.nvmlDeviceGetUUID(mig), walk(mig)])
    print(json.dumps(out))
''')


def test_mig_instances_name_each_device_the_way_go_nvlib_walks_them(nvml, load_profile):
    profile = load_profile('a100x8-mig-mixed')
    seen = dict(nvml.json(PROFILES_DIR / 'a100x8-mig-mixed.json', MIG_WALK))
    slices_to_constant = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}
    nvidia_smi_ids = {1: 19, 2: 14, 3: 9, 4: 5, 7: 0}  # nvidia-smi mig -lgip on an A100
    migs = [m for gpu in profile['devices'] for m in gpu['mig'].get('devices', [])]
    assert len(seen) == len(migs) == 31
    for mig in migs:
        gi, ci = mig['gpu_instance_slices'], mig['compute_instance_slices']
        (match,) = seen[mig['uuid']]  # exactly one (GPU instance profile, compute instance profile) pair
        assert match[:6] == [slices_to_constant[gi], slices_to_constant[ci], nvidia_smi_ids[gi], gi, mig['memory_mib'], ci]


def test_mig_me_profile_and_two_compute_instances_in_one_gpu_instance(nvml, tmp_path):
    uuid = 'MIG-%d1111111-2222-3333-4444-555555555555'
    me = dict(MIG_DEVICE, uuid=uuid % 1, gpu_instance_profile=7, gpu_instance_id=9)  # 1g.10gb+me
    halves = [dict(MIG_DEVICE, uuid=uuid % (2 + k), profile='1c.2g.20gb', gpu_instance_slices=2, memory_mib=19968,
                   multiprocessor_count=14, gpu_instance_id=3, compute_instance_id=k) for k in range(2)]
    target = tmp_path / 'mig.json'
    target.write_text(json.dumps(_profile(device={'mig': {'capable': True, 'current': True, 'devices': [me] + halves}})),
                      encoding='utf-8')
    seen = dict(nvml.json(target, MIG_WALK))
    assert seen[uuid % 1][0][:4] == [7, 0, 20, 1]  # NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1, nvidia-smi's id 20
    first, second = seen[uuid % 2][0], seen[uuid % 3][0]
    assert first[:6] == second[:6] == [1, 0, 14, 2, 19968, 1]  # 2g GPU instance, 1c compute instances
    assert first[6] == second[6]  # one GPU instance behind both


def test_mig_instance_calls_refuse_what_nvml_refuses(nvml):
    code = textwrap.dedent('''
        import json, pynvml
        def name(call):
            try:
                call()
                return 'ok'
            except pynvml.NVMLError as exc:
                return type(exc).__name__
        pynvml.nvmlInit()
        a100 = pynvml.nvmlDeviceGetHandleByIndex(0)
        gi = pynvml.nvmlDeviceGetGpuInstanceById(a100, pynvml.nvmlDeviceGetGpuInstanceId(
            pynvml.nvmlDeviceGetMigDeviceHandleByIndex(a100, 0)))
        print(json.dumps({
            'unknown_gi': name(lambda: pynvml.nvmlDeviceGetGpuInstanceById(a100, 99)),
            'unknown_ci': name(lambda: pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, 5)),
            'profile_out_of_range': name(lambda: pynvml.nvmlDeviceGetGpuInstanceProfileInfo(a100, 18, version=1)),
            'ci_larger_than_gi': name(lambda: pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, 1, 0, version=1)),
            'other_engine_profile': name(lambda: pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, 0, 1, version=1)),
        }))
    ''')
    seen = nvml.json(PROFILES_DIR / 'a100x8-mig-mixed.json', code)
    assert seen == {'unknown_gi': 'NVMLError_NotFound', 'unknown_ci': 'NVMLError_NotFound',
                    'profile_out_of_range': 'NVMLError_InvalidArgument', 'ci_larger_than_gi': 'NVMLError_NotSupported',
                    'other_engine_profile': 'NVMLError_NotSupported'}
    code = textwrap.dedent('''
        import json, pynvml
        pynvml.nvmlInit()
        out = []
        for call in (lambda g: pynvml.nvmlDeviceGetGpuInstanceById(g, 1),
                     lambda g: pynvml.nvmlDeviceGetGpuInstanceProfileInfo(g, 0, version=1)):
            try:
                call(pynvml.nvmlDeviceGetHandleByIndex(0))
            except pynvml.NVMLError as exc:
                out.append(type(exc).__name__)
        print(json.dumps(out))
    ''')
    # MIG capable but off (h100): no instances; not MIG capable (t4): no profiles
    assert nvml.json(PROFILES_DIR / 'h100.json', code)[0] == 'NVMLError_NotSupported'
    assert nvml.json(PROFILES_DIR / 't4.json', code) == ['NVMLError_NotSupported', 'NVMLError_NotSupported']


# --- topology and NVLinks: what go-gpuallocator reads when the device plugin answers GetPreferredAllocation
# (k8s-device-plugin internal/rm/nvml_manager.go alignedAlloc, go-gpuallocator internal/links/device.go)

def _call_names(code):
    """A child snippet's helper: the value of a call, or the name of the pynvml exception it raised."""
    return textwrap.dedent('''
        import ctypes, json, pynvml
        def name(call):
            try:
                return call()
            except pynvml.NVMLError as exc:
                return type(exc).__name__
    ''') + textwrap.dedent(code)


LINKED = ['00000000:0F:00.0', '00000000:C5:00.0', '00000000:C6:00.0']


def _topology_profile(tmp_path):
    first = _profile()['devices'][0]
    second = dict(first, uuid='GPU-21111111-2222-3333-4444-555555555555', pci_bus_id='00000000:0F:00.0',
                  minor_number=1, nvlinks=['00000000:3B:00.0'])
    third = dict(first, uuid='GPU-31111111-2222-3333-4444-555555555555', pci_bus_id='00000000:86:00.0',
                 minor_number=2, numa_node=1)
    mig = {'capable': True, 'current': True, 'devices': [MIG_DEVICE]}
    devices = [dict(first, nvlinks=LINKED, mig=mig), second, third]
    target = tmp_path / 'topology.json'
    target.write_text(json.dumps(_profile(devices=devices)), encoding='utf-8')
    return target


def test_topology_common_ancestor(nvml, tmp_path):
    code = _call_names('''
        pynvml.nvmlInit()
        a, b, c = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(3))
        mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(a, 0)
        print(json.dumps({
            'same_numa_node': name(lambda: pynvml.nvmlDeviceGetTopologyCommonAncestor(a, b)),
            'across_sockets': [name(lambda: pynvml.nvmlDeviceGetTopologyCommonAncestor(a, c)),
                               name(lambda: pynvml.nvmlDeviceGetTopologyCommonAncestor(c, b))],
            'itself': name(lambda: pynvml.nvmlDeviceGetTopologyCommonAncestor(a, a)),
            'mig': name(lambda: pynvml.nvmlDeviceGetTopologyCommonAncestor(mig, b)),
        }))
    ''')
    assert nvml.json(_topology_profile(tmp_path), code) == {
        'same_numa_node': pynvml.NVML_TOPOLOGY_NODE,
        'across_sockets': [pynvml.NVML_TOPOLOGY_SYSTEM, pynvml.NVML_TOPOLOGY_SYSTEM],
        'itself': 'NVMLError_InvalidArgument', 'mig': 'NVMLError_NotSupported'}


def test_nvlink_state_and_remote_pci_info(nvml, tmp_path):
    code = _call_names('''
        pynvml.nvmlInit()
        a, b, c = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(3))
        def remote(handle, link):
            pci = pynvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link)
            return [pci.busId, pci.busIdLegacy, pci.domain, pci.bus, pci.device, pci.pciDeviceId]
        legacy = pynvml.nvmlPciInfo_v2_t()
        lib = ctypes.CDLL('libnvidia-ml.so.1')
        print(json.dumps({
            'states': [name(lambda: pynvml.nvmlDeviceGetNvLinkState(a, link)) for link in range(5)],
            'remotes': [remote(a, link) for link in range(3)],
            'v1': [lib.nvmlDeviceGetNvLinkRemotePciInfo(a, 1, ctypes.byref(legacy)), legacy.busId, legacy.bus],
            'beyond': [name(lambda: pynvml.nvmlDeviceGetNvLinkRemotePciInfo(a, 3)),
                       name(lambda: pynvml.nvmlDeviceGetNvLinkState(a, 36))],
            'other_gpus': [name(lambda: pynvml.nvmlDeviceGetNvLinkState(b, 0)),
                           name(lambda: pynvml.nvmlDeviceGetNvLinkState(c, 0))],
        }))
    ''')
    seen = nvml.json(_topology_profile(tmp_path), code)
    assert seen['states'] == [pynvml.NVML_FEATURE_ENABLED] * 3 + ['NVMLError_NotSupported'] * 2
    # the remote end that is one of the profile's GPUs has its device id; an NVSwitch's is not known (0)
    assert seen['remotes'] == [['00000000:0F:00.0', '0000:0F:00.0', 0, 0x0F, 0, 0x1EB810DE],
                               ['00000000:C5:00.0', '0000:C5:00.0', 0, 0xC5, 0, 0],
                               ['00000000:C6:00.0', '0000:C6:00.0', 0, 0xC6, 0, 0]]
    assert seen['v1'] == [0, '0000:C5:00.0', 0xC5]
    assert seen['beyond'] == ['NVMLError_NotSupported', 'NVMLError_InvalidArgument']
    assert seen['other_gpus'] == [pynvml.NVML_FEATURE_ENABLED, 'NVMLError_NotSupported']


# --- GPU fabric: go-nvlib's IsFabricAttached, behind GFD's nvidia.com/gpu.clique label (internal/lm/fabric.go)

def test_gpu_fabric_info(nvml, tmp_path):
    fabric = {'cluster_uuid': '7f2c4c8e-1b2a-4d3e-9f10-112233445566', 'clique_id': 32766, 'health_mask': 5}
    mig = {'capable': True, 'current': True, 'devices': [MIG_DEVICE]}
    devices = [dict(_profile()['devices'][0], fabric=fabric, mig=mig),
               dict(_profile()['devices'][0], uuid='GPU-21111111-2222-3333-4444-555555555555',
                    pci_bus_id='00000000:0F:00.0', minor_number=1,
                    fabric=dict(fabric, state='in_progress', status='NOT_READY'))]
    target = tmp_path / 'fabric.json'
    target.write_text(json.dumps(_profile(devices=devices)), encoding='utf-8')
    code = _call_names('''
        pynvml.nvmlInit()
        a, b = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(2))
        def v1(handle):
            info = pynvml.c_nvmlGpuFabricInfo_t()
            pynvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info))
            return [bytes(info.clusterUuid).hex(), info.status, info.cliqueId, info.state]
        def v(handle, struct):
            info = struct()
            pynvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info))
            return [info.version, bytes(info.clusterUuid).hex(), info.status, info.cliqueId, info.state,
                    info.healthMask]
        def wrong_version():
            info = pynvml.c_nvmlGpuFabricInfo_v2_t()
            info.version = 0x01000024
            return pynvml.nvmlDeviceGetGpuFabricInfoV(a, ctypes.byref(info))
        mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(a, 0)
        print(json.dumps({
            'v1': [v1(a), v1(b)],
            'v2': v(a, pynvml.c_nvmlGpuFabricInfo_v2_t), 'v3': v(b, pynvml.c_nvmlGpuFabricInfo_v3_t),
            'wrong_version': name(wrong_version),
            'mig': name(lambda: v1(mig)),
        }))
    ''')
    seen = nvml.json(target, code)
    uuid = '7f2c4c8e1b2a4d3e9f10112233445566'
    assert seen['v1'] == [[uuid, 0, 32766, pynvml.NVML_GPU_FABRIC_STATE_COMPLETED],
                          [uuid, pynvml.NVML_ERROR_NOT_READY, 32766, pynvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS]]
    assert seen['v2'] == [pynvml.nvmlGpuFabricInfo_v2, uuid, 0, 32766, pynvml.NVML_GPU_FABRIC_STATE_COMPLETED, 5]
    assert seen['v3'] == [pynvml.nvmlGpuFabricInfo_v3, uuid, pynvml.NVML_ERROR_NOT_READY, 32766,
                          pynvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS, 5]
    assert (seen['wrong_version'], seen['mig']) == ('NVMLError_ArgumentVersionMismatch', 'NVMLError_NotSupported')
    code = _call_names('''
        pynvml.nvmlInit()
        info = pynvml.c_nvmlGpuFabricInfo_t()
        print(json.dumps(name(lambda: pynvml.nvmlDeviceGetGpuFabricInfo(pynvml.nvmlDeviceGetHandleByIndex(0),
                                                                          ctypes.byref(info)))))
    ''')
    assert nvml.json(PROFILES_DIR / 'h100.json', code) == 'NVMLError_NotSupported'   # no fabric in the profile


# --- GPU and compute instances listed by profile, as mig-parted walks them (internal/nvlib/mig/mig.go)

def test_gpu_and_compute_instances_by_profile(nvml):
    code = _call_names('''
        pynvml.nvmlInit()
        gpu = pynvml.nvmlDeviceGetHandleByIndex(0)
        def gpu_instances(profile_id, capacity=7):
            array = (pynvml.c_nvmlGpuInstance_t * capacity)()
            count = ctypes.c_uint(capacity)
            pynvml.nvmlDeviceGetGpuInstances(gpu, profile_id, array, ctypes.byref(count))
            return [pynvml.nvmlGpuInstanceGetInfo(array[i]).id for i in range(count.value)]
        def compute_instances(gi_id, profile, capacity=8):
            gi = pynvml.nvmlDeviceGetGpuInstanceById(gpu, gi_id)
            array = (pynvml.c_nvmlComputeInstance_t * capacity)()
            count = ctypes.c_uint(capacity)
            pynvml.nvmlGpuInstanceGetComputeInstances(gi, profile, array, ctypes.byref(count))
            return [pynvml.nvmlComputeInstanceGetInfo(array[i]).id for i in range(count.value)]
        two_slices = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(gpu, pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE,
                                                                version=1)
        print(json.dumps({
            'by_profile_id': {pid: name(lambda: gpu_instances(pid)) for pid in (0, 5, 9, 14, 19, 1)},
            'too_small': name(lambda: gpu_instances(14, capacity=0)),
            'instance_count_2g': two_slices.instanceCount,
            'cis': {profile: name(lambda: compute_instances(3, profile)) for profile in range(4)},
            'cis_too_small': name(lambda: compute_instances(3, 0, capacity=1)),
            'ci_profile_out_of_range': name(lambda: compute_instances(3, 9)),
        }))
    ''')
    seen = nvml.json(PROFILES_DIR / 'a100-mig-compute-instances.json', code)
    assert seen['by_profile_id'] == {'0': [], '5': [], '9': [2], '14': [3], '19': [], '1': 'NVMLError_InvalidArgument'}
    assert seen['too_small'] == 'NVMLError_InsufficientSize' and seen['instance_count_2g'] == 3
    assert seen['cis'] == {'0': [0, 1], '1': [], '2': 'NVMLError_NotSupported', '3': 'NVMLError_NotSupported'}
    assert seen['cis_too_small'] == 'NVMLError_InsufficientSize'
    assert seen['ci_profile_out_of_range'] == 'NVMLError_InvalidArgument'
    code = _call_names('''
        pynvml.nvmlInit()
        gpu = pynvml.nvmlDeviceGetHandleByIndex(0)
        array, count = (pynvml.c_nvmlGpuInstance_t * 7)(), ctypes.c_uint(7)
        def me():
            info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(gpu, pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1,
                                                              version=1)
            return [info.id, info.instanceCount]
        print(json.dumps({'me_instances': name(me),
                          'mig_off': name(lambda: pynvml.nvmlDeviceGetGpuInstances(gpu, 19, array, ctypes.byref(count)))}))
    ''')
    assert nvml.json(PROFILES_DIR / 'h100-mig-me.json', code)['me_instances'] == [20, 1]   # "1g.10gb+me ... 1/1"
    assert nvml.json(PROFILES_DIR / 'h100.json', code)['mig_off'] == 'NVMLError_NotSupported'


# --- the exports, against the README

def _readme_table(header):
    """The nvml* names in the first column of the README table whose header line is header ("`x`, `_v2`" is x_v2)."""
    text = (FAKENVML_DIR / 'README.md').read_text(encoding='utf-8')
    rows = re.match(r'(\|.*\n)+', text.split('\n' + header + '\n', 1)[1]).group(0).splitlines()[1:]
    names = set()
    for row in rows:
        cell = row.split('|')[1]
        names |= set(re.findall(r'`(nvml\w+)`', cell))
        names |= {base + suffix for base, suffix in re.findall(r'`(nvml\w+?)`, `(_v\d)`', cell)}
    return names


def test_exports_are_nvml_and_match_the_readme(fake_nvml_dir):
    symbols = subprocess.run(['nm', '-D', '--defined-only', str(fake_nvml_dir / 'libnvidia-ml.so.1')],
                             capture_output=True, text=True, check=True).stdout.split('\n')
    exported = {line.split()[-1] for line in symbols if line.strip()}
    assert exported and all(name.startswith('nvml') for name in exported), sorted(exported)
    implemented = _readme_table('| function | answer |')
    callers = _readme_table('| function | program | where |')
    assert implemented == exported, (sorted(implemented - exported), sorted(exported - implemented))
    assert callers <= exported, sorted(callers - exported)


# --- mig-minors: sandbox/fakenvml/mig_minors.py

def _mig_minors():
    spec = importlib.util.spec_from_file_location('mig_minors', FAKENVML_DIR / 'mig_minors.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MIG_MINORS = _mig_minors()


def test_mig_minors_is_the_drivers_table(load_profile):
    lines = MIG_MINORS.render(load_profile('t4')).splitlines()
    # nv-caps.c: config and monitor, then gpu0..31 x gi0..14 x (access, ci0..7 access), minors in that order from 1
    assert len(lines) == 2 + 32 * 15 * 9
    assert lines[:5] == ['config 1', 'monitor 2', 'gpu0/gi0/access 3', 'gpu0/gi0/ci0/access 4',
                         'gpu0/gi0/ci1/access 5']
    assert 'gpu0/gi1/access 12' in lines and 'gpu0/gi1/ci0/access 13' in lines
    # values seen on real hosts (quoted in NVIDIA/k8s-dra-driver-gpu cmd/gpu-kubelet-plugin/nvlib.go)
    assert 'gpu3/gi3/ci3/access 439' in lines and 'gpu6/gi11/ci7/access 920' in lines
    assert lines[-1] == 'gpu31/gi14/ci7/access 4322'
    assert [int(line.split()[1]) for line in lines] == list(range(1, 4323))
    # the same table whatever the layout; none without the kernel module
    assert MIG_MINORS.render(load_profile('a100x8-mig-mixed')) == MIG_MINORS.render(load_profile('t4'))
    assert MIG_MINORS.render(load_profile('failure-driver-not-loaded')) is None
    assert MIG_MINORS.render(load_profile('failure-no-permission')) is not None


def test_mig_device_paths_follow_the_gpu_minor(load_profile):
    profile = load_profile('a100-mig-compute-instances')
    (gi3_ci0, gi3_ci1) = [m['uuid'] for m in profile['devices'][0]['mig']['devices'] if m['gpu_instance_id'] == 3]
    paths = MIG_MINORS.device_paths(profile)
    assert paths[gi3_ci0] == ['/dev/nvidia0', '/dev/nvidia-caps/nvidia-cap30', '/dev/nvidia-caps/nvidia-cap31']
    assert paths[gi3_ci1] == ['/dev/nvidia0', '/dev/nvidia-caps/nvidia-cap30', '/dev/nvidia-caps/nvidia-cap32']
    mixed = load_profile('a100x8-mig-mixed')
    gpu = mixed['devices'][6]
    first = gpu['mig']['devices'][0]
    assert MIG_MINORS.device_paths(mixed)[first['uuid']][0] == '/dev/nvidia%d' % gpu['minor_number']
    assert len(MIG_MINORS.device_paths(mixed)) == 31
    assert MIG_MINORS.capabilities(load_profile('h100')) == [('config', 1), ('monitor', 2)]
    with pytest.raises(MIG_MINORS.MigMinorsError):
        MIG_MINORS.minor(32, 0)


def test_mig_minors_writes_the_file_and_the_devices(load_profile, tmp_path):
    profile = load_profile('a100-mig-compute-instances')
    out = tmp_path / 'caps' / 'mig-minors'
    if os.geteuid() == 0:
        made = MIG_MINORS.write(profile, str(out), str(tmp_path / 'dev'), major=511)
        nodes = {p.name: (stat.S_ISCHR(p.stat().st_mode), os.major(p.stat().st_rdev), os.minor(p.stat().st_rdev),
                          stat.S_IMODE(p.stat().st_mode)) for p in (tmp_path / 'dev').iterdir()}
        assert made == 7 and nodes == {'nvidia-cap%d' % m: (True, 511, m, 0o400 if m == 1 else 0o444)
                                       for _cap, m in MIG_MINORS.capabilities(profile)}
        assert MIG_MINORS.write(profile, str(out), str(tmp_path / 'dev')) == 0   # existing nodes stay
    else:
        MIG_MINORS.write(profile, str(out))
    assert out.read_text(encoding='ascii') == MIG_MINORS.render(profile)
    MIG_MINORS.write(load_profile('failure-driver-not-loaded'), str(out))
    assert not out.exists()
