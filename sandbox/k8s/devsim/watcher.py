# SPDX-License-Identifier: GPL-3.0-or-later
"""The device-manager simulator's control loop: plays the kubelet's part for device plugins.

Watches pods, nodes and ConfigMaps. When a device plugin pod (see ``podconfig``) is Running on
node X, it reads X's GPU profile (``sandbox.kubegpu.io/profile`` annotation ->
``<profiles dir>/<profile>.json``, the file the fake NVML reads), the plugin's config and env,
computes ``rules.advertised_resources`` and patches X's ``status.capacity`` and
``status.allocatable``. When the pod goes away, the ``nvidia.com/*`` resources go too.

Kubelet behaviour this copies, and where it has to guess:

* A plugin reads its config once, when it starts. A successful result is kept for the pod's
  lifetime, so later ConfigMap edits change nothing until the pod is replaced, like the real
  plugin. A plugin that failed (bad config, missing ConfigMap or key) would crash-loop and read
  the config again on each restart; the simulator re-evaluates it whenever the ConfigMap changes.
* If several plugin pods run on one node (a rolling update), the newest one counts.
* Devices the plugin's health check marks unhealthy (``rules.unhealthy_devices``: XID events of the profile, the
  plugin's ``DP_DISABLE_HEALTHCHECKS`` / ``DP_ENABLE_HEALTHCHECKS``) stay in capacity and leave allocatable, as the
  kubelet counts them; the state annotation names them.
* When the plugin goes away the kubelet first drops allocatable to 0 and removes the resource
  after a grace period; the simulator removes it from capacity and allocatable at once.
* The node's ``sandbox.kubegpu.io/device-plugin`` annotation records what the simulator
  decided (advertised counts and strategy, or why nothing is advertised), for people and tests.
* Allocate: with ``failRequestsGreaterThanOne`` (always on for MPS) a container asking for more
  than one of a shared resource fails the plugin's Allocate, and the kubelet rejects the pod at
  admission. The simulator does the same the first time it sees such a pod bound to the node:
  phase ``Failed``, reason ``UnexpectedAdmissionError``, the kubelet's message (kwok's stages
  leave such pods alone, see sandbox/k8s/kwok/kwok.yaml). Pods bound before the simulator
  started, or before the plugin's config changed, are not re-admitted.

Watches are bounded: each watch call ends after ``WATCH_TIMEOUT_S`` and is resumed from the last
resourceVersion; failures back off and the process exits after ``MAX_CONSECUTIVE_FAILURES``.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import queue
import threading
from concurrent.futures import ThreadPoolExecutor

from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.watch.watch import iter_resp_lines

from sandbox.fakenvml import mig_state

from . import podconfig
from .rules import RESOURCE_PREFIX, PluginError, advertised_resources, parse_config, unhealthy_devices

PROFILE_ANNOTATION = "sandbox.kubegpu.io/profile"
PROFILE_PATH_ANNOTATION = "sandbox.kubegpu.io/profile-path"
MIG_STATE_ANNOTATION = "sandbox.kubegpu.io/mig-state-path"


def read_node_profile(node_name: str, annotations: dict, profiles_dir: str):
    """The GPU profile of a node as its fake NVML reports it: the profile file its annotations name, with the MIG
    state its node container's fake NVML wrote (``sandbox.kubegpu.io/mig-state-path``, when the file exists) applied
    by :func:`sandbox.fakenvml.mig_state.effective`. None for a node without GPUs or a profile that cannot be read."""
    path = annotations.get(PROFILE_PATH_ANNOTATION)
    if not path:
        profile_name = annotations.get(PROFILE_ANNOTATION)
        if not profile_name:
            return None
        path = os.path.join(profiles_dir, profile_name + ".json")
    try:
        with open(path, encoding="utf-8") as handle:
            profile = json.load(handle)
    except (OSError, ValueError) as exc:
        LOG.error("node %s: cannot read GPU profile %s: %s", node_name, path, exc)
        return None
    state_path = annotations.get(MIG_STATE_ANNOTATION)
    if not state_path:
        return profile
    try:
        return mig_state.effective(profile, mig_state.load(state_path))
    except (OSError, ValueError, mig_state.StateError) as exc:
        LOG.error("node %s: cannot apply the MIG state %s: %s", node_name, state_path, exc)
        return None


STATE_ANNOTATION = "sandbox.kubegpu.io/device-plugin"
# kwok's nodes carry it (sandbox/k8s/nodes.py); a node without it has a real kubelet, whose device manager advertises
# what the device plugin registered (the stand-in plugin, sandbox/standins) and runs Allocate at admission itself
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
KUBELET_NOTE = "kubelet node: its kubelet advertises what the plugin registered (the simulator's rules predict: %s)"
WATCH_TIMEOUT_S = 240
MAX_CONSECUTIVE_FAILURES = 20
MAX_RECONCILE_RETRIES = 5
WATCHED = frozenset(("nodes", "pods", "configmaps"))
# Nodes reconciled at once (each makes up to three requests: its plugin's ConfigMap, an annotation, the status), and
# the most events handled in one batch.
RECONCILE_WORKERS = 8
MAX_BATCH = 1000

LOG = logging.getLogger("devsim")


class ConfigUnavailable(Exception):
    """The plugin's ConfigMap or key does not exist (yet)."""


