# SPDX-License-Identifier: GPL-3.0-or-later
"""A stand-in for the Kubernetes client of the vendor device plugin modules (AMD, Intel): records every write, serves
a set of nodes to the node labeller (core API) and to ``list``."""

import copy
import json


class _Response(object):
    def __init__(self, obj):
        self.data = json.dumps(obj)


class FakeCore(object):
    """``list_node``/``read_node``/``patch_node`` over ``nodes`` (name -> plain API JSON)."""

    def __init__(self, nodes, writes):
        self.nodes = nodes
        self.writes = writes

    def list_node(self, **_kwargs):
        return _Response({"items": [copy.deepcopy(n) for n in self.nodes.values()], "metadata": {}})

    def read_node(self, name, **_kwargs):
        return _Response(copy.deepcopy(self.nodes[name]))

    def patch_node(self, name, body, **kwargs):
        self.writes.append(("patch_node", name, body, kwargs.get("dry_run")))
        node = self.nodes[name]
        if not kwargs.get("dry_run"):
            labels = node.setdefault("metadata", {}).setdefault("labels", {})
            new = (body.get("metadata") or {}).get("labels") or {}
            if kwargs.get("field_manager"):  # server-side apply of exactly our labels
                manager = kwargs["field_manager"]
                owned = set()
                for entry in node["metadata"].get("managedFields") or []:
                    if entry.get("manager") == manager:
                        owned = set(k[2:] for k in entry["fieldsV1"]["f:metadata"]["f:labels"])
                for key in owned - set(new):
                    labels.pop(key, None)
                labels.update(new)
                node["metadata"]["managedFields"] = [e for e in node["metadata"].get("managedFields") or []
                                                     if e.get("manager") != manager]
                if new:
                    node["metadata"]["managedFields"].append({"manager": manager, "operation": "Apply", "fieldsV1": {
                        "f:metadata": {"f:labels": dict(("f:" + k, {}) for k in new)}}})
            else:
                for key, value in new.items():
                    if value is None:
                        labels.pop(key, None)
                    else:
                        labels[key] = value
        return _Response(copy.deepcopy(node))


def node(name, labels=None):
    return {"metadata": {"name": name, "labels": dict(labels or {})}, "status": {"allocatable": {}}}


class FakeClient(object):
    """Records writes; ``live`` maps ``Kind/namespace/name`` -> object; ``nodes`` name -> node."""

    def __init__(self, live=None, nodes=None):
        self.live = live or {}
        self.writes = []
        self.nodes = nodes if nodes is not None else {}
        self.core = FakeCore(self.nodes, self.writes)
        self.clock = lambda: 0

    def get(self, api_version, kind, name, namespace=None):
        return self.live.get("/".join(p for p in (kind, namespace, name) if p))

    def apply(self, obj, dry_run=False):
        self.writes.append(("apply", obj["kind"], dry_run))
        return "created", None, obj

    def list(self, api_version, kind, namespace=None, label_selector=None, field_selector=None):
        if kind == "Node":
            return [copy.deepcopy(n) for n in self.nodes.values()]
        return [copy.deepcopy(o) for key, o in self.live.items() if key.split("/")[0] == kind and key.count("/") >= 1
                and (o.get("metadata") or {}).get("labels", {}).get("app.kubernetes.io/managed-by") == "kubegpu.cluster"]

    def delete(self, api_version, kind, name, namespace=None, dry_run=False):
        self.writes.append(("delete", kind, name, dry_run))
        return True

    def wait(self, *args, **kwargs):
        raise AssertionError("no wait expected")
