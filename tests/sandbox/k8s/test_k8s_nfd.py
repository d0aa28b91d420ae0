# SPDX-License-Identifier: GPL-3.0-or-later
"""The simulator plays node feature discovery and GPU feature discovery through the API, only where their pods run:
nfd-worker and GFD write NodeFeature objects, nfd-master turns them into node labels with its rules (allowed
namespaces, the feature-labels annotation, removal of what it set before), and nothing is labelled without a master.
The NodeFeature CRD is installed here (bare, as an NFD the cluster already runs would have it)."""

import json
import time
import uuid

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from ansible_collections.kubegpu.cluster.plugins.module_utils._nfd import manifests as nfd_manifests
from k8s_helpers import PLUGIN_IMAGE, delete_crds, delete_quietly, wait_for
from sandbox.k8s.devsim import gfd as sim_gfd
from sandbox.k8s.devsim.rules import parse_config

GROUP, VERSION, PLURAL = "nfd.k8s-sigs.io", "v1alpha1", "nodefeatures"
NFD_IMAGE = "registry.k8s.io/nfd/node-feature-discovery:v0.19.0"
ANNOTATION = "nfd.node.kubernetes.io/feature-labels"
TS4 = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n"
MASTER_CONF = json.dumps({"extraLabelNs": ["nvidia.com", "allowed.kubernetes.io"], "denyLabelNs": ["denied.example.com"]})
WORKER_CONF = json.dumps({"sources": {"pci": {"deviceClassWhitelist": ["02", "03"], "deviceLabelFields": ["vendor"]}}})


@pytest.fixture(scope="module")
def crds(sandbox):
    """The NFD CRDs, installed bare and established; removed afterwards (with every NodeFeature)."""
    ext = client.ApiextensionsV1Api(sandbox.api_client)
    names = []
    for crd in nfd_manifests.crds():
        try:
            ext.create_custom_resource_definition(crd)
            names.append(crd["metadata"]["name"])
        except ApiException as exc:
            assert exc.status == 409, exc
    for name in [c["metadata"]["name"] for c in nfd_manifests.crds()]:
        wait_for(ext.list_custom_resource_definition, field_selector="metadata.name=" + name, describe=name + " established",
                 predicate=lambda c: any(x.type == "Established" and x.status == "True" for x in c.status.conditions or []))
    yield client.CustomObjectsApi(sandbox.api_client)
    delete_crds(sandbox, [c for c in nfd_manifests.crds() if c["metadata"]["name"] in names])


def pod(name, node, image, command, args=(), mounts=(), volumes=(), env=()):
    container = {"name": "c", "image": image, "command": list(command), "args": list(args),
                 "env": [{"name": k, "value": v} for k, v in env], "volumeMounts": list(mounts)}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [container], "volumes": list(volumes),
                     "tolerations": [{"operator": "Exists"}]}}


def config_pod(name, node, image, command, configmap, key, mount, **kwargs):
    return pod(name, node, image, command, mounts=[{"name": "conf", "mountPath": mount, "readOnly": True}],
               volumes=[{"name": "conf", "configMap": {"name": configmap, "items": [{"key": key, "path": key}]}}],
               **kwargs)


def wait_feature(custom, namespace, name, predicate, timeout=30):
    """Watch the NodeFeature ``namespace/name`` until ``predicate(obj or None)``; return it."""
    deadline = time.monotonic() + timeout
    selector = "metadata.name=" + name
    last = None
    while time.monotonic() < deadline:
        listing = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, field_selector=selector)
        last = (listing.get("items") or [None])[0]
        if predicate(last):
            return last
        stream = watch.Watch()
        for event in stream.stream(custom.list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL,
                                   field_selector=selector, resource_version=listing["metadata"]["resourceVersion"],
                                   timeout_seconds=max(1, int(deadline - time.monotonic()))):
            last = None if event["type"] == "DELETED" else event["object"]
            if predicate(last):
                stream.stop()
                return last
    raise AssertionError("timed out waiting for NodeFeature %s/%s; last seen: %s" % (namespace, name, last))


def wait_node(sandbox, name, predicate, describe):
    return wait_for(sandbox.core.list_node, field_selector="metadata.name=" + name, predicate=predicate,
                    describe=describe)


