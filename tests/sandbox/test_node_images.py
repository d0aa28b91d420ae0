# SPDX-License-Identifier: GPL-3.0-or-later
"""Checks of the simulated node images on the fleet that `make nodes-up` starts.

Runs with pytest-testinfra's docker backend (``docker://kg-v100``...) against the running node containers:
systemd booted, Docker and containerd active, the venv's pynvml importable, NVML answering as the
node's variant says (fake NVML with the profile's GPUs, Debian's NVML without a driver, no NVML at all)
and the fake PCI bus showing the profile's GPUs. Skipped, with the reason, when the fleet is not up.
"""

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import testinfra
import yaml
from setup_steps import missing_setup

from sandbox.images import fake_pci

ROOT = Path(__file__).resolve().parents[2]
PROFILES_DIR = ROOT / 'sandbox' / 'profiles'
with open(ROOT / 'sandbox' / 'fleet.yml', encoding='utf-8') as _fleet:
    FLEET = yaml.safe_load(_fleet)['nodes']
VENV_PYTHON = '/opt/kubegpu/venv/bin/python'
PROFILE_PATH = '/etc/fake-nvml/profile.json'
# The nodriver node shows one GPU on its PCI bus with this profile's identity (sandbox/images/fake_pci.py).
NODRIVER_PROFILE = 'v100x4'
GEFORCE_CLASS = '0x030000'
DATACENTER_CLASS = '0x030200'

NVML_PROBE = """
import json
import pynvml
try:
    pynvml.nvmlInit()
except pynvml.NVMLError as exc:
    print(json.dumps({'error': type(exc).__name__}))
else:
    count = pynvml.nvmlDeviceGetCount()
    names = [pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]
    pynvml.nvmlShutdown()
    print(json.dumps({'count': count, 'names': names}))
"""

PCI_PROBE = """
import glob
import json
import os
bus = {}
for path in sorted(glob.glob('/sys/bus/pci/devices/*')):
    attrs = {}
    for name in ('vendor', 'device', 'class', 'subsystem_vendor', 'subsystem_device', 'numa_node', 'resource'):
        with open(os.path.join(path, name), encoding='ascii') as handle:
            attrs[name] = handle.read().strip()
    link = os.path.join(path, 'driver')
    attrs['driver'] = os.path.basename(os.readlink(link)) if os.path.islink(link) else None
    attrs['driver_is_dir'] = os.path.isdir(link)
    bus[os.path.basename(path)] = attrs
print(json.dumps(bus))
"""


def _nodes(*variants):
    return [pytest.param(node, id=node['name']) for node in FLEET if not variants or node['variant'] in variants]


def _profile_devices(name):
    with open(PROFILES_DIR / ('%s.json' % name), encoding='utf-8') as handle:
        return json.load(handle)['devices']


def _sysfs_name(pci_bus_id):
    domain, bus, devfn = pci_bus_id.lower().split(':')
    return '%s:%s:%s' % (domain[-4:], bus, devfn)


def _expected_pci(devices, driver):
    expected = {}
    for gpu in devices:
        ident, subsys = int(gpu['pci_device_id'], 16), int(gpu['pci_subsystem_id'], 16)
        geforce = gpu.get('brand') == 'geforce' or 'GeForce' in gpu['name']
        # go-nvlib's nvpci (GPU feature discovery's gpu.mode, nvidia-ctk) needs numa_node and resource: the profile's
        # NUMA node (0 by default, as the fake NVML answers), and the kernel's 13 resource lines, BAR0 and BAR1 set
        resource = fake_pci.device_files(gpu)['resource'].strip()
        lines = [line.split(' ') for line in resource.splitlines()]
        assert len(lines) == 13 and all(len(line) == 3 for line in lines)
        assert int(lines[0][1], 16) > int(lines[0][0], 16) > 0 and int(lines[1][1], 16) > int(lines[1][0], 16) > 0
        expected[_sysfs_name(gpu['pci_bus_id'])] = {
            'vendor': '0x10de',
            'device': '0x%04x' % (ident >> 16),
            'class': GEFORCE_CLASS if geforce else DATACENTER_CLASS,
            'subsystem_vendor': '0x%04x' % (subsys & 0xFFFF),
            'subsystem_device': '0x%04x' % (subsys >> 16),
            'numa_node': str(gpu.get('numa_node', 0)),
            'resource': resource,
            'driver': driver,
            'driver_is_dir': driver is not None,
        }
    return expected


@pytest.fixture(scope='module')
def running_nodes():
    """Names of the running sandbox containers; skips the module when the fleet is not up."""
    if shutil.which('docker') is None:
        missing_setup('fleet not up: no docker client (make nodes-up)')
    proc = subprocess.run(['docker', 'ps', '--filter', 'label=kubegpu.sandbox=1', '--format', '{{.Names}}'],
                          capture_output=True, text=True, timeout=30, check=False)
    if proc.returncode != 0:
        missing_setup('fleet not up: docker engine not answering (%s); run make nodes-up' % proc.stderr.strip())
    names = set(proc.stdout.split())
    if not names:
        missing_setup('fleet not up: no container labelled kubegpu.sandbox=1; run make nodes-up')
    return names


