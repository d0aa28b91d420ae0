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
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import health
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.constants import (
    APP_NAME, CDI_LIST_STRATEGIES, CDI_ROOT, CONFIG_DIR, CONFIG_KEY, CONFIGMAP_NAME, CONTAINER_DRIVER_ROOT,
    DEFAULT_CONFIG_NAME, DEFAULT_DRIVER_ROOT, DEFAULT_NODE_SELECTOR,
    DEFAULT_PRIORITY_CLASS, DEFAULT_TOLERATIONS, DEPLOY_LABEL_ON, DEVICE_PLUGIN_NAMESPACE, DEVICE_PLUGIN_VERSION,
    GFD_NAME, KUBELET_DEVICE_PLUGINS, LABEL_DEPLOY_DEVICE_PLUGIN, LABEL_DEPLOY_GFD, LABEL_DEVICE_PLUGIN_CONFIG,
    LABEL_MPS_CAPABLE, LABEL_PLUGIN_CONFIG, MPS_DAEMON_NAME, MPS_ROOT, PLUGIN_NAME, RUNTIME_NAME, default_image,
)
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.plugin_config import (
    config_hash, config_key, config_yaml, max_unavailable, named_configs,
)


def _meta(name, component, namespace=None, cluster_owner=None):
    meta = {"name": name, "labels": owner_labels(APP_NAME, component, cluster_owner)}
    if namespace:
        meta["namespace"] = namespace
    return meta


_SECURITY_CONTEXT = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
# The MPS control daemon sets the GPUs' compute mode and mounts its shm: the chart runs it privileged
# (deployments/helm/nvidia-device-plugin/templates/daemonset-mps-control-daemon.yml).
_PRIVILEGED = {"privileged": True}


class _Placement(object):
    """Where one config's pods run: the user's node selector, the operand's deploy label (so NVIDIA's MIG manager can
    pause them), and the config label (``nvidia.com/device-plugin.config``): a named config's nodes carry its name,
    the default config runs on every node without the label (or naming the default).

    The default config's DaemonSets are the same objects whether named configs exist or not: the same name (the one
    earlier releases used), selector and pod template, node affinity included. So adding the first named config, or
    removing the last, changes no pod of a node whose config stayed the default (issue 26: the default DaemonSet was
    deleted and created again under another name, restarting the plugin on every GPU node). Their selector also
    matches the named configs' pods, which carry one more label; the DaemonSet controller leaves pods another
    controller owns alone (pkg/controller/daemon/daemon_controller.go, getDaemonPods through ClaimPods)."""

    def __init__(self, params, name, names):
        self.params = params
        self.name = name
        self.multi = len(names) > 1

    def node_selector(self, deploy_label, extra=None):
        selector = dict(self.params.get("node_selector") if self.params.get("node_selector") is not None
                        else DEFAULT_NODE_SELECTOR)
        if self.params.get("deploy_labels", True):
            selector[deploy_label] = DEPLOY_LABEL_ON
        if self.name != DEFAULT_CONFIG_NAME:
            selector[LABEL_DEVICE_PLUGIN_CONFIG] = self.name
        selector.update(extra or {})
        return selector

    def affinity(self):
        if self.name != DEFAULT_CONFIG_NAME:
            return None
        # A node without the config label, or one that names the default. Not "NotIn <the named configs>": that list
        # is in the default DaemonSets' pod template, so adding or removing a named config for one node would roll the
        # plugin and GFD on every other node.
        return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": LABEL_DEVICE_PLUGIN_CONFIG, "operator": "DoesNotExist"}]},
            {"matchExpressions": [{"key": LABEL_DEVICE_PLUGIN_CONFIG, "operator": "In",
                                   "values": [DEFAULT_CONFIG_NAME]}]}]}}}

    def object_name(self, base, single=None):
        """``<base>-<config>`` for a named config; the default config's is ``single`` (or ``base``), with or without
        named configs beside it."""
        return (single or base) if self.name == DEFAULT_CONFIG_NAME else "%s-%s" % (base, self.name)

    def labels(self):
        return {} if self.name == DEFAULT_CONFIG_NAME else {LABEL_PLUGIN_CONFIG: self.name}


def _pod_spec(params, placement, deploy_label, containers, volumes, service_account=None, extra_selector=None,
              init_containers=None):
    spec = {
        "priorityClassName": params.get("priority_class") if params.get("priority_class") is not None
        else DEFAULT_PRIORITY_CLASS,
        "tolerations": copy.deepcopy(params.get("tolerations") if params.get("tolerations") is not None
                                     else DEFAULT_TOLERATIONS),
        "nodeSelector": placement.node_selector(deploy_label, extra_selector),
        "containers": containers,
        "volumes": volumes,
    }
    affinity = placement.affinity()
    if affinity:
        spec["affinity"] = affinity
    if init_containers:
        spec["initContainers"] = init_containers
    if not spec["priorityClassName"]:
        del spec["priorityClassName"]
    if params.get("runtime_class"):
        spec["runtimeClassName"] = params["runtime_class"]
    if params.get("image_pull_secrets"):
        spec["imagePullSecrets"] = [{"name": n} for n in params["image_pull_secrets"]]
    if service_account:
        spec["serviceAccountName"] = service_account
    return spec


