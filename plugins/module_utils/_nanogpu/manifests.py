# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The Kubernetes objects that run nano-gpu's cluster side, as plain dicts: the scheduler extender (ServiceAccount,
least-privilege RBAC, Deployment, Service), modelled on nano-gpu-scheduler's deploy/nano-gpu-scheduler.yaml, and the
agent (ServiceAccount, RBAC, DaemonSet), modelled on nano-gpu-agent's deploy/nano-gpu-agent.yaml. Pure functions."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.objects import LABEL_COMPONENT, LABEL_NAME
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.objectset import owner_labels
from ansible_collections.kubegpu.cluster.plugins.module_utils._nanogpu import constants as C

# The extender's rights, trimmed from upstream's ClusterRole (which reads every core resource and may write
# nodes/status) to what its code uses: a node lister (pkg/controller/controller.go), a pod informer and GET
# (pkg/scheduler/bind.go getPod), the pod UPDATE that writes its annotations and label and the Binding
# (pkg/dealer/dealer.go Bind: Pods().Update, Pods().Bind = pods/binding), and its event recorder.
SCHEDULER_RULES = [
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "update"]},
    {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
]
# The agent's: its pod informer on its own node and GETs (pkg/kube/sitter.go: pods list/watch with a spec.nodeName
# field selector, GetPodFromApiServer, GetNodeFromApiServer); it allocates through the kubelet's device-plugin and
# pod-resources sockets, not the API.
AGENT_RULES = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
]

# What state=absent looks for: (apiVersion, kind, namespaced).
MANAGED_KINDS = (
    ("apps/v1", "Deployment", True),
    ("apps/v1", "DaemonSet", True),
    ("v1", "Service", True),
    ("v1", "ServiceAccount", True),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", False),
    ("rbac.authorization.k8s.io/v1", "ClusterRole", False),
)


def _meta(name, component, namespace=None, cluster_owner=None):
    meta = {"name": name, "labels": owner_labels(C.APP_NAME, component, cluster_owner)}
    if namespace:
        meta["namespace"] = namespace
    return meta


def cluster_name(namespace, name):
    """A cluster-scoped object's name: the deployment's namespace first, so two deployments never share one."""
    return "%s-%s" % (namespace, name)


def selector(component):
    return {LABEL_NAME: C.APP_NAME, LABEL_COMPONENT: component}


def images(params):
    """``(scheduler image, agent image)``: the options, else the pinned release's."""
    version = params.get("version") or C.VERSION
    return (params.get("scheduler_image") or C.scheduler_image(version),
            params.get("agent_image") or C.agent_image(version))


def _rbac(namespace, name, component, rules):
    role = cluster_name(namespace, name)
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(name, component, namespace)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": _meta(role, component, cluster_owner=namespace), "rules": copy.deepcopy(rules)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": _meta(role, component, cluster_owner=namespace),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]},
    ]


def _pod_spec(params, service_account, containers, node_selector, tolerations, priority_class):
    spec = {"serviceAccountName": service_account, "containers": containers,
            "priorityClassName": priority_class, "tolerations": copy.deepcopy(tolerations)}
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if params.get("image_pull_secrets"):
        spec["imagePullSecrets"] = [{"name": n} for n in params["image_pull_secrets"]]
    return spec


def scheduler_objects(params, namespace, image):
    """The extender: its ServiceAccount and RBAC, a Deployment of one replica (its state is in memory: a second
    replica would hand out the same GPU share twice), and the Service the kube-scheduler calls."""
    port = C.SCHEDULER_PORT
    container = {
        "name": C.SCHEDULER_NAME,
        "image": image,
        "command": [C.SCHEDULER_COMMAND],
        "args": ["--priority", params.get("priority") or C.DEFAULT_PRIORITY],
        "env": [{"name": C.PORT_ENV, "value": str(port)}],
        "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
        # GET /version answers once the HTTP server listens (pkg/routes/routes.go): the Service sends nothing before
        "readinessProbe": {"httpGet": {"path": C.VERSION_PATH, "port": port}, "periodSeconds": 10},
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    tolerations = params.get("scheduler_tolerations") or []
    spec = _pod_spec(params, C.SCHEDULER_NAME, [container], params.get("scheduler_node_selector") or {},
                     tolerations, C.SCHEDULER_PRIORITY_CLASS)
    labels = owner_labels(C.APP_NAME, C.SCHEDULER_COMPONENT)
    return _rbac(namespace, C.SCHEDULER_NAME, C.SCHEDULER_COMPONENT, SCHEDULER_RULES) + [
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": _meta(C.SCHEDULER_NAME, C.SCHEDULER_COMPONENT, namespace),
         "spec": {"replicas": 1, "strategy": {"type": "Recreate"},
                  "selector": {"matchLabels": selector(C.SCHEDULER_COMPONENT)},
                  "template": {"metadata": {"labels": labels}, "spec": spec}}},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": _meta(C.SCHEDULER_NAME, C.SCHEDULER_COMPONENT, namespace),
         "spec": {"type": "ClusterIP", "selector": selector(C.SCHEDULER_COMPONENT),
                  "ports": [{"name": "http", "port": port, "targetPort": port, "protocol": "TCP"}]}},
    ]


