# SPDX-License-Identifier: GPL-3.0-or-later
"""The AMD and Intel rules of the device-manager simulator (sandbox/k8s/devsim/vendors.py): what the ROCm plugin and
Intel's GPU plugin advertise and what the ROCm node labeller writes, for a profile and the container's arguments; and
that they agree with what the modules expect from facts of the same GPUs."""

import pytest

from sandbox.k8s.devsim import vendors
from ansible_collections.kubegpu.cluster.plugins.module_utils._amd import allocatable as amd_allocatable
from ansible_collections.kubegpu.cluster.plugins.module_utils._amd import manifests as amd_manifests
from ansible_collections.kubegpu.cluster.plugins.module_utils._intel import allocatable as intel_allocatable
from ansible_collections.kubegpu.cluster.plugins.module_utils._intel import manifests as intel_manifests

MI210 = {"name": "AMD Instinct MI210", "pci_device_id": "0x740F1002", "memory_total_mib": 65520, "cu_count": 104,
         "simd_count": 416, "family": "AI", "gfx_target_version": "gfx90a"}


def amd_profile(count=2, **extra):
    profile = {"vendor": "amd", "kernel_driver": "amdgpu", "driver_version": "6.8.5",
               "devices": [dict(MI210, pci_bus_id="0000:%02x:00.0" % (0x43 + i)) for i in range(count)]}
    profile.update(extra)
    return profile


def intel_profile(driver="i915", count=1):
    return {"vendor": "intel", "kernel_driver": driver,
            "devices": [{"name": "Intel Data Center GPU Flex 170", "pci_device_id": "0x56C08086"}] * count}


def test_which_pods_are_whose():
    rocm = {"spec": {"containers": [{"image": "docker.io/rocm/k8s-device-plugin:1.31.0.10",
                                     "command": ["./k8s-device-plugin"], "args": ["-resource_naming_strategy=mixed"]}]}}
    labeller = {"spec": {"containers": [{"image": "docker.io/rocm/k8s-device-plugin:labeller-1.31.0.10",
                                         "command": ["./k8s-node-labeller"], "args": ["-vram"]}]}}
    intel = {"spec": {"containers": [{"image": "intel/intel-gpu-plugin:0.34.0"}]}}
    nvidia = {"spec": {"containers": [{"image": "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"}]}}
    assert vendors.role(rocm)[0] == "rocm" and vendors.arguments(rocm["spec"]["containers"][0]) == ["-resource_naming_strategy=mixed"]
    assert vendors.role(labeller)[0] == "labeller"
    assert vendors.role(intel)[0] == "intel"
    assert vendors.role(nvidia) == (None, None)


def test_rocm_single_and_mixed():
    assert vendors.rocm_resources(amd_profile(), []) == {"amd.com/gpu": 2}
    assert vendors.rocm_resources(amd_profile(), ["-resource_naming_strategy=mixed"]) == {"amd.com/gpu": 2}
    parted = amd_profile()
    for device in parted["devices"]:
        device.update(compute_partition="CPX", memory_partition="NPS4")
    assert vendors.rocm_resources(parted, ["-resource_naming_strategy", "mixed"]) == {"amd.com/cpx_nps4": 2}
    parted["devices"][0].update(compute_partition="SPX", memory_partition="NPS1")
    assert vendors.rocm_resources(parted, ["-resource_naming_strategy=mixed"]) == {"amd.com/cpx_nps4": 1, "amd.com/spx_nps1": 1}
    with pytest.raises(vendors.PluginExit, match="not supported with single"):
        vendors.rocm_resources(parted, [])
    with pytest.raises(vendors.PluginExit, match="invalid resource naming strategy: both"):
        vendors.rocm_resources(amd_profile(), ["-resource_naming_strategy=both"])


def test_rocm_needs_amdgpu_and_kfd_and_an_amd_profile():
    assert vendors.rocm_resources(amd_profile(kfd=False), []) == {}
    assert vendors.rocm_resources(amd_profile(kernel_driver="vfio-pci"), []) == {}
    assert vendors.rocm_resources(intel_profile(), []) == {}
    assert vendors.rocm_resources({"devices": [{"name": "Tesla T4"}]}, []) == {}  # an NVIDIA profile
    assert vendors.rocm_resources(None, []) == {}


def test_intel_driver_shared_dev_num_and_monitoring():
    assert vendors.intel_resources(intel_profile(), []) == {"gpu.intel.com/i915": 1}
    assert vendors.intel_resources(intel_profile("xe", 2), ["-shared-dev-num", "3"]) == {"gpu.intel.com/xe": 6}
    assert vendors.intel_resources(intel_profile(), ["-shared-dev-num=2", "-enable-monitoring"]) == {
        "gpu.intel.com/i915": 2, "gpu.intel.com/i915_monitoring": 1}
    with pytest.raises(vendors.PluginExit, match="greater than zero"):
        vendors.intel_resources(intel_profile(), ["-shared-dev-num=0"])
    with pytest.raises(vendors.PluginExit, match="preferredAllocationPolicy"):
        vendors.intel_resources(intel_profile(), ["-allocation-policy=spread"])
    assert vendors.intel_resources(amd_profile(), []) == {}


