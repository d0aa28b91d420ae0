# SPDX-License-Identifier: GPL-3.0-or-later
"""MIG reconfiguration in the fake libnvidia-ml.so.1, through the real pynvml in child processes, and its state file.

Every NVML call runs in a child process of its own (as each Ansible module and each Go program does in the sandbox),
with ``FAKE_NVML_MIG_STATE`` pointing at a state file under the test's temporary directory, so that what one process
changes is read back by the next. ``sandbox/fakenvml/mig_state.py`` (the Python view of the same file) is checked
against what pynvml reads.
"""

import ctypes
import importlib.util
import json
import math
import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
import pynvml

ROOT = Path(__file__).resolve().parents[2]
FAKENVML_DIR = ROOT / 'sandbox' / 'fakenvml'
PROFILES_DIR = ROOT / 'sandbox' / 'profiles'
CAPABLE = PROFILES_DIR / 'a100x2-mig-capable.json'      # 2x A100 80GB, MIG capable and off, immediate mode changes
RESET = PROFILES_DIR / 'h100-mig-reset.json'            # 1x H100 80GB, MIG capable and off, changes need a reset
MIB = 1024 * 1024
GIB = 1024 * MIB


def _module(name):
    spec = importlib.util.spec_from_file_location(name, FAKENVML_DIR / ('%s.py' % name))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MIG_STATE = _module('mig_state')
CHECKER = _module('check_profiles')

# The entry points this work adds (nvml.h names; pynvml binds every one of them but the first placements version,
# which go-nvml falls back to when _v2 is missing).
NEW_FUNCTIONS = [
    'nvmlDeviceSetMigMode', 'nvmlDeviceGetGpuInstanceProfileInfoV', 'nvmlDeviceGetGpuInstanceProfileInfoByIdV',
    'nvmlDeviceGetGpuInstancePossiblePlacements', 'nvmlDeviceGetGpuInstancePossiblePlacements_v2',
    'nvmlDeviceGetGpuInstanceRemainingCapacity', 'nvmlDeviceCreateGpuInstance',
    'nvmlDeviceCreateGpuInstanceWithPlacement', 'nvmlGpuInstanceDestroy',
    'nvmlGpuInstanceGetComputeInstanceProfileInfoV', 'nvmlGpuInstanceGetComputeInstancePossiblePlacements',
    'nvmlGpuInstanceGetComputeInstanceRemainingCapacity', 'nvmlGpuInstanceCreateComputeInstance',
    'nvmlGpuInstanceCreateComputeInstanceWithPlacement', 'nvmlComputeInstanceDestroy',
]

PRELUDE = textwrap.dedent('''
    import ctypes, json, os, sys, pynvml

    def name(call):
        """The value of a call, or the name of the pynvml exception it raised."""
        try:
            return call()
        except pynvml.NVMLError as exc:
            return type(exc).__name__

    def text(value):
        return value.decode() if isinstance(value, bytes) else value

    def gpu(index):
        return pynvml.nvmlDeviceGetHandleByIndex(index)

    def gi_profile(handle, constant):
        return pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, constant)

    def create(handle, constant, ci_profile=None):
        """A GPU instance of a profile constant and one compute instance (the whole instance by default), as
        mig-parted creates them (pkg/mig/config/config.go SetMigConfig): ids from the profile infos."""
        gi = pynvml.nvmlDeviceCreateGpuInstance(handle, gi_profile(handle, constant).id)
        if ci_profile is None:
            ci_profile = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}[gi_profile(handle, constant).sliceCount]
        info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, ci_profile, 0)
        ci = pynvml.nvmlGpuInstanceCreateComputeInstance(gi, info.id)
        return gi, ci

    def gi_of(handle, gi_id):
        return pynvml.nvmlDeviceGetGpuInstanceById(handle, gi_id)

    def placement(gi):
        info = pynvml.nvmlGpuInstanceGetInfo(gi)
        return [info.id, info.profileId, info.placement.start, info.placement.size]

    def migs(handle):
        """[slot, uuid, name, memory MiB, SMs, GI id, CI id, engines..., slices] of every MIG device of a GPU."""
        out = []
        for slot in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
            try:
                mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except pynvml.NVMLError_NotFound:
                continue
            attrs = pynvml.nvmlDeviceGetAttributes(mig)
            out.append({'slot': slot, 'uuid': pynvml.nvmlDeviceGetUUID(mig), 'name': pynvml.nvmlDeviceGetName(mig),
                        'memory_mib': pynvml.nvmlDeviceGetMemoryInfo(mig).total // (1024 * 1024),
                        'memory_size_mb': attrs.memorySizeMB, 'multiprocessor_count': attrs.multiprocessorCount,
                        'gpu_instance_id': pynvml.nvmlDeviceGetGpuInstanceId(mig),
                        'compute_instance_id': pynvml.nvmlDeviceGetComputeInstanceId(mig),
                        'copy_engine_count': attrs.sharedCopyEngineCount, 'decoder_count': attrs.sharedDecoderCount,
                        'encoder_count': attrs.sharedEncoderCount, 'jpeg_count': attrs.sharedJpegCount,
                        'ofa_count': attrs.sharedOfaCount, 'gpu_instance_slices': attrs.gpuInstanceSliceCount,
                        'compute_instance_slices': attrs.computeInstanceSliceCount,
                        'index': pynvml.nvmlDeviceGetIndex(mig)})
        return out

    pynvml.nvmlInit()
''')