@pytest.fixture(scope="module")
def fleet(sandbox, crds):
    """A v100x4 node and a node without GPU, a namespace with the NFD and GPU feature discovery configs."""
    from sandbox.k8s import cluster, nodes  # pylint: disable=import-outside-toplevel
    namespace = "nfd-sim-" + uuid.uuid4().hex[:6]
    sandbox.core.create_namespace({"metadata": {"name": namespace}})
    made = []
    for profile in ("v100x4", None):
        manifest = nodes.scale_manifests(1, sandbox.kube_version, profile, prefix="kg-test-" + uuid.uuid4().hex[:6])[0]
        cluster.create_nodes(sandbox.layout, [manifest])
        made.append(manifest["metadata"]["name"])
    for name, key, text in (("master-conf", "nfd-master.conf", MASTER_CONF), ("worker-conf", "nfd-worker.conf", WORKER_CONF),
                            ("plugin-conf", "config.yaml", TS4)):
        sandbox.core.create_namespaced_config_map(namespace, {"metadata": {"name": name}, "data": {key: text}})
    yield {"namespace": namespace, "gpu": made[0], "cpu": made[1], "custom": crds}
    delete_quietly(sandbox.core.delete_namespace, namespace)
    for name in made:
        delete_quietly(sandbox.core.delete_node, name)


def test_workers_and_gfd_publish_and_only_a_master_labels(sandbox, fleet):
    ns, gpu, cpu, custom = fleet["namespace"], fleet["gpu"], fleet["cpu"], fleet["custom"]
    for node in (gpu, cpu):
        sandbox.core.create_namespaced_pod(ns, config_pod("worker-" + node[-12:], node, NFD_IMAGE, ["nfd-worker"],
                                                          "worker-conf", "nfd-worker.conf",
                                                          "/etc/kubernetes/node-feature-discovery"))
    sandbox.core.create_namespaced_pod(ns, config_pod("gfd", gpu, PLUGIN_IMAGE, ["gpu-feature-discovery"], "plugin-conf",
                                                      "config.yaml", "/config", env=[("CONFIG_FILE", "/config/config.yaml")]))
    worker = wait_feature(custom, ns, gpu, lambda o: o is not None)
    assert worker["spec"]["labels"] == {"pci-10de.present": "true"}  # the worker config: classes 02/03, vendor only
    assert worker["metadata"]["labels"] == {"nfd.node.kubernetes.io/node-name": gpu}
    assert [o["kind"] for o in worker["metadata"]["ownerReferences"]] == ["Pod"]
    assert worker["spec"]["features"]["instances"]["pci.device"]["elements"][0]["attributes"]["device"] == "1db4"
    assert wait_feature(custom, ns, cpu, lambda o: o is not None)["spec"]["labels"] == {}
    published = wait_feature(custom, ns, "nvidia-features-for-" + gpu, lambda o: o is not None)
    with open(sandbox_profile("v100x4")) as handle:
        profile = json.load(handle)
    started = sandbox.core.read_namespaced_pod("gfd", ns).status.start_time
    assert published["spec"]["labels"] == sim_gfd.labels(profile, parse_config(TS4), started)
    assert published["spec"]["labels"]["nvidia.com/gpu.product"] == "Tesla-V100-PCIE-16GB-SHARED"
    # No nfd-master yet: nothing on the node.
    labels = sandbox.core.read_node(gpu).metadata.labels
    assert not [k for k in labels if k.startswith(("feature.node.kubernetes.io/", "nvidia.com/"))]

    sandbox.core.create_namespaced_pod(ns, config_pod("master", cpu, NFD_IMAGE, ["nfd-master"], "master-conf",
                                                      "nfd-master.conf", "/etc/kubernetes/node-feature-discovery"))
    node = wait_node(sandbox, gpu, lambda n: "nvidia.com/gpu.product" in (n.metadata.labels or {}), "GFD's labels")
    want = dict(published["spec"]["labels"], **{"feature.node.kubernetes.io/pci-10de.present": "true"})
    assert dict((k, v) for k, v in node.metadata.labels.items() if k in want or k.startswith("nvidia.com/")) == want
    assert node.metadata.annotations[ANNOTATION] == ",".join(sorted(k.replace("feature.node.kubernetes.io/", "")
                                                                    for k in want))
    managers = [f.manager for f in node.metadata.managed_fields if "nvidia.com/gpu.product" in json.dumps(f.fields_v1)]
    assert managers == ["nfd-master"]
    assert "feature.node.kubernetes.io/pci-10de.present" not in sandbox.core.read_node(cpu).metadata.labels


