# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The work of ``intel_device_plugin_deploy``: Intel's part (options, expected resources, labels, objects) of
:func:`.._k8s.vendor_plugin.run`."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import K8sError, OptionError
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import vendor_plugin
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.objects import CRD_API_VERSION, CRD_KIND
from ansible_collections.kubegpu.cluster.plugins.module_utils._nfd.constants import CRD_NODE_FEATURE_RULES
from ansible_collections.kubegpu.cluster.plugins.module_utils._intel import allocatable, labels, manifests
from ansible_collections.kubegpu.cluster.plugins.module_utils._intel.constants import (
    ALLOCATION_POLICIES, APP_NAME, DEFAULT_ALLOCATION_POLICY, DEFAULT_SHARED_DEV_NUM, DEVICE_PLUGIN_NAMESPACE,
    LABELS_FIELD_MANAGER, PLUGIN_COMPONENT, RESOURCE_PREFIX,
)

HINT = ("Known causes: neither i915 nor xe bound to the cards (the plugin finds nothing in /sys/class/drm; check "
        "kubegpu.cluster.gpu_facts' gpu.intel.status); the node lacks the node_selector label "
        "(intel.feature.node.kubernetes.io/gpu=true, set from facts); an invalid -shared-dev-num or "
        "-allocation-policy (the plugin exits).")


def check(params):
    """Intel's options, before any API call (the plugin's own checks in gpu_plugin.go main())."""
    shared = params.get("shared_dev_num")
    if shared is not None and (not isinstance(shared, int) or isinstance(shared, bool) or shared < 1):
        raise OptionError("shared_dev_num", "must be a whole number of at least 1, got %r (the plugin exits: 'The "
                                            "number of containers sharing the same GPU must greater than zero')" % (shared,))
    policy = params.get("allocation_policy") or DEFAULT_ALLOCATION_POLICY
    if policy not in ALLOCATION_POLICIES:
        raise OptionError("allocation_policy", "must be one of %s, got %r (the plugin exits on any other)"
                          % (", ".join(ALLOCATION_POLICIES), policy))


def expected(host, facts, params):
    return allocatable.expected(host, vendor_plugin.gpu_part(facts, "intel"),
                                params.get("shared_dev_num") or DEFAULT_SHARED_DEV_NUM,
                                bool(params.get("enable_monitoring")))


def kinds_for(params, client):
    """The DaemonSet's kind, and the NodeFeatureRule's where NFD's CRDs are served (so that a rule of an earlier run
    is pruned or removed). ``nfd_rule`` without those CRDs fails here, before any change."""
    served = client.get(CRD_API_VERSION, CRD_KIND, CRD_NODE_FEATURE_RULES) is not None
    if params.get("nfd_rule") and params.get("state") != "absent" and not served:
        raise K8sError("nfd_rule needs node feature discovery's CRDs (%s is not served): deploy NFD first "
                       "(kubegpu.cluster.node_feature_discovery), or leave nfd_rule off - the module labels the "
                       "nodes from their facts either way" % CRD_NODE_FEATURE_RULES)
    return manifests.MANAGED_KINDS + (manifests.NFD_RULE_KINDS if served else ())


VENDOR = vendor_plugin.Vendor(
    name="intel", app=APP_NAME, namespace=DEVICE_PLUGIN_NAMESPACE, kinds=manifests.MANAGED_KINDS,
    prefix=RESOURCE_PREFIX, component=PLUGIN_COMPONENT, hint=HINT, field_manager=LABELS_FIELD_MANAGER,
    check=check, expected=expected, labels=labels.labels_for, render=manifests.render, kinds_for=kinds_for)


def run(params, check_mode=False, want_diff=False, client=None, client_factory=None):
    """The module's work; returns its result dict."""
    return vendor_plugin.run(params, VENDOR, check_mode=check_mode, want_diff=want_diff, client=client,
                             client_factory=client_factory)
