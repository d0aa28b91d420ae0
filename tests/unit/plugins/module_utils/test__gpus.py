# SPDX-License-Identifier: GPL-3.0-or-later
"""_gpus: every vendor's GPUs in one gpu fact (NVML for NVIDIA, sysfs for AMD and Intel, the PCI bus for all) and
one driver verdict over them; on sysfs trees of the tests' own (the ``sysfs`` fixture, conftest.py)."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.cluster.plugins.module_utils import _gpus


class NoNvml(object):
    """pynvml on a host without NVIDIA's library: nvmlInit fails with LIBRARY_NOT_FOUND."""
    NVML_ERROR_LIBRARY_NOT_FOUND = 12
    NVML_ERROR_DRIVER_NOT_LOADED = 9
    NVML_ERROR_NO_PERMISSION = 4
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18

    class NVMLError(Exception):
        value = 12

    def nvmlInit(self):
        raise self.NVMLError("NVML Shared Library Not Found")

    def nvmlErrorString(self, code):
        return "NVML Shared Library Not Found"


def mixed_bus(sysfs):
    """An NVIDIA T4, an AMD MI210 on amdgpu with KFD, an Intel iGPU on i915, a BMC's VGA and an NVIDIA audio function."""
    sysfs.pci("0000:3b:00.0", "0x10de", "0x1eb8", pci_class="0x030200", driver="nvidia", subsystem=("0x10de", "0x12a2"))
    sysfs.pci("0000:3b:00.1", "0x10de", "0x10fa", pci_class="0x040300")
    sysfs.pci("0000:02:00.0", "0x1a03", "0x2000", pci_class="0x030000", driver="ast")
    sysfs.pci("0000:43:00.0", "0x1002", "0x740f", pci_class="0x038000", driver="amdgpu")
    sysfs.pci("0000:00:02.0", "0x8086", "0x4680", pci_class="0x030000", driver="i915", subsystem=("0x8086", "0x2212"))
    sysfs.drm("0000:43:00.0")
    sysfs.drm("0000:00:02.0")
    sysfs.module("amdgpu")
    sysfs.module("i915")
    sysfs.kfd_node(1, 4661, "gfx90a", simd_count=416, simd_per_cu=4, gfx_target_version=90010, drm_render_minor=128)


def test_pci_lists_every_vendors_gpus_with_the_vendor(sysfs):
    mixed_bus(sysfs)
    assert [(p["address"], p["vendor"], p["vendor_id"], p["class"], p["driver"]) for p in _gpus.pci_gpus(sysfs.root)] == [
        ("0000:00:02.0", "intel", "0x8086", "0x030000", "i915"),
        ("0000:3b:00.0", "nvidia", "0x10de", "0x030200", "nvidia"),
        ("0000:43:00.0", "amd", "0x1002", "0x038000", "amdgpu")]
    assert list(_gpus.pci_gpus(sysfs.root)[0]) == ["address", "vendor", "vendor_id", "device_id", "subsystem_id",
                                                   "class", "driver"]


def test_gather_keeps_nvidias_keys_nvidias_and_adds_the_vendors(sysfs):
    mixed_bus(sysfs)
    gpu = _gpus.gather(NoNvml(), sysfs.root, "/nonexistent/proc/modules")
    # NVIDIA's keys as before: present (the PCI bus has a T4), nothing from NVML
    assert (gpu["present"], gpu["count"], gpu["devices"], gpu["nvml"]["status"]) == (True, 0, [], "library_not_found")
    assert gpu["vendors"] == ["amd", "intel", "nvidia"]
    assert len(gpu["pci"]) == 3
    assert (gpu["amd"]["count"], gpu["amd"]["status"], gpu["amd"]["devices"][0]["gfx_target"]) == (1, "ok", "gfx90a")
    assert (gpu["intel"]["count"], gpu["intel"]["status"]) == (1, "ok")


