# SPDX-License-Identifier: GPL-3.0-or-later
"""The readiness gate against the sandbox control plane: device_plugin_deploy taints a node its labels just made a GPU
node, the plugin still rolls out there, and gpu_proof clears the taint once a proof passed on that node - never
touching a taint of someone else's. A failed proof leaves the gate shut; state=absent opens every gate."""

import uuid

import pytest

from ansible_cli import run_module
from k8s_helpers import gpu_fact

from ansible_collections.kubegpu.cluster.plugins.module_utils import _vendors
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import proof
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.taints import READINESS_TAINT, READINESS_TOLERATION
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.constants import DEFAULT_TOLERATIONS

ADMIN_TAINT = {"key": "example.com/dedicated", "value": "ml", "effect": "NoSchedule"}
ADMIN_TOLERATION = {"key": ADMIN_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}


def taints_of(sandbox, node):
    return sorted(((t.key, t.value, t.effect) for t in (sandbox.core.read_node(node).spec.taints or [])))


OURS = (READINESS_TAINT["key"], READINESS_TAINT["value"], READINESS_TAINT["effect"])
ADMINS = (ADMIN_TAINT["key"], ADMIN_TAINT["value"], ADMIN_TAINT["effect"])


@pytest.fixture
def gated(sandbox, test_nodes, fake_nvml_dir):
    """A fresh kwok T4 node with an admin's taint, and ``deploy(**options)`` of a plugin in a namespace of its own."""
    node = test_nodes(1, "t4")[0]
    sandbox.core.patch_node(node, {"spec": {"taints": [ADMIN_TAINT]}})
    ns = "gate-" + uuid.uuid4().hex[:8]
    own = sandbox.core.read_node(node).metadata.labels["sandbox.kubegpu.io/test-node"]
    fact = gpu_fact(fake_nvml_dir, "t4")

    def deploy(check=False, **options):
        args = dict(kubeconfig=sandbox.kubeconfig, namespace=ns, wait_timeout=120, deploy_labels=False,
                    node_selector={"sandbox.kubegpu.io/test-node": own,
                                   "nvidia.com/gpu.present": "true"},
                    tolerations=DEFAULT_TOLERATIONS + [ADMIN_TOLERATION], facts={"host": fact},
                    label_facts={"host": fact}, node_names={"host": node}, readiness_taint=True)
        args.update(options)
        return run_module("kubegpu.cluster.device_plugin_deploy", args, check=check)

    deploy.node, deploy.namespace = node, ns
    yield deploy
    run_module("kubegpu.cluster.device_plugin_deploy", dict(kubeconfig=sandbox.kubeconfig, namespace=ns, state="absent"))
    run_module("kubegpu.cluster.gpu_node_labels", dict(kubeconfig=sandbox.kubeconfig, nodes={"host": None},
                                                       node_names={"host": node}, state="absent"))


def run_proof(sandbox, node, **options):
    args = dict(kubeconfig=sandbox.kubeconfig, namespace="proof-" + uuid.uuid4().hex[:8], timeout=60, nodes=[node],
                tolerations=[ADMIN_TOLERATION, {"key": "nvidia.com/gpu", "operator": "Exists"}], readiness_taint=True)
    args.update(options)
    return run_module("kubegpu.cluster.gpu_proof", args)


def test_a_new_gpu_node_is_gated_until_its_proof_passes(sandbox, gated):
    node = gated.node
    rc, check = gated(check=True)
    assert rc == 0, check
    assert check["tainted"] == [node] and taints_of(sandbox, node) == [ADMINS]   # check mode: said, not done

    rc, first = gated()
    assert rc == 0, first
    assert first["changed"] is True and first["tainted"] == [node]
    assert taints_of(sandbox, node) == sorted([ADMINS, OURS])                     # the admin's taint kept
    # the plugin tolerates the gate (it must run before a proof can pass there) and the node advertises its GPU
    assert first["resources"] == {node: {"nvidia.com/gpu": 1}}
    pod = [p for p in sandbox.core.list_namespaced_pod(gated.namespace).items if p.spec.node_name == node][0]
    assert any(t.key == READINESS_TOLERATION["key"] for t in pod.spec.tolerations)
    # what gpu_validation decides from: a gated node is never settled, so the proof module runs
    seen = [n for n in first["nodes_seen"] if n["metadata"]["name"] == node]
    assert seen[0]["spec"]["taints"] == [READINESS_TAINT]
    assert proof.settled({"nodes": [node], "readiness_taint": True, "proven_under": {}}, seen,
                         proof.Workload(**_vendors.NVIDIA.proof)) is None

    rc, again = gated()
    assert rc == 0, again
    assert again["changed"] is False and again["tainted"] == []                  # labelled already: no new gate

    rc, failed = run_proof(sandbox, node, resource="nvidia.com/nobody-has-this", timeout=10)  # fails at its timeout
    assert rc != 0 and failed["untainted"] == []
    assert OURS in taints_of(sandbox, node)                                       # a failed proof keeps it shut

    # the role's default proof is one unpinned Job: a gated node gets one of its own, since only a proof that ran
    # there may clear it
    rc, passed = run_proof(sandbox, node, nodes=[])
    assert rc == 0, passed
    assert passed["passed"] is True and passed["untainted"] == [node] and passed["changed"] is True
    # the unpinned proof (wherever the scheduler put it) and the gated node's own
    assert len(passed["results"]) == 2 and all(r["ran"] for r in passed["results"])
    assert node in [r["node"] for r in passed["results"]]
    assert taints_of(sandbox, node) == [ADMINS]

    rc, rerun = run_proof(sandbox, node)
    assert rc == 0 and rerun["untainted"] == [] and rerun["changed"] is False


def test_absent_opens_every_gate_forgets_the_proofs_and_keeps_other_taints(sandbox, gated):
    node = gated.node
    rc, first = gated()
    assert rc == 0 and first["tainted"] == [node], first
    # a passed proof's record on the node: a bring-up after the teardown must not take it for its own
    sandbox.core.patch_node(node, {"metadata": {"annotations": {proof.ANNOTATION_LAST_PROOF: '{"passed_at": "x"}'}}})
    # removing one deployment of several leaves the nodes as they are
    rc, one = gated(state="absent")
    assert rc == 0 and "untainted" not in one and OURS in taints_of(sandbox, node), one
    assert proof.ANNOTATION_LAST_PROOF in sandbox.core.read_node(node).metadata.annotations
    # the teardown (the device_plugin role with device_plugin_state=absent) clears them
    rc, check = gated(state="absent", check=True, clear_node_marks=True)
    assert rc == 0 and check["untainted"] == [node] and node in check["proofs_forgotten"], check
    assert OURS in taints_of(sandbox, node)
    rc, gone = gated(state="absent", clear_node_marks=True)
    assert rc == 0, gone
    assert gone["untainted"] == [node] and taints_of(sandbox, node) == [ADMINS]
    assert node in gone["proofs_forgotten"]
    assert proof.ANNOTATION_LAST_PROOF not in (sandbox.core.read_node(node).metadata.annotations or {})
    rc, again = gated(state="absent", clear_node_marks=True)
    assert rc == 0 and again["untainted"] == [] and again["proofs_forgotten"] == [] and again["changed"] is False, again
