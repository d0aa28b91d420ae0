# SPDX-License-Identifier: GPL-3.0-or-later
"""API Priority and Fairness in the sandbox (``cluster.up(apf=True)``, ``python -m sandbox.k8s up --apf``): an
identity that APF throttles, and a priority level that throttles it.

The sandbox's own clients (admin, kwok, devsim, the API server's) are in ``system:masters``, which APF never limits:
the mandatory FlowSchema ``exempt`` sends that group to the exempt priority level (k8s.io/apiserver v0.36.3
``pkg/apis/flowcontrol/bootstrap/default.go``), and the older max-in-flight filter lets it through too
(``pkg/server/filters/maxinflight.go``: "A system:master is so powerful ..."). So ``make_operator`` makes one that is
not: a client certificate for user ``kubegpu-operator`` in group ``kubegpu:operators`` (an operator's CI identity),
bound by RBAC to what the collection's Kubernetes modules of the device plugin stage need (``gpu_node_labels``,
``device_plugin_deploy``), with a kubeconfig of its own.

``throttle`` then sends that group to a priority level of its own, Limited, with one nominal concurrency share
(the default levels hold 245: ``pkg/apis/flowcontrol/bootstrap/default.go``; with kube-apiserver's default
--max-requests-inflight 400 and --max-mutating-requests-inflight 200, a nominal concurrency limit of
ceil(600 * 1 / 246) = 3 seats: NominalCL in
k8s.io/api v0.36.3 ``flowcontrol/v1/types.go``), nothing lent or borrowed, and ``limitResponse: Reject``: a request
that finds no free seat is answered at once, ``429 Too Many Requests`` with a ``Retry-After`` header
(k8s.io/apiserver v0.36.3 ``pkg/server/filters/priority-and-fairness.go``, ``tooManyRequests``). Retry-After is 1 s,
doubled (at most 32 s) while the level keeps dropping at least 3 requests a second per second of Retry-After, and
lowered again when drops fall (``pkg/util/flowcontrol/dropped_requests_tracker.go``). A node PATCH is a mutating
request, which takes more than one seat while many watchers see it (``pkg/util/flowcontrol/request/
mutating_work_estimator.go``: a seat per 10 watchers): the sandbox's controllers, kwok and devsim all watch nodes.

``rejected`` counts what the level turned away, from the API server's ``/metrics``
(``apiserver_flowcontrol_rejected_requests_total``, ``pkg/util/flowcontrol/metrics/metrics.go``), read as admin.
"""

from __future__ import annotations

from pathlib import Path

from . import pki

USER = "kubegpu-operator"
GROUP = "kubegpu:operators"
PRIORITY_LEVEL = "kubegpu-throttled"
FLOW_SCHEMA = "kubegpu-throttled"
REJECTED_METRIC = "apiserver_flowcontrol_rejected_requests_total"

# What gpu_node_labels and device_plugin_deploy do (plugins/module_utils/_k8s: node_labels.py lists and patches
# nodes; objectset.py applies, lists and prunes the plugin's objects in its namespace and waits on its pods and the
# nodes; vendor_plugin.py waits on nodes' allocatable), and nothing more.
RULES = [
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch", "create", "patch"]},
    {"apiGroups": [""], "resources": ["serviceaccounts", "configmaps"],
     "verbs": ["get", "list", "watch", "create", "patch", "delete"]},
    {"apiGroups": [""], "resources": ["pods", "events"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    {"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["get", "list", "watch", "create", "patch", "delete"]},
    {"apiGroups": ["node.k8s.io"], "resources": ["runtimeclasses"], "verbs": ["get", "list", "create", "patch"]},
    # the prune lists every kind the plugin's set may hold (plugins/module_utils/_nvidia/manifests.py MANAGED_KINDS);
    # the plugin alone (no GFD, no MPS) makes no RBAC objects, so reading them is enough
    {"apiGroups": ["rbac.authorization.k8s.io"],
     "resources": ["roles", "rolebindings", "clusterroles", "clusterrolebindings"], "verbs": ["get", "list"]},
]


def operator_kubeconfig(layout) -> Path:
    """Where ``make_operator`` writes the operator's kubeconfig."""
    return layout.state_dir / "operator.kubeconfig"


def _dynamic(layout):
    from kubernetes import config, dynamic  # pylint: disable=import-outside-toplevel
    return dynamic.DynamicClient(config.new_client_from_config(config_file=str(layout.kubeconfig)))


def _apply(client, obj):
    resource = client.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    return client.server_side_apply(resource, body=obj, name=obj["metadata"]["name"], field_manager="kubegpu-sandbox",
                                    force_conflicts=True)


def make_operator(layout, server: str) -> Path:
    """The operator's certificate, kubeconfig and RBAC (applied as admin); returns its kubeconfig's path."""
    from .cluster import write_kubeconfig  # pylint: disable=import-outside-toplevel
    crt, key = pki.issue(layout.pki, "operator", "/O=%s/CN=%s" % (GROUP, USER), "clientAuth")
    path = operator_kubeconfig(layout)
    write_kubeconfig(path, server, layout.pki / "ca.crt", crt, key, USER)
    client = _dynamic(layout)
    _apply(client, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                    "metadata": {"name": "kubegpu-operator"}, "rules": RULES})
    _apply(client, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                    "metadata": {"name": "kubegpu-operator"},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kubegpu-operator"},
                    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": GROUP}]})
    return path


def throttle(layout, shares: int = 1, queues: int = 0, queue_length: int = 0):
    """Send the operator's group to a priority level of its own: Limited, ``shares`` nominal concurrency shares,
    nothing lent or borrowed; a request with no free seat is rejected at once (``queues=0``), or queued
    (``queues`` queues of ``queue_length``) and rejected when its queue is full or its wait too long."""
    if queues:
        response = {"type": "Queue", "queuing": {"queues": queues, "handSize": 1, "queueLengthLimit": queue_length}}
    else:
        response = {"type": "Reject"}
    client = _dynamic(layout)
    _apply(client, {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
                    "metadata": {"name": PRIORITY_LEVEL},
                    "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": shares, "lendablePercent": 0,
                                                            "borrowingLimitPercent": 0, "limitResponse": response}}})
    # matchingPrecedence 500: before global-default (9900) and catch-all, which would otherwise match this group
    _apply(client, {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
                    "metadata": {"name": FLOW_SCHEMA},
                    "spec": {"priorityLevelConfiguration": {"name": PRIORITY_LEVEL}, "matchingPrecedence": 500,
                             "distinguisherMethod": {"type": "ByUser"},
                             "rules": [{"subjects": [{"kind": "Group", "group": {"name": GROUP}}],
                                        "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                                           "clusterScope": True, "namespaces": ["*"]}],
                                        "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]}})


def rejected(layout, server: str, level: str = PRIORITY_LEVEL) -> int:
    """Requests the priority level ``level`` has rejected since the API server started (every reason: no seat,
    queue full, time out in queue), from its /metrics, read as admin."""
    from .cluster import client_context, http_get  # pylint: disable=import-outside-toplevel
    code, body = http_get(server + "/metrics", client_context(layout), timeout=10)
    if code != 200:
        raise RuntimeError("GET %s/metrics: %s %s" % (server, code, body[:200]))
    total = 0.0
    for line in body.splitlines():
        if line.startswith(REJECTED_METRIC + "{") and 'priority_level="%s"' % level in line:
            total += float(line.rsplit(" ", 1)[1])
    return int(total)
