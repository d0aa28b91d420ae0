# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The Kubernetes objects of node feature discovery v0.19.0, as plain dicts: its three CustomResourceDefinitions
(schemas after pkg/apis/nfd/v1alpha1/types.go), nfd-master (a Deployment) and nfd-worker (a DaemonSet) with their
ConfigMaps and least-privilege RBAC, modelled on NFD's Helm chart 0.19.0 (templates/master.yaml, worker.yaml,
clusterrole.yaml, role.yaml) with its hardened security context. Pure functions."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import hashlib
import json

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import OptionError
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import names
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.objects import (
    ANNOTATION_CONFIG_HASH, CRD_API_VERSION, CRD_KIND, LABEL_COMPONENT, LABEL_NAME,
)
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.objectset import owner_labels
from ansible_collections.kubegpu.cluster.plugins.module_utils._nfd.constants import (
    API_GROUP, APP_NAME, CONFIG_DIR, FEATURES_D, HTTP_PORT, MASTER_CONFIG_KEY, MASTER_NAME,
    MASTER_PROGRAM, MASTER_TOLERATIONS, NAMESPACE, NFD_IMAGE_REPOSITORY, NFD_VERSION, WORKER_CONFIG_KEY, WORKER_NAME,
    WORKER_PROGRAM,
)

# The chart's container security context (values.yaml master/worker.securityContext).
SECURITY_CONTEXT = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                    "readOnlyRootFilesystem": True, "runAsNonRoot": True}
# The chart's resources (values.yaml master/worker.resources).
MASTER_RESOURCES = {"limits": {"memory": "4Gi"}, "requests": {"cpu": "100m", "memory": "128Mi"}}
WORKER_RESOURCES = {"limits": {"memory": "512Mi"}, "requests": {"cpu": "5m", "memory": "64Mi"}}
# PCI class prefixes are hex (source/pci/pci.go matches a device's class by prefix); the label fields NFD knows.
PCI_LABEL_FIELDS = ("class", "vendor", "device", "subsystem_vendor", "subsystem_device")

# ---- CustomResourceDefinitions -------------------------------------------------------------------------------


def _string_map():
    return {"type": "object", "additionalProperties": {"type": "string"}}


def _expression():
    return {"type": "object", "required": ["op"], "properties": {
        "op": {"type": "string", "enum": ["In", "NotIn", "InRegexp", "Exists", "DoesNotExist", "Gt", "Lt", "GtLt",
                                          "IsTrue", "IsFalse"]},
        "value": {"type": "array", "items": {"type": "string"}}}}


def _match_features():
    return {"type": "array", "items": {"type": "object", "required": ["feature"], "properties": {
        "feature": {"type": "string"},
        "matchExpressions": {"type": "object", "additionalProperties": _expression()},
        "matchName": _expression()}}}


def _match_any():
    return {"type": "array", "items": {"type": "object", "required": ["matchFeatures"],
                                       "properties": {"matchFeatures": _match_features()}}}


def _features():
    """types.go Features: flags, attributes and instances, each a map of feature sets with ``elements``."""
    def feature_set(elements):
        return {"type": "object", "additionalProperties": {"type": "object", "required": ["elements"],
                                                           "properties": {"elements": elements}}}
    return {"type": "object", "properties": {
        "flags": feature_set({"type": "object", "additionalProperties": {"type": "object"}}),
        "attributes": feature_set(_string_map()),
        "instances": feature_set({"type": "array", "items": {
            "type": "object", "required": ["attributes"], "properties": {"attributes": _string_map()}}})}}


