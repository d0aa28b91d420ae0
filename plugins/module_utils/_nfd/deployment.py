# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The work of ``node_feature_discovery``: validate (before any API call), find an NFD the cluster already runs, apply
or remove ours as one :class:`.._k8s.objectset.ObjectSet`, and wait with watches: for the CRDs to be established,
nfd-master's Deployment and nfd-worker's DaemonSet to roll out, and on removal for nfd-master to take back the node
labels it set. It talks to the cluster only through the client passed in (or made from the options)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import posixpath

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import K8sError, WaitTimeout
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import client as k8s_client
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import objects as k8s_objects
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.objects import (
    CRD_API_VERSION, CRD_KIND, LABEL_COMPONENT, LABEL_MANAGED_BY, LABEL_NAME, MANAGER, deployment_rolled_out,
)
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.objectset import ObjectSet, managed_selector
from ansible_collections.kubegpu.cluster.plugins.module_utils._nfd import manifests
from ansible_collections.kubegpu.cluster.plugins.module_utils._nfd.constants import (
    API_VERSION, APP_NAME, CRD_NODE_FEATURES, DEFAULT_WAIT_TIMEOUT, FEATURE_LABELS_ANNOTATION,
    MASTER_NAME, MASTER_PROGRAM, NAMESPACE, NODE_FEATURE, WORKER_NAME,
)

HINT = ("Known causes: the image cannot be pulled (image, image_pull_secrets); nfd-worker does not tolerate the "
        "nodes' taints (worker_tolerations); nfd-master restarts until the NodeFeature CRDs are established.")


def _ours(obj):
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return labels.get(LABEL_MANAGED_BY) == MANAGER and labels.get(LABEL_NAME) == APP_NAME


def runs_nfd_master(container):
    """Whether a container runs nfd-master: its command (or, without one, its first argument) is that program."""
    argv = list(container.get("command") or []) or list(container.get("args") or [])
    return bool(argv) and posixpath.basename(str(argv[0])) == MASTER_PROGRAM


