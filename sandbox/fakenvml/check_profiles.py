# SPDX-License-Identifier: GPL-3.0-or-later
"""Validate fake NVML GPU profiles (sandbox/profiles/*.json).

Usage: python check_profiles.py [FILE_OR_DIR ...]   (default: ../profiles beside this file)

Applies the same rules, in the same order and with the same wording, as the
C loader in profile.c, so a profile that passes here is one that nvmlInit
accepts. Prints one line per bad file, "<file>: <field path>: <problem>",
on stderr and exits 1 if any file is bad.

A profile with a "vendor" (AMD or Intel, sysfs only: no fake NVML reads it)
is checked by sandbox/images/vendor_profiles.py instead, not by NVML's rules.
"""

import importlib.util
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DIR = os.path.join(os.path.dirname(HERE), 'profiles')
C_SOURCE = os.path.join(HERE, 'fakenvml.c')
VENDOR_PROFILES = os.path.join(os.path.dirname(HERE), 'images', 'vendor_profiles.py')


def _vendor_profiles():
    """sandbox/images/vendor_profiles.py, loaded by path (this script runs without the repository on sys.path)."""
    spec = importlib.util.spec_from_file_location('vendor_profiles', VENDOR_PROFILES)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


STR_MAX = 96
DRIVER_VERSION_MAX = 80
SERIAL_MAX = 30

ARCHITECTURES = ['kepler', 'maxwell', 'pascal', 'volta', 'turing', 'ampere', 'ada', 'hopper', 'blackwell']
BRANDS = ['unknown', 'quadro', 'tesla', 'nvs', 'grid', 'geforce', 'titan', 'nvidia_vapps', 'nvidia_vpc',
          'nvidia_vcs', 'nvidia_vws', 'nvidia_cloud_gaming', 'quadro_rtx', 'nvidia_rtx', 'nvidia',
          'geforce_rtx', 'titan_rtx']
RETURN_CODES = ['UNINITIALIZED', 'INVALID_ARGUMENT', 'NOT_SUPPORTED', 'NO_PERMISSION', 'ALREADY_INITIALIZED',
                'NOT_FOUND', 'INSUFFICIENT_SIZE', 'INSUFFICIENT_POWER', 'DRIVER_NOT_LOADED', 'TIMEOUT',
                'IRQ_ISSUE', 'LIBRARY_NOT_FOUND', 'FUNCTION_NOT_FOUND', 'CORRUPTED_INFOROM', 'GPU_IS_LOST',
                'RESET_REQUIRED', 'OPERATING_SYSTEM', 'LIB_RM_VERSION_MISMATCH', 'IN_USE', 'MEMORY', 'NO_DATA',
                'VGPU_ECC_NOT_SUPPORTED', 'INSUFFICIENT_RESOURCES', 'FREQ_NOT_SUPPORTED',
                'ARGUMENT_VERSION_MISMATCH', 'DEPRECATED', 'NOT_READY', 'GPU_NOT_FOUND', 'INVALID_STATE',
                'RESET_TYPE_NOT_SUPPORTED', 'UNKNOWN']

TOP_KEYS = ['description', 'driver_version', 'nvml_version', 'cuda_driver_version', 'errors', 'devices']
DEVICE_KEYS = ['name', 'uuid', 'serial', 'pci_bus_id', 'pci_device_id', 'pci_subsystem_id', 'memory_total_mib',
               'compute_capability', 'architecture', 'brand', 'persistence_mode', 'minor_number',
               'multiprocessor_count', 'numa_node', 'event_types', 'xid_events', 'nvlinks', 'fabric', 'mig', 'errors',
               'virtualization_mode']
FABRIC_KEYS = ['cluster_uuid', 'clique_id', 'state', 'status', 'health_mask']
FABRIC_STATES = ['not_supported', 'not_started', 'in_progress', 'completed']
NVLINK_MAX_LINKS = 36
XID_KEYS = ['xid', 'after_ms', 'gpu_instance_id', 'compute_instance_id']
EVENT_TYPES = ['single_bit_ecc', 'double_bit_ecc', 'pstate', 'xid_critical', 'clock', 'power_source_change',
               'mig_config_change']
MIG_KEYS = ['capable', 'current', 'pending', 'max_devices', 'mode_change', 'devices']
MODE_CHANGES = ['immediate', 'reset']
VIRTUALIZATION_MODES = ['none', 'passthrough', 'vgpu', 'host_vgpu', 'host_vsga']
MIG_DEVICE_KEYS = ['uuid', 'profile', 'gpu_instance_slices', 'compute_instance_slices', 'memory_mib',
                   'multiprocessor_count', 'gpu_instance_id', 'compute_instance_id', 'copy_engine_count',
                   'decoder_count', 'encoder_count', 'jpeg_count', 'ofa_count', 'gpu_instance_profile',
                   'compute_instance_profile', 'errors']
