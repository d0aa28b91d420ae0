# SPDX-License-Identifier: GPL-3.0-or-later
"""device_plugin_deploy end to end: `ansible localhost -m kubegpu.cluster.device_plugin_deploy` against the sandbox
control plane, where the device-manager simulator makes nodes advertise what the real plugin would.

The sandbox is shared with other tests, so every test uses its own namespace and its own node label (the module's
node_selector) on the nodes it needs, and removes both afterwards.
"""

import collections
import json
import os
import time
import uuid

import pytest
from kubernetes import client

from ansible_cli import run_module
from k8s_helpers import delete_quietly, gpu_fact, wait_for

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
MANAGED = "app.kubernetes.io/managed-by=kubegpu.cluster"
PLUGIN_DS = "nvidia-device-plugin-daemonset"


def module(args, check=False, diff=False):
    """Run the module once; returns (rc, result)."""
    return run_module("kubegpu.cluster.device_plugin_deploy", args, check=check, diff=diff)


@pytest.fixture
def deploy(sandbox, test_nodes):  # pylint: disable=unused-argument
    """``deploy(nodes)`` -> ``run(**options)``: a namespace and node label of this test's own; cleaned up after.

    It asks for ``test_nodes`` so that pytest tears the test's nodes down after this fixture's absent, not before: the
    pods of a deleted node go only when the pod garbage collector gets to them, and the absent waited about 55 s for
    them (the teardown of test_adding_and_removing_a_named_config_restarts_no_pod_of_the_other_nodes)."""
    ns = "dp-" + uuid.uuid4().hex[:8]
    label = "kubegpu.test/dp-" + uuid.uuid4().hex[:8]
    labelled = []

    def make(nodes=()):
        for node in nodes:
            sandbox.core.patch_node(node, {"metadata": {"labels": {label: "true"}}})
            labelled.append(node)

        def run(check=False, diff=False, expect_rc=0, **options):
            # the test's own label places the pods; the deploy labels are nodes-wide, so only their own test sets them
            args = dict(kubeconfig=sandbox.kubeconfig, namespace=ns, node_selector={label: "true"}, wait_timeout=120,
                        deploy_labels=False)
            args.update(options)
            rc, result = module(args, check=check, diff=diff)
            assert rc == expect_rc, result
            return result
        run.namespace = ns
        return run

    yield make
    module(dict(kubeconfig=sandbox.kubeconfig, namespace=ns, state="absent", wait_timeout=120))
    for node in labelled:  # a node of test_nodes may be gone already
        delete_quietly(sandbox.core.patch_node, node, {"metadata": {"labels": {label: None}}})


def _actions(result):
    return dict(("%s/%s" % (o["kind"], o["name"]), o["action"]) for o in result["objects"])


def _template_hash(sandbox, ns):
    ds = sandbox.apps.read_namespaced_daemon_set(PLUGIN_DS, ns)
    return ds.spec.template.metadata.annotations["kubegpu.cluster/config-hash"]


def _pods(sandbox, ns):
    return dict((p.metadata.name, p.metadata.annotations.get("kubegpu.cluster/config-hash"))
                for p in sandbox.core.list_namespaced_pod(ns, label_selector=MANAGED).items
                if not p.metadata.deletion_timestamp)


def _allocatable(sandbox, node):
    alloc = sandbox.core.read_node(node).status.allocatable or {}
    return dict((k, int(v)) for k, v in alloc.items() if k.startswith("nvidia.com/"))


def _managed_objects(sandbox, ns):
    found = []
    found += ["ConfigMap/" + o.metadata.name for o in sandbox.core.list_namespaced_config_map(ns, label_selector=MANAGED).items]
    found += ["DaemonSet/" + o.metadata.name for o in sandbox.apps.list_namespaced_daemon_set(ns, label_selector=MANAGED).items]
    found += ["ServiceAccount/" + o.metadata.name
              for o in sandbox.core.list_namespaced_service_account(ns, label_selector=MANAGED).items]
    return found


