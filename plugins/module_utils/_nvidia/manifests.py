# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The Kubernetes objects that run the NVIDIA device plugin (and GPU feature discovery), as plain dicts, modelled on
the plugin's static manifest (deployments/static/nvidia-device-plugin.yml in NVIDIA/k8s-device-plugin) with the
vendor's hardened security context. Pure functions."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.objects import (
    ANNOTATION_CONFIG_HASH, LABEL_COMPONENT, LABEL_NAME,
)
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.objectset import owner_labels
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.constants import (
    APP_NAME, CONFIG_DIR, CONFIG_KEY, CONFIGMAP_NAME, DEFAULT_NODE_SELECTOR, DEFAULT_PRIORITY_CLASS, DEFAULT_TOLERATIONS,
    DEVICE_PLUGIN_NAMESPACE, DEVICE_PLUGIN_VERSION, GFD_NAME, KUBELET_DEVICE_PLUGINS, MPS_ROOT, PLUGIN_NAME,
    RUNTIME_NAME, default_image,
)
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.plugin_config import (
    build_config, config_hash, config_yaml,
)


def _meta(name, component, namespace=None, cluster_owner=None):
    meta = {"name": name, "labels": owner_labels(APP_NAME, component, cluster_owner)}
    if namespace:
        meta["namespace"] = namespace
    return meta


_SECURITY_CONTEXT = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def _pod_spec(params, containers, volumes, service_account=None):
    spec = {
        "priorityClassName": params.get("priority_class") if params.get("priority_class") is not None
        else DEFAULT_PRIORITY_CLASS,
        "tolerations": copy.deepcopy(params.get("tolerations") if params.get("tolerations") is not None
                                     else DEFAULT_TOLERATIONS),
        "nodeSelector": dict(params.get("node_selector") if params.get("node_selector") is not None
                             else DEFAULT_NODE_SELECTOR),
        "containers": containers,
        "volumes": volumes,
    }
    if not spec["priorityClassName"]:
        del spec["priorityClassName"]
    if params.get("runtime_class"):
        spec["runtimeClassName"] = params["runtime_class"]
    if params.get("image_pull_secrets"):
        spec["imagePullSecrets"] = [{"name": n} for n in params["image_pull_secrets"]]
    if service_account:
        spec["serviceAccountName"] = service_account
    return spec


def _daemonset(name, component, namespace, params, pod_spec, digest):
    labels = owner_labels(APP_NAME, component)
    selector = {LABEL_NAME: APP_NAME, LABEL_COMPONENT: component}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": _meta(name, component, namespace),
        "spec": {
            "selector": {"matchLabels": selector},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": labels, "annotations": {ANNOTATION_CONFIG_HASH: digest}},
                "spec": pod_spec,
            },
        },
    }


def _config_volume():
    return {"name": "config", "configMap": {"name": CONFIGMAP_NAME, "items": [{"key": CONFIG_KEY, "path": CONFIG_KEY}]}}


def render(params, config=None):
    """Every object the deployment needs, in apply order, as plain dicts (the namespace is the object set's)."""
    config = config if config is not None else build_config(params)
    namespace = params.get("namespace") or DEVICE_PLUGIN_NAMESPACE
    version = params.get("version") or DEVICE_PLUGIN_VERSION
    image = params.get("image") or default_image(version)
    digest = config_hash(config)
    objects = [{
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(CONFIGMAP_NAME, "config", namespace),
        "data": {CONFIG_KEY: config_yaml(config)},
    }]
    if params.get("runtime_class"):
        objects.append({
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": _meta(params["runtime_class"], "runtime-class", cluster_owner=namespace),
            "handler": RUNTIME_NAME,
        })

    mounts = [{"name": "device-plugin", "mountPath": KUBELET_DEVICE_PLUGINS},
              {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}]
    volumes = [{"name": "device-plugin", "hostPath": {"path": KUBELET_DEVICE_PLUGINS, "type": "Directory"}},
               _config_volume()]
    if "mps" in config.get("sharing", {}):
        mounts.append({"name": "mps-root", "mountPath": "/mps"})
        volumes.append({"name": "mps-root", "hostPath": {"path": MPS_ROOT, "type": "DirectoryOrCreate"}})
    plugin = {
        "name": "nvidia-device-plugin-ctr",
        "image": image,
        "env": [{"name": "CONFIG_FILE", "value": "%s/%s" % (CONFIG_DIR, CONFIG_KEY)}],
        "securityContext": copy.deepcopy(_SECURITY_CONTEXT),
        "volumeMounts": mounts,
    }
    objects.append(_daemonset(PLUGIN_NAME, "device-plugin", namespace, params,
                              _pod_spec(params, [plugin], volumes), digest))

    if params.get("gfd"):
        objects.extend(_gfd_objects(params, namespace, image, digest))
    return objects


def _gfd_objects(params, namespace, image, digest):
    """GFD: its ServiceAccount, least-privilege RBAC and DaemonSet.

    GFD (v0.19.0+, ``useNodeFeatureAPI``) writes one ``NodeFeature`` (nfd.k8s-sigs.io) object per node in its own
    namespace, which NFD's master turns into node labels; so the namespaced Role allows exactly that resource. It
    reads its own Node (``get``) for the owner reference of that object; nothing else, and it never writes nodes.
    """
    sa = GFD_NAME
    objects = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(sa, "gpu-feature-discovery", namespace)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": _meta(GFD_NAME, "gpu-feature-discovery", namespace),
         "rules": [{"apiGroups": ["nfd.k8s-sigs.io"], "resources": ["nodefeatures"],
                    "verbs": ["get", "list", "watch", "create", "update"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": _meta(GFD_NAME, "gpu-feature-discovery", namespace),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": GFD_NAME},
         "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": _meta("%s-%s" % (namespace, GFD_NAME), "gpu-feature-discovery", cluster_owner=namespace),
         "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": _meta("%s-%s" % (namespace, GFD_NAME), "gpu-feature-discovery", cluster_owner=namespace),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "%s-%s" % (namespace, GFD_NAME)},
         "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}]},
    ]
    container = {
        "name": "gpu-feature-discovery-ctr",
        "image": image,
        "command": ["gpu-feature-discovery"],
        "env": [
            {"name": "CONFIG_FILE", "value": "%s/%s" % (CONFIG_DIR, CONFIG_KEY)},
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        ],
        "securityContext": copy.deepcopy(_SECURITY_CONTEXT),
        "volumeMounts": [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
                         {"name": "host-sys", "mountPath": "/sys", "readOnly": True}],
    }
    volumes = [_config_volume(), {"name": "host-sys", "hostPath": {"path": "/sys", "type": "Directory"}}]
    objects.append(_daemonset(GFD_NAME, "gpu-feature-discovery", namespace, params,
                              _pod_spec(params, [container], volumes, service_account=sa), digest))
    return objects


# What state=absent looks for: (apiVersion, kind, namespaced).
MANAGED_KINDS = (
    ("apps/v1", "DaemonSet", True),
    ("v1", "ConfigMap", True),
    ("rbac.authorization.k8s.io/v1", "RoleBinding", True),
    ("rbac.authorization.k8s.io/v1", "Role", True),
    ("v1", "ServiceAccount", True),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", False),
    ("rbac.authorization.k8s.io/v1", "ClusterRole", False),
    ("node.k8s.io/v1", "RuntimeClass", False),
)