def _crd(plural, kind, scope, spec_schema, status_schema=None, subresource=False, short_names=None, owner=None):
    schema = {"type": "object", "required": ["spec"], "properties": {
        "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"},
        "spec": spec_schema}}
    version = {"name": "v1alpha1", "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}}
    if status_schema is not None:
        schema["properties"]["status"] = status_schema
    if subresource:
        version["subresources"] = {"status": {}}
    crd_names = {"kind": kind, "listKind": kind + "List", "plural": plural, "singular": kind.lower()}
    if short_names:
        crd_names["shortNames"] = list(short_names)
    name = "%s.%s" % (plural, API_GROUP)
    return {"apiVersion": CRD_API_VERSION, "kind": CRD_KIND,
            "metadata": _meta(name, "crd", cluster_owner=owner) if owner else {"name": name},
            "spec": {"group": API_GROUP, "names": crd_names, "scope": scope, "versions": [version]}}


def crds(owner=None):
    """NodeFeature (namespaced: one node's features and requested labels), NodeFeatureRule (cluster-scoped labelling
    rules) and NodeFeatureGroup (namespaced node groups); nfd-master watches all three. ``owner``: the namespace of
    the deployment that owns them (their labels say so), None for bare definitions."""
    rule = {"type": "object", "required": ["name"], "properties": {
        "name": {"type": "string"}, "labels": _string_map(), "labelsTemplate": {"type": "string"},
        "annotations": _string_map(), "extendedResources": _string_map(), "vars": _string_map(),
        "varsTemplate": {"type": "string"},
        "taints": {"type": "array", "items": {"type": "object", "required": ["effect", "key"], "properties": {
            "key": {"type": "string"}, "value": {"type": "string"}, "effect": {"type": "string"},
            "timeAdded": {"type": "string", "format": "date-time"}}}},
        "matchFeatures": _match_features(), "matchAny": _match_any()}}
    group_rule = {"type": "object", "required": ["name"], "properties": {
        "name": {"type": "string"}, "matchFeatures": _match_features(), "matchAny": _match_any()}}
    status = {"type": "object", "properties": {"lastAppliedAt": {"type": "string", "format": "date-time"},
                                               "numberOfFeatureErrors": {"type": "integer"},
                                               "numberOfFeatures": {"type": "integer"},
                                               "numberOfLabels": {"type": "integer"}}}
    group_status = {"type": "object", "properties": {"nodes": {"type": "array", "items": {
        "type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}}}}
    return [
        _crd("nodefeatures", "NodeFeature", "Namespaced", {"type": "object", "properties": {
            "features": _features(), "labels": _string_map()}}, status_schema=status, owner=owner),
        _crd("nodefeaturerules", "NodeFeatureRule", "Cluster", {"type": "object", "required": ["rules"], "properties": {
            "rules": {"type": "array", "items": rule}}}, short_names=["nfr"], owner=owner),
        _crd("nodefeaturegroups", "NodeFeatureGroup", "Namespaced", {
            "type": "object", "required": ["featureGroupRules"],
            "properties": {"featureGroupRules": {"type": "array", "items": group_rule}}},
            status_schema=group_status, subresource=True, short_names=["nfg"], owner=owner),
    ]


# ---- configuration -------------------------------------------------------------------------------------------


def _names(params, option, check):
    values = params.get(option) or []
    for value in values:
        if not isinstance(value, str) or not check(value):
            raise OptionError(option, "%r is not valid" % (value,))
    return list(values)


def _pci_class(value):
    return 0 < len(value) <= 6 and all(c in "0123456789abcdefABCDEF" for c in value)


def _label_ns(value):
    return names.is_dns_subdomain(value.lstrip("*.") if value.startswith("*.") else value)


def configs(params):
    """``(master config, worker config)`` as data (each file is JSON, which is YAML), checked before any API call.

    master: ``extraLabelNs`` (label namespaces allowed even where NFD denies them; the device plugin's chart passes
    ``nvidia.com``). worker: ``sources.pci.deviceClassWhitelist`` and ``deviceLabelFields`` when given, else NFD's own
    defaults (classes ``03``, ``0b40``, ``12``; fields ``class``, ``vendor``).
    """
    master = {}
    extra = _names(params, "extra_label_ns", _label_ns)
    if extra:
        master["extraLabelNs"] = extra
    pci = {}
    classes = _names(params, "pci_device_classes", _pci_class)
    if classes:
        pci["deviceClassWhitelist"] = [c.lower() for c in classes]
    fields = params.get("pci_label_fields") or []
    for field in fields:
        if field not in PCI_LABEL_FIELDS:
            raise OptionError("pci_label_fields", "unknown field %r (one of: %s)" % (field, ", ".join(PCI_LABEL_FIELDS)))
    if fields:
        pci["deviceLabelFields"] = list(fields)
    worker = {"sources": {"pci": pci}} if pci else {}
    return master, worker


def config_text(config):
    return json.dumps(config, indent=2, sort_keys=True) + "\n"


def validate(params):
    """Check every option before any API call; returns ``(master config, worker config)``."""
    namespace = params.get("namespace")
    if namespace and not names.is_dns_label(namespace):
        raise OptionError("namespace", "'%s' is not a valid namespace name (DNS label)" % namespace)
    for secret in params.get("image_pull_secrets") or []:
        if not names.is_dns_subdomain(secret or ""):
            raise OptionError("image_pull_secrets", "'%s' is not a valid Secret name" % secret)
    priority = params.get("priority_class")
    if priority and not names.is_dns_subdomain(priority):
        raise OptionError("priority_class", "'%s' is not a valid PriorityClass name" % priority)
    for option in ("worker_tolerations", "master_tolerations"):
        for toleration in params.get(option) or []:
            if not isinstance(toleration, dict):
                raise OptionError(option, "each toleration must be a dict (key, operator, value, effect)")
    return configs(params)


def digest(*configs_):
    return hashlib.sha256("".join(config_text(c) for c in configs_).encode("utf-8")).hexdigest()


# ---- workloads -----------------------------------------------------------------------------------------------


def _meta(name, component, namespace=None, cluster_owner=None):
    meta = {"name": name, "labels": owner_labels(APP_NAME, component, cluster_owner)}
    if namespace:
        meta["namespace"] = namespace
    return meta


def _container(name, image, program, resources, mounts, env):
    return {
        "name": name, "image": image, "imagePullPolicy": "IfNotPresent", "command": [program],
        "env": env, "ports": [{"name": "http", "containerPort": HTTP_PORT}],
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"}},
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "failureThreshold": 10},
        "resources": copy.deepcopy(resources), "securityContext": copy.deepcopy(SECURITY_CONTEXT),
        "volumeMounts": mounts,
    }


def _field_env(name, path):
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def _config_volume(name, key):
    return {"name": name, "configMap": {"name": name, "items": [{"key": key, "path": key}]}}


def _pod_spec(params, service_account, containers, volumes, tolerations, node_selector=None):
    spec = {"serviceAccountName": service_account, "enableServiceLinks": False, "containers": containers,
            "volumes": volumes, "tolerations": copy.deepcopy(tolerations)}
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if params.get("priority_class"):
        spec["priorityClassName"] = params["priority_class"]
    if params.get("image_pull_secrets"):
        spec["imagePullSecrets"] = [{"name": n} for n in params["image_pull_secrets"]]
    return spec


def _rbac(namespace, component, service_account, rules, cluster):
    kind = "ClusterRole" if cluster else "Role"
    name = "%s-%s" % (namespace, component) if cluster else component
    meta = _meta(name, component, cluster_owner=namespace) if cluster else _meta(name, component, namespace)
    binding_meta = copy.deepcopy(meta)
    return [
        dict({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta}, rules=rules),
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind + "Binding", "metadata": binding_meta,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}]},
    ]


def render(params, master_config=None, worker_config=None):
    """Every object of the deployment, in apply order (CRDs first; the namespace is the object set's)."""
    if master_config is None or worker_config is None:
        master_config, worker_config = validate(params)
    namespace = params.get("namespace") or NAMESPACE
    image = params.get("image") or "%s:%s" % (NFD_IMAGE_REPOSITORY, params.get("version") or NFD_VERSION)
    objects = crds(owner=namespace)
    for name in (MASTER_NAME, WORKER_NAME):
        objects.append({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(name, name, namespace)})
    # nfd-master: reads every NodeFeature, NodeFeatureRule and NodeFeatureGroup, writes node labels, annotations,
    # taints (metadata) and extended resources (status), and NodeFeatureGroup status. No leases: one replica, no
    # leader election; no namespaces: no NodeFeature namespace selector.
    objects += _rbac(namespace, MASTER_NAME, MASTER_NAME, [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch", "update"]},
        {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch", "update"]},
        {"apiGroups": [API_GROUP], "resources": ["nodefeatures", "nodefeaturerules", "nodefeaturegroups"],
         "verbs": ["get", "list", "watch"]},
        {"apiGroups": [API_GROUP], "resources": ["nodefeaturegroups/status"], "verbs": ["patch", "update"]},
    ], cluster=True)
    # nfd-worker: its node's NodeFeature in this namespace only, and its own pod (for the owner references).
    objects += _rbac(namespace, WORKER_NAME, WORKER_NAME, [
        {"apiGroups": [API_GROUP], "resources": ["nodefeatures"], "verbs": ["create", "get", "update", "delete"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
    ], cluster=False)
    objects.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(MASTER_NAME + "-conf", MASTER_NAME, namespace),
                    "data": {MASTER_CONFIG_KEY: config_text(master_config)}})
    objects.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(WORKER_NAME + "-conf", WORKER_NAME, namespace),
                    "data": {WORKER_CONFIG_KEY: config_text(worker_config)}})

    master = _container("master", image, MASTER_PROGRAM, MASTER_RESOURCES,
                        [{"name": MASTER_NAME + "-conf", "mountPath": CONFIG_DIR, "readOnly": True}],
                        [_field_env("NODE_NAME", "spec.nodeName")])
    master_tolerations = params.get("master_tolerations")
    objects.append(_workload("Deployment", MASTER_NAME, namespace, digest(master_config), _pod_spec(
        params, MASTER_NAME, [master], [_config_volume(MASTER_NAME + "-conf", MASTER_CONFIG_KEY)],
        MASTER_TOLERATIONS if master_tolerations is None else master_tolerations)))

    host = [("host-boot", "/boot", "/host-boot"), ("host-os-release", "/etc/os-release", "/host-etc/os-release"),
            ("host-sys", "/sys", "/host-sys"), ("host-usr-lib", "/usr/lib", "/host-usr/lib"),
            ("host-lib", "/lib", "/host-lib"), ("features-d", FEATURES_D, FEATURES_D)]
    mounts = [{"name": n, "mountPath": m, "readOnly": True} for n, _p, m in host]
    mounts.append({"name": WORKER_NAME + "-conf", "mountPath": CONFIG_DIR, "readOnly": True})
    volumes = [{"name": n, "hostPath": {"path": p}} for n, p, _m in host]
    volumes.append(_config_volume(WORKER_NAME + "-conf", WORKER_CONFIG_KEY))
    worker = _container("worker", image, WORKER_PROGRAM, WORKER_RESOURCES, mounts,
                        [_field_env("NODE_NAME", "spec.nodeName"), _field_env("POD_NAME", "metadata.name"),
                         _field_env("POD_UID", "metadata.uid")])
    spec = _pod_spec(params, WORKER_NAME, [worker], volumes, params.get("worker_tolerations") or [],
                     params.get("worker_node_selector"))
    spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    objects.append(_workload("DaemonSet", WORKER_NAME, namespace, digest(worker_config), spec))
    return objects


def _workload(kind, name, namespace, config_digest, pod_spec):
    selector = {LABEL_NAME: APP_NAME, LABEL_COMPONENT: name}
    spec = {"selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": owner_labels(APP_NAME, name),
                                      "annotations": {ANNOTATION_CONFIG_HASH: config_digest}},
                         "spec": pod_spec}}
    if kind == "Deployment":
        spec["replicas"] = 1
    else:
        spec["updateStrategy"] = {"type": "RollingUpdate"}
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": _meta(name, name, namespace), "spec": spec}


# What state=absent looks for, and what is pruned: (apiVersion, kind, namespaced), workloads first.
MANAGED_KINDS = (
    ("apps/v1", "DaemonSet", True),
    ("apps/v1", "Deployment", True),
    ("v1", "ConfigMap", True),
    ("rbac.authorization.k8s.io/v1", "RoleBinding", True),
    ("rbac.authorization.k8s.io/v1", "Role", True),
    ("v1", "ServiceAccount", True),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", False),
    ("rbac.authorization.k8s.io/v1", "ClusterRole", False),
    (CRD_API_VERSION, CRD_KIND, False),
)