def find_existing(client):
    """``namespace/name`` of the nfd-master Deployment of an NFD that is not ours, or None.

    An NFD counts as present when the NodeFeature CRD exists and a Deployment in any namespace runs nfd-master (NFD's
    Helm chart, its kustomize overlays, the NFD operator and the GPU Operator all run nfd-master so). A CRD left over
    from an uninstalled NFD, without a master, is not an NFD.
    """
    if client.get(CRD_API_VERSION, CRD_KIND, CRD_NODE_FEATURES) is None:
        return None
    for deployment in sorted(client.list("apps/v1", "Deployment"),
                             key=lambda d: (d["metadata"].get("namespace"), d["metadata"]["name"])):
        if _ours(deployment):
            continue
        containers = ((((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers")) or []
        if any(runs_nfd_master(c) for c in containers):
            return "%s/%s" % (deployment["metadata"].get("namespace"), deployment["metadata"]["name"])
    return None


def _established(crds, names):
    for name in names:
        conditions = ((crds.get(name) or {}).get("status") or {}).get("conditions") or []
        if not any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
            return False
    return True


def _wait(client, objects, namespace, deadline, timeout):
    crd_names = [o["metadata"]["name"] for o in manifests.crds()]
    try:
        client.wait(CRD_API_VERSION, CRD_KIND, lambda found: _established(found, crd_names),
                    max(1, deadline - client.clock()))
    except WaitTimeout:
        raise K8sError("timed out after %ss waiting for the NFD CustomResourceDefinitions to be established" % timeout)
    try:
        client.wait("apps/v1", "Deployment", lambda found: deployment_rolled_out(found.get(MASTER_NAME)),
                    max(1, deadline - client.clock()), namespace=namespace,
                    field_selector="metadata.name=%s" % MASTER_NAME)
    except WaitTimeout as exc:
        status = ((exc.last or {}).get(MASTER_NAME) or {}).get("status") or {}
        raise K8sError("timed out after %ss waiting for the rollout of Deployment/%s/%s: updated %s, available %s. %s. %s"
                       % (timeout, namespace, MASTER_NAME, status.get("updatedReplicas", 0),
                          status.get("availableReplicas", 0), objects.pods_summary(MASTER_NAME), HINT))


def _prune_labels(client, objects, namespace, check_mode, wait, timeout):
    """Before our NFD goes, let nfd-master take back the labels it set (what ``nfd-master -prune`` does when NFD's Helm
    chart is uninstalled): stop nfd-worker (delete its DaemonSet, wait for its pods to go, or it would publish again),
    delete every NodeFeature, and wait (bounded) until no node carries nfd-master's feature-labels annotation. Only
    when the NodeFeature CRD and nfd-master are ours. Returns the NodeFeatures deleted."""
    crd = client.get(CRD_API_VERSION, CRD_KIND, CRD_NODE_FEATURES)
    master = client.get("apps/v1", "Deployment", MASTER_NAME, namespace)
    if crd is None or not _ours(crd) or master is None or not _ours(master):
        return []
    deadline = client.clock() + timeout
    worker = client.get("apps/v1", "DaemonSet", WORKER_NAME, namespace)
    if worker is not None and _ours(worker) and not worker["metadata"].get("deletionTimestamp"):
        if client.delete("apps/v1", "DaemonSet", WORKER_NAME, namespace, dry_run=check_mode):
            key = "DaemonSet/%s/%s" % (namespace, WORKER_NAME)
            objects.objects.append({"kind": "DaemonSet", "name": WORKER_NAME, "namespace": namespace,
                                    "action": "deleted"})
            if objects.want_diff:
                objects.diff["before"][key] = k8s_objects.normalize(worker)
                objects.diff["after"][key] = None
    if wait and not check_mode:
        try:
            client.wait("v1", "Pod", lambda pods: not pods, max(1, deadline - client.clock()), namespace=namespace,
                        label_selector="%s,%s=%s" % (managed_selector(APP_NAME), LABEL_COMPONENT, WORKER_NAME))
        except WaitTimeout as exc:
            raise K8sError("timed out after %ss waiting for the nfd-worker pods to go: %s still there"
                           % (timeout, ", ".join(sorted(exc.last or {}))))
    deleted = []
    for feature in client.list(API_VERSION, NODE_FEATURE):
        meta = feature["metadata"]
        if meta.get("deletionTimestamp"):
            continue
        if client.delete(API_VERSION, NODE_FEATURE, meta["name"], meta.get("namespace"), dry_run=check_mode):
            deleted.append("%s/%s" % (meta.get("namespace"), meta["name"]))
    if wait and not check_mode:
        try:
            client.wait("v1", "Node", lambda nodes: not labelled_by_nfd(nodes), max(1, deadline - client.clock()))
        except WaitTimeout as exc:
            again = ["%s/%s" % (f["metadata"].get("namespace"), f["metadata"]["name"])
                     for f in client.list(API_VERSION, NODE_FEATURE)]
            raise K8sError("timed out after %ss waiting for nfd-master to remove the labels it set from %s%s (%s); "
                           "run again once that is done"
                           % (timeout, ", ".join(sorted(labelled_by_nfd(exc.last or {}))),
                              "; NodeFeature objects were written again by publishers that still run, for example GPU "
                              "feature discovery (remove it first): %s" % ", ".join(sorted(again)) if again else "",
                              objects.pods_summary(MASTER_NAME)))
    return deleted


def labelled_by_nfd(nodes):
    """The nodes (of ``{name: node}``) that carry labels nfd-master set."""
    return [name for name, node in nodes.items()
            if FEATURE_LABELS_ANNOTATION in ((node.get("metadata") or {}).get("annotations") or {})]


def run(params, check_mode=False, want_diff=False, client=None, client_factory=None):
    """The module's work; returns its result dict."""
    master_config, worker_config = manifests.validate(params)
    present = params.get("state") != "absent"
    if client is None:
        client = (client_factory or k8s_client.from_params)(params)
    namespace = params.get("namespace") or NAMESPACE
    timeout = params.get("wait_timeout") or DEFAULT_WAIT_TIMEOUT
    wait = params.get("wait", True)
    objects = ObjectSet(client, namespace, APP_NAME, manifests.MANAGED_KINDS, check_mode=check_mode,
                        want_diff=want_diff, shared_kinds=(CRD_KIND,))
    result = {"namespace": namespace, "existing": None, "master_config": master_config, "worker_config": worker_config,
              "node_features_deleted": []}
    if present:
        existing = find_existing(client) if params.get("use_existing", True) else None
        if existing:
            result["existing"] = existing
            if client.get("apps/v1", "Deployment", MASTER_NAME, namespace) is not None:
                result["warnings"] = ["NFD already runs (%s) beside the one this module deployed in %s: two nfd-masters "
                                      "label the same nodes; remove ours with state=absent" % (existing, namespace)]
        else:
            deadline = client.clock() + timeout
            applied = objects.present(manifests.render(params, master_config, worker_config), timeout=timeout)
            if wait and not check_mode:
                _wait(client, objects, namespace, deadline, timeout)
                objects.wait_rollout(applied, max(1, deadline - client.clock()), WORKER_NAME, HINT)
    else:
        deadline = client.clock() + timeout
        result["node_features_deleted"] = _prune_labels(client, objects, namespace, check_mode, wait, timeout)
        objects.absent(wait=wait, timeout=max(1, int(deadline - client.clock())))
    result["objects"] = objects.objects
    result["changed"] = objects.changed or bool(result["node_features_deleted"])
    if want_diff:
        result["diff"] = objects.diff
    return result
