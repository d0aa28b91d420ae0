# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The NVIDIA device plugin (and GPU feature discovery) as plain Python data: its config file, validated with the
plugin's own rules, and the Kubernetes objects that run it. Pure functions: no API calls here."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import hashlib
import json
import re
import traceback

from ansible_collections.kubegpu.cluster.plugins.module_utils import _k8s

# The one place that names the device plugin release this collection deploys.
DEVICE_PLUGIN_VERSION = "v0.20.0"
DEVICE_PLUGIN_IMAGE_REPOSITORY = "nvcr.io/nvidia/k8s-device-plugin"
DEFAULT_NAMESPACE = "nvidia-device-plugin"
FIELD_MANAGER = "kubegpu.cluster"
APP_NAME = "nvidia-device-plugin"
PLUGIN_NAME = "nvidia-device-plugin-daemonset"
GFD_NAME = "gpu-feature-discovery"
CONFIGMAP_NAME = "nvidia-device-plugin-config"
CONFIG_KEY = "config.yaml"
CONFIG_DIR = "/config"
MPS_ROOT = "/run/nvidia/mps"

LABEL_NAME = "app.kubernetes.io/name"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_OWNER_NAMESPACE = "kubegpu.cluster/namespace"  # on cluster-scoped objects: the namespace of the deployment
ANNOTATION_CONFIG_HASH = "kubegpu.cluster/config-hash"
ANNOTATION_CREATED_NAMESPACE = "kubegpu.cluster/created-by"  # on a namespace the module created

MIG_STRATEGIES = ("none", "single", "mixed")
SHARING_STRATEGIES = ("none", "time-slicing", "mps")
DEVICE_LIST_STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")
DEVICE_ID_STRATEGIES = ("uuid", "index")
RESOURCE_PREFIX = "nvidia.com"
MAX_RESOURCE_NAME_LENGTH = 63

DEFAULT_NODE_SELECTOR = {"nvidia.com/gpu.present": "true"}
DEFAULT_TOLERATIONS = [
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "CriticalAddonsOnly", "operator": "Exists"},
]
DEFAULT_PRIORITY_CLASS = "system-node-critical"

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(r"^" + _DNS_LABEL + r"(\." + _DNS_LABEL + r")*$")
_DEVICE_INDEX = re.compile(r"^[0-9]+(:[0-9]+)?$")
_DEVICE_UUID = re.compile(r"^(GPU|MIG)-[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$")


class DevicePluginConfigError(Exception):
    """Options the device plugin would refuse (or that make no sense); names the option."""

    def __init__(self, option, message):
        self.option = option
        self.message = message
        super(DevicePluginConfigError, self).__init__("%s: %s" % (option, message))


def default_image(version=DEVICE_PLUGIN_VERSION):
    return "%s:%s" % (DEVICE_PLUGIN_IMAGE_REPOSITORY, version)


def resource_name(raw, option="sharing.resources[].name"):
    """The fully qualified resource name the plugin builds from ``raw`` (its NewResourceName), or an error."""
    if not isinstance(raw, str) or not raw:
        raise DevicePluginConfigError(option, "a resource name must be a non-empty string, got %r" % (raw,))
    name = raw if raw.startswith(RESOURCE_PREFIX + "/") else RESOURCE_PREFIX + "/" + raw
    if len(name) > MAX_RESOURCE_NAME_LENGTH:
        raise DevicePluginConfigError(option, "fully-qualified resource name must be %d characters or less: %s"
                                      % (MAX_RESOURCE_NAME_LENGTH, name))
    short = name.split("/", 1)[1]
    if not _DNS_SUBDOMAIN.match(short):
        raise DevicePluginConfigError(option, "'%s' is not a valid resource name (DNS subdomain: lower case "
                                              "letters, digits, '-' and '.')" % name)
    return name