class Outcome:
    """What one plugin pod makes the kubelet advertise on its node."""

    def __init__(self, resources, message, final, configmap=None, single_request_names=frozenset(), mps_root=None,
                 unhealthy=None):
        self.resources = resources
        # devices the plugin's health check marks unhealthy: in capacity, not in allocatable
        self.allocatable = dict((k, v - (unhealthy or {}).get(k, 0)) for k, v in resources.items())
        self.message = message
        self.final = final
        self.configmap = configmap
        # MPS: the host directory the plugin sees at /mps ("" for none); it advertises only once a control daemon
        # answers there (cmd/mps-control-daemon; the plugin waits for the daemon's started file and pipe)
        self.mps_root = mps_root
        # Shared resources of which a container may ask for one at most (failRequestsGreaterThanOne).
        self.single_request_names = frozenset(single_request_names)


def admission_error(pod: dict, single_request_names) -> str | None:
    """Return the kubelet's rejection message if a container asks for more than one shared device."""
    spec = pod.get("spec") or {}
    for container in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        resources = container.get("resources") or {}
        for name in sorted(single_request_names):
            quantity = (resources.get("limits") or {}).get(name) or (resources.get("requests") or {}).get(name)
            try:
                count = int(str(quantity)) if quantity is not None else 0
            except ValueError:
                continue
            if count > 1:
                return ("Allocate failed due to rpc error: code = Unknown desc = invalid request: maximum request size for shared "
                        "resources is 1; found %d, which is unexpected" % count)
    return None


