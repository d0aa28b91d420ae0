# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests of the proof workload's pure parts: which resource a proof asks for, the Job it runs, the verdicts; with
NVIDIA's workload (the vendor registry's) unless a test says otherwise."""

import json

import pytest

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import K8sError, OptionError
from ansible_collections.kubegpu.cluster.plugins.module_utils import _vendors
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import client as k8s_client, proof
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import constants as nv

NV = proof.Workload(**_vendors.NVIDIA.proof)
AMD = proof.Workload(**_vendors.AMD.proof)


def test_advertised_reads_only_nvidia_resources():
    node = {"status": {"allocatable": {"cpu": "16", "nvidia.com/gpu": "4", "nvidia.com/mig-1g.10gb": "7"}}}
    assert proof.advertised(node, NV) == {"nvidia.com/gpu": 4, "nvidia.com/mig-1g.10gb": 7}
    assert proof.advertised({}, NV) == {}


def test_a_vendor_proof_reads_its_vendors_resources_and_picks_one():
    node = {"status": {"allocatable": {"cpu": "16", "nvidia.com/gpu": "4", "amd.com/gpu": "2", "gpu.intel.com/i915": "3"}}}
    assert proof.advertised(node, AMD) == {"amd.com/gpu": 2}
    assert proof.advertised(node, proof.Workload(**_vendors.INTEL.proof)) == {"gpu.intel.com/i915": 3}
    assert proof.pick_resource(proof.advertised(node, AMD), AMD) == "amd.com/gpu"
    with pytest.raises(K8sError, match="no node advertises an amd.com resource"):
        proof.plan({"per_node": True}, {"kg-cpu": {}}, AMD)
    # a resource named without its prefix gets the vendor's
    assert proof.plan({"resource": "gpu"}, {"kg-mi210": {"amd.com/gpu": 2}}, AMD) == [(None, "amd.com/gpu")]


@pytest.mark.parametrize("resources, want", [
    ({"nvidia.com/gpu": 4, "nvidia.com/gpu.shared": 8}, "nvidia.com/gpu"),
    ({"nvidia.com/gpu.shared": 16}, "nvidia.com/gpu.shared"),
    ({"nvidia.com/mig-3g.40gb": 1, "nvidia.com/mig-1g.10gb": 7}, "nvidia.com/mig-1g.10gb"),
    ({"nvidia.com/gpu": 0, "nvidia.com/mig-2g.20gb": 2}, "nvidia.com/mig-2g.20gb"),
    ({}, None),
    ({"nvidia.com/gpu": 0}, None),
])
def test_pick_resource(resources, want):
    assert proof.pick_resource(resources, NV) == want


def test_job_names_are_valid_stable_and_distinct():
    names = [proof.job_name(n) for n in ("gpu-1", "GPU_1", "a" * 80 + ".example.com")]
    assert len(set(names)) == 3
    assert names[0] == proof.job_name("gpu-1")
    for name in names:
        assert len(name) <= 63 and name == name.lower() and not name.endswith("-")
    assert proof.job_name(None) == "gpu-proof"


def test_job_asks_for_one_gpu_with_limits_and_is_pinned():
    job = proof.render_job({"timeout": 120, "runtime_class": "nvidia", "image_pull_secrets": ["mirror"]},
                           "gpu-validation", "gpu-1", "nvidia.com/gpu.shared", NV)
    spec = job["spec"]["template"]["spec"]
    ctr = spec["containers"][0]
    assert ctr["resources"] == {"limits": {"nvidia.com/gpu.shared": 1}}  # the request defaults to the limit
    assert ctr["image"] == nv.PROOF_IMAGE
    assert ctr["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert spec["restartPolicy"] == "Never" and job["spec"]["backoffLimit"] == 0
    assert job["spec"]["activeDeadlineSeconds"] == 420
    assert spec["nodeSelector"] == {"kubernetes.io/hostname": "gpu-1"}
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["imagePullSecrets"] == [{"name": "mirror"}]
    assert spec["tolerations"] == nv.PROOF_TOLERATIONS
    assert "command" not in ctr and "args" not in ctr


def test_cluster_wide_job_is_not_pinned_and_takes_a_command():
    job = proof.render_job({"command": ["nvidia-smi"], "args": ["-L"], "tolerations": []}, "ns", None, "nvidia.com/gpu", NV)
    spec = job["spec"]["template"]["spec"]
    assert "nodeSelector" not in spec and spec["tolerations"] == []
    assert spec["containers"][0]["command"] == ["nvidia-smi"] and spec["containers"][0]["args"] == ["-L"]


@pytest.mark.parametrize("conditions, want", [
    ([], (False, False)),
    ([{"type": "Complete", "status": "True"}], (True, True)),
    ([{"type": "Failed", "status": "True"}], (True, False)),
    ([{"type": "Failed", "status": "False"}], (False, False)),
])
def test_job_finished(conditions, want):
    assert proof.job_finished({"status": {"conditions": conditions}}) == want


def test_hints_for_known_failures():
    assert "device plugin" in proof.hint("0/7 nodes are available: 7 Insufficient nvidia.com/gpu.", NV)
    assert "toleration" in proof.hint("1 node(s) had untolerated taint {nvidia.com/gpu: present}", NV)
    assert "runtime" in proof.hint("Failed to initialize NVML: could not load NVML library", NV)
    assert proof.hint("something else", NV) == ""
    # a scheduler message naming both: the vendor's hint (the resource) first
    assert "device plugin" in proof.hint("0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) had "
                                         "untolerated taint {x: y}", NV)
    # another vendor's proof gets the hints any proof gets, not NVIDIA's
    assert "toleration" in proof.hint("1 node(s) had untolerated taint {amd.com/gpu: present}", AMD)
    assert proof.hint("Failed to initialize NVML: could not load NVML library", AMD) == ""


NODES = {"gpu-1": {"nvidia.com/gpu": 4}, "mig-1": {"nvidia.com/mig-1g.10gb": 7}, "cpu-1": {}}


def test_plan_one_proof_for_the_cluster():
    assert proof.plan({}, NODES, NV) == [(None, "nvidia.com/gpu")]
    assert proof.plan({"resource": "mig-1g.10gb"}, NODES, NV) == [(None, "nvidia.com/mig-1g.10gb")]


def test_plan_per_node_picks_each_nodes_resource():
    assert proof.plan({"per_node": True}, NODES, NV) == [("gpu-1", "nvidia.com/gpu"), ("mig-1", "nvidia.com/mig-1g.10gb")]
    assert proof.plan({"nodes": ["mig-1"]}, NODES, NV) == [("mig-1", "nvidia.com/mig-1g.10gb")]


def test_plan_refuses_what_cannot_run():
    with pytest.raises(OptionError, match="nodes: node 'gpu-9' is not in the cluster"):
        proof.plan({"nodes": ["gpu-9"]}, NODES, NV)
    with pytest.raises(K8sError, match="cpu-1 advertises no nvidia.com resource"):
        proof.plan({"nodes": ["cpu-1"]}, NODES, NV)
    with pytest.raises(K8sError, match="no node advertises"):
        proof.plan({}, {"cpu-1": {}}, NV)
    with pytest.raises(K8sError, match="no node advertises"):
        proof.plan({"per_node": True}, {"cpu-1": {}}, NV)


class FakeClient(k8s_client.Client):
    """Just the reads ``Proof._verdict`` makes: the proof's pod and the events; logs through the real ``pod_log`` over
    a stand-in core API."""

    def __init__(self, pods=(), events=(), core=None):
        super(FakeClient, self).__init__(dynamic=object())
        self._core = core
        self.pods = list(pods)
        self.events = list(events)

    def list(self, api_version, kind, namespace=None, label_selector=None, field_selector=None):
        return list(self.pods) if kind == "Pod" else list(self.events)


class FakeCore(object):
    def __init__(self, log=None, error=None):
        self.log = log
        self.error = error

    def read_namespaced_pod_log(self, name, namespace, container=None, _request_timeout=None):
        if self.error:
            raise self.error
        return self.log


POD = {"metadata": {"name": "gpu-proof-abcde"}, "spec": {"nodeName": "gpu-1"}, "status": {"phase": "Succeeded"}}
DONE = {"metadata": {"name": "gpu-proof"}, "status": {"conditions": [{"type": "Complete", "status": "True"}]}}
VECTORADD = "[Vector addition of 50000 elements]\nCopy input data from the host memory to the CUDA device\nTest PASSED\nDone\n"


def verdict(core, job=None, pods=(POD,), events=(), **params):
    job = DONE if job is None else job
    options = dict(success_pattern=nv.PROOF_PATTERN, timeout=60)
    options.update(params)
    return proof.Proof(options, FakeClient(pods, events, core), NV)._verdict(None, "nvidia.com/gpu", job)


def test_log_with_the_pattern_passes():
    result = verdict(FakeCore(VECTORADD))
    assert (result["passed"], result["log_checked"], result["node"]) == (True, True, "gpu-1")
    assert result["detail"] == "succeeded, log shows 'Test PASSED'"


def test_log_without_the_pattern_fails_even_though_the_job_succeeded():
    result = verdict(FakeCore("CUDA error: no CUDA-capable device is detected\nTest FAILED\n"))
    assert (result["passed"], result["log_checked"]) == (False, True)
    assert result["detail"] == "succeeded, but 'Test PASSED' is not in its log"
    assert "no CUDA-capable device" in result["log_tail"]


def test_unreadable_log_passes_on_success_unless_required():
    error = k8s_client.ApiException(status=500, reason="Internal Server Error")
    assert verdict(FakeCore(error=error))["passed"] is True
    strict = verdict(FakeCore(error=error), require_log=True)
    assert strict["passed"] is False and "require_log is set" in strict["detail"]


def test_failed_job_names_the_pod_and_the_fix():
    failed = {"metadata": {"name": "gpu-proof"}, "status": {"conditions": [{"type": "Failed", "status": "True"}]}}
    pod = dict(POD, status={"phase": "Failed", "reason": "UnexpectedAdmissionError",
                            "message": "maximum request size for shared resources is 1; found 2"})
    result = verdict(FakeCore(VECTORADD), job=failed, pods=[pod])
    assert result["passed"] is False and result["log_checked"] is False
    assert result["detail"].startswith("failed: pod gpu-proof-abcde is Failed (UnexpectedAdmissionError; maximum request")
    assert result["detail"].endswith("the kubelet refused the pod at admission (shared GPUs: ask for one device only)")


CUDA_TOO_NEW = "CUDA driver version is insufficient for CUDA runtime version"
FAILED = {"metadata": {"name": "gpu-proof"}, "status": {"conditions": [{"type": "Failed", "status": "True"}]}}


def test_a_failed_proof_says_what_its_program_said_and_what_to_do():
    pod = dict(POD, status={"phase": "Failed"})
    log = "[Vector addition of 50000 elements]\nFailed to allocate device vector A (error code %s)!\n" % CUDA_TOO_NEW
    result = verdict(FakeCore(log), job=FAILED, pods=[pod])
    assert result["passed"] is False
    assert "its log says: Failed to allocate device vector A (error code %s)!" % CUDA_TOO_NEW in result["detail"]
    assert result["detail"].endswith("upgrade the driver (kubegpu.cluster.gpu_driver) or prove with an image built "
                                     "for the CUDA version that driver supports")
    assert CUDA_TOO_NEW in result["log_tail"]


def test_a_failed_proofs_own_words_come_first_and_only_warning_events_follow():
    """Seen in make demo on a kubelet node: the pod's Created and Started events buried CUDA's message."""
    pod = dict(POD, status={"phase": "Failed"})
    log = "[Vector addition of 50000 elements]\nFailed to allocate device vector A (error code %s)!\n" % CUDA_TOO_NEW
    events = [{"type": "Normal", "reason": "Created", "message": "Container created", "lastTimestamp": "1"},
              {"type": "Warning", "reason": "MissingClusterDNS", "message": "no ClusterDNS IP", "lastTimestamp": "2"},
              {"type": "Normal", "reason": "Started", "message": "Container started", "lastTimestamp": "3"}]
    result = verdict(FakeCore(log), job=FAILED, pods=[pod], events=events)
    assert result["detail"].startswith("failed: its log says: Failed to allocate device vector A (error code %s)! "
                                       "(pod gpu-proof-abcde is Failed: MissingClusterDNS: no ClusterDNS IP); "
                                       % CUDA_TOO_NEW), result["detail"]
    assert "Container started" not in result["detail"]


def test_a_failed_proof_names_the_error_line_even_when_stdout_was_flushed_after_it():
    """Seen on a kubelet node: vectorAdd's buffered first line (stdout) came after its error (stderr) in the log."""
    pod = dict(POD, status={"phase": "Failed"})
    log = "Failed to allocate device vector A (error code %s)!\n[Vector addition of 50000 elements]\n" % CUDA_TOO_NEW
    result = verdict(FakeCore(log), job=FAILED, pods=[pod])
    assert result["detail"].startswith("failed: its log says: Failed to allocate device vector A (error code %s)!"
                                       % CUDA_TOO_NEW), result["detail"]
    assert proof.telling_line("a\nb\n") == "b" and proof.telling_line("") == ""


