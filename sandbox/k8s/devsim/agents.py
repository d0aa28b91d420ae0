# SPDX-License-Identifier: GPL-3.0-or-later
"""What every simulator extension that plays a node agent shares (AMD's and Intel's plugins, AMD's labeller,
nano-gpu's agent): it keeps the nodes and the Running pods it recognises, from the simulator's own watches, and
reconciles each node an event touched once both are listed. A subclass says which pods are its own (:meth:`match`)
and what a node should look like (:meth:`reconcile`)."""

from __future__ import annotations

import json
import logging

from kubernetes.client.rest import ApiException

LOG = logging.getLogger("devsim.agents")


def pod_running(pod: dict) -> bool:
    """Running and not being deleted: the kubelet's agent serves only then."""
    return (pod.get("status") or {}).get("phase") == "Running" and not (pod.get("metadata") or {}).get("deletionTimestamp")


# kwok's nodes carry it (sandbox/k8s/nodes.py). A node without it has a real kubelet (sandbox/kubelet): its device
# manager advertises what the agents' real containers register, so no simulator extension writes its status.
KWOK_ANNOTATION = "kwok.x-k8s.io/node"


def kwok_node(node: dict) -> bool:
    """Whether ``node`` (a Node object as the watch gives it) is a kwok node, whose kubelet the simulator plays."""
    return ((node.get("metadata") or {}).get("annotations") or {}).get(KWOK_ANNOTATION) == "fake"


def _rv(obj: dict) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion"))
    except (TypeError, ValueError):
        return -1


class NodeAgents:
    """Base of the node agents' simulators; ``self.pods`` maps a pod's uid to ``(pod, match(pod))``."""

    what = "a node agent"  # for the log

    def __init__(self, simulator):
        self.sim = simulator
        self.nodes = {}
        self.pods = {}
        self.synced = set()

    @classmethod
    def attach(cls, simulator):
        ext = cls(simulator)
        simulator.extensions.append(ext)
        return ext

    def start(self):
        """No watches of its own: nodes and pods come from the simulator's."""

    def match(self, pod):
        """What makes ``pod`` one of ours (kept beside it), or None for a pod that is not."""
        raise NotImplementedError

    def forget(self, uid):
        """A pod of ours stopped running or went: drop what was kept about it besides the pod."""

    def reconcile(self, name):
        raise NotImplementedError

    def pods_on(self, name):
        """``[(pod, match)]`` of our Running pods on node ``name``."""
        return [(pod, found) for pod, found in self.pods.values() if (pod.get("spec") or {}).get("nodeName") == name]

    def remember(self, response):
        """Take the node a patch returned as the current one (its older watch events are then ignored)."""
        data = getattr(response, "data", None)
        if data:
            obj = json.loads(data)
            self.nodes[obj["metadata"]["name"]] = obj

    def handle(self, kind, etype, obj):
        affected = set()
        if kind == "nodes":
            if etype == "SYNC":
                self.nodes = {n["metadata"]["name"]: n for n in obj}
                affected.update(self.nodes)
            elif etype == "DELETED":
                self.nodes.pop(obj["metadata"]["name"], None)
            else:
                known = self.nodes.get(obj["metadata"]["name"])
                if known is not None and _rv(obj) < _rv(known):
                    return  # older than our own patch
                self.nodes[obj["metadata"]["name"]] = obj
                affected.add(obj["metadata"]["name"])
        elif kind == "pods":
            if etype == "SYNC":
                affected.update((p.get("spec") or {}).get("nodeName") for p, _m in self.pods.values())
                for uid in list(self.pods):
                    self.forget(uid)
                self.pods = {}
            for pod in obj if etype == "SYNC" else [obj]:
                found = self.match(pod)
                if found is None:
                    continue
                uid = pod["metadata"]["uid"]
                old = self.pods.pop(uid, None)
                if old is not None:
                    affected.add((old[0].get("spec") or {}).get("nodeName"))
                if etype != "DELETED" and pod_running(pod):
                    self.pods[uid] = (pod, found)
                else:
                    self.forget(uid)
                affected.add((pod.get("spec") or {}).get("nodeName"))
        else:
            return
        if etype == "SYNC":
            self.synced.add(kind)
        if {"nodes", "pods"} <= self.synced:
            for name in sorted(n for n in affected if n):
                try:
                    self.reconcile(name)
                except ApiException as exc:
                    LOG.warning("node %s: API error while playing %s: %s %s", name, self.what, exc.status, exc.reason)