def test_a_cpu_host(sysfs):
    gpu = _gpus.gather(NoNvml(), sysfs.root, "/nonexistent/proc/modules")
    assert (gpu["present"], gpu["vendors"], gpu["pci"]) == (False, [], [])
    assert (gpu["amd"]["count"], gpu["amd"]["status"], gpu["intel"]["status"]) == (0, "no_gpu", "no_gpu")
    assert _gpus.verdict(gpu) == {"status": "skipped", "problems": [], "summary": "no GPU"}
    failed = _gpus.verdict(gpu, require_gpu=True)
    assert failed["status"] == "failed"
    assert failed["problems"] == [
        "no GPU was found (PCI bus: no NVIDIA, AMD or Intel display or 3D controller; NVML: library_not_found); this host "
        "is required to have one (gpu_driver_require_gpu): check the hardware or remove the host from the GPU group"]


def test_each_vendor_judged_by_its_own_rules(sysfs):
    mixed_bus(sysfs)
    gpu = _gpus.gather(NoNvml(), sysfs.root, "/nonexistent/proc/modules")
    verdict = _gpus.verdict(gpu)
    # the T4 without NVIDIA's driver fails; AMD's and Intel's are fine and add no problem
    assert verdict["status"] == "failed"
    assert len(verdict["problems"]) == 1 and verdict["problems"][0].startswith("the NVIDIA driver is not installed")
    assert "(1 NVIDIA GPU(s) on the PCI bus)" in verdict["problems"][0]
    assert verdict["summary"] == "1 NVIDIA GPU(s) on the PCI bus; 1 x AMD Instinct MI210, amdgpu; 1 x Intel GPU 0x4680, i915"


def test_an_amd_host_passes_without_an_nvidia_driver(sysfs):
    sysfs.pci("0000:43:00.0", "0x1002", "0x740f", pci_class="0x038000", driver="amdgpu")
    sysfs.drm("0000:43:00.0")
    sysfs.module("amdgpu")
    sysfs.kfd_node(1, 4661, "gfx90a", drm_render_minor=128)
    gpu = _gpus.gather(NoNvml(), sysfs.root, "/nonexistent/proc/modules")
    assert gpu["present"] is False
    assert _gpus.verdict(gpu, require_gpu=True) == {"status": "ok", "problems": [], "summary": "1 x AMD Instinct MI210, amdgpu"}


def test_an_older_facts_verdict_is_nvidias_alone():
    old = {"present": False, "nvml": {"status": "library_not_found", "message": ""}, "count": 0, "devices": [], "pci": []}
    assert _gpus.verdict(old) == {"status": "skipped", "problems": [], "summary": "no NVIDIA GPU"}
    assert "no NVIDIA GPU was found" in _gpus.verdict(old, require_gpu=True)["problems"][0]


def test_without_nvidia_ml_py_the_pci_bus_still_says_which_host_has_an_nvidia_gpu(sysfs):
    """Issue 26: gpu_facts on a plain host (or on a fresh node, in check mode, before the collection's virtualenv
    exists) reads the PCI bus without pynvml, so a node without an NVIDIA GPU is known as such."""
    cpu_only = _gpus.gather(None, sysfs.root, "/nonexistent/proc/modules")
    assert (cpu_only["present"], cpu_only["nvml"]["status"]) == (False, "bindings_missing")
    assert _gpus.verdict(cpu_only)["status"] == "skipped"
    mixed_bus(sysfs)
    gpu = _gpus.gather(None, sysfs.root, "/nonexistent/proc/modules")
    assert (gpu["present"], gpu["count"], gpu["nvml"]["status"]) == (True, 0, "bindings_missing")
    assert gpu["vendors"] == ["amd", "intel", "nvidia"] and gpu["amd"]["count"] == 1
    [problem] = [p for p in _gpus.verdict(gpu)["problems"] if "nvidia-ml-py" in p]
    assert "gpu_driver_python_manage" in problem and "1 NVIDIA GPU(s) on the PCI bus" in problem
