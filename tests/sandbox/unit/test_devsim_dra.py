# SPDX-License-Identifier: GPL-3.0-or-later
"""NVIDIA's DRA kubelet plugin in the device-manager simulator (sandbox/k8s/devsim/dra.py): which pods are the
plugin, and the devices it publishes for a profile, named and attributed as cmd/gpu-kubelet-plugin/deviceinfo.go
does; its driver name is the collection's."""

import json
from pathlib import Path

from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import constants as nv
from sandbox.k8s.devsim import dra

PROFILES = Path(__file__).resolve().parents[3] / "sandbox" / "profiles"


def profile(name):
    return json.loads((PROFILES / (name + ".json")).read_text(encoding="utf-8"))


def test_the_driver_name_and_image_are_the_collections():
    assert dra.DRIVER == nv.DRA_DRIVER_NAME
    assert dra.IMAGE_MARK in nv.DRA_DRIVER_IMAGE_REPOSITORY


def test_the_chart_s_kubelet_plugin_container_is_recognised_and_others_are_not():
    image = "%s:%s" % (nv.DRA_DRIVER_IMAGE_REPOSITORY, nv.DRA_DRIVER_VERSION)
    chart = {"spec": {"containers": [{"name": "gpus", "image": image, "command": ["bash", "-c"],
                                      "args": ["gpu-kubelet-plugin -v $(LOG_VERBOSITY)"]}]}}
    assert dra.plugin_container(chart)["name"] == "gpus"
    compute_domains = {"spec": {"containers": [{"name": "cd", "image": image, "command": ["bash", "-c"],
                                                "args": ["compute-domain-kubelet-plugin -v 4"]}]}}
    assert dra.plugin_container(compute_domains) is None
    other_image = {"spec": {"containers": [{"name": "x", "image": "busybox", "command": ["gpu-kubelet-plugin"]}]}}
    assert dra.plugin_container(other_image) is None


def test_an_h100_is_published_as_nvidia_s_plugin_publishes_it():
    devices = dra.slice_devices(profile("h100"))
    assert [d["name"] for d in devices] == ["gpu-0"]
    attrs = devices[0]["attributes"]
    assert attrs["type"] == {"string": "gpu"}
    assert attrs["productName"] == {"string": "NVIDIA H100 80GB HBM3"}
    assert attrs["architecture"] == {"string": "Hopper"} and attrs["brand"] == {"string": "Nvidia"}
    assert attrs["cudaComputeCapability"] == {"version": "9.0.0"}
    assert attrs["driverVersion"] == {"version": "550.127.5"}  # Masterminds semver drops the leading zero
    assert attrs["cudaDriverVersion"] == {"version": "12.4.0"}
    assert attrs["resource.kubernetes.io/pciBusID"] == {"string": "0000:18:00.0"}
    assert devices[0]["capacity"] == {"memory": {"value": "81559Mi"}}


def test_gpus_in_mig_mode_and_other_vendors_are_left_out():
    assert dra.slice_devices(profile("h100-mig-me")) == []
    assert dra.slice_devices(profile("mi210x2")) == []
    assert [d["name"] for d in dra.slice_devices(profile("v100x4"))] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]


def test_the_demo_lists_a_nodes_dra_devices_under_nvidia_s_driver_only():
    from sandbox.demo import check
    assert check.DRA_DRIVER == nv.DRA_DRIVER_NAME
    slices = [{"metadata": {"name": "kg-h100-gpu.nvidia.com-x"},
               "spec": {"driver": "gpu.nvidia.com", "nodeName": "kg-h100", "devices": [
                   {"name": "gpu-0", "attributes": {"productName": {"string": "NVIDIA H100 80GB HBM3"},
                                                    "uuid": {"string": "GPU-1"}}}]}},
              {"metadata": {"name": "other"}, "spec": {"driver": "other.example.com", "nodeName": "kg-h100",
                                                       "devices": [{"name": "x"}]}}]
    assert check.dra_devices(slices, "kg-h100") == [{"name": "gpu-0", "slice": "kg-h100-gpu.nvidia.com-x",
                                                     "product": "NVIDIA H100 80GB HBM3", "uuid": "GPU-1"}]
    assert check.dra_devices(slices, "kg-a100") == []
