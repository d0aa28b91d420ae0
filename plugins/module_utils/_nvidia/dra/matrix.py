# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""Dynamic Resource Allocation for NVIDIA's DRA driver: what each Kubernetes minor needs (the version matrix), which
``resource.k8s.io`` version to write, whether a DeviceClass may map ``nvidia.com/gpu`` (KEP-5004), the one-plugin-per-
node rule, and what a node's ResourceSlices say of its GPUs. Pure functions: the caller reads the server (its
``/version`` and discovery) and the nodes, and passes what it read.

The matrix, from Kubernetes v1.36.3 ``pkg/features/kube_features.go``:

- ``DynamicResourceAllocation``: beta and off by default in 1.32, GA and on in 1.34, locked on in 1.35. NVIDIA's chart
  asks for 1.32 or later (kubernetes-sigs/dra-driver-nvidia-gpu deployments/helm/dra-driver-nvidia-gpu/Chart.yaml
  ``kubeVersion: ">=1.32.0-0"``).
- ``resource.k8s.io/v1beta1`` and ``v1beta2`` are in ``betaAPIGroupVersionsDisabledByDefault``
  (``pkg/controlplane/instance.go``): before 1.34 kube-apiserver serves them only with
  ``--runtime-config=resource.k8s.io/<version>=true``. ``v1beta2`` exists from 1.33, ``v1`` from 1.34 (on by default).
- ``DRAExtendedResource`` (DeviceClass ``spec.extendedResourceName``): alpha and off in 1.34 and 1.35, beta and on from
  1.36; it depends on ``DynamicResourceAllocation``.

The API version written is the one the chart picks (templates/_helpers.tpl ``resourceApiVersion``): the highest
served of v1, v1beta2, v1beta1, from discovery; the chart writes ``extendedResourceName`` only with v1
(templates/deviceclass-gpu.yaml).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import KubegpuError
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.constants import (
    DEPLOY_LABEL_ON, DRA_API_GROUP, DRA_API_VERSIONS, DRA_DRIVER_NAME, DRA_EXTENDED_RESOURCE_BETA,
    DRA_EXTENDED_RESOURCE_GATE, DRA_FEATURE_GATE, DRA_GA, DRA_GATE_COMPONENTS, DRA_MIN_VERSION, LABEL_DEPLOY_DEVICE_PLUGIN,
    LABEL_DEPLOY_DRA_DRIVER, LABEL_GPU_COUNT,
)

_GIT_VERSION = re.compile(r"^v?(\d+)\.(\d+)")


def minor_of(version):
    """``(1, 36)`` of a server's ``/version`` answer (a dict with ``gitVersion``, or ``major``/``minor``) or of a
    version string such as ``v1.36.3`` or ``1.33.0-gke.1``; :class:`KubegpuError` when it says none."""
    text = version
    if isinstance(version, dict):
        text = version.get("gitVersion") or "%s.%s" % (version.get("major", ""), (version.get("minor") or "").rstrip("+"))
    match = _GIT_VERSION.match(str(text or "").strip())
    if not match:
        raise KubegpuError("cannot tell the Kubernetes version from %r" % (version,))
    return int(match.group(1)), int(match.group(2))


def _name(minor):
    return "%d.%d" % minor


def beta_versions(minor):
    """The beta versions of resource.k8s.io a minor has, newest first (v1beta2 from 1.33)."""
    return ("v1beta2", "v1beta1") if minor >= (1, 33) else ("v1beta1",)


def gates_advice(minor):
    """What a 1.32 or 1.33 cluster must turn on for DRA, in one sentence."""
    beta = beta_versions(minor)[0]
    return ("turn on the feature gate %s=true on %s, and serve the API with --runtime-config=%s/%s=true on "
            "kube-apiserver" % (DRA_FEATURE_GATE, ", ".join(DRA_GATE_COMPONENTS), DRA_API_GROUP, beta))


