# SPDX-License-Identifier: GPL-3.0-or-later
"""Node feature discovery (NFD v0.19) and GPU feature discovery in the device-manager simulator.

Only where the machinery is present, the way it works for real (kubernetes-sigs/node-feature-discovery):

* nfd-worker: a pod with a container whose command (or first argument) is ``nfd-worker``, Running on node X, writes
  the NodeFeature ``X`` in its namespace (label ``nfd.node.kubernetes.io/node-name=X``, owner references to its pod and
  DaemonSet, so Kubernetes' garbage collector deletes it with them) with X's PCI devices: ``pci.device`` instances and
  the labels ``pci-<fields>.present`` (source/pci/pci.go: the devices whose class starts with an entry of
  ``sources.pci.deviceClassWhitelist``, default ``03``, ``0b40``, ``12``; ``deviceLabelFields`` joined with ``_`` in
  the order class, vendor, device, subsystem_vendor, subsystem_device, default class and vendor). Its config file is
  ``-config`` or ``/etc/kubernetes/node-feature-discovery/nfd-worker.conf``, followed to its ConfigMap as
  ``podconfig`` follows the plugin's.
* GFD: see ``gfd.py``; its NodeFeature is ``nvidia-features-for-X``.
* nfd-master: a pod whose container runs ``nfd-master``, Running anywhere, turns the NodeFeature objects of each node
  into labels (pkg/nfd-master/nfd-master.go): the objects labelled with the node's name are merged, those of the
  master's namespace first, then by name and namespace, later ones winning; unprefixed labels go to
  ``feature.node.kubernetes.io/``; a label is dropped when its key or value is invalid, when its namespace is
  ``kubernetes.io`` or ``*.kubernetes.io`` other than ``feature.node.kubernetes.io``, ``profile.node.kubernetes.io``
  and their subdomains, or when ``denyLabelNs`` denies it (exact, or ``*.suffix``), unless ``extraLabelNs`` (config
  file or ``-extra-label-ns``) names the namespace; ``labelWhiteList`` filters the name. The node is then patched
  (JSON patch, field manager ``nfd-master``): labels listed in the annotation ``nfd.node.kubernetes.io/feature-labels``
  (its earlier labels) that are no longer wanted are removed, new ones added, changed ones overwritten
  (``allowOverwrite``, default true), and the annotation rewritten with the new keys (the default namespace trimmed).
  No labels appear without a running nfd-master, and a master that stops leaves the labels as they are.
* Nothing happens while the NodeFeature CRD is not served: the worker and GFD fail to write, the master cannot list.

Not simulated: the other feature sources (cpu, kernel, system, ...; a node's only PCI devices are its profile's
GPUs, their class guessed as in ``gfd.py``), NodeFeatureRule, NodeFeatureGroup, taints, extended resources, feature
annotations, nfd-gc, leader election. Configs are read when a pod starts and kept for its lifetime (the collection
rolls the pods when a config changes).
"""

from __future__ import annotations

import datetime
import json
import logging
import posixpath
import re
import threading

import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.watch.watch import iter_resp_lines

from . import gfd, podconfig
from .rules import PluginError, parse_cli_args, parse_config
from .watcher import read_node_profile

GROUP, VERSION, PLURAL = "nfd.k8s-sigs.io", "v1alpha1", "nodefeatures"
CRD_NAME = PLURAL + "." + GROUP
NODE_NAME_LABEL = "nfd.node.kubernetes.io/node-name"
FEATURE_LABELS_ANNOTATION = "nfd.node.kubernetes.io/feature-labels"
FEATURE_NS = "feature.node.kubernetes.io"
PROFILE_NS = "profile.node.kubernetes.io"
CONFIG_DIR = "/etc/kubernetes/node-feature-discovery"
FIELD_MANAGER = "nfd-master"
PCI_FIELDS = ("class", "vendor", "device", "subsystem_vendor", "subsystem_device")
PCI_DEFAULT_CLASSES = ("03", "0b40", "12")
PCI_DEFAULT_FIELDS = ("class", "vendor")
WATCH_TIMEOUT_S = 240
MAX_FAILURES = 20
CRDS, NODE_FEATURES = "nfd-crds", "nfd-nodefeatures"

