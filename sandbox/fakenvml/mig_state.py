# SPDX-License-Identifier: GPL-3.0-or-later
"""The MIG layouts the fake NVML keeps across processes: its state file, read, checked and reset as the library does.

The fake ``libnvidia-ml.so.1`` (sandbox/fakenvml) takes a GPU's MIG mode and its GPU and compute instances from the
state file (``$FAKE_NVML_MIG_STATE``, else ``/var/lib/fake-nvml/mig-state.json``) when the file has an entry for the
GPU's UUID, else from the profile's ``mig`` object; ``nvmlDeviceSetMigMode``, ``nvmlDeviceCreateGpuInstance`` and the
other mutations rewrite the file (see README.md, "MIG reconfiguration"). This module gives Python readers the same
view without loading the library:

* ``effective(profile, state)``: the profile as the library reports it with the state applied (``mig.current``,
  ``mig.pending`` and ``mig.devices`` in the profile's MIG device format), for the device-manager simulator and
  ``mig_minors.py``;
* ``load(path)``, ``validate(state, profile)``: the file, checked with the library's rules and wording;
* ``reset(profile, state_path)``: what a GPU reset or a reboot does: every pending MIG mode becomes current, and a GPU
  whose mode changed loses its instances (a node container's restart runs it, sandbox/images/fake-nvml-caps.service).

The rules are those of mig.c (the GPU instance profile table, names, UUIDs, validation messages); the tests compare
the two. Standard library only: the node image runs it with the system Python.

Usage: python3 mig_state.py {reset,show,check} --profile PROFILE.json [--state STATE.json]
"""

import argparse
import copy
import fcntl
import json
import os
import re
import sys
import tempfile
import uuid

STATE_ENV = 'FAKE_NVML_MIG_STATE'
DEFAULT_STATE = '/var/lib/fake-nvml/mig-state.json'
STATE_VERSION = 1
MAX_DEVICES = 16            # the largest mig.max_devices
MEMORY_SLICES = 8           # memory slices of the A100/H100 geometry
GPU_INSTANCE_PROFILE_COUNT = 0x12
COMPUTE_INSTANCE_PROFILE_COUNT = 0x9
# NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE .. _7_SLICE_NVL: compute slices
CI_SLICES = [1, 2, 3, 4, 7, 8, 6, 1, 7]
# NVML_GPU_INSTANCE_PROFILE_<n>_SLICE by slice count (the default of a listed device's gpu_instance_profile)
SLICE_PROFILES = {1: 0x0, 2: 0x1, 3: 0x2, 4: 0x3, 6: 0x6, 7: 0x4, 8: 0x5}
PROFILE_ME = 0x7            # NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1: "+me"
# nvidia-smi's profile ids on A100 and H100; other constants 100 + the constant
PROFILE_IDS = {0x4: 0, 0x3: 5, 0x2: 9, 0x1: 14, 0x9: 15, 0x0: 19, 0x7: 20}
# constant: (compute slices, memory slices, instance count, placements) on a GPU of 7 compute and 8 memory slices
GEOMETRY = {
    0x0: (1, 1, 7, [0, 1, 2, 3, 4, 5, 6]),
    0x7: (1, 1, 1, [0, 1, 2, 3, 4, 5, 6]),
    0x9: (1, 2, 4, [0, 2, 4, 6]),
    0x1: (2, 2, 3, [0, 2, 4]),
    0x2: (3, 4, 2, [0, 4]),
    0x3: (4, 4, 1, [0]),
    0x4: (7, 8, 1, [0]),
}
NEWER_ARCHITECTURES = ('hopper', 'blackwell')
UUID_TAIL = r'[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}'
STATE_KEYS = ['version', 'gpus']
ENTRY_KEYS = ['current', 'pending', 'gpu_instances']
GI_KEYS = ['id', 'profile', 'start', 'compute_instances']
CI_KEYS = ['id', 'profile', 'start', 'slot', 'uuid']