def test_labeller_labels_follow_create_labels():
    labels = vendors.labeller_labels(amd_profile(), ["-vram", "-cu-count", "-simd-count", "-device-id", "-family"])
    assert labels == {
        "beta.amd.com/gpu.vram.64G": "2", "beta.amd.com/gpu.vram": "64G", "amd.com/gpu.vram": "64G",
        "beta.amd.com/gpu.cu-count.104": "2", "beta.amd.com/gpu.cu-count": "104", "amd.com/gpu.cu-count": "104",
        "beta.amd.com/gpu.simd-count.416": "2", "beta.amd.com/gpu.simd-count": "416", "amd.com/gpu.simd-count": "416",
        "beta.amd.com/gpu.device-id.740f": "2", "beta.amd.com/gpu.device-id": "740f", "amd.com/gpu.device-id": "740f",
        "beta.amd.com/gpu.family.AI": "2", "beta.amd.com/gpu.family": "AI", "amd.com/gpu.family": "AI",
        "amd.com/compute-partitioning-supported": "false", "amd.com/memory-partitioning-supported": "false"}
    two = amd_profile()
    two["devices"][1]["memory_total_mib"] = 32752
    mixed = vendors.labeller_labels(two, ["-vram"])
    assert mixed["amd.com/gpu.vram.64G"] == "1" and mixed["amd.com/gpu.vram.32G"] == "1"
    assert "amd.com/gpu.vram" not in mixed and "beta.amd.com/gpu.vram" not in mixed


def test_the_labeller_replaces_every_amd_label():
    current = {"amd.com/gpu.family": "NV", "beta.amd.com/gpu.family.NV": "1", "kubernetes.io/hostname": "x",
               "feature.node.kubernetes.io/amd-gpu": "true"}
    patch = vendors.labeller_patch(current, {"amd.com/gpu.family": "AI"})
    assert patch == {"amd.com/gpu.family": "AI", "beta.amd.com/gpu.family.NV": None}


def _container(objects, name):
    ds = [o for o in objects if o["kind"] == "DaemonSet" and o["metadata"]["name"] == name][0]
    return ds["spec"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize("strategy", ["single", "mixed"])
def test_the_rendered_rocm_pod_gives_what_the_module_expects(strategy):
    container = _container(amd_manifests.render({"resource_naming_strategy": strategy}), "amdgpu-device-plugin-daemonset")
    assert vendors.role({"spec": {"containers": [container]}})[0] == "rocm"
    simulated = vendors.rocm_resources(amd_profile(), vendors.arguments(container))
    assert simulated == amd_allocatable.resources([{}, {}], strategy)


@pytest.mark.parametrize("shared, monitoring", [(1, False), (4, True)])
def test_the_rendered_intel_pod_gives_what_the_module_expects(shared, monitoring):
    container = _container(intel_manifests.render({"shared_dev_num": shared, "enable_monitoring": monitoring}),
                           "intel-gpu-plugin")
    assert vendors.role({"spec": {"containers": [container]}})[0] == "intel"
    simulated = vendors.intel_resources(intel_profile("xe", 2), vendors.arguments(container, entrypoint=True))
    assert simulated == intel_allocatable.resources(["xe", "xe"], shared, monitoring)


def test_the_rendered_labeller_pod_is_the_labeller():
    container = _container(amd_manifests.render({}), "amdgpu-labeller-daemonset")
    assert vendors.role({"spec": {"containers": [container]}})[0] == "labeller"
    assert "amd.com/gpu.family" in vendors.labeller_labels(amd_profile(), vendors.arguments(container))


def _load(name):
    import json
    from sandbox.k8s import paths
    return json.loads((paths.PROFILES_DIR / (name + ".json")).read_text(encoding="utf-8"))


def test_the_sandbox_profiles():
    assert vendors.rocm_resources(_load("mi210x2"), []) == {"amd.com/gpu": 2}
    assert vendors.intel_resources(_load("intel-flex170"), []) == {"gpu.intel.com/i915": 1}
    assert vendors.intel_resources(_load("intel-xe"), ["-shared-dev-num=2"]) == {"gpu.intel.com/xe": 2}
    labels = vendors.labeller_labels(_load("mi210x2"), ["-vram", "-device-id", "-family"])
    assert (labels["amd.com/gpu.vram"], labels["amd.com/gpu.device-id"], labels["amd.com/gpu.family"]) == ("64G", "740f", "AI")