def test_apply_reapply_then_time_slicing(sandbox, deploy):
    run = deploy(["kg-v100"])
    first = run(expected={"kg-v100": {"nvidia.com/gpu": 4}})
    assert first["changed"] is True
    assert _actions(first) == {"Namespace/" + run.namespace: "created",
                               "ConfigMap/nvidia-device-plugin-config": "created", "DaemonSet/" + PLUGIN_DS: "created"}
    assert first["resources"] == {"kg-v100": {"nvidia.com/gpu": 4}}
    assert _allocatable(sandbox, "kg-v100")["nvidia.com/gpu"] == 4
    assert _template_hash(sandbox, run.namespace) == first["config_hash"]

    again = run(expected={"kg-v100": {"nvidia.com/gpu": 4}})
    assert again["changed"] is False, again["objects"]
    assert set(_actions(again).values()) == {"unchanged"}
    pods_before = _pods(sandbox, run.namespace)

    # the config change rolls with a wider step (max_unavailable), which the API server takes as the DaemonSet's
    shared = run(sharing={"strategy": "time-slicing", "replicas": 4, "rename_by_default": True}, max_unavailable="25%",
                 expected={"kg-v100": {"nvidia.com/gpu.shared": 16, "nvidia.com/gpu": 0}}, diff=True)
    assert shared["changed"] is True
    strategy = sandbox.apps.read_namespaced_daemon_set(PLUGIN_DS, run.namespace).spec.update_strategy
    assert strategy.type == "RollingUpdate" and strategy.rolling_update.max_unavailable == "25%", strategy
    assert shared["config_hash"] != first["config_hash"]
    assert shared["config"]["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]
    assert _actions(shared)["ConfigMap/nvidia-device-plugin-config"] == "updated"
    assert _actions(shared)["DaemonSet/" + PLUGIN_DS] == "updated"
    assert shared["resources"] == {"kg-v100": {"nvidia.com/gpu.shared": 16}}
    assert _template_hash(sandbox, run.namespace) == shared["config_hash"]
    pods_after = _pods(sandbox, run.namespace)
    assert pods_after and not set(pods_after) & set(pods_before), (pods_before, pods_after)  # rolled
    assert set(pods_after.values()) == {shared["config_hash"]}
    cm_key = "ConfigMap/%s/nvidia-device-plugin-config" % run.namespace
    assert "timeSlicing" in shared["diff"]["after"][cm_key]["data"]["config.yaml"]
    assert "timeSlicing" not in shared["diff"]["before"][cm_key]["data"]["config.yaml"]


def _mig_counts(profile_name):
    with open(os.path.join(ROOT, "sandbox", "profiles", profile_name + ".json")) as handle:
        profile = json.load(handle)
    counts = collections.Counter()
    for device in profile["devices"]:
        mig = device.get("mig") or {}
        if mig.get("current"):
            counts.update("nvidia.com/mig-" + m["profile"] for m in mig.get("devices", []))
        else:
            counts["nvidia.com/gpu"] += 1
    return dict(counts)


def test_mig_mixed_a100(sandbox, deploy):
    run = deploy(["kg-a100"])
    want = _mig_counts("a100x8-mig-mixed")
    assert want, "the profile has MIG devices"
    result = run(mig_strategy="mixed", expected={"kg-a100": want})
    assert result["config"]["flags"]["migStrategy"] == "mixed"
    assert result["resources"]["kg-a100"] == want
    assert _allocatable(sandbox, "kg-a100") == want


_gpu_fact = gpu_fact


def test_the_module_works_out_what_to_wait_for_from_the_facts(sandbox, deploy, fake_nvml_dir):
    """What the role does: facts by inventory name, a map to node names, and no expected counts of its own."""
    run = deploy(["kg-a100"])
    gpu = _gpu_fact(fake_nvml_dir, "a100x8-mig-mixed")
    result = run(mig_strategy="mixed", facts={"gpu-host-7": gpu}, node_names={"gpu-host-7": "kg-a100"})
    want = _mig_counts("a100x8-mig-mixed")
    assert result["expected"] == {"kg-a100": want}
    assert result["resources"] == {"kg-a100": want}


def test_a_node_the_plugin_would_refuse_fails_before_any_api_call(sandbox, deploy, fake_nvml_dir):
    run = deploy()
    gpu = _gpu_fact(fake_nvml_dir, "a100x8-mig-mixed")
    result = run(expect_rc=2, mig_strategy="single", facts={"kg-a100": gpu}, kubeconfig="/nonexistent/kubeconfig")
    # the shipped A100 profile has MIG devices of four types, which the single strategy refuses (as the plugin does)
    assert result["msg"].startswith("node kg-a100: NVIDIA's device plugin would exit there: invalid MIG configuration: "
                                    "more than one MIG device type present on node; "), result["msg"]
    assert result["nodes"] == {"kg-a100": "invalid MIG configuration: more than one MIG device type present on node"}
    assert run.namespace not in [n.metadata.name for n in sandbox.core.list_namespace().items]


@pytest.mark.parametrize("options, option, words", [
    ({"sharing": {"strategy": "time-slicing", "replicas": 1}}, "sharing.replicas", "must be >= 2"),
    ({"sharing": {"strategy": "mps", "replicas": 2}, "mig_strategy": "mixed"}, "sharing.strategy", "mixed"),
    ({"sharing": {"strategy": "time-slicing", "replicas": 2, "resources": [{"name": "Bad_Name"}]}},
     "sharing.resources[0].name", "not a valid resource name"),
    ({"sharing": {"strategy": "time-slicing", "replicas": 2, "devices": 0}}, "sharing.devices", "> 0"),
])
def test_invalid_config_is_refused_before_any_api_call(sandbox, deploy, options, option, words):
    run = deploy()
    result = run(expect_rc=2, **options)
    assert result["msg"].startswith(option + ":") and words in result["msg"], result["msg"]
    names = [n.metadata.name for n in sandbox.core.list_namespace().items]
    assert run.namespace not in names
    # And with an unreadable kubeconfig the same error comes: validation runs before connecting.
    result = run(expect_rc=2, kubeconfig="/nonexistent/kubeconfig", **options)
    assert result["msg"].startswith(option + ":"), result["msg"]


def test_check_mode_changes_nothing(sandbox, deploy):
    run = deploy(["kg-v100"])
    check = run(check=True, diff=True)
    assert check["changed"] is True
    assert set(_actions(check).values()) == {"created"}
    assert run.namespace not in [n.metadata.name for n in sandbox.core.list_namespace().items]

    real = run(expected={"kg-v100": {"nvidia.com/gpu": 4}})
    assert _actions(real) == _actions(check)
    live_hash = _template_hash(sandbox, run.namespace)
    pods = _pods(sandbox, run.namespace)

    check2 = run(check=True, diff=True, sharing={"strategy": "time-slicing", "replicas": 5})
    assert check2["changed"] is True
    assert _actions(check2)["ConfigMap/nvidia-device-plugin-config"] == "updated"
    assert _actions(check2)["DaemonSet/" + PLUGIN_DS] == "updated"
    assert check2["diff"]["before"] and check2["diff"]["after"]
    assert _template_hash(sandbox, run.namespace) == live_hash
    assert _pods(sandbox, run.namespace) == pods
    assert "timeSlicing" not in sandbox.core.read_namespaced_config_map("nvidia-device-plugin-config",
                                                                        run.namespace).data["config.yaml"]
    assert _allocatable(sandbox, "kg-v100")["nvidia.com/gpu"] == 4

    same = run(check=True)
    assert same["changed"] is False


def test_absent_removes_exactly_what_it_created(sandbox, deploy):
    run = deploy(["kg-t4"])
    runtime_class = "nvidia-" + run.namespace
    created = run(gfd=True, runtime_class=runtime_class)
    kinds = set(o["kind"] for o in created["objects"])
    assert {"RuntimeClass", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount"} <= kinds
    ds = sandbox.apps.read_namespaced_daemon_set(PLUGIN_DS, run.namespace)
    assert ds.spec.template.spec.runtime_class_name == runtime_class
    # Something in the namespace the module did not make must survive.
    sandbox.core.create_namespaced_config_map(run.namespace, {"metadata": {"name": "not-ours"}, "data": {"a": "b"}})

    gone = run(state="absent")
    assert gone["changed"] is True
    assert set(o["action"] for o in gone["objects"]) == {"deleted"}
    assert _managed_objects(sandbox, run.namespace) == []
    assert sandbox.core.list_namespaced_pod(run.namespace, label_selector=MANAGED).items == []
    assert runtime_class not in [o.metadata.name for o in client.NodeV1Api(sandbox.api_client).list_runtime_class().items]
    rbac = client.RbacAuthorizationV1Api(sandbox.api_client)
    assert [r.metadata.name for r in rbac.list_cluster_role(label_selector="kubegpu.cluster/namespace=" + run.namespace).items] == []
    ns = [n for n in sandbox.core.list_namespace().items if n.metadata.name == run.namespace]
    assert not ns or ns[0].metadata.deletion_timestamp  # the module created it, so it goes
    assert run(state="absent")["changed"] is False


def test_absent_keeps_a_namespace_it_did_not_create(sandbox, deploy, namespace):
    run = deploy()
    run(namespace=namespace)
    gone = run(namespace=namespace, state="absent")
    assert gone["changed"] is True
    live = sandbox.core.read_namespace(namespace)
    assert live.metadata.deletion_timestamp is None
    assert _managed_objects(sandbox, namespace) == []


def test_timeout_names_the_short_node_its_pod_and_the_known_causes(sandbox, test_nodes, deploy):
    # a node whose driver is not loaded: the plugin pod runs, fails NVML at start-up and advertises nothing
    [broken] = test_nodes(1, "failure-driver-not-loaded")
    run = deploy(["kg-t4", broken])
    result = run(expect_rc=2, wait_timeout=15, expected={"kg-t4": {"nvidia.com/gpu": 1}, broken: {"nvidia.com/gpu": 1}})
    msg = result["msg"]
    assert msg.startswith("timed out after 15s waiting for nodes to advertise the expected GPU resources: "), msg
    assert "node %s advertises no nvidia.com resources, expected {'nvidia.com/gpu': 1}" % broken in msg
    assert "pod nvidia-device-plugin-daemonset-" in msg and "on %s is Running" % broken in msg
    assert "node kg-t4" not in msg  # only the short node is named
    assert "could not load NVML library" in msg and "runtime_class" in msg
    assert result["resources"] == {"kg-t4": {"nvidia.com/gpu": 1}, broken: {}}


def test_a_node_whose_plugin_is_kept_off_by_its_deploy_label_is_not_waited_for(sandbox, test_nodes, deploy):
    """A node moved to DRA carries nvidia.com/gpu.deploy.device-plugin=false: the DaemonSet does not select it, so the
    wait leaves it out (the demo's rerun waited 300 s for kg-h100 before) and waits for the others."""
    on, off = test_nodes(2, "t4")
    sandbox.core.patch_node(on, {"metadata": {"labels": {"nvidia.com/gpu.deploy.device-plugin": "true"}}})
    sandbox.core.patch_node(off, {"metadata": {"labels": {"nvidia.com/gpu.deploy.device-plugin": "false"}}})
    run = deploy([on, off])
    result = run(deploy_labels=True, wait_timeout=60,
                 expected={on: {"nvidia.com/gpu": 1}, off: {"nvidia.com/gpu": 1}})
    assert result["expected"] == {on: {"nvidia.com/gpu": 1}} and result["resources"] == {on: {"nvidia.com/gpu": 1}}
    assert _pods_on(sandbox, run.namespace, "device-plugin") == [on]


def _pods_on(sandbox, ns, component):
    return sorted(p.spec.node_name for p in sandbox.core.list_namespaced_pod(
        ns, label_selector=MANAGED + ",app.kubernetes.io/component=" + component).items
        if not p.metadata.deletion_timestamp)


def test_mps_on_one_node_runs_its_control_daemon_and_advertises_only_with_it(sandbox, deploy, fake_nvml_dir):
    """Per-node configs: the T4 node shares by MPS (its own plugin DaemonSet and NVIDIA's MPS control daemon), the V100
    node keeps the default config. The simulator advertises MPS replicas only where a daemon pod runs, so taking the
    daemon away (nvidia.com/mps.capable gone, its node selector) takes the replicas away."""
    run = deploy(["kg-v100", "kg-t4"])
    sandbox.core.patch_node("kg-t4", {"metadata": {"labels": {"nvidia.com/device-plugin.config": "mps4",
                                                              "nvidia.com/mps.capable": "true"}}})
    try:
        facts = {"kg-v100": _gpu_fact(fake_nvml_dir, "v100x4"), "kg-t4": _gpu_fact(fake_nvml_dir, "t4")}
        result = run(facts=facts, configs={"mps4": {"sharing": {"strategy": "mps", "replicas": 4}}},
                     node_configs={"kg-t4": "mps4"})
        assert result["expected"] == {"kg-v100": {"nvidia.com/gpu": 4}, "kg-t4": {"nvidia.com/gpu": 4}}
        assert result["resources"] == result["expected"]
        assert _pods_on(sandbox, run.namespace, "mps-control-daemon") == ["kg-t4"]
        assert _pods_on(sandbox, run.namespace, "device-plugin") == ["kg-t4", "kg-v100"]
        again = run(facts=facts, configs={"mps4": {"sharing": {"strategy": "mps", "replicas": 4}}},
                    node_configs={"kg-t4": "mps4"})
        assert again["changed"] is False, again["objects"]

        sandbox.core.patch_node("kg-t4", {"metadata": {"labels": {"nvidia.com/mps.capable": None}}})
        wait_for(sandbox.core.list_node, field_selector="metadata.name=kg-t4",
                 predicate=lambda n: not (n.status.allocatable or {}).get("nvidia.com/gpu"),
                 timeout=90, describe="kg-t4 to stop advertising MPS replicas once its daemon is gone")
        assert _pods_on(sandbox, run.namespace, "mps-control-daemon") == []
        state = sandbox.core.read_node("kg-t4").metadata.annotations["sandbox.kubegpu.io/device-plugin"]
        assert "waits for the MPS control daemon" in state, state
    finally:
        delete_quietly(sandbox.core.patch_node, "kg-t4", {"metadata": {"labels": {
            "nvidia.com/device-plugin.config": None, "nvidia.com/mps.capable": None}}})


def test_a_paused_deploy_label_stops_the_plugin_on_that_node(sandbox, deploy):
    """NVIDIA's MIG manager stops GPU clients by setting their nvidia.com/gpu.deploy.* label to paused-for-mig-change:
    our DaemonSets select on "true", so the pod goes and the node stops advertising; "true" again brings it back."""
    run = deploy(["kg-v100", "kg-t4"])
    deploy_label = "nvidia.com/gpu.deploy.device-plugin"
    for node in ("kg-v100", "kg-t4"):
        sandbox.core.patch_node(node, {"metadata": {"labels": {deploy_label: "true"}}})
    try:
        expected = {"kg-v100": {"nvidia.com/gpu": 4}, "kg-t4": {"nvidia.com/gpu": 1}}
        run(deploy_labels=True, expected=expected)
        sandbox.core.patch_node("kg-t4", {"metadata": {"labels": {deploy_label: "paused-for-mig-change"}}})
        # the simulator drops a node's resources when its plugin pod goes, as the kubelet does
        wait_for(sandbox.core.list_node, field_selector="metadata.name=kg-t4",
                 predicate=lambda n: not (n.status.allocatable or {}).get("nvidia.com/gpu"),
                 timeout=90, describe="kg-t4 to stop advertising once its plugin pod is gone")
        assert _pods_on(sandbox, run.namespace, "device-plugin") == ["kg-v100"]
        assert _allocatable(sandbox, "kg-v100") == {"nvidia.com/gpu": 4}
        sandbox.core.patch_node("kg-t4", {"metadata": {"labels": {deploy_label: "true"}}})
        back = run(deploy_labels=True, expected=expected)
        assert back["changed"] is False and back["resources"] == expected
    finally:
        for node in ("kg-v100", "kg-t4"):
            delete_quietly(sandbox.core.patch_node, node, {"metadata": {"labels": {deploy_label: None}}})


def test_label_facts_label_the_node_before_the_rollout_that_selects_on_them(sandbox, deploy, fake_nvml_dir):
    """What the role does in one call: gpu_node_labels' labels from the facts, then the plugin, whose node selector
    needs nvidia.com/gpu.present (so the pods run only if the labels came first); a rerun changes neither."""
    run = deploy(["kg-t4"])
    gpu = _gpu_fact(fake_nvml_dir, "t4")
    selector = {"kubegpu.test/dp-only": run.namespace, "nvidia.com/gpu.present": "true"}
    sandbox.core.patch_node("kg-t4", {"metadata": {"labels": {"kubegpu.test/dp-only": run.namespace}}})
    try:
        first = run(facts={"gpu-host-3": gpu}, label_facts={"gpu-host-3": gpu}, node_names={"gpu-host-3": "kg-t4"},
                    node_selector=selector, diff=True)
        assert first["changed"] is True
        assert first["labels"]["nodes"]["kg-t4"]["labels"]["nvidia.com/gpu.present"] == "true"
        assert first["labels"]["field_manager"] == "kubegpu.cluster/labels"
        assert sandbox.core.read_node("kg-t4").metadata.labels["nvidia.com/gpu.product"] == "Tesla-T4"
        assert first["resources"] == {"kg-t4": {"nvidia.com/gpu": 1}}
        assert isinstance(first["diff"], list) and "node/kg-t4 labels" in [d.get("before_header") for d in first["diff"]]

        again = run(facts={"gpu-host-3": gpu}, label_facts={"gpu-host-3": gpu}, node_names={"gpu-host-3": "kg-t4"},
                    node_selector=selector)
        assert again["changed"] is False, (again["labels"]["summary"], again["objects"])
        assert again["labels"]["summary"]["unchanged"] == 1
    finally:
        run_module("kubegpu.cluster.gpu_node_labels", dict(kubeconfig=sandbox.kubeconfig, state="absent"))
        delete_quietly(sandbox.core.patch_node, "kg-t4", {"metadata": {"labels": {"kubegpu.test/dp-only": None}}})


def _plugin_pods(sandbox, ns, nodes, timeout=60):
    """{node: (pod UID, its DaemonSet)} of the device plugin pods on ``nodes``, once each runs exactly one (a pod the
    DaemonSet controller is taking off a node that moved to another config is waited out, bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        found = collections.defaultdict(list)
        for pod in sandbox.core.list_namespaced_pod(ns, label_selector=MANAGED + ",app.kubernetes.io/component=device-plugin").items:
            if not pod.metadata.deletion_timestamp and pod.spec.node_name in nodes:
                owner = [o.name for o in pod.metadata.owner_references or [] if o.kind == "DaemonSet"]
                found[pod.spec.node_name].append((pod.metadata.uid, owner[0] if owner else None))
        if sorted(found) == sorted(nodes) and all(len(v) == 1 for v in found.values()):
            return dict((node, pods[0]) for node, pods in found.items())
        assert time.monotonic() < deadline, "not one plugin pod on each of %s after %d s: %s" % (nodes, timeout, dict(found))
        time.sleep(1)


def test_adding_and_removing_a_named_config_restarts_no_pod_of_the_other_nodes(
        sandbox, deploy, test_nodes, fake_nvml_dir):
    """Issue 26: the first named config used to rename the default DaemonSet (delete it, create it again), which
    restarted the plugin on every GPU node. Now only the node whose config changes gets a new pod: the others keep
    theirs, by UID, through the addition and the removal."""
    stays, moves = test_nodes(2, "t4")
    run = deploy([stays, moves])
    fact = _gpu_fact(fake_nvml_dir, "t4")
    facts = {stays: fact, moves: fact}
    first = run(facts=facts)
    assert first["resources"] == {stays: {"nvidia.com/gpu": 1}, moves: {"nvidia.com/gpu": 1}}, first
    before = _plugin_pods(sandbox, run.namespace, [stays, moves])
    assert before[stays][1] == before[moves][1] == PLUGIN_DS

    ts2 = {"ts2": {"sharing": {"strategy": "time-slicing", "replicas": 2}}}
    sandbox.core.patch_node(moves, {"metadata": {"labels": {"nvidia.com/device-plugin.config": "ts2"}}})
    added = run(facts=facts, configs=ts2, node_configs={moves: "ts2"})
    assert added["resources"] == {stays: {"nvidia.com/gpu": 1}, moves: {"nvidia.com/gpu": 2}}, added
    assert _actions(added)["DaemonSet/" + PLUGIN_DS] == "unchanged", added["objects"]
    assert _actions(added)["DaemonSet/nvidia-device-plugin-ts2"] == "created"
    with_named = _plugin_pods(sandbox, run.namespace, [stays, moves])
    assert with_named[stays] == before[stays]  # the same pod: not restarted
    assert with_named[moves][1] == "nvidia-device-plugin-ts2" and with_named[moves][0] != before[moves][0]

    sandbox.core.patch_node(moves, {"metadata": {"labels": {"nvidia.com/device-plugin.config": None}}})
    removed = run(facts=facts)
    assert removed["resources"] == first["resources"], removed
    assert _actions(removed)["DaemonSet/" + PLUGIN_DS] == "unchanged", removed["objects"]
    assert _actions(removed)["DaemonSet/nvidia-device-plugin-ts2"] == "deleted"
    after = _plugin_pods(sandbox, run.namespace, [stays, moves])
    assert after[stays] == before[stays]  # still the pod of the first run
    assert after[moves][1] == PLUGIN_DS and after[moves][0] not in (before[moves][0], with_named[moves][0])