class StateError(ValueError):
    """One problem in a state file: the field path and what is wrong with it (the library's wording)."""

    def __init__(self, path, problem):
        super().__init__('%s: %s' % (path, problem))
        self.path = path
        self.problem = problem


def state_path(environ=None):
    """The state file the library uses in an environment: $FAKE_NVML_MIG_STATE, else the default."""
    value = (os.environ if environ is None else environ).get(STATE_ENV)
    return value if value else DEFAULT_STATE


# --------------------------------------------------------------------------- GPU instance profiles

def profile_id(constant):
    """The profile id NVML reports for an NVML_GPU_INSTANCE_PROFILE_* constant."""
    return PROFILE_IDS.get(constant, 100 + constant)


def _listed_gi_profile(device):
    return device.get('gpu_instance_profile', SLICE_PROFILES.get(device['gpu_instance_slices']))


def _listed_ci_profile(device):
    return device.get('compute_instance_profile', SLICE_PROFILES.get(device['compute_instance_slices']))


def _computed_entry(gpu, constant):
    slices, mem_slices, instances, starts = GEOMETRY[constant]
    newer = gpu['architecture'] in NEWER_ARCHITECTURES
    entry = {
        'id': profile_id(constant), 'slices': slices, 'mem_slices': mem_slices, 'instances': instances,
        'memory_mib': gpu['memory_total_mib'] * mem_slices // MEMORY_SLICES,
        'sms': slices * ((gpu.get('multiprocessor_count', 0) // 7) & ~1),
        'copy_engine_count': slices,
        'decoder_count': slices if newer else mem_slices * 5 // 8,
        'encoder_count': 0,
        'jpeg_count': slices if newer else int(mem_slices == 8),
        'ofa_count': int(mem_slices == 8),
        'starts': list(starts),
    }
    if constant == PROFILE_ME:
        for key in ('decoder_count', 'jpeg_count', 'ofa_count'):
            entry[key] = max(entry[key], 1)
    return entry


def _listed_devices(gpu, profile):
    """The listed MIG devices that set a GPU's table: its own, then those of the profile's other GPUs of its model."""
    yield from (gpu.get('mig') or {}).get('devices', [])
    for other in (profile or {}).get('devices', []):
        if other is not gpu and (other.get('name'), other.get('memory_total_mib')) == \
                (gpu.get('name'), gpu.get('memory_total_mib')):
            yield from (other.get('mig') or {}).get('devices', [])


def gpu_instance_profiles(gpu, profile=None):
    """{NVML_GPU_INSTANCE_PROFILE_* constant: entry} a MIG-capable GPU offers, as the library's table holds them.

    On a GPU with the A100/H100 geometry (mig.max_devices 7) every profile of GEOMETRY, from the GPU's numbers (mig.c
    computed_entry); the first listed MIG device of a profile sets that profile's entry (its slices, memory, engines
    and its GPU instance's SMs): the GPU's own, else one of another GPU of the same model (name and memory) in
    ``profile``; other GPUs offer only the profiles of those listed devices, without placements.
    """
    mig = gpu.get('mig') or {}
    if not mig.get('capable'):
        return {}
    max_devices = mig.get('max_devices', 7)
    geometry = max_devices == 7
    table = dict((c, _computed_entry(gpu, c)) for c in GEOMETRY) if geometry else {}
    seen = set()
    for device in _listed_devices(gpu, profile):
        constant = _listed_gi_profile(device)
        if constant in seen:
            continue
        seen.add(constant)
        g, c = device['gpu_instance_slices'], device['compute_instance_slices']
        geom = GEOMETRY.get(constant) if geometry else None
        table[constant] = {
            'id': profile_id(constant), 'slices': g, 'mem_slices': geom[1] if geom else g,
            'instances': geom[2] if geom else (1 if constant in (0x7, 0x8) else max_devices // g),
            'memory_mib': device['memory_mib'], 'sms': device['multiprocessor_count'] * g // c,
            'copy_engine_count': device.get('copy_engine_count', 0), 'decoder_count': device.get('decoder_count', 0),
            'encoder_count': device.get('encoder_count', 0), 'jpeg_count': device.get('jpeg_count', 0),
            'ofa_count': device.get('ofa_count', 0), 'starts': list(geom[3]) if geom else [],
        }
    return table


def profile_name(gpu, constant, entry, ci_slices):
    """go-nvlib's and mig-parted's name of a compute instance of ci_slices in a GPU instance of that profile:
    ``1g.10gb``, ``1c.2g.20gb``, ``1g.10gb+me`` (pkg/nvlib/device/mig_profile.go getMigMemorySizeGB: the share of
    the GPU's memory rounded up to eighths, times the GPU's memory in GiB rounded up, rounded)."""
    total = gpu['memory_total_mib']
    eighths = (entry['memory_mib'] * 8 + total - 1) // total
    gigabytes = (eighths * ((total + 1023) // 1024) * 2 + 8) // 16
    suffix = '+me' if constant == PROFILE_ME else ''
    if ci_slices == entry['slices']:
        return '%dg.%dgb%s' % (entry['slices'], gigabytes, suffix)
    return '%dc.%dg.%dgb%s' % (ci_slices, entry['slices'], gigabytes, suffix)


def mig_uuid(gpu_uuid, gi_id, ci_id):
    """The UUID the library gives a compute instance it creates: RFC 4122 version 5 in the GPU UUID's namespace."""
    return 'MIG-%s' % uuid.uuid5(uuid.UUID(gpu_uuid[4:]), 'fake-nvml/mig/gi%d/ci%d' % (gi_id, ci_id))


def compute_instance_device(gpu, table, gi, ci):
    """The profile-format MIG device of a compute instance the library created (mig.c fake_ci_fill)."""
    entry = table[gi['profile']]
    slices = CI_SLICES[ci['profile']]
    return {
        'uuid': ci.get('uuid') or mig_uuid(gpu['uuid'], gi['id'], ci['id']),
        'profile': profile_name(gpu, gi['profile'], entry, slices),
        'gpu_instance_slices': entry['slices'],
        'compute_instance_slices': slices,
        'memory_mib': entry['memory_mib'],
        'multiprocessor_count': entry['sms'] * slices // entry['slices'] if entry['slices'] else 0,
        'gpu_instance_id': gi['id'],
        'compute_instance_id': ci['id'],
        'copy_engine_count': entry['copy_engine_count'],
        'decoder_count': entry['decoder_count'],
        'encoder_count': entry['encoder_count'],
        'jpeg_count': entry['jpeg_count'],
        'ofa_count': entry['ofa_count'],
        'gpu_instance_profile': gi['profile'],
        'compute_instance_profile': ci['profile'],
    }


# --------------------------------------------------------------------------- validation (mig.c state_validate)

def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _keys(obj, base, allowed):
    for key in obj:
        if not key.startswith('_') and key not in allowed:
            raise StateError('%s.%s' % (base, key) if base else key, 'unknown field')


def _member(obj, base, key, required):
    path = '%s.%s' % (base, key) if base else key
    if key not in obj:
        if required:
            raise StateError(path, 'missing required field')
        return path, None
    return path, obj[key]


def _int(obj, base, key, required, low, high):
    path, value = _member(obj, base, key, required)
    if key not in obj:
        return None
    if not _is_int(value):
        raise StateError(path, 'expected an integer')
    if value < low or value > high:
        raise StateError(path, 'must be between %d and %d' % (low, high))
    return value


def _bool(obj, base, key):
    path, value = _member(obj, base, key, True)
    if not isinstance(value, bool):
        raise StateError(path, 'expected a boolean')
    return value


def _array(obj, base, key):
    path, value = _member(obj, base, key, True)
    if not isinstance(value, list):
        raise StateError(path, 'expected an array')
    return value


def _find_gpu(profile, gpu_uuid):
    for index, gpu in enumerate((profile or {}).get('devices', [])):
        if gpu.get('uuid', '').lower() == gpu_uuid.lower():
            return index, gpu
    return None, None


def _check_ci(obj, cbase, ibase, max_devices, table, gi, seen_slots, seen_uuids):
    if not isinstance(obj, dict):
        raise StateError(cbase, 'expected an object')
    _keys(obj, cbase, CI_KEYS)
    ci = {'id': _int(obj, cbase, 'id', True, 0, 65535),
          'profile': _int(obj, cbase, 'profile', True, 0, COMPUTE_INSTANCE_PROFILE_COUNT - 1),
          'start': _int(obj, cbase, 'start', True, 0, MEMORY_SLICES - 1),
          'slot': _int(obj, cbase, 'slot', False, 0, max_devices - 1), 'uuid': ''}
    path, value = _member(obj, cbase, 'uuid', False)
    if 'uuid' in obj:
        if not isinstance(value, str):
            raise StateError(path, 'expected a string')
        if not re.fullmatch('MIG-' + UUID_TAIL, value):
            raise StateError(path, 'not a well-formed UUID (expected MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)')
        ci['uuid'] = value
    if table is not None and CI_SLICES[ci['profile']] > table[gi['profile']]['slices']:
        raise StateError(cbase + '.profile', 'compute instance profile %d does not fit in GPU instance profile %d'
                         % (ci['profile'], gi['profile']))
    for j, other in enumerate(gi['compute_instances']):
        if other['id'] == ci['id']:
            raise StateError(cbase + '.id', 'duplicate of %s.compute_instances[%d].id' % (ibase, j))
    if ci['slot'] is not None:
        if ci['slot'] in seen_slots:
            raise StateError(cbase + '.slot', 'duplicate of %s.slot' % seen_slots[ci['slot']])
        seen_slots[ci['slot']] = cbase
    if ci['uuid']:
        if ci['uuid'].lower() in seen_uuids:
            raise StateError(cbase + '.uuid', 'duplicate of %s.uuid' % seen_uuids[ci['uuid'].lower()])
        seen_uuids[ci['uuid'].lower()] = cbase
    return ci


def _check_entry(obj, base, index, gpu, profile):
    """One GPU's entry as a layout: {current, pending, gpu_instances: [{id, profile, start, compute_instances:
    [{id, profile, start, slot, uuid}]}]} with every slot assigned."""
    mig = (gpu or {}).get('mig') or {}
    max_devices = mig.get('max_devices', 7) if gpu is not None else MAX_DEVICES
    table = gpu_instance_profiles(gpu, profile) if gpu is not None else None
    if not isinstance(obj, dict):
        raise StateError(base, 'expected an object')
    _keys(obj, base, ENTRY_KEYS)
    layout = {'current': _bool(obj, base, 'current'), 'pending': _bool(obj, base, 'pending'), 'gpu_instances': []}
    instances = _array(obj, base, 'gpu_instances')
    path = base + '.gpu_instances'
    if gpu is not None and not mig.get('capable'):
        raise StateError(base, 'devices[%d] is not MIG capable' % index)
    if instances and not layout['current']:
        raise StateError(path, 'GPU instances listed but current is false')
    if len(instances) > max_devices:
        raise StateError(path, 'more GPU instances than max_devices (%d)' % max_devices)
    seen_slots, seen_uuids, total = {}, {}, 0
    for i, item in enumerate(instances):
        ibase = '%s[%d]' % (path, i)
        if not isinstance(item, dict):
            raise StateError(ibase, 'expected an object')
        _keys(item, ibase, GI_KEYS)
        gi = {'id': _int(item, ibase, 'id', True, 0, 65535),
              'profile': _int(item, ibase, 'profile', True, 0, GPU_INSTANCE_PROFILE_COUNT - 1),
              'start': _int(item, ibase, 'start', True, 0, MEMORY_SLICES - 1), 'compute_instances': []}
        cis = _array(item, ibase, 'compute_instances')
        if table is not None and gi['profile'] not in table:
            raise StateError(ibase + '.profile', 'GPU instance profile %d is not offered by devices[%d]'
                             % (gi['profile'], index))
        for j, other in enumerate(layout['gpu_instances']):
            if other['id'] == gi['id']:
                raise StateError(ibase + '.id', 'duplicate of %s[%d].id' % (path, j))
        for k, value in enumerate(cis):
            if total >= max_devices:
                raise StateError(path, 'more compute instances than max_devices (%d)' % max_devices)
            ci = _check_ci(value, '%s.compute_instances[%d]' % (ibase, k), ibase, max_devices, table, gi, seen_slots,
                           seen_uuids)
            gi['compute_instances'].append(ci)
            total += 1
        layout['gpu_instances'].append(gi)
    for gi in layout['gpu_instances']:
        for ci in gi['compute_instances']:
            if ci['slot'] is None:
                ci['slot'] = min(s for s in range(max_devices) if s not in seen_slots)
                seen_slots[ci['slot']] = '-'
    return layout


def layouts(state, profile):
    """Validate state (parsed) against profile; {GPU index in the profile: layout} of the entries it has."""
    found = {}
    if not isinstance(state, dict):
        raise StateError('top level', 'expected an object')
    _keys(state, '', STATE_KEYS)
    version = _int(state, '', 'version', True, -2 ** 63, 2 ** 63 - 1)
    if version != STATE_VERSION:
        raise StateError('version', 'unsupported version %d (this library reads %d)' % (version, STATE_VERSION))
    _path, gpus = _member(state, '', 'gpus', True)
    if not isinstance(gpus, dict):
        raise StateError('gpus', 'expected an object')
    for key, entry in gpus.items():
        if key.startswith('_'):
            continue
        base = 'gpus.%s' % key
        if not re.fullmatch('GPU-' + UUID_TAIL, key):
            raise StateError(base, 'not a GPU UUID (expected GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)')
        index, gpu = _find_gpu(profile, key)
        layout = _check_entry(entry, base, index, gpu, profile)
        if gpu is not None:
            found[index] = layout
    return found


def validate(state, profile=None):
    """Raise StateError for the first problem of a parsed state file (profile: the node's, for the GPUs' tables);
    None (no file) is valid."""
    if state is not None:
        layouts(state, profile)


def _reject_duplicates(pairs):
    result = {}
    for key, value in pairs:
        if key in result:
            raise ValueError("duplicate object key '%s'" % key)
        result[key] = value
    return result


def _reject_constant(name):
    raise ValueError('invalid JSON value %s' % name)


def load(path):
    """The parsed state file at path, or None when there is none (StateError when it is not JSON)."""
    try:
        with open(path, encoding='utf-8') as handle:
            text = handle.read()
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None
    try:
        return json.loads(text, object_pairs_hook=_reject_duplicates, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise StateError('line %d column %d' % (exc.lineno, exc.colno), exc.msg) from exc
    except ValueError as exc:
        raise StateError('top level', str(exc)) from exc


# --------------------------------------------------------------------------- the effective profile

def effective(profile, state):
    """The profile (parsed) as the library reports it with the state (parsed, or None) applied.

    A GPU the state has an entry for gets its mig.current and mig.pending, and its compute instances as mig.devices
    in MIG device slot order (free slots left out): a compute instance the profile lists (same UUID and ids) keeps its
    listed values, others get the library's (profile name, memory and SMs from the GPU instance profile table, the
    derived UUID when the entry has none). Other GPUs are the profile's. StateError for a state file the library
    would refuse."""
    result = copy.deepcopy(profile)
    if state is None:
        return result
    for index, layout in layouts(state, profile).items():
        gpu = result['devices'][index]
        listed = list(gpu['mig'].get('devices', []))
        table = gpu_instance_profiles(profile['devices'][index], profile)
        slots = {}
        for gi in layout['gpu_instances']:
            for ci in gi['compute_instances']:
                same = [d for d in listed if ci['uuid'] and d['uuid'].lower() == ci['uuid'].lower()
                        and d['gpu_instance_id'] == gi['id'] and d['compute_instance_id'] == ci['id']
                        and _listed_gi_profile(d) == gi['profile'] and _listed_ci_profile(d) == ci['profile']]
                slots[ci['slot']] = copy.deepcopy(same[0]) if same else compute_instance_device(gpu, table, gi, ci)
        gpu['mig']['current'] = layout['current']
        gpu['mig']['pending'] = layout['pending']
        gpu['mig']['devices'] = [slots[slot] for slot in sorted(slots)]
    return result


# --------------------------------------------------------------------------- writing, reset

def _write(path, state):
    """Replace the state file atomically: a temporary file in its directory, fsync, rename (as the library does)."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=os.path.basename(path) + '.')
    try:
        with os.fdopen(fd, 'w', encoding='utf-8') as handle:
            json.dump(state, handle, indent=2)
            handle.write('\n')
            handle.flush()
            os.fchmod(handle.fileno(), 0o644)
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def reset(profile, path):
    """What a GPU reset or a reboot does to the node's MIG state: every pending mode becomes current, and every MIG
    capable GPU loses its GPU and compute instances (MIG mode persists across a reset, the instances do not: whatever
    made them makes them again after a boot). Without a state file nothing changes (the profile's layout is the one
    the node boots with). Holds the library's lock ("<state>.lock") while it reads and writes. Returns the UUIDs of
    the GPUs whose mode changed."""
    if not os.path.exists(path):
        return []
    with open(path + '.lock', 'a', encoding='utf-8') as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        state = load(path)
        if state is None:
            return []
        validate(state, profile)
        changed = []
        gpus = state['gpus']
        for gpu in profile.get('devices', []):
            mig = gpu.get('mig') or {}
            if not mig.get('capable'):
                continue
            key = next((k for k in gpus if k.lower() == gpu['uuid'].lower()), None)
            if key is None:
                current = mig.get('current', False)
                pending = mig.get('pending', current)
            else:
                entry = gpus.pop(key)
                current, pending = entry['current'], entry['pending']
            if pending != current:
                changed.append(gpu['uuid'])
            gpus[gpu['uuid']] = {'current': pending, 'pending': pending, 'gpu_instances': []}
        _write(path, state)
        return changed


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('action', choices=['reset', 'show', 'check'],
                        help='reset: apply pending MIG modes (a GPU reset); show: the effective profile; check: '
                             'validate the state file')
    parser.add_argument('--profile', required=True, help='the node GPU profile (JSON)')
    parser.add_argument('--state', default=None,
                        help='the state file (default: $%s or %s)' % (STATE_ENV, DEFAULT_STATE))
    args = parser.parse_args(argv)
    path = args.state or state_path()
    try:
        with open(args.profile, encoding='utf-8') as handle:
            profile = json.load(handle)
        if args.action == 'reset':
            changed = reset(profile, path)
            sys.stdout.write('mig_state: %s\n' % ('pending MIG modes applied on %s' % ', '.join(changed) if changed
                                                  else 'no pending MIG mode change in %s' % path))
        elif args.action == 'show':
            sys.stdout.write(json.dumps(effective(profile, load(path)), indent=2) + '\n')
        else:
            validate(load(path), profile)
            sys.stdout.write('mig_state: %s valid\n' % path)
    except StateError as exc:
        sys.stderr.write('mig_state: %s: %s\n' % (path, exc))
        return 1
    except (OSError, ValueError) as exc:
        sys.stderr.write('mig_state: %s\n' % exc)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
