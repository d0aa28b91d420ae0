# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""Node labels owned by one field manager, applied to every node of a cluster at once: one paged LIST, then parallel
server-side apply PATCHes of only the nodes whose labels differ, with the collection's retry policy. Which labels a
node gets is the caller's (a vendor's ``labels_for_facts``); this part knows nothing about GPUs. Labels another writer
takes over (GPU feature discovery through NFD) are released: our ownership is dropped, the label stays."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import threading

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import K8sError, OptionError
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import parallel, retry
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.client import TRANSIENT, api_error_text
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.names import is_valid_label_key

FIELD_MANAGER = "kubegpu.cluster/labels"  # the collection's node labels, whatever the vendor
LIST_PAGE_SIZE = 500


def label_owners(node):
    """``{label key: set of field managers}`` from a node's ``metadata.managedFields`` (plain API JSON)."""
    owners = {}
    for entry in (node.get("metadata") or {}).get("managedFields") or []:
        fields = ((entry.get("fieldsV1") or {}).get("f:metadata") or {}).get("f:labels") or {}
        for field in fields:
            if field.startswith("f:"):
                owners.setdefault(field[2:], set()).add(entry.get("manager"))
    return owners


def owned_labels(node, field_manager=FIELD_MANAGER):
    """The labels ``field_manager`` has applied on this node, with their current values."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    owners = label_owners(node)
    return dict((key, labels[key]) for key, managers in owners.items() if field_manager in managers and key in labels)


def plan_node(node, wanted, field_manager=FIELD_MANAGER, soft=(), releases=None):
    """Compare what a node carries with the labels ``wanted`` from our field manager.

    ``soft``: keys of ``wanted`` that are only ours where the node has no such label or already the wanted value (a
    key someone else set to another value is left out, so it is neither overwritten nor, being not ours, removed).
    ``releases(key)``: for a key we own and no longer want, whether to release it (leave the label, give up our
    ownership: another writer now owns it) instead of removing it.

    Returns a dict: ``wanted`` (``wanted`` without the soft keys left out), ``patch`` (whether an apply request is
    needed: values differ, or our set of owned labels is not exactly ``wanted``), ``labels_set`` (label -> new value,
    for labels whose value changes or that appear), ``labels_removed`` (our labels that no other manager keeps, so the
    apply removes them), ``labels_released`` (our labels that are released), ``release`` (the released labels only
    we own: our ownership has to be dropped from ``managedFields`` before the apply, or it would remove them),
    ``before`` and ``after`` (the node's values of every label involved).
    """
    labels = (node.get("metadata") or {}).get("labels") or {}
    owners = label_owners(node)
    ours = set(key for key, managers in owners.items() if field_manager in managers)
    wanted = dict((key, value) for key, value in wanted.items()
                  if key not in soft or labels.get(key, value) == value)
    unwanted = set(key for key in ours - set(wanted) if key in labels)
    released = sorted(key for key in unwanted if releases is not None and releases(key))
    release = [key for key in released if not (owners[key] - set([field_manager]))]
    labels_set = dict((key, value) for key, value in wanted.items() if labels.get(key) != value)
    removed = sorted(key for key in unwanted - set(released) if not (owners[key] - set([field_manager])))
    involved = set(wanted) | set(removed)
    before = dict((key, labels[key]) for key in involved if key in labels)
    after = dict((key, value) for key, value in before.items() if key not in removed)
    after.update(wanted)
    return {
        "wanted": wanted,
        "patch": bool(labels_set or removed or (ours - set(release)) != set(wanted)),
        "labels_set": labels_set,
        "labels_removed": removed,
        "labels_released": released,
        "release": release,
        "before": before,
        "after": after,
    }


def without_ownership(managed_fields, keys, field_manager=FIELD_MANAGER):
    """``metadata.managedFields`` with ``field_manager``'s apply entry no longer owning the labels ``keys`` (entries
    left empty are dropped)."""
    out = []
    for entry in managed_fields or []:
        entry = dict(entry)
        if entry.get("manager") == field_manager and entry.get("operation") == "Apply" and not entry.get("subresource"):
            fields = dict(entry.get("fieldsV1") or {})
            metadata = dict(fields.get("f:metadata") or {})
            owned = dict((k, v) for k, v in (metadata.get("f:labels") or {}).items() if k[2:] not in keys)
            if owned:
                metadata["f:labels"] = owned
            else:
                metadata.pop("f:labels", None)
            if metadata:
                fields["f:metadata"] = metadata
            else:
                fields.pop("f:metadata", None)
            if not fields:
                continue
            entry["fieldsV1"] = fields
        out.append(entry)
    return out


def apply_body(name, labels):
    """The server-side apply patch for a node's labels (``labels`` empty releases every label we own)."""
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": dict(labels)}}


