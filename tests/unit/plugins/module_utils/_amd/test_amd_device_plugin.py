# SPDX-License-Identifier: GPL-3.0-or-later
"""AMD's ROCm device plugin, cluster side: the plugin's resource rules, the rendered objects, the checks made before
any API call, labels, check mode and state=absent (with a stand-in client)."""

from __future__ import absolute_import, division, print_function

import pytest

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import OptionError
from ansible_collections.kubegpu.cluster.plugins.module_utils._amd import allocatable, constants as amd, deployment, labels, manifests
from ansible_collections.kubegpu.cluster.tests.unit.plugins.module_utils.vendor_fakes import FakeClient, node


def params(**overrides):
    base = dict(namespace=None, version=amd.DEVICE_PLUGIN_VERSION, image=None, labeller_image=None, image_pull_secrets=[],
                resource_naming_strategy="single", labeller=True, labeller_flags=list(amd.DEFAULT_LABELLER_FLAGS),
                node_selector=dict(amd.DEFAULT_NODE_SELECTOR), tolerations=None, priority_class="system-node-critical",
                facts={}, node_names={}, label_facts=None, missing_nodes="fail", state="present", wait=False,
                wait_timeout=300)
    base.update(overrides)
    return base


def mi210(count=2, **amd_part):
    part = {"count": count, "status": "ok", "driver": {"module": "amdgpu", "loaded": True, "version": None, "kfd": True},
            "devices": [{"address": "0000:%02x:00.0" % (0x43 + i), "device_id": "0x740f", "name": "AMD Instinct MI210",
                         "card": "card%d" % i, "render": "renderD%d" % (128 + i)} for i in range(count)]}
    part.update(amd_part)
    return {"vendors": ["amd"], "amd": part, "intel": {"count": 0, "devices": []}, "count": 0, "devices": []}


def cpu():
    return {"vendors": [], "amd": {"count": 0, "devices": []}, "intel": {"count": 0, "devices": []}, "count": 0}


def by_kind(objects):
    return dict((o["kind"], o) for o in objects if o["kind"] != "DaemonSet") | dict(
        (o["metadata"]["name"], o) for o in objects if o["kind"] == "DaemonSet")


# --------------------------------------------------------------------------- the plugin's rules (main.go getResourceList)

def test_single_and_unpartitioned_gpus_give_amd_com_gpu():
    assert allocatable.resources([{}, {}], "single") == {"amd.com/gpu": 2}
    assert allocatable.resources([{}, {}], "mixed") == {"amd.com/gpu": 2}
    assert allocatable.resources([], "single") == {}


def test_mixed_names_partitions_and_single_refuses_a_mix():
    cpx = {"compute_partition": "CPX", "memory_partition": "NPS4"}
    spx = {"compute_partition": "SPX", "memory_partition": "NPS1"}
    assert allocatable.resources([cpx, cpx], "mixed") == {"amd.com/cpx_nps4": 2}
    assert allocatable.resources([cpx, cpx], "single") == {"amd.com/gpu": 2}
    assert allocatable.resources([cpx, spx, spx], "mixed") == {"amd.com/cpx_nps4": 1, "amd.com/spx_nps1": 2}
    with pytest.raises(ValueError, match="different partition modes"):
        allocatable.resources([cpx, spx], "single")


@pytest.mark.parametrize("part, why", [
    ({"driver": {"module": "amdgpu", "loaded": False, "kfd": False}, "status": "driver_not_loaded"}, "amdgpu driver is not loaded"),
    ({"driver": {"module": "amdgpu", "loaded": True, "kfd": False}, "status": "no_kfd"}, "/sys/class/kfd is missing"),
    ({"status": "something_else"}, "gpu.amd.status is something_else"),
])
def test_a_host_where_the_plugin_advertises_nothing_fails_naming_it(part, why):
    with pytest.raises(OptionError, match=why) as err:
        allocatable.expected("mi-1", mi210(**part)["amd"], "single")
    assert "host mi-1" in str(err.value)


# --------------------------------------------------------------------------- rendering

