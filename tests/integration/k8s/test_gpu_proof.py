# SPDX-License-Identifier: GPL-3.0-or-later
"""gpu_proof end to end against the sandbox control plane: the real scheduler places the Job on a node that
advertises the GPU resource (kwok plays the kubelet and ends the pod Succeeded), and the module always cleans up.

Every test uses nodes of its own (kwok, with a GPU profile) and a device plugin deployment in its own namespace whose
node selector only matches those nodes."""

import uuid

import pytest

from ansible_cli import run_module

PROOF_LABEL = "kubegpu.cluster/gpu-proof=true"


@pytest.fixture
def gpu_node(sandbox, test_nodes):
    """One kwok node with a T4 profile that advertises nvidia.com/gpu: 1 through a plugin of this test's own."""
    node = test_nodes(1, "t4")[0]
    label = "kubegpu.test/proof-" + uuid.uuid4().hex[:8]
    ns = "dp-" + uuid.uuid4().hex[:8]
    sandbox.core.patch_node(node, {"metadata": {"labels": {label: "true"}}})
    rc, result = run_module("kubegpu.cluster.device_plugin_deploy", dict(
        kubeconfig=sandbox.kubeconfig, namespace=ns, node_selector={label: "true"}, wait_timeout=120,
        deploy_labels=False,  # the node carries no nvidia.com/gpu.deploy.* labels (gpu_node_labels sets them)
        expected={node: {"nvidia.com/gpu": 1}}))
    assert rc == 0, result
    yield node
    run_module("kubegpu.cluster.device_plugin_deploy", dict(kubeconfig=sandbox.kubeconfig, namespace=ns, state="absent"))


def proof(sandbox, check=False, **args):
    options = dict(kubeconfig=sandbox.kubeconfig, namespace="proof-" + uuid.uuid4().hex[:8], timeout=60)
    options.update(args)
    rc, result = run_module("kubegpu.cluster.gpu_proof", options, check=check)
    return rc, result, options["namespace"]


def leftovers(sandbox, ns):
    jobs = sandbox.batch.list_job_for_all_namespaces(label_selector=PROOF_LABEL).items
    return [j.metadata.name for j in jobs if j.metadata.namespace == ns and not j.metadata.deletion_timestamp]


def namespace_gone_or_going(sandbox, ns):
    found = [n for n in sandbox.core.list_namespace().items if n.metadata.name == ns]
    return not found or found[0].metadata.deletion_timestamp is not None


def test_proof_on_a_node_passes_and_cleans_up(sandbox, gpu_node):
    rc, result, ns = proof(sandbox, nodes=[gpu_node])
    assert rc == 0, result
    assert result["changed"] is False
    assert result["passed"] is True
    [one] = result["results"]
    assert (one["node"], one["resource"], one["phase"], one["passed"]) == (gpu_node, "nvidia.com/gpu", "Succeeded", True)
    # kwok serves no container logs, so the log check is reported as not done, with the API server's reason
    assert one["log_checked"] is False and "log not checked" in one["detail"]
    assert result["allocatable"][gpu_node] == {"nvidia.com/gpu": 1}
    assert leftovers(sandbox, ns) == []
    assert namespace_gone_or_going(sandbox, ns)


def test_require_log_fails_where_logs_cannot_be_read(sandbox, gpu_node):
    rc, result, _ns = proof(sandbox, nodes=[gpu_node], require_log=True)
    assert rc != 0
    assert "its log cannot be read" in result["msg"] and "require_log" in result["msg"]


def test_a_resource_nobody_has_fails_with_the_schedulers_reason_and_cleans_up(sandbox, gpu_node):
    rc, result, ns = proof(sandbox, resource="nvidia.com/mig-7g.80gb", timeout=10)
    assert rc != 0
    assert result["passed"] is False
    msg = result["msg"]
    assert msg.startswith("GPU proof failed: gpu-proof (nvidia.com/mig-7g.80gb on any node): did not finish in 10s")
    assert "Insufficient nvidia.com/mig-7g.80gb" in msg
    assert "check that the device plugin runs on the GPU nodes" in msg
    assert leftovers(sandbox, ns) == []


def test_check_mode_runs_nothing(sandbox, gpu_node):
    rc, result, ns = proof(sandbox, check=True, nodes=[gpu_node])
    assert rc == 0, result
    assert result["passed"] is None and result["results"][0]["detail"] == "check mode: not run"
    assert not [n for n in sandbox.core.list_namespace().items if n.metadata.name == ns]


def test_unknown_node_is_one_clear_error(sandbox):
    rc, result, _ns = proof(sandbox, nodes=["no-such-node"])
    assert rc != 0
    assert result["msg"] == "nodes: node 'no-such-node' is not in the cluster"


