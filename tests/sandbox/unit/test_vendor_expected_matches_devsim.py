# SPDX-License-Identifier: GPL-3.0-or-later
"""Two readings of the AMD and Intel plugins' rules must agree: what amd_device_plugin_deploy and
intel_device_plugin_deploy wait for (from the gpu fact the collection reads from a node's sysfs) and what the
sandbox's simulator advertises (from the node's profile, for the pod the module renders). The sysfs is the one
fake_pci.py writes for the shipped vendor profiles, read back by the collection's own readers, as on the nodes."""

import json
import os
import shutil

import pytest
import yaml

from ansible_collections.kubegpu.cluster.plugins.module_utils import _gpus
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import OptionError
from ansible_collections.kubegpu.cluster.plugins.module_utils._amd import deployment as amd_deployment, manifests as amd_manifests
from ansible_collections.kubegpu.cluster.plugins.module_utils._intel import deployment as intel_deployment
from ansible_collections.kubegpu.cluster.plugins.module_utils._intel import manifests as intel_manifests
from sandbox.images import fake_pci
from sandbox.k8s.devsim import vendors

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
PROFILES = os.path.join(ROOT, "sandbox", "profiles")


class _NoNvml(object):
    NVML_ERROR_LIBRARY_NOT_FOUND = 12

    class NVMLError(Exception):
        value = 12

    def nvmlInit(self):
        raise self.NVMLError("NVML Shared Library Not Found")

    def nvmlErrorString(self, _code):
        return "NVML Shared Library Not Found"


def _profile(name, **changes):
    with open(os.path.join(PROFILES, name + ".json"), encoding="utf-8") as handle:
        profile = json.load(handle)
    profile.update(changes)
    return profile


def _fact(tmp_path, profile):
    """The gpu fact of a node with ``profile``: its fake sysfs (fake_pci.py) read by the collection's readers."""
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(profile))
    fleet = tmp_path / "fleet.yml"
    fleet.write_text(yaml.safe_dump({"nodes": [{"name": "n", "variant": profile["vendor"], "profile": str(path)}]}))
    fake_pci.generate(str(fleet), PROFILES, str(tmp_path / "out"))
    root = tmp_path / "sys"
    for source, target in (("devices", "bus/pci/devices"), ("drivers", "bus/pci/drivers"), ("class", "class"),
                           ("module", "module")):
        shutil.copytree(str(tmp_path / "out" / "n" / source), str(root / target), symlinks=True)
    return _gpus.gather(_NoNvml(), str(root), str(tmp_path / "no-proc-modules"))


def _container(objects, name):
    return [o for o in objects if o["kind"] == "DaemonSet" and o["metadata"]["name"] == name][0][
        "spec"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize("strategy", ["single", "mixed"])
def test_amd(tmp_path, strategy):
    profile = _profile("mi210x2")
    params = {"resource_naming_strategy": strategy}
    expected = amd_deployment.expected("mi", _fact(tmp_path, profile), params)
    container = _container(amd_manifests.render(params), "amdgpu-device-plugin-daemonset")
    assert expected == vendors.rocm_resources(profile, vendors.arguments(container)) == {"amd.com/gpu": 2}


@pytest.mark.parametrize("name, shared, monitoring", [("intel-flex170", 1, False), ("intel-flex170", 3, True),
                                                      ("intel-xe", 2, False)])
def test_intel(tmp_path, name, shared, monitoring):
    profile = _profile(name)
    params = {"shared_dev_num": shared, "enable_monitoring": monitoring}
    expected = intel_deployment.expected("flex", _fact(tmp_path, profile), params)
    container = _container(intel_manifests.render(params), "intel-gpu-plugin")
    assert expected == vendors.intel_resources(profile, vendors.arguments(container, entrypoint=True))
    assert expected["gpu.intel.com/%s" % profile["kernel_driver"]] == shared


@pytest.mark.parametrize("name, deployment", [("mi210x2", amd_deployment), ("intel-flex170", intel_deployment)])
def test_without_a_driver_the_module_refuses_and_the_simulator_advertises_nothing(tmp_path, name, deployment):
    profile = _profile(name, kernel_driver=None)
    with pytest.raises(OptionError, match="host n: (the amdgpu driver is not loaded|neither i915 nor xe is loaded)"):
        deployment.expected("n", _fact(tmp_path, profile), {})
    assert vendors.rocm_resources(profile, []) == {} and vendors.intel_resources(profile, []) == {}
