# SPDX-License-Identifier: GPL-3.0-or-later
"""The simulator's node feature discovery and GPU feature discovery rules without a cluster (sandbox/k8s/devsim/nfd.py
and gfd.py): which pods are which, nfd-worker's PCI labels, nfd-master's label filter, merge and node patch, GFD's
failures and timestamp. Through the API: tests/sandbox/k8s/test_k8s_nfd.py."""

import datetime

import pytest

from sandbox.k8s.devsim import gfd, nfd
from sandbox.k8s.devsim.rules import parse_config
from sandbox_gpu_profiles import V100, gpu, profile

SETTINGS = nfd.master_settings("", [])


def container(image, command=None, args=None):
    out = {"name": "c", "image": image}
    if command:
        out["command"] = command
    if args:
        out["args"] = args
    return out


@pytest.mark.parametrize("c, role", [
    (container("registry.k8s.io/nfd/node-feature-discovery:v0.19.0", ["nfd-worker"]), "worker"),
    (container("registry.k8s.io/nfd/node-feature-discovery:v0.19.0", ["/usr/bin/nfd-master"], ["-port=8080"]), "master"),
    (container("example.com/nfd", None, ["nfd-master"]), "master"),
    (container("nvcr.io/nvidia/k8s-device-plugin:v0.20.0", ["gpu-feature-discovery"]), "gfd"),
    (container("nvcr.io/nvidia/k8s-device-plugin:v0.20.0"), None),  # the plugin itself
    (container("example.com/other", ["gpu-feature-discovery"]), None),  # not NVIDIA's image
])
def test_roles(c, role):
    assert nfd.role({"spec": {"containers": [c]}})[0] == role


def test_worker_pci_labels_and_features():
    prof = profile(gpu(0, model=V100), gpu(1, model=V100))
    for device in prof["devices"]:
        device["pci_subsystem_id"] = "0x121410DE"
    labels, features = nfd.worker_output(prof, {})  # NFD's defaults: classes 03, 0b40, 12; fields class, vendor
    assert labels == {"pci-0302_10de.present": "true"}
    assert features["instances"]["pci.device"]["elements"][0]["attributes"] == {
        "class": "0302", "vendor": "10de", "device": "1db4", "subsystem_vendor": "10de", "subsystem_device": "1214"}
    config = {"sources": {"pci": {"deviceClassWhitelist": ["02", "03"], "deviceLabelFields": ["device", "vendor"]}}}
    assert nfd.worker_output(prof, config)[0] == {"pci-10de_1db4.present": "true"}  # NFD's field order, not the config's
    assert nfd.worker_output(prof, {"sources": {"pci": {"deviceClassWhitelist": ["0300"]}}})[0] == {}
    assert nfd.worker_output(None, {}) == ({}, {"flags": {}, "attributes": {}, "instances": {}})
    geforce = profile(gpu(0, model=V100))
    geforce["devices"][0]["brand"] = "geforce"
    assert nfd.worker_output(geforce, {})[0] == {"pci-0300_10de.present": "true"}


@pytest.mark.parametrize("key, value, allowed", [
    ("feature.node.kubernetes.io/pci-10de.present", "true", True),
    ("nvidia.com/gpu.product", "Tesla-T4", True),  # any namespace outside kubernetes.io
    ("sub.feature.node.kubernetes.io/x", "1", True), ("profile.node.kubernetes.io/x", "1", True),
    ("kubernetes.io/x", "1", False), ("node-role.kubernetes.io/gpu", "", False),
    ("nvidia.com/bad", "spaces are not allowed", False), ("nvidia.com/" + "x" * 64, "1", False),
    ("Bad_NS/x", "1", False),
])
def test_allowed_label_namespaces(key, value, allowed):
    assert nfd.allowed(key, value, SETTINGS) is allowed


def test_extra_and_denied_namespaces_from_file_and_flags():
    settings = nfd.master_settings('{"extraLabelNs": ["vendor.kubernetes.io"], "denyLabelNs": ["*.example.com"]}', [])
    assert nfd.allowed("vendor.kubernetes.io/a", "1", settings)
    assert not nfd.allowed("gpu.example.com/a", "1", settings)
    flags = nfd.master_settings('{"extraLabelNs": ["vendor.kubernetes.io"]}', ["-extra-label-ns=gpu.example.com",
                                                                               "-deny-label-ns", "gpu.example.com"])
    assert flags["extraLabelNs"] == {"gpu.example.com"}  # a flag replaces the file's list
    assert nfd.allowed("gpu.example.com/a", "1", flags) and not nfd.allowed("vendor.kubernetes.io/a", "1", flags)
    assert not nfd.allowed("nvidia.com/gpu.count", "4", dict(SETTINGS, labelWhiteList="^pci-"))


def feature(name, namespace, labels):
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"labels": labels}}


def test_merge_order_and_default_namespace():
    merged = nfd.merged_labels([feature("z", "gpu", {"a": "gfd"}), feature("node-1", "nfd", {"a": "worker", "b": "1"}),
                                feature("b", "gpu", {"nvidia.com/x": "1", "a": "b-object"})], "nfd")
    # the master's namespace first, then by name: z (last) wins over b, which wins over the worker's
    assert merged == {"feature.node.kubernetes.io/a": "gfd", "feature.node.kubernetes.io/b": "1", "nvidia.com/x": "1"}


def node(labels, annotation=None):
    annotations = {nfd.FEATURE_LABELS_ANNOTATION: annotation} if annotation is not None else {}
    return {"metadata": {"name": "n", "labels": dict(labels), "annotations": annotations}}