def test_master_rules_and_removal(sandbox, fleet):
    ns, gpu, custom = fleet["namespace"], fleet["gpu"], fleet["custom"]
    wait_node(sandbox, gpu, lambda n: "nvidia.com/gpu.product" in (n.metadata.labels or {}), "GFD's labels")
    sandbox.core.patch_node(gpu, {"metadata": {"labels": {"team": "ml"}}})  # not NFD's: it must stay
    third = {"apiVersion": GROUP + "/" + VERSION, "kind": "NodeFeature",
             "metadata": {"name": "third-party", "labels": {"nfd.node.kubernetes.io/node-name": gpu}},
             "spec": {"labels": {"example.com/ok": "1", "allowed.kubernetes.io/a": "1", "kubernetes.io/no": "1",
                                 "other.kubernetes.io/no": "1", "denied.example.com/no": "1", "plain": "yes",
                                 "example.com/bad-value": "not valid!"}}}
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, third)
    node = wait_node(sandbox, gpu, lambda n: "example.com/ok" in (n.metadata.labels or {}), "third-party labels")
    labels = node.metadata.labels
    assert labels["allowed.kubernetes.io/a"] == "1" and labels["feature.node.kubernetes.io/plain"] == "yes"
    for key in ("kubernetes.io/no", "other.kubernetes.io/no", "denied.example.com/no", "example.com/bad-value"):
        assert key not in labels, key

    # GFD that stops leaves its NodeFeature (no owner references), so its labels stay; GFD that runs would rewrite it.
    sandbox.core.delete_namespaced_pod("gfd", ns, grace_period_seconds=0)
    wait_pod_gone(sandbox, ns, "gfd")
    assert wait_feature(custom, ns, "nvidia-features-for-" + gpu, lambda o: o is not None)
    custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "nvidia-features-for-" + gpu)
    node = wait_node(sandbox, gpu, lambda n: "nvidia.com/gpu.product" not in (n.metadata.labels or {}), "GFD's labels gone")
    labels = node.metadata.labels
    assert not [k for k in labels if k.startswith("nvidia.com/")]
    assert labels["team"] == "ml" and labels["example.com/ok"] == "1"
    assert labels["feature.node.kubernetes.io/pci-10de.present"] == "true"
    # The worker's NodeFeature goes with its pod (owner reference, Kubernetes' garbage collector), and so do its labels.
    sandbox.core.delete_namespaced_pod("worker-" + gpu[-12:], ns, grace_period_seconds=0)
    wait_pod_gone(sandbox, ns, "worker-" + gpu[-12:])
    wait_feature(custom, ns, gpu, lambda o: o is None, timeout=60)
    custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "third-party")
    node = wait_node(sandbox, gpu, lambda n: ANNOTATION not in (n.metadata.annotations or {}), "every NFD label gone")
    assert not [k for k in node.metadata.labels if k.startswith(("feature.node.kubernetes.io/", "example.com/"))]
    assert node.metadata.labels["team"] == "ml"


def wait_pod_gone(sandbox, namespace, name, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        listing = sandbox.core.list_namespaced_pod(namespace, field_selector="metadata.name=" + name)
        if not listing.items:
            return
        for event in watch.Watch().stream(sandbox.core.list_namespaced_pod, namespace,
                                          field_selector="metadata.name=" + name,
                                          resource_version=listing.metadata.resource_version,
                                          timeout_seconds=max(1, int(deadline - time.monotonic()))):
            if event["type"] == "DELETED":
                return
    raise AssertionError("pod %s/%s still there after %ss" % (namespace, name, timeout))


def sandbox_profile(name):
    from sandbox.k8s import paths  # pylint: disable=import-outside-toplevel
    return str(paths.PROFILES_DIR / (name + ".json"))
