# SPDX-License-Identifier: GPL-3.0-or-later
"""The DRA version matrix and node rules (pure): which resource.k8s.io version is written, when extendedResourceName is
set, and what is refused before any write, with what to do."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import KubegpuError
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import constants as nv
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.dra import matrix as dra


@pytest.mark.parametrize("answer, minor", [
    ({"gitVersion": "v1.36.3", "major": "1", "minor": "36"}, (1, 36)),
    ({"major": "1", "minor": "33+"}, (1, 33)),
    ("v1.32.0-gke.1200", (1, 32)),
    ("1.34", (1, 34)),
])
def test_minor_of(answer, minor):
    assert dra.minor_of(answer) == minor


def test_minor_of_refuses_nonsense():
    with pytest.raises(KubegpuError, match="cannot tell"):
        dra.minor_of({"gitVersion": "devel"})


@pytest.mark.parametrize("version, served, api, mapped", [
    ("v1.36.3", ["v1", "v1beta2", "v1beta1"], "resource.k8s.io/v1", True),  # DRAExtendedResource beta, on
    ("v1.35.1", ["v1", "v1beta2"], "resource.k8s.io/v1", False),  # alpha, off: no mapping by default
    ("v1.34.0", ["v1"], "resource.k8s.io/v1", False),
    ("v1.33.4", ["v1beta2", "v1beta1"], "resource.k8s.io/v1beta2", False),
    ("v1.33.4", ["v1beta1"], "resource.k8s.io/v1beta1", False),
    ("v1.32.2", ["v1beta1", "v1alpha3"], "resource.k8s.io/v1beta1", False),
])
def test_matrix_picks_the_highest_served_version(version, served, api, mapped):
    got = dra.plan({"gitVersion": version}, served)
    assert got["api_version"] == api and got["extended_resource"] is mapped


def test_beta_clusters_are_warned_about_the_other_components_gates():
    warnings = dra.plan("v1.33.1", ["v1beta2"])["warnings"]
    assert len(warnings) == 1 and "kube-scheduler" in warnings[0] and "kubelet" in warnings[0]
    assert dra.plan("v1.36.0", ["v1"])["warnings"] == []


def test_too_old_is_refused_with_what_to_do():
    with pytest.raises(KubegpuError) as err:
        dra.plan("v1.31.9", ["v1beta1", "v1alpha3"])
    assert "1.31 is too old" in str(err.value) and "1.32 or later" in str(err.value)


@pytest.mark.parametrize("version, runtime_config", [("v1.32.5", "resource.k8s.io/v1beta1=true"),
                                                     ("v1.33.0", "resource.k8s.io/v1beta2=true")])
def test_beta_without_the_api_says_gates_and_runtime_config(version, runtime_config):
    with pytest.raises(KubegpuError) as err:
        dra.plan(version, [])
    text = str(err.value)
    assert "--runtime-config=" + runtime_config in text
    for component in nv.DRA_GATE_COMPONENTS:
        assert component in text
    assert "DynamicResourceAllocation=true" in text


def test_ga_with_the_api_turned_off_says_so():
    with pytest.raises(KubegpuError, match="resource.k8s.io/v1=false"):
        dra.plan("v1.35.0", [])


def test_extended_resource_asked_for():
    assert dra.plan("v1.36.0", ["v1"], extended=False)["extended_resource"] is False
    on_alpha = dra.plan("v1.35.0", ["v1"], extended=True)
    assert on_alpha["extended_resource"] is True and "DRAExtendedResource=true" in on_alpha["warnings"][0]
    with pytest.raises(KubegpuError, match="extendedResourceName"):
        dra.plan("v1.33.0", ["v1beta2"], extended=True)


def _node(name, **labels):
    return {"metadata": {"name": name, "labels": labels}}


def test_both_plugins_refused_naming_every_node():
    nodes = [_node("a", **{nv.LABEL_DEPLOY_DRA_DRIVER: "true", nv.LABEL_DEPLOY_DEVICE_PLUGIN: "true"}),
             _node("b", **{nv.LABEL_DEPLOY_DRA_DRIVER: "true", nv.LABEL_DEPLOY_DEVICE_PLUGIN: "false"}),
             _node("c", **{nv.LABEL_DEPLOY_DRA_DRIVER: "true", nv.LABEL_DEPLOY_DEVICE_PLUGIN: "true"}),
             _node("d", **{nv.LABEL_DEPLOY_DEVICE_PLUGIN: "true"})]
    with pytest.raises(KubegpuError) as err:
        dra.refuse_both(nodes)
    assert "nodes a, c are labelled for both" in str(err.value) and err.value.details["nodes"] == ["a", "c"]
    assert dra.dra_nodes(nodes) == ["a", "b", "c"]
    nodes[1]["metadata"]["labels"]["pool"] = "h100"
    assert dra.dra_nodes(nodes, {"pool": "h100"}) == ["b"]  # the DaemonSet's other selector labels count too
    dra.refuse_both(nodes[1:2] + nodes[3:])


def _slice(node, devices, generation=1, pool=None, driver=nv.DRA_DRIVER_NAME, beta=False):
    items = []
    for name, kind in devices:
        attrs = {"type": {"string": kind}}
        items.append({"name": name, "basic": {"attributes": attrs}} if beta else {"name": name, "attributes": attrs})
    return {"spec": {"driver": driver, "nodeName": node, "pool": {"name": pool or node, "generation": generation,
                                                                  "resourceSliceCount": 1}, "devices": items}}


def test_slice_gpus_counts_full_gpus_of_the_newest_generation():
    slices = [_slice("n1", [("gpu-0", "gpu"), ("gpu-1", "gpu"), ("gpu-0-mig-1g", "mig")], generation=2),
              _slice("n1", [("gpu-0", "gpu")], generation=1),
              _slice("n1", [("gpu-9", "gpu")], driver="other.example.com"),
              _slice("n2", [("gpu-3", "gpu")], beta=True)]
    assert dra.slice_gpus(slices, "n1") == ["gpu-0", "gpu-1"]
    assert dra.slice_gpus(slices, "n2") == ["gpu-3"]


def test_short_of_slices_reads_the_gpu_count_label():
    nodes = [_node("n1", **{nv.LABEL_GPU_COUNT: "2"}), _node("n2"), _node("n3", **{nv.LABEL_GPU_COUNT: "1"})]
    slices = [_slice("n1", [("gpu-0", "gpu")]), _slice("n3", [("gpu-0", "gpu")])]
    assert dra.short_of_slices(nodes, slices, ["n1", "n2", "n3", "gone"]) == {
        "n1": (["gpu-0"], 2), "n2": ([], None), "gone": (None, None)}
