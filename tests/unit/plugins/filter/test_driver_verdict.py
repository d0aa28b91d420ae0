# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.kubegpu.cluster.plugins.filter.driver_verdict import driver_verdict

PCI_V100 = {"address": "0000:3b:00.0", "device_id": "0x1db4", "subsystem_id": "0x121410de", "class": "0x030200", "driver": "nvidia"}


def facts(status="ok", driver="510.47.03", devices=1, pci=1, nouveau=False, message=""):
    return {
        "present": bool(devices or pci),
        "nvml": {"status": status, "message": message},
        "driver_version": driver if status == "ok" else None,
        "count": devices if status == "ok" else 0,
        "devices": [{"index": i, "name": "Tesla V100-PCIE-16GB", "healthy": True, "errors": {}} for i in range(devices if status == "ok" else 0)],
        "pci": [PCI_V100] * pci,
        "kernel_modules": {"nvidia": status == "ok", "nouveau": nouveau},
    }


def test_healthy_host_is_ok():
    verdict = driver_verdict(facts(devices=4, pci=4), min_version="470")
    assert verdict == {"status": "ok", "problems": [], "summary": "4 x Tesla V100-PCIE-16GB, driver 510.47.03"}


def test_old_driver_is_compared_as_a_version():
    verdict = driver_verdict(facts(driver="450.102.04"), min_version="470")
    assert verdict["status"] == "failed"
    assert verdict["problems"] == [
        "NVIDIA driver 450.102.04 is older than the required 470 (gpu_driver_min_version); install driver 470 or newer"]
    # "1000.1" < "418" as strings, but not as versions
    assert driver_verdict(facts(driver="1000.1"), min_version="418.81.07")["status"] == "ok"


def test_host_without_gpu_is_skipped_unless_required():
    none = facts(status="library_not_found", devices=0, pci=0)
    assert driver_verdict(none)["status"] == "skipped"
    required = driver_verdict(none, require_gpu=True)
    assert required["status"] == "failed"
    assert "no NVIDIA GPU was found" in required["problems"][0]


@pytest.mark.parametrize("status, words", [
    ("library_not_found", "the NVIDIA driver is not installed"),
    ("driver_not_loaded", "kernel module is not loaded"),
    ("no_permission", "become: true"),
    ("version_mismatch", "reboot the node (drained first)"),
])
def test_gpu_on_the_bus_without_a_working_driver(status, words):
    verdict = driver_verdict(facts(status=status, devices=0, pci=2))
    assert verdict["status"] == "failed"
    assert words in verdict["problems"][0]
    assert "2 NVIDIA GPU(s) on the PCI bus" in verdict["problems"][0]


def test_other_nvml_errors_carry_nvml_message():
    verdict = driver_verdict(facts(status="error", devices=0, pci=1, message="NVML failed to initialise: Unknown Error"))
    assert "Unknown Error" in verdict["problems"][0]


def test_nouveau_is_a_problem_unless_disabled():
    assert "nouveau" in driver_verdict(facts(nouveau=True))["problems"][0]
    assert driver_verdict(facts(nouveau=True), check_nouveau=False)["status"] == "ok"


def test_lost_gpu_and_missing_gpu_are_reported():
    gpu = facts(devices=2, pci=3)
    gpu["devices"][1] = {"index": 1, "healthy": False, "errors": {"handle": "GPU is lost"}}
    problems = driver_verdict(gpu)["problems"]
    assert len(problems) == 2
    assert "PCI bus shows 3 NVIDIA GPU(s) but NVML sees 2" in problems[0]
    assert "GPU 1 does not answer NVML (handle: GPU is lost)" in problems[1]


def test_bad_min_version_names_the_variable():
    with pytest.raises(AnsibleFilterError, match="gpu_driver_min_version: 'latest' is not a version"):
        driver_verdict(facts(), min_version="latest")


def test_wrong_input_is_refused():
    with pytest.raises(AnsibleFilterError, match="expects the 'gpu' fact"):
        driver_verdict({"count": 1})


INTEL_IGPU = {"address": "0000:00:02.0", "vendor": "intel", "vendor_id": "0x8086", "device_id": "0x4680",
              "subsystem_id": "0x22128086", "class": "0x030000", "driver": "i915"}
INTEL_OK = {"count": 1, "status": "ok", "modules": {"i915": True, "xe": False},
            "driver": {"module": "i915", "loaded": True, "version": None},
            "devices": [{"address": "0000:00:02.0", "device_id": "0x4680", "name": None, "driver": "i915",
                         "card": "card0", "render": "renderD128", "memory_total_mib": None, "tiles": 1}]}
NO_AMD = {"count": 0, "status": "no_gpu", "devices": [],
          "driver": {"module": "amdgpu", "loaded": False, "version": None, "kfd": False}}


def test_other_vendors_gpus_on_the_bus_are_not_counted_as_nvidias():
    """gpu.pci lists every vendor's GPUs: a workstation's Intel iGPU beside its NVIDIA GPU is no 'GPU NVML cannot see'."""
    gpu = dict(facts(), pci=[dict(PCI_V100, vendor="nvidia", vendor_id="0x10de"), INTEL_IGPU], amd=NO_AMD, intel=INTEL_OK,
               vendors=["intel", "nvidia"])
    assert driver_verdict(gpu, min_version="470") == {
        "status": "ok", "problems": [], "summary": "1 x Tesla V100-PCIE-16GB, driver 510.47.03; 1 x Intel GPU 0x4680, i915"}


def test_an_intel_host_whose_driver_is_not_loaded_fails_with_what_to_do():
    intel = dict(INTEL_OK, status="driver_not_loaded", modules={"i915": False, "xe": False},
                 driver={"module": "i915", "loaded": False, "version": None},
                 devices=[dict(INTEL_OK["devices"][0], driver=None, card=None, render=None)])
    gpu = dict(facts(status="library_not_found", devices=0, pci=0), present=False, pci=[dict(INTEL_IGPU, driver=None)],
               amd=NO_AMD, intel=intel, vendors=["intel"])
    verdict = driver_verdict(gpu, require_gpu=True)
    assert verdict["status"] == "failed" and verdict["summary"] == "1 x Intel GPU 0x4680"
    assert verdict["problems"][0].startswith("1 Intel GPU(s) on the PCI bus (device id 0x4680) but neither the i915 nor "
                                             "the xe kernel module is loaded")
