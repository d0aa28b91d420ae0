# SPDX-License-Identifier: GPL-3.0-or-later
"""_amd.sysfs (AMD GPUs from what amdgpu publishes in sysfs) and _amd.driver (the verdict), on sysfs trees of the
tests' own (the ``sysfs`` fixture, tests/unit/plugins/module_utils/conftest.py)."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import shutil

import pytest

from ansible_collections.kubegpu.cluster.plugins.module_utils import _gpus
from ansible_collections.kubegpu.cluster.plugins.module_utils._amd import driver, sysfs as amd

MI210 = ("0x1002", "0x740f")
GIB = 1024 * 1024 * 1024


def mi210(sysfs, address, node, render_minor, bound="amdgpu"):
    """One MI210 at ``address`` with its DRM nodes, VRAM and KFD node, as amdgpu shows it."""
    base = sysfs.pci(address, *MI210, driver=bound)
    sysfs.write(base + "/mem_info_vram_total", 68702699520)  # 65520 MiB, what an MI210 reports
    bus, devfn = address.split(":")[1], address.split(":")[2]
    location = (int(bus, 16) << 8) | (int(devfn.split(".")[0], 16) << 3) | int(devfn.split(".")[1])
    sysfs.kfd_node(node, 4660 + node, "gfx90a", simd_count=416, simd_per_cu=4, gfx_target_version=90010,
                   drm_render_minor=render_minor, location_id=location, domain=0, num_xcc=1, vendor_id=4098)
    return base


@pytest.fixture
def host(sysfs):
    """Two MI210s on amdgpu 6.8.5 with KFD, node 0 the CPU (as KFD lists it)."""
    sysfs.kfd_node(0, 0, "", cpu_cores_count=64, simd_count=0)
    mi210(sysfs, "0000:43:00.0", 1, 128)
    mi210(sysfs, "0000:c3:00.0", 2, 129)
    sysfs.drm("0000:43:00.0")
    sysfs.drm("0000:c3:00.0")
    sysfs.module("amdgpu", version="6.8.5")
    return sysfs


def fact(sysfs):
    return amd.gather(_gpus.pci_gpus(sysfs.root), sysfs.root, "/nonexistent/proc/modules")


def test_two_mi210s_with_their_drm_nodes_vram_and_kfd_nodes(host):
    got = fact(host)
    assert (got["count"], got["status"]) == (2, "ok")
    assert got["driver"] == {"module": "amdgpu", "loaded": True, "version": "6.8.5", "kfd": True}
    assert got["devices"][0] == {
        "address": "0000:43:00.0", "device_id": "0x740f", "subsystem_id": "0x0c341002", "name": "AMD Instinct MI210",
        "driver": "amdgpu", "memory_total_mib": 65520, "card": "card0", "render": "renderD128", "kfd_node": 1,
        "gpu_id": 4661, "gfx_target_version": 90010, "gfx_target": "gfx90a", "simd_count": 416, "cu_count": 104,
        "num_xcc": 1}
    assert [(d["address"], d["card"], d["render"], d["kfd_node"]) for d in got["devices"]] == [
        ("0000:43:00.0", "card0", "renderD128", 1), ("0000:c3:00.0", "card1", "renderD129", 2)]
    assert driver.verdict(got) == {"status": "ok", "problems": [], "summary": "2 x AMD Instinct MI210, amdgpu 6.8.5"}


def test_kfd_node_found_by_pci_address_when_render_minors_do_not_match(host):
    host.write("class/kfd/kfd/topology/nodes/1/properties", "simd_count 416\nsimd_per_cu 4\nlocation_id 49920\ndomain 0")
    host.write("class/kfd/kfd/topology/nodes/2/properties", "simd_count 208\nsimd_per_cu 4\nlocation_id 17152\ndomain 0")
    got = fact(host)["devices"]
    # 0xc300 is 0000:c3:00.0, 0x4300 is 0000:43:00.0
    assert [(d["kfd_node"], d["cu_count"]) for d in got] == [(2, 52), (1, 104)]


@pytest.mark.parametrize("version, target", [(90010, "gfx90a"), (90008, "gfx908"), (90402, "gfx942"),
                                             (110000, "gfx1100"), (0, None), (None, None)])
def test_gfx_target_from_kfd_version(version, target):
    assert amd.gfx_target(version) == target


def test_unknown_device_id_has_no_name_and_no_vram_file_no_memory(sysfs):
    sysfs.pci("0000:03:00.0", "0x1002", "0x1234", pci_class="0x030000", driver="amdgpu")
    sysfs.module("amdgpu")
    sysfs.write("class/kfd/kfd/topology/nodes/0/gpu_id", 0)
    got = fact(sysfs)
    device = got["devices"][0]
    assert (device["name"], device["memory_total_mib"], device["card"], device["kfd_node"]) == (None, None, None, None)
    assert got["driver"]["version"] is None
    assert driver.summary(got) == "1 x AMD GPU 0x1234, amdgpu"


def test_no_amd_gpu(sysfs):
    sysfs.pci("0000:3b:00.0", "0x10de", "0x1db4", pci_class="0x030200", driver="nvidia")
    got = fact(sysfs)
    assert (got["count"], got["devices"], got["status"]) == (0, [], "no_gpu")
    assert driver.verdict(got) == {"status": "skipped", "problems": [], "summary": "no AMD GPU"}


def test_other_amd_functions_are_not_gpus(sysfs):
    sysfs.pci("0000:43:00.1", "0x1002", "0xab28", pci_class="0x040300")  # the GPU's HDMI audio
    sysfs.pci("0000:44:00.0", "0x1002", "0x74a1", pci_class="0x120000", driver="amdgpu")  # MI300X: an accelerator
    assert [d["name"] for d in fact(sysfs)["devices"]] == ["AMD Instinct MI300X"]


def test_driver_not_loaded_says_how_to_load_it_and_that_we_do_not_install_it(sysfs):
    sysfs.pci("0000:43:00.0", *MI210)
    sysfs.pci("0000:c3:00.0", *MI210)
    got = fact(sysfs)
    assert got["status"] == "driver_not_loaded"
    assert got["driver"] == {"module": "amdgpu", "loaded": False, "version": None, "kfd": False}
    verdict = driver.verdict(got)
    assert verdict["status"] == "failed" and len(verdict["problems"]) == 1
    problem = verdict["problems"][0]
    assert problem.startswith("2 AMD GPU(s) on the PCI bus but the amdgpu kernel module is not loaded")
    assert "'modprobe amdgpu'" in problem and "linux-firmware" in problem
    assert "this collection does not install AMD drivers" in problem and "amdgpu-dkms" in problem


def test_gpu_held_by_vfio_is_not_bound(host):
    host.write("module/vfio_pci/initstate", "live")
    mi210(host, "0000:e3:00.0", 3, 130, bound="vfio-pci")
    got = fact(host)
    assert got["status"] == "driver_not_bound"
    assert driver.problems(got) == [
        "AMD GPU 0000:e3:00.0 (AMD Instinct MI210) is bound to vfio-pci, not amdgpu, so the ROCm device plugin does not "
        "see it; release it (e.g. 'driverctl unset-override 0000:e3:00.0', or drop it from vfio-pci's ids= option) and "
        "reload amdgpu"]


def test_no_kfd(host):
    shutil.rmtree(host.root + "/class/kfd")
    got = fact(host)
    assert (got["status"], got["driver"]["kfd"]) == ("no_kfd", False)
    assert [d["kfd_node"] for d in got["devices"]] == [None, None]
    (problem,) = driver.problems(got)
    assert "/sys/class/kfd is missing" in problem and "CONFIG_HSA_AMD" in problem


def test_module_loaded_per_proc_modules_counts_too(sysfs, tmp_path):
    sysfs.pci("0000:43:00.0", *MI210, driver="amdgpu")
    modules = tmp_path / "modules"
    modules.write_text("amdgpu 15147008 0 - Live 0x0000000000000000\n")
    got = amd.gather(_gpus.pci_gpus(sysfs.root), sysfs.root, str(modules))
    assert got["driver"]["loaded"] is True and got["status"] == "no_kfd"


def test_unknown_module_state_is_judged_by_the_binding(sysfs):
    sysfs.pci("0000:43:00.0", *MI210, driver="amdgpu")
    shutil.rmtree(sysfs.root + "/module")
    got = fact(sysfs)
    assert got["driver"]["loaded"] is None and got["status"] == "no_kfd"
    sysfs.pci("0000:44:00.0", *MI210)
    assert fact(sysfs)["status"] == "driver_not_loaded"
