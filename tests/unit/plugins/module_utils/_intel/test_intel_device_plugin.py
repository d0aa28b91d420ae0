# SPDX-License-Identifier: GPL-3.0-or-later
"""Intel's GPU plugin, cluster side: the plugin's resource rules, the rendered objects, the checks made before any
API call, labels, check mode and state=absent (with a stand-in client)."""

from __future__ import absolute_import, division, print_function

import pytest

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import K8sError, OptionError
from ansible_collections.kubegpu.cluster.plugins.module_utils._intel import allocatable, constants as intel, deployment, manifests
from ansible_collections.kubegpu.cluster.tests.unit.plugins.module_utils.vendor_fakes import FakeClient, node


def params(**overrides):
    base = dict(namespace=None, version=intel.DEVICE_PLUGIN_VERSION, image=None, image_pull_secrets=[],
                shared_dev_num=1, allocation_policy="none", enable_monitoring=False, nfd_rule=False,
                node_selector=dict(intel.DEFAULT_NODE_SELECTOR), tolerations=None, priority_class="system-node-critical",
                facts={}, node_names={}, label_facts=None, missing_nodes="fail", state="present", wait=False,
                wait_timeout=300)
    base.update(overrides)
    return base


def intel_gpu(drivers=("i915",), **part):
    module = drivers[0] if drivers else "i915"
    body = {"count": len(drivers), "status": "ok", "driver": {"module": module, "loaded": True, "version": None},
            "devices": [{"address": "0000:%02x:00.0" % (0x3a + i), "device_id": "0x56c0", "name": "Intel Data Center GPU Flex 170",
                         "card": "card%d" % i, "render": "renderD%d" % (128 + i), "driver": d} for i, d in enumerate(drivers)]}
    body.update(part)
    return {"vendors": ["intel"], "intel": body, "amd": {"count": 0, "devices": []}, "count": 0, "devices": []}


# --------------------------------------------------------------------------- the plugin's rules (gpu_plugin.go scan)

def test_each_card_under_its_driver_times_shared_dev_num():
    assert allocatable.resources(["i915"]) == {"gpu.intel.com/i915": 1}
    assert allocatable.resources(["i915", "i915"], 4) == {"gpu.intel.com/i915": 8}
    assert allocatable.resources(["xe", "i915"], 2) == {"gpu.intel.com/xe": 2, "gpu.intel.com/i915": 2}
    assert allocatable.resources(["xe", "xe"], 3, monitoring=True) == {"gpu.intel.com/xe": 6, "gpu.intel.com/xe_monitoring": 1}
    assert allocatable.resources(["vfio-pci"]) == {}


def test_the_xe_driver_gives_gpu_intel_com_xe():
    assert allocatable.expected("arc", intel_gpu(("xe",))["intel"]) == {"gpu.intel.com/xe": 1}


def test_a_host_without_a_bound_driver_fails_naming_it():
    with pytest.raises(OptionError, match="host flex: neither i915 nor xe is loaded"):
        allocatable.expected("flex", intel_gpu(driver={"module": "i915", "loaded": False}, status="driver_not_loaded")["intel"])
    with pytest.raises(OptionError, match="host flex: card\\(s\\) bound to vfio-pci"):
        allocatable.expected("flex", intel_gpu(("vfio-pci",))["intel"])


# --------------------------------------------------------------------------- rendering

def test_render_follows_the_kustomize_base():
    objects = manifests.render(params())
    assert [o["kind"] for o in objects] == ["DaemonSet"]  # the plugin needs no RBAC
    spec = objects[0]["spec"]["template"]["spec"]
    container = spec["containers"][0]
    assert container["image"] == "intel/intel-gpu-plugin:" + intel.DEVICE_PLUGIN_VERSION
    assert "args" not in container  # the plugin's defaults
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    mounts = dict((m["mountPath"], m.get("readOnly", False)) for m in container["volumeMounts"])
    assert mounts == {"/dev/dri": True, "/sys/class/drm": True, "/var/lib/kubelet/device-plugins": False}
    assert spec["nodeSelector"] == {"intel.feature.node.kubernetes.io/gpu": "true"}
    assert spec["automountServiceAccountToken"] is False


