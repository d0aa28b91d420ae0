# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""GPU node labels: what a node's ``gpu`` fact means as labels (pure functions), and applying them to every node
of a cluster with server-side apply, one LIST and parallel PATCHes (the client layer)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re
import threading
import traceback

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.kubegpu.cluster.plugins.module_utils import _k8s

try:
    from kubernetes import client as k8s_client
    from kubernetes.client.rest import ApiException
    KUBERNETES_IMPORT_ERROR = None
except ImportError:
    k8s_client = None
    KUBERNETES_IMPORT_ERROR = traceback.format_exc()

    class ApiException(Exception):  # stand-in so that ``except ApiException`` works without the library
        status = None

try:
    from urllib3.exceptions import HTTPError as _Urllib3Error
except ImportError:  # pragma: no cover - urllib3 comes with the kubernetes client
    class _Urllib3Error(Exception):
        pass


FIELD_MANAGER = "kubegpu.cluster/labels"

GPU_PRESENT = "nvidia.com/gpu.present"
GPU_PRODUCT = "nvidia.com/gpu.product"
GPU_COUNT = "nvidia.com/gpu.count"
GPU_MEMORY = "nvidia.com/gpu.memory"
DRIVER_MAJOR = "nvidia.com/cuda.driver-version.major"
DRIVER_MINOR = "nvidia.com/cuda.driver-version.minor"
DRIVER_REVISION = "nvidia.com/cuda.driver-version.revision"
DRIVER_FULL = "nvidia.com/cuda.driver-version.full"
RUNTIME_MAJOR = "nvidia.com/cuda.runtime-version.major"
RUNTIME_MINOR = "nvidia.com/cuda.runtime-version.minor"
RUNTIME_FULL = "nvidia.com/cuda.runtime-version.full"

LABEL_VALUE_MAX = 63
_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_NAME_RE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

RETRY_STATUSES = frozenset((409, 429, 500, 502, 503, 504))
LIST_PAGE_SIZE = 500


class NodeLabelsError(Exception):
    """Base of the errors this module util raises; the message is meant for the user as it is."""


class FactsError(NodeLabelsError):
    """A node's ``gpu`` fact is missing or not what gpu_facts returns."""


class OptionsError(NodeLabelsError):
    """An option value the argument spec cannot check (a label key, a node name mapping)."""


class MissingNodesError(NodeLabelsError):
    """Nodes asked for are not in the cluster."""


class ClusterError(NodeLabelsError):
    """The API server could not be reached or refused a request, after retries."""

    def __init__(self, msg, node=None, status=None):
        super(ClusterError, self).__init__(msg)
        self.node = node
        self.status = status


# ---------------------------------------------------------------------------------------------------------------
# Pure functions: facts -> labels, and what a node's current state means for them.


def is_valid_label_value(value):
    return isinstance(value, str) and len(value) <= LABEL_VALUE_MAX and bool(_LABEL_VALUE_RE.match(value))


def is_valid_label_key(key):
    """Whether ``key`` is a valid label key: an optional DNS subdomain prefix and '/', then a name."""
    if not isinstance(key, str) or not key:
        return False
    prefix, sep, name = key.rpartition("/")
    if sep and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN_RE.match(prefix)):
        return False
    return len(name) <= LABEL_VALUE_MAX and bool(_LABEL_NAME_RE.match(name))


def sanitize_label_value(text):
    """Turn any text into a valid label value the way GPU feature discovery writes ``gpu.product``.

    Characters other than letters, digits, ``-``, ``_``, ``.`` and blanks are dropped, runs of blanks become one
    ``-`` (``Tesla V100-PCIE-16GB`` -> ``Tesla-V100-PCIE-16GB``), then the value is cut to 63 characters and
    stripped of leading and trailing characters that are not alphanumeric. May return ``""``.
    """
    kept = re.sub(r"[^A-Za-z0-9_.\s-]", "", text or "", flags=re.ASCII)
    value = "-".join(kept.split())
    value = re.sub(r"^[^A-Za-z0-9]+", "", value)
    value = value[:LABEL_VALUE_MAX]
    return re.sub(r"[^A-Za-z0-9]+$", "", value)


def split_driver_version(version):
    """``510.47.03`` -> ``("510", "47", "03")``; ``390.30`` -> ``("390", "30", None)``; anything else -> None.

    Parts are kept as text (GFD keeps ``03``, not ``3``).
    """
    if not isinstance(version, str):
        return None
    parts = version.strip().split(".", 2)
    if len(parts) < 2 or not all(parts) or not all(is_valid_label_value(part) for part in parts):
        return None
    return parts[0], parts[1], parts[2] if len(parts) == 3 else None


