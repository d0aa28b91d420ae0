# SPDX-License-Identifier: GPL-3.0-or-later
"""nano_gpu_deploy end to end, and the proof that a pod is scheduled through nano-gpu's scheduler extender.

Against the test session's sandbox control plane, whose kube-scheduler has the collection's ``extenders`` entry
(``_nanogpu/scheduler.py``) pointing at the extender stand-in (sandbox/nanogpu), and whose device-manager simulator
plays nano-gpu's agent (sandbox/k8s/devsim/nanogpu.py). The stand-in answers only while the extender Deployment the
module makes "runs", and acts as that Deployment's ServiceAccount, so the module's RBAC is what the binding may do.

The test deploys into a namespace of its own (the module creates it and deletes it again) and places the agent with a
node label of its own on kg-v100 (4 GPUs: 400 percent).
"""

import uuid

import pytest
from kubernetes import client

from ansible_cli import run_module
from k8s_helpers import delete_quietly

NODE = "kg-v100"
RESOURCE = "nano-gpu/gpu-percent"
MANAGED = "app.kubernetes.io/managed-by=kubegpu.cluster"


def _module(args, check=False, diff=False):
    return run_module("kubegpu.cluster.nano_gpu_deploy", args, check=check, diff=diff)


@pytest.fixture
def nano(sandbox):
    """``run(**options)`` for the module in this test's own namespace, the agent on this test's label; cleaned up."""
    ns = "ng-" + uuid.uuid4().hex[:8]
    label = "kubegpu.test/ng-" + uuid.uuid4().hex[:8]
    sandbox.core.patch_node(NODE, {"metadata": {"labels": {label: "true"}}})

    def run(check=False, diff=False, expect_rc=0, **options):
        args = dict(kubeconfig=sandbox.kubeconfig, namespace=ns, agent_node_selector={label: "true"}, wait_timeout=90)
        args.update(options)
        rc, result = _module(args, check=check, diff=diff)
        assert rc == expect_rc, result
        return result
    run.namespace = ns
    yield run
    _module(dict(kubeconfig=sandbox.kubeconfig, namespace=ns, state="absent", wait_timeout=90))
    delete_quietly(sandbox.core.patch_node, NODE, {"metadata": {"labels": {label: None}}})


def _actions(result):
    return dict(("%s/%s" % (o["kind"], o["name"]), o["action"]) for o in result["objects"])


def _advertised(sandbox, node=NODE):
    status = sandbox.core.read_node(node).status
    return (status.capacity or {}).get(RESOURCE), (status.allocatable or {}).get(RESOURCE)


def _ours(sandbox, ns):
    """What the module's deployment has in the cluster, by label."""
    rbac = client.RbacAuthorizationV1Api(sandbox.api_client)
    found = ["Deployment/" + o.metadata.name for o in sandbox.apps.list_namespaced_deployment(ns, label_selector=MANAGED).items]
    found += ["DaemonSet/" + o.metadata.name for o in sandbox.apps.list_namespaced_daemon_set(ns, label_selector=MANAGED).items]
    found += ["Service/" + o.metadata.name for o in sandbox.core.list_namespaced_service(ns, label_selector=MANAGED).items]
    found += ["ServiceAccount/" + o.metadata.name
              for o in sandbox.core.list_namespaced_service_account(ns, label_selector=MANAGED).items]
    owner = "kubegpu.cluster/namespace=%s" % ns
    found += ["ClusterRole/" + o.metadata.name for o in rbac.list_cluster_role(label_selector=owner).items]
    found += ["ClusterRoleBinding/" + o.metadata.name for o in rbac.list_cluster_role_binding(label_selector=owner).items]
    return sorted(found)


def _schedule(sandbox, namespace, percent, timeout=60):
    from sandbox.nanogpu.demo import schedule_share  # pylint: disable=import-outside-toplevel
    return schedule_share(sandbox.api_client, percent, namespace, timeout)