def api_version(minor, served):
    """The ``resource.k8s.io/<version>`` to write for a server of ``minor`` that serves ``served`` (discovery), as the
    chart picks it; refuses a minor before 1.32, and a server that serves none, with what to do."""
    if minor < DRA_MIN_VERSION:
        raise KubegpuError(
            "Kubernetes %s is too old for NVIDIA's DRA driver: it needs %s or later (DRA with structured parameters; "
            "the chart's kubeVersion >=%s.0). Upgrade the control plane and the kubelets, or stay on the device plugin"
            % (_name(minor), _name(DRA_MIN_VERSION), _name(DRA_MIN_VERSION)), kubernetes=_name(minor))
    for version in DRA_API_VERSIONS:
        if version in served:
            return "%s/%s" % (DRA_API_GROUP, version)
    if minor < DRA_GA:
        raise KubegpuError(
            "Kubernetes %s serves no %s version: DRA is beta and off by default there: %s; then run this again"
            % (_name(minor), DRA_API_GROUP, gates_advice(minor)),
            kubernetes=_name(minor), served=list(served))
    raise KubegpuError(
        "Kubernetes %s serves no %s version, though %s/v1 is on by default from 1.34: it was turned off. Remove "
        "--runtime-config=%s/v1=false from kube-apiserver%s; then run this again"
        % (_name(minor), DRA_API_GROUP, DRA_API_GROUP, DRA_API_GROUP,
           " and the feature gate %s=false from every component" % DRA_FEATURE_GATE if minor < (1, 35) else ""),
        kubernetes=_name(minor), served=list(served))


def extended_resource(minor, resource_api, wanted=None):
    """Whether the gpu DeviceClass gets ``extendedResourceName`` (``nvidia.com/gpu`` through DRA, KEP-5004), and the
    warnings to give: ``wanted`` None decides by the defaults (on from 1.36, with the v1 API), True asks for it (refused
    where the field does not exist; on 1.34 and 1.35 only with the gate on every component, which the server alone
    cannot show, so a warning says so), False leaves it out. Returns ``(bool, [warnings])``."""
    has_field = resource_api.endswith("/v1") and minor >= DRA_GA
    on_by_default = has_field and minor >= DRA_EXTENDED_RESOURCE_BETA
    if wanted is None:
        return on_by_default, []
    if not wanted:
        return False, []
    if not has_field:
        raise KubegpuError(
            "extended_resource: Kubernetes %s (%s) has no DeviceClass extendedResourceName: the mapping of nvidia.com/gpu "
            "to DRA (%s, KEP-5004) needs %s/v1, Kubernetes 1.34 or later. Leave extended_resource unset or false"
            % (_name(minor), resource_api, DRA_EXTENDED_RESOURCE_GATE, DRA_API_GROUP), kubernetes=_name(minor))
    if not on_by_default:
        gate = DRA_EXTENDED_RESOURCE_GATE
        return True, ["Kubernetes %s has %s in alpha, off by default: nvidia.com/gpu requests go through DRA only "
                      "with the feature gate %s=true on %s" % (_name(minor), gate, gate, ", ".join(DRA_GATE_COMPONENTS))]
    return True, []


def plan(server_version, served, extended=None):
    """Everything the version matrix decides, before any write: ``{"kubernetes", "api_version",
    "extended_resource", "warnings"}``. ``server_version``: the ``/version`` answer; ``served``: the served versions
    of resource.k8s.io."""
    minor = minor_of(server_version)
    resource_api = api_version(minor, served)
    mapped, warnings = extended_resource(minor, resource_api, extended)
    if minor < DRA_GA:
        warnings.append("Kubernetes %s serves %s, but the API server alone cannot show the other components' gates: "
                        "make sure of %s=true on %s" % (_name(minor), resource_api, DRA_FEATURE_GATE,
                                                        ", ".join(DRA_GATE_COMPONENTS[1:])))
    return {"kubernetes": _name(minor), "api_version": resource_api, "extended_resource": mapped, "warnings": warnings}


# --- The nodes ------------------------------------------------------------------------------------------------------

def _labels(node):
    return ((node or {}).get("metadata") or {}).get("labels") or {}


