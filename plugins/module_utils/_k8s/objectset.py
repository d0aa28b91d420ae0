# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""A set of objects that one deployment owns, applied as a whole: present (server-side apply, then prune what is no
longer rendered), absent (exactly what it created), and bounded waits for its DaemonSets' rollout and for the nodes'
allocatable resources. Vendor-neutral: a vendor package renders the objects and names its app, its kinds and the
hint for a wait that times out."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import K8sError, WaitTimeout
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import objects as k8s_objects
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.objects import (
    CRD_API_VERSION, CRD_KIND, LABEL_COMPONENT, LABEL_MANAGED_BY, LABEL_NAME, LABEL_OWNER_NAMESPACE, MANAGER,
)


# A wait that times out describes at most this many pods (each with its events: a request each) and this many short
# nodes (each with its pod), and counts the rest: at 2,000 nodes the fault suite's throttled rollout timed out with
# every pod described, 2,000 event lists read under the throttle after the bound (236 s) for one message of 2,000 parts.
DESCRIBED_AT_MOST = 5


def owner_labels(app, component, owner_namespace=None):
    """The labels that mark an object as part of ``app``'s deployment (cluster-scoped: of the one in that namespace)."""
    labels = {LABEL_NAME: app, LABEL_MANAGED_BY: MANAGER, LABEL_COMPONENT: component}
    if owner_namespace:
        labels[LABEL_OWNER_NAMESPACE] = owner_namespace
    return labels


def managed_selector(app, owner_namespace=None):
    """The label selector of what ``app``'s deployment manages (cluster-scoped objects: for ``owner_namespace``)."""
    selector = "%s=%s,%s=%s" % (LABEL_NAME, app, LABEL_MANAGED_BY, MANAGER)
    if owner_namespace:
        selector += ",%s=%s" % (LABEL_OWNER_NAMESPACE, owner_namespace)
    return selector


def short_nodes(nodes, expected, prefix):
    """``{node: (advertised, expected)}`` for every node of ``expected`` whose ``prefix/*`` allocatable differs."""
    out = {}
    for name, want in expected.items():
        have = k8s_objects.allocatable(nodes.get(name), prefix)
        if name not in nodes or any(have.get(res, 0) != count for res, count in want.items()):
            out[name] = (have if name in nodes else None, want)
    return out


def open_crd_storage(client, crd):
    """List the objects of ``crd`` (a CRD manifest or the live object) once, from the API server's watch cache,
    before the CRD is deleted.

    The API server makes a CRD's storage (and its watch cache) on the first request for its objects. A CRD whose
    objects nobody asked for (deleted within seconds of its creation, before the garbage collector watches it) has
    none when its finalizer runs; the finalizer's list of the objects then fails with 429 "storage is
    (re)initializing" until that cache is ready, and the finalizer retries on a per-CRD exponential backoff
    (kubernetes apiextensions-apiserver pkg/controller/finalizer/crd_finalizer.go deleteInstances and its
    rate-limited queue; apiserver pkg/storage/cacher/cacher.go GetList, KEP-4568). make test's CI had
    nodefeaturerules still Terminating 60 s after its delete; the same tests run here had the sandbox's
    kube-apiserver log that error for nodefeaturegroups and nodefeaturerules. This list (resourceVersion 0: from
    the cache, a 429 waited out like any other) makes the storage and lets it get ready while the CRD still stands.
    It is best effort: when it fails, the delete goes on and the wait for the CRD to go says what holds it."""
    spec = crd.get("spec") or {}
    versions = [v for v in spec.get("versions") or [] if v.get("served")]
    kind = (spec.get("names") or {}).get("kind")
    if not (versions and kind and spec.get("group")):
        return
    version = next((v for v in versions if v.get("storage")), versions[0])["name"]
    try:
        client.list("%s/%s" % (spec["group"], version), kind, resource_version="0")
    except K8sError:
        pass


