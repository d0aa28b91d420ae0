# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The work of a vendor's device plugin module beside NVIDIA's (``amd_device_plugin_deploy``,
``intel_device_plugin_deploy``), vendor-neutral: check the options and the facts (before any API call), label the
vendor's nodes under the vendor's own field manager (:mod:`.node_labels`), apply the rendered objects as one
:class:`.objectset.ObjectSet`, wait (bounded watches) for the rollout and for every node to advertise what its facts
say; with ``state=absent`` remove the objects, wait for the pods and for the vendor's resources to go, and remove our
labels. A vendor package describes itself with a :class:`Vendor`."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from collections.abc import Mapping

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import K8sError, OptionError, WaitTimeout
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import client as k8s_client, node_labels
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import objects as k8s_objects
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.names import is_valid_label_key, is_valid_label_value
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.objectset import ObjectSet
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.vendor_args import DEFAULT_WAIT_TIMEOUT


class Vendor(object):
    """What a vendor package gives the shared work.

    ``name``: ``amd``, the key of its part of the ``gpu`` fact. ``app``, ``namespace``, ``kinds``: the object set's
    (:class:`.objectset.ObjectSet`). ``prefix``: the resources' prefix (``amd.com``). ``component``/``hint``: the
    plugin pods' component label and what a timed-out wait adds. ``field_manager``: the node labels' own field
    manager. ``check(params)``: raises :class:`OptionError` for the vendor's options. ``expected(host, facts,
    params)``: ``{resource: count}`` the host's node must advertise (``{}`` for a host without the vendor's GPUs; raises
    :class:`OptionError` naming the host where the plugin would advertise nothing or exit). ``labels(host, facts,
    params)``: our labels of the host. ``render(params)``: the objects, in apply order. ``after_absent(client,
    objects, check_mode)``: what else ``state=absent`` removes (a dict merged into the result), optional.
    ``kinds_for(params, client)``: the kinds when they depend on what the cluster serves, optional.
    """

    def __init__(self, **attrs):
        self.after_absent = None
        self.kinds_for = None
        for key, value in attrs.items():
            setattr(self, key, value)


def gpu_part(facts, vendor):
    """The vendor's part of a host's ``gpu`` fact (``gpu.amd``), or ``{}``."""
    part = (facts or {}).get(vendor) if isinstance(facts, Mapping) else None
    return part if isinstance(part, Mapping) else {}


def vendor_count(facts, vendor):
    """How many of the vendor's GPUs a host's ``gpu`` fact counts (0 when none, or no such key)."""
    try:
        return int(gpu_part(facts, vendor).get("count") or 0)
    except (TypeError, ValueError):
        return 0


def check_common(params):
    """The options every vendor module shares, checked before any API call; raises :class:`OptionError` naming the
    option."""
    facts = params.get("facts") or {}
    if not isinstance(facts, Mapping):
        raise OptionError("facts", "must be a dict of inventory host to its gpu fact")
    for host, fact in facts.items():
        if not isinstance(fact, Mapping):
            raise OptionError("facts", "host %s: the value is not a gpu fact (a dict as kubegpu.cluster.gpu_facts "
                                       "returns it) but %s; were facts gathered on that host?"
                              % (host, type(fact).__name__))
    for key, value in (params.get("node_selector") or {}).items():
        if not is_valid_label_key(str(key)):
            raise OptionError("node_selector", "%r is not a valid label key" % (key,))
        if not isinstance(value, str) or not is_valid_label_value(value):
            raise OptionError("node_selector", "the value of %s must be a valid label value (a string, quoted in "
                                               "YAML: \"true\"), not %r" % (key, value))
    for index, toleration in enumerate(params.get("tolerations") or []):
        if not isinstance(toleration, Mapping):
            raise OptionError("tolerations", "item %d is not a dict" % index)
        unknown = sorted(set(toleration) - set(("key", "operator", "value", "effect", "tolerationSeconds")))
        if unknown:
            raise OptionError("tolerations", "item %d has unknown field(s) %s (a toleration has key, operator, value, "
                                             "effect, tolerationSeconds)" % (index, ", ".join(unknown)))
    if params.get("wait_timeout") is not None and params["wait_timeout"] <= 0:
        raise OptionError("wait_timeout", "must be a positive number of seconds, got %s" % params["wait_timeout"])
    for name in ("image",):
        if params.get(name) is not None and not str(params[name]).strip():
            raise OptionError(name, "must not be empty; leave it out for the default")
    node_names = params.get("node_names") or {}
    for host, name in node_names.items():
        if not isinstance(name, str) or not name:
            raise OptionError("node_names", "the node name of %s must be a non-empty string" % host)


def plan(params, vendor):
    """``(expected by node name, the hosts handled)`` from ``facts``, every option checked; raises before any API call."""
    check_common(params)
    vendor.check(params)
    node_names = params.get("node_names") or {}
    expected, hosts, errors = {}, {}, []
    for host, fact in sorted((params.get("facts") or {}).items()):
        if vendor_count(fact, vendor.name) <= 0:
            continue
        try:
            want = vendor.expected(host, fact, params)
        except OptionError as exc:
            errors.append(exc)
            continue
        node = node_names.get(host) or host
        if node in hosts:
            raise OptionError("node_names", "hosts %s and %s both map to node %s" % (hosts[node], host, node))
        hosts[node] = host
        expected[node] = want
    if errors:  # every host named at once; the option is the errors' own where they agree
        options = set(exc.option for exc in errors)
        raise OptionError(options.pop() if len(options) == 1 else "facts",
                          "; ".join(exc.message.split(": ", 1)[-1] for exc in errors))
    return expected, hosts