def _daemonset(name, component, namespace, placement, pod_spec, digest):
    labels = dict(owner_labels(APP_NAME, component), **placement.labels())
    selector = dict({LABEL_NAME: APP_NAME, LABEL_COMPONENT: component}, **placement.labels())
    # NVIDIA's chart: values.yaml updateStrategy {type: RollingUpdate}, which Kubernetes completes with maxUnavailable 1
    # (one node's plugin at a time: about 20 minutes for 2,000 kwok nodes here); max_unavailable widens the step
    strategy = {"type": "RollingUpdate"}
    if placement.params.get("max_unavailable") is not None:
        strategy["rollingUpdate"] = {"maxUnavailable": max_unavailable(placement.params["max_unavailable"])}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": _meta(name, component, namespace),
        "spec": {
            "selector": {"matchLabels": selector},
            "updateStrategy": strategy,
            "template": {
                "metadata": {"labels": labels, "annotations": {ANNOTATION_CONFIG_HASH: digest}},
                "spec": pod_spec,
            },
        },
    }


def _config_volume(name):
    """The ConfigMap's key of config ``name``, seen by every pod as ``/config/config.yaml``."""
    return {"name": "config", "configMap": {"name": CONFIGMAP_NAME,
                                            "items": [{"key": config_key(name), "path": CONFIG_KEY}]}}


_CONFIG_MOUNT = {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}
_CONFIG_ENV = {"name": "CONFIG_FILE", "value": "%s/%s" % (CONFIG_DIR, CONFIG_KEY)}
# MPS: the root (pipes, logs) and its shm, as the chart mounts them in the plugin and the daemon
_MPS_VOLUMES = [{"name": "mps-root", "hostPath": {"path": MPS_ROOT, "type": "DirectoryOrCreate"}},
                {"name": "mps-shm", "hostPath": {"path": MPS_ROOT + "/shm"}}]
_MPS_MOUNTS = [{"name": "mps-shm", "mountPath": "/dev/shm"}, {"name": "mps-root", "mountPath": "/mps"}]


def _strategy_parts(config):
    """What the plugin container of a config needs beyond the kubelet's socket directory and the config, as NVIDIA's
    chart gives it (deployments/helm/nvidia-device-plugin/templates/daemonset-device-plugin.yml and _helpers.tpl):
    ``(mounts, volumes, env, security context)``.

    - A CDI device list strategy (cdi-annotations, cdi-cri): the host's ``/var/run/cdi``, where the plugin writes the
      CDI spec of its devices and the runtime reads it, and the driver root (``flags.nvidiaDriverRoot``, ``/`` by
      default) read-only at ``/driver-root``, from which the plugin generates that spec. Without them the plugin's
      spec never reaches the runtime, and a pod's CDI devices cannot be resolved.
    - A MIG strategy other than none: ``NVIDIA_MIG_MONITOR_DEVICES=all`` (the chart's addMigMonitorDevices).
    - A MIG strategy other than none, or the volume-mounts strategy: the capability SYS_ADMIN, in the chart's own
      security context (requiresCapSysAdmin) in place of the hardened one."""
    flags = config.get("flags") or {}
    plugin = flags.get("plugin") or {}
    strategies = plugin.get("deviceListStrategy") or []
    strategies = [strategies] if isinstance(strategies, str) else list(strategies)
    mig = flags.get("migStrategy") not in (None, "none")
    mounts, volumes, env = [], [], []
    if any(s in CDI_LIST_STRATEGIES for s in strategies):
        mounts += [{"name": "driver-root", "mountPath": plugin.get("containerDriverRoot") or CONTAINER_DRIVER_ROOT,
                    "readOnly": True},
                   {"name": "cdi-root", "mountPath": CDI_ROOT}]
        volumes += [{"name": "driver-root", "hostPath": {"path": flags.get("nvidiaDriverRoot") or DEFAULT_DRIVER_ROOT,
                                                         "type": "Directory"}},
                    {"name": "cdi-root", "hostPath": {"path": CDI_ROOT, "type": "DirectoryOrCreate"}}]
    if mig:
        env.append({"name": "NVIDIA_MIG_MONITOR_DEVICES", "value": "all"})
    security = ({"capabilities": {"add": ["SYS_ADMIN"]}} if mig or "volume-mounts" in strategies
                else copy.deepcopy(_SECURITY_CONTEXT))
    return mounts, volumes, env, security