def dra_nodes(nodes, node_selector=None):
    """Names of the nodes the DRA kubelet plugin runs on: labelled for it (LABEL_DEPLOY_DRA_DRIVER=true) and matching
    the DaemonSet's other ``node_selector`` labels, sorted."""
    wanted = dict(node_selector or {}, **{LABEL_DEPLOY_DRA_DRIVER: DEPLOY_LABEL_ON})
    return sorted(n["metadata"]["name"] for n in nodes
                  if all(_labels(n).get(key) == str(value) for key, value in wanted.items()))


def both_plugins(nodes):
    """Names of the nodes labelled for both the device plugin and the DRA kubelet plugin, sorted."""
    return sorted(n["metadata"]["name"] for n in nodes
                  if _labels(n).get(LABEL_DEPLOY_DRA_DRIVER) == DEPLOY_LABEL_ON
                  and _labels(n).get(LABEL_DEPLOY_DEVICE_PLUGIN) == DEPLOY_LABEL_ON)


def refuse_both(nodes):
    """The chart's rule (templates/validation.yaml: the driver "cannot be deployed alongside the standard GPU device
    plugin on the same node"), over the deploy labels: raises, naming every node labelled for both."""
    both = both_plugins(nodes)
    if both:
        raise KubegpuError(
            "node%s %s %s labelled for both the device plugin (%s=true) and NVIDIA's DRA driver (%s=true); a GPU node "
            "runs one of them, never both (the DRA chart's rule). Set %s to false (or remove it) on %s first, or take "
            "%s off" % ("s" if len(both) > 1 else "", ", ".join(both), "are" if len(both) > 1 else "is",
                        LABEL_DEPLOY_DEVICE_PLUGIN, LABEL_DEPLOY_DRA_DRIVER, LABEL_DEPLOY_DEVICE_PLUGIN,
                        "them" if len(both) > 1 else "it", LABEL_DEPLOY_DRA_DRIVER), nodes=both)


def expected_gpus(node):
    """How many GPUs a node's slices must list: its ``nvidia.com/gpu.count`` label (GFD's, or ours), else None (at
    least one)."""
    value = _labels(node).get(LABEL_GPU_COUNT)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def slice_gpus(slices, node_name, driver=DRA_DRIVER_NAME):
    """The full-GPU devices ``driver`` publishes for ``node_name`` across its ResourceSlices (names, sorted): devices of
    type ``gpu`` (MIG devices are ``mig``). Only the slices of the newest pool generation count, as the scheduler
    reads them (resourceslice pools: older generations are being replaced)."""
    mine = [s for s in slices if (s.get("spec") or {}).get("driver") == driver
            and (s.get("spec") or {}).get("nodeName") == node_name]
    newest = {}
    for item in mine:
        pool = (item["spec"].get("pool") or {})
        newest[pool.get("name")] = max(newest.get(pool.get("name"), 0), int(pool.get("generation") or 0))
    names = []
    for item in mine:
        pool = item["spec"].get("pool") or {}
        if int(pool.get("generation") or 0) != newest[pool.get("name")]:
            continue
        for device in item["spec"].get("devices") or []:
            attrs = device.get("attributes") or (device.get("basic") or {}).get("attributes") or {}
            kind = (attrs.get("type") or attrs.get(driver + "/type") or {}).get("string")
            if kind in (None, "gpu"):
                names.append(device.get("name"))
    return sorted(names)


def short_of_slices(nodes, slices, names):
    """``{node: (listed, expected)}`` for each node of ``names`` whose slices list fewer GPUs than expected (its
    ``nvidia.com/gpu.count`` label; at least one without it), or that is gone (listed None)."""
    by_name = dict((n["metadata"]["name"], n) for n in nodes)
    out = {}
    for name in names:
        listed = slice_gpus(slices, name)
        want = expected_gpus(by_name.get(name))
        if name not in by_name:
            out[name] = (None, want)
        elif len(listed) < (want if want is not None else 1) or (want is not None and len(listed) != want):
            out[name] = (listed, want)
    return out
