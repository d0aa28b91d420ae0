# SPDX-License-Identifier: GPL-3.0-or-later
"""The pure part of dra_migration: which runtimes can hand a DRA claim's CDI devices to a container, what a node is
(device plugin, DRA, both), when it has arrived, which pods hold its GPUs, which labels a move changes."""

import pytest

from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.dra import matrix, migration as m

DP = "nvidia.com/gpu.deploy.device-plugin"
DRA = "nvidia.com/gpu.deploy.dra-driver"


def node(allocatable=None, labels=None, managed=None):
    meta = {"name": "n1", "labels": labels or {}}
    if managed:
        meta["managedFields"] = [{"manager": mgr, "fieldsV1": {"f:metadata": {"f:labels": dict(("f:" + k, {}) for k in keys)}}}
                                 for mgr, keys in managed.items()]
    return {"metadata": meta, "status": {"allocatable": allocatable or {}, "capacity": allocatable or {}}}


@pytest.mark.parametrize("runtime,refused", [
    ("containerd://1.6.20", True), ("containerd://1.7.0", False), ("containerd://2.4.2", False),
    ("docker://24.0.7", True), ("cri-o://1.30.1", False), ("", False), ("something://1.0", False),
    ("containerd://v1.6.9", True),
])
def test_runtimes_that_cannot_pass_cdi_devices_are_refused_with_the_reason(runtime, refused):
    why = m.runtime_refusal(runtime)
    assert bool(why) is refused
    if refused:
        assert runtime in why and "CDI" in why


def test_what_a_node_is():
    slices = [{"spec": {"driver": "gpu.nvidia.com", "nodeName": "n1", "devices": [{"name": "gpu-0"}, {"name": "gpu-1"}]}},
              {"spec": {"driver": "other.example.com", "nodeName": "n1", "devices": [{"name": "x"}]}},
              {"spec": {"driver": "gpu.nvidia.com", "nodeName": "n2", "devices": [{"name": "gpu-0"}]}}]
    devices = matrix.slice_gpus(slices, "n1")
    assert devices == ["gpu-0", "gpu-1"]
    assert m.kind_of(node({"nvidia.com/gpu": "2"}), devices) == "both"
    assert m.kind_of(node({"nvidia.com/gpu": "0"}), devices) == "dra"
    assert m.kind_of(node({"nvidia.com/mig-1g.10gb": "7"}), []) == "device_plugin"
    assert m.kind_of(node({"cpu": "4"}), []) == "none"


def test_arrival_on_dra_needs_the_plugin_gone_and_every_labelled_gpu_published():
    labelled = {"nvidia.com/gpu.count": "2"}
    done, missing = m.arrived(m.TO_DRA, node({"nvidia.com/gpu": "2"}, labelled), ["gpu-0", "gpu-1"])
    assert not done and "still advertises nvidia.com/gpu=2" in missing
    done, missing = m.arrived(m.TO_DRA, node({"nvidia.com/gpu": "0"}, labelled), ["gpu-0"])
    assert not done and "1 of 2 GPUs" in missing
    assert m.arrived(m.TO_DRA, node({"nvidia.com/gpu": "0"}, labelled), ["gpu-0", "gpu-1"])[0]
    assert m.arrived(m.TO_DRA, node({}, {}), ["gpu-0"])[0]  # no count label: any GPU published
    assert not m.arrived(m.TO_DRA, node({}, {}), [])[0]


def test_arrival_back_needs_the_slices_gone_and_the_plugin_back():
    assert not m.arrived(m.TO_DEVICE_PLUGIN, node({"nvidia.com/gpu": "1"}), ["gpu-0"])[0]
    assert not m.arrived(m.TO_DEVICE_PLUGIN, node({}), [])[0]
    assert m.arrived(m.TO_DEVICE_PLUGIN, node({"nvidia.com/gpu": "1"}), [])[0]


def test_pods_that_hold_gpus_are_named_and_operands_and_finished_pods_are_not():
    def pod(name, resources=None, claims=None, phase="Running", daemonset=False, on="n1"):
        meta = {"name": name, "namespace": "ns"}
        if daemonset:
            meta["ownerReferences"] = [{"kind": "DaemonSet", "name": "x"}]
        container = {"name": "c", "resources": {"limits": resources or {}}}
        spec = {"nodeName": on, "containers": [container]}
        if claims:
            spec["resourceClaims"] = claims
        return {"metadata": meta, "spec": spec, "status": {"phase": phase}}
    pods = [pod("trainer", {"nvidia.com/gpu": "1"}), pod("claimer", claims=[{"name": "gpu"}]), pod("web"),
            pod("done", {"nvidia.com/gpu": "1"}, phase="Succeeded"), pod("plugin", {"nvidia.com/gpu": "1"}, daemonset=True),
            pod("elsewhere", {"nvidia.com/gpu": "1"}, on="n2")]
    assert m.gpu_pods(pods, "n1") == ["ns/claimer", "ns/trainer"]


def test_the_labels_a_move_changes_and_the_way_back_removes_only_our_own_label():
    fresh = node(labels={DP: "true"})
    assert m.label_changes(m.TO_DRA, fresh) == {DP: ("true", "false"), DRA: (None, "true")}
    moved = node(labels={DP: "false", DRA: "true"}, managed={m.FIELD_MANAGER: [DP, DRA]})
    assert m.label_changes(m.TO_DRA, moved) == {}
    assert m.label_changes(m.TO_DEVICE_PLUGIN, moved) == {DP: ("false", "true"), DRA: ("true", None)}
    # a dra-driver=true someone else set (too) is set to false, or the node would run both plugins
    theirs = node(labels={DP: "false", DRA: "true"}, managed={"gpu-operator": [DRA], m.FIELD_MANAGER: [DP]})
    assert m.label_changes(m.TO_DEVICE_PLUGIN, theirs) == {DP: ("false", "true"), DRA: ("true", "false")}
    shared = node(labels={DP: "false", DRA: "true"}, managed={"admin": [DRA], m.FIELD_MANAGER: [DP, DRA]})
    assert m.labels_for(m.TO_DEVICE_PLUGIN, shared)[DRA] == "false"
    unrecorded = node(labels={DP: "false", DRA: "true"})  # no managedFields at all: not ours
    assert m.label_changes(m.TO_DEVICE_PLUGIN, unrecorded)[DRA] == ("true", "false")
    # the false this module set on that way back stays on a rerun (no change)
    after = node(labels={DP: "true", DRA: "false"}, managed={m.FIELD_MANAGER: [DP, DRA]})
    assert m.label_changes(m.TO_DEVICE_PLUGIN, after) == {}
    # a dra-driver=false someone else set stays as it is
    off = node(labels={DP: "false", DRA: "false"}, managed={"admin": [DRA], m.FIELD_MANAGER: [DP]})
    assert m.label_changes(m.TO_DEVICE_PLUGIN, off) == {DP: ("false", "true")}