def render(params, configs=None):
    """Every object the deployment needs, in apply order, as plain dicts (the namespace is the object set's):
    ``configs`` is :func:`plugin_config.named_configs`' list, each config with its own DaemonSets."""
    configs = configs if configs is not None else named_configs(params)
    names = [name for name, _config in configs]
    namespace = params.get("namespace") or DEVICE_PLUGIN_NAMESPACE
    version = params.get("version") or DEVICE_PLUGIN_VERSION
    image = params.get("image") or default_image(version)
    objects = [{
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(CONFIGMAP_NAME, "config", namespace),
        "data": dict((config_key(name), config_yaml(config)) for name, config in configs),
    }]
    if params.get("runtime_class"):
        objects.append({
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": _meta(params["runtime_class"], "runtime-class", cluster_owner=namespace),
            "handler": RUNTIME_NAME,
        })
    for name, config in configs:
        placement = _Placement(params, name, names)
        digest = config_hash(config)
        mps = "mps" in (config.get("sharing") or {})
        mounts = [{"name": "device-plugin", "mountPath": KUBELET_DEVICE_PLUGINS}, dict(_CONFIG_MOUNT)]
        volumes = [{"name": "device-plugin", "hostPath": {"path": KUBELET_DEVICE_PLUGINS, "type": "Directory"}},
                   _config_volume(name)]
        if mps:
            mounts.extend(copy.deepcopy(_MPS_MOUNTS))
            volumes.extend(copy.deepcopy(_MPS_VOLUMES))
        more_mounts, more_volumes, more_env, security = _strategy_parts(config)
        mounts.extend(more_mounts)
        volumes.extend(more_volumes)
        plugin = {
            "name": "nvidia-device-plugin-ctr",
            "image": image,
            "env": [dict(_CONFIG_ENV)] + more_env + health.env(params.get("health_checks")),
            "securityContext": security,
            "volumeMounts": mounts,
        }
        objects.append(_daemonset(placement.object_name(APP_NAME, PLUGIN_NAME), "device-plugin", namespace, placement,
                                  _pod_spec(params, placement, LABEL_DEPLOY_DEVICE_PLUGIN, [plugin], volumes), digest))
        if mps:
            objects.append(_mps_daemon(params, placement, namespace, image, config, digest))
    if params.get("gfd"):
        objects.extend(_gfd_objects(params, namespace, image, configs))
    return objects


def _mps_daemon(params, placement, namespace, image, config, digest):
    """NVIDIA's MPS control daemon for a config that shares by MPS, as the plugin's Helm chart runs it: an init
    container that mounts the shm under the MPS root, the daemon privileged, only where GFD (or our labels) says
    ``nvidia.com/mps.capable=true`` (templates/daemonset-mps-control-daemon.yml). The plugin advertises MPS replicas
    only once this daemon answers on its pipe under the MPS root."""
    env = [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}, dict(_CONFIG_ENV),
           {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
           {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"}]
    if (config.get("flags") or {}).get("migStrategy", "none") != "none":
        env.append({"name": "NVIDIA_MIG_MONITOR_DEVICES", "value": "all"})
    init = {"name": "mps-control-daemon-mounts", "image": image, "command": ["mps-control-daemon", "mount-shm"],
            "securityContext": dict(_PRIVILEGED),
            "volumeMounts": [{"name": "mps-root", "mountPath": "/mps", "mountPropagation": "Bidirectional"}]}
    daemon = {"name": "mps-control-daemon-ctr", "image": image, "command": ["mps-control-daemon"], "env": env,
              "securityContext": dict(_PRIVILEGED),
              "volumeMounts": copy.deepcopy(_MPS_MOUNTS) + [dict(_CONFIG_MOUNT)]}
    volumes = copy.deepcopy(_MPS_VOLUMES) + [_config_volume(placement.name)]
    spec = _pod_spec(params, placement, LABEL_DEPLOY_DEVICE_PLUGIN, [daemon], volumes,
                     extra_selector={LABEL_MPS_CAPABLE: "true"}, init_containers=[init])
    return _daemonset(placement.object_name(MPS_DAEMON_NAME), "mps-control-daemon", namespace, placement, spec, digest)


def _gfd_objects(params, namespace, image, configs):
    """GFD: its ServiceAccount, least-privilege RBAC and one DaemonSet per config (GFD labels sharing from the
    config it reads).

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
    names = [name for name, _config in configs]
    for name, config in configs:
        placement = _Placement(params, name, names)
        container = {
            "name": "gpu-feature-discovery-ctr",
            "image": image,
            "command": ["gpu-feature-discovery"],
            "env": [
                dict(_CONFIG_ENV),
                {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            ],
            "securityContext": copy.deepcopy(_SECURITY_CONTEXT),
            "volumeMounts": [dict(_CONFIG_MOUNT), {"name": "host-sys", "mountPath": "/sys", "readOnly": True}],
        }
        volumes = [_config_volume(name), {"name": "host-sys", "hostPath": {"path": "/sys", "type": "Directory"}}]
        objects.append(_daemonset(placement.object_name(GFD_NAME), "gpu-feature-discovery", namespace, placement,
                                  _pod_spec(params, placement, LABEL_DEPLOY_GFD, [container], volumes,
                                            service_account=sa), config_hash(config)))
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
