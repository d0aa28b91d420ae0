# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""Kubernetes objects as plain dicts: how the collection marks what it owns, change detection, and what an object's
status says (quantities, a DaemonSet's rollout, why a pod's containers do not run). Pure functions."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

# How the collection marks what it creates; the same for every vendor and every module.
MANAGER = "kubegpu.cluster"  # the field manager of server-side apply, and the managed-by label's value
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_NAME = "app.kubernetes.io/name"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_OWNER_NAMESPACE = "kubegpu.cluster/namespace"  # on cluster-scoped objects: the namespace of their deployment
ANNOTATION_CREATED_NAMESPACE = "kubegpu.cluster/created-by"  # on a namespace a module created (and may delete)
ANNOTATION_CONFIG_HASH = "kubegpu.cluster/config-hash"  # in a pod template: a new config rolls the pods
CRD_API_VERSION = "apiextensions.k8s.io/v1"
CRD_KIND = "CustomResourceDefinition"

IGNORED_METADATA = ("resourceVersion", "generation", "managedFields", "creationTimestamp", "uid", "selfLink",
                    "deletionTimestamp", "deletionGracePeriodSeconds")


def key(obj):
    """``Kind/namespace/name`` (``Kind/name`` for cluster-scoped objects)."""
    meta = obj.get("metadata", {})
    parts = [obj.get("kind"), meta.get("namespace"), meta.get("name")]
    return "/".join(p for p in parts if p)


def normalize(obj):
    """``obj`` without what the server changes on its own (status, versions, managed fields, timestamps)."""
    if obj is None:
        return None
    out = copy.deepcopy(obj)
    out.pop("status", None)
    meta = out.get("metadata", {})
    for field in IGNORED_METADATA:
        meta.pop(field, None)
    annotations = meta.get("annotations") or {}
    annotations.pop("kubectl.kubernetes.io/last-applied-configuration", None)
    if not annotations:
        meta.pop("annotations", None)
    return out


def compare(before, after):
    """``created``, ``updated`` or ``unchanged`` from an object before and after a write."""
    if before is None:
        return "created" if after is not None else "unchanged"
    return "unchanged" if normalize(before) == normalize(after) else "updated"


def crd_terminating(name, crd):
    """``name`` and, while the CRD is being deleted, the API server's words on its Terminating condition (why it
    stays: its objects still there, or the finalizer's last error)."""
    conditions = ((crd or {}).get("status") or {}).get("conditions") or []
    words = ["%s: %s" % (c.get("reason"), c.get("message")) for c in conditions
             if c.get("type") == "Terminating" and c.get("status") == "True"]
    return name + (" (%s)" % "; ".join(words) if words else "")


def namespace_terminating(namespace):
    """What the API server says holds a namespace that is being deleted: its conditions that are true (content or
    finalizers remaining, a discovery or deletion failure), or that it is gone or still there."""
    if not namespace:
        return "not seen"
    conditions = ((namespace.get("status") or {}).get("conditions") or [])
    words = ["%s: %s" % (c.get("reason"), c.get("message")) for c in conditions if c.get("status") == "True"]
    return "; ".join(words) or "still there (%s)" % ((namespace.get("status") or {}).get("phase") or "no phase")


def namespace_object(name, created_by=None):
    """A Namespace marked as the collection's; ``created_by`` (the creating module) marks it as ours to delete."""
    meta = {"name": name, "labels": {LABEL_MANAGED_BY: MANAGER}}
    if created_by:
        meta["annotations"] = {ANNOTATION_CREATED_NAMESPACE: created_by}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def created_by_us(namespace):
    """Whether a live Namespace was created by one of the collection's modules (so that it may delete it)."""
    meta = (namespace or {}).get("metadata") or {}
    return ANNOTATION_CREATED_NAMESPACE in (meta.get("annotations") or {})


def quantity(value):
    """An extended resource's quantity as an int (0 for anything that is not a whole number)."""
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


def allocatable(node, prefix):
    """A node's allocatable counts of the resources named ``prefix/...`` (``nvidia.com``), sorted by name."""
    alloc = ((node or {}).get("status") or {}).get("allocatable") or {}
    return dict((k, quantity(v)) for k, v in sorted(alloc.items()) if k.startswith(prefix + "/"))


def rolled_out(daemonset):
    """Whether a DaemonSet's rollout is complete (as ``kubectl rollout status`` judges it)."""
    if not daemonset:
        return False
    status = daemonset.get("status") or {}
    desired = status.get("desiredNumberScheduled", 0)
    return (status.get("observedGeneration", 0) >= daemonset["metadata"].get("generation", 1)
            and status.get("updatedNumberScheduled", 0) == desired
            and status.get("numberAvailable", 0) == desired)


def deployment_rolled_out(deployment):
    """Whether a Deployment's rollout is complete (as ``kubectl rollout status`` judges it)."""
    if not deployment:
        return False
    status = deployment.get("status") or {}
    replicas = (deployment.get("spec") or {}).get("replicas", 1)
    return (status.get("observedGeneration", 0) >= deployment["metadata"].get("generation", 1)
            and status.get("updatedReplicas", 0) == replicas and status.get("availableReplicas", 0) == replicas)


# The DaemonSet's template generation, which kube-apiserver counts up on a change of the pod template only (not of
# metadata.generation's other causes: an updateStrategy change) and which the DaemonSet controller puts on each pod
# as the label below (seen on kube-apiserver 1.36.3: a maxUnavailable patch made generation 2, this annotation stayed
# 1; a template patch then made 3 and 2, and the new pods carried pod-template-generation 2)
ANNOTATION_TEMPLATE_GENERATION = "deprecated.daemonset.template.generation"
LABEL_POD_TEMPLATE_GENERATION = "pod-template-generation"


def template_generation(daemonset):
    """The DaemonSet's template generation (its annotation), or ``""`` where it has none."""
    annotations = ((daemonset or {}).get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(ANNOTATION_TEMPLATE_GENERATION, ""))


def holds_rollout(pod, generation):
    """Whether a DaemonSet's pod holds its rollout up: a pod of an older template (its ``pod-template-generation``
    label is not the DaemonSet's template ``generation``), or one that is not Ready."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if generation and labels.get(LABEL_POD_TEMPLATE_GENERATION) not in (None, generation):
        return True
    conditions = (pod.get("status") or {}).get("conditions") or []
    return not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def container_reasons(pod):
    """Why the pod's containers are not running (``CrashLoopBackOff``, ``ErrImagePull``, a last exit with its message),
    as text to append to its phase; empty when they run."""
    reasons = []
    for status in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        state = status.get("state") or {}
        waiting = state.get("waiting") or {}
        last = ((status.get("lastState") or {}).get("terminated")) or state.get("terminated") or {}
        if waiting.get("reason"):
            reasons.append("%s: %s" % (waiting["reason"], waiting.get("message") or "waiting"))
        if last.get("exitCode"):
            reasons.append("last exit %s%s" % (last["exitCode"], ": " + last["message"].strip()[:300] if last.get("message") else ""))
    return ", " + "; ".join(reasons) if reasons else ""


def last_events(events, count=3):
    """``reason: message`` of the last ``count`` events (oldest first)."""
    events = sorted(events, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    return ["%s: %s" % (e.get("reason"), e.get("message")) for e in events[-count:]]