def evaluate_plugin_pod(pod: dict, profile: dict | None, read_configmap) -> Outcome:
    """Compute the outcome for a running plugin pod; ``read_configmap(ns, name)`` returns data or None."""
    try:
        inputs = podconfig.plugin_inputs(pod)
    except PluginError as exc:
        return Outcome({}, "plugin fails: %s" % exc, final=True)
    for note in inputs.notes:
        LOG.warning("pod %s: %s", _pod_key(pod), note)
    text = None
    ref = inputs.config_ref
    if ref is not None:
        data = read_configmap(ref.namespace, ref.name)
        if data is None or ref.key not in data:
            what = "ConfigMap %s/%s" % (ref.namespace, ref.name) if data is None else "key %s of ConfigMap %s/%s" % (ref.key, ref.namespace, ref.name)
            return Outcome({}, "plugin has no config: %s not found" % what, final=False, configmap=(ref.namespace, ref.name))
        text = data[ref.key]
    try:
        config = parse_config(text, inputs.env, inputs.cli)
        for warning in config.warnings:
            LOG.warning("pod %s: %s", _pod_key(pod), warning)
        resources = advertised_resources(profile, config)
        unhealthy = unhealthy_devices(profile, config)
    except PluginError as exc:
        return Outcome({}, "plugin fails: %s" % exc, final=False, configmap=(ref.namespace, ref.name) if ref else None)
    if profile is None:
        return Outcome({}, "no GPU on this node (no NVML): nothing advertised", final=True)
    strategy = config.sharing.strategy if config.sharing else "none"
    summary = ", ".join("%s=%d" % kv for kv in sorted(resources.items())) or "nothing"
    if unhealthy:
        summary += " (unhealthy: %s)" % ", ".join("%s=%d" % kv for kv in sorted(unhealthy.items()))
    single = set()
    if config.sharing is not None and config.sharing.fail_requests_greater_than_one:
        single = {r.rename or r.name for r in config.sharing.resources if (r.rename or r.name) in resources}
    return Outcome(resources, "advertising %s (migStrategy=%s, sharing=%s)" % (summary, config.mig_strategy, strategy), final=True,
                   single_request_names=single, mps_root=(inputs.mps_host_root or "") if strategy == "mps" else None,
                   unhealthy=unhealthy)


def _configmap_data(obj: dict) -> dict:
    """A ConfigMap's data, with its binaryData decoded (data wins on a key in both)."""
    data = dict(obj.get("data") or {})
    for key, value in (obj.get("binaryData") or {}).items():
        data.setdefault(key, base64.b64decode(value).decode("utf-8", "replace"))
    return data