def test_a_passed_proof_is_recorded_and_proved_again_only_when_something_changed(sandbox, gpu_node):
    configs = {"default": {"version": "v1", "flags": {"migStrategy": "none"}}}
    under = {gpu_node: {"driver_version": "535.161.08", "runtime": "containerd 1.6.20 default nvidia"}}
    args = dict(nodes=[gpu_node], plugin_configs=configs, proven_under=under)
    rc, first, _ns = proof(sandbox, **args)
    assert rc == 0, first
    assert first["changed"] is True and first["recorded"] == [gpu_node] and first["results"][0]["ran"] is True
    annotation = sandbox.core.read_node(gpu_node).metadata.annotations["kubegpu.cluster/last-proof"]
    assert first["last_proofs"][gpu_node]["under"]["driver_version"] == "535.161.08" and "535.161.08" in annotation

    rc, again, ns = proof(sandbox, **args)
    assert rc == 0, again
    assert again["changed"] is False and again["recorded"] == [] and again["passed"] is True
    [kept] = again["results"]
    assert kept["ran"] is False and "unchanged since the proof passed at" in kept["detail"]
    assert kept["last_proof"] == first["last_proofs"][gpu_node]
    assert [n for n in sandbox.core.list_namespace().items if n.metadata.name == ns] == []  # no Job, no namespace

    upgraded_args = dict(args)
    upgraded_args["proven_under"] = {gpu_node: dict(under[gpu_node], driver_version="550.54.15")}
    rc, check, _ns = proof(sandbox, check=True, **upgraded_args)
    assert rc == 0 and check["changed"] is True and check["results"][0]["detail"] == "check mode: not run"
    assert sandbox.core.read_node(gpu_node).metadata.annotations["kubegpu.cluster/last-proof"] == annotation

    rc, upgraded, _ns = proof(sandbox, **upgraded_args)
    assert rc == 0, upgraded
    assert upgraded["changed"] is True and upgraded["results"][0]["ran"] is True
    assert upgraded["last_proofs"][gpu_node]["under"]["driver_version"] == "550.54.15"

    rc, forced, _ns = proof(sandbox, reprove="always", **upgraded_args)
    assert rc == 0 and forced["results"][0]["ran"] is True


def test_the_settled_decision_on_the_deploys_view_of_the_nodes_agrees_with_the_module(sandbox, gpu_node):
    """What gpu_validation does on a rerun: device_plugin_deploy's nodes_seen (every node as its wait saw it) and the
    proof_settled filter tell that no proof has to run exactly where the module, listing the nodes itself, runs none."""
    from ansible_collections.kubegpu.cluster.plugins.filter.proof_settled import proof_settled  # pylint: disable=import-outside-toplevel
    configs = {"default": {"version": "v1", "flags": {"migStrategy": "none"}}}
    under = {gpu_node: {"driver_version": "535.161.08", "runtime": "containerd 1.6.20 default nvidia"}}
    args = dict(nodes=[gpu_node], plugin_configs=configs, proven_under=under)

    def seen():
        label = "kubegpu.test/seen-" + uuid.uuid4().hex[:6]  # a plugin of its own whose wait lists every node
        ns = "dp-" + uuid.uuid4().hex[:8]
        sandbox.core.patch_node(gpu_node, {"metadata": {"labels": {label: "true"}}})
        try:
            rc, deployed = run_module("kubegpu.cluster.device_plugin_deploy", dict(
                kubeconfig=sandbox.kubeconfig, namespace=ns, node_selector={label: "true"}, wait_timeout=120,
                deploy_labels=False, expected={gpu_node: {"nvidia.com/gpu": 1}}))
            assert rc == 0, deployed
            return deployed["nodes_seen"]
        finally:
            run_module("kubegpu.cluster.device_plugin_deploy", dict(kubeconfig=sandbox.kubeconfig, namespace=ns,
                                                                    state="absent"))
            sandbox.core.patch_node(gpu_node, {"metadata": {"labels": {label: None}}})

    assert proof_settled(seen(), dict(args)) is None  # no record yet: a proof must run
    rc, first, _ns = proof(sandbox, **args)
    assert rc == 0 and first["recorded"] == [gpu_node], first

    settled = proof_settled(seen(), dict(args))
    rc, module, _ns = proof(sandbox, **args)
    assert rc == 0 and [r["ran"] for r in module["results"]] == [False], module
    assert settled is not None and settled["passed"] is True and settled["changed"] is False
    for key in ("results", "last_proofs", "recorded", "passed"):
        assert settled[key] == module[key], key
    assert settled["allocatable"][gpu_node] == module["allocatable"][gpu_node]
    # what changes a proof changes the decision too
    assert proof_settled(seen(), dict(args, proven_under={gpu_node: dict(under[gpu_node], runtime="docker")})) is None
