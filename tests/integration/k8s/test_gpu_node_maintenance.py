# SPDX-License-Identifier: GPL-3.0-or-later
"""gpu_node_maintenance against the sandbox API server (kwok nodes of each test's own): the node is cordoned unless an
admin did it, the operand deploy labels are paused so that the device plugin's DaemonSet takes its pods away, every pod
that uses a GPU (by resource or by RuntimeClass) is evicted through the Eviction API with PodDisruptionBudgets
respected, and restoring gives back exactly what was there."""

import json
import uuid

import pytest
from kubernetes import client

from ansible_cli import run_module
from k8s_helpers import delete_quietly, wait_for

ANNOTATION = "kubegpu.cluster/maintenance"
DEPLOY_PLUGIN = "nvidia.com/gpu.deploy.device-plugin"
DEPLOY_GFD = "nvidia.com/gpu.deploy.gpu-feature-discovery"


def maintain(sandbox, node, expect_rc=0, check=False, **options):
    args = dict(kubeconfig=sandbox.kubeconfig, node=node, wait_timeout=90)
    args.update(options)
    rc, result = run_module("kubegpu.cluster.gpu_node_maintenance", args, check=check)
    assert rc == expect_rc, result
    return result


def pod(name, node, resources=None, runtime_class=None, labels=None):
    container = {"name": "c", "image": "registry.k8s.io/pause:3.10"}
    if resources:
        container["resources"] = {"limits": resources}
    spec = {"nodeName": node, "containers": [container], "terminationGracePeriodSeconds": 1}
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def running(sandbox, namespace, name):
    wait_for(sandbox.core.list_namespaced_pod, namespace, field_selector="metadata.name=%s" % name,
             predicate=lambda p: p.status.phase == "Running", timeout=60, describe="pod %s running" % name)


def names(sandbox, namespace):
    return sorted(p.metadata.name for p in sandbox.core.list_namespaced_pod(namespace).items
                  if not p.metadata.deletion_timestamp)


@pytest.fixture
def runtime_class(sandbox):
    name = "nvidia-test-" + uuid.uuid4().hex[:6]
    node_api = client.NodeV1Api(sandbox.api_client)
    node_api.create_runtime_class({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                                   "metadata": {"name": name}, "handler": "nvidia"})
    yield name
    delete_quietly(node_api.delete_runtime_class, name)


