# SPDX-License-Identifier: GPL-3.0-or-later
"""ObjectSet.present when the API server goes away part way (found by the fault suite, tests/faults): the error names
what is half done, the objects applied before it and those not applied yet, and a rerun resumes."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import K8sError, WaitTimeout
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.objects import ANNOTATION_CREATED_NAMESPACE
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.objectset import ObjectSet, managed_selector


class LosingClient(object):
    """Applies until ``lose_at`` applies were made, then fails as Client.apply does once its retries are spent."""

    def __init__(self, lose_at):
        self.lose_at = lose_at
        self.applied = []

    def get(self, api_version, kind, name, namespace=None):
        return None

    def apply(self, obj, dry_run=False):
        if len(self.applied) == self.lose_at:
            raise K8sError("cannot apply %s/%s: connection refused (6 errors in a row over 11.5s)"
                           % (obj["kind"], obj["metadata"]["name"]), object=obj["kind"])
        self.applied.append(obj["metadata"]["name"])
        return "created", None, obj

    def list(self, *args, **kwargs):
        return []


def _objects():
    return [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "config", "namespace": "ns"}},
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "sa", "namespace": "ns"}},
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "plugin", "namespace": "ns"}}]


def test_an_api_server_lost_part_way_names_what_is_half_done():
    objects = ObjectSet(LosingClient(lose_at=2), "ns", "app", kinds=[])  # the namespace and the ConfigMap go in
    with pytest.raises(K8sError) as err:
        objects.present(_objects())
    message = str(err.value)
    assert message.startswith("cannot apply ServiceAccount/sa: connection refused (6 errors in a row over 11.5s). "
                              "Half done: applied Namespace/ns, ConfigMap/ns/config; not applied yet: ServiceAccount/ns/sa, "
                              "DaemonSet/ns/plugin. What was applied stays; run it again once the API server answers"), message
    assert "\n" not in message
    assert err.value.details["applied"] == ["Namespace/ns", "ConfigMap/ns/config"]
    assert err.value.details["not_applied"] == ["ServiceAccount/ns/sa", "DaemonSet/ns/plugin"]


def test_nothing_applied_says_so():
    with pytest.raises(K8sError, match=r"^cannot apply Namespace/ns: .* Half done: nothing applied; not applied yet: "
                                       r"ConfigMap/ns/config, ServiceAccount/ns/sa, DaemonSet/ns/plugin\. "):
        ObjectSet(LosingClient(lose_at=0), "ns", "app", kinds=[]).present(_objects())


class TimingOutClient(object):
    """A fleet of ``count`` nodes with a plugin pod each, whose waits time out with what they saw last; counts the
    event lists a timeout's message reads."""

    def __init__(self, count, updated, generation=2):
        self.generation, self.event_lists = generation, 0
        self.pods = [{"metadata": {"name": "plugin-%04d" % i,
                                   "labels": {"pod-template-generation": str(generation if i < updated else 1)}},
                      "spec": {"nodeName": "node-%04d" % i},
                      "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
                     for i in range(count)]
        self.clock = lambda: 0

    def list(self, api_version, kind, namespace=None, label_selector=None, field_selector=None):
        if kind == "Event":
            self.event_lists += 1
            return [{"reason": "Created", "message": "Created container", "lastTimestamp": "2026-11-27T12:00:00Z"}]
        if field_selector:
            return [p for p in self.pods if "spec.nodeName=" + p["spec"]["nodeName"] == field_selector]
        return list(self.pods)

    def wait(self, api_version, kind, predicate, timeout, namespace=None, field_selector=None, label_selector=None):
        if kind == "DaemonSet":
            # metadata.generation runs ahead of the template's (an updateStrategy change counts there too)
            template = {"deprecated.daemonset.template.generation": str(self.generation)}
            last = {"plugin": {"metadata": {"name": "plugin", "generation": self.generation + 1, "annotations": template},
                               "status": {"desiredNumberScheduled": len(self.pods), "updatedNumberScheduled": 1901,
                                          "numberAvailable": len(self.pods)}}}
        else:
            last = dict((p["spec"]["nodeName"], {"metadata": {"name": p["spec"]["nodeName"]},
                                                 "status": {"allocatable": {}}}) for p in self.pods)
        raise WaitTimeout("timed out", last=last)


def test_a_rollout_that_times_out_describes_a_few_pods_that_hold_it_up_and_counts_the_rest():
    # issue 28's throttled trial at 2,000 nodes: every pod was described, 2,000 event lists after the bound
    client = TimingOutClient(2000, updated=1901)
    objects = ObjectSet(client, "ns", "app", kinds=[])
    applied = {"DaemonSet/ns/plugin": {"kind": "DaemonSet", "metadata": {"name": "plugin", "labels": {}}}}
    with pytest.raises(K8sError) as err:
        objects.wait_rollout(applied, 1200, "device-plugin", hint="Known causes: ...")
    message = str(err.value)
    assert message.startswith("timed out after 1200s waiting for the rollout of DaemonSet/ns/plugin: desired 2000, "
                              "updated 1901, available 2000. pod plugin-1901 on node-1901 is Running (last events: "
                              "Created: Created container); pod plugin-1902 on node-1902"), message
    assert "94 more device-plugin pod(s) holding it up, not described. Known causes: ..." in message, message
    assert "plugin-0000" not in message  # an updated, ready pod holds nothing up
    assert client.event_lists == 5


def test_nodes_short_of_gpus_at_the_timeout_are_named_a_few_described_and_the_rest_counted():
    client = TimingOutClient(300, updated=300)
    objects = ObjectSet(client, "ns", "app", kinds=[])
    expected = dict(("node-%04d" % i, {"nvidia.com/gpu": 1}) for i in range(300))
    with pytest.raises(K8sError) as err:
        objects.wait_allocatable(expected, 0, "nvidia.com", 300, "device-plugin")
    message = str(err.value)
    assert message.startswith("timed out after 300s waiting for nodes to advertise the expected GPU resources: node "
                              "node-0000 advertises no nvidia.com resources, expected {'nvidia.com/gpu': 1}; pod "
                              "plugin-0000 on node-0000 is Running"), message
    assert " | 295 more short node(s): node-0005, node-0006, " in message and "node-0024, ..." in message, message
    assert "node-0025" not in message
    assert client.event_lists == 5


TERMINATING = {"type": "Terminating", "status": "True", "reason": "InstanceDeletionFailed",
               "message": "could not list instances: storage is (re)initializing"}


class DeletingClient(object):
    """One CustomResourceDefinition and one DaemonSet of the set; the CRD stays Terminating for ``lingers`` watch
    events after its delete (the API server removes it once its objects are gone), with ``lingers`` None past the
    wait's bound. ``calls`` keeps the lists and deletes in order."""

    def __init__(self, lingers):
        self.lingers = lingers
        self.waited = []
        self.selectors = []
        self.calls = []

    def list(self, api_version, kind, namespace=None, label_selector=None, field_selector=None, resource_version=None):
        self.calls.append(("list", api_version, kind, resource_version))
        if kind == "CustomResourceDefinition":
            return [{"metadata": {"name": "things.example.com"}, "spec": {
                "group": "example.com", "names": {"kind": "Thing", "plural": "things"},
                "versions": [{"name": "v1alpha1", "served": True, "storage": False},
                             {"name": "v1", "served": True, "storage": True}]}}]
        if kind == "DaemonSet":
            return [{"metadata": {"name": "plugin", "namespace": namespace}}]
        return []

    def get(self, *args, **kwargs):
        return None

    def delete(self, api_version, kind, name, namespace=None, dry_run=False):
        self.calls.append(("delete", api_version, kind, name))
        return True

    def clock(self):
        return 0.0

    def wait(self, api_version, kind, predicate, timeout, namespace=None, field_selector=None, label_selector=None):
        self.waited.append(kind)
        self.selectors.append(label_selector)
        if kind == "Pod":
            return {}
        terminating = {"status": {"conditions": [TERMINATING]}}
        states = [{"things.example.com": terminating, "other.example.com": {}}] * (self.lingers or 1)
        states += [{"other.example.com": {}}] if self.lingers else []
        for found in states:
            if predicate(found):
                return found
        raise WaitTimeout("timed out", last=states[-1])


KINDS = [("apps/v1", "DaemonSet", True), ("apiextensions.k8s.io/v1", "CustomResourceDefinition", False)]


def test_absent_waits_until_its_deleted_crds_are_gone():
    """A deleted CRD stays until its objects are removed; a deploy right after an absent that returned earlier failed
    with 409 "object is being deleted" (make test, pytest-k8s-b)."""
    client = DeletingClient(lingers=2)
    ObjectSet(client, "ns", "app", kinds=KINDS).absent(wait=True, timeout=60)
    assert client.waited == ["Pod", "CustomResourceDefinition"]
    assert client.selectors[1] == managed_selector("app", "ns")  # only ours are watched, not every CRD of the cluster
    client = DeletingClient(lingers=2)
    ObjectSet(client, "ns", "app", kinds=KINDS).absent(wait=False)
    assert client.waited == []


def test_a_crd_that_does_not_go_is_named_with_the_api_servers_reason():
    with pytest.raises(K8sError, match=r"^timed out after 60s waiting for the CustomResourceDefinitions to go .*: "
                                       r"things\.example\.com \(InstanceDeletionFailed: could not list instances: "
                                       r"storage is \(re\)initializing\) still there; rerun"):
        ObjectSet(DeletingClient(lingers=None), "ns", "app", kinds=KINDS).absent(wait=True, timeout=60)


def test_a_crds_objects_are_listed_from_the_cache_before_it_is_deleted():
    """The API server makes a CRD's storage on the first request for its objects; a CRD deleted before anyone asked
    had its finalizer fail with "storage is (re)initializing" and retry on a growing backoff (make test's CI, one
    still Terminating 60 s later). The set asks first, for the storage version, from the watch cache."""
    client = DeletingClient(lingers=1)
    ObjectSet(client, "ns", "app", kinds=KINDS).absent(wait=True, timeout=60)
    calls = [c for c in client.calls if c[2] == "Thing" or c[0] == "delete" and c[2] == "CustomResourceDefinition"]
    assert calls == [("list", "example.com/v1", "Thing", "0"),
                     ("delete", "apiextensions.k8s.io/v1", "CustomResourceDefinition", "things.example.com")]
    client = DeletingClient(lingers=1)
    ObjectSet(client, "ns", "app", kinds=KINDS, check_mode=True).absent(wait=True, timeout=60)
    assert not [c for c in client.calls if c[2] == "Thing"]  # check mode asks nothing more than it did


CONTENT_REMAINING = {"type": "NamespaceContentRemaining", "status": "True", "reason": "SomeResourcesRemain",
                     "message": "Some resources are remaining: pods. has 1 resource instances"}


class TerminatingNamespaceClient(object):
    """A namespace being deleted (an absent just before) that goes after ``lingers`` watch events (None: past the
    bound); ``calls`` keeps the waits and applies in order."""

    def __init__(self, lingers):
        self.lingers = lingers
        self.calls = []

    def get(self, api_version, kind, name, namespace=None):
        if kind == "Namespace":
            return {"metadata": {"name": name, "deletionTimestamp": "2026-11-27T20:00:00Z",
                                 "annotations": {ANNOTATION_CREATED_NAMESPACE: "device_plugin_deploy"}},
                    "status": {"phase": "Terminating", "conditions": [CONTENT_REMAINING]}}
        return None

    def list(self, *args, **kwargs):
        return []

    def clock(self):
        return 0.0

    def apply(self, obj, dry_run=False):
        self.calls.append(("apply", obj["kind"], obj["metadata"]["name"], dry_run))
        return "created", None, obj

    def wait(self, api_version, kind, predicate, timeout, namespace=None, field_selector=None, label_selector=None):
        self.calls.append(("wait", kind, field_selector, timeout))
        terminating = self.get("v1", "Namespace", "ns")
        states = [{"ns": terminating}] * (self.lingers or 1) + ([{}] if self.lingers else [])
        for found in states:
            if predicate(found):
                return found
        raise WaitTimeout("timed out", last=states[-1])


CONFIGMAP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "config", "namespace": "ns"}}