def test_render_follows_the_vendor_manifests_with_least_privilege_rbac():
    objects = manifests.render(params(namespace="amd"))
    assert [o["kind"] for o in objects] == ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DaemonSet", "DaemonSet"]
    found = by_kind(objects)
    role = found["ClusterRole"]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "update"]}]
    assert role["metadata"]["labels"]["kubegpu.cluster/namespace"] == "amd"
    assert found["ClusterRoleBinding"]["subjects"] == [{"kind": "ServiceAccount", "name": amd.LABELLER_SERVICE_ACCOUNT,
                                                        "namespace": "amd"}]
    plugin = found[amd.PLUGIN_NAME]["spec"]["template"]["spec"]
    container = plugin["containers"][0]
    assert container["image"] == "docker.io/rocm/k8s-device-plugin:" + amd.DEVICE_PLUGIN_VERSION
    assert container["command"] == ["./k8s-device-plugin"]
    assert container["args"][-1] == "-resource_naming_strategy=single"
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert plugin["automountServiceAccountToken"] is False and "serviceAccountName" not in plugin
    assert plugin["nodeSelector"] == {"feature.node.kubernetes.io/amd-gpu": "true"}
    labeller = found[amd.LABELLER_NAME]["spec"]["template"]["spec"]
    assert labeller["serviceAccountName"] == amd.LABELLER_SERVICE_ACCOUNT
    lcont = labeller["containers"][0]
    assert lcont["image"] == "docker.io/rocm/k8s-device-plugin:labeller-" + amd.DEVICE_PLUGIN_VERSION
    assert lcont["args"] == ["-vram", "-cu-count", "-simd-count", "-device-id", "-family"]
    assert lcont["env"][0]["name"] == "DS_NODE_NAME"
    assert lcont["securityContext"] == {"privileged": True, "capabilities": {"drop": ["ALL"]}}


def test_no_labeller_means_no_rbac_and_mixed_reaches_the_plugin():
    objects = manifests.render(params(labeller=False, resource_naming_strategy="mixed", image="reg.example/rocm:1",
                                      image_pull_secrets=["pull"], priority_class=""))
    assert [o["kind"] for o in objects] == ["DaemonSet"]
    spec = objects[0]["spec"]["template"]["spec"]
    assert spec["containers"][0]["args"][-1] == "-resource_naming_strategy=mixed"
    assert spec["containers"][0]["image"] == "reg.example/rocm:1"
    assert spec["imagePullSecrets"] == [{"name": "pull"}] and "priorityClassName" not in spec


def test_the_labeller_label_is_not_ours_and_ours_is_not_the_labellers():
    assert labels.is_labeller_label("beta.amd.com/gpu.family.AI") and labels.is_labeller_label("amd.com/gpu.family")
    assert not labels.is_labeller_label(amd.LABEL_GPU)  # the labeller would delete an amd.com/ selector label


# --------------------------------------------------------------------------- validation before any API call

def _no_client(_params):
    raise AssertionError("connected before validating")


@pytest.mark.parametrize("overrides, option", [
    (dict(resource_naming_strategy="partitioned"), "resource_naming_strategy"),
    (dict(labeller_flags=["vram", "colour"]), "labeller_flags"),
    (dict(node_selector={"feature.node.kubernetes.io/amd-gpu": True}), "node_selector"),
    (dict(tolerations=[{"key": "a", "operator": "Exists", "efect": "NoSchedule"}]), "tolerations"),
    (dict(wait_timeout=0), "wait_timeout"),
    (dict(image=" "), "image"),
    (dict(facts={"mi-1": "not a fact"}), "facts"),
    (dict(facts={"mi-1": mi210(status="no_kfd")}), "facts"),
])
def test_a_bad_option_fails_naming_it_before_any_api_call(overrides, option):
    with pytest.raises(OptionError) as err:
        deployment.run(params(**overrides), client_factory=_no_client)
    assert err.value.option == option


def test_mixed_partitions_with_single_name_the_host_and_the_option():
    part = mi210()["amd"]
    part["devices"][0].update(compute_partition="CPX", memory_partition="NPS4")
    part["devices"][1].update(compute_partition="SPX", memory_partition="NPS1")
    facts = mi210()
    facts["amd"] = part
    with pytest.raises(OptionError, match="host mi-1: its GPUs are in different partition modes") as err:
        deployment.run(params(facts={"mi-1": facts}), client_factory=_no_client)
    assert err.value.option == "resource_naming_strategy"
    assert str(err.value).startswith("resource_naming_strategy: host mi-1: ")