LOG = logging.getLogger("devsim.nfd")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


# --------------------------------------------------------------------------- which pods


def program(container: dict) -> str:
    argv = list(container.get("command") or []) or list(container.get("args") or [])
    return posixpath.basename(str(argv[0])) if argv else ""


def role(pod: dict):
    """``(role, container)``: ``worker``, ``master`` or ``gfd``, or ``(None, None)``."""
    found = gfd.gfd_container(pod)
    if found is not None:
        return "gfd", found
    for container in (pod.get("spec") or {}).get("containers") or []:
        if program(container) == "nfd-worker":
            return "worker", container
        if program(container) == "nfd-master":
            return "master", container
    return None, None


def running(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and not (pod.get("metadata") or {}).get("deletionTimestamp")


def _argv(container: dict) -> list:
    command = list(container.get("command") or [])
    return command[1:] + list(container.get("args") or []) if command else list(container.get("args") or [])[1:]


def _flag(argv, name):
    """The value of ``-name=value``/``--name value`` in ``argv``, or None."""
    items = [str(a) for a in argv]
    for i, item in enumerate(items):
        if not item.startswith("-"):
            continue
        key, sep, value = item.lstrip("-").partition("=")
        if key == name:
            return value if sep else (items[i + 1] if i + 1 < len(items) else "")
    return None


def _env(container: dict) -> dict:
    return {v["name"]: v.get("value", "") for v in container.get("env") or [] if v.get("valueFrom") is None}


# --------------------------------------------------------------------------- the worker's PCI source


def pci_devices(profile: dict | None) -> list:
    """The node's PCI devices as nfd-worker reads them from sysfs: here its profile's GPUs."""
    devices = []
    for device in (profile or {}).get("devices") or []:
        ids = int(str(device.get("pci_device_id") or "0x0"), 16)
        subsystem = int(str(device.get("pci_subsystem_id") or "0x0"), 16)
        devices.append({"class": gfd.pci_class(device)[2:6], "vendor": "%04x" % (ids & 0xFFFF),
                        "device": "%04x" % (ids >> 16), "subsystem_vendor": "%04x" % (subsystem & 0xFFFF),
                        "subsystem_device": "%04x" % (subsystem >> 16)})
    return devices


def worker_output(profile: dict | None, config: dict) -> tuple:
    """``(labels, features)`` nfd-worker publishes for a node (source/pci/pci.go)."""
    pci = ((config or {}).get("sources") or {}).get("pci") or {}
    classes = [str(c).lower() for c in pci.get("deviceClassWhitelist") or PCI_DEFAULT_CLASSES]
    wanted = set(pci.get("deviceLabelFields") or PCI_DEFAULT_FIELDS)
    fields = [f for f in PCI_FIELDS if f in wanted] or list(PCI_DEFAULT_FIELDS)
    devices = pci_devices(profile)
    labels = {}
    for device in devices:
        if any(device["class"].startswith(c) for c in classes):
            labels["pci-%s.present" % "_".join(device[f] for f in fields)] = "true"
    features = {"flags": {}, "attributes": {},
                "instances": {"pci.device": {"elements": [{"attributes": dict(d)} for d in devices]}} if devices else {}}
    return labels, features


# --------------------------------------------------------------------------- the master's rules


def master_settings(text, argv) -> dict:
    """nfd-master's label settings from its config file and command line (flags win)."""
    try:
        doc = yaml.safe_load(text) if text else {}
    except yaml.YAMLError as exc:
        raise ValueError("failed to parse config file: %s" % exc) from exc
    doc = doc if isinstance(doc, dict) else {}
    settings = {"extraLabelNs": set(doc.get("extraLabelNs") or []), "denyLabelNs": set(doc.get("denyLabelNs") or []),
                "labelWhiteList": doc.get("labelWhiteList") or "", "autoDefaultNs": doc.get("autoDefaultNs", True),
                "allowOverwrite": ((doc.get("restrictions") or {}).get("allowOverwrite", True)),
                "disableLabels": bool((doc.get("restrictions") or {}).get("disableLabels"))}
    for flag, key in (("extra-label-ns", "extraLabelNs"), ("deny-label-ns", "denyLabelNs")):
        value = _flag(argv, flag)
        if value is not None:
            settings[key] = set(v for v in value.split(",") if v)
    whitelist = _flag(argv, "label-whitelist")
    if whitelist is not None:
        settings["labelWhiteList"] = whitelist
    return settings


def _with_ns(labels: dict, auto: bool) -> dict:
    out = {}
    for key, value in (labels or {}).items():
        if "/" in key or not auto:
            out[key] = value
        elif FEATURE_NS + "/" + key not in labels:
            out[FEATURE_NS + "/" + key] = value
    return out


def merged_labels(features: list, master_namespace: str, auto: bool = True) -> dict:
    """The labels the NodeFeature objects of one node ask for, merged as nfd-master merges them."""
    ordered = sorted(features, key=lambda o: (o["metadata"].get("namespace") != master_namespace,
                                              o["metadata"]["name"], o["metadata"].get("namespace")))
    out = {}
    for obj in ordered:
        out.update(_with_ns((obj.get("spec") or {}).get("labels") or {}, auto))
    return out


def allowed(key: str, value: str, settings: dict) -> bool:
    """Whether nfd-master publishes a label (validate.Label and filterFeatureLabel)."""
    ns, _slash, name = key.rpartition("/")
    if not ns or not _DNS_SUBDOMAIN.match(ns) or len(name) > 63 or not _QUALIFIED_NAME.match(name):
        return False
    if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
        return False
    denied = ns in settings["denyLabelNs"] or any(d.startswith("*") and ns.endswith(d.lstrip("*"))
                                                  for d in settings["denyLabelNs"])
    if ns == "kubernetes.io" or ns.endswith(".kubernetes.io"):
        if ns not in (FEATURE_NS, PROFILE_NS) and not ns.endswith(("." + FEATURE_NS, "." + PROFILE_NS)):
            denied = True
    if denied and ns not in settings["extraLabelNs"]:
        return False
    pattern = settings["labelWhiteList"]
    return not pattern or re.search(pattern, name) is not None


def node_labels(features: list, master_namespace: str, settings: dict) -> dict:
    labels = merged_labels(features, master_namespace, settings["autoDefaultNs"])
    labels = {k: v for k, v in labels.items() if allowed(k, v, settings)}
    return {} if settings["disableLabels"] else labels


def _pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def node_patch(node: dict, labels: dict, settings: dict) -> list:
    """The JSON patch nfd-master sends to give ``node`` exactly ``labels`` of its own (createPatches)."""
    meta = node.get("metadata") or {}
    current = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    old = set(k if "/" in k else FEATURE_NS + "/" + k
              for k in (annotations.get(FEATURE_LABELS_ANNOTATION) or "").split(",") if k)
    ops = [{"op": "remove", "path": "/metadata/labels/" + _pointer(k)} for k in sorted(old)
           if k in current and k not in labels]
    for key, value in sorted(labels.items()):
        if key not in current:
            ops.append({"op": "add", "path": "/metadata/labels/" + _pointer(key), "value": value})
        elif current[key] != value and (key not in old or settings["allowOverwrite"]):
            ops.append({"op": "replace", "path": "/metadata/labels/" + _pointer(key), "value": value})
    names = ",".join(sorted(k[len(FEATURE_NS) + 1:] if k.startswith(FEATURE_NS + "/") else k for k in labels))
    path = "/metadata/annotations/" + _pointer(FEATURE_LABELS_ANNOTATION)
    if names and annotations.get(FEATURE_LABELS_ANNOTATION) != names:
        ops.append({"op": "add", "path": path, "value": names})
    elif not names and FEATURE_LABELS_ANNOTATION in annotations:
        ops.append({"op": "remove", "path": path})
    return ops


def _start_time(pod: dict):
    text = (pod.get("status") or {}).get("startTime") or (pod.get("metadata") or {}).get("creationTimestamp")
    try:
        return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    except (TypeError, ValueError):
        return datetime.datetime.now(datetime.timezone.utc)


# --------------------------------------------------------------------------- the loop


class NfdSimulator:
    """Plays nfd-worker, GFD and nfd-master beside the device-manager simulator, on its event loop: the
    simulator passes every event to :meth:`handle`; :meth:`start` adds watches of the NodeFeature CRD and, while it
    is served, of the NodeFeature objects."""

    def __init__(self, simulator):
        self.sim = simulator
        api_client = simulator.api.api_client
        self.custom = client.CustomObjectsApi(api_client)
        self.crds = client.ApiextensionsV1Api(api_client)
        self.nodes = {}
        self.pods = {}
        self.features = {}
        self.served = False
        self.generation = 0
        self.synced = set()
        self.inputs = {}  # pod uid -> what the pod read when it started (or why it fails)

    @classmethod
    def attach(cls, simulator):
        ext = cls(simulator)
        simulator.extensions.append(ext)
        return ext

    # ------------------------------------------------------------------ watches

    def start(self):
        threading.Thread(target=self._watch, args=(CRDS, self._list_crds, lambda: False), name="watch-nfd-crds",
                         daemon=True).start()

    def _list_crds(self, **kwargs):
        return self.crds.list_custom_resource_definition(field_selector="metadata.name=" + CRD_NAME, **kwargs)

    def _list_features(self, **kwargs):
        return self.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, **kwargs)

    def _watch(self, kind, fn, stop):
        version, failures = None, 0
        while not self.sim.stop.is_set() and not stop():
            try:
                if version is None:
                    listing = json.loads(fn(_preload_content=False, _request_timeout=(5, 60)).data)
                    version = listing["metadata"]["resourceVersion"]
                    self.sim.events.put((kind, "SYNC", listing.get("items") or []))
                resp = fn(watch=True, resource_version=version, allow_watch_bookmarks=True, _preload_content=False,
                          timeout_seconds=WATCH_TIMEOUT_S, _request_timeout=(5, WATCH_TIMEOUT_S + 30))
                try:
                    for line in iter_resp_lines(resp):
                        if self.sim.stop.is_set() or stop():
                            return
                        event = json.loads(line) if line else {}
                        obj = event.get("object") or {}
                        if event.get("type") == "ERROR":
                            if obj.get("code") == 410:
                                version = None
                                break
                            raise ApiException(status=obj.get("code"), reason=obj.get("message"))
                        version = (obj.get("metadata") or {}).get("resourceVersion") or version
                        if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                            self.sim.events.put((kind, event["type"], obj))
                finally:
                    resp.release_conn()
                failures = 0
            except ApiException as exc:
                if exc.status == 410:
                    version = None
                    continue
                if exc.status == 404 and kind == NODE_FEATURES:
                    return  # the CRD went away; the CRD watch starts a new one when it is back
                failures += 1
                LOG.warning("%s watch failed (%d/%d): %s %s", kind, failures, MAX_FAILURES, exc.status, exc.reason)
            except Exception as exc:  # pylint: disable=broad-except  # urllib3 errors come in several hierarchies
                failures += 1
                LOG.warning("%s watch failed (%d/%d): %r", kind, failures, MAX_FAILURES, exc)
            if failures >= MAX_FAILURES:
                self.sim.events.put(("fatal", kind, "too many consecutive watch failures"))
                return
            if failures:
                self.sim.stop.wait(min(0.25 * (2 ** failures), 5.0))

    # ------------------------------------------------------------------ events

    def handle(self, kind, etype, obj):
        affected = set()
        if kind == "nodes":
            if etype == "SYNC":
                self.nodes = {n["metadata"]["name"]: n for n in obj}
                affected.update(self.nodes)
            elif etype == "DELETED":
                self.nodes.pop(obj["metadata"]["name"], None)
            else:
                self.nodes[obj["metadata"]["name"]] = obj
                affected.add(obj["metadata"]["name"])
        elif kind == "pods":
            pods = obj if etype == "SYNC" else [obj]
            if etype == "SYNC":
                affected.update((p.get("spec") or {}).get("nodeName") for p in self.pods.values())
                self.pods = {}
            for pod in pods:
                what, _container = role(pod)
                if what is None:
                    continue
                uid = pod["metadata"]["uid"]
                if etype == "DELETED" or not running(pod):
                    self.pods.pop(uid, None)
                    self.inputs.pop(uid, None)
                else:
                    self.pods[uid] = pod
                affected.add((pod.get("spec") or {}).get("nodeName"))
                if what == "master":
                    affected.update(self.nodes)
        elif kind == "configmaps" and etype != "SYNC":
            key = (obj["metadata"].get("namespace"), obj["metadata"]["name"])
            for uid in [u for u, (ref, _value) in self.inputs.items() if ref == key]:
                pod = self.pods.get(uid)
                self.inputs.pop(uid)
                affected.update(self.nodes if pod is None or role(pod)[0] == "master"
                                else [(pod.get("spec") or {}).get("nodeName")])
        elif kind == CRDS:
            items = obj if etype == "SYNC" else ([] if etype == "DELETED" else [obj])
            served = any(c.get("type") == "Established" and c.get("status") == "True"
                         for item in items for c in (item.get("status") or {}).get("conditions") or [])
            if served != self.served:
                LOG.info("the NodeFeature CRD is %s", "served" if served else "gone")
            was_served, self.served = self.served, served
            if not served:
                self.features = {}
                self.synced.discard(NODE_FEATURES)
            elif not was_served:
                self.generation += 1
                generation = self.generation
                threading.Thread(target=self._watch, name="watch-nfd-nodefeatures", daemon=True, args=(
                    NODE_FEATURES, self._list_features, lambda: generation != self.generation or not self.served)).start()
        elif kind == NODE_FEATURES:
            items = obj if etype == "SYNC" else [obj]
            if etype == "SYNC":
                affected.update(self.nodes)
                self.features = {}
                self.synced.add(NODE_FEATURES)
            for item in items:
                key = (item["metadata"].get("namespace"), item["metadata"]["name"])
                if etype == "DELETED":
                    self.features.pop(key, None)
                else:
                    self.features[key] = item
                affected.add(self._node_of(item))
        else:
            return
        if etype == "SYNC":
            self.synced.add(kind)
        if {"nodes", "pods"} <= self.synced:
            for name in sorted(n for n in affected if n):
                try:
                    self.reconcile(name)
                except ApiException as exc:
                    LOG.warning("node %s: API error while playing NFD: %s %s", name, exc.status, exc.reason)

    @staticmethod
    def _node_of(obj):
        return ((obj.get("metadata") or {}).get("labels") or {}).get(NODE_NAME_LABEL)

    # ------------------------------------------------------------------ reconcile

    def _profile(self, node):
        """The node's GPU profile (the file the fake NVML reads, its MIG state applied), as the device-manager
        simulator finds it."""
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        return read_node_profile(node["metadata"]["name"], annotations, self.sim.profiles_dir)

    def _on(self, node, what):
        pods = [p for p in self.pods.values() if role(p)[0] == what and (node is None or p["spec"].get("nodeName") == node)]
        return max(pods, key=lambda p: (p["metadata"].get("creationTimestamp") or "", p["metadata"]["name"])) if pods else None

    def _read(self, pod, container, default_file):
        """``(configmap key or None, text or None)`` of the config file a pod reads."""
        path = _flag(_argv(container), "config") or _flag(_argv(container), "config-file") \
            or _env(container).get("CONFIG_FILE") or default_file
        try:
            ref = podconfig.config_ref_for_path(pod, container, path)
        except PluginError:
            return None, None  # no such file: NFD and GFD run on their defaults
        data = self.sim.read_configmap(ref.namespace, ref.name)
        return (ref.namespace, ref.name), (data or {}).get(ref.key)

    def _inputs(self, pod, compute):
        uid = pod["metadata"]["uid"]
        if uid not in self.inputs:
            self.inputs[uid] = compute()
        return self.inputs[uid][1]

    def reconcile(self, name):
        node = self.nodes.get(name)
        if node is None or not self.served or NODE_FEATURES not in self.synced:
            return
        profile = self._profile(node)
        worker = self._on(name, "worker")
        if worker is not None:
            def read_worker(pod=worker):
                ref, text = self._read(pod, role(pod)[1], CONFIG_DIR + "/nfd-worker.conf")
                try:
                    return ref, yaml.safe_load(text) if text else {}
                except yaml.YAMLError as exc:
                    LOG.warning("pod %s: nfd-worker config: %s", pod["metadata"]["name"], exc)
                    return ref, {}
            labels, features = worker_output(profile, self._inputs(worker, read_worker))
            owners = [{"apiVersion": "v1", "kind": "Pod", "name": worker["metadata"]["name"], "uid": worker["metadata"]["uid"]}]
            owners += [dict((k, o[k]) for k in ("apiVersion", "kind", "name", "uid")) for o in
                       worker["metadata"].get("ownerReferences") or [] if o.get("kind") == "DaemonSet"]
            self._write(worker["metadata"]["namespace"], name, name, {"features": features, "labels": labels}, owners)
        publisher = self._on(name, "gfd")
        if publisher is not None:
            def read_gfd(pod=publisher):
                container = role(pod)[1]
                ref, text = self._read(pod, container, "")
                argv = _argv(container)
                try:
                    config = parse_config(text, _env(container), parse_cli_args(argv))
                    stamp = None if gfd.no_timestamp(text, _env(container), argv) else _start_time(pod)
                    return ref, gfd.labels(profile, config, stamp)
                except (PluginError, gfd.GFDFailure) as exc:
                    LOG.warning("pod %s on %s: gpu-feature-discovery fails: %s", pod["metadata"]["name"], name, exc)
                    return ref, None
            gfd_labels = self._inputs(publisher, read_gfd)
            if gfd_labels is not None:
                obj = gfd.node_feature(name, publisher["metadata"]["namespace"], gfd_labels)
                self._write(obj["metadata"]["namespace"], obj["metadata"]["name"], name, obj["spec"], [])
        master = self._on(None, "master")
        if master is not None:
            def read_master(pod=master):
                container = role(pod)[1]
                ref, text = self._read(pod, container, CONFIG_DIR + "/nfd-master.conf")
                try:
                    return ref, master_settings(text, _argv(container))
                except ValueError as exc:
                    LOG.warning("pod %s: nfd-master config: %s", pod["metadata"]["name"], exc)
                    return ref, master_settings("", _argv(container))
            settings = self._inputs(master, read_master)
            mine = [o for o in self.features.values() if self._node_of(o) == name]
            ops = node_patch(node, node_labels(mine, master["metadata"]["namespace"], settings), settings)
            if ops:
                LOG.info("node %s: nfd-master patches %s", name, json.dumps(ops))
                try:
                    resp = self.sim.api.patch_node(name, ops, field_manager=FIELD_MANAGER, _preload_content=False,
                                                   _content_type="application/json-patch+json")
                    self.nodes[name] = json.loads(resp.data)
                except ApiException as exc:
                    if exc.status not in (409, 422):
                        raise
                    self.nodes[name] = json.loads(self.sim.api.read_node(name, _preload_content=False).data)
                    self.sim.events.put(("nodes", "MODIFIED", self.nodes[name]))  # stale view: once more, afresh

    def _write(self, namespace, name, node, spec, owners):
        """Create or replace one NodeFeature when it differs from what we know of it."""
        key = (namespace, name)
        desired = {"labels": {NODE_NAME_LABEL: node}, "spec": spec, "owners": owners}
        live = self.features.get(key)
        if live is not None:
            meta = live["metadata"]
            have = {"labels": meta.get("labels") or {}, "spec": live.get("spec") or {},
                    "owners": [dict((k, o.get(k)) for k in ("apiVersion", "kind", "name", "uid"))
                               for o in meta.get("ownerReferences") or []]}
            if have == desired:
                return
        body = {"apiVersion": GROUP + "/" + VERSION, "kind": "NodeFeature",
                "metadata": {"name": name, "namespace": namespace, "labels": desired["labels"]}, "spec": spec}
        if owners:
            body["metadata"]["ownerReferences"] = owners
        try:
            if live is None:
                created = self.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
            else:
                body["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
                created = self.custom.replace_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, body)
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise
            LOG.info("NodeFeature %s/%s: %s %s; the watch brings the current one", namespace, name, exc.status, exc.reason)
            return
        self.features[key] = created
        LOG.info("NodeFeature %s/%s written: labels %s", namespace, name, json.dumps(spec.get("labels"), sort_keys=True))
