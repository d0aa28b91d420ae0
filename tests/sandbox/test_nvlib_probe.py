# SPDX-License-Identifier: GPL-3.0-or-later
"""NVIDIA's own libraries judge the fake NVML: sandbox/nvlibprobe walks the GPUs through go-nvml and go-nvlib the way
the device plugin and GPU feature discovery do (see sandbox/nvlibprobe/README.md).

Every shipped profile goes through it: the process must not die of a missing symbol (go-nvml binds NVML entry points
directly, so a function the fake lacks is exit 127, "symbol lookup error"), and every name and value go-nvlib reports
must be the profile's, MIG profile names (``1g.10gb+me``, ``1c.2g.20gb``) included: those are go-nvlib's own
computation from what the fake answers, not the profile's string read back.

The binary is ``$NVLIBPROBE`` (``make test`` passes it), else the cached one ``make nvlibprobe`` builds.
"""

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from setup_steps import missing_setup

import nvml_profiles

ROOT = Path(__file__).resolve().parents[2]
PROFILES_DIR = ROOT / 'sandbox' / 'profiles'
PROBE_DIR = ROOT / 'sandbox' / 'nvlibprobe'
README = ROOT / 'sandbox' / 'fakenvml' / 'README.md'
PROFILE_NAMES = sorted(path.stem for path in PROFILES_DIR.glob('*.json'))
NVML_PROFILE_PARAMS = nvml_profiles.params(PROFILE_NAMES, lambda name: PROFILES_DIR / ('%s.json' % name))
MIB = 1024 * 1024

# go-nvlib pkg/nvlib/device/device.go: GetArchitectureAsString, GetBrandAsString
ARCHITECTURES = {'kepler': 'Kepler', 'maxwell': 'Maxwell', 'pascal': 'Pascal', 'volta': 'Volta', 'turing': 'Turing',
                 'ampere': 'Ampere', 'ada': 'Ada Lovelace', 'hopper': 'Hopper', 'blackwell': 'Blackwell'}
BRANDS = {'unknown': 'Unknown', 'quadro': 'Quadro', 'tesla': 'Tesla', 'nvs': 'NVS', 'grid': 'Grid',
          'geforce': 'GeForce', 'titan': 'Titan', 'nvidia_vapps': 'NvidiaVApps', 'nvidia_vpc': 'NvidiaVPC',
          'nvidia_vcs': 'NvidiaVCS', 'nvidia_vws': 'NvidiaVWS', 'nvidia_cloud_gaming': 'NvidiaCloudGaming',
          'quadro_rtx': 'QuadroRTX', 'nvidia_rtx': 'NvidiaRTX', 'nvidia': 'Nvidia', 'geforce_rtx': 'GeForceRTX',
          'titan_rtx': 'TitanRTX'}
# The fake's nvmlErrorString texts (fakenvml.c) for the codes the shipped profiles inject: go-nvlib quotes them.
ERROR_TEXTS = {'NOT_SUPPORTED': 'Not Supported', 'GPU_IS_LOST': 'GPU is lost'}
NO_ECC_BRANDS = ('geforce', 'titan', 'geforce_rtx', 'titan_rtx')
XID, SBE, DBE = 0x8, 0x1, 0x2
TOPOLOGY_NODE, TOPOLOGY_SYSTEM = 40, 50


def probe_versions():
    """go-nvlib-v0.13.0_go-nvml-v0.13.4-1_<hash>: the cache key rules.mk derives from go.mod, and the first 12 hex
    digits of the SHA-256 of main.go, go.mod and go.sum (a binary per source: worktrees share the cache)."""
    text = (PROBE_DIR / 'go.mod').read_text(encoding='utf-8')
    pins = re.findall(r'^\s*github\.com/NVIDIA/(go-nvlib|go-nvml) (v\S+)', text, re.M)
    digest = hashlib.sha256(b''.join((PROBE_DIR / name).read_bytes() for name in ('main.go', 'go.mod', 'go.sum')))
    return '_'.join(['%s-%s' % pin for pin in pins] + [digest.hexdigest()[:12]])


def probe_binary():
    wanted = os.environ.get('NVLIBPROBE')
    if wanted:
        return Path(wanted)
    cache = Path(os.environ.get('CACHE_DIR') or Path.home() / '.cache' / 'kubegpu')
    return cache / 'nvlibprobe' / probe_versions() / 'nvlibprobe'