def primary_device(facts):
    """The GPU whose model names the node: the first one (NVML index order) with a name.

    Nodes with mixed models are labelled after their first GPU, as GFD does for the whole node.
    """
    for device in facts.get("devices") or []:
        if isinstance(device, Mapping) and device.get("name"):
            return device
    return None


def has_gpu(facts):
    """A node has GPUs for labelling when its facts say so and NVML counted at least one."""
    try:
        count = int(facts.get("count") or 0)
    except (TypeError, ValueError):
        count = 0
    return bool(facts.get("present")) and count > 0


def check_facts(node, facts):
    """Raise FactsError unless ``facts`` looks like the ``gpu`` fact of gpu_facts."""
    if not isinstance(facts, Mapping) or "present" not in facts:
        raise FactsError(
            "node %s: the value is not a gpu fact (a dict with 'present', 'count', 'devices', ... as "
            "kubegpu.cluster.gpu_facts returns it); got %s. Were facts gathered on that host?"
            % (node, type(facts).__name__ if not isinstance(facts, Mapping) else "a dict without 'present'"))


def labels_for_facts(facts, accelerator_label="accelerator"):
    """The labels a node with this ``gpu`` fact should carry (all values valid label values); ``{}`` for no GPU."""
    if not has_gpu(facts):
        return {}
    labels = {GPU_PRESENT: "true", GPU_COUNT: str(int(facts["count"]))}
    device = primary_device(facts)
    if device is not None:
        product = sanitize_label_value(device["name"])
        if product:
            labels[GPU_PRODUCT] = product
        memory = device.get("memory_total_mib")
        if isinstance(memory, int) and not isinstance(memory, bool) and memory >= 0:
            labels[GPU_MEMORY] = str(memory)
        slug = device.get("product_slug")
        if accelerator_label and slug and is_valid_label_value(slug):
            labels[accelerator_label] = slug
    driver = split_driver_version(facts.get("driver_version"))
    if driver is not None:
        labels[DRIVER_MAJOR], labels[DRIVER_MINOR] = driver[0], driver[1]
        if driver[2] is not None:
            labels[DRIVER_REVISION] = driver[2]
        labels[DRIVER_FULL] = ".".join(part for part in driver if part is not None)
    cuda = split_driver_version(facts.get("cuda_driver_version"))
    if cuda is not None and cuda[2] is None:
        labels[RUNTIME_MAJOR], labels[RUNTIME_MINOR] = cuda[0], cuda[1]
        labels[RUNTIME_FULL] = "%s.%s" % cuda[:2]
    return labels


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


def plan_node(node, wanted, field_manager=FIELD_MANAGER):
    """Compare what a node carries with the labels ``wanted`` from our field manager.

    Returns a dict: ``patch`` (whether an apply request is needed: values differ, or our set of owned labels is not
    exactly ``wanted``), ``labels_set`` (label -> new value, for labels whose value changes or that appear),
    ``labels_removed`` (our labels that no other manager keeps, so the apply removes them), ``before`` and
    ``after`` (the node's values of every label involved).
    """
    labels = (node.get("metadata") or {}).get("labels") or {}
    owners = label_owners(node)
    ours = set(key for key, managers in owners.items() if field_manager in managers)
    labels_set = dict((key, value) for key, value in wanted.items() if labels.get(key) != value)
    removed = sorted(key for key in ours - set(wanted) if key in labels and not (owners[key] - set([field_manager])))
    involved = set(wanted) | set(removed)
    before = dict((key, labels[key]) for key in involved if key in labels)
    after = dict((key, value) for key, value in before.items() if key not in removed)
    after.update(wanted)
    return {
        "patch": bool(labels_set or removed or ours != set(wanted)),
        "labels_set": labels_set,
        "labels_removed": removed,
        "before": before,
        "after": after,
    }


def apply_body(name, labels):
    """The server-side apply patch for a node's labels (``labels`` empty releases every label we own)."""
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": dict(labels)}}


def resolve_node_names(nodes, node_names):
    """Map inventory names to node names; raise OptionsError when two hosts map to one node."""
    resolved = {}
    for host in nodes:
        name = (node_names or {}).get(host, host)
        if not isinstance(name, str) or not name:
            raise OptionsError("node_names[%s] must be a non-empty string" % host)
        if name in resolved:
            raise OptionsError("hosts %s and %s both map to node %s" % (resolved[name], host, name))
        resolved[name] = host
    return resolved


# ---------------------------------------------------------------------------------------------------------------
# The client layer.


def core_api(kubeconfig=None, context=None, pool_size=8):
    """The core API, connected the collection's one way (``_k8s.connect``) with a connection pool as wide as our
    parallel patches."""
    try:
        return k8s_client.CoreV1Api(_k8s.connect(kubeconfig, context, pool_size=pool_size))
    except _k8s.K8sError as exc:
        raise ClusterError(str(exc))


