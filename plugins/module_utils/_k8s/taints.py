# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""One taint of ours on many nodes, added or removed without touching anyone else's.

``spec.taints`` is one list that several writers share (the node lifecycle controller, the cloud provider, admins),
and a server-side apply of it would take the whole list over. So each change is a JSON patch that tests what it
changes: an add tests the resourceVersion it was computed from, a removal tests the entry at the index it removes.
When another writer got there first the server refuses (409 or 422), the node is read again and the patch computed
again, a few times at most. Nodes are patched in parallel, like the labels (node_labels.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import K8sError
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import parallel

JSON_PATCH = "application/json-patch+json"
ATTEMPTS = 5
# The readiness gate (device_plugin_deploy and gpu_proof readiness_taint): a node that becomes a GPU node in our labels
# is tainted until a proof passed on it, so that no workload lands on a half-configured node. Our operands and the
# proof tolerate it.
READINESS_TAINT = {"key": "kubegpu.cluster/gpu-unproven", "value": "true", "effect": "NoSchedule"}
READINESS_TOLERATION = {"key": READINESS_TAINT["key"], "operator": "Exists", "effect": READINESS_TAINT["effect"]}


def _taints(node):
    return list(((node or {}).get("spec") or {}).get("taints") or [])


def has(node, taint):
    """Whether ``node`` carries a taint of ``taint``'s key and effect (whatever its value)."""
    return any(t.get("key") == taint["key"] and t.get("effect") == taint["effect"] for t in _taints(node))


def patch(node, taint, present):
    """The JSON patch that brings ``taint`` to ``present`` on ``node`` (a plain API dict), or None when it is so."""
    taints = _taints(node)
    if present:
        if has(node, taint):
            return None
        version = (node.get("metadata") or {}).get("resourceVersion")
        ops = [{"op": "test", "path": "/metadata/resourceVersion", "value": version}] if version else []
        if taints:
            return ops + [{"op": "add", "path": "/spec/taints/-", "value": dict(taint)}]
        return ops + [{"op": "add", "path": "/spec/taints", "value": [dict(taint)]}]
    ops = []
    for index in reversed(range(len(taints))):  # from the end, so that each index still points where it was read
        entry = taints[index]
        if entry.get("key") == taint["key"] and entry.get("effect") == taint["effect"]:
            ops += [{"op": "test", "path": "/spec/taints/%d" % index, "value": entry},
                    {"op": "remove", "path": "/spec/taints/%d" % index}]
    return ops or None


def api_error_text(exc):
    """client.api_error_text, imported only when an API call failed: this file's pure part (``has``, ``patch``) is
    used by the proof_settled filter, which must not load the kubernetes client."""
    from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import client  # pylint: disable=import-outside-toplevel
    return client.api_error_text(exc)


def _failed(message, name, status):
    """The error of one node, with the HTTP status that decides whether the other nodes are still tried
    (:func:`.parallel.server_gone`)."""
    failed = K8sError(message, node=name)
    failed.status = status
    return failed


def _read(core, name):
    try:
        return json.loads(core.read_node(name).data)
    except Exception as exc:  # pylint: disable=broad-except
        raise _failed("reading node %s: %s" % (name, api_error_text(exc)), name, getattr(exc, "status", None))


def _ensure(core, name, node, taint, present):
    """Patch one node until it is as asked; True when a patch was sent."""
    for _attempt in range(ATTEMPTS):
        ops = patch(node, taint, present)
        if ops is None:
            return False
        try:
            core.patch_node(name, ops, _content_type=JSON_PATCH)
            return True
        except Exception as exc:  # pylint: disable=broad-except
            if getattr(exc, "status", None) not in (409, 422):
                action = "adding" if present else "removing"
                raise _failed("%s taint %s on node %s: %s" % (action, taint["key"], name, api_error_text(exc)),
                              name, getattr(exc, "status", None))
        node = _read(core, name)  # another writer changed the node since it was read: compute the patch again
    raise _failed("node %s: the taint %s kept changing under other writers; run again" % (name, taint["key"]),
                  name, 409)


def ensure(core, nodes, taint, present, check_mode=False, concurrency=8):
    """Bring ``taint`` to ``present`` on each of ``nodes`` (``{name: the node as last read}``); returns the sorted
    names that needed a change (patched, or in check mode that would be)."""
    todo = sorted(name for name, node in nodes.items() if patch(node, taint, present) is not None)
    if check_mode or not todo:
        return todo
    _done, errors, not_started = parallel.each_node(
        todo, lambda name: _ensure(core, name, nodes[name], taint, present), concurrency)
    if errors and not_started:  # what is half done: the nodes left alone once the server stopped answering
        raise _failed("%s (%d node(s) not tried after it)" % (errors[0], len(not_started)),
                      errors[0].details.get("node"), getattr(errors[0], "status", None))
    if errors:
        raise errors[0]
    return todo