def _label_facts(params):
    return params.get("label_facts") if params.get("label_facts") is not None else (params.get("facts") or {})


def label_nodes(params, vendor, client, check_mode=False, want_diff=False):
    """Our labels on the hosts of ``label_facts`` (default ``facts``): the vendor's labels where the host has its
    GPUs, none elsewhere (so a host that lost them loses ours), under the vendor's field manager."""
    label_params = dict(nodes=dict(_label_facts(params)), node_names=params.get("node_names") or {},
                        missing_nodes=params.get("missing_nodes") or "fail", state="present", accelerator_label="")

    def labels_for(host, facts, _accelerator_label):
        return vendor.labels(host, facts, params) if vendor_count(facts, vendor.name) > 0 else {}

    labeller = node_labels.NodeLabeller(client.core, field_manager=vendor.field_manager)
    return node_labels.run(label_params, labeller, labels_for, check_mode=check_mode, want_diff=want_diff)


def unlabel_nodes(vendor, client, check_mode=False, want_diff=False):
    """Every label of the vendor's field manager off every node."""
    labeller = node_labels.NodeLabeller(client.core, field_manager=vendor.field_manager)
    return node_labels.run({"state": "absent", "nodes": None, "accelerator_label": ""}, labeller, None,
                           check_mode=check_mode, want_diff=want_diff)


def advertising(nodes, prefix):
    """``{node: {resource: 0}}`` for every node that advertises some ``prefix/*`` resource above 0."""
    out = {}
    for name, node in (nodes or {}).items():
        have = k8s_objects.allocatable(node, prefix)
        if any(count > 0 for count in have.values()):
            out[name] = dict((res, 0) for res in have)
    return out


def advertising_nodes(client, vendor):
    """``{node: {resource: 0}}`` of the nodes that advertise the vendor's resources now (one LIST)."""
    return advertising(dict((n["metadata"]["name"], n) for n in client.list("v1", "Node")), vendor.prefix)


def wait_resources_gone(client, vendor, timeout, nodes):
    """Watch the nodes (bounded) until none of ``nodes`` advertises the vendor's resources; returns their names."""
    if not nodes:
        return []

    def still(found):
        return sorted(name for name in advertising(found, vendor.prefix) if name in nodes)

    try:
        client.wait("v1", "Node", lambda found: not still(found), timeout)
    except WaitTimeout as exc:
        raise K8sError("timed out after %ss waiting for the %s resources to go from %s: the kubelet still advertises "
                       "them (a plugin of another deployment running there?)"
                       % (timeout, vendor.prefix, ", ".join(still(exc.last or {}))))
    return sorted(nodes)


def run(params, vendor, check_mode=False, want_diff=False, client=None, client_factory=None):
    """The module's work; returns its result dict."""
    present = params.get("state") != "absent"
    expected, hosts = plan(params, vendor) if present else ({}, {})
    if not present:
        check_common(params)
        vendor.check(params)
    rendered = vendor.render(params) if present else None
    if client is None:
        client = (client_factory or k8s_client.from_params)(params)
    namespace = params.get("namespace") or vendor.namespace
    timeout = params.get("wait_timeout") or DEFAULT_WAIT_TIMEOUT
    kinds = vendor.kinds_for(params, client) if vendor.kinds_for else vendor.kinds
    objects = ObjectSet(client, namespace, vendor.app, kinds, check_mode=check_mode, want_diff=want_diff)
    result = {"namespace": namespace, "expected": expected, "nodes": sorted(expected), "resources": {}}
    diffs = []
    labels = None
    if present:
        labels = label_nodes(params, vendor, client, check_mode=check_mode, want_diff=want_diff)
        missing = [name for name, entry in (labels.get("nodes") or {}).items() if entry.get("status") == "missing"]
        for name in missing:  # missing_nodes=skip: nothing to wait for there
            expected.pop(name, None)
        result["nodes"] = sorted(expected)
        applied = objects.present(rendered, timeout=timeout)
        if params.get("wait", True) and not check_mode:
            deadline = objects.wait_rollout(applied, timeout, vendor.component, vendor.hint)
            result["resources"] = objects.wait_allocatable(expected, deadline, vendor.prefix, timeout,
                                                           vendor.component, vendor.hint)
    else:
        waiting = params.get("wait", True) and not check_mode
        before = advertising_nodes(client, vendor) if waiting else {}
        objects.absent(wait=params.get("wait", True), timeout=timeout)
        if vendor.after_absent:
            result.update(vendor.after_absent(client, objects, check_mode))
        labels = unlabel_nodes(vendor, client, check_mode=check_mode, want_diff=want_diff)
        if waiting and objects.changed:
            result["resources_gone"] = wait_resources_gone(client, vendor, timeout, before)
    result["objects"] = objects.objects
    result["labels"] = dict((k, v) for k, v in labels.items() if k not in ("diff", "warnings"))
    extra_changed = bool(result.get("labeller_labels_removed"))
    result["changed"] = objects.changed or bool(labels.get("changed")) or extra_changed
    if labels.get("warnings"):
        result["warnings"] = list(labels["warnings"])
    if want_diff:
        diffs.extend(labels.get("diff") or [])
        diffs.extend(result.pop("extra_diff", None) or [])
        result["diff"] = diffs + [objects.diff] if diffs else objects.diff
    else:
        result.pop("extra_diff", None)
    return result