def test_every_refused_host_is_named_at_once():
    with pytest.raises(OptionError) as err:
        deployment.run(params(facts={"a": mi210(status="no_kfd"), "b": mi210(status="driver_not_loaded")}),
                       client_factory=_no_client)
    assert str(err.value).startswith("facts: host a: /sys/class/kfd is missing")
    assert "; host b: the amdgpu driver is not loaded" in str(err.value)


# --------------------------------------------------------------------------- the run

def test_present_labels_amd_hosts_only_and_expects_their_gpus():
    nodes = {"kg-mi210": node("kg-mi210"), "kg-cpu": node("kg-cpu")}
    client = FakeClient(nodes=nodes)
    names = {"mi": "kg-mi210", "cpu-host": "kg-cpu"}
    result = deployment.run(params(facts={"mi": mi210(), "cpu-host": cpu()}, node_names=names), client=client)
    assert result["expected"] == {"kg-mi210": {"amd.com/gpu": 2}}
    assert result["nodes"] == ["kg-mi210"]
    assert nodes["kg-mi210"]["metadata"]["labels"] == {amd.LABEL_GPU: "true"}
    assert nodes["kg-cpu"]["metadata"]["labels"] == {}
    assert result["changed"] is True
    again = deployment.run(params(facts={"mi": mi210(), "cpu-host": cpu()}, node_names=names), client=client)
    assert again["labels"]["changed"] is False


def test_check_mode_only_dry_runs_and_reports_labels():
    nodes = {"mi": node("mi")}
    client = FakeClient(nodes=nodes)
    result = deployment.run(params(facts={"mi": mi210()}), check_mode=True, want_diff=True, client=client)
    assert result["changed"] is True
    applied = [w for w in client.writes if w[0] == "apply"]
    assert applied[0] == ("apply", "Namespace", True) and all(w[2] is True for w in applied)
    assert "DaemonSet" not in [w[1] for w in applied]  # objects in a missing namespace are not sent at all
    assert all(w[3] == "All" for w in client.writes if w[0] == "patch_node")
    assert nodes["mi"]["metadata"]["labels"] == {}
    assert result["labels"]["nodes"]["mi"]["labels_set"] == {amd.LABEL_GPU: "true"}
    assert result["diff"][0]["after"] == {amd.LABEL_GPU: "true"}


def test_a_missing_node_fails_unless_skipped():
    client = FakeClient(nodes={})
    with pytest.raises(Exception, match="1 node\\(s\\) not found in the cluster: mi"):
        deployment.run(params(facts={"mi": mi210()}), client=client)
    result = deployment.run(params(facts={"mi": mi210()}, missing_nodes="skip"), client=client)
    assert result["expected"] == {} and result["nodes"] == [] and result["warnings"]


def test_absent_removes_the_labellers_labels_and_ours():
    nodes = {"mi": node("mi", {"beta.amd.com/gpu.family.AI": "2", "amd.com/gpu.family": "AI", "other": "x"})}
    client = FakeClient(nodes=nodes)
    deployment.run(params(facts={"mi": mi210()}), client=client)  # ours, under our field manager
    assert nodes["mi"]["metadata"]["labels"][amd.LABEL_GPU] == "true"
    labeller_ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {
        "name": amd.LABELLER_NAME, "namespace": amd.DEVICE_PLUGIN_NAMESPACE,
        "labels": {"app.kubernetes.io/managed-by": "kubegpu.cluster"}}}
    client.live["DaemonSet/%s/%s" % (amd.DEVICE_PLUGIN_NAMESPACE, amd.LABELLER_NAME)] = labeller_ds
    result = deployment.run(params(state="absent"), client=client)
    assert result["labeller_labels_removed"] == {"mi": ["amd.com/gpu.family", "beta.amd.com/gpu.family.AI"]}
    assert nodes["mi"]["metadata"]["labels"] == {"other": "x"}
    assert result["changed"] is True
    client.live.clear()
    again = deployment.run(params(state="absent"), client=client)
    assert again["changed"] is False and again["labeller_labels_removed"] == {}
