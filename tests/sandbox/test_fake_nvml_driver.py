# SPDX-License-Identifier: GPL-3.0-or-later
"""The fake NVML's installed driver and loaded kernel module (sandbox/fakenvml/driver.c), through the real pynvml.

The stand-in driver packages (sandbox/aptrepo) install /usr/lib/fake-nvml/driver-version; the "kernel module" is
/run/fake-nvml/module-version, loaded (written) by the first init that finds none, as nvidia-modprobe loads the real
one on first use. A package upgrade without a reboot leaves the old module loaded: NVML_ERROR_LIB_RM_VERSION_MISMATCH
until the module file goes (a reboot empties /run)."""

import json
import os
from pathlib import Path

import pytest

from sandbox.k8s.paths import PROFILES_DIR

from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.driver import verdict as driver_verdict

T4 = PROFILES_DIR / 't4.json'  # driver 450.102.04, CUDA 11.0

READ = r"""
import json, pynvml
try:
    pynvml.nvmlInit()
except pynvml.NVMLError as exc:
    print(json.dumps({'error': exc.value, 'text': pynvml.nvmlErrorString(exc.value)}))
else:
    print(json.dumps({'driver': pynvml.nvmlSystemGetDriverVersion(), 'nvml': pynvml.nvmlSystemGetNVMLVersion(),
                      'cuda': pynvml.nvmlSystemGetCudaDriverVersion(), 'count': pynvml.nvmlDeviceGetCount()}))
    pynvml.nvmlShutdown()
"""


GPU_FACTS = r"""
import json, sys, pynvml
sys.path.insert(0, %r)
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.nvml import gather_gpu_facts
print(json.dumps(gather_gpu_facts(pynvml, pci_devices_path='/nonexistent', proc_modules='/nonexistent')))
"""


@pytest.fixture
def files(tmp_path, monkeypatch):
    """The driver file and the module file in tmp_path, named to the library through its variables."""
    driver, module = tmp_path / 'usr-lib' / 'driver-version', tmp_path / 'run' / 'fake-nvml' / 'module-version'
    driver.parent.mkdir()
    (tmp_path / 'run').mkdir()
    monkeypatch.setenv('FAKE_NVML_DRIVER_FILE', str(driver))
    monkeypatch.setenv('FAKE_NVML_MODULE_FILE', str(module))
    return driver, module


def _read(nvml):
    proc = nvml.run(T4, READ)
    assert proc.stderr == '', proc.stderr
    return json.loads(proc.stdout)


def test_without_a_driver_package_the_profile_answers_and_nothing_is_written(nvml, files):
    driver, module = files
    assert _read(nvml) == {'driver': '450.102.04', 'nvml': '11.450.102.04', 'cuda': 11000, 'count': 1}
    assert not module.exists() and not module.parent.exists()


def test_an_installed_driver_is_loaded_on_first_use_and_reported(nvml, files):
    driver, module = files
    driver.write_text('570.124.06\n', encoding='ascii')
    assert _read(nvml) == {'driver': '570.124.06', 'nvml': '11.570.124.06', 'cuda': 11000, 'count': 1}
    assert module.read_text(encoding='ascii') == '570.124.06\n'
    assert oct(module.stat().st_mode & 0o777) == '0o644'
    assert sorted(os.listdir(module.parent)) == ['module-version']  # no temporary file left behind
    assert _read(nvml)['driver'] == '570.124.06'


def test_an_upgrade_without_a_reboot_is_a_version_mismatch_until_the_module_goes(nvml, files):
    driver, module = files
    driver.write_text('570.124.06\n', encoding='ascii')
    assert _read(nvml)['driver'] == '570.124.06'
    driver.write_text('570.172.08\n', encoding='ascii')  # the package upgrade
    assert _read(nvml) == {'error': 18, 'text': 'RM has detected an NVML/RM version mismatch.'}
    assert module.read_text(encoding='ascii') == '570.124.06\n'  # the old module stays loaded
    # what gpu_facts makes of it, and the driver check's advice
    collections = str(Path(__file__).resolve().parents[2] / '.build' / 'collections')
    facts = json.loads(nvml.run(T4, GPU_FACTS % collections).stdout)
    assert facts['nvml']['status'] == 'version_mismatch', facts['nvml']
    on_the_bus = dict(facts, present=True, pci=[{'address': '0000:00:1e.0'}])  # the worker reads no PCI bus
    assert 'reboot the node' in driver_verdict(on_the_bus)['problems'][0]
    module.unlink()  # the reboot
    assert _read(nvml)['driver'] == '570.172.08'
    assert module.read_text(encoding='ascii') == '570.172.08\n'


def test_a_module_that_cannot_be_loaded_is_driver_not_loaded(nvml, files, monkeypatch):
    driver, _module = files
    driver.write_text('570.124.06\n', encoding='ascii')
    # a place nobody can write, root included (proc refuses new directories)
    monkeypatch.setenv('FAKE_NVML_MODULE_FILE', '/proc/kubegpu-fake-nvml/module-version')
    assert _read(nvml)['error'] == 9  # NVML_ERROR_DRIVER_NOT_LOADED


@pytest.mark.parametrize('text', ['', 'junk\n', '570.124.06-1\n'])
def test_a_driver_file_that_is_not_a_version_is_named(nvml, files, text):
    driver, module = files
    driver.write_text(text, encoding='ascii')
    proc = nvml.run(T4, READ)
    assert json.loads(proc.stdout)['error'] == 999
    detail = nvml.run(T4, r"""
import pynvml
try:
    pynvml.nvmlInit()
except pynvml.NVMLError as exc:
    print(pynvml.nvmlErrorString(exc.value))
""").stdout.strip()
    assert detail == 'fake NVML: %s: not a driver version (one line of digits and dots)' % driver
    assert not module.exists()
