# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The work of ``device_plugin_deploy``: validate (before any API call), deploy node feature discovery when asked (the
work of ``node_feature_discovery``) and label the GPU nodes when asked (the work of ``gpu_node_labels``), both on the
same connection, apply or remove the NVIDIA device plugin's objects as one
:class:`.._k8s.objectset.ObjectSet`, and wait for the rollout and for what each node must advertise. It talks to the
cluster only through the client passed in (or made from the options)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import client as k8s_client, node_labels, taints
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.objectset import ObjectSet
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.proof import ANNOTATION_LAST_PROOF
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.taints import READINESS_TAINT, READINESS_TOLERATION
from ansible_collections.kubegpu.cluster.plugins.module_utils._nfd import args as nfd_args, deployment as nfd_deployment
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import allocatable, manifests, plugin_config
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.constants import (
    DEFAULT_TOLERATIONS, DEFAULT_WAIT_TIMEOUT, DEVICE_PLUGIN_NAMESPACE, APP_NAME, LABEL_DEPLOY_DEVICE_PLUGIN,
    LABEL_GPU_PRESENT, RESOURCE_PREFIX,
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


def nodes_seen(nodes):
    """What the proof stage needs of every node the rollout wait saw (``gpu_validation`` decides with it whether any
    proof has to run, without listing the nodes again): name, the last-proof annotation, the ``nvidia.com/*``
    allocatable."""
    seen = []
    for name, node in sorted((nodes or {}).items()):
        annotations = ((node.get("metadata") or {}).get("annotations") or {})
        meta = {"name": name}
        if ANNOTATION_LAST_PROOF in annotations:
            meta["annotations"] = {ANNOTATION_LAST_PROOF: annotations[ANNOTATION_LAST_PROOF]}
        allocatable = ((node.get("status") or {}).get("allocatable") or {})
        entry = {"metadata": meta, "status": {"allocatable": dict(
            (key, value) for key, value in allocatable.items() if key.startswith(RESOURCE_PREFIX + "/"))}}
        if taints.has(node, READINESS_TAINT):  # a node the proof must still clear
            entry["spec"] = {"taints": [dict(READINESS_TAINT)]}
        seen.append(entry)
    return seen


def tolerating(params, nfd):
    """``params`` and ``nfd`` with the readiness taint tolerated by the plugin, GFD and the NFD worker, when the gate
    is on: they must run on a node before its proof can pass."""
    if not params.get("readiness_taint"):
        return params, nfd
    tolerations = list(params.get("tolerations") if params.get("tolerations") is not None else DEFAULT_TOLERATIONS)
    params = dict(params, tolerations=tolerations + [dict(READINESS_TOLERATION)])
    if nfd is not None:
        nfd = dict(nfd, worker_tolerations=list(nfd.get("worker_tolerations") or []) + [dict(READINESS_TOLERATION)])
    return params, nfd


def gate_new_nodes(client, labels, check_mode=False):
    """Taint the nodes the labels just made GPU nodes (``nvidia.com/gpu.present`` set to true in this run): the
    proof stage (gpu_proof readiness_taint) clears each once a proof passed on it. Returns the names."""
    new = sorted(name for name, entry in (labels.get("nodes") or {}).items()
                 if (entry.get("labels_set") or {}).get(LABEL_GPU_PRESENT) == "true")
    if not new:
        return []
    found = dict((n["metadata"]["name"], n) for n in client.list("v1", "Node") if n["metadata"]["name"] in new)
    return taints.ensure(client.core, found, READINESS_TAINT, True, check_mode=check_mode)


def forget(client, check_mode=False):
    """``state=absent``, with one LIST of the nodes: the readiness taint off every node that has it, and the record of
    the last proof (``kubegpu.cluster/last-proof``) off every node that carries one, so that a bring-up after the
    teardown proves its nodes again. Returns ``(untainted, records removed)``."""
    nodes = client.list("v1", "Node")
    gated = dict((n["metadata"]["name"], n) for n in nodes if taints.has(n, READINESS_TAINT))
    untainted = taints.ensure(client.core, gated, READINESS_TAINT, False, check_mode=check_mode) if gated else []
    recorded = sorted(n["metadata"]["name"] for n in nodes
                      if ANNOTATION_LAST_PROOF in ((n.get("metadata") or {}).get("annotations") or {}))
    if not check_mode:
        for name in recorded:
            client.core.patch_node(name, {"metadata": {"annotations": {ANNOTATION_LAST_PROOF: None}}})
    return untainted, recorded


def _merge(result, part, diffs):
    """Fold a part's result (NFD's, the labels') into the module's: its change, its warnings and its diff."""
    result["changed"] = result["changed"] or bool(part.get("changed"))
    result.setdefault("warnings", []).extend(part.pop("warnings", None) or [])
    diff = part.pop("diff", None)
    if diff:
        diffs.extend(diff if isinstance(diff, list) else [diff])


def left_to_others(wanted, params, client):
    """``wanted`` without the nodes the plugin's DaemonSet does not select because their device plugin deploy label is
    ``false``: the plugin is not to run there by an operator's choice (the GPU Operator's convention; a node moved to
    DRA, docs/dra.md). One list of only those nodes (a label selector), not of the fleet. A pause of NVIDIA's MIG
    manager (``paused-for-mig-change``) is waited for as before (the wait names it)."""
    if not wanted or not params.get("deploy_labels", True):
        return wanted
    kept_off = client.list("v1", "Node", label_selector=LABEL_DEPLOY_DEVICE_PLUGIN + "=false")
    kept_off = set(n["metadata"]["name"] for n in kept_off)
    return dict((node, counts) for node, counts in wanted.items() if node not in kept_off)


def run(params, check_mode=False, want_diff=False, client=None, client_factory=None):
    """The module's work; returns its result dict."""
    nfd = nfd_args.validated(params["nfd"]) if params.get("nfd") is not None else None
    params, nfd = tolerating(params, nfd)
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
    parts = []  # (key, result) of the work done beside the plugin's, in order
    if not present:
        objects.absent(wait=params.get("wait", True), timeout=timeout)
        if nfd is not None:  # after the plugin: GFD gone first, so that nfd-master takes its labels back
            parts.append(("nfd", nfd_deployment.run(dict(nfd, state="absent"), check_mode=check_mode,
                                                    want_diff=want_diff, client=client)))
        if params.get("clear_node_marks"):  # the teardown: ours by their keys, whatever readiness_taint says
            result["untainted"], result["proofs_forgotten"] = forget(client, check_mode=check_mode)
    else:
        if nfd is not None:  # before GFD, which writes NodeFeature objects
            parts.append(("nfd", nfd_deployment.run(dict(nfd, state="present"), check_mode=check_mode,
                                                    want_diff=want_diff, client=client)))
        if params.get("label_facts") is not None:
            parts.append(("labels", label_nodes(params, client, check_mode=check_mode, want_diff=want_diff)))
            if params.get("readiness_taint"):  # before the plugin can advertise anything there
                result["tainted"] = gate_new_nodes(client, parts[-1][1], check_mode=check_mode)
        applied = objects.present(manifests.render(params, configs), timeout=timeout)
        if params.get("wait", True) and not check_mode:
            wanted = result["expected"] = left_to_others(wanted, params, client)
            deadline = objects.wait_rollout(applied, timeout, PLUGIN_COMPONENT, NVML_HINT)
            result["resources"] = objects.wait_allocatable(wanted, deadline, RESOURCE_PREFIX, timeout,
                                                           PLUGIN_COMPONENT, NVML_HINT)
            if objects.seen_nodes is not None:
                result["nodes_seen"] = nodes_seen(objects.seen_nodes)
    result["objects"] = objects.objects
    nodes_changed = [result.get(key) for key in ("tainted", "untainted", "proofs_forgotten")]
    result["changed"] = objects.changed or any(nodes_changed)
    diffs = []
    for key, part in parts:
        _merge(result, part, diffs)
        result[key] = part
    if not result.get("warnings"):
        result.pop("warnings", None)
    if want_diff:
        result["diff"] = diffs + [objects.diff] if diffs else objects.diff
    return result
