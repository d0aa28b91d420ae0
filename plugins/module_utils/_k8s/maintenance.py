# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""Take a node out of service for work on its accelerators, and give it back as it was.

``drain``: cordon (unless an admin already did), pause the operand DaemonSets that select on deploy labels (each
such label that is on is set to a pause value, as NVIDIA's MIG manager sets ``paused-for-mig-change``), evict every
pod that uses the accelerator (it asks for a resource of the vendor's prefix, or runs under one of its RuntimeClasses)
through the Eviction API, so that PodDisruptionBudgets hold, and watch until those pods and the paused operands are
gone, with a bound. What the node had before (whether it was cordoned, each paused label's value) is written to one
node annotation first, so ``restore`` (in this run or a later one) puts exactly that back and never uncordons a node
an admin cordoned. Which resources, RuntimeClasses and labels count is the caller's (a vendor's); this part knows
nothing about GPUs."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import time

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import K8sError, WaitTimeout
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import retry
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.client import TRANSIENT, api_error_text

ANNOTATION = "kubegpu.cluster/maintenance"
FINISHED = ("Succeeded", "Failed")


def _meta(obj):
    return obj.get("metadata") or {}


def _record(node):
    text = (_meta(node).get("annotations") or {}).get(ANNOTATION)
    if not text:
        return None
    try:
        record = json.loads(text)
    except ValueError:
        raise K8sError("node %s: annotation %s is not the JSON this collection writes; remove it (kubectl annotate "
                       "node %s %s-) after checking the node's cordon and labels by hand"
                       % (_meta(node).get("name"), ANNOTATION, _meta(node).get("name"), ANNOTATION))
    return record if isinstance(record, dict) else None


def uses_accelerator(pod, resource_prefixes, runtime_classes):
    """Whether a pod asks for one of the resources (requests or limits, any container) or runs under one of the
    RuntimeClasses: a pod that uses the GPU through the runtime without asking for ``nvidia.com/gpu`` counts too."""
    spec = pod.get("spec") or {}
    if spec.get("runtimeClassName") and spec.get("runtimeClassName") in runtime_classes:
        return True
    for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        resources = container.get("resources") or {}
        for kind in ("requests", "limits"):
            for name in resources.get(kind) or {}:
                if any(name.startswith(prefix) for prefix in resource_prefixes):
                    return True
    return False


def _owner_kind(pod):
    for owner in _meta(pod).get("ownerReferences") or []:
        if owner.get("controller"):
            return owner.get("kind")
    return None


def classify(pods, resource_prefixes, runtime_classes, operand_selector):
    """Split a node's pods that have not finished into ``(evict, operands, left)``: pods using the accelerator that
    eviction takes away (not DaemonSet pods, which their controller puts back at once, not mirror pods, and not pods
    already being deleted, which are only waited for), the operand pods (matching every ``operand_selector`` label) the
    paused labels take away, and the accelerator's DaemonSet pods of others, which neither does (reported)."""
    evict, operands, left = [], [], []
    for pod in pods:
        meta = _meta(pod)
        if (pod.get("status") or {}).get("phase") in FINISHED:
            continue
        labels = meta.get("labels") or {}
        if operand_selector and all(labels.get(k) == v for k, v in operand_selector.items()):
            operands.append(pod)
        elif not uses_accelerator(pod, resource_prefixes, runtime_classes):
            continue
        elif _owner_kind(pod) == "DaemonSet" or "kubernetes.io/config.mirror" in (meta.get("annotations") or {}):
            left.append(pod)
        else:
            evict.append(pod)
    return evict, operands, left


def _deleting(pod):
    return bool(_meta(pod).get("deletionTimestamp"))


def _key(pod):
    return "%s/%s" % (_meta(pod).get("namespace"), _meta(pod).get("name"))


class Maintenance(object):
    """``core``: :class:`.client.CoreRequests` (or a stand-in); ``client``: :class:`.client.Client` for the watch.
    ``timeout``: each request's, None for the client's own bound (the module's ``request_timeout``)."""

    def __init__(self, core, client, pause_value, clock=time.monotonic, sleep=time.sleep, timeout=None):
        self.core = core
        self.client = client
        self.pause_value = pause_value
        self.clock = clock
        self.sleep = sleep
        self.timeout = timeout

    def _json(self, what, func, *args, **kwargs):
        try:
            response = func(*args, _preload_content=False, _request_timeout=self.timeout, **kwargs)
        except TRANSIENT as exc:  # pylint: disable=catching-non-exception
            if getattr(exc, "status", None) == 404:
                return None
            raise K8sError("%s failed: %s" % (what, api_error_text(exc)))
        return json.loads(response.data or b"null")

    def read(self, name):
        node = self._json("reading node %s" % name, self.core.read_node, name)
        if node is None:
            raise K8sError("node %s is not in the cluster; check the host's kubegpu_node_name" % name, node=name)
        return node

    def pods_on(self, name):
        listed = self._json("listing the pods of node %s" % name, self.core.list_pod_for_all_namespaces,
                            field_selector="spec.nodeName=%s" % name) or {}
        return listed.get("items") or []

    def drain_patch(self, node, deploy_prefix, cordon, extra_labels):
        """The merge patch that takes ``node`` out of service (None when it already is), and the record kept."""
        meta = _meta(node)
        labels = meta.get("labels") or {}
        record = _record(node)
        fresh = record is None
        if fresh:
            record = {"cordoned": False, "labels": {}}
        patch_labels = {}
        for key, value in sorted(labels.items()):
            if key.startswith(deploy_prefix) and value == "true":
                patch_labels[key] = self.pause_value
                if key not in record["labels"]:
                    record["labels"][key] = value
        for key, value in (extra_labels or {}).items():
            if labels.get(key) != value:
                patch_labels[key] = value
            if key not in record["labels"] and fresh:
                record["labels"][key] = labels.get(key)
        unschedulable = bool((node.get("spec") or {}).get("unschedulable"))
        patch = {}
        if cordon and not unschedulable:
            patch["spec"] = {"unschedulable": True}
            record["cordoned"] = True
        if patch_labels:
            patch.setdefault("metadata", {})["labels"] = patch_labels
        if fresh or patch:
            patch.setdefault("metadata", {})["annotations"] = {ANNOTATION: json.dumps(record, sort_keys=True)}
        return (patch or None), record

    @staticmethod
    def restore_patch(node, extra_labels):
        """The merge patch that gives ``node`` back as the record says it was (None when there is nothing to do)."""
        meta = _meta(node)
        labels = meta.get("labels") or {}
        record = _record(node)
        patch = {}
        patch_labels = {}
        if record is not None:
            for key, value in (record.get("labels") or {}).items():
                if key in (extra_labels or {}):
                    continue
                if labels.get(key) != value:
                    patch_labels[key] = value  # None removes a label that was not there
            if record.get("cordoned") and (node.get("spec") or {}).get("unschedulable"):
                patch["spec"] = {"unschedulable": None}
            patch.setdefault("metadata", {})["annotations"] = {ANNOTATION: None}
        for key, value in (extra_labels or {}).items():
            if labels.get(key) != value:
                patch_labels[key] = value
        if patch_labels:
            patch.setdefault("metadata", {})["labels"] = patch_labels
        return patch or None

    def patch(self, name, body):
        return self._json("patching node %s" % name, self.core.patch_node, name, body)

    def evict(self, pod, deadline):
        """Evict one pod, retrying while a PodDisruptionBudget refuses (429) until ``deadline``."""
        body = {"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": _meta(pod).get("name"), "namespace": _meta(pod).get("namespace")}}
        attempt = 0
        while True:
            attempt += 1
            try:
                self.core.create_namespaced_pod_eviction(_meta(pod).get("name"), _meta(pod).get("namespace"), body,
                                                         _request_timeout=self.timeout)
                return
            except TRANSIENT as exc:  # pylint: disable=catching-non-exception
                status = getattr(exc, "status", None)
                if status == 404:
                    return
                if not retry.retriable(exc):
                    raise K8sError("evicting pod %s failed: %s" % (_key(pod), api_error_text(exc)))
                pause = retry.retry_after(exc) or retry.pause(attempt)
                if self.clock() + pause >= deadline:
                    why = ("a PodDisruptionBudget does not allow it" if status == 429 else api_error_text(exc))
                    raise WaitTimeout("pod %s could not be evicted in time: %s; the node stays cordoned with its "
                                      "operands paused (restore it, or free the budget and run again)"
                                      % (_key(pod), why))
                self.sleep(pause)

    def wait_gone(self, name, keys, deadline):
        """Watch the node's pods until none of ``keys`` (``namespace/name``) is left, at most until ``deadline``."""
        if not keys:
            return

        def done(objects):
            live = set(_key(p) for p in objects.values() if (p.get("status") or {}).get("phase") not in FINISHED)
            return not (live & set(keys))

        try:
            self.client.wait("v1", "Pod", done, max(deadline - self.clock(), 1),
                             field_selector="spec.nodeName=%s" % name)
        except WaitTimeout as exc:
            left = sorted(set(keys) & set(_key(p) for p in (getattr(exc, "last", None) or {}).values()))
            raise WaitTimeout("node %s: pods still running after the wait: %s; the node stays cordoned with its "
                              "operands paused" % (name, ", ".join(left) or "unknown"))


def drain(maint, name, params, check_mode=False):
    """Take node ``name`` out of service; the module result for it."""
    node = maint.read(name)
    patch, record = maint.drain_patch(node, params["deploy_label_prefix"], params["cordon"], params.get("labels"))
    result = {"node": name, "changed": bool(patch), "cordoned_by_us": record["cordoned"],
              "admin_cordoned": bool((node.get("spec") or {}).get("unschedulable")) and not record["cordoned"],
              "paused_labels": sorted(k for k in record["labels"] if k.startswith(params["deploy_label_prefix"])),
              "evicted": [], "left": []}
    if check_mode:
        pods = maint.pods_on(name)
        evict, _operands, left = classify(pods, params["resource_prefixes"], params["runtime_classes"],
                                          params.get("operand_selector"))
        result["evicted"] = [_key(p) for p in evict]
        result["left"] = [_key(p) for p in left]
        result["changed"] = result["changed"] or any(not _deleting(p) for p in evict)
        return result
    if patch:
        maint.patch(name, patch)
    deadline = maint.clock() + params["wait_timeout"]
    pods = maint.pods_on(name)
    evict, operands, left = classify(pods, params["resource_prefixes"], params["runtime_classes"],
                                     params.get("operand_selector"))
    if params["evict"]:
        for pod in evict:
            if not _deleting(pod):
                maint.evict(pod, deadline)
        result["evicted"] = [_key(p) for p in evict]
        result["changed"] = result["changed"] or any(not _deleting(p) for p in evict)
    result["left"] = [_key(p) for p in left]
    if params["wait"]:
        waiting = [_key(p) for p in operands] + (result["evicted"] if params["evict"] else [])
        maint.wait_gone(name, waiting, deadline)
    return result


def restore(maint, name, params, check_mode=False):
    """Give node ``name`` back as its record says; the module result for it."""
    node = maint.read(name)
    record = _record(node) or {}
    patch = maint.restore_patch(node, params.get("labels"))
    result = {"node": name, "changed": bool(patch), "uncordoned": bool(patch and "spec" in patch),
              "restored_labels": sorted(k for k in (record.get("labels") or {}) if k not in (params.get("labels") or {}))}
    if patch and not check_mode:
        maint.patch(name, patch)
    return result
