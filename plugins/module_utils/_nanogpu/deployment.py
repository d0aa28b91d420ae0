# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The work of ``nano_gpu_deploy``: validate (before any API call), apply or remove nano-gpu's scheduler extender and
agent as one :class:`.._k8s.objectset.ObjectSet`, wait for the rollouts and for each GPU node to advertise
``nano-gpu/gpu-percent`` (100 per GPU), and return the kube-scheduler's ``extenders`` entry for the Service."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import OptionError
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import client as k8s_client, names, vendor_plugin
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.objects import quantity
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.objectset import ObjectSet
from ansible_collections.kubegpu.cluster.plugins.module_utils._nanogpu import constants as C, manifests
from ansible_collections.kubegpu.cluster.plugins.module_utils._nanogpu.scheduler import extender_entry

RESOURCE_PREFIX = C.RESOURCE_NAME.partition("/")[0]


class _Resource(object):
    """What _k8s.vendor_plugin's wait for the resources to go needs to know of nano-gpu: its resource prefix."""
    prefix = RESOURCE_PREFIX


HINT = ("Known causes: no agent pod on the node (agent_node_selector: by default nvidia.com/gpu.present=true, set by "
        "kubegpu.cluster.gpu_node_labels; agent_tolerations); the agent cannot count the GPUs through NVML (the NVIDIA "
        "runtime must be docker's default-runtime, see docs/nano-gpu.md); its installer could not replace the host's "
        "nvidia-container-runtime-hook (the nano_gpu role prepares the host).")


def _check_selector(option, value):
    for key, val in (value or {}).items():
        if not names.is_valid_label_key(key) or not names.is_valid_label_value(str(val)):
            raise OptionError(option, "%s=%s is not a valid node label selector entry" % (key, val))


def _check_tolerations(option, value):
    for item in value or []:
        if not isinstance(item, dict) or item.get("operator", "Equal") not in ("Equal", "Exists") or (
                item.get("effect") not in (None, "", "NoSchedule", "PreferNoSchedule", "NoExecute")):
            raise OptionError(option, "%r is not a toleration (key, operator Equal|Exists, value, effect "
                                      "NoSchedule|PreferNoSchedule|NoExecute)" % (item,))


def expected_from(params):
    """``{node: {nano-gpu/gpu-percent: 100 x GPUs}}`` from ``expected`` (node to percent, or to a dict) or from
    ``facts`` (host to its ``gpu`` fact: NVIDIA GPUs only, the agent counts them through NVML; hosts without GPUs
    are left out), node names through ``node_names``."""
    out = {}
    for node, want in (params.get("expected") or {}).items():
        if isinstance(want, dict):
            want = want.get(C.RESOURCE_NAME, 0)
        try:
            count = int(want)
        except (TypeError, ValueError):
            raise OptionError("expected", "node %s: %r is not a whole number of %s" % (node, want, C.RESOURCE_NAME))
        if count < 0 or count % C.PERCENT_PER_GPU:
            raise OptionError("expected", "node %s: %s is %d per GPU (pkg/plugins/server.go of the agent), so %d "
                                          "cannot be advertised" % (node, C.RESOURCE_NAME, C.PERCENT_PER_GPU, count))
        out[str(node)] = {C.RESOURCE_NAME: count}
    node_names = params.get("node_names") or {}
    left_out = mig_left_out(params)
    for host, fact in (params.get("facts") or {}).items():
        count = int((fact or {}).get("count") or 0) if isinstance(fact, dict) else 0
        node = str(node_names.get(host, host))
        if count > 0 and node not in left_out:
            out[node] = {C.RESOURCE_NAME: count * C.PERCENT_PER_GPU}
    return out


def _mig_gpus(fact):
    """``(GPUs, GPUs in MIG mode)`` of a ``gpu`` fact (gpu_facts: ``devices[].mig.current``)."""
    devices = [d for d in (fact.get("devices") or []) if isinstance(d, dict)] if isinstance(fact, dict) else []
    return len(devices), sum(1 for d in devices if (d.get("mig") or {}).get("current"))


def mig_left_out(params):
    """``{node: why}``: the nodes of ``facts`` whose GPUs are all in MIG mode, which the agent is kept off.

    The agent counts a node's GPUs (its /dev/nvidiaN files, or NVML's device count in older releases: pkg/nvidia/
    operator.go DetectNumber) and offers 100 per GPU whatever their MIG mode; its hook then gives a container the
    whole GPU (NVIDIA_VISIBLE_DEVICES=<index>, pkg/plugins/server.go), and a GPU in MIG mode offers no CUDA device
    without a MIG device, so a share there could never compute."""
    out = {}
    node_names = params.get("node_names") or {}
    for host, fact in sorted((params.get("facts") or {}).items()):
        gpus, mig = _mig_gpus(fact)
        if gpus and mig == gpus:
            out[str(node_names.get(host, host))] = (
                "its %d GPU(s) are all in MIG mode: a nano-gpu share of a MIG-mode GPU gets no CUDA device; disable "
                "MIG there (kubegpu.cluster.mig_config all-disabled) to share it with nano-gpu" % gpus)
    return out


