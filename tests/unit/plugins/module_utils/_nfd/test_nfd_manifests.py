# SPDX-License-Identifier: GPL-3.0-or-later
"""Node feature discovery's objects as data (plugins/module_utils/_nfd/manifests.py): what is rendered from the
options, the checks before any API call, least-privilege RBAC, the hardened security context, detection of an NFD the
cluster runs. The objects against a real API server: tests/integration/k8s/test_node_feature_discovery.py."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

import pytest

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import OptionError
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import objects as k8s_objects
from ansible_collections.kubegpu.cluster.plugins.module_utils._nfd import constants, deployment, manifests

NVIDIA = {"extra_label_ns": ["nvidia.com"], "pci_device_classes": ["02", "03"], "pci_label_fields": ["vendor"],
          "worker_tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}


def by_key(objs):
    return dict((k8s_objects.key(o), o) for o in objs)


def test_render_what_the_device_plugin_chart_configures():
    objs = by_key(manifests.render(NVIDIA))
    assert list(objs)[:3] == ["CustomResourceDefinition/nodefeatures.nfd.k8s-sigs.io",
                              "CustomResourceDefinition/nodefeaturerules.nfd.k8s-sigs.io",
                              "CustomResourceDefinition/nodefeaturegroups.nfd.k8s-sigs.io"]
    master_conf = objs["ConfigMap/node-feature-discovery/nfd-master-conf"]["data"]["nfd-master.conf"]
    worker_conf = objs["ConfigMap/node-feature-discovery/nfd-worker-conf"]["data"]["nfd-worker.conf"]
    assert json.loads(master_conf) == {"extraLabelNs": ["nvidia.com"]}
    assert json.loads(worker_conf) == {"sources": {"pci": {"deviceClassWhitelist": ["02", "03"],
                                                           "deviceLabelFields": ["vendor"]}}}
    master = objs["Deployment/node-feature-discovery/nfd-master"]
    worker = objs["DaemonSet/node-feature-discovery/nfd-worker"]
    for workload, program in ((master, "nfd-master"), (worker, "nfd-worker")):
        pod = workload["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert container["image"] == "registry.k8s.io/nfd/node-feature-discovery:v0.19.0"
        assert container["command"] == [program]
        assert container["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                                "readOnlyRootFilesystem": True, "runAsNonRoot": True}
        assert all(m.get("readOnly") for m in container["volumeMounts"])
        assert workload["spec"]["selector"]["matchLabels"].items() <= workload["spec"]["template"]["metadata"]["labels"].items()
    assert master["spec"]["replicas"] == 1
    assert worker["spec"]["template"]["spec"]["tolerations"] == NVIDIA["worker_tolerations"]
    assert master["spec"]["template"]["spec"]["tolerations"] == constants.MASTER_TOLERATIONS
    for obj in objs.values():
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "kubegpu.cluster"
        assert labels["app.kubernetes.io/name"] == "node-feature-discovery"
        if "namespace" not in obj["metadata"]:  # cluster-scoped: of the deployment in that namespace
            assert labels[k8s_objects.LABEL_OWNER_NAMESPACE] == "node-feature-discovery"


def test_least_privilege_rbac():
    objs = by_key(manifests.render({}))
    master = objs["ClusterRole/node-feature-discovery-nfd-master"]["rules"]
    assert not any("*" in r["verbs"] or "*" in r["resources"] for r in master)
    assert not any(r["resources"] in (["leases"], ["namespaces"]) for r in master)
    writes = sorted((tuple(r["resources"]), tuple(r["verbs"])) for r in master if set(r["verbs"]) & {"patch", "update"})
    assert writes == [(("nodefeaturegroups/status",), ("patch", "update")), (("nodes",), ("get", "list", "patch", "update")),
                      (("nodes/status",), ("patch", "update"))]
    worker = objs["Role/node-feature-discovery/nfd-worker"]
    assert worker["metadata"]["namespace"] == "node-feature-discovery"  # a Role: its namespace's NodeFeatures only
    assert [r["resources"] for r in worker["rules"]] == [["nodefeatures"], ["pods"]]
    binding = objs["RoleBinding/node-feature-discovery/nfd-worker"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "nfd-worker", "namespace": "node-feature-discovery"}]


def test_defaults_keep_nfds_own_config_and_a_config_change_rolls_the_pods():
    plain = by_key(manifests.render({}))
    assert plain["ConfigMap/node-feature-discovery/nfd-worker-conf"]["data"] == {"nfd-worker.conf": "{}\n"}
    ours = by_key(manifests.render(NVIDIA))

    def digest(objs, key):
        return objs[key]["spec"]["template"]["metadata"]["annotations"][k8s_objects.ANNOTATION_CONFIG_HASH]
    for key in ("DaemonSet/node-feature-discovery/nfd-worker", "Deployment/node-feature-discovery/nfd-master"):
        assert digest(plain, key) != digest(ours, key)
        assert digest(ours, key) == digest(by_key(manifests.render(dict(NVIDIA))), key)


def test_namespace_image_and_pull_secrets():
    objs = by_key(manifests.render({"namespace": "nfd", "image": "mirror.example.com/nfd:v0.19.0",
                                    "image_pull_secrets": ["pull"], "priority_class": "system-node-critical"}))
    pod = objs["DaemonSet/nfd/nfd-worker"]["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "mirror.example.com/nfd:v0.19.0"
    assert pod["imagePullSecrets"] == [{"name": "pull"}] and pod["priorityClassName"] == "system-node-critical"
    assert objs["ClusterRoleBinding/nfd-nfd-master"]["subjects"][0]["namespace"] == "nfd"
    assert by_key(manifests.render({"version": "v0.18.3"}))["DaemonSet/node-feature-discovery/nfd-worker"][
        "spec"]["template"]["spec"]["containers"][0]["image"].endswith(":v0.18.3")


@pytest.mark.parametrize("params, option", [
    ({"namespace": "Bad_NS"}, "namespace"),
    ({"extra_label_ns": ["not a namespace"]}, "extra_label_ns"),
    ({"pci_device_classes": ["0x03"]}, "pci_device_classes"),
    ({"pci_device_classes": ["0300000"]}, "pci_device_classes"),
    ({"pci_label_fields": ["color"]}, "pci_label_fields"),
    ({"image_pull_secrets": ["Bad Secret"]}, "image_pull_secrets"),
    ({"priority_class": "Not Valid"}, "priority_class"),
    ({"worker_tolerations": ["NoSchedule"]}, "worker_tolerations"),
])
def test_bad_options_fail_before_any_api_call(params, option):
    with pytest.raises(OptionError) as info:
        deployment.run(params, client_factory=lambda p: pytest.fail("no client before the options are checked"))
    assert info.value.option == option


def test_crds_are_structural_and_bare_without_an_owner():
    for crd in manifests.crds():
        assert "labels" not in crd["metadata"]
        (version,) = crd["spec"]["versions"]
        assert version["schema"]["openAPIV3Schema"]["type"] == "object" and version["storage"] is True
    names = [c["spec"]["names"]["kind"] for c in manifests.crds()]
    scopes = [c["spec"]["scope"] for c in manifests.crds()]
    assert list(zip(names, scopes)) == [("NodeFeature", "Namespaced"), ("NodeFeatureRule", "Cluster"),
                                        ("NodeFeatureGroup", "Namespaced")]


@pytest.mark.parametrize("container, runs", [
    ({"command": ["nfd-master"]}, True), ({"command": ["/usr/bin/nfd-master"], "args": ["-port=8080"]}, True),
    ({"args": ["nfd-master"]}, True), ({"command": ["nfd-worker"]}, False), ({"image": "x/node-feature-discovery"}, False),
])
def test_runs_nfd_master(container, runs):
    assert deployment.runs_nfd_master(container) is runs


class FakeClient(object):
    def __init__(self, crd=True, deployments=()):
        self.crd = crd
        self.deployments = list(deployments)

    def get(self, api_version, kind, name, namespace=None):
        return {"metadata": {"name": name}} if self.crd and kind == "CustomResourceDefinition" else None

    def list(self, api_version, kind, **kwargs):
        return self.deployments


def deployment_of(namespace, name, command, labels=None):
    return {"metadata": {"namespace": namespace, "name": name, "labels": labels or {}},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "command": command}]}}}}


def test_find_existing():
    theirs = deployment_of("gpu-operator", "gpu-operator-node-feature-discovery-master", ["nfd-master"])
    ours = deployment_of("node-feature-discovery", "nfd-master", ["nfd-master"],
                         {"app.kubernetes.io/managed-by": "kubegpu.cluster", "app.kubernetes.io/name": "node-feature-discovery"})
    other = deployment_of("default", "web", ["nginx"])
    assert deployment.find_existing(FakeClient(deployments=[other, ours, theirs])) == (
        "gpu-operator/gpu-operator-node-feature-discovery-master")
    assert deployment.find_existing(FakeClient(deployments=[other, ours])) is None
    assert deployment.find_existing(FakeClient(crd=False, deployments=[theirs])) is None  # a master without the API


def test_rolled_out_and_labelled_by_nfd():
    assert deployment.deployment_rolled_out({"metadata": {"generation": 2}, "spec": {"replicas": 1},
                                             "status": {"observedGeneration": 2, "updatedReplicas": 1,
                                                        "availableReplicas": 1}})
    assert not deployment.deployment_rolled_out({"metadata": {"generation": 2}, "spec": {"replicas": 1},
                                                 "status": {"observedGeneration": 1, "updatedReplicas": 1,
                                                            "availableReplicas": 1}})
    assert not deployment.deployment_rolled_out(None)
    nodes = {"a": {"metadata": {"annotations": {constants.FEATURE_LABELS_ANNOTATION: "pci-10de.present"}}},
             "b": {"metadata": {}}}
    assert deployment.labelled_by_nfd(nodes) == ["a"]