def test_flags_and_the_nfd_rule():
    objects = manifests.render(params(shared_dev_num=4, allocation_policy="balanced", enable_monitoring=True,
                                      nfd_rule=True, namespace="igpu"))
    assert [o["kind"] for o in objects] == ["NodeFeatureRule", "DaemonSet"]
    assert objects[1]["spec"]["template"]["spec"]["containers"][0]["args"] == [
        "-shared-dev-num=4", "-allocation-policy=balanced", "-enable-monitoring"]
    rule = objects[0]
    assert rule["apiVersion"] == "nfd.k8s-sigs.io/v1alpha1"
    assert rule["metadata"]["labels"]["kubegpu.cluster/namespace"] == "igpu"
    body = rule["spec"]["rules"][0]
    assert body["labels"] == {"intel.feature.node.kubernetes.io/gpu": "true"}
    assert body["matchFeatures"][0]["matchExpressions"]["class"] == {"op": "In", "value": ["0300", "0380"]}
    modules = sorted(list(m["matchFeatures"][0]["matchExpressions"])[0] + "/" + m["matchFeatures"][0]["feature"]
                     for m in body["matchAny"])
    assert modules == ["i915/kernel.enabledmodule", "i915/kernel.loadedmodule", "xe/kernel.enabledmodule",
                       "xe/kernel.loadedmodule"]


# --------------------------------------------------------------------------- validation before any API call

def _no_client(_params):
    raise AssertionError("connected before validating")


@pytest.mark.parametrize("overrides, option", [
    (dict(shared_dev_num=0), "shared_dev_num"),
    (dict(allocation_policy="spread"), "allocation_policy"),
    (dict(node_selector={"bad key!": "true"}), "node_selector"),
    (dict(facts={"flex": intel_gpu(status="driver_not_loaded")}), "facts"),
])
def test_a_bad_option_fails_naming_it_before_any_api_call(overrides, option):
    with pytest.raises(OptionError) as err:
        deployment.run(params(**overrides), client_factory=_no_client)
    assert err.value.option == option


def test_the_nfd_rule_needs_nfds_crds_and_fails_before_any_change():
    client = FakeClient(nodes={"flex": node("flex")})
    with pytest.raises(K8sError, match="nfd_rule needs node feature discovery's CRDs"):
        deployment.run(params(nfd_rule=True, facts={"flex": intel_gpu()}), client=client)
    assert client.writes == []


# --------------------------------------------------------------------------- the run

def test_present_then_absent():
    nodes = {"flex": node("flex"), "arc": node("arc"), "other": node("other")}
    client = FakeClient(nodes=nodes)
    facts = {"flex": intel_gpu(), "arc": intel_gpu(("xe",)), "other": {"intel": {"count": 0}, "amd": {"count": 0}}}
    result = deployment.run(params(facts=facts, shared_dev_num=2), client=client)
    assert result["expected"] == {"flex": {"gpu.intel.com/i915": 2}, "arc": {"gpu.intel.com/xe": 2}}
    assert result["nodes"] == ["arc", "flex"]
    assert nodes["flex"]["metadata"]["labels"] == {intel.LABEL_GPU: "true"}
    assert nodes["other"]["metadata"]["labels"] == {}
    checked = deployment.run(params(state="absent"), check_mode=True, client=client)
    assert checked["labels"]["summary"]["changed"] == 2 and nodes["flex"]["metadata"]["labels"]
    gone = deployment.run(params(state="absent"), client=client)
    assert gone["changed"] is True
    assert all(n["metadata"]["labels"] == {} for n in nodes.values())


def test_a_host_that_lost_its_gpu_loses_our_label():
    nodes = {"flex": node("flex")}
    client = FakeClient(nodes=nodes)
    deployment.run(params(facts={"flex": intel_gpu()}), client=client)
    result = deployment.run(params(facts={"flex": {"intel": {"count": 0}}}), client=client)
    assert result["labels"]["nodes"]["flex"]["labels_removed"] == [intel.LABEL_GPU]
    assert nodes["flex"]["metadata"]["labels"] == {}
