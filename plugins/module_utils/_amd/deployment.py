# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The work of ``amd_device_plugin_deploy``: AMD's part (options, expected resources, labels, objects, what
``state=absent`` also removes) of :func:`.._k8s.vendor_plugin.run`."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import OptionError
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import vendor_plugin
from ansible_collections.kubegpu.cluster.plugins.module_utils._amd import allocatable, labels, manifests
from ansible_collections.kubegpu.cluster.plugins.module_utils._amd.constants import (
    APP_NAME, DEFAULT_RESOURCE_NAMING_STRATEGY, DEVICE_PLUGIN_NAMESPACE, LABELLER_FLAGS, LABELLER_NAME,
    LABELS_FIELD_MANAGER, PLUGIN_COMPONENT, RESOURCE_NAMING_STRATEGIES, RESOURCE_PREFIX,
)

HINT = ("Known causes: no amdgpu driver or no /sys/class/kfd on the node (the plugin then registers nothing; check "
        "kubegpu.cluster.gpu_facts' gpu.amd.status); the node lacks the node_selector label "
        "(feature.node.kubernetes.io/amd-gpu=true, set from facts); GPUs in different partition modes with "
        "resource_naming_strategy=single (the plugin exits; use mixed).")


def check(params):
    """AMD's options, before any API call."""
    strategy = params.get("resource_naming_strategy") or DEFAULT_RESOURCE_NAMING_STRATEGY
    if strategy not in RESOURCE_NAMING_STRATEGIES:
        raise OptionError("resource_naming_strategy", "must be one of %s (the plugin exits on %r: 'invalid resource "
                                                      "naming strategy')" % (", ".join(RESOURCE_NAMING_STRATEGIES), strategy))
    flags = params.get("labeller_flags")
    if flags is not None:
        unknown = [f for f in flags if f not in LABELLER_FLAGS]
        if unknown:
            raise OptionError("labeller_flags", "unknown flag(s) %s; the labeller knows %s"
                              % (", ".join(map(str, unknown)), ", ".join(LABELLER_FLAGS)))
    if params.get("labeller_image") is not None and not str(params["labeller_image"]).strip():
        raise OptionError("labeller_image", "must not be empty; leave it out for the default")


def expected(host, facts, params):
    strategy = params.get("resource_naming_strategy") or DEFAULT_RESOURCE_NAMING_STRATEGY
    return allocatable.expected(host, vendor_plugin.gpu_part(facts, "amd"), strategy)


def after_absent(client, objects, check_mode):
    """Once our labeller is gone (its DaemonSet deleted in this run), the labels it wrote go too: it never removes
    them itself. Returns ``labeller_labels_removed`` ({node: [keys]}) and the diff entries."""
    deleted = [o for o in objects.objects if o["kind"] == "DaemonSet" and o["name"] == LABELLER_NAME
               and o["action"] == "deleted"]
    if not deleted:
        return {"labeller_labels_removed": {}}
    removed, diffs = {}, []
    for node in client.list("v1", "Node"):
        found = labels.labeller_labels(node)
        if not found:
            continue
        name = node["metadata"]["name"]
        removed[name] = sorted(found)
        diffs.append({"before_header": "node/%s labels" % name, "after_header": "node/%s labels" % name,
                      "before": found, "after": {}})
        if not check_mode:
            client.core.patch_node(name, {"metadata": {"labels": dict((key, None) for key in found)}},
                                   _content_type="application/merge-patch+json")
    return {"labeller_labels_removed": removed, "extra_diff": diffs}


VENDOR = vendor_plugin.Vendor(
    name="amd", app=APP_NAME, namespace=DEVICE_PLUGIN_NAMESPACE, kinds=manifests.MANAGED_KINDS,
    prefix=RESOURCE_PREFIX, component=PLUGIN_COMPONENT, hint=HINT, field_manager=LABELS_FIELD_MANAGER,
    check=check, expected=expected, labels=labels.labels_for, render=manifests.render, after_absent=after_absent)


def run(params, check_mode=False, want_diff=False, client=None, client_factory=None):
    """The module's work; returns its result dict."""
    return vendor_plugin.run(params, VENDOR, check_mode=check_mode, want_diff=want_diff, client=client,
                             client_factory=client_factory)