def test_a_deploy_into_a_namespace_being_deleted_waits_until_it_is_gone_then_makes_it_again():
    """A namespace being deleted refuses new objects (403 "being terminated"): make faults' killed-play-plugin met it
    in the rerun right after a way back."""
    client = TerminatingNamespaceClient(lingers=2)
    ObjectSet(client, "ns", "app", kinds=KINDS).present([CONFIGMAP], timeout=60)
    assert client.calls == [("wait", "Namespace", "metadata.name=ns", 60), ("apply", "Namespace", "ns", False),
                            ("apply", "ConfigMap", "config", False)]


def test_a_namespace_that_does_not_go_is_named_with_what_holds_it_and_nothing_is_applied():
    client = TerminatingNamespaceClient(lingers=None)
    with pytest.raises(K8sError, match=r"^the namespace ns is being deleted and was still there after 60s "
                                       r"\(SomeResourcesRemain: Some resources are remaining: pods\. .*\); nothing can "
                                       r"be deployed into it until it is gone: rerun then, or delete what holds it$"):
        ObjectSet(client, "ns", "app", kinds=KINDS).present([CONFIGMAP], timeout=60)
    assert [c for c in client.calls if c[0] == "apply"] == []


def test_check_mode_does_not_wait_for_a_namespace_being_deleted():
    client = TerminatingNamespaceClient(lingers=2)
    ObjectSet(client, "ns", "app", kinds=KINDS, check_mode=True).present([CONFIGMAP], timeout=60)
    assert [c for c in client.calls if c[0] == "wait"] == []
