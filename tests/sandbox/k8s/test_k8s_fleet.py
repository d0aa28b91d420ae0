# SPDX-License-Identifier: GPL-3.0-or-later
"""kwok nodes mirror sandbox/fleet.yml, look like kubelet-registered GPU nodes, and the shipped
GPU profiles (sandbox/profiles) drive what a device plugin makes them advertise."""

import json
import platform

import pytest

from sandbox.k8s import nodes, paths
from k8s_helpers import gpu_resources, plugin_nodes, wait_for

FLEET = nodes.load_fleet()
# the fake NVML's profiles (variant gpu); amd/intel nodes' profiles are sysfs only, NVIDIA's plugin has nothing there
GPU_PROFILES = sorted({n["profile"] for n in FLEET if n.get("profile") and n.get("variant") == "gpu"})
# Shipped failure-mode profiles of the fake NVML and what the real plugin does with them.
FAILURES = {
    "failure-device-lost": "GPU_IS_LOST",
    "failure-driver-not-loaded": "failed to initialize NVML",
    "failure-no-permission": "failed to initialize NVML",
    "failure-not-supported": {"nvidia.com/gpu": 1},
}


def test_every_fleet_node_is_a_ready_kwok_node(sandbox):
    for entry in FLEET:
        node = sandbox.core.read_node(entry["name"])
        annotations = node.metadata.annotations or {}
        assert annotations.get("kwok.x-k8s.io/node") == "fake"
        assert annotations.get(nodes.PROFILE_ANNOTATION) == entry.get("profile"), entry
        info = node.status.node_info
        assert info.architecture == nodes.host_arch()
        assert info.operating_system == "linux"
        assert info.kubelet_version == "v" + sandbox.kube_version
        assert info.kernel_version == platform.release()
        assert node.metadata.labels["kubernetes.io/hostname"] == entry["name"]
        assert any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)


def test_fleet_nodes_advertise_no_gpu_without_a_device_plugin(sandbox):
    pods = sandbox.core.list_pod_for_all_namespaces().items
    for entry in FLEET:
        busy = [p for p in pods if p.spec.node_name == entry["name"] and any("k8s-device-plugin" in (c.image or "") for c in p.spec.containers)]
        if not busy:
            assert gpu_resources(sandbox.core.read_node(entry["name"])) == ({}, {}), entry["name"]


def _profile(name):
    path = paths.PROFILES_DIR / (name + ".json")
    assert path.exists(), "shipped GPU profile %s is missing (fleet.yml names it)" % path
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def _mig_on(device):
    return bool((device.get("mig") or {}).get("current"))


@pytest.fixture(scope="module")
def shipped_profile_nodes(sandbox):
    """One scale node per shipped profile (by name, as fleet nodes use it) and per plugin setup."""
    ts5 = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 5\n"
    setups = {"defaults": (None, None), "ts5": (ts5, None), "mixed": (None, {"MIG_STRATEGY": "mixed"})}
    cases = [(p, setup) for p in GPU_PROFILES for setup in setups] + [(p, "defaults") for p in FAILURES]
    for profile, _setup in cases:
        _profile(profile)
    with plugin_nodes(sandbox, "fleet", dict(((p, s), (p,) + setups[s] + (None,)) for p, s in cases)) as made:
        yield made


def _wait_resources(sandbox, name, want):
    return wait_for(sandbox.core.list_node, field_selector="metadata.name=" + name, timeout=45,
                    predicate=lambda n: gpu_resources(n) == (want, want), describe="%s to advertise %s" % (name, want))


@pytest.mark.parametrize("profile", GPU_PROFILES)
def test_shipped_profile_defaults_and_time_slicing(sandbox, shipped_profile_nodes, profile):
    count = len(_profile(profile)["devices"])
    assert count > 0
    _wait_resources(sandbox, shipped_profile_nodes[(profile, "defaults")], {"nvidia.com/gpu": count})
    _wait_resources(sandbox, shipped_profile_nodes[(profile, "ts5")], {"nvidia.com/gpu": 5 * count})


def test_v100x4_with_five_replicas_gives_twenty(sandbox, shipped_profile_nodes):
    assert len(_profile("v100x4")["devices"]) == 4
    _wait_resources(sandbox, shipped_profile_nodes[("v100x4", "ts5")], {"nvidia.com/gpu": 20})


@pytest.mark.parametrize("profile", GPU_PROFILES)
def test_shipped_profile_mig_mixed(sandbox, shipped_profile_nodes, profile):
    devices = _profile(profile)["devices"]
    want = {}
    for device in devices:
        if _mig_on(device):
            for mig in device["mig"]["devices"]:
                key = "nvidia.com/mig-" + mig["profile"].replace("+", ".")
                want[key] = want.get(key, 0) + 1
        else:
            want["nvidia.com/gpu"] = want.get("nvidia.com/gpu", 0) + 1
    _wait_resources(sandbox, shipped_profile_nodes[(profile, "mixed")], want)


@pytest.mark.parametrize("profile", sorted(FAILURES))
def test_shipped_failure_profiles(sandbox, shipped_profile_nodes, profile):
    expected = FAILURES[profile]
    name = shipped_profile_nodes[(profile, "defaults")]
    if isinstance(expected, dict):
        _wait_resources(sandbox, name, expected)
        return
    node = wait_for(sandbox.core.list_node, field_selector="metadata.name=" + name, timeout=45,
                    predicate=lambda n: expected in (n.metadata.annotations or {}).get("sandbox.kubegpu.io/device-plugin", ""),
                    describe="%s verdict %r" % (name, expected))
    assert gpu_resources(node) == ({}, {})
