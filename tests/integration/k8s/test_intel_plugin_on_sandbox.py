# SPDX-License-Identifier: GPL-3.0-or-later
"""intel_device_plugin_deploy end to end: `ansible localhost -m kubegpu.cluster.intel_device_plugin_deploy` against
the sandbox control plane, where the device-manager simulator (devsim/vendors.py) plays the kubelet for Intel's GPU
plugin. The gpu facts are dicts in the shape gpu_facts gives (gpu.intel), for the GPUs of the nodes' profiles
(sandbox/profiles/intel-flex170.json on i915, intel-xe.json on xe).

Set TEST_STATE_DIR to run on a control plane of this module's own (tests/vendor_sandbox.py)."""

import uuid

import pytest
from kubernetes.client.rest import ApiException

from ansible_cli import run_module
from vendor_sandbox import vendor_cluster, vendor_nodes  # noqa: F401 pylint: disable=unused-import

LABEL = "intel.feature.node.kubernetes.io/gpu"
MANAGED = "app.kubernetes.io/managed-by=kubegpu.cluster"


def module(args, check=False, diff=False):
    return run_module("kubegpu.cluster.intel_device_plugin_deploy", args, check=check, diff=diff)


def intel_fact(driver="i915", device_id="0x56c0", name="Intel Data Center GPU Flex 170", **part):
    intel = {"count": 1, "status": "ok", "driver": {"module": driver, "loaded": True, "version": None},
             "devices": [{"address": "0000:4d:00.0", "device_id": device_id, "name": name, "memory_total_mib": None,
                          "card": "card0", "render": "renderD128", "driver": driver}]}
    intel.update(part)
    return {"vendors": ["intel"], "pci": [], "intel": intel, "amd": {"count": 0, "devices": []}, "count": 0, "devices": []}


def _intel_resources(node):
    return dict((k, int(v)) for k, v in (node.status.allocatable or {}).items() if k.startswith("gpu.intel.com/"))


def _actions(result):
    return dict(("%s/%s" % (o["kind"], o["name"]), o["action"]) for o in result["objects"])


def test_present_check_absent(vendor_cluster, vendor_nodes):  # pylint: disable=redefined-outer-name
    flex, = vendor_nodes(1, "intel-flex170")
    arc, = vendor_nodes(1, "intel-xe")
    ns = "intel-" + uuid.uuid4().hex[:8]
    facts = {"flex": intel_fact(), "arc": intel_fact("xe", "0xe20b", "Intel Arc B580")}
    base = dict(kubeconfig=vendor_cluster.kubeconfig, namespace=ns, wait_timeout=120, shared_dev_num=2,
                allocation_policy="balanced", facts=facts, node_names={"flex": flex, "arc": arc})
    try:
        rc, first = module(base)
        assert rc == 0, first
        assert first["changed"] is True
        want = {flex: {"gpu.intel.com/i915": 2}, arc: {"gpu.intel.com/xe": 2}}
        assert first["expected"] == want and first["resources"] == want
        assert first["nodes"] == sorted([flex, arc])
        for name in (flex, arc):
            node = vendor_cluster.core.read_node(name)
            assert node.metadata.labels[LABEL] == "true"
            assert _intel_resources(node) == want[name]
        ds = vendor_cluster.apps.read_namespaced_daemon_set("intel-gpu-plugin", ns)
        assert ds.spec.template.spec.containers[0].args == ["-shared-dev-num=2", "-allocation-policy=balanced"]

        rc, again = module(base)
        assert rc == 0, again
        assert again["changed"] is False, again["objects"]

        rc, checked = module(dict(base, shared_dev_num=4), check=True, diff=True)
        assert rc == 0, checked
        assert checked["changed"] is True and checked["expected"][flex] == {"gpu.intel.com/i915": 4}
        assert _actions(checked)["DaemonSet/intel-gpu-plugin"] == "updated"
        assert _intel_resources(vendor_cluster.core.read_node(flex)) == {"gpu.intel.com/i915": 2}

        rc, shared = module(dict(base, shared_dev_num=4, enable_monitoring=True))
        assert rc == 0, shared
        assert shared["resources"][flex] == {"gpu.intel.com/i915": 4, "gpu.intel.com/i915_monitoring": 1}
    finally:
        rc, gone = module(dict(kubeconfig=vendor_cluster.kubeconfig, namespace=ns, state="absent", wait_timeout=120))
    assert rc == 0, gone
    assert gone["changed"] is True and gone["resources_gone"] == sorted([flex, arc])
    for name in (flex, arc):
        node = vendor_cluster.core.read_node(name)
        assert _intel_resources(node) == {}
        assert LABEL not in (node.metadata.labels or {})
    rc, twice = module(dict(kubeconfig=vendor_cluster.kubeconfig, namespace=ns, state="absent"))
    assert rc == 0 and twice["changed"] is False, twice


def test_a_bad_option_fails_before_any_api_call(vendor_cluster, vendor_nodes):  # pylint: disable=redefined-outer-name
    flex, = vendor_nodes(1, "intel-flex170")
    ns = "intel-" + uuid.uuid4().hex[:8]
    rc, result = module(dict(kubeconfig=vendor_cluster.kubeconfig, namespace=ns, shared_dev_num=0,
                             facts={"flex": intel_fact()}, node_names={"flex": flex}))
    assert rc != 0
    assert result["msg"].startswith("shared_dev_num: must be a whole number of at least 1"), result["msg"]
    with pytest.raises(ApiException) as err:
        vendor_cluster.core.read_namespace(ns)
    assert err.value.status == 404
    assert LABEL not in (vendor_cluster.core.read_node(flex).metadata.labels or {})