def resolve_node_names(nodes, node_names):
    """Map inventory names to node names; raise OptionError when two hosts map to one node."""
    resolved = {}
    for host in nodes:
        name = (node_names or {}).get(host, host)
        if not isinstance(name, str) or not name:
            raise OptionError("node_names", "the node name of %s must be a non-empty string" % host)
        if name in resolved:
            raise OptionError("node_names", "hosts %s and %s both map to node %s" % (resolved[name], host, name))
        resolved[name] = host
    return resolved


class _Conflict(Exception):
    status = 409


class NodeLabeller(object):
    """Lists nodes and applies labels, retrying with the collection's :class:`.retry.RetryPolicy`. ``core`` is a
    CoreV1Api (``Client.core``, or a stand-in in tests); ``wait(seconds)`` pauses between retries. ``timeout``: each
    request's, None for the client's own bound (``request_timeout``; a request it times out ends the run, unretried:
    :class:`.client.NoAnswer` is not one of the errors retried)."""

    def __init__(self, core, field_manager=FIELD_MANAGER, timeout=None, retries=4, wait=None):
        self.core = core
        self.field_manager = field_manager
        self.timeout = timeout
        self.policy = retry.RetryPolicy(retries)
        self.wait = wait or threading.Event().wait

    def _call(self, what, node, func, *args, **kwargs):
        retry_conflicts = kwargs.pop("retry_conflicts", True)
        attempt = 0
        while True:
            attempt += 1
            try:
                response = func(*args, _preload_content=False, _request_timeout=self.timeout, **kwargs)
                return json.loads(response.data)
            except TRANSIENT as exc:  # pylint: disable=catching-non-exception
                status = getattr(exc, "status", None)
                error = api_error_text(exc) if status else "connection error: %s" % exc
                if not self.policy.should_retry(attempt, exc) or (status == 409 and not retry_conflicts):
                    failed = K8sError("%s%s failed after %d attempt(s): %s"
                                      % (what, " of node %s" % node if node else "", attempt, error), node=node)
                    failed.status = status
                    raise failed
                self.wait(self.policy.pause(attempt, exc))

    def list_nodes(self):
        """Every node as plain API JSON, by name (paged LIST)."""
        found = {}
        token = None
        while True:
            kwargs = {"limit": LIST_PAGE_SIZE}
            if token:
                kwargs["_continue"] = token
            page = self._call("listing nodes", None, self.core.list_node, **kwargs)
            for item in page.get("items") or []:
                found[item["metadata"]["name"]] = item
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return found

    def release(self, name, keys):
        """Drop our ownership of the labels ``keys`` on node ``name`` without touching the labels: a merge patch of
        ``metadata.managedFields`` guarded by the node's ``resourceVersion``, read afresh and retried on a conflict."""
        attempt = 0
        while True:
            attempt += 1
            node = self._call("reading", name, self.core.read_node, name)
            meta = node.get("metadata") or {}
            owned = set(owned_labels(node, self.field_manager))
            if not owned & set(keys):
                return node
            body = {"metadata": {"resourceVersion": meta.get("resourceVersion"),
                                 "managedFields": without_ownership(meta.get("managedFields"), keys, self.field_manager)}}
            try:
                return self._call("releasing labels", name, self.core.patch_node, name, body,
                                  _content_type="application/merge-patch+json", retry_conflicts=False)
            except K8sError as exc:
                if getattr(exc, "status", None) != 409 or not self.policy.should_retry(attempt, _Conflict()):
                    raise
                self.wait(self.policy.pause(attempt))

    def apply(self, name, labels, dry_run=False):
        """Server-side apply of ``labels`` (only) on node ``name``; returns the node as the server has it."""
        kwargs = {"field_manager": self.field_manager, "force": True,
                  "_content_type": "application/apply-patch+yaml"}
        if dry_run:
            kwargs["dry_run"] = "All"
        return self._call("applying labels", name, self.core.patch_node, name, apply_body(name, labels), **kwargs)


