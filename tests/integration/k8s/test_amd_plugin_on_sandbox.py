# SPDX-License-Identifier: GPL-3.0-or-later
"""amd_device_plugin_deploy end to end: `ansible localhost -m kubegpu.cluster.amd_device_plugin_deploy` against the
sandbox control plane, where the device-manager simulator (devsim/vendors.py) plays the kubelet for the ROCm plugin
and plays its node labeller. The gpu facts are dicts in the shape gpu_facts gives (gpu.amd), for the GPUs of the
nodes' profile (sandbox/profiles/mi210x2.json).

Set TEST_STATE_DIR to run on a control plane of this module's own (tests/vendor_sandbox.py)."""

import uuid

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from ansible_cli import run_module
from k8s_helpers import wait_for
from vendor_sandbox import vendor_cluster, vendor_nodes  # noqa: F401 pylint: disable=unused-import

LABEL = "feature.node.kubernetes.io/amd-gpu"
MANAGED = "app.kubernetes.io/managed-by=kubegpu.cluster"


def module(args, check=False, diff=False):
    return run_module("kubegpu.cluster.amd_device_plugin_deploy", args, check=check, diff=diff)


def amd_fact(count=2, **part):
    amd = {"count": count, "status": "ok", "driver": {"module": "amdgpu", "loaded": True, "version": "6.8.5", "kfd": True},
           "devices": [{"address": "0000:%02x:00.0" % (0x43 + 0x80 * i), "device_id": "0x740f", "name": "AMD Instinct MI210",
                        "memory_total_mib": 65520, "card": "card%d" % i, "render": "renderD%d" % (128 + i)}
                       for i in range(count)]}
    amd.update(part)
    return {"vendors": ["amd"], "pci": [], "amd": amd, "intel": {"count": 0, "devices": []}, "count": 0, "devices": []}


def cpu_fact():
    return {"vendors": [], "pci": [], "amd": {"count": 0, "devices": []}, "intel": {"count": 0, "devices": []},
            "count": 0, "devices": []}


def _rbac(cluster):
    return client.RbacAuthorizationV1Api(cluster.api_client)


def _node(cluster, name):
    return cluster.core.read_node(name)


def _amd_resources(node):
    return dict((k, int(v)) for k, v in (node.status.allocatable or {}).items() if k.startswith("amd.com/"))


def _amd_labels(node):
    return dict((k, v) for k, v in (node.metadata.labels or {}).items() if k.startswith(("amd.com/", "beta.amd.com/")))


def _actions(result):
    return dict(("%s/%s" % (o["kind"], o["name"]), o["action"]) for o in result["objects"])


def test_present_check_absent(vendor_cluster, vendor_nodes):  # pylint: disable=redefined-outer-name
    mi, = vendor_nodes(1, "mi210x2")
    cpu, = vendor_nodes(1)
    ns = "amd-" + uuid.uuid4().hex[:8]
    base = dict(kubeconfig=vendor_cluster.kubeconfig, namespace=ns, wait_timeout=120,
                facts={"mi-host": amd_fact(), "cpu-host": cpu_fact()}, node_names={"mi-host": mi, "cpu-host": cpu})
    try:
        rc, first = module(base)
        assert rc == 0, first
        assert first["changed"] is True
        assert first["expected"] == {mi: {"amd.com/gpu": 2}} and first["nodes"] == [mi]
        assert first["resources"] == {mi: {"amd.com/gpu": 2}}
        assert set(_actions(first).values()) == {"created"}
        node = _node(vendor_cluster, mi)
        assert _amd_resources(node) == {"amd.com/gpu": 2}
        assert node.metadata.labels[LABEL] == "true"
        assert LABEL not in (_node(vendor_cluster, cpu).metadata.labels or {})
        # the labeller's labels, written by the simulated labeller once its pod runs
        labelled = wait_for(vendor_cluster.core.list_node, field_selector="metadata.name=" + mi, timeout=60,
                            predicate=lambda n: (n.metadata.labels or {}).get("amd.com/gpu.family") == "AI",
                            describe="the labeller's labels")
        assert labelled.metadata.labels["beta.amd.com/gpu.vram.64G"] == "2"
        # least-privilege RBAC as deployed
        role = _rbac(vendor_cluster).read_cluster_role("%s-amd-gpu-node-labeller" % ns)
        assert [(r.api_groups, r.resources, r.verbs) for r in role.rules] == [
            ([""], ["nodes"], ["get", "list", "watch", "update"])]

        rc, again = module(base)
        assert rc == 0, again
        assert again["changed"] is False, again["objects"]
        assert set(_actions(again).values()) == {"unchanged"}

        rc, checked = module(dict(base, resource_naming_strategy="mixed"), check=True, diff=True)
        assert rc == 0, checked
        assert checked["changed"] is True
        assert _actions(checked)["DaemonSet/amdgpu-device-plugin-daemonset"] == "updated"
        live = vendor_cluster.apps.read_namespaced_daemon_set("amdgpu-device-plugin-daemonset", ns)
        assert live.spec.template.spec.containers[0].args[-1] == "-resource_naming_strategy=single"

        rc, preview = module(dict(kubeconfig=vendor_cluster.kubeconfig, namespace=ns, state="absent"), check=True)
        assert rc == 0, preview
        assert preview["changed"] is True and "amd.com/gpu.family" in preview["labeller_labels_removed"][mi]
        assert vendor_cluster.apps.list_namespaced_daemon_set(ns, label_selector=MANAGED).items
        assert _node(vendor_cluster, mi).metadata.labels[LABEL] == "true"
    finally:
        rc, gone = module(dict(kubeconfig=vendor_cluster.kubeconfig, namespace=ns, state="absent", wait_timeout=120))
    assert rc == 0, gone
    assert gone["changed"] is True
    assert gone["resources_gone"] == [mi]
    node = _node(vendor_cluster, mi)
    assert _amd_resources(node) == {}
    assert LABEL not in (node.metadata.labels or {})
    assert _amd_labels(node) == {}
    with pytest.raises(ApiException) as err:
        _rbac(vendor_cluster).read_cluster_role("%s-amd-gpu-node-labeller" % ns)
    assert err.value.status == 404
    rc, twice = module(dict(kubeconfig=vendor_cluster.kubeconfig, namespace=ns, state="absent", wait_timeout=120))
    assert rc == 0 and twice["changed"] is False, twice


def test_a_host_the_plugin_cannot_serve_fails_before_any_api_call(vendor_cluster, vendor_nodes):  # pylint: disable=redefined-outer-name
    mi, = vendor_nodes(1, "mi210x2")
    ns = "amd-" + uuid.uuid4().hex[:8]
    rc, result = module(dict(kubeconfig=vendor_cluster.kubeconfig, namespace=ns, facts={"mi-host": amd_fact(status="no_kfd")},
                             node_names={"mi-host": mi}))
    assert rc != 0
    assert result["msg"].startswith("facts: host mi-host: /sys/class/kfd is missing"), result["msg"]
    with pytest.raises(ApiException) as err:
        vendor_cluster.core.read_namespace(ns)
    assert err.value.status == 404
    assert LABEL not in (_node(vendor_cluster, mi).metadata.labels or {})