def test_deploy_schedule_through_the_extender_then_absent(sandbox, nano, namespace):
    ns = nano.namespace
    # check mode: everything would be created, nothing is
    preview = nano(check=True, diff=True, expected={NODE: 400})
    assert preview["changed"] is True
    assert set(_actions(preview).values()) == {"created"}, preview["objects"]
    assert "Deployment/%s/nano-gpu-scheduler" % ns in preview["diff"]["after"]
    assert sandbox.core.list_namespace(field_selector="metadata.name=%s" % ns).items == []
    assert _ours(sandbox, ns) == []
    assert _advertised(sandbox) == (None, None)

    first = nano(expected={NODE: 400})
    assert first["changed"] is True
    assert first["resources"] == {NODE: {RESOURCE: 400}}
    assert _advertised(sandbox) == ("400", "400")
    service = sandbox.core.read_namespaced_service("nano-gpu-scheduler", ns)
    assert first["url_prefix"] == "http://%s:39999/scheduler" % service.spec.cluster_ip
    assert first["extender"]["urlPrefix"] == first["url_prefix"]
    assert first["extender"]["managedResources"] == [{"name": RESOURCE, "ignoredByScheduler": False}]
    assert first["images"] == {"scheduler": "nanogpu/nano-gpu-scheduler:0.3.0", "agent": "nanogpu/nano-gpu-agent:0.3.0"}
    assert _ours(sandbox, ns) == sorted([
        "ClusterRole/%s-nano-gpu-agent" % ns, "ClusterRole/%s-nano-gpu-scheduler" % ns,
        "ClusterRoleBinding/%s-nano-gpu-agent" % ns, "ClusterRoleBinding/%s-nano-gpu-scheduler" % ns,
        "DaemonSet/nano-gpu-agent", "Deployment/nano-gpu-scheduler", "Service/nano-gpu-scheduler",
        "ServiceAccount/nano-gpu-agent", "ServiceAccount/nano-gpu-scheduler"])

    again = nano(expected={NODE: 400})
    assert again["changed"] is False, again["objects"]
    assert set(_actions(again).values()) == {"unchanged"}

    # 20 percent: bound through the extender - only its bind writes these annotations, then the Binding
    small = _schedule(sandbox, namespace, 20)
    assert small["bound"] is True, small
    assert small["node"] == NODE
    assert small["annotations"] == {"nano-gpu/assume": "true", "nano-gpu/container-cuda": "0"}
    pod = sandbox.core.read_namespaced_pod(small["pod"].split("/")[1], namespace)
    assert pod.metadata.labels["nano-gpu/assume"] == "true"

    # binpack: 70 more goes on the same GPU (80 left there), 90 on the next one
    assert _schedule(sandbox, namespace, 70)["gpu"] == 0
    assert _schedule(sandbox, namespace, 90)["gpu"] == 1

    # 120 percent: no GPU has it (a container never spans GPUs), though the node has 400 - the extender's reason
    big = _schedule(sandbox, namespace, 120, timeout=30)
    assert big["bound"] is False and big["node"] is None, big
    assert "can't allocate   (120) on (10)(10)(100)(100)" in big["reason"], big["reason"]
    assert big["annotations"] == {}

    # check mode of absent changes nothing
    dry = nano(check=True, state="absent")
    assert dry["changed"] is True
    assert len(_ours(sandbox, ns)) == 9

    gone = nano(state="absent")
    assert gone["changed"] is True
    assert "deleted" in set(_actions(gone).values())
    assert _ours(sandbox, ns) == []
    assert gone["resources_gone"] == [NODE]  # the module waited for it
    assert _advertised(sandbox) == (None, None)
    left = sandbox.core.list_namespace(field_selector="metadata.name=%s" % ns).items  # the module created it
    assert not left or left[0].status.phase == "Terminating", left

    again = nano(state="absent")
    assert again["changed"] is False, again["objects"]


def test_options_are_checked_before_any_api_call(tmp_path):
    missing = str(tmp_path / "no-such-kubeconfig")
    rc, result = _module(dict(kubeconfig=missing, expected={NODE: 150}))
    assert rc != 0
    assert "100 per GPU" in result["msg"] and "150" in result["msg"], result
    rc, result = _module(dict(kubeconfig=missing, scheduler_tolerations=[{"key": "x", "effect": "Sometimes"}]))
    assert rc != 0 and "scheduler_tolerations" in result["msg"], result
