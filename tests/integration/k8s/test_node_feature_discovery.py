# SPDX-License-Identifier: GPL-3.0-or-later
"""node_feature_discovery end to end: `ansible localhost -m kubegpu.cluster.node_feature_discovery` against the
sandbox control plane, where the simulator plays nfd-worker and nfd-master once their pods run (sandbox/k8s/devsim/
nfd.py): check mode, the real objects, idempotence, a config change that rolls the pods and changes the labels, an
NFD the cluster already runs, and removal that takes NFD's labels back first."""

import json
import uuid

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from ansible_cli import run_module, run_playbook
from ansible_collections.kubegpu.cluster.plugins.module_utils._nfd import manifests as nfd_manifests
from k8s_helpers import delete_crds, delete_quietly, wait_for

PCI_GPU = "feature.node.kubernetes.io/pci-10de.present"
PCI_GPU_CLASS = "feature.node.kubernetes.io/pci-0302_10de.present"
ANNOTATION = "nfd.node.kubernetes.io/feature-labels"
CRDS = [c["metadata"]["name"] for c in nfd_manifests.crds()]
NVIDIA = {"extra_label_ns": ["nvidia.com"], "pci_device_classes": ["02", "03"], "pci_label_fields": ["vendor"],
          "worker_tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}


def module(args, check=False, diff=False):
    return run_module("kubegpu.cluster.node_feature_discovery", args, check=check, diff=diff)


def crds_present(sandbox):
    ext = client.ApiextensionsV1Api(sandbox.api_client)
    return sorted(c.metadata.name for c in ext.list_custom_resource_definition().items if c.metadata.name in CRDS)


@pytest.fixture
def nfd(sandbox, test_nodes):
    """``run(**options)`` against a namespace of this test's own, workers only on this test's two nodes (a v100x4 and
    one without GPU); the NFD is removed afterwards."""
    ns = "nfd-" + uuid.uuid4().hex[:8]
    gpu_node, cpu_node = test_nodes(1, "v100x4")[0], test_nodes(1, None)[0]
    label = "kubegpu.test/" + ns
    for node in (gpu_node, cpu_node):
        sandbox.core.patch_node(node, {"metadata": {"labels": {label: "true"}}})

    def run(check=False, diff=False, expect_rc=0, **options):
        args = dict(NVIDIA, kubeconfig=sandbox.kubeconfig, namespace=ns, worker_node_selector={label: "true"},
                    wait_timeout=120)
        args.update(options)
        rc, result = module(args, check=check, diff=diff)
        assert rc == expect_rc, json.dumps(result)[:3000]
        return result
    run.namespace, run.gpu_node, run.cpu_node = ns, gpu_node, cpu_node
    yield run
    module(dict(kubeconfig=sandbox.kubeconfig, namespace=ns, state="absent", wait_timeout=120))


def labels_of(sandbox, node):
    return dict(sandbox.core.read_node(node).metadata.labels or {})


def wait_label(sandbox, node, predicate, describe):
    return wait_for(sandbox.core.list_node, field_selector="metadata.name=" + node, describe=describe, timeout=60,
                    predicate=lambda n: predicate(n.metadata.labels or {}, n.metadata.annotations or {}))


def test_deploy_label_reconfigure_and_remove(sandbox, nfd):
    assert crds_present(sandbox) == []
    check = nfd(check=True, diff=True)
    assert check["changed"] is True and check["existing"] is None
    assert crds_present(sandbox) == [] and nfd.namespace not in [n.metadata.name for n in sandbox.core.list_namespace().items]
    actions = dict(("%s/%s" % (o["kind"], o["name"]), o["action"]) for o in check["objects"])
    assert actions["CustomResourceDefinition/nodefeatures.nfd.k8s-sigs.io"] == "created"

    first = nfd()
    assert first["changed"] is True and first["existing"] is None
    assert first["master_config"] == {"extraLabelNs": ["nvidia.com"]}
    assert sorted(crds_present(sandbox)) == sorted(CRDS)
    master = sandbox.apps.read_namespaced_deployment("nfd-master", nfd.namespace)
    assert master.status.available_replicas == 1  # the module waited for the rollout
    pod = master.spec.template.spec
    assert pod.containers[0].security_context.read_only_root_filesystem is True
    assert pod.containers[0].security_context.run_as_non_root is True
    # nfd-worker publishes the GPU node's PCI devices, nfd-master turns them into labels: the GPU node only
    wait_label(sandbox, nfd.gpu_node, lambda labels, _a: labels.get(PCI_GPU) == "true", "the NVIDIA PCI label")
    assert PCI_GPU not in labels_of(sandbox, nfd.cpu_node)
    assert [f.manager for f in sandbox.core.read_node(nfd.gpu_node).metadata.managed_fields
            if PCI_GPU in json.dumps(f.fields_v1)] == ["nfd-master"]

    again_check = nfd(check=True, diff=True)
    assert again_check["changed"] is False and again_check["diff"]["before"] == {}
    assert nfd()["changed"] is False

    # NFD's own default label fields (class and vendor): the config changes, the worker rolls, the label follows
    changed = nfd(pci_label_fields=[], pci_device_classes=[])
    assert changed["changed"] is True and changed["worker_config"] == {}
    wait_label(sandbox, nfd.gpu_node, lambda labels, _a: PCI_GPU_CLASS in labels and PCI_GPU not in labels,
               "the class_vendor PCI label instead of the vendor one")

    check_absent = nfd(state="absent", check=True)
    assert check_absent["changed"] is True and labels_of(sandbox, nfd.gpu_node).get(PCI_GPU_CLASS) == "true"
    assert sorted(crds_present(sandbox)) == sorted(CRDS)
    gone = nfd(state="absent")
    assert gone["changed"] is True
    # the worker's NodeFeatures go with its pods (owner references) or are deleted here; either way the labels go
    assert set(gone["node_features_deleted"]) <= set("%s/%s" % (nfd.namespace, n) for n in (nfd.gpu_node, nfd.cpu_node))
    assert ("DaemonSet", "nfd-worker", "deleted") in [(o["kind"], o["name"], o["action"]) for o in gone["objects"]]
    node = sandbox.core.read_node(nfd.gpu_node)
    assert PCI_GPU_CLASS not in node.metadata.labels and ANNOTATION not in (node.metadata.annotations or {})
    assert crds_present(sandbox) == []
    with pytest.raises(ApiException) as info:
        sandbox.apps.read_namespaced_deployment("nfd-master", nfd.namespace)
    assert info.value.status == 404
    assert nfd(state="absent")["changed"] is False


@pytest.fixture
def their_nfd(sandbox):
    """An NFD the module did not deploy: the CRDs (bare) and an nfd-master Deployment in a namespace of its own."""
    ext = client.ApiextensionsV1Api(sandbox.api_client)
    ns = "their-nfd-" + uuid.uuid4().hex[:6]
    labels = {"app": "their-nfd-master"}
    try:  # what was made is removed even when making the rest failed: the next test counts the CRDs present
        sandbox.core.create_namespace({"metadata": {"name": ns}})
        for crd in nfd_manifests.crds():
            ext.create_custom_resource_definition(crd)
        sandbox.apps.create_namespaced_deployment(ns, {
            "metadata": {"name": "their-nfd-master"},
            "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": {
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "master", "image": "registry.k8s.io/nfd/node-feature-discovery:v0.18.3",
                                "command": ["nfd-master"]}]}}}})
        yield "%s/their-nfd-master" % ns
    finally:
        delete_quietly(sandbox.core.delete_namespace, ns)
        delete_crds(sandbox, nfd_manifests.crds())


