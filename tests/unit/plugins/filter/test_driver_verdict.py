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