def _devices(value, option):
    """``devices`` as the plugin accepts it: V(all), a count > 0, or a list of indexes / ``gpu:mig`` / UUIDs."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise DevicePluginConfigError(option, "must be 'all', a count > 0 or a list of GPU indexes or UUIDs")
    if isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
        if int(value) <= 0:
            raise DevicePluginConfigError(option, "a device count must be > 0, got %s" % value)
        return int(value)
    if isinstance(value, str):
        if value != "all":
            raise DevicePluginConfigError(option, "unknown value '%s' (use 'all', a count > 0 or a list)" % value)
        return value
    if isinstance(value, (list, tuple)):
        if not value:
            raise DevicePluginConfigError(option, "an empty device list selects nothing")
        out = []
        for item in value:
            text = str(item)
            if not (_DEVICE_INDEX.match(text) or _DEVICE_UUID.match(text)):
                raise DevicePluginConfigError(option, "'%s' is neither a GPU index, a 'gpu:mig' index nor a "
                                                      "GPU-/MIG- UUID" % text)
            out.append(text)
        return out
    raise DevicePluginConfigError(option, "must be 'all', a count > 0 or a list of GPU indexes or UUIDs")


def _choice(params, key, choices):
    value = params.get(key)
    if value is not None and value not in choices:
        raise DevicePluginConfigError(key, "unknown strategy '%s' (one of: %s)" % (value, ", ".join(choices)))
    return value


def build_config(params):
    """Validate the options with the plugin's rules and return ``config.yaml`` as data (the plugin's v1 schema).

    Raises :class:`DevicePluginConfigError` naming the first offending option.
    """
    mig = _choice(params, "mig_strategy", MIG_STRATEGIES) or "none"
    list_strategy = params.get("device_list_strategy") or ["envvar"]
    if isinstance(list_strategy, str):
        list_strategy = [list_strategy]
    for item in list_strategy:
        if item not in DEVICE_LIST_STRATEGIES:
            raise DevicePluginConfigError("device_list_strategy", "unknown strategy '%s' (one of: %s)"
                                          % (item, ", ".join(DEVICE_LIST_STRATEGIES)))
    id_strategy = _choice(params, "device_id_strategy", DEVICE_ID_STRATEGIES) or "uuid"
    fail_on_init = params.get("fail_on_init_error")
    flags = {
        "migStrategy": mig,
        "failOnInitError": True if fail_on_init is None else bool(fail_on_init),
        "nvidiaDriverRoot": params.get("nvidia_driver_root") or "/",
        "plugin": {
            "passDeviceSpecs": False,
            "deviceListStrategy": list(list_strategy),
            "deviceIDStrategy": id_strategy,
        },
    }
    config = {"version": "v1", "flags": flags}

    sharing = params.get("sharing") or {}
    strategy = sharing.get("strategy") or "none"
    if strategy not in SHARING_STRATEGIES:
        raise DevicePluginConfigError("sharing.strategy", "unknown strategy '%s' (one of: %s)"
                                      % (strategy, ", ".join(SHARING_STRATEGIES)))
    if strategy != "none":
        if strategy == "mps" and mig == "mixed":
            raise DevicePluginConfigError("sharing.strategy", "MPS is not supported with mig_strategy=mixed "
                                                              "(the plugin says: using --mig-strategy=mixed is not "
                                                              "supported with MPS)")
        default_replicas = sharing.get("replicas")
        wanted = sharing.get("resources") or [{"name": "nvidia.com/gpu"}]
        resources = []
        for index, res in enumerate(wanted):
            where = "sharing.resources[%d]" % index if sharing.get("resources") else "sharing"
            name = resource_name(res.get("name") or "nvidia.com/gpu", where + ".name")
            replicas = res.get("replicas") if res.get("replicas") is not None else default_replicas
            if replicas is None:
                raise DevicePluginConfigError(where + ".replicas", "is required for sharing strategy '%s'" % strategy)
            if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 2:
                raise DevicePluginConfigError(
                    where + ".replicas",
                    "number of replicas must be >= 2, got %r (the plugin refuses it and advertises nothing)" % (replicas,))
            entry = {"name": name, "replicas": replicas}
            devices = _devices(res.get("devices") if res.get("devices") is not None else sharing.get("devices"),
                               where + ".devices")
            if devices is not None:
                entry["devices"] = devices
            resources.append(entry)
        section = {"renameByDefault": bool(sharing.get("rename_by_default")), "resources": resources}
        fail_gt_one = sharing.get("fail_requests_greater_than_one")
        if fail_gt_one is not None:
            section["failRequestsGreaterThanOne"] = bool(fail_gt_one)
        elif strategy == "mps":
            section["failRequestsGreaterThanOne"] = True  # what the plugin forces for MPS
        config["sharing"] = {"timeSlicing" if strategy == "time-slicing" else "mps": section}
        if strategy == "mps":
            flags["mpsRoot"] = MPS_ROOT
    if params.get("gfd"):
        flags["useNodeFeatureAPI"] = True
        flags["gfd"] = {"oneshot": False, "noTimestamp": False, "sleepInterval": "60s"}
    return config


def validate(params):
    """Check every option that does not end up in the config file too; raises :class:`DevicePluginConfigError`."""
    for key in ("namespace", "runtime_class"):
        value = params.get(key)
        if value and (len(value) > 63 or not re.match(r"^" + _DNS_LABEL + r"$", value)) and key == "namespace":
            raise DevicePluginConfigError(key, "'%s' is not a valid namespace name (DNS label)" % value)
        if value and key == "runtime_class" and (len(value) > 253 or not _DNS_SUBDOMAIN.match(value)):
            raise DevicePluginConfigError(key, "'%s' is not a valid RuntimeClass name (DNS subdomain)" % value)
    for name in params.get("image_pull_secrets") or []:
        if not _DNS_SUBDOMAIN.match(name or ""):
            raise DevicePluginConfigError("image_pull_secrets", "'%s' is not a valid Secret name" % name)
    expected = params.get("expected") or {}
    for node, resources in expected.items():
        if not isinstance(resources, dict):
            raise DevicePluginConfigError("expected", "node '%s' must map resource names to counts" % node)
        for res, count in resources.items():
            resource_name(res, "expected.%s" % node)
            try:
                if int(count) < 0:
                    raise ValueError(count)
            except (TypeError, ValueError):
                raise DevicePluginConfigError("expected", "node '%s' resource '%s': count must be an integer >= 0, "
                                                          "got %r" % (node, res, count))
    return build_config(params)


def config_yaml(config):
    """The config file text. JSON is valid YAML, and sorted keys make it (and its hash) deterministic."""
    return json.dumps(config, indent=2, sort_keys=True) + "\n"


def config_hash(config):
    return hashlib.sha256(config_yaml(config).encode("utf-8")).hexdigest()


def expected_counts(expected):
    """``expected`` with fully qualified resource names and int counts."""
    return dict((node, dict((resource_name(r), int(c)) for r, c in (res or {}).items()))
                for node, res in (expected or {}).items())


def _labels(component, namespace=None):
    labels = {LABEL_NAME: APP_NAME, LABEL_MANAGED_BY: FIELD_MANAGER, LABEL_COMPONENT: component}
    if namespace:
        labels[LABEL_OWNER_NAMESPACE] = namespace
    return labels


def _meta(name, component, namespace=None, cluster_owner=None):
    meta = {"name": name, "labels": _labels(component, cluster_owner)}
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
    labels = _labels(component)
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
    """Every object the deployment needs, in apply order, as plain dicts (no namespace object: see _k8s)."""
    config = config if config is not None else build_config(params)
    namespace = params.get("namespace") or DEFAULT_NAMESPACE
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
            "handler": "nvidia",
        })

    mounts = [{"name": "device-plugin", "mountPath": "/var/lib/kubelet/device-plugins"},
              {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}]
    volumes = [{"name": "device-plugin", "hostPath": {"path": "/var/lib/kubelet/device-plugins", "type": "Directory"}},
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


def namespace_object(name, created_by_module):
    meta = {"name": name, "labels": {LABEL_MANAGED_BY: FIELD_MANAGER}}
    if created_by_module:
        meta["annotations"] = {ANNOTATION_CREATED_NAMESPACE: FIELD_MANAGER}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


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


def managed_selector(namespace=None):
    """The label selector of what the module manages (cluster-scoped ones: for the deployment in ``namespace``)."""
    sel = "%s=%s" % (LABEL_MANAGED_BY, FIELD_MANAGER)
    if namespace:
        sel += ",%s=%s" % (LABEL_OWNER_NAMESPACE, namespace)
    return sel


def pod_selector():
    return "%s=%s,%s=%s" % (LABEL_NAME, APP_NAME, LABEL_MANAGED_BY, FIELD_MANAGER)


NVML_HINT = ("Known causes: the plugin pod cannot load NVML ('Failed to initialize NVML: could not load NVML library') "
             "when the NVIDIA runtime is not the container runtime's default and no RuntimeClass is used (set "
             "runtime_class, or make the runtime the default with kubegpu.cluster.nvidia_runtime_config); no "
             "nvidia.com/gpu.present=true label on the node (node_selector); an invalid sharing config; unhealthy "
             "devices lower allocatable.")


# --------------------------------------------------------------------------- running it against a cluster
# (the only part that talks to the API, through the client passed in; see _k8s.Client)


def _quantity(value):
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


def advertised(node):
    """What a node advertises: its ``nvidia.com/*`` allocatable counts."""
    alloc = ((node or {}).get("status") or {}).get("allocatable") or {}
    return dict((k, _quantity(v)) for k, v in sorted(alloc.items()) if k.startswith(RESOURCE_PREFIX + "/"))


def short_nodes(nodes, expected):
    """``{node: (advertised, expected)}`` for every node in ``expected`` that does not advertise those counts."""
    out = {}
    for name, want in expected.items():
        have = advertised(nodes.get(name))
        if name not in nodes or any(have.get(res, 0) != count for res, count in want.items()):
            out[name] = (have if name in nodes else None, want)
    return out


def container_reasons(pod):
    """Why the pod's containers are not running (``CrashLoopBackOff``, ``ErrImagePull``, a last exit with its message),
    as text to append to its phase; empty when they run."""
    reasons = []
    for status in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        state = status.get("state") or {}
        waiting = state.get("waiting") or {}
        last = ((status.get("lastState") or {}).get("terminated")) or state.get("terminated") or {}
        if waiting.get("reason"):
            reasons.append("%s: %s" % (waiting["reason"], waiting.get("message") or "waiting"))
        if last.get("exitCode"):
            reasons.append("last exit %s%s" % (last["exitCode"], ": " + last["message"].strip()[:300] if last.get("message") else ""))
    return ", " + "; ".join(reasons) if reasons else ""


def rolled_out(daemonset):
    """Whether a DaemonSet's rollout is complete (as ``kubectl rollout status`` judges it)."""
    if not daemonset:
        return False
    status = daemonset.get("status") or {}
    desired = status.get("desiredNumberScheduled", 0)
    return (status.get("observedGeneration", 0) >= daemonset["metadata"].get("generation", 1)
            and status.get("updatedNumberScheduled", 0) == desired
            and status.get("numberAvailable", 0) == desired)


def failure(exc):
    """``fail_json`` arguments for an exception from :func:`run`: the message, plus a traceback when unexpected."""
    if isinstance(exc, DevicePluginConfigError):
        return dict(msg=str(exc), option=exc.option)
    if isinstance(exc, _k8s.K8sError):
        details = dict((k, v) for k, v in exc.details.items() if k != "last")
        return dict(msg=exc.message, **details)
    return dict(msg="unexpected error: %s: %s" % (type(exc).__name__, exc), exception=traceback.format_exc())


class Deployment(object):
    """One run of the module: ``client`` is a :class:`_k8s.Client` (or a stand-in with the same verbs)."""

    def __init__(self, params, client, check_mode=False, want_diff=False):
        self.params = params
        self.client = client
        self.check_mode = check_mode
        self.want_diff = want_diff
        self.namespace = params.get("namespace") or DEFAULT_NAMESPACE
        self.objects = []
        self.diff = {"before": {}, "after": {}}

    def _record(self, obj, action, before=None, after=None):
        self.objects.append({"kind": obj["kind"], "name": obj["metadata"]["name"],
                             "namespace": obj["metadata"].get("namespace"), "action": action})
        if action != "unchanged" and self.want_diff:
            name = _k8s.key(obj)
            self.diff["before"][name] = _k8s.normalize(before)
            self.diff["after"][name] = _k8s.normalize(after)

    def present(self, config):
        client, ns = self.client, self.namespace
        live_ns = client.get("v1", "Namespace", ns)
        ns_missing = live_ns is None
        ours = ns_missing or ANNOTATION_CREATED_NAMESPACE in ((live_ns.get("metadata") or {}).get("annotations") or {})
        ns_obj = namespace_object(ns, created_by_module=True)
        if ours:
            action, before, after = client.apply(ns_obj, dry_run=self.check_mode)
            self._record(ns_obj, action, before, after)
        else:
            self._record(ns_obj, "unchanged")  # someone else's namespace: used, never changed nor deleted
        rendered = render(self.params, config)
        applied = {}
        for obj in rendered:
            meta = obj["metadata"]
            if obj["kind"] == "RuntimeClass":
                live = client.get(obj["apiVersion"], obj["kind"], meta["name"])
                if live is not None and (live["metadata"].get("labels") or {}).get(LABEL_MANAGED_BY) != FIELD_MANAGER:
                    self._record(obj, "unchanged")  # an existing RuntimeClass (the operator's, a person's): used as is
                    continue
            if self.check_mode and ns_missing and "namespace" in meta:
                self._record(obj, "created", None, obj)  # a dry run cannot create in a namespace that is not there
                continue
            action, before, after = client.apply(obj, dry_run=self.check_mode)
            applied[_k8s.key(obj)] = after
            self._record(obj, action, before, after)
        self._prune(set(_k8s.key(o) for o in rendered))
        return applied

    def _managed(self):
        """Every object the module manages for this namespace, from their labels."""
        found = []
        for api_version, kind, namespaced in MANAGED_KINDS:
            if namespaced:
                items = self.client.list(api_version, kind, namespace=self.namespace, label_selector=managed_selector())
            else:
                items = self.client.list(api_version, kind, label_selector=managed_selector(self.namespace))
            for item in items:
                if (item.get("metadata") or {}).get("deletionTimestamp"):
                    continue  # already going
                item.setdefault("apiVersion", api_version)
                item.setdefault("kind", kind)
                found.append(item)
        return found

    def _delete(self, obj):
        meta = obj["metadata"]
        if self.client.delete(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"), dry_run=self.check_mode):
            self._record(obj, "deleted", obj, None)
            return True
        return False

    def _prune(self, keep):
        """Remove what an earlier run created and this one no longer renders (GFD turned off, another RuntimeClass)."""
        for obj in self._managed():
            if _k8s.key(obj) not in keep:
                self._delete(obj)

    def absent(self):
        deleted = [obj for obj in self._managed() if self._delete(obj)]
        live_ns = self.client.get("v1", "Namespace", self.namespace)
        ns_meta = (live_ns or {}).get("metadata") or {}
        if live_ns and not ns_meta.get("deletionTimestamp") and ANNOTATION_CREATED_NAMESPACE in (ns_meta.get("annotations") or {}):
            if self._delete(dict(live_ns, apiVersion="v1", kind="Namespace")):
                deleted.append(live_ns)
        if deleted and self.params.get("wait") and not self.check_mode:
            try:
                self.client.wait("v1", "Pod", lambda pods: not pods, self.params.get("wait_timeout") or 300,
                                 namespace=self.namespace, label_selector=pod_selector())
            except _k8s.WaitTimeout as exc:
                raise _k8s.K8sError("timed out after %ss waiting for the device plugin pods in %s to go: %s still there"
                                    % (self.params.get("wait_timeout"), self.namespace,
                                       ", ".join(sorted(exc.details.get("last") or {}))))

    def wait_rollout(self, applied):
        timeout = self.params.get("wait_timeout") or 300
        deadline = self.client.clock() + timeout
        for obj_key, obj in applied.items():
            if obj.get("kind") != "DaemonSet":
                continue
            name = obj["metadata"]["name"]
            try:
                self.client.wait("apps/v1", "DaemonSet", lambda found, n=name: rolled_out(found.get(n)),
                                 max(1, deadline - self.client.clock()), namespace=self.namespace,
                                 field_selector="metadata.name=%s" % name)
            except _k8s.WaitTimeout as exc:
                status = ((exc.details.get("last") or {}).get(name) or {}).get("status") or {}
                raise _k8s.K8sError(
                    "timed out after %ss waiting for the rollout of %s: desired %s, updated %s, available %s. %s. %s"
                    % (timeout, obj_key, status.get("desiredNumberScheduled", 0), status.get("updatedNumberScheduled", 0),
                       status.get("numberAvailable", 0), self._pods_summary(None), NVML_HINT), rollout=status)
        return deadline

    def _pods_summary(self, node):
        pods = self.client.list("v1", "Pod", namespace=self.namespace,
                                label_selector=pod_selector() + ",%s=device-plugin" % LABEL_COMPONENT,
                                field_selector="spec.nodeName=%s" % node if node else None)
        if not pods:
            where = " on the node (check node_selector, tolerations and the node's labels)" if node else ""
            return "no device plugin pod%s" % where
        parts = []
        for pod in pods:
            name = pod["metadata"]["name"]
            events = self.client.list("v1", "Event", namespace=self.namespace,
                                      field_selector="involvedObject.name=%s" % name)
            events.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
            last = "; ".join("%s: %s" % (e.get("reason"), e.get("message")) for e in events[-3:]) or "no events"
            parts.append("pod %s on %s is %s%s (last events: %s)" % (name, pod["spec"].get("nodeName"),
                                                                     (pod.get("status") or {}).get("phase"),
                                                                     container_reasons(pod), last))
        return "; ".join(parts)

    def wait_nodes(self, expected, deadline):
        if not expected:
            return {}
        try:
            nodes = self.client.wait("v1", "Node", lambda found: not short_nodes(found, expected),
                                     max(1, deadline - self.client.clock()))
        except _k8s.WaitTimeout as exc:
            nodes = exc.details.get("last") or {}
            lines = []
            for name, (have, want) in sorted(short_nodes(nodes, expected).items()):
                if have is None:
                    lines.append("node %s does not exist" % name)
                    continue
                lines.append("node %s advertises %s, expected %s; %s"
                             % (name, have or "no nvidia.com resources", want, self._pods_summary(name)))
            raise _k8s.K8sError("timed out after %ss waiting for nodes to advertise the expected GPU resources: %s. %s"
                                % (self.params.get("wait_timeout"), " | ".join(lines), NVML_HINT),
                                resources=dict((n, advertised(nodes.get(n))) for n in expected))
        return dict((n, advertised(nodes.get(n))) for n in expected)


def run(params, check_mode=False, want_diff=False, client=None, client_factory=None):
    """The module's work: validate (before any API call), apply or remove, wait. Returns the result dict."""
    config = validate(params)
    expected = expected_counts(params.get("expected"))
    if client is None:
        client = (client_factory or _default_client)(params)
    deployment = Deployment(params, client, check_mode=check_mode, want_diff=want_diff)
    result = {"config": config, "config_hash": config_hash(config), "namespace": deployment.namespace,
              "resources": {}}
    if params.get("state") == "absent":
        deployment.absent()
    else:
        applied = deployment.present(config)
        if params.get("wait", True) and not check_mode:
            deadline = deployment.wait_rollout(applied)
            result["resources"] = deployment.wait_nodes(expected, deadline)
    result["objects"] = deployment.objects
    result["changed"] = any(o["action"] != "unchanged" for o in deployment.objects)
    if want_diff:
        result["diff"] = deployment.diff
    return result


def _default_client(params):
    return _k8s.Client(_k8s.connect(params.get("kubeconfig"), params.get("context")), field_manager=FIELD_MANAGER)


def _fact_devices(gpu):
    """The healthy GPUs of a ``gpu`` fact (the plugin only advertises devices NVML answers for)."""
    return [d for d in (gpu or {}).get("devices") or [] if d.get("uuid") or d.get("name")]


def expected_from_fact(config, gpu, node="node"):
    """What a node with the ``gpu`` fact advertises under ``config`` (:func:`build_config`'s result), as
    ``{resource: count}``, following the plugin's rules; ``{}`` for a node without GPUs. Raises
    :class:`DevicePluginConfigError` for a node the plugin would refuse (mixed MIG layouts with ``single``, MPS on MIG
    devices), naming the node."""
    gpu = gpu or {}
    if not gpu.get("present") or not gpu.get("count"):
        return {}
    flags = config.get("flags") or {}
    mig_strategy = flags.get("migStrategy") or "none"
    devices = _fact_devices(gpu)
    counts = {}

    def add(name, number=1):
        counts[name] = counts.get(name, 0) + number

    mig_on = [d for d in devices if ((d.get("mig") or {}).get("current"))]
    if mig_strategy != "none":
        for device in mig_on:
            if not (device.get("mig") or {}).get("devices"):
                raise DevicePluginConfigError("mig_strategy", "node %s: GPU %s has MIG mode on but no MIG devices, which "
                                                              "the plugin refuses: create MIG devices or turn MIG off"
                                              % (node, device.get("index", "?")))
    if mig_strategy == "none" or not mig_on:
        add(RESOURCE_PREFIX + "/gpu", len(devices))
    elif mig_strategy == "single":
        if len(mig_on) != len(devices):
            raise DevicePluginConfigError("mig_strategy", "node %s mixes GPUs with MIG on and off, which the single "
                                                          "strategy refuses: use mixed" % node)
        profiles = set(m.get("profile") for d in mig_on for m in (d.get("mig") or {}).get("devices") or [])
        if len(profiles) > 1:
            raise DevicePluginConfigError("mig_strategy", "node %s has MIG devices of several profiles (%s), which the "
                                                          "single strategy refuses: use mixed"
                                          % (node, ", ".join(sorted(profiles))))
        add(RESOURCE_PREFIX + "/gpu", sum(len((d.get("mig") or {}).get("devices") or []) for d in mig_on))
    else:
        for device in devices:
            mig = device.get("mig") or {}
            if mig.get("current"):
                for part in mig.get("devices") or []:
                    add("%s/mig-%s" % (RESOURCE_PREFIX, part.get("profile")))
            else:
                add(RESOURCE_PREFIX + "/gpu")
    counts = dict((k, v) for k, v in counts.items() if v > 0)
    sharing = config.get("sharing") or {}
    for strategy, section in sharing.items():
        if strategy == "mps" and mig_on and mig_strategy != "none":
            raise DevicePluginConfigError("sharing.strategy", "node %s has MIG devices, and MPS sharing is not "
                                                              "supported for MIG devices" % node)
        shared = {}
        for res in section.get("resources") or []:
            have = counts.pop(res["name"], 0)
            if not have:
                continue
            target = res["name"] + ".shared" if section.get("renameByDefault") else res["name"]
            shared[target] = shared.get(target, 0) + have * res["replicas"]
        counts.update(shared)
    return dict(sorted(counts.items()))


def expected_from_facts(params, facts):
    """``{node: {resource: count}}`` for every node of ``facts`` (node name to ``gpu`` fact) that has GPUs."""
    config = build_config(params)
    out = {}
    for node, gpu in sorted((facts or {}).items()):
        counts = expected_from_fact(config, gpu, node)
        if counts:
            out[node] = counts
    return out