def _retry_after(exc, default):
    headers = getattr(exc, "headers", None) or {}
    try:
        return min(float(headers.get("Retry-After")), 10.0)
    except (TypeError, ValueError):
        return default


class NodeLabeller(object):
    """Lists nodes and applies labels, with bounded retries. ``core`` is a CoreV1Api (or a stand-in in tests);
    ``wait(seconds)`` waits between retries."""

    def __init__(self, core, field_manager=FIELD_MANAGER, timeout=30, retries=4, backoff=0.5, wait=None):
        self.core = core
        self.field_manager = field_manager
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.wait = wait or threading.Event().wait

    def _call(self, what, node, func, *args, **kwargs):
        delay = self.backoff
        attempt = 0
        while True:
            attempt += 1
            try:
                response = func(*args, _preload_content=False, _request_timeout=self.timeout, **kwargs)
                return json.loads(response.data)
            except ApiException as exc:
                retriable = exc.status in RETRY_STATUSES or not exc.status
                error = _k8s.api_error_text(exc)
                status = exc.status
                pause = _retry_after(exc, delay)
            except (_Urllib3Error, OSError) as exc:
                retriable, error, status, pause = True, "connection error: %s" % exc, None, delay
            if not retriable or attempt > self.retries:
                raise ClusterError("%s%s failed after %d attempt(s): %s"
                                   % (what, " of node %s" % node if node else "", attempt, error), node=node, status=status)
            self.wait(pause)
            delay = min(delay * 2, 8.0)

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

    def apply(self, name, labels, dry_run=False):
        """Server-side apply of ``labels`` (only) on node ``name``; returns the node as the server has it."""
        kwargs = {"field_manager": self.field_manager, "force": True,
                  "_content_type": "application/apply-patch+yaml"}
        if dry_run:
            kwargs["dry_run"] = "All"
        return self._call("applying labels", name, self.core.patch_node, name, apply_body(name, labels), **kwargs)


def run(params, labeller, check_mode=False, want_diff=False):
    """Label the nodes in ``params`` (the module's options); return the module result."""
    accelerator_label = params.get("accelerator_label") or ""
    if accelerator_label and not is_valid_label_key(accelerator_label):
        raise OptionsError("accelerator_label %r is not a valid Kubernetes label key" % accelerator_label)
    state = params.get("state") or "present"
    nodes = params.get("nodes")
    if nodes is None and state == "present":
        raise OptionsError("nodes is required with state=present")

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
        raise MissingNodesError(
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
            check_facts(hosts[name], facts)
            wanted = labels_for_facts(facts, accelerator_label)
        plans[name] = (wanted, plan_node(existing[name], wanted, labeller.field_manager))

    to_patch = sorted(name for name, (wanted, plan) in plans.items() if plan["patch"])
    applied = {}
    if to_patch and not check_mode:
        workers = max(1, min(int(params.get("concurrency") or 8), len(to_patch)))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = dict((name, pool.submit(labeller.apply, name, plans[name][0])) for name in to_patch)
            errors = []
            for name in to_patch:
                try:
                    applied[name] = futures[name].result()
                except ClusterError as exc:
                    errors.append(exc)
        if errors:
            done = sorted(applied)
            raise ClusterError("%s%s" % ("; ".join(str(exc) for exc in errors[:10]),
                                         " (%d node(s) were labelled before the error)" % len(done) if done else ""),
                               node=errors[0].node, status=errors[0].status)

    result_nodes = {}
    diffs = []
    summary = {"total": len(targets), "changed": 0, "unchanged": 0, "missing": len(missing)}
    for name in sorted(targets):
        if name in missing:
            result_nodes[name] = {"status": "missing", "labels": {}, "labels_set": {}, "labels_removed": []}
            continue
        wanted, plan = plans[name]
        if name in applied:  # what the server now has, in case another writer raced us
            plan = dict(plan, after=dict((key, value) for key, value in
                                         ((applied[name].get("metadata") or {}).get("labels") or {}).items()
                                         if key in plan["before"] or key in plan["after"]))
        changed = bool(plan["labels_set"] or plan["labels_removed"])
        summary["changed" if changed else "unchanged"] += 1
        result_nodes[name] = {"status": "changed" if changed else "unchanged", "labels": wanted,
                              "labels_set": plan["labels_set"], "labels_removed": plan["labels_removed"]}
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


def failure(exc):
    """The fail_json arguments for an exception: typed errors are the message, anything else a bug with traceback."""
    if isinstance(exc, NodeLabelsError):
        result = {"msg": str(exc)}
        if isinstance(exc, ClusterError) and exc.node:
            result["node"] = exc.node
        return result
    return {"msg": "unexpected error: %s: %s" % (type(exc).__name__, exc), "exception": traceback.format_exc()}