def test_an_nfd_the_cluster_runs_is_used(sandbox, nfd, their_nfd):
    result = nfd()
    assert result["existing"] == their_nfd and result["changed"] is False and result["objects"] == []
    assert nfd.namespace not in [n.metadata.name for n in sandbox.core.list_namespace().items]
    absent = nfd(state="absent")  # theirs is never touched
    assert absent["changed"] is False and sorted(crds_present(sandbox)) == sorted(CRDS)
    assert sandbox.apps.read_namespaced_deployment("their-nfd-master", their_nfd.split("/")[0])


def test_bad_options_fail_before_any_change(sandbox, nfd):
    result = nfd(expect_rc=2, pci_device_classes=["0x03"])
    assert result["msg"].startswith("pci_device_classes: ") and crds_present(sandbox) == []
    result = nfd(expect_rc=2, extra_label_ns=["Not A Namespace"])
    assert result["msg"].startswith("extra_label_ns: ")


def test_a_removal_right_after_the_deploy_leaves_the_crd_finalizer_nothing_to_retry(sandbox, nfd):
    """The CRDs of a deploy removed at once, before anything asked for their objects: the API server makes a CRD's
    storage on the first such request, and its finalizer, the first to ask, failed with "storage is (re)initializing"
    and retried on a growing backoff (make test's CI: nodefeaturerules still Terminating 60 s after its delete). The
    removal opens that storage first (objectset.open_crd_storage): the kube-apiserver's log has no such error."""
    log = sandbox.layout.log("kube-apiserver")
    start = log.stat().st_size
    assert nfd()["changed"] is True
    assert nfd(state="absent")["changed"] is True and crds_present(sandbox) == []
    with log.open(errors="replace") as lines:
        lines.seek(start)
        failed = [line.strip() for line in lines if "crd_finalizer" in line and "nfd.k8s-sigs.io" in line]
    assert failed == []


