# SPDX-License-Identifier: GPL-3.0-or-later
"""The AMD and Intel profiles and the fake sysfs fake_pci.py writes for them (sandbox/images), read back by the
collection's own readers (plugins/module_utils/_gpus.py) without any container: what the amd and intel nodes show,
and a profile with no driver loaded. The nodes themselves: tests/sandbox/test_amd_intel_nodes.py."""

import copy
import json
import os
import shutil

import pytest
import yaml

from ansible_collections.kubegpu.cluster.plugins.module_utils import _gpus
from sandbox.images import fake_pci, vendor_profiles

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
PROFILES = os.path.join(ROOT, "sandbox", "profiles")
VENDOR_PROFILES = sorted(name[:-5] for name in os.listdir(PROFILES)
                         if name.endswith(".json") and vendor_profiles.vendor_of_file(os.path.join(PROFILES, name)) != "nvidia")


class NoNvml(object):
    NVML_ERROR_LIBRARY_NOT_FOUND = 12

    class NVMLError(Exception):
        value = 12

    def nvmlInit(self):
        raise self.NVMLError("NVML Shared Library Not Found")

    def nvmlErrorString(self, _code):
        return "NVML Shared Library Not Found"


def load(name):
    with open(os.path.join(PROFILES, name + ".json"), encoding="utf-8") as handle:
        return json.load(handle)


def read_back(tmp_path, profile):
    """Write the node tree of ``profile`` (a dict) as fake_pci.py does, lay it out as the node sees it (/sys/bus/pci/
    devices and drivers, /sys/class, /sys/module) and return the gpu fact the collection reads from it."""
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(profile))
    fleet = tmp_path / "fleet.yml"
    fleet.write_text(yaml.safe_dump({"nodes": [{"name": "n", "variant": profile["vendor"], "profile": str(path)}]}))
    fake_pci.generate(str(fleet), PROFILES, str(tmp_path / "out"))
    root = tmp_path / "sys"
    for source, target in (("devices", "bus/pci/devices"), ("drivers", "bus/pci/drivers"), ("class", "class"),
                           ("module", "module")):
        shutil.copytree(str(tmp_path / "out" / "n" / source), str(root / target), symlinks=True)
    return _gpus.gather(NoNvml(), str(root), str(tmp_path / "no-proc-modules"))


def test_the_planned_vendor_profiles_are_shipped():
    assert VENDOR_PROFILES == ["intel-flex170", "intel-xe", "mi210x2"]


@pytest.mark.parametrize("name", VENDOR_PROFILES)
def test_each_vendor_profile_reads_back_as_written(tmp_path, name):
    profile = load(name)
    vendor_profiles.validate(profile)
    gpu = read_back(tmp_path, profile)
    vendor = profile["vendor"]
    fact = gpu[vendor]
    assert gpu["vendors"] == [vendor] and gpu["present"] is False
    assert (fact["count"], fact["status"]) == (len(profile["devices"]), "ok")
    assert fact["driver"]["module"] == profile["kernel_driver"] and fact["driver"]["loaded"] is True
    assert fact["driver"]["version"] == profile.get("driver_version")
    for index, (got, want) in enumerate(zip(fact["devices"], profile["devices"])):
        assert got["address"] == fake_pci.sysfs_bdf(want["pci_bus_id"])
        assert got["device_id"] == "0x%04x" % (int(want["pci_device_id"], 16) >> 16)
        assert (got["name"], got["memory_total_mib"], got["driver"]) == (want["name"], want["memory_total_mib"],
                                                                         profile["kernel_driver"])
        assert (got["card"], got["render"]) == ("card%d" % index, "renderD%d" % (128 + index))
        if vendor == "amd":
            assert (got["kfd_node"], got["gfx_target_version"], got["simd_count"], got["cu_count"]) == (
                index + 1, want["gfx_target_version"], want["simd_count"], want["cu_count"])
        else:
            assert got["tiles"] == want.get("tiles", 1)


@pytest.mark.parametrize("name, status", [("mi210x2", "driver_not_loaded"), ("intel-flex170", "driver_not_loaded")])
def test_a_profile_without_a_driver_shows_the_gpus_and_nothing_else(tmp_path, name, status):
    profile = dict(load(name), kernel_driver=None)
    gpu = read_back(tmp_path, profile)
    fact = gpu[profile["vendor"]]
    assert (fact["count"], fact["status"]) == (len(profile["devices"]), status)
    assert [(d["driver"], d["card"]) for d in fact["devices"]] == [(None, None)] * len(profile["devices"])
    assert _gpus.verdict(gpu)["status"] == "failed"


@pytest.mark.parametrize("change, words", [
    (lambda p: p.update(vendor="matrox"), "vendor: 'matrox' is not one of amd, intel"),
    (lambda p: p.update(kernel_driver="i915"), "kernel_driver: must be one of amdgpu"),
    (lambda p: p.update(cuda_driver_version=12020), "cuda_driver_version: unknown key"),
    (lambda p: p["devices"][0].update(pci_device_id="0x1DB410DE"), "is not an amd device (vendor 0x1002)"),
    (lambda p: p["devices"][0].update(uuid="GPU-x"), "devices[0].uuid: unknown key for an amd device"),
    (lambda p: p["devices"][1].update(pci_bus_id="0000:43:00.0"), "devices[1].pci_bus_id: 0000:43:00.0 twice"),
    (lambda p: p["devices"][0].update(memory_total_mib="64G"), "devices[0].memory_total_mib: not a non-negative"),
    (lambda p: p["devices"][0].update(pci_class="0x040300"), "devices[0].pci_class: not a display"),
])
def test_a_bad_vendor_profile_names_the_field(change, words):
    profile = copy.deepcopy(load("mi210x2"))
    change(profile)
    with pytest.raises(vendor_profiles.VendorProfileError) as caught:
        vendor_profiles.validate(profile)
    assert words in str(caught.value)


def test_fake_pci_refuses_a_variant_whose_profile_is_of_another_vendor(tmp_path):
    fleet = tmp_path / "fleet.yml"
    fleet.write_text(yaml.safe_dump({"nodes": [{"name": "n", "variant": "intel", "profile": "mi210x2"}]}))
    with pytest.raises(fake_pci.FakePciError, match="variant intel but its profile mi210x2 is of vendor amd"):
        fake_pci.generate(str(fleet), PROFILES, str(tmp_path / "out"))
