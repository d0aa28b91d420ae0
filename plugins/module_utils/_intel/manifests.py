# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The Kubernetes objects that run Intel's GPU plugin (and, optionally, its NFD rule), as plain dicts, modelled on
the project's kustomize base (intel/intel-device-plugins-for-kubernetes deployments/gpu_plugin/base/intel-gpu-plugin.yaml)
and its NFD rule (deployments/nfd/overlays/node-feature-rules/node-feature-rules.yaml). Pure functions."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.objects import LABEL_COMPONENT, LABEL_NAME
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.objectset import owner_labels
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.vendor_args import DEFAULT_PRIORITY_CLASS
from ansible_collections.kubegpu.cluster.plugins.module_utils._nfd.constants import API_VERSION as NFD_API_VERSION
from ansible_collections.kubegpu.cluster.plugins.module_utils._intel.constants import (
    APP_NAME, DEFAULT_ALLOCATION_POLICY, DEFAULT_NODE_SELECTOR, DEFAULT_SHARED_DEV_NUM,
    DEFAULT_TOLERATIONS, DEVFS_DRI, DEVICE_PLUGIN_NAMESPACE, DEVICE_PLUGIN_VERSION, KUBELET_DEVICE_PLUGINS, NFD_RULE,
    NFD_RULE_NAME, PLUGIN_COMPONENT, PLUGIN_CONTAINER, PLUGIN_NAME, SYSFS_DRM, default_image,
)

# The base runs the plugin with a read-only root file system; it reads sysfs and /dev/dri (mounted read-only) and
# writes only its socket in the kubelet's directory, so no privilege escalation and no capabilities either.
SECURITY_CONTEXT = {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]}}
NFD_RULE_KIND = "NodeFeatureRule"


def _meta(name, component, namespace=None, cluster_owner=None):
    meta = {"name": name, "labels": owner_labels(APP_NAME, component, cluster_owner)}
    if namespace:
        meta["namespace"] = namespace
    return meta


def plugin_args(params):
    """The plugin's flags (gpu_plugin.go main()): only those that differ from the plugin's defaults."""
    args = []
    shared = params.get("shared_dev_num") or DEFAULT_SHARED_DEV_NUM
    if shared != DEFAULT_SHARED_DEV_NUM:
        args.append("-shared-dev-num=%d" % shared)
    policy = params.get("allocation_policy") or DEFAULT_ALLOCATION_POLICY
    if policy != DEFAULT_ALLOCATION_POLICY:
        args.append("-allocation-policy=%s" % policy)
    if params.get("enable_monitoring"):
        args.append("-enable-monitoring")
    return args


def nfd_rule(namespace):
    """Intel's NFD rule for GPUs (rule ``intel.gpu``), alone in a NodeFeatureRule of ours."""
    return {"apiVersion": NFD_API_VERSION, "kind": NFD_RULE_KIND,
            "metadata": _meta(NFD_RULE_NAME, "nfd-rule", cluster_owner=namespace),
            "spec": {"rules": [copy.deepcopy(NFD_RULE)]}}


def render(params):
    """Every object the deployment needs, in apply order (the namespace is the object set's)."""
    namespace = params.get("namespace") or DEVICE_PLUGIN_NAMESPACE
    version = params.get("version") or DEVICE_PLUGIN_VERSION
    container = {
        "name": PLUGIN_CONTAINER,
        "image": params.get("image") or default_image(version),
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "securityContext": copy.deepcopy(SECURITY_CONTEXT),
        "volumeMounts": [{"name": "devfs", "mountPath": DEVFS_DRI, "readOnly": True},
                         {"name": "sysfs", "mountPath": SYSFS_DRM, "readOnly": True},
                         {"name": "kubeletsockets", "mountPath": KUBELET_DEVICE_PLUGINS}],
    }
    args = plugin_args(params)
    if args:
        container["args"] = args
    spec = {
        "tolerations": copy.deepcopy(params.get("tolerations") if params.get("tolerations") is not None
                                     else DEFAULT_TOLERATIONS),
        "nodeSelector": dict(params.get("node_selector") if params.get("node_selector") is not None
                             else DEFAULT_NODE_SELECTOR),
        "automountServiceAccountToken": False,  # the plugin talks to the kubelet only, never to the API
        "containers": [container],
        "volumes": [{"name": "devfs", "hostPath": {"path": DEVFS_DRI}},
                    {"name": "sysfs", "hostPath": {"path": SYSFS_DRM}},
                    {"name": "kubeletsockets", "hostPath": {"path": KUBELET_DEVICE_PLUGINS}}],
    }
    priority = params.get("priority_class") if params.get("priority_class") is not None else DEFAULT_PRIORITY_CLASS
    if priority:
        spec["priorityClassName"] = priority
    if params.get("image_pull_secrets"):
        spec["imagePullSecrets"] = [{"name": n} for n in params["image_pull_secrets"]]
    objects = []
    if params.get("nfd_rule"):
        objects.append(nfd_rule(namespace))
    objects.append({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": _meta(PLUGIN_NAME, PLUGIN_COMPONENT, namespace),
        "spec": {
            "selector": {"matchLabels": {LABEL_NAME: APP_NAME, LABEL_COMPONENT: PLUGIN_COMPONENT}},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {"metadata": {"labels": owner_labels(APP_NAME, PLUGIN_COMPONENT)}, "spec": spec},
        },
    })
    return objects


# What state=absent looks for: (apiVersion, kind, namespaced). The NFD rule's kind only where NFD's CRDs are served.
MANAGED_KINDS = (("apps/v1", "DaemonSet", True),)
NFD_RULE_KINDS = ((NFD_API_VERSION, NFD_RULE_KIND, False),)
