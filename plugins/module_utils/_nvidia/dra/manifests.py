# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""NVIDIA's DRA driver for GPUs (kubernetes-sigs/dra-driver-nvidia-gpu) as plain dicts, modelled on its Helm chart
(deployments/helm/dra-driver-nvidia-gpu, v0.5.0) with ``resources.gpus.enabled=true`` and compute domains off: the
kubelet plugin's ServiceAccount and least-privilege RBAC (templates/rbac-kubeletplugin.yaml), its DaemonSet
(templates/kubeletplugin.yaml, the ``gpus`` container and the init container), and the DeviceClasses
(templates/deviceclass-gpu.yaml, deviceclass-mig.yaml). The DaemonSet runs only where the node is labelled for DRA
(``nvidia.com/gpu.deploy.dra-driver=true``), so nodes move to DRA one at a time. Pure functions."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import posixpath

from ansible_collections.kubegpu.cluster.plugins.module_utils import _kubelet
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.objectset import owner_labels
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.objects import LABEL_COMPONENT, LABEL_NAME
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.constants import (
    CDI_ROOT, CONTAINER_DRIVER_ROOT, DEFAULT_DRIVER_ROOT, DEFAULT_PRIORITY_CLASS,
    DEPLOY_LABEL_ON, DRA_APP_NAME, DRA_DEVICE_CLASS_GPU, DRA_DEVICE_CLASS_MIG, DRA_DEVICE_TYPE_GPU, DRA_DEVICE_TYPE_MIG,
    DRA_DRIVER_IMAGE_REPOSITORY, DRA_DRIVER_NAME, DRA_DRIVER_VERSION, DRA_HEALTHCHECK_PORT, DRA_KUBELET_PLUGIN_NAME,
    DRA_LOG_VERBOSITY, DRA_NAMESPACE, GPU_TOLERATION, LABEL_DEPLOY_DRA_DRIVER, RESOURCE_GPU,
)

COMPONENT_PLUGIN = "kubelet-plugin"
COMPONENT_CLASSES = "device-classes"
DEFAULT_TOLERATIONS = [GPU_TOLERATION]  # values.yaml kubeletPlugin.tolerations


def default_image(version=DRA_DRIVER_VERSION):
    """The chart's image (templates/_helpers.tpl fullimage: repository and "v" + appVersion)."""
    return "%s:%s" % (DRA_DRIVER_IMAGE_REPOSITORY, version)


def kubelet_dirs(root_dir=None):
    """``(registrar dir, plugins dir)`` under the kubelet's root dir (the chart's kubeletRegistrarDirectoryPath and
    kubeletPluginsDirectoryPath, /var/lib/kubelet/plugins_registry and /var/lib/kubelet/plugins by default)."""
    return _kubelet.dirs(root_dir)


def _meta(name, component, namespace=None, cluster_owner=None):
    meta = {"name": name, "labels": owner_labels(DRA_APP_NAME, component, cluster_owner)}
    if namespace:
        meta["namespace"] = namespace
    return meta


def service_account_name():
    return DRA_KUBELET_PLUGIN_NAME