class Node:
    """A node's profile and MIG state file; runs pynvml snippets against them, one child process each."""

    def __init__(self, runner, profile, state):
        self.runner = runner
        self.profile = Path(profile)
        self.state = Path(state)

    def env(self):
        env = self.runner.env(self.profile)
        env['FAKE_NVML_MIG_STATE'] = str(self.state)
        return env

    def popen(self, code):
        return subprocess.Popen([sys.executable, '-c', PRELUDE + textwrap.dedent(code)], env=self.env(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def run(self, code):
        """Run a snippet that prints one JSON document; return it parsed."""
        proc = subprocess.run([sys.executable, '-c', PRELUDE + textwrap.dedent(code)], env=self.env(),
                              capture_output=True, text=True, timeout=60, check=False)
        assert proc.returncode == 0 and proc.stderr == '', 'child failed (rc %d):\n%s%s' % (
            proc.returncode, proc.stdout, proc.stderr)
        return json.loads(proc.stdout)

    def profile_data(self):
        return json.loads(self.profile.read_text(encoding='utf-8'))

    def state_data(self):
        return MIG_STATE.load(str(self.state))


@pytest.fixture
def node(nvml, tmp_path):
    """make(profile): a node serving that profile, with a state file in a directory of its own."""
    def make(profile=CAPABLE, state_dir='state'):
        (tmp_path / state_dir).mkdir(exist_ok=True)
        return Node(nvml, profile, tmp_path / state_dir / 'mig-state.json')
    return make


def write_profile(tmp_path, profile, name='profile.json'):
    path = tmp_path / name
    path.write_text(json.dumps(profile, indent=2), encoding='utf-8')
    return path


def go_nvlib_gb(total_bytes, memory_mb):
    """go-nvlib pkg/nvlib/device/mig_profile.go getMigMemorySizeGB (and mig-parted's getMigMemorySizeInGB), as Go
    computes it: floats, the share rounded up to eighths, times the GPU's GiB rounded up, rounded half away from 0."""
    fraction = (memory_mb * MIB) / total_bytes
    fraction = math.ceil(fraction * 8) / 8
    total_gb = (total_bytes + GIB - 1) // GIB
    return math.floor(fraction * total_gb + 0.5)


def go_nvlib_name(total_bytes, gi_info, ci_slices, constant):
    """go-nvlib's MigProfileInfo.String / mig-parted's MigProfile.String of a (GPU instance, compute instance)."""
    suffix = '+me' if constant == pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1 else ''
    gigabytes = go_nvlib_gb(total_bytes, gi_info['memorySizeMB'])
    if ci_slices == gi_info['sliceCount']:
        return '%dg.%dgb%s' % (gi_info['sliceCount'], gigabytes, suffix)
    return '%dc.%dg.%dgb%s' % (ci_slices, gi_info['sliceCount'], gigabytes, suffix)


# --------------------------------------------------------------------------- exports

def test_the_mig_write_api_is_exported_and_listed(fake_nvml_dir):
    symbols = subprocess.run(['nm', '-D', '--defined-only', str(fake_nvml_dir / 'libnvidia-ml.so.1')],
                             capture_output=True, text=True, check=True).stdout
    exported = {line.split()[-1] for line in symbols.splitlines() if line.strip()}
    assert set(NEW_FUNCTIONS) <= exported, sorted(set(NEW_FUNCTIONS) - exported)
    assert set(NEW_FUNCTIONS) <= set(CHECKER.api_names())   # profiles may inject errors into them
    source = Path(pynvml.__file__).read_text(encoding='utf-8')
    bound = [fn for fn in NEW_FUNCTIONS if '_nvmlGetFunctionPointer("%s")' % fn in source]
    assert len(bound) == len(NEW_FUNCTIONS) - 1, sorted(set(NEW_FUNCTIONS) - set(bound))
    lib = ctypes.CDLL(str(fake_nvml_dir / 'libnvidia-ml.so.1'))
    for function in NEW_FUNCTIONS:
        assert hasattr(lib, function), function


# --------------------------------------------------------------------------- the profile table

TABLE = '''
    out = {}
    for index in range(pynvml.nvmlDeviceGetCount()):
        handle = gpu(index)
        total = pynvml.nvmlDeviceGetMemoryInfo(handle).total
        rows = {}
        for constant in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT + 1):
            info = name(lambda: pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, constant))
            if isinstance(info, str):
                rows[constant] = info
                continue
            v1 = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, constant, version=1)
            by_id = pynvml.nvmlDeviceGetGpuInstanceProfileInfoById(handle, info.id)
            fields = [f for f, _ in pynvml.c_nvmlGpuInstanceProfileInfo_t._fields_]
            count = ctypes.c_uint(0)
            pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, info.id, None, ctypes.byref(count))
            array = (pynvml.c_nvmlGpuInstancePlacement_t * count.value)()
            pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, info.id, array, ctypes.byref(count))
            rows[constant] = {f: getattr(info, f) for f in fields}
            rows[constant].update(name=text(info.name), version=info.version,
                                  v1_same=all(getattr(v1, f) == getattr(info, f) for f in fields),
                                  by_id_same=all(getattr(by_id, f) == getattr(info, f) for f in fields)
                                  and by_id.name == info.name,
                                  placements=[[p.start, p.size] for p in array])
        out[index] = {'total': total, 'rows': rows,
                      'mig_mode': pynvml.nvmlDeviceGetMigMode(handle)}
    print(json.dumps(out))
'''

NAMES_80GB = {0: '1g.10gb', 7: '1g.10gb+me', 9: '1g.20gb', 1: '2g.20gb', 2: '3g.40gb', 3: '4g.40gb', 4: '7g.80gb'}
NAMES_40GB = {0: '1g.5gb', 7: '1g.5gb+me', 9: '1g.10gb', 1: '2g.10gb', 2: '3g.20gb', 3: '4g.20gb', 4: '7g.40gb'}
PLACEMENTS = {0: [[s, 1] for s in range(7)], 7: [[s, 1] for s in range(7)], 9: [[0, 2], [2, 2], [4, 2], [6, 2]],
              1: [[0, 2], [2, 2], [4, 2]], 2: [[0, 4], [4, 4]], 3: [[0, 4]], 4: [[0, 8]]}
IDS = {0: 19, 7: 20, 9: 15, 1: 14, 2: 9, 3: 5, 4: 0}          # nvidia-smi mig -lgip on A100 and H100
INSTANCES = {0: 7, 7: 1, 9: 4, 1: 3, 2: 2, 3: 1, 4: 1}
SLICES = {0: 1, 7: 1, 9: 1, 1: 2, 2: 3, 3: 4, 4: 7}
MEMORY_SLICES = {0: 1, 7: 1, 9: 2, 1: 2, 2: 4, 3: 4, 4: 8}


def _check_table(seen, names, total_mib):
    rows = seen['rows']
    assert seen['total'] == total_mib * MIB
    offered = {int(c): row for c, row in rows.items() if isinstance(row, dict)}
    assert sorted(offered) == sorted(names)
    for constant, row in offered.items():
        assert (row['id'], row['sliceCount'], row['instanceCount']) == \
            (IDS[constant], SLICES[constant], INSTANCES[constant]), constant
        assert row['memorySizeMB'] == total_mib * MEMORY_SLICES[constant] // 8
        assert row['placements'] == PLACEMENTS[constant]
        assert row['v1_same'] and row['by_id_same'] and row['version'] == pynvml.nvmlGpuInstanceProfileInfo_v2
        # go-nvlib's and mig-parted's computation from the info, and the info's own name, give nvidia-smi's names
        assert go_nvlib_name(seen['total'], row, row['sliceCount'], constant) == names[constant]
        assert row['name'] == 'MIG ' + names[constant]
    others = {int(c): row for c, row in rows.items() if not isinstance(row, dict)}
    wanted = {c: 'NVMLError_NotSupported' for c in range(18) if c not in names}
    wanted[18] = 'NVMLError_InvalidArgument'
    assert others == wanted


def test_full_profile_table_and_names_on_80gb_a100_and_h100(node):
    seen = node(CAPABLE).run(TABLE)
    for index in ('0', '1'):
        _check_table(seen[index], NAMES_80GB, 81920)
        assert seen[index]['mig_mode'] == [0, 0]       # offered whatever the MIG mode: a property of the GPU
    a100 = seen['0']['rows']
    # SMs: 14 per compute slice of a 108-SM A100 (nvidia-smi: 14, 28, 42, 56, 98); engines as nvidia-smi -lgip shows
    assert [a100[c]['multiprocessorCount'] for c in ('0', '1', '2', '3', '4')] == [14, 28, 42, 56, 98]
    assert [a100[c]['decoderCount'] for c in ('0', '1', '2', '3', '4')] == [0, 1, 2, 2, 5]
    assert [a100['7'][f] for f in ('decoderCount', 'jpegCount', 'ofaCount')] == [1, 1, 1]
    h100 = node(RESET).run(TABLE)['0']
    _check_table(h100, NAMES_80GB, 81559)
    assert [h100['rows'][c]['decoderCount'] for c in ('0', '1', '2', '3', '4')] == [1, 2, 3, 4, 7]
    # The same GH100 die as the H200 a real driver described (tests/fixtures/realgpu): every count but the memory,
    # which the fake takes as an eighth of the total per memory slice, is what NVML answered there.
    record = json.loads((ROOT / 'tests' / 'fixtures' / 'realgpu' / 'h200-580.159.04.json').read_text(encoding='utf-8'))
    real = {c: e['v1'] for c, e in record['mig_read']['gpus'][0]['gpu_instance_profiles'].items() if 'error' not in e['v1']}
    counts = ('id', 'sliceCount', 'instanceCount', 'multiprocessorCount', 'copyEngineCount', 'decoderCount',
              'encoderCount', 'jpegCount', 'ofaCount')
    assert {c: [h100['rows'][c][f] for f in counts] for c in real} == {c: [r[f] for f in counts] for c, r in real.items()}


def test_full_profile_table_and_names_on_40gb_a100(node, tmp_path):
    profile = json.loads(CAPABLE.read_text(encoding='utf-8'))
    profile['devices'] = profile['devices'][:1]
    profile['devices'][0].update(name='NVIDIA A100-SXM4-40GB', memory_total_mib=40960, pci_device_id='0x20B010DE')
    seen = node(write_profile(tmp_path, profile)).run(TABLE)
    _check_table(seen['0'], NAMES_40GB, 40960)


def test_listed_profiles_keep_their_values_beside_the_table(node):
    """A profile's listed MIG devices set their profile's entry as before the table (9728 MiB, not 80 GB / 8)."""
    seen = node(PROFILES_DIR / 'a100x8-mig-mixed.json').run(TABLE)['0']['rows']
    assert (seen['0']['memorySizeMB'], seen['0']['instanceCount'], seen['0']['name']) == (9728, 7, 'MIG 1g.10gb')
    assert seen['4']['memorySizeMB'] == 81920 and seen['4']['name'] == 'MIG 7g.80gb'   # not listed: the geometry's
    seen = node(PROFILES_DIR / 'h100-mig-me.json').run(TABLE)['0']['rows']
    assert (seen['7']['memorySizeMB'], seen['7']['ofaCount'], seen['7']['name']) == (9984, 1, 'MIG 1g.10gb+me')


def test_compute_instance_profiles_of_a_gpu_instance(node):
    seen = node().run('''
        handle = gpu(0)
        pynvml.nvmlDeviceSetMigMode(handle, 1)
        out = {}
        for constant in (4, 2):
            gi = pynvml.nvmlDeviceCreateGpuInstance(handle, gi_profile(handle, constant).id)
            rows = {}
            for profile in range(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT + 1):
                info = name(lambda: pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, profile, 0))
                if isinstance(info, str):
                    rows[profile] = info
                    continue
                count = ctypes.c_uint(8)
                array = (pynvml.c_nvmlComputeInstancePlacement_t * 8)()
                pynvml.nvmlGpuInstanceGetComputeInstancePossiblePlacements(gi, info.id, array, ctypes.byref(count))
                rows[profile] = [info.id, info.sliceCount, info.instanceCount, info.multiprocessorCount,
                                 text(info.name), [[array[i].start, array[i].size] for i in range(count.value)],
                                 pynvml.nvmlGpuInstanceGetComputeInstanceRemainingCapacity(gi, info.id)]
            rows['engine_1'] = name(lambda: pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, 0, 1))
            out[constant] = rows
            pynvml.nvmlGpuInstanceDestroy(gi)
        print(json.dumps(out))
    ''')
    seven = seen['4']
    assert seven['0'] == [0, 1, 7, 14, 'MIG 1c.7g.80gb', [[s, 1] for s in range(7)], 7]
    assert seven['1'] == [1, 2, 3, 28, 'MIG 2c.7g.80gb', [[0, 2], [2, 2], [4, 2]], 3]
    assert seven['2'] == [2, 3, 2, 42, 'MIG 3c.7g.80gb', [[0, 3], [4, 3]], 2]
    assert seven['3'] == [3, 4, 1, 56, 'MIG 4c.7g.80gb', [[0, 4]], 1]
    assert seven['4'] == [4, 7, 1, 98, 'MIG 7g.80gb', [[0, 7]], 1]
    assert (seven['5'], seven['9'], seven['engine_1']) == \
        ('NVMLError_NotSupported', 'NVMLError_InvalidArgument', 'NVMLError_NotSupported')
    three = seen['2']
    assert three['0'] == [0, 1, 3, 14, 'MIG 1c.3g.40gb', [[0, 1], [1, 1], [2, 1]], 3]
    assert three['1'] == [1, 2, 1, 28, 'MIG 2c.3g.40gb', [[0, 2]], 1]
    assert three['2'][:5] == [2, 3, 1, 42, 'MIG 3g.40gb']
    assert three['3'] == three['4'] == 'NVMLError_NotSupported'


# --------------------------------------------------------------------------- creating a layout

CREATE_WRITE_UP_LAYOUT = '''
    handle = gpu(0)
    status = pynvml.nvmlDeviceSetMigMode(handle, pynvml.NVML_DEVICE_MIG_ENABLE)
    for constant in (pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE, pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE,
                     pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE, pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE):
        create(handle, constant)
    print(json.dumps({'status': status, 'mode': pynvml.nvmlDeviceGetMigMode(handle)}))
'''

EXPORT = '''
    # mig-parted GetMigConfig (pkg/mig/config/config.go): WalkGpuInstances, WalkComputeInstances, profile names
    out = {}
    for index in range(pynvml.nvmlDeviceGetCount()):
        handle = gpu(index)
        mode = pynvml.nvmlDeviceGetMigMode(handle)
        config, placements = [], []
        if mode[0]:
            config = {}
            total = pynvml.nvmlDeviceGetMemoryInfo(handle).total
            for constant in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
                try:
                    info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, constant, version=1)
                except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_InvalidArgument):
                    continue
                array = (pynvml.c_nvmlGpuInstance_t * info.instanceCount)()
                count = ctypes.c_uint(info.instanceCount)
                pynvml.nvmlDeviceGetGpuInstances(handle, info.id, array, ctypes.byref(count))
                for i in range(count.value):
                    placements.append(placement(array[i]))
                    for ci_profile in range(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
                        try:
                            ci_info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(array[i], ci_profile, 0,
                                                                                           version=1)
                        except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_InvalidArgument):
                            continue
                        cis = (pynvml.c_nvmlComputeInstance_t * ci_info.instanceCount)()
                        ci_count = ctypes.c_uint(ci_info.instanceCount)
                        pynvml.nvmlGpuInstanceGetComputeInstances(array[i], ci_info.id, cis, ctypes.byref(ci_count))
                        for _ in range(ci_count.value):
                            key = (constant, {f: getattr(info, f) for f, _ in info._fields_}, ci_info.sliceCount)
                            config.setdefault(json.dumps(key), 0)
                            config[json.dumps(key)] += 1
            config = [[json.loads(k), v, total] for k, v in config.items()]
        out[index] = {'mode': mode, 'config': config, 'placements': sorted(placements), 'migs': migs(handle)}
    print(json.dumps(out))
'''


def _named_config(seen):
    return {go_nvlib_name(total, info, ci_slices, constant): count
            for (constant, info, ci_slices), count, total in seen['config']}


def test_write_up_layout_is_created_and_read_back_by_a_new_process(node):
    a100 = node()
    assert not a100.state.exists()
    assert a100.run(CREATE_WRITE_UP_LAYOUT) == {'status': pynvml.NVML_SUCCESS, 'mode': [1, 1]}
    seen = a100.run(EXPORT)
    assert _named_config(seen['0']) == {'1g.10gb': 2, '2g.20gb': 2}
    # the first free placement of each profile; GPU instance ids are the placements' swizzIds (7-13 for 1g, 3-5 2g)
    assert seen['0']['placements'] == [[4, 14, 2, 2], [5, 14, 4, 2], [7, 19, 0, 1], [8, 19, 1, 1]]
    gpu_uuid = a100.profile_data()['devices'][0]['uuid']
    assert [(m['slot'], m['index'], m['name'], m['memory_mib'], m['multiprocessor_count'], m['gpu_instance_id'],
             m['compute_instance_id'], m['uuid']) for m in seen['0']['migs']] == [
        (slot, slot, 'NVIDIA A100-SXM4-80GB MIG %s' % profile, memory, sms, gi, 0,
         'MIG-%s' % uuid.uuid5(uuid.UUID(gpu_uuid[4:]), 'fake-nvml/mig/gi%d/ci0' % gi))
        for slot, (profile, memory, sms, gi) in enumerate([('1g.10gb', 10240, 14, 7), ('1g.10gb', 10240, 14, 8),
                                                           ('2g.20gb', 20480, 28, 4), ('2g.20gb', 20480, 28, 5)])]
    assert seen['1'] == {'mode': [0, 0], 'config': [], 'placements': [], 'migs': []}   # the other GPU untouched
    # the file: one entry, for the GPU that changed
    state = a100.state_data()
    assert list(state) == ['version', 'gpus'] and list(state['gpus']) == [gpu_uuid]
    assert a100.run(EXPORT) == seen   # and again: every reader agrees


def test_profile_ids_the_gpu_does_not_offer_and_mig_off(node, tmp_path):
    profile = json.loads(CAPABLE.read_text(encoding='utf-8'))
    t4 = json.loads((PROFILES_DIR / 't4.json').read_text(encoding='utf-8'))['devices'][0]
    profile['devices'].append(dict(t4, minor_number=2))
    seen = node(write_profile(tmp_path, profile)).run('''
        handle = gpu(0)
        out = {'mig_off': name(lambda: pynvml.nvmlDeviceCreateGpuInstance(handle, 19)),
               'capacity_mig_off': name(lambda: pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, 19)),
               'not_capable': name(lambda: pynvml.nvmlDeviceCreateGpuInstance(gpu(2), 19)),
               'not_capable_mode': name(lambda: pynvml.nvmlDeviceSetMigMode(gpu(2), 1)),
               'not_capable_profiles': name(lambda: pynvml.nvmlDeviceGetGpuInstanceProfileInfo(gpu(2), 0))}
        pynvml.nvmlDeviceSetMigMode(handle, 1)
        out.update({
            'no_constant_has_it': name(lambda: pynvml.nvmlDeviceCreateGpuInstance(handle, 1)),
            'not_offered': name(lambda: pynvml.nvmlDeviceCreateGpuInstance(handle, 105)),   # 8_SLICE
            'placements_not_offered': name(lambda: pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(
                handle, 105, None, ctypes.byref(ctypes.c_uint()))),
            'bad_mode': name(lambda: pynvml.nvmlDeviceSetMigMode(handle, 2)),
        })
        print(json.dumps(out))
    ''')
    assert seen == {'mig_off': 'NVMLError_NotSupported', 'capacity_mig_off': 'NVMLError_NotSupported',
                    'not_capable': 'NVMLError_NotSupported', 'not_capable_mode': 'NVMLError_NotSupported',
                    'not_capable_profiles': 'NVMLError_NotSupported',
                    'no_constant_has_it': 'NVMLError_InvalidArgument', 'not_offered': 'NVMLError_NotSupported',
                    'placements_not_offered': 'NVMLError_NotSupported', 'bad_mode': 'NVMLError_InvalidArgument'}


def test_placements_capacity_and_insufficient_resources(node):
    seen = node().run('''
        handle = gpu(0)
        pynvml.nvmlDeviceSetMigMode(handle, 1)
        def place(constant, start, size=None):
            p = pynvml.c_nvmlGpuInstancePlacement_t(start, size if size is not None else
                                                    {0: 1, 7: 1, 9: 2, 1: 2, 2: 4, 3: 4, 4: 8}[constant])
            gi = pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(handle, gi_profile(handle, constant).id,
                                                                 ctypes.byref(p))
            return placement(gi)
        def capacity():
            return {c: pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, gi_profile(handle, c).id)
                    for c in (0, 7, 9, 1, 2, 3, 4)}
        out = {'empty': capacity()}
        out['3g_at_4'] = name(lambda: place(2, 4))
        out['after_3g'] = capacity()
        out['3g_at_4_again'] = name(lambda: place(2, 4))
        out['2g_at_1'] = name(lambda: place(1, 1))
        out['2g_size_4'] = name(lambda: place(1, 0, 4))
        out['7g'] = name(lambda: place(4, 0))
        out['4g'] = name(lambda: place(3, 0))
        out['after_4g'] = capacity()
        out['1g'] = name(lambda: create(handle, 0))
        out['full'] = [name(lambda: pynvml.nvmlDeviceCreateGpuInstance(handle, gi_profile(handle, c).id))
                       for c in (0, 7, 9, 1, 2, 3, 4)]
        count = ctypes.c_uint(1)
        small = (pynvml.c_nvmlGpuInstancePlacement_t * 1)()
        out['small_buffer'] = [name(lambda: pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(
            handle, 19, small, ctypes.byref(count))), count.value]
        print(json.dumps(out))
    ''')
    assert seen['empty'] == {'0': 7, '7': 1, '9': 4, '1': 3, '2': 2, '3': 1, '4': 1}
    assert seen['3g_at_4'] == [2, 9, 4, 4]     # 3g.40gb at 4:4 is GPU instance 2 (swizzId 2: the upper half)
    assert seen['after_3g'] == {'0': 4, '7': 1, '9': 2, '1': 2, '2': 1, '3': 1, '4': 0}
    assert (seen['3g_at_4_again'], seen['2g_at_1'], seen['2g_size_4'], seen['7g'], seen['4g']) == \
        ('NVMLError_InsufficientResources', 'NVMLError_InvalidArgument', 'NVMLError_InvalidArgument',
         'NVMLError_InsufficientResources', [1, 5, 0, 4])
    assert seen['after_4g'] == {'0': 0, '7': 0, '9': 0, '1': 0, '2': 0, '3': 0, '4': 0}
    assert seen['1g'] == 'NVMLError_InsufficientResources'
    assert seen['full'] == ['NVMLError_InsufficientResources'] * 7
    assert seen['small_buffer'] == ['NVMLError_InsufficientSize', 7]


def test_instance_counts_limit_creation(node):
    seen = node().run('''
        handle = gpu(0)
        pynvml.nvmlDeviceSetMigMode(handle, 1)
        me = gi_profile(handle, pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1).id
        first_me = placement(pynvml.nvmlDeviceCreateGpuInstance(handle, me))
        out = {'me': first_me, 'second_me': name(lambda: pynvml.nvmlDeviceCreateGpuInstance(handle, me)),
               'me_capacity': pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, me)}
        ones = []
        while True:
            gi = name(lambda: pynvml.nvmlDeviceCreateGpuInstance(handle, 19))
            if isinstance(gi, str):
                out['eighth'] = gi
                break
            ones.append(placement(gi))
        out['ones'] = ones
        print(json.dumps(out))
    ''')
    assert seen['me'] == [7, 20, 0, 1] and seen['second_me'] == 'NVMLError_InsufficientResources'
    assert seen['me_capacity'] == 0
    assert seen['ones'] == [[8 + k, 19, 1 + k, 1] for k in range(6)]   # 6 more 1g: 7 compute slices in all
    assert seen['eighth'] == 'NVMLError_InsufficientResources'


def test_compute_instances_inside_a_gpu_instance(node):
    a100 = node()
    seen = a100.run('''
        handle = gpu(0)
        pynvml.nvmlDeviceSetMigMode(handle, 1)
        gi = pynvml.nvmlDeviceCreateGpuInstance(handle, 9)     # 3g.40gb
        def place(profile, start, size):
            p = pynvml.c_nvmlComputeInstancePlacement_t(start, size)
            ci = pynvml.nvmlGpuInstanceCreateComputeInstanceWithPlacement(gi, profile, ctypes.byref(p))
            info = pynvml.nvmlComputeInstanceGetInfo(ci)
            return [info.id, info.profileId, info.placement.start, info.placement.size]
        out = {'at_1': place(0, 1, 1), 'at_1_again': name(lambda: place(0, 1, 1)),
               'bad_start': name(lambda: place(1, 1, 2)), '2c_overlaps': name(lambda: place(1, 0, 2)),
               'capacity': [pynvml.nvmlGpuInstanceGetComputeInstanceRemainingCapacity(gi, p) for p in (0, 1, 2)],
               'next': [pynvml.nvmlComputeInstanceGetInfo(pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 0)).id
                        for _ in range(2)],
               'full': name(lambda: pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 0)),
               'too_big': name(lambda: pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 3)),
               'migs': migs(handle)}
        print(json.dumps(out))
    ''')
    assert seen['at_1'] == [0, 0, 1, 1]
    assert (seen['at_1_again'], seen['bad_start'], seen['2c_overlaps']) == \
        ('NVMLError_InsufficientResources', 'NVMLError_InvalidArgument', 'NVMLError_InsufficientResources')
    assert seen['capacity'] == [2, 0, 0]
    assert seen['next'] == [1, 2] and seen['full'] == 'NVMLError_InsufficientResources'
    assert seen['too_big'] == 'NVMLError_NotSupported'
    # three 1c.3g.40gb compute instances share the GPU instance's memory and engines, 14 SMs each
    assert [(m['name'], m['memory_mib'], m['multiprocessor_count'], m['gpu_instance_id'], m['compute_instance_id'],
             m['decoder_count'], m['gpu_instance_slices'], m['compute_instance_slices']) for m in seen['migs']] == \
        [('NVIDIA A100-SXM4-80GB MIG 1c.3g.40gb', 40960, 14, 1, ci, 2, 3, 1) for ci in range(3)]


# --------------------------------------------------------------------------- destroying, handles, MIG mode

def test_destroy_order_in_use_and_stale_handles(node):
    a100 = node()
    a100.run(CREATE_WRITE_UP_LAYOUT)
    seen = a100.run('''
        handle = gpu(0)
        gi = gi_of(handle, 7)
        ci = pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, 0)
        kept = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, 1)
        kept_address = ctypes.cast(kept, ctypes.c_void_p).value
        out = {'gi_in_use': name(lambda: pynvml.nvmlGpuInstanceDestroy(gi)),
               'mode_in_use': [name(lambda: pynvml.nvmlDeviceSetMigMode(handle, 0)),
                               pynvml.nvmlDeviceGetMigMode(handle)],
               'ci': name(lambda: pynvml.nvmlComputeInstanceDestroy(ci)),
               'ci_again': name(lambda: pynvml.nvmlComputeInstanceDestroy(ci)),
               'ci_info_after': name(lambda: pynvml.nvmlComputeInstanceGetInfo(ci)),
               'slot_0': name(lambda: pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, 0)),
               'gi_listed_without_ci': placement(gi),
               'gi': name(lambda: pynvml.nvmlGpuInstanceDestroy(gi)),
               'gi_info_after': name(lambda: pynvml.nvmlGpuInstanceGetInfo(gi)),
               'gi_by_id_after': name(lambda: gi_of(handle, 7))}
        # the other MIG devices keep their slots and handles; a new compute instance takes the lowest free slot
        new_gi, new_ci = create(handle, 0)
        out['kept'] = [ctypes.cast(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, 1), ctypes.c_void_p).value
                       == kept_address, pynvml.nvmlDeviceGetGpuInstanceId(kept)]
        out['new'] = [placement(new_gi), [m['slot'] for m in migs(handle)]]
        print(json.dumps(out))
    ''')
    assert seen['gi_in_use'] == 'NVMLError_InUse' and seen['mode_in_use'] == ['NVMLError_InUse', [1, 1]]
    assert (seen['ci'], seen['ci_again'], seen['ci_info_after'], seen['slot_0']) == \
        (0, 'NVMLError_InvalidArgument', 'NVMLError_InvalidArgument', 'NVMLError_NotFound')
    assert seen['gi_listed_without_ci'] == [7, 19, 0, 1]   # a GPU instance without compute instance exists
    assert (seen['gi'], seen['gi_info_after'], seen['gi_by_id_after']) == \
        (0, 'NVMLError_InvalidArgument', 'NVMLError_NotFound')
    assert seen['kept'] == [True, 8]
    assert seen['new'] == [[7, 19, 0, 1], [0, 1, 2, 3]]
    # clearing everything, as mig-parted's ClearMigConfig does, then MIG off
    seen = a100.run('''
        handle = gpu(0)
        for gi_id in (7, 8, 4, 5):
            gi = gi_of(handle, gi_id)
            pynvml.nvmlComputeInstanceDestroy(pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, 0))
            pynvml.nvmlGpuInstanceDestroy(gi)
        status = pynvml.nvmlDeviceSetMigMode(handle, 0)
        print(json.dumps([status, pynvml.nvmlDeviceGetMigMode(handle), migs(handle)]))
    ''')
    assert seen == [0, [0, 0], []]
    assert a100.state_data()['gpus'][a100.profile_data()['devices'][0]['uuid']] == \
        {'current': False, 'pending': False, 'gpu_instances': []}


def test_gpu_instance_without_compute_instance_is_no_mig_device(node):
    seen = node().run('''
        handle = gpu(0)
        pynvml.nvmlDeviceSetMigMode(handle, 1)
        gi = pynvml.nvmlDeviceCreateGpuInstance(handle, 14)
        array, count = (pynvml.c_nvmlGpuInstance_t * 3)(), ctypes.c_uint(3)
        pynvml.nvmlDeviceGetGpuInstances(handle, 14, array, ctypes.byref(count))
        print(json.dumps({'listed': [placement(array[i]) for i in range(count.value)], 'migs': migs(handle),
                          'slots': [name(lambda: pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, s))
                                    for s in range(7)]}))
    ''')
    assert seen['listed'] == [[3, 14, 0, 2]] and seen['migs'] == []
    assert seen['slots'] == ['NVMLError_NotFound'] * 7


def test_set_mig_mode_immediate_and_after_a_reset(node, tmp_path):
    a100 = node(CAPABLE, 'a100')
    assert a100.run('print(json.dumps([pynvml.nvmlDeviceSetMigMode(gpu(1), 1), pynvml.nvmlDeviceGetMigMode(gpu(1)), '
                    'pynvml.nvmlDeviceGetMaxMigDeviceCount(gpu(1))]))') == [0, [1, 1], 7]
    h100 = node(RESET, 'h100')
    profile = h100.profile_data()
    seen = h100.run('''
        handle = gpu(0)
        status = pynvml.nvmlDeviceSetMigMode(handle, 1)
        print(json.dumps({'status': status, 'mode': pynvml.nvmlDeviceGetMigMode(handle),
                          'create': name(lambda: pynvml.nvmlDeviceCreateGpuInstance(handle, 19)),
                          'again': pynvml.nvmlDeviceSetMigMode(handle, 1)}))
    ''')
    assert seen == {'status': pynvml.NVML_ERROR_RESET_REQUIRED, 'mode': [0, 1], 'create': 'NVMLError_NotSupported',
                    'again': pynvml.NVML_ERROR_RESET_REQUIRED}
    assert h100.run('print(json.dumps(pynvml.nvmlDeviceGetMigMode(gpu(0))))') == [0, 1]   # pending until a reset
    # the reset a node container's boot runs (sandbox/images/fake-nvml-caps.service)
    proc = subprocess.run([sys.executable, str(FAKENVML_DIR / 'mig_state.py'), 'reset', '--profile', str(RESET),
                           '--state', str(h100.state)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and profile['devices'][0]['uuid'] in proc.stdout, proc.stderr
    seen = h100.run('''
        handle = gpu(0)
        mode = pynvml.nvmlDeviceGetMigMode(handle)
        create(handle, pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE)
        print(json.dumps({'mode': mode, 'migs': [m['name'] for m in migs(handle)]}))
    ''')
    assert seen == {'mode': [1, 1], 'migs': ['NVIDIA H100 80GB HBM3 MIG 1g.10gb']}
    # a reset without a pending change keeps the mode but drops the instances (they do not outlive a reset);
    # asking for the current mode cancels a pending change
    assert MIG_STATE.reset(profile, str(h100.state)) == []
    seen = h100.run('''
        handle = gpu(0)
        out = [pynvml.nvmlDeviceGetMigMode(handle), len(migs(handle))]
        out += [pynvml.nvmlDeviceSetMigMode(handle, 0), pynvml.nvmlDeviceGetMigMode(handle)]
        out += [pynvml.nvmlDeviceSetMigMode(handle, 1), pynvml.nvmlDeviceGetMigMode(handle)]
        print(json.dumps(out))
    ''')
    assert seen == [[1, 1], 0, pynvml.NVML_ERROR_RESET_REQUIRED, [1, 0], pynvml.NVML_SUCCESS, [1, 1]]
    # no state file: a reset changes nothing and writes nothing
    empty = tmp_path / 'none' / 'mig-state.json'
    assert MIG_STATE.reset(profile, str(empty)) == [] and not empty.parent.exists()


def test_reset_drops_the_instances_of_every_gpu_and_applies_pending_modes(node):
    a100 = node()
    a100.run(CREATE_WRITE_UP_LAYOUT)
    profile = a100.profile_data()
    state = a100.state_data()
    entry = state['gpus'][profile['devices'][0]['uuid']]
    entry['pending'] = False          # as a reset-mode GPU would hold it: instances on, MIG off pending
    MIG_STATE._write(str(a100.state), state)   # pylint: disable=protected-access
    assert a100.run('print(json.dumps([pynvml.nvmlDeviceGetMigMode(gpu(0)), len(migs(gpu(0)))]))') == [[1, 0], 4]
    assert MIG_STATE.reset(profile, str(a100.state)) == [profile['devices'][0]['uuid']]
    assert a100.run('print(json.dumps([pynvml.nvmlDeviceGetMigMode(gpu(0)), '
                    'pynvml.nvmlDeviceGetMaxMigDeviceCount(gpu(0))]))') == [[0, 0], 0]
    # a GPU whose mode stays loses its instances too
    a100.run(CREATE_WRITE_UP_LAYOUT)
    assert a100.run('print(json.dumps(len(migs(gpu(0)))))') == 4
    assert MIG_STATE.reset(profile, str(a100.state)) == []
    assert a100.run('print(json.dumps([pynvml.nvmlDeviceGetMigMode(gpu(0)), len(migs(gpu(0)))]))') == [[1, 1], 0]


def test_no_permission_without_a_writable_state_directory(node, tmp_path):
    code = '''
        handle = gpu(0)
        print(json.dumps([name(lambda: pynvml.nvmlDeviceSetMigMode(handle, 1)), pynvml.nvmlDeviceGetMigMode(handle)]))
    '''
    absent = node()
    absent.state = tmp_path / 'no-such-dir' / 'mig-state.json'
    assert absent.run(code) == ['NVMLError_NoPermission', [0, 0]]
    assert not absent.state.parent.exists()
    (tmp_path / 'a-file').write_text('', encoding='utf-8')
    not_a_dir = node()
    not_a_dir.state = tmp_path / 'a-file' / 'mig-state.json'
    assert not_a_dir.run(code) == ['NVMLError_NoPermission', [0, 0]]
    # a layout that exists cannot be changed either, and stays as it is
    a100 = node(CAPABLE, 'ro')
    a100.run(CREATE_WRITE_UP_LAYOUT)
    before = a100.state.read_text(encoding='utf-8')
    os.chmod(a100.state.parent, 0o555)
    try:
        seen = a100.run('''
            handle = gpu(0)
            gi = gi_of(handle, 7)
            print(json.dumps([name(lambda: pynvml.nvmlComputeInstanceDestroy(
                                  pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, 0))),
                              name(lambda: placement(pynvml.nvmlDeviceCreateGpuInstance(handle, 19))),
                              len(migs(handle))]))
        ''')
    finally:
        os.chmod(a100.state.parent, 0o755)
    if os.geteuid() == 0:
        # root ignores the directory's mode (CAP_DAC_OVERRIDE): the lock file already exists, the rewrite succeeds
        assert seen[0] == 0
    else:
        assert seen == ['NVMLError_NoPermission', 'NVMLError_NoPermission', 4]
        assert a100.state.read_text(encoding='utf-8') == before


# --------------------------------------------------------------------------- the state file

def _gi(gi_id, profile, start, *cis):
    return {'id': gi_id, 'profile': profile, 'start': start, 'compute_instances': list(cis)}


def _ci(ci_id, profile, start, **more):
    return dict({'id': ci_id, 'profile': profile, 'start': start}, **more)


def _entry(*gis, current=True):
    return {'current': current, 'pending': current, 'gpu_instances': list(gis)}


SAME_UUID = 'MIG-11111111-2222-3333-4444-555555555555'
CIS = 'gpus.{0}.gpu_instances[%d].compute_instances[%d]'
# (field, problem, the state: the whole file, or the entry of GPU 0 (an A100), or of GPU 2 (a T4) with 't4')
BROKEN_STATES = [
    ('top level', 'expected an object', [], 'file'),
    ('version', 'missing required field', {'gpus': {}}, 'file'),
    ('version', 'unsupported version 2 (this library reads 1)', {'version': 2, 'gpus': {}}, 'file'),
    ('colour', 'unknown field', {'version': 1, 'gpus': {}, 'colour': 'green'}, 'file'),
    ('gpus', 'expected an object', {'version': 1, 'gpus': []}, 'file'),
    ('gpus.GPU-1', 'not a GPU UUID', {'version': 1, 'gpus': {'GPU-1': {}}}, 'file'),
    ('gpus.{0}.current', 'missing required field', {'pending': True, 'gpu_instances': []}),
    ('gpus.{0}.pending', 'expected a boolean', {'current': True, 'pending': 1, 'gpu_instances': []}),
    ('gpus.{0}.gpu_instances', 'expected an array', {'current': True, 'pending': True, 'gpu_instances': {}}),
    ('gpus.{0}.gpu_instances', 'GPU instances listed but current is false', _entry(_gi(7, 0, 0), current=False)),
    ('gpus.{0}.gpu_instances[0].profile', 'GPU instance profile 5 is not offered by devices[0]',
     _entry(_gi(0, 5, 0))),
    ('gpus.{0}.gpu_instances[0].start', 'must be between 0 and 7', _entry(_gi(7, 0, 8))),
    ('gpus.{0}.gpu_instances[1].id', 'duplicate of gpus.{0}.gpu_instances[0].id',
     _entry(_gi(7, 0, 0), _gi(7, 0, 1))),
    (CIS % (0, 0) + '.profile', 'compute instance profile 2 does not fit in GPU instance profile 1',
     _entry(_gi(3, 1, 0, _ci(0, 2, 0)))),
    (CIS % (0, 0) + '.slot', 'must be between 0 and 6', _entry(_gi(3, 1, 0, _ci(0, 1, 0, slot=7)))),
    (CIS % (1, 0) + '.slot', 'duplicate of %s.slot' % (CIS % (0, 0)),
     _entry(_gi(3, 1, 0, _ci(0, 1, 0, slot=2)), _gi(4, 1, 2, _ci(0, 1, 0, slot=2)))),
    (CIS % (0, 1) + '.id', 'duplicate of gpus.{0}.gpu_instances[0].compute_instances[0].id',
     _entry(_gi(3, 1, 0, _ci(0, 0, 0), _ci(0, 0, 1)))),
    (CIS % (0, 0) + '.uuid', 'not a well-formed UUID', _entry(_gi(3, 1, 0, _ci(0, 1, 0, uuid='GPU-1')))),
    (CIS % (1, 0) + '.uuid', 'duplicate of %s.uuid' % (CIS % (0, 0)),
     _entry(_gi(7, 0, 0, _ci(0, 0, 0, uuid=SAME_UUID)), _gi(8, 0, 1, _ci(0, 0, 0, uuid=SAME_UUID)))),
    (CIS % (0, 0) + '.shape', 'unknown field', _entry(_gi(7, 0, 0, _ci(0, 0, 0, shape=1)))),
    ('gpus.{1}', 'devices[2] is not MIG capable', _entry(current=False), 't4'),
]

INIT = textwrap.dedent('''
    import json, pynvml
    try:
        pynvml.nvmlInit()
        print(json.dumps({'init': 'ok'}))
    except pynvml.NVMLError as exc:
        print(json.dumps({'init': type(exc).__name__, 'detail': pynvml.nvmlErrorString(exc.value)}))
''')


@pytest.mark.parametrize('case', BROKEN_STATES, ids=[c[0] + ':' + c[1][:20] for c in BROKEN_STATES])
def test_a_malformed_state_file_names_the_file_and_the_field(nvml, tmp_path, case):
    path, problem, state = case[:3]
    what = case[3] if len(case) > 3 else 'a100'
    profile = json.loads(CAPABLE.read_text(encoding='utf-8'))
    t4 = json.loads((PROFILES_DIR / 't4.json').read_text(encoding='utf-8'))['devices'][0]
    profile['devices'].append(dict(t4, minor_number=2))
    uuids = [profile['devices'][0]['uuid'], t4['uuid']]
    if what != 'file':
        state = {'version': 1, 'gpus': {uuids[0 if what == 'a100' else 1]: state}}
    target = tmp_path / 'mig-state.json'
    target.write_text(json.dumps(state, indent=2), encoding='utf-8')
    env = nvml.env(write_profile(tmp_path, profile))
    env['FAKE_NVML_MIG_STATE'] = str(target)
    proc = subprocess.run([sys.executable, '-c', INIT], env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    seen = json.loads(proc.stdout)
    assert seen['init'] == 'NVMLError_Unknown'
    assert seen['detail'].startswith('fake NVML: %s: %s: %s' % (target, path.format(*uuids), problem.format(*uuids))), \
        seen['detail']
    assert '\n' not in seen['detail']
    # mig_state.py reads the same file the same way, word for word
    with pytest.raises(MIG_STATE.StateError) as raised:
        MIG_STATE.validate(MIG_STATE.load(str(target)), profile)
    assert 'fake NVML: %s: %s' % (target, raised.value) == seen['detail']


def test_state_file_syntax_errors_and_a_file_broken_after_init(node):
    a100 = node()
    a100.state.write_text('{"version": 1,\n "gpus": {\n', encoding='utf-8')
    proc = subprocess.run([sys.executable, '-c', INIT], env=a100.env(), capture_output=True, text=True, timeout=60,
                          check=False)
    seen = json.loads(proc.stdout)
    assert seen['init'] == 'NVMLError_Unknown'
    assert seen['detail'].startswith('fake NVML: %s: line 3 column ' % a100.state), seen['detail']
    with pytest.raises(MIG_STATE.StateError) as raised:
        MIG_STATE.load(str(a100.state))
    assert str(raised.value).startswith('line 3 column ')
    # a file that breaks while a process runs: its mutations answer UNKNOWN with the detail, its view stays
    a100.state.unlink()
    seen = a100.run('''
        handle = gpu(0)
        pynvml.nvmlDeviceSetMigMode(handle, 1)
        with open(os.environ['FAKE_NVML_MIG_STATE'], 'w') as handle_file:
            handle_file.write('{"version": 1, "gpus": {"x": 1}}')
        out = [name(lambda: pynvml.nvmlDeviceCreateGpuInstance(handle, 19)),
               pynvml.nvmlErrorString(pynvml.NVML_ERROR_UNKNOWN), pynvml.nvmlDeviceGetMigMode(handle)]
        print(json.dumps(out))
    ''')
    assert seen == ['NVMLError_Unknown', 'fake NVML: %s: gpus.x: not a GPU UUID (expected '
                    'GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)' % a100.state, [1, 1]]


def test_entries_of_other_gpus_are_kept(node):
    a100 = node()
    other = 'GPU-99999999-2222-3333-4444-555555555555'
    a100.state.write_text(json.dumps({'version': 1, 'gpus': {other: {
        'current': True, 'pending': True, 'gpu_instances': [{'id': 0, 'profile': 5, 'start': 0,
                                                             'compute_instances': []}]}}}), encoding='utf-8')
    a100.run(CREATE_WRITE_UP_LAYOUT)
    gpus = a100.state_data()['gpus']
    assert list(gpus) == [other, a100.profile_data()['devices'][0]['uuid']]
    assert gpus[other]['gpu_instances'][0]['profile'] == 5


# --------------------------------------------------------------------------- several processes

CONCURRENT = '''
    import time
    gpu(0)  # initialised: this process has read the state
    open(READY + str(os.getpid()), 'w').close()
    deadline = time.monotonic() + 30
    while not os.path.exists(GO) and time.monotonic() < deadline:
        time.sleep(0.005)
    out = {}
    for index, profile_id in ((0, 19), (1, 14)):
        handle = gpu(index)
        made = []
        while True:
            gi = name(lambda: pynvml.nvmlDeviceCreateGpuInstance(handle, profile_id))
            if isinstance(gi, str):
                out[index] = [made, gi]
                break
            made.append(placement(gi)[0])
    print(json.dumps(out))
'''


def test_two_processes_mutating_at_once_lose_nothing(node, tmp_path):
    a100 = node()
    a100.run('pynvml.nvmlDeviceSetMigMode(gpu(0), 1); pynvml.nvmlDeviceSetMigMode(gpu(1), 1); print("{}")')
    go = tmp_path / 'go'
    ready = tmp_path / 'ready-'
    procs = []
    for _worker in range(2):
        procs.append(a100.popen(CONCURRENT.replace("READY", repr(str(ready))).replace("GO", repr(str(go)))))
    # both processes initialised (each read the state before either writes): wait for their marks, bounded
    deadline = time.monotonic() + 30
    while len(list(tmp_path.glob('ready-*'))) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(list(tmp_path.glob('ready-*'))) == 2, [p.poll() for p in procs]
    go.write_text('', encoding='utf-8')
    results = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 0 and stderr == '', stderr
        results.append(json.loads(stdout))
    for index, expected in (('0', list(range(7, 14))), ('1', [3, 4, 5])):
        made = results[0][index][0] + results[1][index][0]
        assert sorted(made) == expected, results    # every GPU instance created once, none lost or doubled
        assert {results[0][index][1], results[1][index][1]} == {'NVMLError_InsufficientResources'}
    seen = a100.run(EXPORT)
    assert sorted(p[0] for p in seen['0']['placements']) == list(range(7, 14))
    assert sorted(p[0] for p in seen['1']['placements']) == [3, 4, 5]


def test_a_long_lived_process_sees_another_process_change(node, tmp_path):
    a100 = node()
    a100.run('pynvml.nvmlDeviceSetMigMode(gpu(0), 1); print("{}")')
    step = tmp_path / 'step'
    reader = a100.popen('''
        import time
        handle = gpu(0)
        before = [len(migs(handle)), name(lambda: gi_of(handle, 7))]
        with open(%r, 'w') as flag:
            flag.write('read')
        while open(%r).read() != 'written':
            time.sleep(0.01)
        after = [m['name'] for m in migs(handle)] + [placement(gi_of(handle, 7))]
        print(json.dumps([before, after]))
    ''' % (str(step), str(step)))
    deadline = time.time() + 30
    while not (step.exists() and step.read_text(encoding='utf-8') == 'read') and time.time() < deadline:
        time.sleep(0.01)
    a100.run('create(gpu(0), 0); print("{}")')
    step.write_text('written', encoding='utf-8')
    stdout, stderr = reader.communicate(timeout=60)
    assert reader.returncode == 0 and stderr == '', stderr
    assert json.loads(stdout) == [[0, 'NVMLError_NotFound'],
                                  ['NVIDIA A100-SXM4-80GB MIG 1g.10gb', [7, 19, 0, 1]]]


# --------------------------------------------------------------------------- mig_state.effective

LAYOUTS = {
    'write-up': (CAPABLE, CREATE_WRITE_UP_LAYOUT),
    'split-7g-and-me': (CAPABLE, '''
        a, b = gpu(0), gpu(1)
        pynvml.nvmlDeviceSetMigMode(a, 1)
        pynvml.nvmlDeviceSetMigMode(b, 1)
        seven = pynvml.nvmlDeviceCreateGpuInstance(a, 0)
        for profile, start, size in ((2, 0, 3), (1, 4, 2), (0, 6, 1)):
            p = pynvml.c_nvmlComputeInstancePlacement_t(start, size)
            pynvml.nvmlGpuInstanceCreateComputeInstanceWithPlacement(seven, profile, ctypes.byref(p))
        create(b, pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1)     # 0:1
        create(b, pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2)     # 2:2
        create(b, pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE)          # 4:4
        pynvml.nvmlDeviceCreateGpuInstance(b, 19)    # 1:1, without compute instance: no MIG device
        print("{}")
    '''),
    'listed-and-created': (PROFILES_DIR / 'a100x2-mig-one-empty.json', '''
        a, b = gpu(0), gpu(1)
        create(a, 3)
        three = pynvml.nvmlDeviceCreateGpuInstance(a, 9)
        for _ in range(3):
            pynvml.nvmlGpuInstanceCreateComputeInstance(three, 0)
        listed = gi_of(b, 1)
        pynvml.nvmlComputeInstanceDestroy(pynvml.nvmlGpuInstanceGetComputeInstanceById(listed, 0))
        pynvml.nvmlGpuInstanceCreateComputeInstance(listed, 1)
        pynvml.nvmlGpuInstanceCreateComputeInstance(listed, 0)
        print("{}")
    '''),
    'h100-listed-me': (PROFILES_DIR / 'h100-mig-me.json', '''
        handle = gpu(0)
        two = gi_of(handle, 3)
        pynvml.nvmlComputeInstanceDestroy(pynvml.nvmlGpuInstanceGetComputeInstanceById(two, 0))
        pynvml.nvmlGpuInstanceDestroy(two)
        create(handle, 0)
        create(handle, 0)
        print("{}")
    '''),
}

READ_ALL = '''
    out = []
    for index in range(pynvml.nvmlDeviceGetCount()):
        handle = gpu(index)
        mode = name(lambda: pynvml.nvmlDeviceGetMigMode(handle))
        out.append({'mode': mode, 'migs': migs(handle) if isinstance(mode, list) and mode[0] else []})
    print(json.dumps(out))
'''


@pytest.mark.parametrize('layout', sorted(LAYOUTS))
def test_effective_is_what_pynvml_reads(node, layout):
    """mig_state.effective(profile, state) gives Python readers (the device-manager simulator, mig_minors.py) the
    layout NVML reports, field by field, for layouts created through pynvml."""
    profile_path, code = LAYOUTS[layout]
    target = node(profile_path)
    target.run(code)
    seen = target.run(READ_ALL)
    profile, state = target.profile_data(), target.state_data()
    effective = MIG_STATE.effective(profile, state)
    changed = 0
    for index, (gpu, got) in enumerate(zip(effective['devices'], seen)):
        mig = gpu.get('mig') or {}
        if not mig.get('capable'):
            assert got['mode'] == 'NVMLError_NotSupported'
            continue
        assert got['mode'] == [int(mig.get('current', False)), int(mig.get('pending', mig.get('current', False)))]
        wanted = [{'uuid': d['uuid'], 'name': '%s MIG %s' % (gpu['name'], d['profile']), 'memory_mib': d['memory_mib'],
                   'memory_size_mb': d['memory_mib'], 'multiprocessor_count': d['multiprocessor_count'],
                   'gpu_instance_id': d['gpu_instance_id'], 'compute_instance_id': d['compute_instance_id'],
                   'copy_engine_count': d.get('copy_engine_count', 0), 'decoder_count': d.get('decoder_count', 0),
                   'encoder_count': d.get('encoder_count', 0), 'jpeg_count': d.get('jpeg_count', 0),
                   'ofa_count': d.get('ofa_count', 0), 'gpu_instance_slices': d['gpu_instance_slices'],
                   'compute_instance_slices': d['compute_instance_slices']}
                  for d in (mig.get('devices', []) if mig.get('current') else [])]
        assert [{k: v for k, v in m.items() if k not in ('slot', 'index')} for m in got['migs']] == wanted, index
        changed += gpu != profile['devices'][index]
    assert changed, 'the layout changed nothing the profile did not already say'
    # the effective profile is a valid profile, and the library serves it as its own
    CHECKER.validate(effective)
    assert MIG_STATE.effective(profile, None) == profile


def test_effective_keeps_listed_devices_and_names_created_ones(node):
    target = node(PROFILES_DIR / 'a100x2-mig-one-empty.json')
    target.run(LAYOUTS['listed-and-created'][1])
    profile = target.profile_data()
    devices = MIG_STATE.effective(profile, target.state_data())['devices']
    listed = profile['devices'][1]['mig']['devices']
    assert listed[1] in devices[1]['mig']['devices']          # GPU instance 2, untouched: the profile's own entry
    assert [d['profile'] for d in devices[1]['mig']['devices']] == ['2c.3g.40gb', '3g.40gb', '1c.3g.40gb']
    assert [d['profile'] for d in devices[0]['mig']['devices']] == ['4g.40gb'] + ['1c.3g.40gb'] * 3
    # a created instance of a profile a GPU of that model lists has the listed memory (40192 MiB, GPU 1's 3g.40gb),
    # others the table's (4g.40gb: 80 GB / 2)
    assert [d['memory_mib'] for d in devices[0]['mig']['devices']] == [40960, 40192, 40192, 40192]


def test_mig_minors_follows_the_effective_layout(node):
    mig_minors = _module('mig_minors')
    a100 = node()
    a100.run(CREATE_WRITE_UP_LAYOUT)
    profile, state = a100.profile_data(), a100.state_data()
    assert mig_minors.capabilities(profile) == [('config', 1), ('monitor', 2)]
    caps = dict(mig_minors.capabilities(profile, state))
    # GPU minor 0: gi<G> at 3 + 9 G, its ci0 right after (nv-caps.c)
    assert caps == {'config': 1, 'monitor': 2, 'gpu0/gi4/access': 39, 'gpu0/gi4/ci0/access': 40,
                    'gpu0/gi5/access': 48, 'gpu0/gi5/ci0/access': 49, 'gpu0/gi7/access': 66,
                    'gpu0/gi7/ci0/access': 67, 'gpu0/gi8/access': 75, 'gpu0/gi8/ci0/access': 76}
    paths = mig_minors.device_paths(profile, state)
    first = MIG_STATE.effective(profile, state)['devices'][0]['mig']['devices'][0]
    assert paths[first['uuid']] == ['/dev/nvidia0', '/dev/nvidia-caps/nvidia-cap66', '/dev/nvidia-caps/nvidia-cap67']
    out = a100.state.parent / 'caps' / 'mig-minors'
    proc = subprocess.run([sys.executable, str(FAKENVML_DIR / 'mig_minors.py'), '--profile', str(a100.profile),
                           '--out', str(out), '--state', str(a100.state)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert out.read_text(encoding='ascii') == mig_minors.render(profile)


def test_boot_service_resets_before_writing_the_capabilities():
    unit = (ROOT / 'sandbox' / 'images' / 'fake-nvml-caps.service').read_text(encoding='utf-8')
    starts = [line.split('=', 1)[1].split() for line in unit.splitlines() if line.startswith('ExecStart=')]
    assert [s[1] for s in starts] == ['/usr/local/lib/kubegpu/mig_state.py', '/usr/local/lib/kubegpu/mig_minors.py']
    assert starts[0][2] == 'reset' and starts[0][starts[0].index('--state') + 1] == '/var/lib/fake-nvml/mig-state.json'
    assert starts[1][starts[1].index('--state') + 1] == MIG_STATE.DEFAULT_STATE
    assert 'StateDirectory=fake-nvml' in unit.splitlines()   # /var/lib/fake-nvml exists for the library's writes
    dockerfile = (ROOT / 'sandbox' / 'images' / 'Dockerfile').read_text(encoding='utf-8')
    assert 'COPY sandbox/fakenvml/mig_state.py /usr/local/lib/kubegpu/mig_state.py' in dockerfile


# --------------------------------------------------------------------------- the profile field

@pytest.mark.parametrize('value, problem', [('later', "unknown mode change 'later' (one of: immediate, reset)"),
                                            (1, 'expected a string')])
def test_mode_change_is_checked_by_the_library_and_the_checker(nvml, tmp_path, value, problem):
    profile = json.loads(RESET.read_text(encoding='utf-8'))
    profile['devices'][0]['mig']['mode_change'] = value
    target = write_profile(tmp_path, profile)
    code = textwrap.dedent('''
        import json, pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            print(json.dumps(pynvml.nvmlErrorString(exc.value)))
    ''')
    seen = json.loads(nvml.run(target, code).stdout)
    assert seen == 'fake NVML: %s: devices[0].mig.mode_change: %s' % (target, problem)
    assert 'fake NVML: ' + CHECKER.check_file(str(target)) == seen