def test_role_task_file(sandbox, tmp_path):
    """roles/device_plugin/tasks/deploy.yml with the role's defaults: NFD as the device plugin's chart configures it,
    in the same call as the plugin (device_plugin_deploy's nfd option), only with device_plugin_gfd, and removed again,
    after the plugin, with device_plugin_state=absent."""
    namespace = "nfd-role-" + uuid.uuid4().hex[:6]
    playbook = tmp_path / "nfd.yml"
    playbook.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "deploy",
         "ansible.builtin.include_role": {"name": "kubegpu.cluster.device_plugin", "tasks_from": "deploy"}},
        {"name": "result", "ansible.builtin.debug": {"var": "device_plugin_result"}}]}]))
    variables = {"device_plugin_kubeconfig": sandbox.kubeconfig, "device_plugin_nfd_namespace": namespace,
                 "device_plugin_namespace": namespace + "-plugin", "device_plugin_wait_timeout": 120,
                 "device_plugin_labels": False, "device_plugin_expect_resources": False,
                 # no node carries this label: the plugin's objects are applied, its pods placed nowhere
                 "device_plugin_node_selector": {"kubegpu.test/nowhere": "true"},
                 "_device_plugin_facts": {}, "_device_plugin_node_names": {}, "_device_plugin_node_configs": {}}
    rc, tasks = run_playbook(playbook, dict(variables, device_plugin_gfd=False))
    assert rc == 0 and "nfd" not in dict(tasks)["result"]["device_plugin_result"], tasks
    try:
        rc, tasks = run_playbook(playbook, dict(variables, device_plugin_gfd=True))
        assert rc == 0, tasks  # the play's own words when the deploy failed
        result = dict(tasks)["result"]["device_plugin_result"]["nfd"]
        assert result["changed"] is True, tasks
        assert result["master_config"] == {"extraLabelNs": ["nvidia.com"]}
        assert result["worker_config"] == {"sources": {"pci": {"deviceClassWhitelist": ["02", "03"],
                                                               "deviceLabelFields": ["vendor"]}}}
        wait_label(sandbox, "kg-v100", lambda labels, _a: labels.get(PCI_GPU) == "true", "the PCI label on kg-v100")
    finally:
        rc, tasks = run_playbook(playbook, dict(variables, device_plugin_gfd=True, device_plugin_state="absent"))
    assert rc == 0, tasks
    assert dict(tasks)["result"]["device_plugin_result"]["nfd"]["changed"] is True
    assert PCI_GPU not in labels_of(sandbox, "kg-v100") and crds_present(sandbox) == []