def _rbac(namespace):
    """The kubelet plugin's ServiceAccount and ClusterRole, least privilege for GPUs alone: the chart's
    rbac-kubeletplugin.yaml without what only compute domains use (``computedomains`` and the namespaced
    ``computedomaincliques`` Role) or MPS (``deployments``, under featureGates.MPSSupport), and without writing nodes
    (the chart's ``update``/``patch`` of nodes serve the compute-domain plugin's clique label). ResourceSlices are
    the plugin's to publish; claims and pods it reads; its node it reads (the slices' owner)."""
    sa = service_account_name()
    role = "%s-%s" % (namespace, DRA_KUBELET_PLUGIN_NAME)
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(sa, COMPONENT_PLUGIN, namespace)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": _meta(role, COMPONENT_PLUGIN, cluster_owner=namespace),
         "rules": [
             {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get", "list", "watch"]},
             {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"],
              "verbs": ["get", "list", "watch", "create", "update", "delete"]},
             {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
             {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
         ]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": _meta(role, COMPONENT_PLUGIN, cluster_owner=namespace),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
         "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}]},
    ]


def _field(name, path):
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def daemonset(params, namespace):
    """The kubelet plugin's DaemonSet, as the chart renders it with resources.gpus on and compute domains off."""
    image = params.get("image") or default_image(params.get("version") or DRA_DRIVER_VERSION)
    driver_root = params.get("nvidia_driver_root") or DEFAULT_DRIVER_ROOT
    registrar, plugins = kubelet_dirs(params.get("kubelet_root_dir"))
    kubelet_env = [{"name": "KUBELET_REGISTRAR_DIRECTORY_PATH", "value": registrar},
                   {"name": "KUBELET_PLUGINS_DIRECTORY_PATH", "value": plugins}]
    # the init container waits for the driver under the driver root's parent (kubelet-plugin-prestart.sh)
    parent = "/" if driver_root == "/" else posixpath.dirname(driver_root.rstrip("/"))
    parent_mount = {"name": "driver-root-parent", "mountPath": "/driver-root-parent"}
    if driver_root == "/":
        parent_mount["readOnly"] = True
    else:
        parent_mount["mountPropagation"] = "HostToContainer"
    init = {
        "name": "init-container",
        "image": image,
        "securityContext": {"privileged": True},
        "command": ["bash", "/usr/bin/kubelet-plugin-prestart.sh"],
        "env": [{"name": "NVIDIA_DRIVER_ROOT", "value": driver_root},
                {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}] + copy.deepcopy(kubelet_env),
        "volumeMounts": [parent_mount],
    }
    probe = {"grpc": {"port": DRA_HEALTHCHECK_PORT, "service": "liveness"}, "timeoutSeconds": 10}
    gpus = {
        "name": "gpus",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "securityContext": {"privileged": True},  # values.yaml kubeletPlugin.containers.gpus.securityContext
        "command": ["gpu-kubelet-plugin"],
        "args": ["-v", "$(LOG_VERBOSITY)"],
        "startupProbe": dict(copy.deepcopy(probe), failureThreshold=600, periodSeconds=1),
        "livenessProbe": dict(copy.deepcopy(probe), failureThreshold=3, periodSeconds=30),
        "env": [
            {"name": "LOG_VERBOSITY", "value": DRA_LOG_VERBOSITY},
            {"name": "MASK_NVIDIA_DRIVER_PARAMS", "value": "false"},
            {"name": "NVIDIA_DRIVER_ROOT", "value": driver_root},
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},  # runc: no GPU injected into the plugin itself
            {"name": "CDI_ROOT", "value": CDI_ROOT},
            {"name": "NVIDIA_MIG_CONFIG_DEVICES", "value": "all"},
            _field("NODE_NAME", "spec.nodeName"),
            _field("NAMESPACE", "metadata.namespace"),
            _field("SERVICE_ACCOUNT_NAME", "spec.serviceAccountName"),
            {"name": "IMAGE_NAME", "value": image},
            {"name": "IMAGE_PULL_POLICY", "value": "IfNotPresent"},
        ] + kubelet_env + [{"name": "HEALTHCHECK_PORT", "value": str(DRA_HEALTHCHECK_PORT)}],
        "volumeMounts": [
            {"name": "plugins-registry", "mountPath": registrar},
            {"name": "plugins", "mountPath": plugins, "mountPropagation": "Bidirectional"},
            {"name": "cdi", "mountPath": CDI_ROOT},
            {"name": "driver-root", "mountPath": CONTAINER_DRIVER_ROOT, "mountPropagation": "HostToContainer"},
        ],
    }
    if params.get("image_pull_secrets"):
        gpus["env"].append({"name": "IMAGE_PULL_SECRETS", "value": ",".join(params["image_pull_secrets"])})
    selector = dict(params.get("node_selector") or {})
    selector[LABEL_DEPLOY_DRA_DRIVER] = DEPLOY_LABEL_ON  # only the nodes moved to DRA
    priority = params.get("priority_class") if params.get("priority_class") is not None else DEFAULT_PRIORITY_CLASS
    spec = {
        "serviceAccountName": service_account_name(),
        "nodeSelector": selector,
        "tolerations": copy.deepcopy(params.get("tolerations") if params.get("tolerations") is not None
                                     else DEFAULT_TOLERATIONS),
        "initContainers": [init],
        "containers": [gpus],
        "volumes": [
            {"name": "plugins-registry", "hostPath": {"path": registrar}},
            {"name": "plugins", "hostPath": {"path": plugins}},
            {"name": "cdi", "hostPath": {"path": CDI_ROOT}},
            {"name": "driver-root-parent", "hostPath": {"path": parent, "type": "DirectoryOrCreate"}},
            {"name": "driver-root", "hostPath": {"path": driver_root, "type": "DirectoryOrCreate"}},
        ],
    }
    if priority:
        spec["priorityClassName"] = priority
    if params.get("image_pull_secrets"):
        spec["imagePullSecrets"] = [{"name": n} for n in params["image_pull_secrets"]]
    selector_labels = {LABEL_NAME: DRA_APP_NAME, LABEL_COMPONENT: COMPONENT_PLUGIN}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": _meta(DRA_KUBELET_PLUGIN_NAME, COMPONENT_PLUGIN, namespace),
        "spec": {
            "selector": {"matchLabels": selector_labels},
            # values.yaml kubeletPlugin.updateStrategy: every node's plugin is replaced at once
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}},
            "template": {"metadata": {"labels": owner_labels(DRA_APP_NAME, COMPONENT_PLUGIN)}, "spec": spec},
        },
    }