def mig_warnings(params):
    """What to say about the nodes where only some GPUs are in MIG mode (the agent offers those too)."""
    out = []
    node_names = params.get("node_names") or {}
    for host, fact in sorted((params.get("facts") or {}).items()):
        gpus, mig = _mig_gpus(fact)
        if 0 < mig < gpus:
            out.append("node %s: %d of its %d GPUs are in MIG mode; nano-gpu's agent offers %d percent for each of "
                       "them too, and a share placed on one gets no CUDA device: disable MIG on them or leave the "
                       "node out of nano-gpu" % (node_names.get(host, host), mig, gpus, C.PERCENT_PER_GPU))
    return out


def validate(params):
    """Every option check, before any API call."""
    namespace = params.get("namespace") or C.NAMESPACE
    if not names.is_dns_label(namespace):
        raise OptionError("namespace", "%r is not a valid namespace name" % namespace)
    if (params.get("priority") or C.DEFAULT_PRIORITY) not in C.PRIORITIES:
        raise OptionError("priority", "must be one of %s" % ", ".join(C.PRIORITIES))
    _check_selector("scheduler_node_selector", params.get("scheduler_node_selector"))
    _check_selector("agent_node_selector", params.get("agent_node_selector"))
    _check_tolerations("scheduler_tolerations", params.get("scheduler_tolerations"))
    _check_tolerations("agent_tolerations", params.get("agent_tolerations"))
    return expected_from(params)


def extender_for(service, params):
    """``(url_prefix, entry)`` of the kube-scheduler's ``extenders`` entry for the extender's Service: its cluster IP,
    as upstream's README says (a kube-scheduler on the host network resolves no Service names); ``(None, None)``
    while the Service has no IP (check mode before the first run)."""
    ip = ((service or {}).get("spec") or {}).get("clusterIP")
    if not ip or ip == "None":
        return None, None
    host = "[%s]" % ip if ":" in ip else ip
    url = "http://%s:%d%s" % (host, C.SCHEDULER_PORT, C.URL_PATH)
    return url, extender_entry(url, ignorable=params.get("extender_ignorable", False))


def _advertised(nodes):
    out = {}
    for name, node in sorted((nodes or {}).items()):
        value = (((node or {}).get("status") or {}).get("allocatable") or {}).get(C.RESOURCE_NAME)
        if value is not None:
            out[name] = {C.RESOURCE_NAME: quantity(value)}
    return out


def run(params, check_mode=False, want_diff=False, client=None, client_factory=None):
    """The module's work; returns its result dict."""
    present = params.get("state") != "absent"
    wanted = validate(params) if present else {}
    if client is None:
        client = (client_factory or k8s_client.from_params)(params)
    namespace = params.get("namespace") or C.NAMESPACE
    timeout = params.get("wait_timeout") or C.DEFAULT_WAIT_TIMEOUT
    objects = ObjectSet(client, namespace, C.APP_NAME, manifests.MANAGED_KINDS, check_mode=check_mode,
                        want_diff=want_diff)
    scheduler_image, agent_image = manifests.images(params)
    left_out = mig_left_out(params) if present else {}
    result = {"namespace": namespace, "expected": wanted, "resources": {}, "url_prefix": None, "extender": None,
              "images": {"scheduler": scheduler_image, "agent": agent_image}, "left_out": left_out}
    if present:
        result["warnings"] = mig_warnings(params)
    if not present:
        waiting = params.get("wait", True) and not check_mode
        before = vendor_plugin.advertising_nodes(client, _Resource) if waiting else {}
        objects.absent(wait=params.get("wait", True), timeout=timeout)
        if waiting and objects.changed:  # the agents are gone: their nodes stop advertising the resource
            result["resources_gone"] = vendor_plugin.wait_resources_gone(client, _Resource, timeout, before)
    else:
        applied = objects.present(manifests.render(params, exclude_nodes=sorted(left_out)), timeout=timeout)
        service = applied.get("Service/%s/%s" % (namespace, C.SCHEDULER_NAME))
        if service is None or not (service.get("spec") or {}).get("clusterIP"):
            service = client.get("v1", "Service", C.SCHEDULER_NAME, namespace)
        result["url_prefix"], result["extender"] = extender_for(service, params)
        if params.get("wait", True) and not check_mode:
            deadline = objects.wait_rollout(applied, timeout, C.AGENT_COMPONENT, HINT)
            if wanted:
                result["resources"] = objects.wait_allocatable(wanted, deadline, RESOURCE_PREFIX, timeout,
                                                               C.AGENT_COMPONENT, HINT)
            else:
                result["resources"] = _advertised(dict((n["metadata"]["name"], n) for n in client.list("v1", "Node")))
    result["objects"] = objects.objects
    result["changed"] = objects.changed
    if want_diff:
        result["diff"] = objects.diff
    return result