def test_drain_evicts_the_gpu_pods_pauses_the_plugin_and_restore_gives_the_node_back(
        sandbox, test_nodes, namespace, runtime_class):
    node = test_nodes(1, profile="t4")[0]
    sandbox.core.patch_node(node, {"metadata": {"labels": {DEPLOY_PLUGIN: "true", DEPLOY_GFD: "false"}}})
    # the device plugin, placed by its deploy label as the role deploys it
    ns = "maint-" + uuid.uuid4().hex[:6]
    rc, deployed = run_module("kubegpu.cluster.device_plugin_deploy", dict(
        kubeconfig=sandbox.kubeconfig, namespace=ns, node_selector={"kubernetes.io/hostname": node}, wait=False))
    assert rc == 0, deployed
    try:
        wait_for(sandbox.core.list_namespaced_pod, ns, field_selector="spec.nodeName=%s" % node,
                 predicate=lambda p: p.status.phase == "Running", timeout=60, describe="plugin pod on the node")
        for body in (pod("trainer", node, {"nvidia.com/gpu": "1"}), pod("sidecar", node, runtime_class=runtime_class),
                     pod("web", node)):
            sandbox.core.create_namespaced_pod(namespace, body)
            running(sandbox, namespace, body["metadata"]["name"])

        classes = [runtime_class]  # the RuntimeClass of this test's own, in place of nvidia
        preview = maintain(sandbox, node, check=True, runtime_classes=classes)
        assert preview["changed"] is True
        assert sorted(preview["evicted"]) == ["%s/sidecar" % namespace, "%s/trainer" % namespace]
        assert not sandbox.core.read_node(node).spec.unschedulable  # check mode changed nothing

        drained = maintain(sandbox, node, mig_config_state="pending", runtime_classes=classes)
        assert drained["changed"] is True and drained["cordoned_by_us"] is True and drained["admin_cordoned"] is False
        assert drained["paused_labels"] == [DEPLOY_PLUGIN]  # "false" is an admin's and is left alone
        seen = sandbox.core.read_node(node)
        assert seen.spec.unschedulable is True
        assert seen.metadata.labels[DEPLOY_PLUGIN] == "paused-for-mig-change"
        assert seen.metadata.labels[DEPLOY_GFD] == "false"
        assert seen.metadata.labels["nvidia.com/mig.config.state"] == "pending"
        assert json.loads(seen.metadata.annotations[ANNOTATION])["cordoned"] is True
        assert names(sandbox, namespace) == ["web"]  # the GPU pods were evicted, the other one stays
        assert not [p for p in sandbox.core.list_namespaced_pod(ns).items if not p.metadata.deletion_timestamp]

        again = maintain(sandbox, node, mig_config_state="pending", runtime_classes=classes)
        assert again["changed"] is False, again

        restored = maintain(sandbox, node, state="restored", mig_config_state="success")
        assert restored["changed"] is True and restored["uncordoned"] is True
        seen = sandbox.core.read_node(node)
        assert not seen.spec.unschedulable
        assert seen.metadata.labels[DEPLOY_PLUGIN] == "true" and seen.metadata.labels[DEPLOY_GFD] == "false"
        assert seen.metadata.labels["nvidia.com/mig.config.state"] == "success"
        assert ANNOTATION not in (seen.metadata.annotations or {})
        wait_for(sandbox.core.list_namespaced_pod, ns, field_selector="spec.nodeName=%s" % node,
                 predicate=lambda p: p.status.phase == "Running", timeout=60, describe="the plugin back on the node")
        assert maintain(sandbox, node, state="restored", mig_config_state="success")[
            "changed"] is False
    finally:
        run_module("kubegpu.cluster.device_plugin_deploy", dict(kubeconfig=sandbox.kubeconfig, namespace=ns,
                                                                state="absent"))


def test_an_admin_cordon_stays_and_a_budget_that_forbids_eviction_stops_the_drain(sandbox, test_nodes, namespace):
    node = test_nodes(1, profile="t4")[0]
    sandbox.core.patch_node(node, {"spec": {"unschedulable": True}})
    sandbox.core.create_namespaced_pod(namespace, pod("only", node, {"nvidia.com/gpu": "1"}, labels={"app": "only"}))
    running(sandbox, namespace, "only")
    policy = client.PolicyV1Api(sandbox.api_client)
    policy.create_namespaced_pod_disruption_budget(namespace, {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "keep-one"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "only"}}}})
    wait_for(policy.list_namespaced_pod_disruption_budget, namespace,
             predicate=lambda b: b.status is not None and b.status.expected_pods == 1, timeout=60,
             describe="the budget counts the pod")

    blocked = maintain(sandbox, node, expect_rc=2, wait_timeout=3)
    assert "could not be evicted in time" in blocked["msg"] and "PodDisruptionBudget" in blocked["msg"], blocked["msg"]
    assert names(sandbox, namespace) == ["only"]
    assert json.loads(sandbox.core.read_node(node).metadata.annotations[ANNOTATION])["cordoned"] is False

    policy.delete_namespaced_pod_disruption_budget("keep-one", namespace)
    drained = maintain(sandbox, node)
    assert drained["admin_cordoned"] is True and drained["cordoned_by_us"] is False
    assert drained["evicted"] == ["%s/only" % namespace]
    restored = maintain(sandbox, node, state="restored")
    assert restored["uncordoned"] is False
    assert sandbox.core.read_node(node).spec.unschedulable is True  # the admin's cordon stays


def test_a_node_not_in_the_cluster_is_named(sandbox):
    result = maintain(sandbox, "kg-no-such-node", expect_rc=2)
    assert "node kg-no-such-node is not in the cluster" in result["msg"]