@pytest.fixture(scope='module')
def probe(fake_nvml_dir):
    binary = probe_binary()
    if not os.access(binary, os.X_OK):
        missing_setup('no nvlibprobe binary at %s; build it with `make nvlibprobe` (or set NVLIBPROBE)' % binary)

    def run(profile, lib_dir=fake_nvml_dir, extra_env=None):
        env = dict(os.environ, LD_LIBRARY_PATH=str(lib_dir), FAKE_NVML_PROFILE=str(profile), **(extra_env or {}))
        return subprocess.run([str(binary)], env=env, capture_output=True, text=True, timeout=120, check=False)

    def report(profile):
        proc = run(profile)
        assert 'symbol lookup error' not in proc.stderr, proc.stderr
        assert proc.returncode == 0, 'nvlibprobe exited %d:\n%s' % (proc.returncode, proc.stderr)
        return json.loads(proc.stdout)

    run.report = report
    return run


def load(name):
    with open(PROFILES_DIR / ('%s.json' % name), encoding='utf-8') as handle:
        return json.load(handle)


# --------------------------------------------------------------------------- what go-nvlib must report

def injected(function, *maps):
    """The return code a profile injects for function (exact name first, then without _vN), or None."""
    base = re.sub(r'_v[0-9]+$', '', function)
    for errors in maps:
        for name in (function, base):
            if name in (errors or {}):
                return errors[name]
    return None


def nvml(value, function, *maps):
    code = injected(function, *maps)
    return {'error': code} if code else value


def nvlib(value, function, message, *maps):
    code = injected(function, *maps)
    return {'error': '%s: %s' % (message, ERROR_TEXTS[code])} if code else value


def go_nvlib_bus_id(pci_bus_id):
    """go-nvlib GetPCIBusID: lower case, a leading 0000 of the 8-digit domain dropped."""
    bus_id = pci_bus_id.lower()
    return bus_id[4:] if re.match(r'^0{4}[0-9a-f]{4}:', bus_id) else bus_id


def expected_mig(gpu, slot, mig):
    attributes = {'memory_mib': mig['memory_mib'], 'multiprocessors': mig['multiprocessor_count'],
                  'gpu_instance_slices': mig['gpu_instance_slices'],
                  'compute_instance_slices': mig['compute_instance_slices'],
                  'copy_engines': mig.get('copy_engine_count', 0), 'decoders': mig.get('decoder_count', 0),
                  'encoders': mig.get('encoder_count', 0), 'jpegs': mig.get('jpeg_count', 0),
                  'ofas': mig.get('ofa_count', 0)}
    return {'slot': slot, 'uuid': mig['uuid'], 'name': '%s MIG %s' % (gpu['name'], mig['profile']),
            'profile': mig['profile'], 'gpu_instance_id': mig['gpu_instance_id'],
            'compute_instance_id': mig['compute_instance_id'], 'attributes': attributes,
            'memory_total_bytes': mig['memory_mib'] * MIB}


def expected_device(index, gpu, top):
    maps = (gpu.get('errors'), top)
    lost = injected('nvmlDeviceGetHandleByIndex_v2', *maps)
    if lost:
        return {'index': index, 'handle': {'error': lost}}
    major, minor = gpu['compute_capability'].split('.')
    mig = gpu.get('mig', {})
    capable, current = mig.get('capable', False), mig.get('current', False)
    fabric = gpu.get('fabric', {})
    # go-nvlib IsFabricAttached: state COMPLETED, status SUCCESS, a cluster UUID that is not all zero
    attached = (bool(fabric) and fabric.get('state', 'completed') == 'completed'
                and fabric.get('status', 'SUCCESS') == 'SUCCESS' and fabric['cluster_uuid'].strip('0-') != '')
    return {
        'index': index,
        'name': nvml(gpu['name'], 'nvmlDeviceGetName', *maps),
        'uuid': nvml(gpu['uuid'], 'nvmlDeviceGetUUID', *maps),
        'minor_number': nvml(gpu.get('minor_number', index), 'nvmlDeviceGetMinorNumber', *maps),
        'memory_total_bytes': nvml(gpu['memory_total_mib'] * MIB, 'nvmlDeviceGetMemoryInfo', *maps),
        'cuda_compute_capability': nvlib('%d.%d' % (int(major), int(minor)), 'nvmlDeviceGetCudaComputeCapability',
                                         'error getting CUDA compute capability', *maps),
        'architecture': nvlib(ARCHITECTURES[gpu['architecture']], 'nvmlDeviceGetArchitecture',
                              'error getting device architecture', *maps),
        'brand': nvlib(BRANDS[gpu['brand']], 'nvmlDeviceGetBrand', 'error getting device brand', *maps),
        'pci_bus_id': go_nvlib_bus_id(gpu['pci_bus_id']),
        'pci_device_id': '0x%08X' % int(gpu['pci_device_id'], 16),
        'mig_capable': capable,
        'mig_enabled': capable and current,
        'fabric_attached': attached,
        'coherent': False,
        'mig_devices': [expected_mig(gpu, slot, m) for slot, m in enumerate(mig.get('devices', []))
                        if capable and current],
    }


