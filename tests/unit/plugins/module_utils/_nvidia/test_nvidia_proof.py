# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests of the proof workload's pure parts: which resource a proof asks for, the Job it runs, the verdicts."""

import pytest

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import K8sError, OptionError
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import client as k8s_client
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import constants as nv, proof


def test_advertised_reads_only_nvidia_resources():
    node = {"status": {"allocatable": {"cpu": "16", "nvidia.com/gpu": "4", "nvidia.com/mig-1g.10gb": "7"}}}
    assert proof.advertised(node) == {"nvidia.com/gpu": 4, "nvidia.com/mig-1g.10gb": 7}
    assert proof.advertised({}) == {}


@pytest.mark.parametrize("resources, want", [
    ({"nvidia.com/gpu": 4, "nvidia.com/gpu.shared": 8}, "nvidia.com/gpu"),
    ({"nvidia.com/gpu.shared": 16}, "nvidia.com/gpu.shared"),
    ({"nvidia.com/mig-3g.40gb": 1, "nvidia.com/mig-1g.10gb": 7}, "nvidia.com/mig-1g.10gb"),
    ({"nvidia.com/gpu": 0, "nvidia.com/mig-2g.20gb": 2}, "nvidia.com/mig-2g.20gb"),
    ({}, None),
    ({"nvidia.com/gpu": 0}, None),
])
def test_pick_resource(resources, want):
    assert proof.pick_resource(resources) == want


def test_job_names_are_valid_stable_and_distinct():
    names = [proof.job_name(n) for n in ("gpu-1", "GPU_1", "a" * 80 + ".example.com")]
    assert len(set(names)) == 3
    assert names[0] == proof.job_name("gpu-1")
    for name in names:
        assert len(name) <= 63 and name == name.lower() and not name.endswith("-")
    assert proof.job_name(None) == "gpu-proof"


def test_job_asks_for_one_gpu_with_limits_and_is_pinned():
    job = proof.render_job({"timeout": 120, "runtime_class": "nvidia", "image_pull_secrets": ["mirror"]},
                           "gpu-validation", "gpu-1", "nvidia.com/gpu.shared")
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
    job = proof.render_job({"command": ["nvidia-smi"], "args": ["-L"], "tolerations": []}, "ns", None, "nvidia.com/gpu")
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
    assert "device plugin" in proof.hint("0/7 nodes are available: 7 Insufficient nvidia.com/gpu.")
    assert "toleration" in proof.hint("1 node(s) had untolerated taint {nvidia.com/gpu: present}")
    assert "runtime" in proof.hint("Failed to initialize NVML: could not load NVML library")
    assert proof.hint("something else") == ""


NODES = {"gpu-1": {"nvidia.com/gpu": 4}, "mig-1": {"nvidia.com/mig-1g.10gb": 7}, "cpu-1": {}}


def test_plan_one_proof_for_the_cluster():
    assert proof.plan({}, NODES) == [(None, "nvidia.com/gpu")]
    assert proof.plan({"resource": "mig-1g.10gb"}, NODES) == [(None, "nvidia.com/mig-1g.10gb")]


def test_plan_per_node_picks_each_nodes_resource():
    assert proof.plan({"per_node": True}, NODES) == [("gpu-1", "nvidia.com/gpu"), ("mig-1", "nvidia.com/mig-1g.10gb")]
    assert proof.plan({"nodes": ["mig-1"]}, NODES) == [("mig-1", "nvidia.com/mig-1g.10gb")]


def test_plan_refuses_what_cannot_run():
    with pytest.raises(OptionError, match="nodes: node 'gpu-9' is not in the cluster"):
        proof.plan({"nodes": ["gpu-9"]}, NODES)
    with pytest.raises(K8sError, match="cpu-1 advertises no nvidia.com resource"):
        proof.plan({"nodes": ["cpu-1"]}, NODES)
    with pytest.raises(K8sError, match="no node advertises"):
        proof.plan({}, {"cpu-1": {}})
    with pytest.raises(K8sError, match="no node advertises"):
        proof.plan({"per_node": True}, {"cpu-1": {}})


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
    return proof.Proof(options, FakeClient(pods, events, core))._verdict(None, "nvidia.com/gpu", job)


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
