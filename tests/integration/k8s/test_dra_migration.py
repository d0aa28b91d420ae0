# SPDX-License-Identifier: GPL-3.0-or-later
"""dra_migration against the sandbox API server, on a kwok node of the test's own: the device plugin deployed by the
collection leaves the node through its deploy label, the DRA kubelet plugin's DaemonSet arrives through its own, and
the way back undoes it; capacity and ResourceSlice counts are checked at each step, and reruns change nothing.

On a kwok node no kubelet runs: the sandbox's device-manager simulator plays the kubelet's part for both plugins
(sandbox/k8s/devsim: ``nvidia.com/gpu`` while the device plugin's pod runs; NVIDIA's ResourceSlice while a pod of the
DRA driver's image runs ``gpu-kubelet-plugin``, devsim/dra.py). The same migration on a real kubelet with the stand-in
plugins is tests/sandbox/test_kubelet_dra_e2e.py.

These tests run on a control plane of their own (module scope): their DeviceClass maps nvidia.com/gpu to DRA
(extendedResourceName), which would change how every other test's nvidia.com/gpu pods are scheduled."""

import uuid

import pytest
from kubernetes import client

from ansible_cli import run_module, run_playbook
from k8s_helpers import Sandbox, wait_for, wait_gone

DEPLOY_PLUGIN = "nvidia.com/gpu.deploy.device-plugin"
DEPLOY_DRA = "nvidia.com/gpu.deploy.dra-driver"


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):  # pylint: disable=redefined-outer-name
    """Shadows the session's sandbox for this file: a control plane of its own (kwok, devsim), down at the end."""
    from sandbox.k8s import cluster  # pylint: disable=import-outside-toplevel
    base = tmp_path_factory.mktemp("dra-migration-cp")
    layout = cluster.Layout(base / "state", base / "kubeconfig")
    state = cluster.up(layout, timeout=120, fleet=False)
    try:
        yield Sandbox(layout, state)
    finally:
        cluster.down(layout)


def migrate(sandbox, nodes, expect_rc=0, check=False, **options):
    args = dict(kubeconfig=sandbox.kubeconfig, nodes=nodes, wait_timeout=90)
    args.update(options)
    rc, result = run_module("kubegpu.cluster.dra_migration", args, check=check)
    assert rc == expect_rc, result
    return result


def labels(sandbox, node):
    return sandbox.core.read_node(node).metadata.labels or {}


def slices(resource, node):
    found = resource.list_resource_slice(field_selector="spec.driver=gpu.nvidia.com,spec.nodeName=%s" % node).items
    return sorted(d.name for s in found for d in s.spec.devices or [])


@pytest.fixture
def dra_side(sandbox):
    """NVIDIA's DRA driver as the collection deploys it (dra_driver_deploy: its kubelet-plugin DaemonSet on the nodes
    labelled for DRA, the DeviceClass gpu.nvidia.com with extendedResourceName nvidia.com/gpu on 1.36), in a
    namespace of the test's own; removed afterwards."""
    ns = "dra-" + uuid.uuid4().hex[:6]
    rc, deployed = run_module("kubegpu.cluster.dra_driver_deploy", dict(kubeconfig=sandbox.kubeconfig, namespace=ns,
                                                                        wait=False))
    assert rc == 0, deployed
    yield client.ResourceV1Api(sandbox.api_client)
    rc, gone = run_module("kubegpu.cluster.dra_driver_deploy", dict(kubeconfig=sandbox.kubeconfig, namespace=ns,
                                                                    state="absent", wait_timeout=60))
    assert rc == 0, gone


MIGRATE_PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: kubegpu.cluster.dra
        tasks_from: migrate
