# SPDX-License-Identifier: GPL-3.0-or-later
"""dra_driver_deploy end to end: `ansible localhost -m kubegpu.cluster.dra_driver_deploy` against the sandbox's real
kube-apiserver (Kubernetes 1.36, resource.k8s.io/v1 served), on kwok nodes of this test's own.

kwok nodes run no kubelet and no DRA kubelet plugin: THIS TEST PLAYS NVIDIA's KUBELET PLUGIN. It publishes each node's
ResourceSlices itself (driver gpu.nvidia.com, one full GPU per device, named gpu-<minor> with the attribute
type=gpu, as cmd/gpu-kubelet-plugin/deviceinfo.go does), after the module has applied the DaemonSet and while it
watches, so that the module's bounded watch is what sees them arrive. The real plugin, on a kubelet node, is the
sandbox's stand-in (dra-sandbox).

DeviceClasses are cluster-wide and named by the driver (gpu.nvidia.com), so one deployment of this module exists per
cluster: the tests here share it, one after the other, in their own namespace, and remove it at the end.
"""

import time
import uuid

import pytest
from kubernetes import dynamic

from ansible_cli import BackgroundModule, run_module
from k8s_helpers import delete_quietly, wait_for

MODULE = "kubegpu.cluster.dra_driver_deploy"
DRA_LABEL = "nvidia.com/gpu.deploy.dra-driver"
DP_LABEL = "nvidia.com/gpu.deploy.device-plugin"
COUNT_LABEL = "nvidia.com/gpu.count"
DS = "dra-driver-nvidia-gpu-kubelet-plugin"


def _actions(result):
    return dict(("%s/%s" % (o["kind"], o["name"]), o["action"]) for o in result["objects"])


@pytest.fixture
def dra(sandbox, test_nodes):
    """Two kwok nodes labelled for DRA (2 GPUs and 1 GPU by their gpu.count labels), a namespace name, a helper to
    publish ResourceSlices as the kubelet plugin would; everything removed afterwards."""
    ns = "dra-" + uuid.uuid4().hex[:8]
    nodes = test_nodes(2)
    for name, count in zip(nodes, ("2", "1")):
        sandbox.core.patch_node(name, {"metadata": {"labels": {DRA_LABEL: "true", COUNT_LABEL: count}}})
    slices = dynamic.DynamicClient(sandbox.api_client).resources.get(api_version="resource.k8s.io/v1", kind="ResourceSlice")
    published = []

    def publish(node, gpus):
        """What NVIDIA's kubelet plugin publishes for ``node``: one slice, a pool named after the node."""
        body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                "metadata": {"name": "%s-gpu.nvidia.com" % node},
                "spec": {"driver": "gpu.nvidia.com", "nodeName": node,
                         "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                         "devices": [{"name": "gpu-%d" % minor, "attributes": {"type": {"string": "gpu"}}}
                                     for minor in range(gpus)]}}
        slices.create(body=body)
        published.append(body["metadata"]["name"])

    def run(check=False, diff=False, **options):
        args = dict(kubeconfig=sandbox.kubeconfig, namespace=ns, wait_timeout=60)
        args.update(options)
        return run_module(MODULE, args, check=check, diff=diff)

    yield nodes, ns, publish, run
    run_module(MODULE, dict(kubeconfig=sandbox.kubeconfig, namespace=ns, state="absent", wait_timeout=60))
    for name in published:
        delete_quietly(slices.delete, name=name)
    for name in nodes:
        labels = {DRA_LABEL: None, COUNT_LABEL: None, DP_LABEL: None}
        delete_quietly(sandbox.core.patch_node, name, {"metadata": {"labels": labels}})


