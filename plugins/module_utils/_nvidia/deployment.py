# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The work of ``device_plugin_deploy``: validate (before any API call), label the GPU nodes when asked (the work of
``gpu_node_labels``, on the same connection), apply or remove the NVIDIA device plugin's objects as one
:class:`.._k8s.objectset.ObjectSet`, and wait for the rollout and for what each node must advertise. It talks to the
cluster only through the client passed in (or made from the options)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import client as k8s_client, node_labels
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.objectset import ObjectSet
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import allocatable, manifests, plugin_config
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.constants import (
    DEFAULT_WAIT_TIMEOUT, DEVICE_PLUGIN_NAMESPACE, APP_NAME, RESOURCE_PREFIX,
)
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.labels import node_rules

NVML_HINT = ("Known causes: the plugin pod cannot load NVML ('Failed to initialize NVML: could not load NVML library') "
             "when the NVIDIA runtime is not the container runtime's default and no RuntimeClass is used (set "
             "runtime_class, or make the runtime the default with kubegpu.cluster.nvidia_runtime_config); no "
             "nvidia.com/gpu.present=true label on the node (node_selector) or an operand deploy label other than true "
             "(nvidia.com/gpu.deploy.*, paused by NVIDIA's MIG manager); with MPS, no MPS control daemon answering "
             "on the node yet (it runs where nvidia.com/mps.capable=true); an invalid sharing config; unhealthy "
             "devices lower allocatable.")
PLUGIN_COMPONENT = "device-plugin"


def label_nodes(params, client, check_mode=False, want_diff=False, wait=None):
    """``gpu_node_labels``' work with ``label_facts`` as its ``nodes`` (the same rules and field manager), on
    ``client``'s connection: a rerun of the device_plugin role saves a module start and a connection."""
    label_params = dict(params, nodes=params["label_facts"], state="present")
    labels_for, soft, releases = node_rules(label_params)  # the plugin configs are checked before any API call
    labeller = node_labels.NodeLabeller(client.core, wait=wait)
    return node_labels.run(label_params, labeller, labels_for, check_mode=check_mode, want_diff=want_diff,
                           soft=soft, releases=releases)


def run(params, check_mode=False, want_diff=False, client=None, client_factory=None):
    """The module's work; returns its result dict."""
    configs = plugin_config.validate(params)
    config = configs[0][1]
    present = params.get("state") != "absent"
    wanted = allocatable.expected(params, config, plugin_config.configs_by_node(params, configs)) if present else {}
    if client is None:
        client = (client_factory or k8s_client.from_params)(params)
    namespace = params.get("namespace") or DEVICE_PLUGIN_NAMESPACE
    timeout = params.get("wait_timeout") or DEFAULT_WAIT_TIMEOUT
    objects = ObjectSet(client, namespace, APP_NAME, manifests.MANAGED_KINDS, check_mode=check_mode,
                        want_diff=want_diff)
    result = {"config": config, "config_hash": plugin_config.config_hash(config), "namespace": namespace,
              "configs": dict(configs), "resources": {}, "expected": wanted}
    labelled = None
    if not present:
        objects.absent(wait=params.get("wait", True), timeout=timeout)
    else:
        if params.get("label_facts") is not None:
            labelled = label_nodes(params, client, check_mode=check_mode, want_diff=want_diff)
            result["labels"] = labelled
        applied = objects.present(manifests.render(params, configs))
        if params.get("wait", True) and not check_mode:
            deadline = objects.wait_rollout(applied, timeout, PLUGIN_COMPONENT, NVML_HINT)
            result["resources"] = objects.wait_allocatable(wanted, deadline, RESOURCE_PREFIX, timeout,
                                                           PLUGIN_COMPONENT, NVML_HINT)
    result["objects"] = objects.objects
    result["changed"] = objects.changed or bool(labelled and labelled.get("changed"))
    label_diff = labelled.pop("diff", []) if labelled else []
    if labelled and labelled.get("warnings"):
        result["warnings"] = labelled.pop("warnings")
    if want_diff:
        result["diff"] = label_diff + [objects.diff] if label_diff else objects.diff
    return result