"""


def test_a_node_moves_to_dra_and_back_with_capacity_and_slices_checked_at_each_step(
        sandbox, test_nodes, namespace, dra_side, tmp_path):
    node = test_nodes(1, profile="h100", runtime="containerd://2.4.2")[0]
    sandbox.core.patch_node(node, {"metadata": {"labels": {DEPLOY_PLUGIN: "true", "nvidia.com/gpu.count": "1"}}})
    ns = "dp-" + uuid.uuid4().hex[:6]
    rc, deployed = run_module("kubegpu.cluster.device_plugin_deploy", dict(
        kubeconfig=sandbox.kubeconfig, namespace=ns, node_selector={"kubernetes.io/hostname": node}, wait=False))
    assert rc == 0, deployed
    try:
        wait_for(sandbox.core.list_node, field_selector="metadata.name=%s" % node,
                 predicate=lambda n: (n.status.allocatable or {}).get("nvidia.com/gpu") == "1", timeout=60,
                 describe="the device plugin's nvidia.com/gpu on the node")

        # a pod holding the GPU: refused before any change, naming it
        sandbox.core.create_namespaced_pod(namespace, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer"},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1, "containers": [{
                "name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})
        refused = migrate(sandbox, [node], expect_rc=2)
        assert "%s/trainer" % namespace in refused["msg"] and "gpu_node_maintenance" in refused["msg"]
        assert labels(sandbox, node)[DEPLOY_PLUGIN] == "true" and DEPLOY_DRA not in labels(sandbox, node)
        sandbox.core.delete_namespaced_pod("trainer", namespace, grace_period_seconds=0)
        wait_gone(sandbox.core.list_namespaced_pod, namespace, field_selector="metadata.name=trainer", timeout=60,
                  describe="the trainer pod")

        preview = migrate(sandbox, [node], check=True)
        assert preview["changed"] is True and preview["moved"] == [node]
        assert preview["nodes"][node]["kind"] == "device_plugin"
        assert labels(sandbox, node)[DEPLOY_PLUGIN] == "true"  # check mode changed nothing

        # the dra role's `migrate` entry point: the move, then the claim-based proof on the node
        playbook = tmp_path / "migrate.yml"
        playbook.write_text(MIGRATE_PLAY)
        code, tasks = run_playbook(playbook, {"dra_kubeconfig": sandbox.kubeconfig, "dra_migrate_nodes": [node],
                                              "dra_proof_timeout": 60})
        assert code == 0, tasks
        results = dict(tasks)
        moved = results["Move the nodes between the device plugin and DRA, and wait until each has arrived"]
        proved = results["Prove each node moved to DRA with a Job whose pod gets its GPU through a ResourceClaimTemplate"]
        assert proved["results"][0]["passed"] is True and proved["results"][0]["resource"] == "claim/gpu.nvidia.com"
        assert moved["changed"] is True
        state = moved["nodes"][node]
        assert state["kind"] == "dra" and state["arrived"] is True, state
        assert state["slice_devices"] == ["gpu-0"] and slices(dra_side, node) == ["gpu-0"]
        assert all(v == 0 for v in state["allocatable"].values()), state
        seen = labels(sandbox, node)
        assert seen[DEPLOY_PLUGIN] == "false" and seen[DEPLOY_DRA] == "true"
        assert moved["diff"]["after"][node] == {DEPLOY_PLUGIN: "false", DEPLOY_DRA: "true"}

        again = migrate(sandbox, [node])
        assert again["changed"] is False and again["nodes"][node]["kind"] == "dra", again

        # the claim-based proof: its pod's ResourceClaim is allocated on the node by the sandbox's kube-scheduler
        rc, proved = run_module("kubegpu.cluster.gpu_proof", dict(
            kubeconfig=sandbox.kubeconfig, device_class="gpu.nvidia.com", nodes=[node], timeout=60,
            namespace="proof-" + uuid.uuid4().hex[:6]))
        assert rc == 0, proved
        assert proved["results"][0]["resource"] == "claim/gpu.nvidia.com" and proved["results"][0]["passed"] is True
        assert proved["allocatable"][node]["claim/gpu.nvidia.com"] == 1

        # an unmodified pod asking for nvidia.com/gpu is scheduled there through DRA (KEP-5004: the DeviceClass's
        # extendedResourceName; the node's allocatable for it is 0)
        sandbox.core.create_namespaced_pod(namespace, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "unmodified"},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "terminationGracePeriodSeconds": 1,
                     "tolerations": [{"operator": "Exists"}],
                     "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})
        bound = wait_for(sandbox.core.list_namespaced_pod, namespace, field_selector="metadata.name=unmodified",
                         predicate=lambda p: p.spec.node_name == node, timeout=60, describe="the unmodified pod bound")
        assert bound.status.extended_resource_claim_status is not None, bound.status
        sandbox.core.delete_namespaced_pod("unmodified", namespace, grace_period_seconds=0)
        wait_gone(sandbox.core.list_namespaced_pod, namespace, field_selector="metadata.name=unmodified", timeout=60,
                  describe="the unmodified pod")

        back = migrate(sandbox, [node], to="device_plugin")
        assert back["changed"] is True
        state = back["nodes"][node]
        assert state["kind"] == "device_plugin" and state["arrived"] is True, state
        assert state["allocatable"]["nvidia.com/gpu"] == 1 and state["slice_devices"] == []
        assert slices(dra_side, node) == []
        seen = labels(sandbox, node)
        assert seen[DEPLOY_PLUGIN] == "true" and DEPLOY_DRA not in seen  # our label gone, not set to false
        assert migrate(sandbox, [node], to="device_plugin")["changed"] is False

        # back on the device plugin, no device of the class is there: the claim-based proof fails, saying why
        rc, failed = run_module("kubegpu.cluster.gpu_proof", dict(
            kubeconfig=sandbox.kubeconfig, device_class="gpu.nvidia.com", nodes=[node], timeout=5,
            namespace="proof-" + uuid.uuid4().hex[:6]))
        assert rc == 2 and failed["results"][0]["passed"] is False, failed
        assert "cannot allocate all claims" in failed["msg"] and "ResourceSlices" in failed["msg"], failed["msg"]
    finally:
        run_module("kubegpu.cluster.device_plugin_deploy", dict(kubeconfig=sandbox.kubeconfig, namespace=ns,
                                                                state="absent"))


def test_a_node_whose_runtime_cannot_do_cdi_is_refused_before_any_change(sandbox, test_nodes, dra_side):
    node = test_nodes(1, profile="h100", runtime="containerd://1.6.20")[0]
    other = test_nodes(1, profile="h100", runtime="containerd://2.4.2")[0]
    refused = migrate(sandbox, [other, node], expect_rc=2, wait=False)
    assert "node %s: its runtime is containerd://1.6.20" % node in refused["msg"]
    assert other not in refused["msg"]
    for name in (node, other):  # the other node was not moved either: nothing changes before every check passed
        assert DEPLOY_DRA not in labels(sandbox, name)


def test_an_unknown_node_is_named(sandbox, dra_side):
    refused = migrate(sandbox, ["no-such-node-" + uuid.uuid4().hex[:4]], expect_rc=2)
    assert "no such node: no-such-node-" in refused["msg"]