def test_a_failed_proof_whose_log_cannot_be_read_says_its_termination_message():
    error = k8s_client.ApiException(status=500, reason="Internal Server Error")
    terminated = {"name": "gpu-proof", "state": {"terminated": {"exitCode": 1, "message": CUDA_TOO_NEW + "\n"}}}
    pod = dict(POD, status={"phase": "Failed", "containerStatuses": [terminated]})
    result = verdict(FakeCore(error=error), job=FAILED, pods=[pod])
    assert "its log says: " + CUDA_TOO_NEW in result["detail"]
    assert verdict(FakeCore(error=error), job=FAILED, pods=[dict(POD, status={"phase": "Failed"})])["detail"] == (
        "failed: pod gpu-proof-abcde is Failed (no reason given)")


def test_the_proof_container_keeps_its_last_words_in_its_status():
    job = proof.render_job({}, "ns", "gpu-1", "nvidia.com/gpu", NV)
    assert job["spec"]["template"]["spec"]["containers"][0]["terminationMessagePolicy"] == "FallbackToLogsOnError"


# --- Proof only when something could have changed ---------------------------------------------------------------

CONFIGS = {"default": {"version": "v1", "flags": {"migStrategy": "none"}},
           "ts2": {"version": "v1", "flags": {"migStrategy": "none"},
                   "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}}}
UNDER = {"gpu-1": {"driver_version": "550.54.15", "runtime": "containerd 1.7.24 default nvidia"},
         "gpu-2": {"config": "ts2", "driver_version": "550.54.15", "runtime": "containerd 1.7.24 default nvidia"}}


def test_what_a_proof_runs_under_hashes_each_nodes_own_config():
    from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.plugin_config import config_hash
    under = proof.under_by_node({"plugin_configs": CONFIGS, "proven_under": UNDER}, NV)
    assert under["gpu-1"]["config_hash"] == config_hash(CONFIGS["default"])
    assert under["gpu-2"]["config_hash"] == config_hash(CONFIGS["ts2"]) != under["gpu-1"]["config_hash"]
    assert under["gpu-1"]["proof"] == under["gpu-2"]["proof"]
    other_image = proof.under_by_node({"plugin_configs": CONFIGS, "proven_under": UNDER, "image": "mirror/vectoradd:1"}, NV)
    assert other_image["gpu-1"]["proof"] != under["gpu-1"]["proof"]  # another proof is proved again
    # without the configs (the device_plugin role did not run in the play) the hash is unknown
    assert proof.under_by_node({"proven_under": UNDER}, NV)["gpu-1"]["config_hash"] is None


@pytest.mark.parametrize("under, field", [
    ({"gpu-1": "550.54.15"}, "proven_under.gpu-1"),
    ({"gpu-1": {"driver": "550.54.15"}}, "proven_under.gpu-1"),
    ({"gpu-1": {"config": "mps4"}}, "proven_under.gpu-1.config"),
])
def test_bad_proven_under_names_the_field(under, field):
    with pytest.raises(OptionError) as caught:
        proof.under_by_node({"plugin_configs": CONFIGS, "proven_under": under}, NV)
    assert caught.value.option == field


def node_with(record_text, name="gpu-1"):
    return {"metadata": {"name": name, "annotations": {proof.ANNOTATION_LAST_PROOF: record_text}}}


def test_a_record_is_written_and_read_back():
    under = proof.under_by_node({"plugin_configs": CONFIGS, "proven_under": UNDER}, NV)["gpu-1"]
    passed = {"node": "gpu-1", "job": "gpu-proof-gpu-1-abcdef", "resource": "nvidia.com/gpu", "passed": True,
              "detail": "succeeded, log shows 'Test PASSED'"}
    text = proof.record(passed, under)
    last = proof.read_record(node_with(text))
    assert last["under"] == under and last["resource"] == "nvidia.com/gpu" and last["passed_at"].endswith("Z")
    assert proof.read_record(node_with("not json")) is None
    assert proof.read_record(node_with('{"under": "x"}')) is None
    assert proof.read_record({"metadata": {"name": "gpu-1"}}) is None


def test_the_last_proof_stands_only_while_nothing_changed():
    under = proof.under_by_node({"plugin_configs": CONFIGS, "proven_under": UNDER}, NV)["gpu-1"]
    last = proof.read_record(node_with(proof.record({"job": "j", "resource": "nvidia.com/gpu", "detail": "ok"}, under)))
    assert "unchanged since the proof passed at" in proof.still_valid(last, under, {"nvidia.com/gpu": 4})
    for key, value in (("driver_version", "560.35.03"), ("runtime", "docker 27.0 default nvidia"), ("config_hash", "0" * 64)):
        assert proof.still_valid(last, dict(under, **{key: value}), {"nvidia.com/gpu": 4}) == "", key
    assert proof.still_valid(last, under, {"nvidia.com/gpu": 0}) == ""  # no longer advertised
    assert proof.still_valid(last, under, {"nvidia.com/gpu.shared": 8}) == ""  # advertises another resource now
    assert proof.still_valid(None, under, {"nvidia.com/gpu": 4}) == ""
    # issue 26: a value this run does not know (the role that reads it did not run in the play) is no change
    for key in proof.UNDER_KEYS:
        why = proof.still_valid(last, dict(under, **{key: None}), {"nvidia.com/gpu": 4})
        assert "unchanged since" in why and "not read in this run, so taken as unchanged: %s" % key in why, key
    nothing_known = dict((k, None) for k in proof.UNDER_KEYS)
    assert "unchanged since" in proof.still_valid(last, dict(nothing_known, proof=under["proof"]), {"nvidia.com/gpu": 4})
    # ... but the proof itself is always known, and must be the same
    assert proof.still_valid(last, dict(nothing_known, proof="another"), {"nvidia.com/gpu": 4}) == ""
    # a record made while a value was unknown does not stand for a value known now
    unknown_then = proof.read_record(node_with(proof.record({"job": "j", "resource": "nvidia.com/gpu", "detail": "ok"},
                                                            dict(under, runtime=None))))
    assert proof.still_valid(unknown_then, under, {"nvidia.com/gpu": 4}) == ""


def test_a_record_keeps_what_this_run_did_not_know_from_the_last_one():
    under = proof.under_by_node({"plugin_configs": CONFIGS, "proven_under": UNDER}, NV)["gpu-1"]
    last = proof.read_record(node_with(proof.record({"job": "j", "resource": "nvidia.com/gpu", "detail": "ok"}, under)))
    now = dict(under, runtime=None, driver_version="560.35.03")
    assert proof.merged_under(now, last) == dict(under, driver_version="560.35.03")
    assert proof.merged_under(now, None) == now


class RecordingClient(k8s_client.Client):
    """Nodes to list, and the objects applied (the record is written with server-side apply)."""

    def __init__(self, nodes):
        super(RecordingClient, self).__init__(dynamic=object())
        self.nodes = nodes
        self.applied = []

    def list(self, api_version, kind, namespace=None, label_selector=None, field_selector=None):
        return list(self.nodes) if kind == "Node" else []

    def apply(self, obj, dry_run=False):
        self.applied.append(obj)
        return "updated", None, obj


def gpu_node(name, record_text=None, count=4):
    node = {"metadata": {"name": name, "annotations": {}}, "status": {"allocatable": {"nvidia.com/gpu": str(count)}}}
    if record_text:
        node["metadata"]["annotations"][proof.ANNOTATION_LAST_PROOF] = record_text
    return node


def test_a_rerun_keeps_the_nodes_whose_proof_stands_and_runs_the_others():
    params = {"plugin_configs": CONFIGS, "proven_under": UNDER, "per_node": True}
    under = proof.under_by_node(params, NV)
    stands = proof.record({"job": "gpu-proof-gpu-1", "resource": "nvidia.com/gpu", "detail": "succeeded"}, under["gpu-1"])
    old = proof.record({"job": "gpu-proof-gpu-2", "resource": "nvidia.com/gpu", "detail": "succeeded"},
                       dict(under["gpu-2"], driver_version="535.161.08"))
    client = RecordingClient([gpu_node("gpu-1", stands), gpu_node("gpu-2", old), gpu_node("gpu-3")])
    runner = proof.Proof(params, client, NV)
    nodes = runner.nodes()
    planned = proof.plan(params, nodes, NV)
    to_run, kept = proof.keep(params, planned, nodes, under, runner.records)
    assert to_run == [("gpu-2", "nvidia.com/gpu"), ("gpu-3", "nvidia.com/gpu")]  # gpu-3: none on record
    [one] = kept
    assert (one["node"], one["passed"], one["ran"]) == ("gpu-1", True, False)
    assert one["detail"].startswith("succeeded; unchanged since the proof passed at")
    assert proof.keep(dict(params, reprove="always"), planned, nodes, under, runner.records)[0] == planned
    # the cluster-wide proof stands when one node's last proof does
    wide = dict(params, per_node=False)
    assert proof.keep(wide, proof.plan(wide, nodes, NV), nodes, under, runner.records)[0] == []


def test_settled_is_the_modules_result_when_every_proof_stands_on_the_nodes_as_listed():
    # the module's options as its argument spec completes them; settled() completes left-out ones the same way
    params = NV.fill(dict(proof.DECIDING_DEFAULTS, plugin_configs=CONFIGS, proven_under=UNDER, per_node=True,
                          namespace="gpu-validation"))
    under = proof.under_by_node(params, NV)

    def stands(name):
        return proof.record({"job": "gpu-proof-" + name, "resource": "nvidia.com/gpu", "detail": "succeeded"},
                            under[name])

    cpu = {"metadata": {"name": "cpu-9"}, "status": {"allocatable": {"cpu": "16"}}}
    found = [gpu_node("gpu-1", stands("gpu-1")), gpu_node("gpu-2", stands("gpu-2")), cpu]
    result = proof.settled(params, found, NV)
    assert result["passed"] is True and result["changed"] is False and result["recorded"] == []
    assert [(r["node"], r["ran"]) for r in result["results"]] == [("gpu-1", False), ("gpu-2", False)]
    assert result["allocatable"]["cpu-9"] == {} and result["namespace"] == "gpu-validation"
    assert set(result["last_proofs"]) == {"gpu-1", "gpu-2"}
    # the module's own decision on the same nodes runs nothing either
    runner = proof.Proof(params, RecordingClient(found), NV)
    nodes = runner.nodes()
    assert proof.keep(params, proof.plan(params, nodes, NV), nodes, under, runner.records)[0] == []

    # one proof to run, reprove always, no proven_under, or a plan the module would refuse: the module decides
    assert proof.settled(dict(params, success_pattern=None, image=None), found, NV)["passed"] is True  # defaults filled in
    assert proof.settled(dict(params, success_pattern="other"), found, NV) is None  # another proof: prove again
    assert proof.settled(params, [gpu_node("gpu-1", stands("gpu-1")), gpu_node("gpu-2")], NV) is None
    assert proof.settled(params, found + [gpu_node("gpu-3")], NV) is None  # a GPU node not in proven_under is proved
    assert proof.settled(dict(params, reprove="always"), found, NV) is None
    assert proof.settled(dict(params, proven_under={}), found, NV) is None
    assert proof.settled(dict(params, nodes=["gpu-7"]), found, NV) is None  # not in the cluster: the module says so
    # ansible-core 2.17 and 2.18 template a role's `x or none` to "": left out, as the module's omit is
    assert proof.settled(dict(params, command="", args="", resource="", runtime_class=""), found, NV)["passed"] is True


def test_a_play_that_reads_nothing_keeps_the_proofs_that_stand():
    """Issue 26: gpu_validation alone (no driver, toolkit or device plugin role in the play) knows nothing of the
    nodes but their names: the proofs on record stand, and no proof runs."""
    params = NV.fill(dict(proof.DECIDING_DEFAULTS, plugin_configs=CONFIGS, proven_under=UNDER, per_node=True))
    under = proof.under_by_node(params, NV)
    found = [gpu_node(name, proof.record({"job": "gpu-proof-" + name, "resource": "nvidia.com/gpu", "detail": "ok"},
                                         under[name])) for name in ("gpu-1", "gpu-2")]
    blind = dict(params, plugin_configs={}, proven_under={"gpu-1": {}, "gpu-2": {}})
    assert proof.settled(blind, found, NV)["passed"] is True
    assert proof.settled(dict(blind, per_node=False), found, NV)["passed"] is True
    assert proof.settled(dict(blind, image="mirror/vectoradd:2"), found, NV) is None  # the proof itself changed


def test_passed_proofs_are_recorded_on_their_nodes_only():
    params = {"plugin_configs": CONFIGS, "proven_under": UNDER}
    under = proof.under_by_node(params, NV)
    client = RecordingClient([])
    runner = proof.Proof(params, client, NV)
    results = [{"node": "gpu-1", "job": "a", "resource": "nvidia.com/gpu", "passed": True, "detail": "succeeded"},
               {"node": "gpu-2", "job": "b", "resource": "nvidia.com/gpu", "passed": False, "detail": "failed"},
               {"node": "cpu-9", "job": "c", "resource": "nvidia.com/gpu", "passed": True, "detail": "succeeded"}]
    assert runner._record(results, under, check_mode=False) == ["gpu-1"]  # pylint: disable=protected-access
    [applied] = client.applied
    assert applied["kind"] == "Node" and applied["metadata"]["name"] == "gpu-1"
    assert list(applied["metadata"]["annotations"]) == [proof.ANNOTATION_LAST_PROOF]
    assert results[0]["last_proof"]["under"] == under["gpu-1"]
    # a value this run did not know is kept from the node's last record
    runner.records["gpu-1"] = results[0]["last_proof"]
    blind = dict(under, **{"gpu-1": dict(under["gpu-1"], runtime=None)})
    runner._record(results, blind, check_mode=False)  # pylint: disable=protected-access
    assert json.loads(client.applied[-1]["metadata"]["annotations"][proof.ANNOTATION_LAST_PROOF])["under"] == under["gpu-1"]
    client.applied = []
    assert runner._record(results, under, check_mode=True) == ["gpu-1"] and client.applied == []  # pylint: disable=protected-access


class NamespaceClient(k8s_client.Client):
    """A namespace that is being deleted when the proof starts, and gone after the wait (or never, with ``stuck``)."""

    def __init__(self, stuck=False):
        super(NamespaceClient, self).__init__(dynamic=object())
        self.stuck = stuck
        self.calls = []

    def get(self, api_version, kind, name, namespace=None):
        return {"metadata": {"name": name, "deletionTimestamp": "2026-11-26T08:00:00Z"}, "status": {"phase": "Terminating"}}

    def wait(self, api_version, kind, done, timeout, namespace=None, label_selector=None, field_selector=None):
        self.calls.append(("wait", kind, field_selector, timeout))
        if self.stuck:
            from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import WaitTimeout  # pylint: disable=import-outside-toplevel
            raise WaitTimeout("timed out", last={})
        assert done({})
        return {}

    def apply(self, obj, dry_run=False):
        self.calls.append(("apply", obj["kind"], obj["metadata"]["name"], dry_run))
        return obj


def test_a_namespace_being_deleted_is_waited_for_then_created_again():
    client = NamespaceClient()
    run = proof.Proof({"namespace": "gpu-validation"}, client, NV)
    assert run._ensure_namespace(dry_run=False) is True  # pylint: disable=protected-access
    assert client.calls == [("wait", "Namespace", "metadata.name=gpu-validation", proof.NAMESPACE_GONE_TIMEOUT),
                            ("apply", "Namespace", "gpu-validation", False)]
    assert run.created_namespace is True
    # a dry run waits for nothing: the namespace is not there for the Jobs to be validated in
    client = NamespaceClient()
    assert proof.Proof({"namespace": "gpu-validation"}, client, NV)._ensure_namespace(dry_run=True) is False  # pylint: disable=protected-access
    assert client.calls == []


def test_a_namespace_stuck_in_deletion_is_named_with_what_to_look_at():
    with pytest.raises(K8sError, match="namespace gpu-validation is still being deleted after 120 s"):
        proof.Proof({"namespace": "gpu-validation"}, NamespaceClient(stuck=True), NV)._ensure_namespace(dry_run=False)  # pylint: disable=protected-access


@pytest.mark.parametrize("config", list(CONFIGS.values()) + [{"vendor": "amd"}, {}])
def test_a_config_is_hashed_as_device_plugin_deploy_hashes_it(config):
    """gpu_proof documents that a node's config is hashed as device_plugin_deploy hashes it: the proof's own hash (it
    knows no vendor) and NVIDIA's plugin config hash stay equal, or every record would prove again."""
    from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import plugin_config  # pylint: disable=import-outside-toplevel
    assert proof.config_hash(config) == plugin_config.config_hash(config)
    assert proof.DEFAULT_CONFIG_NAME == nv.DEFAULT_CONFIG_NAME


def test_a_workload_fills_in_only_what_the_options_leave_out():
    filled = AMD.fill({"image": "mirror/rocm:1", "command": None, "success_pattern": None, "tolerations": None})
    assert filled["image"] == "mirror/rocm:1" and filled["command"] == ["rocminfo"]
    assert filled["command"] is not _vendors.AMD.proof["command"]  # a copy: the registry's stays as it is
    assert NV.fill({"command": None})["command"] is None  # NVIDIA's image has its own entry point


def test_a_dra_proof_claims_one_device_of_the_class_through_a_template():
    job = proof.render_job({}, "ns", "gpu-1", proof.CLAIM_PREFIX + "gpu.nvidia.com", NV)
    spec = job["spec"]["template"]["spec"]
    assert spec["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": proof.CLAIM_TEMPLATE}]
    assert spec["containers"][0]["resources"] == {"claims": [{"name": "gpu"}]}  # no extended resource asked for
    assert spec["nodeSelector"] == {"kubernetes.io/hostname": "gpu-1"}
    v1 = proof.render_claim_template("resource.k8s.io/v1", "ns", "gpu.nvidia.com")
    assert v1["spec"]["spec"]["devices"]["requests"] == [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]
    beta1 = proof.render_claim_template("resource.k8s.io/v1beta1", "ns", "gpu.nvidia.com")
    assert beta1["spec"]["spec"]["devices"]["requests"] == [{"name": "gpu", "deviceClassName": "gpu.nvidia.com"}]
    assert proof.slice_counts([{"spec": {"nodeName": "a", "devices": [{"name": "gpu-0"}, {"name": "gpu-1"}]}},
                               {"spec": {"nodeName": "a", "devices": [{"name": "gpu-2"}]}},
                               {"spec": {"devices": [{"name": "network-attached"}]}}]) == {"a": 3}
    # a pinned proof whose claim cannot be allocated is told why, before the node selector's other nodes
    why = proof.hint("0/10 nodes are available: 1 cannot allocate all claims, 9 node(s) didn't match Pod's node "
                     "affinity/selector", NV)
    assert "ResourceSlices" in why