class ObjectSet(object):
    """The objects of ``app`` in ``namespace``, through ``client`` (a :class:`.client.Client` or a stand-in).

    ``kinds``: ``(apiVersion, kind, namespaced)`` of everything the deployment may have created, for pruning and
    removal. ``shared_kinds``: cluster-scoped kinds of which an existing object that is not ours (a RuntimeClass an
    operator made) is used as it is, never changed nor deleted. ``created_by`` marks a namespace this set creates.
    """

    def __init__(self, client, namespace, app, kinds, check_mode=False, want_diff=False, created_by=MANAGER,
                 shared_kinds=("RuntimeClass",)):
        self.client = client
        self.namespace = namespace
        self.app = app
        self.kinds = kinds
        self.check_mode = check_mode
        self.want_diff = want_diff
        self.created_by = created_by
        self.shared_kinds = shared_kinds
        self.objects = []
        self.diff = {"before": {}, "after": {}}
        self.seen_nodes = None  # every node as wait_allocatable last saw it

    @property
    def changed(self):
        return any(o["action"] != "unchanged" for o in self.objects)

    def _record(self, obj, action, before=None, after=None):
        self.objects.append({"kind": obj["kind"], "name": obj["metadata"]["name"],
                             "namespace": obj["metadata"].get("namespace"), "action": action})
        if action != "unchanged" and self.want_diff:
            name = k8s_objects.key(obj)
            self.diff["before"][name] = k8s_objects.normalize(before)
            self.diff["after"][name] = k8s_objects.normalize(after)

    def _ours(self, live):
        return ((live.get("metadata") or {}).get("labels") or {}).get(LABEL_MANAGED_BY) == MANAGER

    def present(self, rendered, timeout=300):
        """Apply ``rendered`` (in order) and prune what an earlier run created that it no longer has; returns the
        applied objects as the server has them, by key. An API error part way names what is half done: the objects
        applied before it and those not applied yet (``applied``, ``not_applied`` in the error's details).

        A namespace that is being deleted (an absent just before, or someone's ``kubectl delete namespace``) refuses
        new objects with 403 "unable to create new content in namespace ... because it is being terminated" (make
        faults, killed-play-plugin: the rerun right after a way back): the set first watches, within ``timeout``
        seconds, until it is gone, then makes it again."""
        done = []
        live_ns = self._namespace_to_use(timeout)
        try:
            return self._present(rendered, done, live_ns)
        except WaitTimeout:
            raise
        except K8sError as exc:
            todo = [k8s_objects.key(o) for o in rendered if k8s_objects.key(o) not in done]
            raise K8sError("%s. Half done: %s; not applied yet: %s. What was applied stays; run it again once the API "
                           "server answers: the module is idempotent and resumes from there"
                           % (str(exc).rstrip("."), "applied " + ", ".join(done) if done else "nothing applied",
                              ", ".join(todo) or "nothing (the prune of what is no longer rendered was under way)"),
                           **dict(exc.details, applied=done, not_applied=todo))

    def _namespace_to_use(self, timeout):
        """The live namespace (None when there is none), once it is not being deleted."""
        live_ns = self.client.get("v1", "Namespace", self.namespace)
        if not (live_ns and (live_ns.get("metadata") or {}).get("deletionTimestamp")) or self.check_mode:
            return live_ns
        try:
            found = self.client.wait("v1", "Namespace", lambda found: self.namespace not in found, timeout,
                                     field_selector="metadata.name=%s" % self.namespace)
            return found.get(self.namespace)
        except WaitTimeout as exc:
            raise K8sError("the namespace %s is being deleted and was still there after %ss (%s); nothing can be "
                           "deployed into it until it is gone: rerun then, or delete what holds it"
                           % (self.namespace, timeout,
                              k8s_objects.namespace_terminating((exc.last or {}).get(self.namespace) or live_ns)))

    def _present(self, rendered, done, live_ns):
        client = self.client
        ns_missing = live_ns is None
        ns_obj = k8s_objects.namespace_object(self.namespace, created_by=self.created_by)
        if ns_missing or k8s_objects.created_by_us(live_ns):
            action, before, after = client.apply(ns_obj, dry_run=self.check_mode)
            self._record(ns_obj, action, before, after)
            done.append(k8s_objects.key(ns_obj))
        else:
            self._record(ns_obj, "unchanged")  # someone else's namespace: used, never changed nor deleted
        applied = {}
        for obj in rendered:
            meta = obj["metadata"]
            if obj["kind"] in self.shared_kinds:
                live = client.get(obj["apiVersion"], obj["kind"], meta["name"])
                if live is not None and not self._ours(live):
                    self._record(obj, "unchanged")
                    done.append(k8s_objects.key(obj))
                    continue
            if self.check_mode and ns_missing and "namespace" in meta:
                self._record(obj, "created", None, obj)  # a dry run cannot create in a namespace that is not there
                done.append(k8s_objects.key(obj))
                continue
            action, before, after = client.apply(obj, dry_run=self.check_mode)
            applied[k8s_objects.key(obj)] = after
            self._record(obj, action, before, after)
            done.append(k8s_objects.key(obj))
        keep = set(k8s_objects.key(o) for o in rendered)
        for obj in self._managed():
            if k8s_objects.key(obj) not in keep:
                self._delete(obj)
        return applied

    def _managed(self):
        """Every object of the set that exists, from their labels (objects already being deleted left out)."""
        found = []
        for api_version, kind, namespaced in self.kinds:
            if namespaced:
                items = self.client.list(api_version, kind, namespace=self.namespace,
                                         label_selector=managed_selector(self.app))
            else:
                items = self.client.list(api_version, kind, label_selector=managed_selector(self.app, self.namespace))
            for item in items:
                if (item.get("metadata") or {}).get("deletionTimestamp"):
                    continue
                item.setdefault("apiVersion", api_version)
                item.setdefault("kind", kind)
                found.append(item)
        return found

    def _delete(self, obj):
        meta = obj["metadata"]
        if obj.get("kind") == CRD_KIND and not self.check_mode:
            open_crd_storage(self.client, obj)
        if self.client.delete(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"), dry_run=self.check_mode):
            self._record(obj, "deleted", obj, None)
            return True
        return False

    def absent(self, wait=True, timeout=300):
        """Delete every object of the set, and the namespace when one of ours created it; with ``wait``, watch (bounded)
        until the set's pods are gone, and its CustomResourceDefinitions: a deleted CRD stays (Terminating) until the
        API server has removed its objects, and creating it again meanwhile fails with 409 "object is being deleted"
        (seen in make test: a deploy right after an absent). The namespace is not waited for: it goes within seconds
        (the namespace controller empties it; about 5 s in the sandbox), and a deploy meanwhile waits for it
        (:meth:`present`)."""
        deleted = [obj for obj in self._managed() if self._delete(obj)]
        live_ns = self.client.get("v1", "Namespace", self.namespace)
        if live_ns and not (live_ns.get("metadata") or {}).get("deletionTimestamp") and k8s_objects.created_by_us(live_ns):
            if self._delete(dict(live_ns, apiVersion="v1", kind="Namespace")):
                deleted.append(live_ns)
        if not (deleted and wait and not self.check_mode):
            return
        deadline = self.client.clock() + timeout
        try:
            self.client.wait("v1", "Pod", lambda pods: not pods, timeout, namespace=self.namespace,
                             label_selector=managed_selector(self.app))
        except WaitTimeout as exc:
            raise K8sError("timed out after %ss waiting for the %s pods in %s to go: %s still there"
                           % (timeout, self.app, self.namespace, ", ".join(sorted(exc.last or {}))))
        crds = set(obj["metadata"]["name"] for obj in deleted if obj.get("kind") == CRD_KIND)
        if crds:
            try:
                self.client.wait(CRD_API_VERSION, CRD_KIND, lambda found: not crds.intersection(found),
                                 max(1, deadline - self.client.clock()),
                                 label_selector=managed_selector(self.app, self.namespace))
            except WaitTimeout as exc:
                left = dict((name, crd) for name, crd in (exc.last or {}).items() if name in crds)
                raise K8sError("timed out after %ss waiting for the CustomResourceDefinitions to go (the API server "
                               "removes a CRD once its objects are deleted): %s still there; rerun, or delete what "
                               "holds them" % (timeout, ", ".join(k8s_objects.crd_terminating(name, crd) for name, crd
                                                                  in sorted(left.items()))))

    def pods_summary(self, component, node=None, holding=None):
        """One line per pod of ``component`` (on ``node``): its phase, why its containers do not run, its last events;
        only the pods ``holding`` (a predicate) picks where it picks any, and at most :data:`DESCRIBED_AT_MOST`, the
        rest counted."""
        pods = self.client.list("v1", "Pod", namespace=self.namespace,
                                label_selector=managed_selector(self.app) + ",%s=%s" % (LABEL_COMPONENT, component),
                                field_selector="spec.nodeName=%s" % node if node else None)
        if not pods:
            where = " on the node (check node_selector, tolerations and the node's labels)" if node else ""
            return "no %s pod%s" % (component, where)
        held = [pod for pod in pods if holding(pod)] if holding else []
        pods = sorted(held or pods, key=lambda pod: pod["metadata"]["name"])
        parts = []
        for pod in pods[:DESCRIBED_AT_MOST]:
            name = pod["metadata"]["name"]
            events = self.client.list("v1", "Event", namespace=self.namespace,
                                      field_selector="involvedObject.name=%s" % name)
            last = "; ".join(k8s_objects.last_events(events)) or "no events"
            parts.append("pod %s on %s is %s%s (last events: %s)" % (name, pod["spec"].get("nodeName"),
                                                                     (pod.get("status") or {}).get("phase"),
                                                                     k8s_objects.container_reasons(pod), last))
        if len(pods) > DESCRIBED_AT_MOST:
            parts.append("%d more %s pod(s) %snot described" % (
                len(pods) - DESCRIBED_AT_MOST, component, "holding it up, " if held else ""))
        return "; ".join(parts)

    def wait_rollout(self, applied, timeout, component, hint=""):
        """Watch every applied DaemonSet and Deployment until its rollout is complete; returns the deadline the
        waits share."""
        deadline = self.client.clock() + timeout
        done = {"DaemonSet": k8s_objects.rolled_out, "Deployment": k8s_objects.deployment_rolled_out}
        for obj_key, obj in applied.items():
            if obj.get("kind") not in done:
                continue
            name = obj["metadata"]["name"]
            try:
                self.client.wait("apps/v1", obj["kind"], lambda found, n=name, ok=done[obj["kind"]]: ok(found.get(n)),
                                 max(1, deadline - self.client.clock()), namespace=self.namespace,
                                 field_selector="metadata.name=%s" % name)
            except WaitTimeout as exc:
                status = ((exc.last or {}).get(name) or {}).get("status") or {}
                if obj["kind"] == "Deployment":
                    raise K8sError("timed out after %ss waiting for the rollout of %s: replicas %s, updated %s, "
                                   "available %s. %s. %s"
                                   % (timeout, obj_key, status.get("replicas", 0), status.get("updatedReplicas", 0),
                                      status.get("availableReplicas", 0),
                                      self.pods_summary(obj["metadata"]["labels"].get(LABEL_COMPONENT, component)),
                                      hint), rollout=status)
                generation = k8s_objects.template_generation((exc.last or {}).get(name))
                raise K8sError(
                    "timed out after %ss waiting for the rollout of %s: desired %s, updated %s, available %s. %s. %s"
                    % (timeout, obj_key, status.get("desiredNumberScheduled", 0), status.get("updatedNumberScheduled", 0),
                       status.get("numberAvailable", 0),
                       self.pods_summary(component, holding=lambda pod: k8s_objects.holds_rollout(pod, generation)),
                       hint), rollout=status)
        return deadline

    def wait_allocatable(self, expected, deadline, prefix, timeout, component, hint=""):
        """Watch the nodes until every node of ``expected`` (``{node: {resource: count}}``) advertises those counts of
        its ``prefix/*`` resources; returns what they advertise, and keeps every node as the watch last saw it in
        ``seen_nodes`` (name to object). On timeout the error names each short node with
        what it advertises and its ``component`` pod's state."""
        if not expected:
            return {}
        try:
            nodes = self.client.wait("v1", "Node", lambda found: not short_nodes(found, expected, prefix),
                                     max(1, deadline - self.client.clock()))
            self.seen_nodes = nodes
        except WaitTimeout as exc:
            nodes = exc.last or {}
            lines = []
            short = sorted(short_nodes(nodes, expected, prefix).items())
            for name, (have, want) in short[:DESCRIBED_AT_MOST]:
                if have is None:
                    lines.append("node %s does not exist" % name)
                    continue
                lines.append("node %s advertises %s, expected %s; %s"
                             % (name, have or "no %s resources" % prefix, want, self.pods_summary(component, name)))
            if len(short) > DESCRIBED_AT_MOST:
                rest = [name for name, _counts in short[DESCRIBED_AT_MOST:]]
                named = ", ".join(rest[:20]) + (", ..." if len(rest) > 20 else "")
                lines.append("%d more short node(s): %s" % (len(rest), named))
            raise K8sError("timed out after %ss waiting for nodes to advertise the expected GPU resources: %s. %s"
                           % (timeout, " | ".join(lines), hint),
                           resources=dict((n, k8s_objects.allocatable(nodes.get(n), prefix)) for n in expected))
        return dict((n, k8s_objects.allocatable(nodes.get(n), prefix)) for n in expected)