def _rv(value) -> int:
    """Return a resourceVersion as a number for ordering; etcd's revisions are integers here."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1


def _object_key(obj: dict) -> tuple:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace"), meta.get("name"))


def _pod_key(pod: dict) -> str:
    meta = pod.get("metadata") or {}
    return "%s/%s" % (meta.get("namespace"), meta.get("name"))


def _pod_running(pod: dict) -> bool:
    meta = pod.get("metadata") or {}
    return (pod.get("status") or {}).get("phase") == "Running" and not meta.get("deletionTimestamp")


class Simulator:
    """Keeps node resources in line with the device plugin pods running on them."""

    def __init__(self, api: client.CoreV1Api, profiles_dir: str, stop: threading.Event | None = None):
        self.api = api
        self.profiles_dir = profiles_dir
        self.stop = stop or threading.Event()
        self.events = queue.Queue()
        self.nodes = {}
        self.plugin_pods = {}
        self.outcomes = {}
        self.synced = set()
        self.ready_callbacks = []
        self.fatal = None
        self.retries = {}
        self.admitted = set()
        self.mps_daemons = {}  # uid -> MPS control daemon pod
        # Other parts of the node's machinery (nfd.NfdSimulator): each sees every event first, and starts its watches.
        self.extensions = []
        self.configmaps = {}  # (namespace, name) -> ConfigMap, from the watch
        self.pool = ThreadPoolExecutor(max_workers=RECONCILE_WORKERS, thread_name_prefix="reconcile")

    # ------------------------------------------------------------------ API helpers

    def read_configmap(self, namespace: str, name: str):
        """Return a ConfigMap's data (binaryData decoded) or None if it does not exist.

        From the ConfigMap watch's view, as the kubelet mounts a pod's ConfigMap from its own watch; one the watch has
        not brought yet (its stream runs beside the pods') is read from the API server."""
        cached = self.configmaps.get((namespace, name))
        if cached is not None:
            return _configmap_data(cached)
        try:
            resp = self.api.read_namespaced_config_map(name, namespace, _preload_content=False, _request_timeout=(5, 30))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return _configmap_data(json.loads(resp.data))

    def load_profile(self, node_name: str):
        """Return the parsed GPU profile of a node (its MIG state applied), or None for a node without GPUs."""
        annotations = (self.nodes.get(node_name) or {}).get("annotations") or {}
        return read_node_profile(node_name, annotations, self.profiles_dir)

    # ------------------------------------------------------------------ reconcile

    def _plugin_pod_for(self, node_name: str):
        running = [p for p in self.plugin_pods.values() if (p.get("spec") or {}).get("nodeName") == node_name and _pod_running(p)]
        if not running:
            return None
        return max(running, key=lambda p: ((p.get("metadata") or {}).get("creationTimestamp") or "", (p.get("metadata") or {}).get("name")))

    def desired_for(self, node_name: str):
        """Return (capacity, allocatable, message) the node should advertise now."""
        pod = self._plugin_pod_for(node_name)
        if pod is None:
            return {}, {}, "no device plugin pod running"
        uid = pod["metadata"]["uid"]
        cached = self.outcomes.get(uid)
        if cached is not None and cached.final:
            return self._with_mps_daemon(node_name, cached)
        outcome = evaluate_plugin_pod(pod, self.load_profile(node_name), self.read_configmap)
        if cached is None or cached.message != outcome.message:
            LOG.info("node %s, pod %s: %s", node_name, _pod_key(pod), outcome.message)
        self.outcomes[uid] = outcome
        return self._with_mps_daemon(node_name, outcome)

    def _with_mps_daemon(self, node_name: str, outcome: Outcome):
        """An MPS plugin advertises nothing until NVIDIA's MPS control daemon runs on the node with the same root."""
        if outcome.mps_root is None:
            return outcome.resources, outcome.allocatable, outcome.message
        roots = set()
        for daemon in self.mps_daemons.values():
            if (daemon.get("spec") or {}).get("nodeName") == node_name and _pod_running(daemon):
                roots.add(podconfig.host_path_at(daemon, podconfig.mps_daemon_container(daemon), podconfig.MPS_CONTAINER_ROOT))
        if outcome.mps_root and outcome.mps_root in roots:
            return outcome.resources, outcome.allocatable, outcome.message
        why = ("the plugin sees no MPS root at %s" % podconfig.MPS_CONTAINER_ROOT if not outcome.mps_root
               else "no mps-control-daemon pod runs here with the MPS root %s" % outcome.mps_root)
        return {}, {}, "plugin waits for the MPS control daemon (%s); it retries every 30 s" % why

    def reconcile(self, node_name: str):
        """Patch one node's capacity, allocatable and state annotation if they differ."""
        node = self.nodes.get(node_name)
        if node is None:
            return
        capacity, allocatable, message = self.desired_for(node_name)
        status_patch = {}
        kubelet = not node.get("kwok")
        if kubelet:
            message = KUBELET_NOTE % message
        for field, resources in (() if kubelet else (("capacity", capacity), ("allocatable", allocatable))):
            current = {k: v for k, v in (node.get(field) or {}).items() if k.startswith(RESOURCE_PREFIX + "/")}
            wanted = {k: str(v) for k, v in resources.items()}
            if current != wanted:
                change = {k: None for k in current if k not in wanted}
                change.update(wanted)
                status_patch[field] = change
        # The verdict goes first, so whoever sees the new resources also sees why.
        if (node.get("annotations") or {}).get(STATE_ANNOTATION) != message:
            self._remember(self.api.patch_node(node_name, {"metadata": {"annotations": {STATE_ANNOTATION: message}}},
                                               _content_type="application/merge-patch+json", _preload_content=False))
        if status_patch:
            LOG.info("node %s: patching status %s", node_name, json.dumps(status_patch, sort_keys=True))
            self._remember(self.api.patch_node_status(node_name, {"status": status_patch},
                                                      _content_type="application/merge-patch+json", _preload_content=False))

    def _remember(self, response):
        """Take the node returned by a patch as the current view, so its older watch events are ignored."""
        data = getattr(response, "data", None)
        if not data:
            return
        obj = json.loads(data)
        self.nodes[obj["metadata"]["name"]] = self._node_view(obj)

    def _admit(self, pod: dict):
        """Reject a pod at admission like the kubelet when the plugin's Allocate would refuse it."""
        meta = pod.get("metadata") or {}
        node_name = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        # Each pod is admitted once, the first time it is seen bound; kwok may already have it Running.
        if not node_name or meta.get("uid") in self.admitted or meta.get("deletionTimestamp") or phase not in (None, "", "Pending", "Running"):
            return
        self.admitted.add(meta.get("uid"))
        if not (self.nodes.get(node_name) or {}).get("kwok", True):
            return  # a kubelet admits its own pods (the plugin's Allocate refuses what it refuses)
        plugin = self._plugin_pod_for(node_name)
        outcome = self.outcomes.get(plugin["metadata"]["uid"]) if plugin else None
        if outcome is None or not outcome.single_request_names:
            return
        message = admission_error(pod, outcome.single_request_names)
        if message is None:
            return
        LOG.info("pod %s on %s rejected at admission: %s", _pod_key(pod), node_name, message)
        try:
            self.api.patch_namespaced_pod_status(meta["name"], meta["namespace"],
                                                 {"status": {"phase": "Failed", "reason": "UnexpectedAdmissionError", "message": message}},
                                                 _content_type="application/merge-patch+json")
        except ApiException as exc:
            LOG.warning("pod %s: could not mark it Failed: %s %s", _pod_key(pod), exc.status, exc.reason)

    def reconcile_all(self):
        """Reconcile every known node."""
        for name in sorted(self.nodes):
            self._safe_reconcile(name)

    def _safe_reconcile(self, name):
        try:
            self.reconcile(name)
            self.retries.pop(name, None)
        except ApiException as exc:
            if exc.status == 404:
                return
            attempt = self.retries.get(name, 0) + 1
            self.retries[name] = attempt
            LOG.warning("node %s: API error while reconciling (attempt %d/%d): %s %s", name, attempt, MAX_RECONCILE_RETRIES, exc.status, exc.reason)
            if attempt < MAX_RECONCILE_RETRIES:
                self.events.put(("retry", name, None))

    # ------------------------------------------------------------------ events

    @staticmethod
    def _node_view(node: dict) -> dict:
        status = node.get("status") or {}
        return {
            "resourceVersion": _rv((node.get("metadata") or {}).get("resourceVersion")),
            "annotations": (node.get("metadata") or {}).get("annotations") or {},
            "kwok": ((node.get("metadata") or {}).get("annotations") or {}).get(KWOK_ANNOTATION) == "fake",
            "capacity": status.get("capacity") or {},
            "allocatable": status.get("allocatable") or {},
        }

    def handle(self, kind: str, etype: str, obj):
        """Apply one event (or a SYNC list) to the state and reconcile affected nodes."""
        self.handle_batch([(kind, etype, obj)])

    def handle_batch(self, events):
        """Apply events in their order, then reconcile every node they affect once.

        Many kubelets patch their nodes at the same time; one simulator doing it node after node would be the
        bottleneck of a large rollout that a real cluster does not have. So the nodes of one batch are reconciled in
        parallel (``RECONCILE_WORKERS``), each node by one worker, while no event changes the state they read."""
        affected = set()
        for kind, etype, obj in events:
            affected |= self._apply(kind, etype, obj)
        if self.synced >= WATCHED:
            names = sorted(n for n in affected if n)
            if len(names) > 1:
                list(self.pool.map(self._safe_reconcile, names))
            else:
                for name in names:
                    self._safe_reconcile(name)
            while self.ready_callbacks:
                self.ready_callbacks.pop()()

    def _apply(self, kind: str, etype: str, obj) -> set:
        """Apply one event to the state; return the names of the nodes it affects."""
        for extension in self.extensions:
            try:
                extension.handle(kind, etype, obj)
            except Exception:  # pylint: disable=broad-except
                LOG.exception("%s failed on a %s %s event", type(extension).__name__, kind, etype)
        affected = set()
        if kind == "nodes":
            if etype == "SYNC":
                self.nodes = {n["metadata"]["name"]: self._node_view(n) for n in obj}
                affected.update(self.nodes)
            elif etype == "DELETED":
                self.nodes.pop(obj["metadata"]["name"], None)
            else:
                view = self._node_view(obj)
                known = self.nodes.get(obj["metadata"]["name"])
                if known is not None and view["resourceVersion"] < known["resourceVersion"]:
                    # An event from before our own patch: the view from the patch is newer.
                    return affected
                self.nodes[obj["metadata"]["name"]] = view
                affected.add(obj["metadata"]["name"])
        elif kind == "pods":
            if etype == "SYNC":
                old_nodes = {(p.get("spec") or {}).get("nodeName") for p in self.plugin_pods.values()}
                self.plugin_pods = {p["metadata"]["uid"]: p for p in obj if podconfig.is_plugin_pod(p)}
                self.mps_daemons = {p["metadata"]["uid"]: p for p in obj if podconfig.mps_daemon_container(p) is not None}
                # Pods already bound when the list was taken count as admitted (the kubelet would not re-admit them).
                self.admitted.update(p["metadata"]["uid"] for p in obj if (p.get("spec") or {}).get("nodeName"))
                affected.update(old_nodes | {(p.get("spec") or {}).get("nodeName") for p in self.plugin_pods.values()})
            elif podconfig.mps_daemon_container(obj) is not None:
                uid = obj["metadata"]["uid"]
                previous = self.mps_daemons.pop(uid, None)
                if previous is not None:
                    affected.add((previous.get("spec") or {}).get("nodeName"))
                if etype != "DELETED":
                    self.mps_daemons[uid] = obj
                affected.add((obj.get("spec") or {}).get("nodeName"))
            elif not podconfig.is_plugin_pod(obj):
                if etype == "DELETED":
                    self.admitted.discard(obj["metadata"]["uid"])
                elif self.synced >= WATCHED:
                    self._admit(obj)
            else:
                uid = obj["metadata"]["uid"]
                previous = self.plugin_pods.get(uid)
                if previous is not None:
                    affected.add((previous.get("spec") or {}).get("nodeName"))
                if etype == "DELETED":
                    self.plugin_pods.pop(uid, None)
                    self.outcomes.pop(uid, None)
                else:
                    self.plugin_pods[uid] = obj
                    if not _pod_running(obj):
                        self.outcomes.pop(uid, None)
                affected.add((obj.get("spec") or {}).get("nodeName"))
        elif kind == "configmaps":
            if etype == "SYNC":
                keys = None
                self.configmaps = {_object_key(o): o for o in obj}
            else:
                keys = {_object_key(obj)}
                if etype == "DELETED":
                    self.configmaps.pop(_object_key(obj), None)
                else:
                    self.configmaps[_object_key(obj)] = obj
            for uid, outcome in list(self.outcomes.items()):
                if outcome.final or (keys is not None and outcome.configmap not in keys):
                    continue
                pod = self.plugin_pods.get(uid)
                if pod is not None:
                    affected.add((pod.get("spec") or {}).get("nodeName"))
        elif kind == "retry":
            affected.add(etype)
        if etype == "SYNC":
            was_synced = self.synced >= WATCHED
            self.synced.add(kind)
            if not was_synced and self.synced >= WATCHED:
                # Nothing was reconciled while waiting for the first lists: do every node now.
                affected.update(self.nodes)
        return affected

    # ------------------------------------------------------------------ watches

    def _list(self, kind: str):
        fn = {
            "nodes": self.api.list_node,
            "pods": self.api.list_pod_for_all_namespaces,
            "configmaps": self.api.list_config_map_for_all_namespaces,
        }[kind]
        return fn

    def _watch_thread(self, kind: str):
        try:
            self.watch_loop(kind)
        except BaseException as exc:  # pylint: disable=broad-except
            LOG.exception("%s watch thread crashed", kind)
            self.events.put(("fatal", kind, repr(exc)))

    def watch_loop(self, kind: str):
        """List then watch one resource kind forever (bounded reconnects), feeding self.events."""
        fn = self._list(kind)
        resource_version = None
        failures = 0
        while not self.stop.is_set():
            try:
                if resource_version is None:
                    resp = fn(_preload_content=False, _request_timeout=(5, 60))
                    listing = json.loads(resp.data)
                    resource_version = listing["metadata"]["resourceVersion"]
                    self.events.put((kind, "SYNC", listing.get("items") or []))
                resp = fn(watch=True, resource_version=resource_version, allow_watch_bookmarks=True, _preload_content=False,
                          timeout_seconds=WATCH_TIMEOUT_S, _request_timeout=(5, WATCH_TIMEOUT_S + 30))
                try:
                    for line in iter_resp_lines(resp):
                        if self.stop.is_set():
                            break
                        if not line:
                            continue
                        event = json.loads(line)
                        obj = event.get("object") or {}
                        if event.get("type") == "ERROR":
                            if obj.get("code") == 410:
                                resource_version = None
                                break
                            raise ApiException(status=obj.get("code"), reason=obj.get("message"))
                        resource_version = (obj.get("metadata") or {}).get("resourceVersion") or resource_version
                        if event.get("type") != "BOOKMARK":
                            self.events.put((kind, event["type"], obj))
                finally:
                    resp.release_conn()
                failures = 0
            except ApiException as exc:
                if exc.status == 410:
                    resource_version = None
                    continue
                failures += 1
                LOG.warning("%s watch failed (%d/%d): %s %s", kind, failures, MAX_CONSECUTIVE_FAILURES, exc.status, exc.reason)
            except (OSError, ValueError, KeyError) as exc:
                failures += 1
                LOG.warning("%s watch failed (%d/%d): %r", kind, failures, MAX_CONSECUTIVE_FAILURES, exc)
            except Exception as exc:  # pylint: disable=broad-except
                # urllib3 errors come in several hierarchies; any of them ends this attempt.
                failures += 1
                LOG.warning("%s watch failed (%d/%d): %r", kind, failures, MAX_CONSECUTIVE_FAILURES, exc)
            if failures >= MAX_CONSECUTIVE_FAILURES:
                self.events.put(("fatal", kind, "too many consecutive watch failures"))
                return
            if failures:
                self.stop.wait(min(0.25 * (2 ** failures), 5.0))

    def run(self):
        """Start the watches and process events until stopped; return an exit status."""
        threads = [threading.Thread(target=self._watch_thread, args=(kind,), name="watch-" + kind, daemon=True)
                   for kind in sorted(WATCHED)]
        for thread in threads:
            thread.start()
        for extension in self.extensions:
            extension.start()
        while not self.stop.is_set():
            try:
                kind, etype, obj = self.events.get(timeout=1.0)
            except queue.Empty:
                continue
            # Whatever else has arrived meanwhile goes in the same batch (up to MAX_BATCH events).
            batch = [(kind, etype, obj)]
            while kind != "fatal" and len(batch) < MAX_BATCH:
                try:
                    kind, etype, obj = self.events.get_nowait()
                except queue.Empty:
                    break
                batch.append((kind, etype, obj))
            if kind == "fatal":
                LOG.error("giving up: %s %s", etype, obj)
                self.fatal = obj
                self.stop.set()
                break
            try:
                self.handle_batch(batch)
            except Exception:  # pylint: disable=broad-except
                LOG.exception("error handling a batch of %d events (the last: %s %s)", len(batch), kind, etype)
        self.pool.shutdown(wait=False)
        return 1 if self.fatal else 0