def test_deploy_check_diff_idempotent_watch_and_absent(sandbox, dra):
    nodes, ns, publish, run = dra

    # check mode: what would be created, nothing written
    rc, check = run(check=True, diff=True)
    assert rc == 0, check
    assert check["changed"] and check["api_version"] == "resource.k8s.io/v1" and check["kubernetes"] == "1.36"
    assert check["extended_resource"] is True  # DRAExtendedResource is beta and on in 1.36
    assert set(_actions(check).values()) == {"created"}, check["objects"]
    assert "DaemonSet/%s/%s" % (ns, DS) in check["diff"]["after"]
    assert not [d for d in sandbox.apps.list_daemon_set_for_all_namespaces().items if d.metadata.name == DS]

    # the real run: the module applies, waits for the rollout, then watches the slices this test publishes
    args = dict(kubeconfig=sandbox.kubeconfig, namespace=ns, wait_timeout=90)
    with BackgroundModule(MODULE, args, diff=True) as module:
        wait_for(sandbox.apps.list_namespaced_daemon_set, ns, predicate=lambda obj: obj.metadata.name == DS, timeout=60,
                 describe="the module's DaemonSet")
        time.sleep(1)  # the module is in its watch by now, or lists the slices when it gets there: both are the watch
        assert module.running(), module.result(timeout=5)
        publish(nodes[0], 2)
        publish(nodes[1], 1)
        rc, first = module.result(timeout=120)
    assert rc == 0, first
    assert first["changed"] and first["slices"] == {nodes[0]: ["gpu-0", "gpu-1"], nodes[1]: ["gpu-0"]}
    assert sorted(first["nodes"]) == sorted(nodes)
    ds = sandbox.apps.read_namespaced_daemon_set(DS, ns)
    assert ds.spec.template.spec.node_selector == {DRA_LABEL: "true"}
    classes = dynamic.DynamicClient(sandbox.api_client).resources.get(api_version="resource.k8s.io/v1", kind="DeviceClass")
    gpu_class = classes.get(name="gpu.nvidia.com").to_dict()
    assert gpu_class["spec"]["extendedResourceName"] == "nvidia.com/gpu"

    # idempotent: check mode and a real rerun change nothing
    rc, again_check = run(check=True, diff=True)
    assert rc == 0 and not again_check["changed"], again_check
    rc, again = run(diff=True)
    assert rc == 0 and not again["changed"], again
    assert set(_actions(again).values()) == {"unchanged"}
    assert again["diff"] == {"before": {}, "after": {}}

    # a node that lists fewer GPUs than its label says: the bounded watch ends naming it
    sandbox.core.patch_node(nodes[1], {"metadata": {"labels": {COUNT_LABEL: "3"}}})
    started = time.monotonic()
    rc, short = run(wait_timeout=5)
    assert rc != 0 and time.monotonic() - started < 60, short
    assert "node %s: its ResourceSlices of gpu.nvidia.com list gpu-0, expected 3" % nodes[1] in short["msg"], short
    assert nodes[0] not in short["msg"].split("list their GPUs:")[1]
    sandbox.core.patch_node(nodes[1], {"metadata": {"labels": {COUNT_LABEL: "1"}}})

    # a node labelled for both plugins: refused before any write, naming it
    generation = sandbox.apps.read_namespaced_daemon_set(DS, ns).metadata.generation
    sandbox.core.patch_node(nodes[0], {"metadata": {"labels": {DP_LABEL: "true"}}})
    rc, both = run(image="registry.example.com/dra:v0")  # a change it would have made
    assert rc != 0 and "node %s is labelled for both" % nodes[0] in both["msg"], both
    assert sandbox.apps.read_namespaced_daemon_set(DS, ns).metadata.generation == generation
    sandbox.core.patch_node(nodes[0], {"metadata": {"labels": {DP_LABEL: None}}})

    # absent: everything of ours goes; a second absent changes nothing
    rc, gone = run(state="absent")
    assert rc == 0 and gone["changed"], gone
    assert set(_actions(gone).values()) == {"deleted"}
    assert not [c for c in classes.get().to_dict()["items"] if c["metadata"]["name"] in ("gpu.nvidia.com", "mig.nvidia.com")]
    rc, gone_again = run(state="absent")
    assert rc == 0 and not gone_again["changed"], gone_again