def expected_report(profile):
    top = profile.get('errors', {})
    init = injected('nvmlInit_v2', top)
    if init:
        return {'platform': 'nvml', 'init': init}
    devices = profile['devices']
    reachable = [i for i, gpu in enumerate(devices)
                 if not injected('nvmlDeviceGetHandleByIndex_v2', gpu.get('errors'), top)]
    walk = {'gpus': [], 'mig_devices': []}
    for i, gpu in enumerate(devices):
        if i not in reachable:
            walk['error'] = "error getting device handle for index '%d': %s" % (i, ERROR_TEXTS['GPU_IS_LOST'])
            walk['mig_error'] = 'error visiting devices: ' + walk['error']
            walk['mig_devices'] = []
            break
        walk['gpus'].append(i)
        mig = gpu.get('mig', {})
        if mig.get('current'):
            walk['mig_devices'] += ['%d:%d' % (i, j) for j in range(len(mig.get('devices', [])))]
    registered = []
    for i, gpu in enumerate(devices):
        if i not in reachable:
            registered.append({'error': injected('nvmlDeviceGetHandleByIndex_v2', gpu.get('errors'), top)})
        elif 'event_types' in gpu:
            named = {'xid_critical': XID, 'single_bit_ecc': SBE, 'double_bit_ecc': DBE}
            registered.append(sum(bit for name, bit in named.items() if name in gpu['event_types']))
        else:
            registered.append(XID | (0 if gpu['brand'] in NO_ECC_BRANDS else SBE | DBE))
    # the one 0 ms wait gets an XID that a registered GPU raises at once (after_ms 0), else times out
    due = any(isinstance(bits, int) and bits & XID and any(not event.get('after_ms') for event in gpu.get('xid_events', []))
              for bits, gpu in zip(registered, devices))
    wait = 'SUCCESS' if due else 'TIMEOUT'
    ancestors = [TOPOLOGY_NODE if devices[a].get('numa_node', 0) == devices[b].get('numa_node', 0) else TOPOLOGY_SYSTEM
                 for a in reachable for b in reachable if a != b]
    remotes = [[link.upper() for link in devices[i].get('nvlinks', [])] for i in reachable]
    default_nvml_version = '%d.%s' % (profile['cuda_driver_version'] // 1000, profile['driver_version'])
    return {
        'platform': 'nvml',
        'init': 'SUCCESS',
        'driver_version': nvml(profile['driver_version'], 'nvmlSystemGetDriverVersion', top),
        'cuda_driver_version': nvml(profile['cuda_driver_version'], 'nvmlSystemGetCudaDriverVersion', top),
        'nvml_version': nvml(profile.get('nvml_version', default_nvml_version), 'nvmlSystemGetNVMLVersion', top),
        'count': len(devices),
        'walk': walk,
        'devices': [expected_device(i, gpu, top) for i, gpu in enumerate(devices)],
        'events': {'registered': registered, 'wait': wait, 'free': 'SUCCESS'},
        'topology': {'common_ancestors': ancestors, 'nvlink_remotes': remotes},
    }


def without_profile_ids(report):
    """The report without what the profiles do not write down: NVML's profile ids of MIG devices and go-nvlib's
    list of the MIG profiles a GPU offers (both judged against gpu_facts below)."""
    for device in report.get('devices', []):
        device.pop('mig_profiles', None)
        for mig in device.get('mig_devices', []):
            mig.pop('profile_ids', None)
    return report


# --------------------------------------------------------------------------- every shipped profile

@pytest.mark.parametrize('name', NVML_PROFILE_PARAMS)
def test_go_nvlib_sees_each_profile_as_written(probe, name):
    seen = without_profile_ids(probe.report(PROFILES_DIR / ('%s.json' % name)))
    assert seen == expected_report(load(name))


def test_mig_on_with_no_mig_device(probe):
    seen = probe.report(PROFILES_DIR / 'a100x2-mig-one-empty.json')
    empty, used = seen['devices']
    assert (empty['mig_enabled'], empty['mig_devices']) == (True, [])
    assert [m['profile'] for m in used['mig_devices']] == ['3g.40gb', '3g.40gb']
    assert seen['walk']['mig_devices'] == ['1:0', '1:1'] and 'mig_error' not in seen['walk']


def test_compute_instances_of_one_gpu_instance(probe):
    seen = probe.report(PROFILES_DIR / 'a100-mig-compute-instances.json')
    migs = [m for m in seen['devices'][0]['mig_devices'] if m['profile'] == '1c.2g.20gb']
    assert [(m['gpu_instance_id'], m['compute_instance_id']) for m in migs] == [(3, 0), (3, 1)]
    # NVML_GPU_INSTANCE_PROFILE_2_SLICE with NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, the shared engine profile
    assert {json.dumps(m['profile_ids'], sort_keys=True) for m in migs} == \
        {json.dumps({'compute_instance': 0, 'engine': 0, 'gpu_instance': 1}, sort_keys=True)}


def test_media_extension_profile_next_to_the_plain_one(probe):
    seen = probe.report(PROFILES_DIR / 'h100-mig-me.json')
    by_profile = {m['profile']: m for m in seen['devices'][0]['mig_devices']}
    assert set(by_profile) == {'3g.40gb', '2g.20gb', '1g.10gb+me', '1g.10gb'}
    assert by_profile['1g.10gb+me']['profile_ids']['gpu_instance'] == 7   # NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1
    assert by_profile['1g.10gb']['profile_ids']['gpu_instance'] == 0
    assert (by_profile['1g.10gb+me']['attributes']['ofas'], by_profile['1g.10gb']['attributes']['ofas']) == (1, 0)


def test_one_profile_name_on_two_gpu_models(probe):
    seen = probe.report(PROFILES_DIR / 'a100-h100-mig-same-profile.json')
    a100, h100 = (gpu['mig_devices'] for gpu in seen['devices'])
    assert {m['profile'] for m in a100} == {m['profile'] for m in h100} == {'1g.10gb'}
    assert a100[0]['attributes'] != h100[0]['attributes']
    assert (a100[0]['attributes']['multiprocessors'], h100[0]['attributes']['multiprocessors']) == (14, 16)


def test_not_supported_answers_reach_go_nvlib(probe):
    seen = probe.report(PROFILES_DIR / 't4-compute-capability-not-supported.json')
    assert seen['devices'][0]['cuda_compute_capability'] == {
        'error': 'error getting CUDA compute capability: Not Supported'}
    seen = probe.report(PROFILES_DIR / 'h100-memory-info-not-supported.json')
    assert seen['devices'][0]['memory_total_bytes'] == {'error': 'NOT_SUPPORTED'}
    assert (seen['devices'][0]['mig_capable'], seen['devices'][0]['mig_enabled']) == (True, False)


def test_a_lost_gpu_ends_go_nvlib_walk_but_not_the_probe(probe):
    seen = probe.report(PROFILES_DIR / 'failure-device-lost.json')
    assert seen['walk']['gpus'] == [0] and 'GPU is lost' in seen['walk']['error']
    assert seen['devices'][1] == {'index': 1, 'handle': {'error': 'GPU_IS_LOST'}}
    assert seen['devices'][0]['name'] == 'Tesla T4'


def test_fabric_and_nvlinks(probe, tmp_path):
    gpu = {'name': 'NVIDIA H100 80GB HBM3', 'uuid': 'GPU-11111111-2222-3333-4444-555555555555',
           'pci_bus_id': '00000000:18:00.0', 'pci_device_id': '0x233010DE', 'memory_total_mib': 81559,
           'compute_capability': '9.0', 'architecture': 'hopper', 'brand': 'nvidia', 'numa_node': 0,
           'nvlinks': ['00000000:05:00.0', '00000000:06:00.0'],
           'fabric': {'cluster_uuid': '7f2c4c8e-1b2a-4d3e-9f10-112233445566', 'clique_id': 32766}}
    other = dict(gpu, uuid='GPU-21111111-2222-3333-4444-555555555555', pci_bus_id='00000000:DB:00.0', minor_number=1,
                 numa_node=1, fabric=dict(gpu['fabric'], state='in_progress'))
    path = tmp_path / 'fabric.json'
    path.write_text(json.dumps({'driver_version': '550.127.05', 'cuda_driver_version': 12040,
                                'devices': [gpu, other]}), encoding='utf-8')
    seen = probe.report(path)
    assert [d['fabric_attached'] for d in seen['devices']] == [True, False]
    assert seen['topology'] == {'common_ancestors': [TOPOLOGY_SYSTEM, TOPOLOGY_SYSTEM],
                                'nvlink_remotes': [['00000000:05:00.0', '00000000:06:00.0']] * 2}


def test_init_failures_are_reported(probe):
    for name, code in (('failure-driver-not-loaded', 'DRIVER_NOT_LOADED'), ('failure-no-permission', 'NO_PERMISSION')):
        assert probe.report(PROFILES_DIR / ('%s.json' % name)) == {'platform': 'nvml', 'init': code}


# --------------------------------------------------------------------------- the judge itself

def test_a_missing_symbol_kills_the_probe(probe, tmp_path):
    """The judge can fail: against a library that lacks most of NVML, go-nvml's direct binding ends the process."""
    source = tmp_path / 'tiny.c'
    source.write_text('int nvmlInit_v2(void) { return 0; }\n'
                      'int nvmlShutdown(void) { return 0; }\n'
                      'const char *nvmlErrorString(int r) { (void)r; return "x"; }\n', encoding='utf-8')
    lib = tmp_path / 'libnvidia-ml.so.1'
    subprocess.run(['cc', '-shared', '-fPIC', '-o', str(lib), str(source)], check=True)
    proc = probe(PROFILES_DIR / 't4.json', lib_dir=tmp_path)
    assert proc.returncode == 127 and 'symbol lookup error' in proc.stderr, (proc.returncode, proc.stderr)


def readme_functions():
    """Every nvml* name in the first column of the fake NVML README's "Who calls what" table."""
    text = README.read_text(encoding='utf-8')
    rows = re.match(r'(\|.*\n)+', text.split('\n| function | program | where |\n', 1)[1]).group(0)
    return {name for row in rows.splitlines()[1:] for name in re.findall(r'`(nvml\w+)`', row.split('|')[1])}


def test_every_symbol_go_nvlib_binds_is_exported_and_in_the_readme(probe, tmp_path, fake_nvml_dir):
    """What the probe binds on the richest profiles (LD_DEBUG=bindings) is in the fake and in the README's table."""
    exported = set(re.findall(r' T (nvml\w+)$', subprocess.run(
        ['nm', '-D', '--defined-only', str(fake_nvml_dir / 'libnvidia-ml.so.1')],
        capture_output=True, text=True, check=True).stdout, re.M))
    bound = set()
    for name in ('a100x8-mig-mixed', 'h100-mig-me', 'a100-mig-compute-instances'):
        log = tmp_path / name
        debug = {'LD_DEBUG': 'bindings', 'LD_DEBUG_OUTPUT': str(log)}
        proc = probe(PROFILES_DIR / ('%s.json' % name), extra_env=debug)
        assert proc.returncode == 0, proc.stderr
        for path in tmp_path.glob(name + '.*'):
            bound |= set(re.findall(r"to \S*libnvidia-ml\.so\.1 \[0\]: normal symbol `(nvml\w+)'",
                                    path.read_text(encoding='utf-8', errors='replace')))
    assert {'nvmlInit_v2', 'nvmlDeviceGetGpuInstanceById', 'nvmlEventSetWait_v2'} <= bound, sorted(bound)
    assert bound <= exported, sorted(bound - exported)
    assert bound <= readme_functions() | {'nvmlErrorString'}, sorted(bound - readme_functions())


def test_probe_cache_key_follows_the_pins_and_the_source():
    """The key rules.mk builds the binary under: the pins, then the sources' hash, as make computes it."""
    key = probe_versions()
    assert re.fullmatch(r'go-nvlib-v0\.13\.0_go-nvml-v0\.13\.4-1_[0-9a-f]{12}', key), key
    make = subprocess.run(['make', '-s', '--no-print-directory', '-pn', 'nvlibprobe'], cwd=str(ROOT), capture_output=True,
                          text=True, timeout=120, check=False)
    dirs = re.findall(r'^NVLIBPROBE_DIR := .*/nvlibprobe/(\S+)$', make.stdout, re.M)
    assert dirs == [key], make.stderr or dirs  # make -p prints the expanded value


# --------------------------------------------------------------------------- nvidia-ctk's CDI generator

def nvidia_ctk_binary():
    wanted = os.environ.get('NVIDIA_CTK')
    if wanted:
        return Path(wanted)
    cache = Path(os.environ.get('CACHE_DIR') or Path.home() / '.cache' / 'kubegpu')
    version = re.search(r'^NVIDIA_CTK_VERSION := (\S+)', (ROOT / 'sandbox' / 'nvidia-ctk' / 'rules.mk').read_text(
        encoding='utf-8'), re.M).group(1)
    return cache / 'nvidia-ctk' / version / 'bin' / 'nvidia-ctk'


def mig_minors_module():
    import importlib.util  # pylint: disable=import-outside-toplevel
    spec = importlib.util.spec_from_file_location('mig_minors', ROOT / 'sandbox' / 'fakenvml' / 'mig_minors.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MIG_MINORS = mig_minors_module()


@pytest.fixture(scope='module')
def cdi_generate(fake_nvml_dir, tmp_path_factory):
    """`nvidia-ctk cdi generate --mode nvml` on a driver root made for a profile, the fake as its libnvidia-ml.

    The driver root holds what the generator looks for: libnvidia-ml.so.<driver version> (the fake, which it
    dlopens), libcuda.so.<driver version> (an empty file: only its name is read), /dev/nvidia<minor> and
    /dev/nvidiactl (major 195), and the /dev/nvidia-caps nodes of the profile's MIG devices. The generator reads
    /proc/driver/nvidia-caps/mig-minors at that fixed path: it runs in a mount namespace of its own where a tmpfs
    over /proc/driver carries the file mig_minors.py renders. Device nodes and the namespace need root.
    """
    binary = nvidia_ctk_binary()
    if not os.access(binary, os.X_OK):
        missing_setup('no nvidia-ctk binary at %s; build it with `make nvidia-ctk` (or set NVIDIA_CTK)' % binary)
    if os.geteuid() != 0:
        pytest.skip('nvidia-ctk needs a driver root with device nodes and a private /proc/driver: run as root')

    def generate(name):
        path = PROFILES_DIR / ('%s.json' % name)
        profile = load(name)
        root = tmp_path_factory.mktemp(name)
        libdir = root / 'usr' / 'lib' / 'x86_64-linux-gnu'
        libdir.mkdir(parents=True)
        version = profile['driver_version']
        (libdir / ('libcuda.so.%s' % version)).write_bytes(b'')
        (libdir / ('libnvidia-ml.so.%s' % version)).write_bytes((fake_nvml_dir / 'libnvidia-ml.so.1').read_bytes())
        (libdir / 'libnvidia-ml.so.1').symlink_to('libnvidia-ml.so.%s' % version)
        dev = root / 'dev'
        dev.mkdir()
        for index, gpu in enumerate(profile['devices']):
            minor = gpu.get('minor_number', index)
            os.mknod(dev / ('nvidia%d' % minor), 0o20666, os.makedev(195, minor))
        os.mknod(dev / 'nvidiactl', 0o20666, os.makedev(195, 255))
        minors = root / 'mig-minors'
        MIG_MINORS.write(profile, str(minors), str(dev / 'nvidia-caps'))
        script = ('mount -t tmpfs none /proc/driver && mkdir /proc/driver/nvidia-caps && '
                  '{ [ ! -f "$MINORS" ] || cp "$MINORS" /proc/driver/nvidia-caps/mig-minors; } && '
                  'exec "$CTK" cdi generate --mode nvml --format json --driver-root "$ROOT" --dev-root "$ROOT"')
        env = dict(os.environ, FAKE_NVML_PROFILE=str(path), MINORS=str(minors), CTK=str(binary), ROOT=str(root))
        env.pop('LD_LIBRARY_PATH', None)   # the generator must find the fake in the driver root, not through the path
        proc = subprocess.run(['unshare', '--mount', '--propagation', 'private', 'sh', '-c', script], env=env,
                              capture_output=True, text=True, timeout=120, check=False)
        assert 'symbol lookup error' not in proc.stderr, proc.stderr
        return proc, root

    return generate


def cdi_devices(spec, root):
    """CDI device name -> the container paths of its device nodes (host paths checked to lie in the driver root)."""
    devices = {}
    for device in spec['devices']:
        nodes = device['containerEdits'].get('deviceNodes', [])
        for node in nodes:
            assert node.get('hostPath', str(root) + node['path']) == str(root) + node['path'], node
        devices[device['name']] = [node['path'] for node in nodes]
    return devices


def expected_cdi_devices(profile):
    """What the CDI generator must list: a full GPU by index and UUID, a MIG device by i:j and UUID, and all."""
    expected = {}
    mig_paths = MIG_MINORS.device_paths(profile)
    for index, gpu in enumerate(profile['devices']):
        mig = gpu.get('mig', {})
        if mig.get('capable') and mig.get('current'):
            for slot, device in enumerate(mig.get('devices', [])):
                expected['%d:%d' % (index, slot)] = expected[device['uuid']] = mig_paths[device['uuid']]
        else:
            expected[str(index)] = expected[gpu['uuid']] = ['/dev/nvidia%d' % gpu.get('minor_number', index)]
    expected['all'] = sorted({path for paths in expected.values() for path in paths})
    return expected


CDI_FAILURES = {'failure-device-lost': 'GPU is lost', 'failure-driver-not-loaded': 'Driver Not Loaded',
                'failure-no-permission': 'Insufficient Permissions'}


@pytest.mark.parametrize('name', NVML_PROFILE_PARAMS)
def test_nvidia_ctk_generates_cdi_specs_from_the_fake(cdi_generate, name):
    """NVIDIA's CDI generator, a real NVIDIA program, walks the fake and the mig-minors file: its device names and
    device nodes are the profile's, the MIG ones those of mig_minors.device_paths."""
    proc, root = cdi_generate(name)
    if name in CDI_FAILURES:
        assert proc.returncode != 0 and CDI_FAILURES[name] in proc.stderr, proc.stderr
        return
    assert proc.returncode == 0, proc.stderr
    seen = cdi_devices(json.loads(proc.stdout), root)
    seen['all'] = sorted(set(seen['all']))
    assert seen == expected_cdi_devices(load(name))


# --------------------------------------------------------------------------- gpu_facts judged by go-nvlib

def gpu_facts_of(fake_nvml_dir, path):
    """The gpu fact gpu_facts reads (the collection's reader, through the real pynvml) from the fake serving ``path``."""
    worker = Path(__file__).resolve().parent / 'gpu_facts_worker.py'
    env = dict(os.environ, LD_LIBRARY_PATH=str(fake_nvml_dir),
               PYTHONPATH=os.pathsep.join([str(ROOT / '.build' / 'collections'), str(ROOT)]))
    proc = subprocess.run([sys.executable, str(worker)], input=str(path) + '\n', env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize('name', NVML_PROFILE_PARAMS)
def test_gpu_facts_names_and_fails_as_go_nvlib_does(probe, fake_nvml_dir, name):
    """What the device plugin decides on, gpu_facts must read the same: each MIG device's profile name (go-nvlib's
    GetProfile: +me, 1c.2g.20gb), its GPU/compute instance profile ids, each GPU's minor number, and which GPUs NVML
    lost."""
    path = PROFILES_DIR / ('%s.json' % name)
    seen = probe.report(path)
    facts = gpu_facts_of(fake_nvml_dir, path)
    if 'devices' not in seen:  # NVML did not start (the probe reports init's code): neither reads a GPU
        assert seen['init'] != 'SUCCESS' and facts['nvml']['status'] != 'ok' and facts['devices'] == []
        return
    assert len(facts['devices']) == len(seen['devices']) == seen['count']
    for ours, theirs in zip(facts['devices'], seen['devices']):
        if 'handle' in theirs:  # go-nvlib could not get the GPU: gpu_facts records the same NVML answer
            assert ours['nvml_returns'] == {'nvmlDeviceGetHandleByIndex': theirs['handle']['error']}
            continue
        assert ours['minor_number'] == theirs['minor_number']
        assert ours['mig']['capable'] == theirs['mig_capable'] and ours['mig']['current'] == theirs['mig_enabled']
        # the MIG profiles the GPU offers, in go-nvlib's order (GetMigProfiles): what a mig-parted config may name.
        # go-nvlib lists a name once per compute instance profile constant that prints as it (the REV1 constants
        # print as their plain sizes), so its first occurrences are compared.
        # Where go-nvlib cannot list them (no memory size to name them by), gpu_facts lists none and records why.
        if isinstance(theirs['mig_profiles'], dict):
            assert ours['mig']['profiles'] == [] and ours['nvml_returns'].get('nvmlDeviceGetMemoryInfo'), name
        else:
            assert ours['mig'].get('profiles', []) == list(dict.fromkeys(theirs['mig_profiles'])), name
        assert [(m['uuid'], m['profile'], m['gpu_instance_profile'], m['compute_instance_profile'])
                for m in ours['mig']['devices']] == \
            [(m['uuid'], m['profile'], m['profile_ids']['gpu_instance'], m['profile_ids']['compute_instance'])
             for m in theirs['mig_devices']]


# --------------------------------------------------------------------------- the fake PCI bus as GFD reads it

def fake_pci_modules():
    sys.path.insert(0, str(ROOT / 'tests'))
    import fake_pci_bus  # noqa: E402  pylint: disable=import-outside-toplevel
    from sandbox.images import fake_pci  # pylint: disable=import-outside-toplevel
    return fake_pci_bus, fake_pci


@pytest.mark.parametrize('name', NVML_PROFILE_PARAMS)
def test_go_nvlib_reads_the_fake_pci_bus_as_gfd_does(probe, name, tmp_path):
    """GPU feature discovery labels gpu.mode from each GPU's PCI class, read by go-nvlib's nvpci
    (internal/resource/nvml-device.go GetPCIClass), which fails without numa_node and resource: GFD then labels
    gpu.mode=unknown. The fake PCI bus the node containers and the MIG tests use has both, so go-nvlib finds every
    GPU NVML answers for, with the class and NUMA node of the profile."""
    fake_pci_bus, fake_pci = fake_pci_modules()
    profile = load(name)
    folder = fake_pci_bus.write(profile, str(tmp_path / 'devices'))
    proc = probe(PROFILES_DIR / ('%s.json' % name), extra_env={'NVLIBPROBE_PCI_DEVICES': folder})
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    if report['init'] != 'SUCCESS':
        return  # no NVML: GFD labels nothing (and the probe reads no bus id)
    want = []
    for gpu in profile['devices']:
        if injected('nvmlDeviceGetHandleByIndex_v2', gpu.get('errors'), profile.get('errors')):
            want.append({'error': 'GPU_IS_LOST'})  # a lost GPU has no bus id to read
            continue
        want.append({'address': fake_pci.sysfs_bdf(gpu['pci_bus_id']), 'class': '0x%06x' % fake_pci.pci_class(gpu),
                     'numa_node': gpu.get('numa_node', 0), 'bars': 3, 'driver': ''})
    assert report['pci'] == want


def test_without_numa_node_or_resource_go_nvlib_fails_as_gfd_would(probe, tmp_path):
    """What the fake PCI bus lacked before: go-nvlib refuses the device, and GFD's gpu.mode is unknown."""
    fake_pci_bus, _fake_pci = fake_pci_modules()
    folder = fake_pci_bus.write(load('t4'), str(tmp_path / 'devices'))
    for name in ('numa_node', 'resource'):
        for device in os.listdir(folder):
            path = os.path.join(folder, device, name)
            os.rename(path, path + '.gone')
        proc = probe(PROFILES_DIR / 't4.json', extra_env={'NVLIBPROBE_PCI_DEVICES': folder})
        error = json.loads(proc.stdout)['pci'][0].get('error', '')
        assert ('numa_node' if name == 'numa_node' else 'resource file') in error, error
        for device in os.listdir(folder):
            path = os.path.join(folder, device, name)
            os.rename(path + '.gone', path)