# NVML_GPU_INSTANCE_PROFILE_<n>_SLICE and NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE by slice count
SLICE_PROFILES = {1: 0x0, 2: 0x1, 3: 0x2, 4: 0x3, 6: 0x6, 7: 0x4, 8: 0x5}
GPU_INSTANCE_PROFILE_COUNT = 0x12
COMPUTE_INSTANCE_PROFILE_COUNT = 0x9

UUID_TAIL = r'[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}'
BUS_ID_RE = re.compile(r'([0-9A-Fa-f]{8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-9A-Fa-f])')
HEX32_RE = re.compile(r'0[xX][0-9A-Fa-f]{8}')
CC_RE = re.compile(r'([0-9]{1,2})\.([0-9])')
MEMORY_MAX = 1 << 30


class ProfileError(Exception):
    """One problem in a profile: the field path and what is wrong with it."""

    def __init__(self, path, problem):
        super().__init__('%s: %s' % (path, problem))
        self.path = path
        self.problem = problem


def api_names(source=C_SOURCE):
    """NVML function names the fake library exports, read from fakenvml.c."""
    with open(source, encoding='utf-8') as handle:
        text = handle.read()
    match = re.search(r'BEGIN fake_api_names.*?\{(.*?)\};', text, re.S)
    if not match:
        raise RuntimeError('%s: fake_api_names list not found' % source)
    return re.findall(r'"(nvml\w+)"', match.group(1))


def _join(base, key):
    return '%s.%s' % (base, key) if base else key


def _check_keys(obj, base, allowed):
    for key in obj:
        if not key.startswith('_') and key not in allowed:
            raise ProfileError(_join(base, key), 'unknown field')


def _member(obj, base, key, required):
    if key not in obj:
        if required:
            raise ProfileError(_join(base, key), 'missing required field')
        return False, None
    return True, obj[key]


def _string(obj, base, key, required, size=STR_MAX):
    present, value = _member(obj, base, key, required)
    if not present:
        return None
    path = _join(base, key)
    if not isinstance(value, str):
        raise ProfileError(path, 'expected a string')
    if not value:
        raise ProfileError(path, 'must not be empty')
    if len(value.encode('utf-8')) >= size:
        raise ProfileError(path, 'longer than %d characters' % (size - 1))
    if '\0' in value:
        raise ProfileError(path, 'contains a NUL character')
    return value


