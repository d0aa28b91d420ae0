# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The work of ``dra_driver_deploy``: read what the server is (its version and the resource.k8s.io versions it serves)
and the nodes, refuse an unsupported combination or a node labelled for both plugins before any write, apply or remove
NVIDIA's DRA driver as one :class:`.._k8s.objectset.ObjectSet`, and watch (bounded) until every node labelled for DRA
publishes ResourceSlices listing its GPUs. It talks to the cluster only through the client passed in (or made from the
options)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import K8sError, OptionError, WaitTimeout
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import client as k8s_client
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.objectset import ObjectSet
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.dra import manifests as dra_manifests, matrix as dra
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.constants import (
    DRA_API_GROUP, DRA_API_VERSIONS, DRA_APP_NAME, DRA_DEFAULT_WAIT_TIMEOUT, DRA_DRIVER_NAME, DRA_NAMESPACE,
    LABEL_DEPLOY_DRA_DRIVER, LABEL_GPU_COUNT,
)

HINT = ("Known causes: the node's container runtime cannot do CDI, or its kubelet root dir is not the one the DaemonSet "
        "mounts (run kubegpu.cluster.dra_host_prep on it and pass its kubelet_root_dir); the DRA kubelet plugin cannot "
        "load NVML (the driver under nvidia_driver_root); the node's %s label counts GPUs the driver does not see."
        % LABEL_GPU_COUNT)


def compute_domains_refused(params):
    if params.get("compute_domains"):
        raise OptionError("compute_domains", "compute domains (Multi-Node NVLink, IMEX: the chart's CRDs, controller and "
                                             "its RBAC) are not deployed by this module yet; deploy them with NVIDIA's "
                                             "chart (resources.gpus.enabled=false) beside this module's GPUs")


def _served_api(served):
    for version in DRA_API_VERSIONS:
        if version in served:
            return "%s/%s" % (DRA_API_GROUP, version)
    return None


def wait_slices(client, objects, resource_api, nodes, names, deadline, timeout):
    """Watch the driver's ResourceSlices until each node of ``names`` lists its GPUs; returns ``{node: [devices]}``.
    On timeout one error names every node that did not, what its slices list and its plugin pod's state."""
    if not names:
        return {}

    def done(found):
        return not dra.short_of_slices(nodes, list(found.values()), names)

    try:
        found = client.wait(resource_api, "ResourceSlice", done, max(1, deadline - client.clock()),
                            field_selector="spec.driver=%s" % DRA_DRIVER_NAME)
    except WaitTimeout as exc:
        slices = list((exc.last or {}).values())
        lines = []
        for name, (listed, want) in sorted(dra.short_of_slices(nodes, slices, names).items()):
            if listed is None:
                lines.append("node %s does not exist" % name)
                continue
            lines.append("node %s: its ResourceSlices of %s list %s, expected %s; %s"
                         % (name, DRA_DRIVER_NAME, ", ".join(listed) if listed else "no GPU",
                            "%d (its %s label)" % (want, LABEL_GPU_COUNT) if want is not None else "at least one",
                            objects.pods_summary(dra_manifests.COMPONENT_PLUGIN, name)))
        raise K8sError("timed out after %ss waiting for the DRA nodes' ResourceSlices to list their GPUs: %s. %s"
                       % (timeout, " | ".join(lines), HINT),
                       slices=dict((n, dra.slice_gpus(slices, n)) for n in names))
    slices = list(found.values())
    return dict((n, dra.slice_gpus(slices, n)) for n in names)


def gate_on_at_the_api_server(client, params, matrix):
    """A server-side dry run of the gpu DeviceClass: an API server without DRAExtendedResource drops
    ``extendedResourceName`` (a disabled field is cleared on write), so the mapping would silently not exist. Refused
    before any write, saying which gate to turn on."""
    namespace = params.get("namespace") or DRA_NAMESPACE
    gpu_class = dra_manifests.device_classes(matrix["api_version"], namespace, True)[0]
    _action, _before, after = client.apply(gpu_class, dry_run=True)
    if not ((after or {}).get("spec") or {}).get("extendedResourceName"):
        raise K8sError("extended_resource: the API server (Kubernetes %s) drops DeviceClass extendedResourceName: the "
                       "feature gate DRAExtendedResource is off there. Turn on DRAExtendedResource=true on "
                       "kube-apiserver, kube-controller-manager, kube-scheduler and kubelet, or leave extended_resource "
                       "unset" % matrix["kubernetes"])


def run(params, check_mode=False, want_diff=False, client=None, client_factory=None):
    """The module's work; returns its result dict."""
    compute_domains_refused(params)
    if client is None:
        client = (client_factory or k8s_client.from_params)(params)
    namespace = params.get("namespace") or DRA_NAMESPACE
    timeout = params.get("wait_timeout") if params.get("wait_timeout") is not None else DRA_DEFAULT_WAIT_TIMEOUT
    present = params.get("state") != "absent"
    served = client.served_versions(DRA_API_GROUP)
    result = {"namespace": namespace, "slices": {}, "nodes": []}
    warnings = []
    if present:  # every refusal before any write
        matrix = dra.plan(client.server_version(), served, params.get("extended_resource"))
        warnings.extend(matrix.pop("warnings"))
        result.update(matrix)
        nodes = client.list("v1", "Node")
        dra.refuse_both(nodes)
        if matrix["extended_resource"] and warnings:  # asked for where the gate is off by default (1.34, 1.35)
            gate_on_at_the_api_server(client, params, matrix)
        resource_api = matrix["api_version"]
        result["nodes"] = dra.dra_nodes(nodes, params.get("node_selector"))
    else:
        resource_api = _served_api(served)
    objects = ObjectSet(client, namespace, DRA_APP_NAME, dra_manifests.managed_kinds(resource_api),
                        check_mode=check_mode, want_diff=want_diff, shared_kinds=("DeviceClass",))
    if not present:
        objects.absent(wait=params.get("wait", True), timeout=timeout)
    else:
        applied = objects.present(dra_manifests.render(params, resource_api, result["extended_resource"]), timeout=timeout)
        if params.get("wait", True) and not check_mode:
            deadline = objects.wait_rollout(applied, timeout, dra_manifests.COMPONENT_PLUGIN, HINT)
            result["slices"] = wait_slices(client, objects, resource_api, nodes, result["nodes"], deadline, timeout)
        if not result["nodes"]:
            warnings.append("no node is labelled %s=true: the DRA kubelet plugin runs nowhere yet"
                            % LABEL_DEPLOY_DRA_DRIVER)
    result["objects"] = objects.objects
    result["changed"] = objects.changed
    if warnings:
        result["warnings"] = warnings
    if want_diff:
        result["diff"] = objects.diff
    return result