def test_node_patch_adds_replaces_and_removes_only_its_own():
    current = node({"feature.node.kubernetes.io/old": "1", "nvidia.com/gpu.count": "2", "team": "ml",
                    "nvidia.com/gpu.present": "true"}, "old,nvidia.com/gpu.count")
    ops = nfd.node_patch(current, {"nvidia.com/gpu.count": "4", "nvidia.com/gpu.present": "true",
                                   "feature.node.kubernetes.io/new": "1"}, SETTINGS)
    assert ops == [
        {"op": "remove", "path": "/metadata/labels/feature.node.kubernetes.io~1old"},
        {"op": "add", "path": "/metadata/labels/feature.node.kubernetes.io~1new", "value": "1"},
        {"op": "replace", "path": "/metadata/labels/nvidia.com~1gpu.count", "value": "4"},
        {"op": "add", "path": "/metadata/annotations/nfd.node.kubernetes.io~1feature-labels",
         "value": "new,nvidia.com/gpu.count,nvidia.com/gpu.present"}]
    # restrictions.allowOverwrite=false: createPatches replaces a changed value only for a key NFD did not list before
    strict = dict(SETTINGS, allowOverwrite=False)
    ops = nfd.node_patch(current, {"nvidia.com/gpu.count": "4", "team": "ai"}, strict)
    assert {"op": "replace", "path": "/metadata/labels/team", "value": "ai"} in ops
    assert not [o for o in ops if o["path"].endswith("gpu.count")]
    gone = nfd.node_patch(current, {}, SETTINGS)
    assert {"op": "remove", "path": "/metadata/annotations/nfd.node.kubernetes.io~1feature-labels"} in gone
    assert [o["path"] for o in gone if o["op"] == "remove" and o["path"].startswith("/metadata/labels/")] == [
        "/metadata/labels/feature.node.kubernetes.io~1old", "/metadata/labels/nvidia.com~1gpu.count"]
    assert nfd.node_patch(node({"a/b": "1"}, "a/b"), {"a/b": "1"}, SETTINGS) == []


def test_gfd_fails_where_an_nvml_call_it_makes_fails():
    with pytest.raises(gfd.GFDFailure):
        gfd.labels(profile(gpu(0, errors={"nvmlDeviceGetCudaComputeCapability": "NOT_SUPPORTED"})), parse_config(None))
    with pytest.raises(gfd.GFDFailure):
        gfd.labels(profile(gpu(0), errors={"nvmlSystemGetCudaDriverVersion": "NOT_SUPPORTED"}), parse_config(None))
    # a MIG device's name needs its GPU's memory (go-nvlib GetProfile): fatal under single and mixed only
    mig_memory = profile(gpu(0, ["1g.10gb"], errors={"nvmlDeviceGetMemoryInfo": "UNKNOWN"}))
    with pytest.raises(gfd.GFDFailure):
        gfd.labels(mig_memory, parse_config("flags: {migStrategy: mixed}\n"))
    assert "nvidia.com/gpu.memory" not in gfd.labels(mig_memory, parse_config(None))
    # a whole GPU's memory is only a warning (lm/resource.go): no memory label
    got = gfd.labels(profile(gpu(0, errors={"nvmlDeviceGetMemoryInfo": "UNKNOWN"})), parse_config(None))
    assert got["nvidia.com/gpu.product"] and "nvidia.com/gpu.memory" not in got
    # the _v2 entry point is not the one GFD binds
    got = gfd.labels(profile(gpu(0, errors={"nvmlDeviceGetMemoryInfo_v2": "NOT_SUPPORTED"})), parse_config(None))
    assert got["nvidia.com/gpu.memory"] == "81920"
    assert gfd.labels(profile(gpu(0), errors={"nvmlSystemGetCudaDriverVersion_v2": "NOT_SUPPORTED"}),
                      parse_config(None))
    with pytest.raises(gfd.GFDFailure, match="MPS"):
        gfd.labels(profile(gpu(0, ["1g.10gb"])),
                   parse_config("flags: {mpsRoot: /m}\nsharing:\n  mps:\n    resources: [{name: nvidia.com/gpu, replicas: 2}]\n"))


def test_gfd_timestamp_and_its_switches():
    when = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    got = gfd.labels(profile(gpu(0)), parse_config(None), when)
    assert got["nvidia.com/gfd.timestamp"] == str(int(when.timestamp())) and got["nvidia.com/gpu.machine"] == "unknown"
    assert gfd.no_timestamp("flags:\n  gfd:\n    noTimestamp: true\n", {}, [])
    assert gfd.no_timestamp(None, {"GFD_NO_TIMESTAMP": "true"}, [])
    assert gfd.no_timestamp(None, {}, ["--no-timestamp"]) and not gfd.no_timestamp(None, {}, ["--no-timestamp=false"])
    assert not gfd.no_timestamp("flags:\n  gfd:\n    noTimestamp: false\n", {}, [])


def test_gfd_node_feature_object():
    obj = gfd.node_feature("kg-1", "nvidia-device-plugin", {"nvidia.com/gpu.count": "1"})
    assert obj["metadata"] == {"name": "nvidia-features-for-kg-1", "namespace": "nvidia-device-plugin",
                               "labels": {"nfd.node.kubernetes.io/node-name": "kg-1"}}
    assert obj["spec"]["features"] == {"flags": {}, "attributes": {}, "instances": {}}