def run(params, labeller, labels_for, check_mode=False, want_diff=False, soft=(), releases=None):
    """Label the nodes in ``params`` (the module's options); return the module result.

    ``labels_for(host, facts, accelerator_label)`` gives the labels of one host's facts (a vendor's rule); it raises
    :class:`OptionError` for facts it cannot read, naming the host. ``soft``: see :func:`plan_node`;
    ``releases(host, key)``: :func:`plan_node`'s ``releases`` for that host.
    """
    accelerator_label = params.get("accelerator_label") or ""
    if accelerator_label and not is_valid_label_key(accelerator_label):
        raise OptionError("accelerator_label", "%r is not a valid Kubernetes label key" % accelerator_label)
    state = params.get("state") or "present"
    nodes = params.get("nodes")
    if nodes is None and state == "present":
        raise OptionError("nodes", "is required with state=present")

    existing = labeller.list_nodes()
    warnings = []
    if nodes is None:  # state=absent over the whole cluster: every node where we own labels
        targets = dict((name, None) for name, node in existing.items() if owned_labels(node, labeller.field_manager))
        hosts = dict((name, name) for name in targets)
    else:
        hosts = resolve_node_names(nodes, params.get("node_names"))
        targets = dict((name, nodes[host]) for name, host in hosts.items())

    missing = sorted(name for name in targets if name not in existing)
    if missing and params.get("missing_nodes", "fail") == "fail":
        shown = ", ".join(missing[:20]) + (" and %d more" % (len(missing) - 20) if len(missing) > 20 else "")
        renamed = sorted(hosts[name] for name in missing if hosts[name] != name)
        raise K8sError(
            "%d node(s) not found in the cluster: %s. %s" % (
                len(missing), shown,
                "Check node_names for %s." % ", ".join(renamed) if renamed else
                "If the inventory name of a host differs from its Kubernetes node name, map it with node_names "
                "(inventory name -> node name); to skip nodes not (yet) in the cluster, set missing_nodes=skip."))
    if missing:
        warnings.append("%d node(s) not in the cluster were skipped: %s" % (len(missing), ", ".join(missing)))

    plans = {}
    for name, facts in targets.items():
        if name in missing:
            continue
        if state == "absent":
            wanted = {}
        else:
            wanted = labels_for(hosts[name], facts, accelerator_label)
        released = None if releases is None else (lambda key, host=hosts[name]: releases(host, key))
        plan = plan_node(existing[name], wanted, labeller.field_manager, soft, released)
        plans[name] = (plan["wanted"], plan)

    to_patch = sorted(name for name, (wanted, plan) in plans.items() if plan["patch"] or plan["release"])

    def write(name):
        wanted, plan = plans[name]
        if plan["release"]:
            labeller.release(name, plan["release"])
        return labeller.apply(name, wanted)

    applied = {}
    if to_patch and not check_mode:
        applied, errors, not_started = parallel.each_node(to_patch, write, int(params.get("concurrency") or 8))
        if errors:
            done = sorted(applied)
            messages = []
            for exc in errors:  # one server that stopped answering fails every parallel request with one message
                if str(exc) not in messages:
                    messages.append(str(exc))
            half = ["%d node(s) were labelled before the error" % len(done)] if done else []
            half += ["%d not tried after it" % len(not_started)] if not_started else []
            failed = K8sError("%s%s" % ("; ".join(messages[:10]), " (%s)" % ", ".join(half) if half else ""),
                              node=errors[0].details.get("node"))
            failed.status = getattr(errors[0], "status", None)
            raise failed

    result_nodes = {}
    diffs = []
    summary = {"total": len(targets), "changed": 0, "unchanged": 0, "missing": len(missing)}
    for name in sorted(targets):
        if name in missing:
            result_nodes[name] = {"status": "missing", "labels": {}, "labels_set": {}, "labels_removed": [],
                                  "labels_released": []}
            continue
        wanted, plan = plans[name]
        if name in applied:  # what the server now has, in case another writer raced us
            plan = dict(plan, after=dict((key, value) for key, value in
                                         ((applied[name].get("metadata") or {}).get("labels") or {}).items()
                                         if key in plan["before"] or key in plan["after"]))
        changed = bool(plan["labels_set"] or plan["labels_removed"])
        summary["changed" if changed else "unchanged"] += 1
        result_nodes[name] = {"status": "changed" if changed else "unchanged", "labels": wanted,
                              "labels_set": plan["labels_set"], "labels_removed": plan["labels_removed"],
                              "labels_released": plan["labels_released"]}
        if changed and want_diff:
            diffs.append({"before_header": "node/%s labels" % name, "after_header": "node/%s labels" % name,
                          "before": plan["before"], "after": plan["after"]})
    result = {"changed": summary["changed"] > 0, "nodes": result_nodes, "summary": summary,
              "field_manager": labeller.field_manager}
    if want_diff:
        result["diff"] = diffs
    if warnings:
        result["warnings"] = warnings
    return result
