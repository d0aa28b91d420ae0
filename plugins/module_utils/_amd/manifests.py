# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The Kubernetes objects that run AMD's ROCm device plugin and its node labeller, as plain dicts, modelled on the
project's manifests (ROCm/k8s-device-plugin k8s-ds-amdgpu-dp.yaml, k8s-ds-amdgpu-labeller.yaml and the Helm chart
helm/amd-gpu/templates) with their security contexts. Pure functions."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.objects import LABEL_COMPONENT, LABEL_NAME
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.objectset import owner_labels
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.vendor_args import DEFAULT_PRIORITY_CLASS
from ansible_collections.kubegpu.cluster.plugins.module_utils._amd.constants import (
    APP_NAME, DEFAULT_LABELLER_FLAGS, DEFAULT_NODE_SELECTOR, DEFAULT_RESOURCE_NAMING_STRATEGY,
    DEFAULT_TOLERATIONS, DEVICE_PLUGIN_NAMESPACE, DEVICE_PLUGIN_VERSION, KUBELET_DEVICE_PLUGINS, LABELLER_COMPONENT,
    LABELLER_NAME, LABELLER_NODE_VERBS, LABELLER_PROGRAM, LABELLER_SERVICE_ACCOUNT, LABELLER_WORKDIR, PLUGIN_COMPONENT,
    PLUGIN_LOG_ARGS, PLUGIN_NAME, PLUGIN_PROGRAM, default_image, default_labeller_image,
)

# The plugin: no privilege escalation, no capabilities (k8s-ds-amdgpu-dp.yaml; helm/amd-gpu/values.yaml securityContext).
PLUGIN_SECURITY_CONTEXT = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
# The labeller: privileged for /dev (it opens the render nodes for -family through libdrm), every capability dropped
# (k8s-ds-amdgpu-labeller.yaml "privileged: true #Needed for /dev", capabilities drop ALL).
LABELLER_SECURITY_CONTEXT = {"privileged": True, "capabilities": {"drop": ["ALL"]}}


def _meta(name, component, namespace=None, cluster_owner=None):
    meta = {"name": name, "labels": owner_labels(APP_NAME, component, cluster_owner)}
    if namespace:
        meta["namespace"] = namespace
    return meta


def cluster_role_name(namespace):
    """The labeller's ClusterRole (and binding): one per deployment's namespace."""
    return "%s-%s" % (namespace, LABELLER_SERVICE_ACCOUNT)


def _pod_spec(params, containers, volumes, service_account=None):
    spec = {
        "tolerations": copy.deepcopy(params.get("tolerations") if params.get("tolerations") is not None
                                     else DEFAULT_TOLERATIONS),
        "nodeSelector": dict(params.get("node_selector") if params.get("node_selector") is not None
                             else DEFAULT_NODE_SELECTOR),
        "containers": containers,
        "volumes": volumes,
    }
    priority = params.get("priority_class") if params.get("priority_class") is not None else DEFAULT_PRIORITY_CLASS
    if priority:
        spec["priorityClassName"] = priority
    if params.get("image_pull_secrets"):
        spec["imagePullSecrets"] = [{"name": n} for n in params["image_pull_secrets"]]
    if service_account:
        spec["serviceAccountName"] = service_account
    else:
        spec["automountServiceAccountToken"] = False  # the plugin talks to the kubelet only, never to the API
    return spec


def _daemonset(name, component, namespace, pod_spec):
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": _meta(name, component, namespace),
        "spec": {
            "selector": {"matchLabels": {LABEL_NAME: APP_NAME, LABEL_COMPONENT: component}},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {"metadata": {"labels": owner_labels(APP_NAME, component)}, "spec": pod_spec},
        },
    }


def _host_path(name, path):
    return {"name": name, "hostPath": {"path": path, "type": "Directory"}}


def plugin_args(params):
    """The plugin's arguments: the image's own logging flags and the naming strategy (cmd/k8s-device-plugin/main.go
    -resource_naming_strategy)."""
    strategy = params.get("resource_naming_strategy") or DEFAULT_RESOURCE_NAMING_STRATEGY
    return list(PLUGIN_LOG_ARGS) + ["-resource_naming_strategy=%s" % strategy]


def labeller_args(params):
    """The labeller's arguments: one ``-<flag>`` per label family (cmd/k8s-node-labeller/main.go labelGenerators)."""
    flags = params.get("labeller_flags")
    return ["-%s" % flag for flag in (flags if flags is not None else DEFAULT_LABELLER_FLAGS)]


def render(params):
    """Every object the deployment needs, in apply order (the namespace is the object set's)."""
    namespace = params.get("namespace") or DEVICE_PLUGIN_NAMESPACE
    version = params.get("version") or DEVICE_PLUGIN_VERSION
    plugin = {
        "name": "amdgpu-dp-cntr",
        "image": params.get("image") or default_image(version),
        "command": [PLUGIN_PROGRAM],
        "args": plugin_args(params),
        "securityContext": copy.deepcopy(PLUGIN_SECURITY_CONTEXT),
        "volumeMounts": [{"name": "dp", "mountPath": KUBELET_DEVICE_PLUGINS},
                         {"name": "sys", "mountPath": "/sys", "readOnly": True}],
    }
    objects = [_daemonset(PLUGIN_NAME, PLUGIN_COMPONENT, namespace, _pod_spec(
        params, [plugin], [_host_path("dp", KUBELET_DEVICE_PLUGINS), _host_path("sys", "/sys")]))]
    if params.get("labeller", True):
        objects = _labeller_objects(params, namespace, version) + objects
    return objects


def _labeller_objects(params, namespace, version):
    """The node labeller with least-privilege RBAC: its ServiceAccount may get, list, watch and update Node objects
    (what its controller-runtime cache and ``client.Update`` need; helm/amd-gpu/templates/rbac.yaml) and nothing else:
    no PodSecurityPolicy (gone since Kubernetes 1.25), no other resource. A DaemonSet pod cannot be limited to its own
    node by RBAC (resourceNames would need every node's name)."""
    role = cluster_role_name(namespace)
    sa = LABELLER_SERVICE_ACCOUNT
    container = {
        "name": "amdgpu-lr-cntr",
        "image": params.get("labeller_image") or default_labeller_image(version),
        "workingDir": LABELLER_WORKDIR,
        "command": [LABELLER_PROGRAM],
        "args": labeller_args(params),
        # main.go: the labeller answers only the Create event of the node named DS_NODE_NAME
        "env": [{"name": "DS_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "securityContext": copy.deepcopy(LABELLER_SECURITY_CONTEXT),
        "volumeMounts": [{"name": "sys", "mountPath": "/sys", "readOnly": True}, {"name": "dev", "mountPath": "/dev"}],
    }
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(sa, LABELLER_COMPONENT, namespace)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": _meta(role, LABELLER_COMPONENT, cluster_owner=namespace),
         "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": list(LABELLER_NODE_VERBS)}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": _meta(role, LABELLER_COMPONENT, cluster_owner=namespace),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
         "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}]},
        _daemonset(LABELLER_NAME, LABELLER_COMPONENT, namespace, _pod_spec(
            params, [container], [_host_path("sys", "/sys"), _host_path("dev", "/dev")], service_account=sa)),
    ]


# What state=absent looks for: (apiVersion, kind, namespaced).
MANAGED_KINDS = (
    ("apps/v1", "DaemonSet", True),
    ("v1", "ServiceAccount", True),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", False),
    ("rbac.authorization.k8s.io/v1", "ClusterRole", False),
)