@pytest.fixture()
def node(request, running_nodes):
    """testinfra host of the parametrized fleet node (which must be running)."""
    name = request.param['name']
    assert name in running_nodes, 'node %s of sandbox/fleet.yml is not running (make nodes-up)' % name
    return testinfra.get_host('docker://%s' % name)


def _json(node, code, python=VENV_PYTHON):
    result = node.run(python + ' -c %s', code)
    assert result.rc == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize('node', _nodes(), indirect=True)
def test_systemd_is_running(node):
    state = node.run('systemctl is-system-running').stdout.strip()
    failed = node.run('systemctl --failed --no-legend --plain').stdout
    assert state == 'running', 'systemd is %s; failed units:\n%s' % (state, failed)


@pytest.mark.parametrize('node', _nodes(), indirect=True)
def test_docker_and_containerd_are_active(node):
    result = node.run('systemctl is-active docker containerd')
    assert result.stdout.split() == ['active', 'active'], result.stdout + result.stderr
    assert node.run('docker info --format "{{.ServerVersion}}"').rc == 0


@pytest.mark.parametrize('node', _nodes(), indirect=True)
def test_venv_has_pynvml_and_tomlkit(node):
    result = node.run('%s -c "import pynvml, tomlkit"' % VENV_PYTHON)
    assert result.rc == 0, result.stderr


@pytest.mark.parametrize('node', _nodes('gpu'), indirect=True)
def test_gpu_node_sees_its_profile(node, request):
    devices = _profile_devices(request.node.callspec.params['node']['profile'])
    mount = node.run('findmnt -n -o OPTIONS %s' % PROFILE_PATH)
    assert mount.rc == 0 and 'ro' in mount.stdout.strip().split(','), 'profile not mounted read-only: %s' % mount.stdout
    assert _json(node, NVML_PROBE) == {'count': len(devices), 'names': [gpu['name'] for gpu in devices]}


@pytest.mark.parametrize('node', _nodes('nodriver'), indirect=True)
def test_nodriver_node_has_no_driver(node):
    assert _json(node, NVML_PROBE) == {'error': 'NVMLError_DriverNotLoaded'}
    assert not node.file('/proc/driver/nvidia').exists


@pytest.mark.parametrize('node', _nodes('base'), indirect=True)
def test_base_node_has_no_nvml(node):
    assert _json(node, NVML_PROBE) == {'error': 'NVMLError_LibraryNotFound'}


@pytest.mark.parametrize('node', _nodes(), indirect=True)
def test_fake_pci_bus(node, request):
    spec = request.node.callspec.params['node']
    if spec['variant'] == 'gpu':
        expected = _expected_pci(_profile_devices(spec['profile']), 'nvidia')
    elif spec['variant'] == 'nodriver':
        expected = _expected_pci(_profile_devices(NODRIVER_PROFILE)[:1], None)
    else:
        expected = {}
    bus = _json(node, PCI_PROBE, python='/usr/bin/python3')
    assert {bdf: attrs for bdf, attrs in bus.items() if attrs['vendor'] == '0x10de'} == expected


def _mig_minors():
    import importlib.util  # pylint: disable=import-outside-toplevel
    spec = importlib.util.spec_from_file_location('mig_minors', ROOT / 'sandbox' / 'fakenvml' / 'mig_minors.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MIG_MINORS = _mig_minors()
CAPS_PROBE = """
import json, os, stat
caps = {}
for name in sorted(os.listdir('/dev/nvidia-caps')) if os.path.isdir('/dev/nvidia-caps') else []:
    st = os.stat(os.path.join('/dev/nvidia-caps', name))
    caps[name] = [stat.S_ISCHR(st.st_mode), os.major(st.st_rdev), os.minor(st.st_rdev)]
print(json.dumps(caps))
"""


@pytest.mark.parametrize('node', _nodes('gpu'), indirect=True)
def test_gpu_node_has_the_mig_capability_files_of_its_profile(node, request):
    """fake-nvml-caps.service wrote the driver's mig-minors table where a real node has it,
    /proc/driver/nvidia-caps/mig-minors (on a tmpfs over /proc/driver), and the /dev/nvidia-caps nodes
    of the profile's MIG devices, as sandbox/fakenvml/mig_minors.py renders them."""
    name = request.node.callspec.params['node']['profile']
    with open(PROFILES_DIR / ('%s.json' % name), encoding='utf-8') as handle:
        profile = json.load(handle)
    assert node.service('fake-nvml-caps').is_enabled
    minors = node.file(MIG_MINORS.NODE_MIG_MINORS)
    assert minors.exists and minors.content_string == MIG_MINORS.render(profile)
    expected = {'nvidia-cap%d' % minor: [True, MIG_MINORS.DEFAULT_MAJOR, minor]
                for _cap, minor in MIG_MINORS.capabilities(profile)}
    assert _json(node, CAPS_PROBE, python='/usr/bin/python3') == expected