def agent_objects(params, namespace, image, exclude_nodes=()):
    """The agent: ServiceAccount, RBAC and a DaemonSet on the GPU nodes, as upstream runs it - host network,
    privileged, the kubelet's device-plugin and pod-resources directories, the host's /var and /dev; with
    ``agent_installer`` also its init container, which swaps the host's NVIDIA hook binaries for nano-gpu's
    (tools/install.sh) through the host's root at /host."""
    volumes = [
        {"name": "device-plugin", "hostPath": {"path": C.KUBELET_DEVICE_PLUGINS}},
        {"name": "pod-resources", "hostPath": {"path": C.KUBELET_POD_RESOURCES}},
        {"name": "host-var", "hostPath": {"path": "/var", "type": "Directory"}},
        {"name": "host-dev", "hostPath": {"path": "/dev", "type": "Directory"}},
    ]
    container = {
        "name": C.AGENT_NAME,
        "image": image,
        "command": [C.AGENT_COMMAND, "--nodename=$(NODE_NAME)", "--dbfile=%s" % C.AGENT_DB_FILE],
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "resources": {"requests": {"cpu": "1", "memory": "300Mi"}, "limits": {"cpu": "1", "memory": "300Mi"}},  # upstream
        "securityContext": {"privileged": True},
        "volumeMounts": [
            {"name": "device-plugin", "mountPath": C.KUBELET_DEVICE_PLUGINS},
            {"name": "pod-resources", "mountPath": C.KUBELET_POD_RESOURCES},
            {"name": "host-var", "mountPath": "/host/var"},
            {"name": "host-dev", "mountPath": "/host/dev"},
        ],
    }
    selector_ = params.get("agent_node_selector")
    tolerations = params.get("agent_tolerations")
    spec = _pod_spec(params, C.AGENT_NAME, [container],
                     C.DEFAULT_AGENT_NODE_SELECTOR if selector_ is None else selector_,
                     C.DEFAULT_AGENT_TOLERATIONS if tolerations is None else tolerations, C.AGENT_PRIORITY_CLASS)
    spec["hostNetwork"] = True
    if exclude_nodes:  # nodes the agent must not run on (deployment.mig_left_out says why)
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn",
                                   "values": sorted(exclude_nodes)}]}]}}}
    if params.get("agent_installer", True):
        spec["initContainers"] = [{"name": "nano-gpu-installer", "image": image,
                                   "command": [C.AGENT_INSTALLER_COMMAND], "securityContext": {"privileged": True},
                                   "volumeMounts": [{"name": "host-root", "mountPath": "/host"}]}]
        volumes.append({"name": "host-root", "hostPath": {"path": "/", "type": "Directory"}})
    spec["volumes"] = volumes
    labels = owner_labels(C.APP_NAME, C.AGENT_COMPONENT)
    return _rbac(namespace, C.AGENT_NAME, C.AGENT_COMPONENT, AGENT_RULES) + [
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": _meta(C.AGENT_NAME, C.AGENT_COMPONENT, namespace),
         "spec": {"selector": {"matchLabels": selector(C.AGENT_COMPONENT)},
                  "updateStrategy": {"type": "RollingUpdate"},
                  "template": {"metadata": {"labels": labels}, "spec": spec}}},
    ]


def render(params, exclude_nodes=()):
    """Every object, in apply order (the namespace is the object set's); the agent kept off ``exclude_nodes``."""
    namespace = params.get("namespace") or C.NAMESPACE
    scheduler_image, agent_image = images(params)
    return scheduler_objects(params, namespace, scheduler_image) + agent_objects(params, namespace, agent_image,
                                                                                 exclude_nodes)
