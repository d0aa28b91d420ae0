# SPDX-License-Identifier: GPL-3.0-or-later
"""The scheduler and kwok: GPU pods are placed by capacity, and bound ones run to completion."""

from kubernetes import watch

from k8s_helpers import fixture_profile, gpu_pod, gpu_resources, plugin_daemonset, wait_for


def _gpu_node(sandbox, namespace, test_nodes, profile="test-v100x4", gpu_taint=False):
    """A test node with a running device plugin; returns its name once it advertises GPUs."""
    name = test_nodes(1, fixture_profile(profile), gpu_taint=gpu_taint)[0]
    sandbox.apps.create_namespaced_daemon_set(namespace, plugin_daemonset("dp", {"kubernetes.io/hostname": name}))
    wait_for(sandbox.core.list_node, field_selector="metadata.name=" + name, predicate=lambda n: gpu_resources(n)[1].get("nvidia.com/gpu"),
             describe="GPUs advertised on " + name)
    return name


def test_pod_asking_for_more_gpus_than_any_node_has_stays_pending(sandbox, namespace):
    sandbox.core.create_namespaced_pod(namespace, gpu_pod("too-many", 100000))
    event = wait_for(sandbox.core.list_namespaced_event, namespace, field_selector="involvedObject.name=too-many",
                     predicate=lambda e: e.reason == "FailedScheduling", describe="FailedScheduling event")
    assert "Insufficient nvidia.com/gpu" in event.message
    pod = sandbox.core.read_namespaced_pod("too-many", namespace)
    assert pod.status.phase == "Pending"
    assert not pod.spec.node_name


def test_pod_within_capacity_is_bound_to_a_gpu_node_and_succeeds(sandbox, namespace, test_nodes):
    _gpu_node(sandbox, namespace, test_nodes)
    sandbox.core.create_namespaced_pod(namespace, gpu_pod("vectoradd", 2))
    pod = wait_for(sandbox.core.list_namespaced_pod, namespace, field_selector="metadata.name=vectoradd",
                   predicate=lambda p: p.status.phase in ("Succeeded", "Failed"), describe="vectoradd to finish")
    assert pod.status.phase == "Succeeded"
    node = sandbox.core.read_node(pod.spec.node_name)
    assert gpu_resources(node)[1].get("nvidia.com/gpu", 0) >= 2


def test_job_requesting_gpus_completes(sandbox, namespace, test_nodes):
    _gpu_node(sandbox, namespace, test_nodes, profile="test-t4")
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "proof"},
           "spec": {"backoffLimit": 0, "template": {"spec": gpu_pod("x", 1)["spec"]}}}
    sandbox.batch.create_namespaced_job(namespace, job)
    done = wait_for(sandbox.batch.list_namespaced_job, namespace, field_selector="metadata.name=proof",
                    predicate=lambda j: any(c.type in ("Complete", "Failed") and c.status == "True" for c in (j.status.conditions or [])),
                    describe="Job proof to finish")
    assert done.status.succeeded == 1


def test_gpu_taint_keeps_pods_without_toleration_away(sandbox, namespace, test_nodes):
    name = _gpu_node(sandbox, namespace, test_nodes, gpu_taint=True)
    node = sandbox.core.read_node(name)
    assert [(t.key, t.effect) for t in node.spec.taints] == [("nvidia.com/gpu", "NoSchedule")]
    pod = gpu_pod("intolerant", 1, node_selector={"kubernetes.io/hostname": name})
    del pod["spec"]["tolerations"]
    sandbox.core.create_namespaced_pod(namespace, pod)
    event = wait_for(sandbox.core.list_namespaced_event, namespace, field_selector="involvedObject.name=intolerant",
                     predicate=lambda e: e.reason == "FailedScheduling", describe="FailedScheduling event")
    assert "untolerated taint" in event.message


def test_pods_that_ask_for_no_gpu_and_restart_always_keep_running(sandbox, namespace, test_nodes):
    name = test_nodes(1)[0]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "server"},
           "spec": {"nodeSelector": {"kubernetes.io/hostname": name}, "containers": [{"name": "c", "image": "nginx"}]}}
    sandbox.core.create_namespaced_pod(namespace, pod)
    running = wait_for(sandbox.core.list_namespaced_pod, namespace, field_selector="metadata.name=server",
                       predicate=lambda p: p.status.phase == "Running", describe="server to run")
    assert running.spec.node_name == name
    # kwok completes run-to-completion pods about 1 s after they are ready; this one must not.
    stream = watch.Watch()
    for event in stream.stream(sandbox.core.list_namespaced_pod, namespace, field_selector="metadata.name=server",
                               resource_version=running.metadata.resource_version, timeout_seconds=4):
        assert event["object"].status.phase == "Running"