def device_classes(resource_api, namespace, extended_resource):
    """The gpu and mig DeviceClasses (templates/deviceclass-gpu.yaml, deviceclass-mig.yaml), in ``resource_api``;
    ``extendedResourceName: nvidia.com/gpu`` on the gpu class when ``extended_resource`` (the version matrix decides)."""
    out = []
    for name, kind in ((DRA_DEVICE_CLASS_GPU, DRA_DEVICE_TYPE_GPU), (DRA_DEVICE_CLASS_MIG, DRA_DEVICE_TYPE_MIG)):
        spec = {"selectors": [{"cel": {"expression": "device.driver == '%s' && device.attributes['%s'].type == '%s'"
                                                     % (DRA_DRIVER_NAME, DRA_DRIVER_NAME, kind)}}]}
        if kind == DRA_DEVICE_TYPE_GPU and extended_resource:
            spec["extendedResourceName"] = RESOURCE_GPU
        out.append({"apiVersion": resource_api, "kind": "DeviceClass",
                    "metadata": _meta(name, COMPONENT_CLASSES, cluster_owner=namespace), "spec": spec})
    return out


def render(params, resource_api, extended_resource):
    """Every object of the deployment, in apply order (the namespace is the object set's)."""
    namespace = params.get("namespace") or DRA_NAMESPACE
    return _rbac(namespace) + device_classes(resource_api, namespace, extended_resource) + [daemonset(params, namespace)]


def managed_kinds(resource_api=None):
    """What ``state=absent`` and the prune look for: ``(apiVersion, kind, namespaced)``; DeviceClasses only where the
    server serves resource.k8s.io."""
    kinds = [("apps/v1", "DaemonSet", True), ("v1", "ServiceAccount", True),
             ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", False),
             ("rbac.authorization.k8s.io/v1", "ClusterRole", False)]
    if resource_api:
        kinds.append((resource_api, "DeviceClass", False))
    return tuple(kinds)
