# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests of the gpu_expected_resources filter (what each node advertises once the plugin runs)."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.kubegpu.cluster.plugins.filter.gpu_expected_resources import gpu_expected_resources


def fact(count=4, mig=None, name="Tesla V100-PCIE-16GB"):
    devices = []
    for index in range(count):
        device = {"index": index, "uuid": "GPU-%d" % index, "name": name}
        if mig is not None:
            device["mig"] = {"capable": True, "current": bool(mig), "devices": [{"profile": p} for p in mig]}
        devices.append(device)
    return {"present": count > 0, "count": count, "devices": devices}


NO_GPU = {"present": False, "count": 0, "devices": []}
DRIVER_NOT_LOADED = {"present": True, "count": 0, "devices": []}


def test_whole_gpus_and_nodes_without_gpus():
    facts = {"gpu-1": fact(4), "cpu-1": NO_GPU, "broken-1": DRIVER_NOT_LOADED}
    assert gpu_expected_resources(facts) == {"gpu-1": {"nvidia.com/gpu": 4}}


def test_time_slicing_and_rename():
    sharing = {"strategy": "time-slicing", "replicas": 4}
    assert gpu_expected_resources({"g": fact(4)}, sharing=sharing) == {"g": {"nvidia.com/gpu": 16}}
    sharing["rename_by_default"] = True
    assert gpu_expected_resources({"g": fact(4)}, sharing=sharing) == {"g": {"nvidia.com/gpu.shared": 16}}


def test_mig_strategies():
    a100 = {"a": fact(2, mig=["1g.10gb", "1g.10gb", "3g.40gb"], name="NVIDIA A100-SXM4-80GB")}
    assert gpu_expected_resources(a100) == {"a": {"nvidia.com/gpu": 2}}
    assert gpu_expected_resources(a100, mig_strategy="mixed") == {
        "a": {"nvidia.com/mig-1g.10gb": 4, "nvidia.com/mig-3g.40gb": 2}}
    with pytest.raises(AnsibleFilterError, match="node a: NVIDIA's device plugin would exit there: invalid MIG "
                                                 "configuration: more than one MIG device type present on node"):
        gpu_expected_resources(a100, mig_strategy="single")
    uniform = {"a": fact(2, mig=["1g.10gb"] * 7)}
    assert gpu_expected_resources(uniform, mig_strategy="single") == {"a": {"nvidia.com/gpu": 14}}


def test_node_names_map_inventory_names():
    assert gpu_expected_resources({"host-1": fact(1)}, node_names={"host-1": "node-1"}) == {"node-1": {"nvidia.com/gpu": 1}}


def test_missing_facts_name_the_host():
    with pytest.raises(AnsibleFilterError, match="host-2 has no gpu fact"):
        gpu_expected_resources({"host-1": fact(1), "host-2": None})
    with pytest.raises(AnsibleFilterError, match="replicas"):
        gpu_expected_resources({"host-1": fact(1)}, sharing={"strategy": "time-slicing", "replicas": 1})


def test_the_preview_says_when_mps_replicas_wait_for_a_daemon_that_cannot_run():
    a100 = {"a": fact(1, mig=["1g.10gb"], name="NVIDIA A100-SXM4-80GB")}
    mps = {"strategy": "mps", "replicas": 4}
    with pytest.raises(AnsibleFilterError, match="node a: NVIDIA's device plugin would advertise nothing there: it "
                                                 "shares the GPUs with MPS and waits for NVIDIA's MPS control daemon"):
        gpu_expected_resources(a100, sharing=mps)
    assert gpu_expected_resources({"v": fact(1)}, sharing=mps) == {"v": {"nvidia.com/gpu": 4}}


def test_unhealthy_devices_and_the_health_checks_option():
    node = fact(2)
    node["devices"][1]["xid_events"] = [{"xid": 79, "gpu_instance_id": None, "compute_instance_id": None}]
    assert gpu_expected_resources({"g": node}) == {"g": {"nvidia.com/gpu": 1}}
    assert gpu_expected_resources({"g": node}, health_checks={"ignore_xids": [79]}) == {"g": {"nvidia.com/gpu": 2}}
    with pytest.raises(AnsibleFilterError, match="health_checks.ignore_xids"):
        gpu_expected_resources({"g": node}, health_checks={"ignore_xids": [0]})