def _integer(obj, base, key, required, low, high, default=None):
    present, value = _member(obj, base, key, required)
    if not present:
        return default
    path = _join(base, key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProfileError(path, 'expected an integer')
    if value < low or value > high:
        raise ProfileError(path, 'must be between %d and %d' % (low, high))
    return value


def _boolean(obj, base, key, required, default=False):
    present, value = _member(obj, base, key, required)
    if not present:
        return default
    if not isinstance(value, bool):
        raise ProfileError(_join(base, key), 'expected a boolean')
    return value


def _enum(obj, base, key, what, choices):
    value = _string(obj, base, key, True)
    if value not in choices:
        raise ProfileError(_join(base, key), "unknown %s '%s' (one of: %s)" % (what, value, ', '.join(choices)))
    return value


def _uuid(obj, base, prefix):
    value = _string(obj, base, 'uuid', True)
    if not re.fullmatch(re.escape(prefix) + UUID_TAIL, value):
        raise ProfileError(_join(base, 'uuid'),
                           'not a well-formed UUID (expected %sxxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)' % prefix)
    return value


def _hex32(obj, base, key, required):
    value = _string(obj, base, key, required)
    if value is not None and not HEX32_RE.fullmatch(value):
        raise ProfileError(_join(base, key), 'not a 32-bit hex id of the form 0x1DB410DE')
    return value


def _errors(obj, base, device_level, known):
    present, value = _member(obj, base, 'errors', False)
    if not present:
        return
    path = _join(base, 'errors')
    if not isinstance(value, dict):
        raise ProfileError(path, 'expected an object')
    for function, code in value.items():
        epath = _join(path, function)
        if function not in known:
            raise ProfileError(epath, 'unknown NVML function (see sandbox/fakenvml/README.md for the list)')
        if device_level and not function.startswith('nvmlDevice'):
            raise ProfileError(epath, 'not a per-device NVML function (put it in the top-level errors)')
        if not isinstance(code, str):
            raise ProfileError(epath, 'expected a string')
        if code not in RETURN_CODES:
            raise ProfileError(epath, "unknown NVML return code '%s' (a name like NOT_SUPPORTED or GPU_IS_LOST)" % code)


def _mig_device(obj, base, parent_name, known):
    if not isinstance(obj, dict):
        raise ProfileError(base, 'expected an object')
    _check_keys(obj, base, MIG_DEVICE_KEYS)
    uuid = _uuid(obj, base, 'MIG-')
    profile = _string(obj, base, 'profile', True)
    if len(('%s MIG %s' % (parent_name, profile)).encode('utf-8')) >= STR_MAX:
        raise ProfileError(_join(base, 'profile'),
                           "MIG device name '<GPU name> MIG <profile>' longer than %d characters" % (STR_MAX - 1))
    gi_slices = _integer(obj, base, 'gpu_instance_slices', True, 1, 8)
    ci_slices = _integer(obj, base, 'compute_instance_slices', True, 1, 8)
    _integer(obj, base, 'memory_mib', True, 1, MEMORY_MAX)
    _integer(obj, base, 'multiprocessor_count', True, 0, 65535)
    gi_id = _integer(obj, base, 'gpu_instance_id', True, 0, 65535)
    ci_id = _integer(obj, base, 'compute_instance_id', True, 0, 65535)
    for key in ('copy_engine_count', 'decoder_count', 'encoder_count', 'jpeg_count', 'ofa_count'):
        _integer(obj, base, key, False, 0, 64)
    for key, slices, count, what in (('gpu_instance_profile', gi_slices, GPU_INSTANCE_PROFILE_COUNT, 'GPU'),
                                     ('compute_instance_profile', ci_slices, COMPUTE_INSTANCE_PROFILE_COUNT, 'COMPUTE')):
        if _integer(obj, base, key, False, 0, count - 1) is None and slices not in SLICE_PROFILES:
            raise ProfileError(_join(base, key), 'required when %s_slices is %d (no NVML_%s_INSTANCE_PROFILE_%d_SLICE)'
                               % (key.replace('_profile', ''), slices, what, slices))
    _errors(obj, base, True, known)
    return {'uuid': uuid, 'gi_id': gi_id, 'ci_id': ci_id}


def _mig(device, base, name, known):
    present, mig = _member(device, base, 'mig', False)
    if not present:
        return []
    mbase = _join(base, 'mig')
    if not isinstance(mig, dict):
        raise ProfileError(mbase, 'expected an object')
    _check_keys(mig, mbase, MIG_KEYS)
    capable = _boolean(mig, mbase, 'capable', True)
    current = _boolean(mig, mbase, 'current', False)
    pending = _boolean(mig, mbase, 'pending', False, default=current)
    if not capable and current:
        raise ProfileError(_join(mbase, 'current'), 'MIG mode enabled but mig.capable is false')
    if not capable and pending:
        raise ProfileError(_join(mbase, 'pending'), 'MIG mode pending but mig.capable is false')
    max_devices = _integer(mig, mbase, 'max_devices', False, 1, 16, default=7 if capable else 0)
    if not capable:
        max_devices = 0
    if 'mode_change' in mig:
        _enum(mig, mbase, 'mode_change', 'mode change', MODE_CHANGES)
    present, devices = _member(mig, mbase, 'devices', False)
    if not present:
        return []
    path = _join(mbase, 'devices')
    if not isinstance(devices, list):
        raise ProfileError(path, 'expected an array')
    if devices and not current:
        raise ProfileError(path, 'MIG devices listed but mig.current is not true')
    if len(devices) > max_devices:
        raise ProfileError(path, 'more MIG devices than max_devices (%d)' % max_devices)
    return [_mig_device(entry, '%s[%d]' % (path, index), name, known) for index, entry in enumerate(devices)]


def _event_types(obj, base):
    present, value = _member(obj, base, 'event_types', False)
    if not present:
        return
    path = _join(base, 'event_types')
    if not isinstance(value, list):
        raise ProfileError(path, 'expected an array')
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise ProfileError('%s[%d]' % (path, i), 'expected a string')
        if item not in EVENT_TYPES:
            raise ProfileError('%s[%d]' % (path, i), "unknown event type '%s' (one of: %s)" % (item, ', '.join(EVENT_TYPES)))


def _xid_events(obj, base):
    present, value = _member(obj, base, 'xid_events', False)
    if not present:
        return
    path = _join(base, 'xid_events')
    if not isinstance(value, list):
        raise ProfileError(path, 'expected an array')
    for i, item in enumerate(value):
        ebase = '%s[%d]' % (path, i)
        if not isinstance(item, dict):
            raise ProfileError(ebase, 'expected an object')
        _check_keys(item, ebase, XID_KEYS)
        _integer(item, ebase, 'xid', True, 1, 65535)
        _integer(item, ebase, 'after_ms', False, 0, 86400000)
        _integer(item, ebase, 'gpu_instance_id', False, 0, 65535)
        _integer(item, ebase, 'compute_instance_id', False, 0, 65535)


def _nvlinks(obj, base):
    present, value = _member(obj, base, 'nvlinks', False)
    if not present:
        return
    path = _join(base, 'nvlinks')
    if not isinstance(value, list):
        raise ProfileError(path, 'expected an array')
    if len(value) > NVLINK_MAX_LINKS:
        raise ProfileError(path, 'more than %d NVLinks' % NVLINK_MAX_LINKS)
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise ProfileError('%s[%d]' % (path, i), 'expected a string')
        match = BUS_ID_RE.fullmatch(item)
        if not match or int(match.group(3), 16) > 0x1f or int(match.group(4), 16) > 7:
            raise ProfileError('%s[%d]' % (path, i), 'not a PCI bus id of the form 00000000:3B:00.0')


def _fabric(obj, base):
    present, fabric = _member(obj, base, 'fabric', False)
    if not present:
        return
    fbase = _join(base, 'fabric')
    if not isinstance(fabric, dict):
        raise ProfileError(fbase, 'expected an object')
    _check_keys(fabric, fbase, FABRIC_KEYS)
    cluster = _string(fabric, fbase, 'cluster_uuid', True)
    if not re.fullmatch(UUID_TAIL, cluster):
        raise ProfileError(_join(fbase, 'cluster_uuid'),
                           'not a well-formed UUID (expected xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)')
    _integer(fabric, fbase, 'clique_id', True, 0, 0xFFFFFFFF)
    if 'state' in fabric:
        _enum(fabric, fbase, 'state', 'fabric state', FABRIC_STATES)
    status = _string(fabric, fbase, 'status', False)
    if status is not None and status != 'SUCCESS' and status not in RETURN_CODES:
        raise ProfileError(_join(fbase, 'status'),
                           "unknown NVML return code '%s' (SUCCESS or a name like NOT_SUPPORTED)" % status)
    _integer(fabric, fbase, 'health_mask', False, 0, 0xFFFFFFFF)


def _device(obj, base, index, known):
    if not isinstance(obj, dict):
        raise ProfileError(base, 'expected an object')
    _check_keys(obj, base, DEVICE_KEYS)
    name = _string(obj, base, 'name', True)
    uuid = _uuid(obj, base, 'GPU-')
    _string(obj, base, 'serial', False, SERIAL_MAX)
    bus_id = _string(obj, base, 'pci_bus_id', True)
    match = BUS_ID_RE.fullmatch(bus_id)
    if not match or int(match.group(3), 16) > 0x1f or int(match.group(4), 16) > 7:
        raise ProfileError(_join(base, 'pci_bus_id'), 'not a PCI bus id of the form 00000000:3B:00.0')
    _hex32(obj, base, 'pci_device_id', True)
    _hex32(obj, base, 'pci_subsystem_id', False)
    _integer(obj, base, 'memory_total_mib', True, 1, MEMORY_MAX)
    cc = _string(obj, base, 'compute_capability', True)
    if not CC_RE.fullmatch(cc):
        raise ProfileError(_join(base, 'compute_capability'), 'not of the form MAJOR.MINOR (e.g. 7.0)')
    _enum(obj, base, 'architecture', 'architecture', ARCHITECTURES)
    _enum(obj, base, 'brand', 'brand', BRANDS)
    if 'virtualization_mode' in obj:
        _enum(obj, base, 'virtualization_mode', 'virtualization mode', VIRTUALIZATION_MODES)
    _boolean(obj, base, 'persistence_mode', False)
    minor = _integer(obj, base, 'minor_number', False, 0, 65535, default=index)
    _integer(obj, base, 'multiprocessor_count', False, 0, 65535)
    _integer(obj, base, 'numa_node', False, 0, 255)
    _event_types(obj, base)
    _xid_events(obj, base)
    _nvlinks(obj, base)
    _fabric(obj, base)
    _errors(obj, base, True, known)
    migs = _mig(obj, base, name, known)
    return {'uuid': uuid, 'bus': tuple(int(group, 16) for group in match.groups()), 'minor': minor, 'migs': migs}


def _unique(gpus):
    seen_migs = []
    for i, gpu in enumerate(gpus):
        for j in range(i):
            other = gpus[j]
            if gpu['uuid'].lower() == other['uuid'].lower():
                raise ProfileError('devices[%d].uuid' % i, 'duplicate of devices[%d].uuid' % j)
            if gpu['bus'] == other['bus']:
                raise ProfileError('devices[%d].pci_bus_id' % i, 'duplicate of devices[%d].pci_bus_id' % j)
            if gpu['minor'] == other['minor']:
                raise ProfileError('devices[%d].minor_number' % i, 'duplicate of devices[%d].minor_number' % j)
        for k, mig in enumerate(gpu['migs']):
            for (gpu_index, mig_index, uuid) in seen_migs:
                if uuid == mig['uuid'].lower():
                    raise ProfileError('devices[%d].mig.devices[%d].uuid' % (i, k),
                                       'duplicate of devices[%d].mig.devices[%d].uuid' % (gpu_index, mig_index))
            for j in range(k):
                other = gpu['migs'][j]
                if (other['gi_id'], other['ci_id']) == (mig['gi_id'], mig['ci_id']):
                    raise ProfileError('devices[%d].mig.devices[%d].gpu_instance_id' % (i, k),
                                       'duplicate (gpu_instance_id, compute_instance_id) of devices[%d].mig.devices[%d]'
                                       % (i, j))
            seen_migs.append((i, k, mig['uuid'].lower()))


def validate(data, known=None):
    """Raise ProfileError for the first problem in an already parsed profile."""
    if known is None:
        known = api_names()
    if not isinstance(data, dict):
        raise ProfileError('top level', 'expected an object')
    _check_keys(data, '', TOP_KEYS)
    present, description = _member(data, '', 'description', False)
    if present and not isinstance(description, str):
        raise ProfileError('description', 'expected a string')
    _string(data, '', 'driver_version', True, DRIVER_VERSION_MAX)
    _integer(data, '', 'cuda_driver_version', True, 1000, 999999)
    _string(data, '', 'nvml_version', False, DRIVER_VERSION_MAX)
    _errors(data, '', False, known)
    present, devices = _member(data, '', 'devices', True)
    if not isinstance(devices, list):
        raise ProfileError('devices', 'expected an array')
    _unique([_device(entry, 'devices[%d]' % index, index, known) for index, entry in enumerate(devices)])


def _reject_duplicates(pairs):
    result = {}
    for key, value in pairs:
        if key in result:
            raise ValueError("duplicate object key '%s'" % key)
        result[key] = value
    return result


def _reject_constant(name):
    raise ValueError('invalid JSON value %s' % name)


def check_file(path, known=None):
    """Return None when the profile at path is valid, else one line describing the problem."""
    try:
        with open(path, encoding='utf-8') as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        return '%s: cannot read: %s' % (path, exc)
    try:
        data = json.loads(text, object_pairs_hook=_reject_duplicates, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        return '%s: line %d column %d: %s' % (path, exc.lineno, exc.colno, exc.msg)
    except ValueError as exc:
        return '%s: %s' % (path, exc)
    vendors = _vendor_profiles()
    if vendors.is_vendor_profile(data):
        # an AMD or Intel profile says what the node's sysfs shows; no fake NVML loads it
        try:
            vendors.validate(data)
        except vendors.VendorProfileError as exc:
            return '%s: %s' % (path, exc)
        return None
    try:
        validate(data, known)
    except ProfileError as exc:
        return '%s: %s' % (path, exc)
    return None


def _expand(args):
    files = []
    for arg in args:
        if os.path.isdir(arg):
            files.extend(os.path.join(arg, name) for name in sorted(os.listdir(arg)) if name.endswith('.json'))
        else:
            files.append(arg)
    return files


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    files = _expand(args or [DEFAULT_DIR])
    if not files:
        sys.stderr.write('check_profiles: no profiles found in %s\n' % ' '.join(args or [DEFAULT_DIR]))
        return 1
    known = api_names()
    bad = 0
    for path in files:
        problem = check_file(path, known)
        if problem:
            bad += 1
            sys.stderr.write(problem + '\n')
    sys.stdout.write('check_profiles: %d of %d profiles valid\n' % (len(files) - bad, len(files)))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
