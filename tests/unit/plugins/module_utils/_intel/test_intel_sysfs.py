# SPDX-License-Identifier: GPL-3.0-or-later
"""_intel.sysfs (Intel GPUs from what i915 and xe publish in sysfs) and _intel.driver (the verdict), on sysfs trees
of the tests' own (the ``sysfs`` fixture, tests/unit/plugins/module_utils/conftest.py)."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.cluster.plugins.module_utils import _gpus
from ansible_collections.kubegpu.cluster.plugins.module_utils._intel import driver, sysfs as intel

INTEL = ("0x8086", "0x4090")
MIB = 1024 * 1024


def fact(sysfs):
    return intel.gather(_gpus.pci_gpus(sysfs.root), sysfs.root, "/nonexistent/proc/modules")


def test_flex_170_on_i915_with_local_memory_and_an_integrated_gpu(sysfs):
    sysfs.pci("0000:00:02.0", "0x8086", "0x4680", pci_class="0x030000", driver="i915", subsystem=INTEL)  # iGPU
    sysfs.pci("0000:4d:00.0", "0x8086", "0x56c0", driver="i915", subsystem=INTEL)
    sysfs.drm("0000:00:02.0")
    card, _render = sysfs.drm("0000:4d:00.0")
    sysfs.write("class/drm/%s/lmem_total_bytes" % card, 16384 * MIB)
    sysfs.write("class/drm/%s/gt/gt0/id" % card, 0)
    sysfs.module("i915")
    got = fact(sysfs)
    assert (got["count"], got["status"], got["modules"]) == (2, "ok", {"i915": True, "xe": False})
    assert got["driver"] == {"module": "i915", "loaded": True, "version": None}
    assert got["devices"] == [
        {"address": "0000:00:02.0", "device_id": "0x4680", "subsystem_id": "0x40908086", "name": None, "driver": "i915",
         "memory_total_mib": None, "tiles": 1, "card": "card0", "render": "renderD128"},
        {"address": "0000:4d:00.0", "device_id": "0x56c0", "subsystem_id": "0x40908086",
         "name": "Intel Data Center GPU Flex 170", "driver": "i915", "memory_total_mib": 16384, "tiles": 1,
         "card": "card1", "render": "renderD129"}]
    assert driver.verdict(got) == {"status": "ok", "problems": [],
                                   "summary": "1 x Intel Data Center GPU Flex 170, 1 x Intel GPU 0x4680, i915"}


def test_two_tile_i915_memory_is_per_tile_times_tiles(sysfs):
    sysfs.pci("0000:29:00.0", "0x8086", "0x0bd5", driver="i915", subsystem=INTEL)
    card, _render = sysfs.drm("0000:29:00.0")
    sysfs.write("class/drm/%s/lmem_total_bytes" % card, 65536 * MIB)
    for tile in (0, 1):
        sysfs.write("class/drm/%s/gt/gt%d/id" % (card, tile), tile)
    sysfs.module("i915")
    device = fact(sysfs)["devices"][0]
    assert (device["name"], device["tiles"], device["memory_total_mib"]) == ("Intel Data Center GPU Max 1550", 2, 131072)


def test_arc_b580_on_xe_memory_from_its_tiles(sysfs):
    base = sysfs.pci("0000:03:00.0", "0x8086", "0xe20b", pci_class="0x030000", driver="xe", subsystem=INTEL)
    sysfs.write(base + "/tile0/physical_vram_size_bytes", 12288 * MIB)
    sysfs.drm("0000:03:00.0")
    sysfs.module("xe", version="1.1")
    got = fact(sysfs)
    assert (got["status"], got["driver"], got["modules"]) == (
        "ok", {"module": "xe", "loaded": True, "version": "1.1"}, {"i915": False, "xe": True})
    device = got["devices"][0]
    assert (device["name"], device["driver"], device["memory_total_mib"], device["tiles"]) == ("Intel Arc B580", "xe", 12288, 1)
    assert driver.summary(got) == "1 x Intel Arc B580, xe 1.1"


def test_npu_is_not_a_gpu(sysfs):
    sysfs.pci("0000:00:0b.0", "0x8086", "0x7d1d", pci_class="0x120000", driver="intel_vpu", subsystem=INTEL)
    got = fact(sysfs)
    assert (got["count"], got["status"]) == (0, "no_gpu")
    assert driver.verdict(got)["status"] == "skipped"


def test_no_driver_loaded_says_how_to_load_one_and_that_we_do_not_install_it(sysfs):
    sysfs.pci("0000:4d:00.0", "0x8086", "0x56c0", subsystem=INTEL)
    got = fact(sysfs)
    assert (got["status"], got["driver"]["module"], got["driver"]["loaded"]) == ("driver_not_loaded", "i915", False)
    (problem,) = driver.verdict(got)["problems"]
    assert problem.startswith("1 Intel GPU(s) on the PCI bus (device id 0x56c0) but neither the i915 nor the xe kernel "
                              "module is loaded")
    assert "'modprobe i915'" in problem and "xe.force_probe" in problem
    assert "this collection does not install Intel drivers" in problem and "intel-i915-dkms" in problem


def test_loaded_driver_that_does_not_probe_the_device(sysfs):
    sysfs.pci("0000:03:00.0", "0x8086", "0xe20b", pci_class="0x030000", subsystem=INTEL)
    sysfs.module("i915")
    got = fact(sysfs)
    assert got["status"] == "driver_not_bound"
    (problem,) = driver.problems(got)
    assert problem.startswith("Intel GPU 0000:03:00.0 (Intel Arc B580) is bound to no driver, not i915 or xe")
    assert "xe.force_probe=e20b" in problem
