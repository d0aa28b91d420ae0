# SPDX-License-Identifier: GPL-3.0-or-later
"""GPU node labels: facts -> labels for every shipped profile, label value sanitising, driver version split,
managedFields reading, planning, retries and the run() flow against a fake CoreV1Api."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

import pytest

from hypothesis import given, settings, strategies as st

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import K8sError, OptionError, fail_args
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import client as k8s_client, names, node_labels as nl
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import gfd as gfd_rules, labels as nvlabels
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import naming as _gpu_model

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", ".."))
PROFILES = os.path.join(ROOT, "sandbox", "profiles")


def _profiles():
    """The fake NVML's profiles: NVIDIA's node labels come from NVML facts, and a profile with a ``vendor`` (AMD,
    Intel: sysfs only) has none."""
    names = []
    for name in os.listdir(PROFILES):
        if name.endswith(".json"):
            with open(os.path.join(PROFILES, name)) as handle:
                if "vendor" not in json.load(handle):
                    names.append(name[:-5])
    return sorted(names)


def facts_from_profile(name):
    """The gpu fact gpu_facts reports for a profile (the shape documented in its RETURN)."""
    with open(os.path.join(PROFILES, name + ".json")) as handle:
        profile = json.load(handle)
    init_error = (profile.get("errors") or {}).get("nvmlInit")
    if init_error:
        return {"present": True, "nvml": {"status": init_error.lower(), "message": init_error}, "driver_version": None,
                "cuda_driver_version": None, "nvml_version": None, "count": 0, "devices": [], "pci": [],
                "kernel_modules": {"nvidia": False, "nouveau": False}}
    devices = []
    for index, device in enumerate(profile["devices"]):
        if "nvmlDeviceGetHandleByIndex" in (device.get("errors") or {}):
            devices.append({"index": index, "healthy": False, "errors": {"handle": "GPU is lost"}})
            continue
        mig = device.get("mig") or {}
        failing = set(device.get("errors") or {})  # the calls gpu_facts makes (pynvml binds the first versions)
        devices.append({"index": index, "name": device["name"], "uuid": device["uuid"],
                        "nvml_returns": dict(device.get("errors") or {}),
                        "product_slug": _gpu_model.product_slug(device["name"]),
                        "memory_total_mib": None if "nvmlDeviceGetMemoryInfo" in failing else device["memory_total_mib"],
                        "pci_bus_id": device["pci_bus_id"],
                        "compute_capability": None if "nvmlDeviceGetCudaComputeCapability" in failing
                        else device["compute_capability"],
                        "mig": {"capable": bool(mig.get("capable")), "current": bool(mig.get("current")),
                                "devices": [{"profile": m["profile"], "memory_mib": m["memory_mib"],
                                             "multiprocessor_count": m["multiprocessor_count"]}
                                            for m in mig.get("devices") or []]},
                        "healthy": True, "errors": {}})
    cuda = profile["cuda_driver_version"]
    return {"present": True, "nvml": {"status": "ok", "message": ""}, "driver_version": profile["driver_version"],
            "nvml_returns": dict(profile.get("errors") or {}),
            "cuda_driver_version": "%d.%d" % (cuda // 1000, (cuda % 1000) // 10), "nvml_version": profile["nvml_version"],
            "count": len(devices), "devices": devices, "pci": [], "kernel_modules": {"nvidia": True, "nouveau": False}}


NO_GPU = {"present": False, "nvml": {"status": "library_not_found", "message": ""}, "driver_version": None,
          "cuda_driver_version": None, "nvml_version": None, "count": 0, "devices": [], "pci": [],
          "kernel_modules": {"nvidia": False, "nouveau": False}}

EXPECTED = {
    "v100x4": ("Tesla-V100-PCIE-16GB", "4", "16160", ("510", "47", "03", "510.47.03"), "11.6",
               "nvidia-tesla-v100-pcie-16gb"),
    "t4": ("Tesla-T4", "1", "15109", ("450", "102", "04", "450.102.04"), "11.0", "nvidia-tesla-t4"),
    "a100x8-mig-mixed": ("NVIDIA-A100-SXM4-80GB", "8", "81920", ("535", "183", "01", "535.183.01"), "12.2",
                         "nvidia-a100-sxm4-80gb"),
    "h100": ("NVIDIA-H100-80GB-HBM3", "1", "81559", ("550", "127", "05", "550.127.05"), "12.4", "nvidia-h100-80gb-hbm3"),
    "gtx1060": ("GeForce-GTX-1060-3GB", "1", "3019", ("390", "30", None, "390.30"), "9.1", "nvidia-geforce-gtx-1060-3gb"),
    # GPU feature discovery exits on a lost GPU, so no GFD label; ours stay (the accelerator from the GPU that answers)
    "failure-device-lost": ("gfd exits", "nvidia-tesla-t4"),
    "failure-xid-79": ("Tesla-T4", "2", "15360", ("535", "183", "01", "535.183.01"), "12.2", "nvidia-tesla-t4"),
    "failure-not-supported": ("Tesla-K80", "1", "11441", ("470", "256", "02", "470.256.02"), "11.4", "nvidia-tesla-k80"),
    "a100-h100-mig-same-profile": ("NVIDIA-A100-SXM4-80GB", "1", "81920", ("550", "127", "05", "550.127.05"), "12.4",
                                   "nvidia-a100-sxm4-80gb"),
    "a100-mig-compute-instances": ("NVIDIA-A100-SXM4-80GB", "1", "81920", ("535", "183", "01", "535.183.01"), "12.2",
                                   "nvidia-a100-sxm4-80gb"),
    "a100x2-mig-one-empty": ("NVIDIA-A100-SXM4-80GB", "2", "81920", ("535", "183", "01", "535.183.01"), "12.2",
                             "nvidia-a100-sxm4-80gb"),
    "a100x2-mig-capable": ("NVIDIA-A100-SXM4-80GB", "2", "81920", ("535", "183", "01", "535.183.01"), "12.2",
                           "nvidia-a100-sxm4-80gb"),
    "h100-mig-reset": ("NVIDIA-H100-80GB-HBM3", "1", "81559", ("550", "127", "05", "550.127.05"), "12.4",
                       "nvidia-h100-80gb-hbm3"),
    "h100-memory-info-not-supported": ("NVIDIA-H100-80GB-HBM3", "1", None, ("550", "127", "05", "550.127.05"), "12.4",
                                       "nvidia-h100-80gb-hbm3"),
    "h100-mig-me": ("NVIDIA-H100-80GB-HBM3", "1", "81559", ("550", "127", "05", "550.127.05"), "12.4",
                    "nvidia-h100-80gb-hbm3"),
    # GFD exits where NVML does not give the compute capability of the GPU it labels
    "t4-compute-capability-not-supported": ("gfd exits", "nvidia-tesla-t4"),
    # three models on one node: labelled after the first GPU's, as the labels' rule for two-model nodes has it
    "a100-h100-v100-mig-capable": ("NVIDIA-A100-80GB-PCIe", "1", "81920", ("550", "127", "05", "550.127.05"), "12.4",
                                   "nvidia-a100-80gb-pcie"),
    "failure-driver-not-loaded": None,
    "failure-no-permission": None,
}


def test_every_profile_has_an_expectation():
    assert sorted(EXPECTED) == _profiles()


@pytest.mark.parametrize("name", _profiles())
def test_labels_for_every_profile(name):
    facts = facts_from_profile(name)
    labels = nvlabels.labels_for_facts(facts)
    if EXPECTED[name] is None:  # NVML did not answer: no count, so no labels at all
        assert labels == {}
        return
    if EXPECTED[name][0] == "gfd exits":  # only ours: the node is a GPU node, GFD would label nothing
        assert labels == {"nvidia.com/gpu.present": "true", "accelerator": EXPECTED[name][1],
                          "nvidia.com/gpu.deploy.device-plugin": "true",
                          "nvidia.com/gpu.deploy.gpu-feature-discovery": "true"}
        return
    product, count, memory, driver, cuda, slug = EXPECTED[name]
    want = {
        "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": product, "nvidia.com/gpu.count": count,
        "nvidia.com/gpu.memory": memory, "nvidia.com/cuda.driver-version.major": driver[0],
        "nvidia.com/cuda.driver-version.minor": driver[1], "nvidia.com/cuda.driver-version.full": driver[3],
        "nvidia.com/cuda.driver-version.revision": driver[2] or "",
        "nvidia.com/cuda.runtime-version.major": cuda.split(".")[0],
        "nvidia.com/cuda.runtime-version.minor": cuda.split(".")[1], "nvidia.com/cuda.runtime-version.full": cuda,
        "accelerator": slug,
    }
    if memory is None:  # NVML did not tell the memory: no label (GFD writes none for 0 either)
        assert "nvidia.com/gpu.memory" not in labels
        del want["nvidia.com/gpu.memory"]
    assert dict((k, labels.get(k)) for k in want) == want
    cc = facts["devices"][0].get("compute_capability")
    assert labels.get("nvidia.com/gpu.compute.major") == (cc.split(".")[0] if cc else None)
    # the deprecated forms GFD writes too, the deploy labels, and no sharing under the default config
    assert labels["nvidia.com/cuda.driver.rev"] == (driver[2] or "")
    assert labels["nvidia.com/cuda.runtime.minor"] == cuda.split(".")[1]
    assert labels["nvidia.com/gpu.deploy.device-plugin"] == labels["nvidia.com/gpu.deploy.gpu-feature-discovery"] == "true"
    # GPUs in MIG mode are labelled without sharing: replicas 0 (lm/mig-strategy.go NewGPUResourceLabelerWithoutSharing)
    all_mig = all(d.get("mig", {}).get("current") for d in facts["devices"] if d.get("name"))
    assert labels["nvidia.com/gpu.replicas"] == ("0" if all_mig else "1")
    assert labels["nvidia.com/gpu.sharing-strategy"] == "none"
    assert labels["nvidia.com/mps.capable"] == "false" and "nvidia.com/mig.strategy" not in labels
    for key, value in labels.items():
        assert names.is_valid_label_key(key) and names.is_valid_label_value(value), (key, value)


def test_first_gpu_names_a_mixed_node_and_counts_its_model():
    facts = facts_from_profile("v100x4")
    facts["devices"][0] = dict(facts["devices"][0], name="Tesla T4", product_slug="nvidia-tesla-t4", memory_total_mib=15109)
    labels = nvlabels.labels_for_facts(facts)
    assert labels["nvidia.com/gpu.product"] == "Tesla-T4"
    assert labels["accelerator"] == "nvidia-tesla-t4"
    assert labels["nvidia.com/gpu.memory"] == "15109"
    assert labels["nvidia.com/gpu.count"] == "1"  # GFD counts per model (lm/mig-strategy.go newGPULabelers)


def test_a_lost_gpu_leaves_only_our_labels_whichever_its_index():
    """GFD exits on a lost GPU (go-nvlib VisitDevices stops at its handle), so no GFD key is written for the node;
    the accelerator label (ours) names the GPU that answers."""
    facts = facts_from_profile("failure-device-lost")
    facts["devices"].reverse()
    assert facts["devices"][0]["healthy"] is False
    labels = nvlabels.labels_for_facts(facts)
    assert labels["accelerator"] == "nvidia-tesla-t4"
    assert not [key for key in labels if gfd_rules.owns(key)]


@pytest.mark.parametrize("facts", [
    NO_GPU,
    dict(NO_GPU, present=True),  # GPU on the PCI bus, no driver: count 0
    dict(facts_from_profile("t4"), present=False),
    dict(facts_from_profile("t4"), count=0),
    dict(facts_from_profile("t4"), count=None),
], ids=["no-gpu", "present-count-0", "present-false", "count-0", "count-none"])
def test_no_gpu_means_no_labels(facts):
    assert nvlabels.labels_for_facts(facts) == {}


def test_accelerator_label_key_and_disabling():
    facts = facts_from_profile("t4")
    assert nvlabels.labels_for_facts(facts, "example.com/gpu-model")["example.com/gpu-model"] == "nvidia-tesla-t4"
    labels = nvlabels.labels_for_facts(facts, "")
    assert "accelerator" not in labels and "nvidia.com/gpu.product" in labels


@pytest.mark.parametrize("version, parts", [
    ("510.47.03", ("510", "47", "03")),
    ("390.30", ("390", "30", None)),
    ("535.183.01", ("535", "183", "01")),
    ("560.35.03.1", ("560", "35", "03.1")),
    ("510", None), ("", None), (None, None), ("510..03", None), ("a b.c", None), (510.47, None),
])
def test_split_driver_version(version, parts):
    assert nvlabels.split_driver_version(version) == parts


@pytest.mark.parametrize("name, value", [
    ("Tesla V100-PCIE-16GB", "Tesla-V100-PCIE-16GB"),
    ("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"),
    ("  NVIDIA   A100 (PCIe) ", "NVIDIA-A100-PCIe"),
    ("GeForce RTX 4090/Ti", "GeForce-RTX-4090Ti"),
    ("-_.", ""),
    ("", ""),
    (None, ""),
    ("x" * 70, "x" * 63),
    ("a" * 62 + " b", "a" * 62),
    ("Ünïcode GPU", "ncode-GPU"),
])
def test_sanitize_label_value(name, value):
    assert nvlabels.sanitize_label_value(name) == value


@settings(max_examples=500, deadline=None)
@given(st.text())
def test_any_product_name_gives_a_valid_label_value(name):
    value = nvlabels.sanitize_label_value(name)
    assert names.is_valid_label_value(value), repr(value)
    facts = dict(facts_from_profile("t4"))
    facts["devices"] = [dict(facts["devices"][0], name=name or "x", product_slug=_gpu_model.product_slug(name))]
    for key, label_value in nvlabels.labels_for_facts(facts).items():
        assert names.is_valid_label_key(key) and names.is_valid_label_value(label_value), (key, label_value)


@pytest.mark.parametrize("key, valid", [
    ("accelerator", True), ("nvidia.com/gpu.product", True), ("example.com/a_b.c-d", True),
    ("", False), ("/x", False), ("Example.com/x", False), ("a/b/c", False), ("x" * 64, False), ("-x", False),
    ("node-role.kubernetes.io/gpu", True),
])
def test_is_valid_label_key(key, valid):
    assert names.is_valid_label_key(key) is valid


def test_facts_that_are_not_a_gpu_fact_fail():
    with pytest.raises(OptionError, match="kg-x"):
        nvlabels.check_facts("kg-x", None)
    with pytest.raises(OptionError, match="present"):
        nvlabels.check_facts("kg-x", {"count": 1})
    nvlabels.check_facts("kg-x", NO_GPU)


# ---- managedFields and planning -------------------------------------------------------------------------------


def node(name, labels, managers):
    """A node as the API returns it; ``managers`` is {manager: [label keys]} (``Apply`` for ours)."""
    managed = [{"manager": manager, "operation": "Apply" if manager == nl.FIELD_MANAGER else "Update",
                "apiVersion": "v1", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": dict(("f:" + key, {}) for key in keys)}}}
               for manager, keys in managers.items()]
    return {"metadata": {"name": name, "labels": dict(labels), "managedFields": managed}}


def test_owned_labels_reads_managed_fields():
    current = node("n", {"a": "1", "b": "2", "c": "3"}, {nl.FIELD_MANAGER: ["a", "b"], "kubectl-label": ["c"]})
    assert nl.owned_labels(current) == {"a": "1", "b": "2"}
    assert nl.label_owners(current) == {"a": {nl.FIELD_MANAGER}, "b": {nl.FIELD_MANAGER}, "c": {"kubectl-label"}}


def test_plan_unchanged():
    current = node("n", {"a": "1", "other": "x"}, {nl.FIELD_MANAGER: ["a"], "kubectl": ["other"]})
    plan = nl.plan_node(current, {"a": "1"})
    assert plan == {"wanted": {"a": "1"}, "patch": False, "labels_set": {}, "labels_removed": [], "labels_released": [],
                    "release": [], "before": {"a": "1"}, "after": {"a": "1"}}


def test_plan_change_add_and_remove():
    current = node("n", {"a": "1", "stale": "s", "other": "x"}, {nl.FIELD_MANAGER: ["a", "stale"], "kubectl": ["other"]})
    plan = nl.plan_node(current, {"a": "2", "new": "n"})
    assert plan["patch"] is True
    assert plan["labels_set"] == {"a": "2", "new": "n"}
    assert plan["labels_removed"] == ["stale"]
    assert plan["before"] == {"a": "1", "stale": "s"}
    assert plan["after"] == {"a": "2", "new": "n"}


def test_plan_shared_label_is_not_removed_and_taking_over_is_no_change():
    current = node("n", {"a": "1", "shared": "x"}, {nl.FIELD_MANAGER: ["shared"], "kubectl": ["shared", "a"]})
    plan = nl.plan_node(current, {"a": "1"})
    assert plan["labels_removed"] == [] and plan["labels_set"] == {}
    assert plan["patch"] is True  # ownership of "a" is taken, "shared" released: a request, but no label change


# ---- the client layer against a fake CoreV1Api ----------------------------------------------------------------


class Response(object):
    def __init__(self, data):
        self.data = json.dumps(data).encode()


class FakeCore(object):
    """Records requests; ``failures`` maps a node name to a list of exceptions raised before success."""

    def __init__(self, nodes, failures=None, page=None):
        self.nodes = dict((n["metadata"]["name"], n) for n in nodes)
        self.failures = failures or {}
        self.page = page
        self.patches = []
        self.lists = 0

    def list_node(self, limit=None, _continue=None, **kwargs):
        # None: the ApiClient's own bound, request_timeout (test_k8s_client.py: BoundedApiClient)
        assert kwargs["_preload_content"] is False and "_request_timeout" in kwargs
        self.lists += 1
        names = sorted(self.nodes)
        start = int(_continue or 0)
        size = self.page or len(names)
        items = [self.nodes[n] for n in names[start:start + size]]
        more = start + size < len(names)
        return Response({"items": items, "metadata": {"continue": str(start + size) if more else None}})

    def patch_node(self, name, body, **kwargs):
        assert kwargs["field_manager"] == nl.FIELD_MANAGER and kwargs["force"] is True
        assert kwargs["_content_type"] == "application/apply-patch+yaml"
        pending = self.failures.get(name)
        if pending:
            raise pending.pop(0)
        self.patches.append((name, body, kwargs.get("dry_run")))
        current = self.nodes[name]
        labels = dict(current["metadata"]["labels"])
        for key in nl.owned_labels(current):
            labels.pop(key)
        labels.update(body["metadata"]["labels"])
        self.nodes[name] = node(name, labels, {nl.FIELD_MANAGER: list(body["metadata"]["labels"])})
        return Response(self.nodes[name])


def api_error(status):
    exc = k8s_client.ApiException(status=status, reason="Nope")
    exc.body = json.dumps({"message": "node is busy"})
    return exc


def run(params, labeller, **kwargs):
    """The module's run with NVIDIA's labels (what gpu_node_labels passes)."""
    return nl.run(params, labeller, nvlabels.labels_for, **kwargs)


def labeller(core, **kwargs):
    waits = []
    result = nl.NodeLabeller(core, wait=waits.append, **kwargs)
    result.waits = waits
    return result


def params(**kwargs):
    base = {"nodes": None, "node_names": {}, "accelerator_label": "accelerator", "state": "present",
            "missing_nodes": "fail", "concurrency": 4}
    base.update(kwargs)
    return base


def test_run_labels_only_what_differs_and_reports():
    t4 = nvlabels.labels_for_facts(facts_from_profile("t4"))
    core = FakeCore([node("a", {}, {}), node("b", t4, {nl.FIELD_MANAGER: list(t4)}), node("c", {"x": "1"}, {"k": ["x"]})],
                    page=1)
    facts = {"a": facts_from_profile("v100x4"), "b": facts_from_profile("t4"), "c": NO_GPU}
    result = run(params(nodes=facts), labeller(core), want_diff=True)
    assert core.lists == 3  # paged
    assert [p[0] for p in core.patches] == ["a"]
    assert result["changed"] is True
    assert result["summary"] == {"total": 3, "changed": 1, "unchanged": 2, "missing": 0}
    assert result["nodes"]["a"]["labels_set"]["nvidia.com/gpu.count"] == "4"
    assert result["nodes"]["b"]["status"] == "unchanged"
    assert result["diff"] == [{"before_header": "node/a labels", "after_header": "node/a labels", "before": {},
                               "after": nvlabels.labels_for_facts(facts["a"])}]
    again = run(params(nodes=facts), labeller(core))
    assert again["changed"] is False and len(core.patches) == 1


def test_check_mode_writes_nothing():
    core = FakeCore([node("a", {}, {})])
    result = run(params(nodes={"a": facts_from_profile("t4")}), labeller(core), check_mode=True)
    assert result["changed"] is True and core.patches == []


def test_absent_without_nodes_cleans_every_node_we_labelled():
    labelled = node("a", {"nvidia.com/gpu.count": "1", "x": "y"}, {nl.FIELD_MANAGER: ["nvidia.com/gpu.count"], "k": ["x"]})
    core = FakeCore([labelled, node("b", {"x": "y"}, {"k": ["x"]})])
    result = run(params(state="absent"), labeller(core))
    assert result["nodes"] == {"a": {"status": "changed", "labels": {}, "labels_set": {},
                                     "labels_removed": ["nvidia.com/gpu.count"], "labels_released": []}}
    assert core.patches[0][1]["metadata"]["labels"] == {}
    assert core.nodes["a"]["metadata"]["labels"] == {"x": "y"}


def test_missing_nodes_fail_before_any_patch_with_a_hint():
    core = FakeCore([node("a", {}, {})])
    with pytest.raises(K8sError) as info:
        run(params(nodes={"a": NO_GPU, "gone-1": NO_GPU, "host.example.com": NO_GPU},
                   node_names={"host.example.com": "host"}), labeller(core))
    assert "2 node(s) not found" in str(info.value) and "gone-1" in str(info.value)
    assert "node_names for host.example.com" in str(info.value)
    assert core.patches == []


def test_missing_nodes_skip():
    core = FakeCore([node("a", {}, {})])
    result = run(params(nodes={"a": facts_from_profile("t4"), "b": NO_GPU}, missing_nodes="skip"), labeller(core))
    assert result["nodes"]["b"]["status"] == "missing" and result["summary"]["missing"] == 1
    assert "b" in result["warnings"][0]


def test_node_names_map_inventory_to_nodes():
    core = FakeCore([node("kg-t4", {}, {})])
    result = run(params(nodes={"t4.example.com": facts_from_profile("t4")},
                        node_names={"t4.example.com": "kg-t4"}), labeller(core))
    assert list(result["nodes"]) == ["kg-t4"] and core.patches[0][0] == "kg-t4"
    with pytest.raises(OptionError, match="both map"):
        nl.resolve_node_names({"x": 1, "y": 1}, {"x": "n", "y": "n"})


def test_bad_facts_fail_naming_the_host():
    core = FakeCore([node("a", {}, {})])
    with pytest.raises(OptionError, match="node a"):
        run(params(nodes={"a": None}), labeller(core))


def test_bad_accelerator_label():
    with pytest.raises(OptionError, match="not a valid"):
        run(params(nodes={}, accelerator_label="bad key!"), labeller(FakeCore([])))


@pytest.mark.parametrize("status", [409, 429, 500, 503, 0])
def test_retries_then_succeeds(status):
    core = FakeCore([node("a", {}, {})], failures={"a": [api_error(status), api_error(status)]})
    lab = labeller(core)
    result = run(params(nodes={"a": facts_from_profile("t4")}), lab)
    assert result["changed"] is True and lab.waits == [0.5, 1.0]


def test_connection_errors_are_retried():
    from urllib3.exceptions import ProtocolError
    core = FakeCore([node("a", {}, {})], failures={"a": [ProtocolError("reset")]})
    assert run(params(nodes={"a": facts_from_profile("t4")}), labeller(core))["changed"] is True


def test_retries_are_bounded_and_the_error_names_the_node():
    core = FakeCore([node("a", {}, {}), node("b", {}, {})], failures={"b": [api_error(503)] * 10})
    lab = labeller(core, retries=2)
    with pytest.raises(K8sError) as info:
        run(params(nodes={"a": facts_from_profile("t4"), "b": facts_from_profile("t4")}), lab)
    assert info.value.details["node"] == "b"
    assert "node b failed after 3 attempt(s): HTTP 503 Nope: node is busy" in str(info.value)
    assert "1 node(s) were labelled before the error" in str(info.value)
    assert fail_args(info.value) == {"msg": str(info.value), "node": "b"}


def test_a_server_that_stopped_answering_ends_the_run_after_the_nodes_in_flight():
    # regression (tests/faults, api-server-gone, seed 24435703 trial 3): kube-apiserver stopped for 50 s during the labels
    # of 500 nodes; each thread spent its retries on one node, failed it and went on to the next, so the module failed
    # only when the server came back (58 s, bound 40 s). Now the nodes not started yet are left alone.
    from urllib3.exceptions import ProtocolError
    names = ["n%02d" % i for i in range(40)]
    core = FakeCore([node(n, {}, {}) for n in names], failures=dict((n, [ProtocolError("refused")] * 9) for n in names))
    lab = labeller(core, retries=1)
    with pytest.raises(K8sError) as info:
        run(params(nodes=dict((n, facts_from_profile("t4")) for n in names)), lab)
    tried = [n for n in names if len(core.failures[n]) < 9]
    assert len(tried) <= 4  # the threads' first nodes (concurrency 4), each tried twice
    assert all(len(core.failures[n]) == 7 for n in tried)
    assert "connection error" in str(info.value) and "(%d not tried after it)" % (40 - len(tried)) in str(info.value)


def test_an_error_about_one_node_does_not_stop_the_others():
    names = ["n%02d" % i for i in range(10)]
    core = FakeCore([node(n, {}, {}) for n in names], failures={"n03": [api_error(403)]})
    with pytest.raises(K8sError) as info:
        run(params(nodes=dict((n, facts_from_profile("t4")) for n in names)), labeller(core))
    assert "node n03 failed after 1 attempt(s): HTTP 403" in str(info.value)
    assert "(9 node(s) were labelled before the error)" in str(info.value) and len(core.patches) == 9


def test_a_throttled_patch_is_retried_past_the_modules_retries():
    # regression (tests/faults, throttled): under API Priority and Fairness a PATCH turned away 5 times in a row (429,
    # Retry-After: 1) failed the module with its default retries=4; the server is there and asks to be asked again
    throttled = api_error(429)
    throttled.headers = {"Retry-After": "1"}
    core = FakeCore([node("a", {}, {})], failures={"a": [throttled] * 12})
    lab = labeller(core)
    assert run(params(nodes={"a": facts_from_profile("t4")}), lab)["changed"] is True
    assert len(lab.waits) == 12 and all(1.0 <= w <= 2.0 for w in lab.waits)


def test_client_errors_are_not_retried():
    core = FakeCore([node("a", {}, {})], failures={"a": [api_error(403)]})
    lab = labeller(core)
    with pytest.raises(K8sError, match="HTTP 403"):
        run(params(nodes={"a": facts_from_profile("t4")}), lab)
    assert lab.waits == []


def test_unexpected_errors_keep_their_traceback():
    result = None
    try:
        raise KeyError("x")
    except KeyError as exc:
        result = fail_args(exc)
    assert result["msg"].startswith("unexpected error: KeyError") and "Traceback" in result["exception"]


# ---- soft keys (the deploy labels) and releasing labels to GPU feature discovery ------------------------------

DEPLOY = "nvidia.com/gpu.deploy.device-plugin"


@pytest.mark.parametrize("current, owners, included", [
    ({}, {}, True),  # absent: ours
    ({DEPLOY: "true"}, {"gpu-operator": [DEPLOY]}, True),  # already "true": applied (co-owned)
    ({DEPLOY: "paused-for-mig-change"}, {"nvidia-mig-manager": [DEPLOY]}, False),  # never overwritten
    ({DEPLOY: "false"}, {"kubectl-label": [DEPLOY]}, False),
])
def test_soft_keys_are_only_set_where_absent_or_equal(current, owners, included):
    plan = nl.plan_node(node("n", current, owners), {DEPLOY: "true", "a": "1"}, soft=(DEPLOY,))
    assert (DEPLOY in plan["wanted"]) is included
    assert plan["labels_set"] == dict({"a": "1"}, **({DEPLOY: "true"} if included and not current else {}))
    assert plan["labels_removed"] == []
    assert plan["after"].get(DEPLOY) == ("true" if included else None)  # a value not ours is not involved


def test_labels_taken_over_are_released_not_removed():
    current = node("n", {"gpu.product": "T4", "gpu.count": "1", "mine": "x", "stale": "s"},
                   {nl.FIELD_MANAGER: ["gpu.product", "gpu.count", "mine", "stale"], "nfd-master": ["gpu.count"]})
    plan = nl.plan_node(current, {"mine": "x"}, releases=lambda key: key.startswith("gpu."))
    assert plan["labels_released"] == ["gpu.count", "gpu.product"]
    assert plan["release"] == ["gpu.product"]  # only ours: our ownership must go before the apply; gpu.count is co-owned
    assert plan["labels_removed"] == ["stale"] and plan["labels_set"] == {}
    assert plan["patch"] is True
    assert plan["after"] == {"mine": "x"} and "gpu.product" not in plan["before"]


def test_without_ownership_drops_only_our_apply_entry_keys():
    managed = node("n", {}, {nl.FIELD_MANAGER: ["a", "b"], "other": ["a"]})["metadata"]["managedFields"]
    out = nl.without_ownership(managed, ["a"])
    assert out[0]["fieldsV1"] == {"f:metadata": {"f:labels": {"f:b": {}}}} and out[1] == managed[1]
    assert [e["manager"] for e in nl.without_ownership(managed, ["a", "b"])] == ["other"]


class ReleasingCore(FakeCore):
    """FakeCore that also reads nodes and takes merge patches of managedFields, guarded by resourceVersion."""

    def __init__(self, nodes, conflicts=0):
        super(ReleasingCore, self).__init__(nodes)
        self.conflicts = conflicts
        self.merges = []
        for item in self.nodes.values():
            item["metadata"]["resourceVersion"] = "1"

    def read_node(self, name, **kwargs):
        assert kwargs["_preload_content"] is False
        return Response(self.nodes[name])

    def patch_node(self, name, body, **kwargs):
        if kwargs.get("_content_type") != "application/merge-patch+json":
            response = super(ReleasingCore, self).patch_node(name, body, **kwargs)
            self.nodes[name]["metadata"]["resourceVersion"] = "9"
            return response
        assert set(body["metadata"]) == {"resourceVersion", "managedFields"}
        current = self.nodes[name]
        if self.conflicts:
            self.conflicts -= 1
            current["metadata"]["resourceVersion"] = str(int(current["metadata"]["resourceVersion"]) + 1)
            raise api_error(409)
        assert body["metadata"]["resourceVersion"] == current["metadata"]["resourceVersion"]
        self.merges.append((name, body))
        current["metadata"]["managedFields"] = body["metadata"]["managedFields"]
        return Response(current)


@pytest.mark.parametrize("conflicts", [0, 2])
def test_run_releases_gfd_labels_and_keeps_them(conflicts):
    from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import gfd
    t4 = nvlabels.labels_for_facts(facts_from_profile("t4"))
    core = ReleasingCore([node("a", t4, {nl.FIELD_MANAGER: list(t4)})], conflicts=conflicts)
    lab = labeller(core)
    labels_for, soft, releases = nvlabels.node_rules({"gfd": True})
    check = nl.run(params(nodes={"a": facts_from_profile("t4")}), lab, labels_for, check_mode=True, soft=soft,
                   releases=releases)
    assert core.merges == [] and core.patches == []
    result = nl.run(params(nodes={"a": facts_from_profile("t4")}), lab, labels_for, soft=soft, releases=releases,
                    want_diff=True)
    assert result["nodes"]["a"] == check["nodes"]["a"]
    released = sorted(k for k in t4 if gfd.owns(k))
    assert result["nodes"]["a"]["labels_released"] == released and result["nodes"]["a"]["labels_removed"] == []
    assert result["changed"] is False and result["diff"] == []
    assert len(core.merges) == 1 and lab.waits == [0.5, 1.0][:conflicts]
    assert core.nodes["a"]["metadata"]["labels"] == t4  # every label stayed
    assert sorted(nl.owned_labels(core.nodes["a"])) == sorted(k for k in t4 if not gfd.owns(k))
    again = nl.run(params(nodes={"a": facts_from_profile("t4")}), lab, labels_for, soft=soft, releases=releases)
    assert again["nodes"]["a"]["labels_released"] == [] and len(core.merges) == 1 and len(core.patches) == 1


def test_run_with_gfd_removes_the_gfd_keys_gfd_will_not_write():
    t4 = nvlabels.labels_for_facts(facts_from_profile("t4"))
    stale = dict(t4, **{"nvidia.com/mig-1g.10gb.count": "7"})  # from an earlier MIG layout
    core = ReleasingCore([node("a", stale, {nl.FIELD_MANAGER: list(stale)})])
    labels_for, soft, releases = nvlabels.node_rules({"gfd": True})
    result = nl.run(params(nodes={"a": facts_from_profile("t4")}), labeller(core), labels_for, soft=soft,
                    releases=releases)
    assert result["nodes"]["a"]["labels_removed"] == ["nvidia.com/mig-1g.10gb.count"]
    assert "nvidia.com/gpu.product" in result["nodes"]["a"]["labels_released"]
    assert core.nodes["a"]["metadata"]["labels"] == t4


@pytest.mark.parametrize("with_gfd", [False, True])
def test_a_node_gfd_would_exit_on_loses_the_gfd_keys_we_wrote(with_gfd):
    """A GPU falls off the bus: GPU feature discovery exits there and labels nothing, so the GFD keys we wrote before
    are removed (without GFD: our apply no longer has them; with GFD: it will never publish them), ours stay."""
    from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import gfd
    before = nvlabels.labels_for_facts(facts_from_profile("t4"))
    core = ReleasingCore([node("a", before, {nl.FIELD_MANAGER: list(before)})])
    labels_for, soft, releases = nvlabels.node_rules({"gfd": with_gfd})
    lost = facts_from_profile("failure-device-lost")
    result = nl.run(params(nodes={"a": lost}), labeller(core), labels_for, soft=soft, releases=releases)
    gfd_keys = sorted(k for k in before if gfd.owns(k))
    assert gfd_keys and result["nodes"]["a"]["labels_removed"] == gfd_keys
    assert result["nodes"]["a"]["labels_released"] == []
    assert core.nodes["a"]["metadata"]["labels"] == dict((k, v) for k, v in before.items() if not gfd.owns(k))
