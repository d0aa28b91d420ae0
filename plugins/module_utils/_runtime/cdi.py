# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""Whether a node's container runtime can start a DRA pod's devices, by runtime and version: pure rules, for any
vendor whose DRA driver hands the kubelet CDI device names.

Why CDI, and why through the CRI: the kubelet passes the CDI device IDs a DRA driver prepared only in the CRI field
``CDIDevices`` of the container config, since Kubernetes 1.31 no longer as annotations (kubernetes
pkg/kubelet/cm/dra/manager.go: "As of Kubernetes 1.31, CDI device IDs are not passed via annotations anymore";
pkg/kubelet/kuberuntime/kuberuntime_container.go makeCDIDevices). So:

- containerd 1.7 reads that field and resolves CDI specs when ``enable_cdi`` is true (off by default; config version 2
  key ``plugins."io.containerd.grpc.v1.cri".enable_cdi``); 2.0 and 2.1 have it on by default (version 3 key
  ``plugins."io.containerd.cri.v1.runtime".enable_cdi``) and 2.2 and later always. containerd 1.6 has no CDI at all.
- CRI-O always reads CDI specs (it has no switch).
- docker behind cri-dockerd: cri-dockerd passes no CDI device of a DRA claim to docker (Mirantis/cri-dockerd#558,
  open: a DRA claim's devices are not injected with cri-dockerd 0.4 and docker 29), so it is refused.

The CDI spec version the runtime can read: spec 0.7.0 needs containerd 1.7.16 or later (2.x reads it) or CRI-O 1.30
or later; older ones read up to 0.6.0 (issue 27's matrix)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import KubegpuError

CONTAINERD_DISTRIBUTIONS = ("k3s", "rke2", "k0s", "microk8s")  # their own containerd (registry names)
SPEC_07 = "0.7.0"
SPEC_06 = "0.6.0"
CONTAINERD_SPEC_07 = (1, 7, 16)
CRIO_SPEC_07 = (1, 30, 0)
DOCKER_REASON = ("docker through cri-dockerd cannot start a DRA pod's devices: the kubelet passes a claim's devices "
                 "only as CDI device IDs in the CRI field CDIDevices (Kubernetes 1.31 and later), and cri-dockerd does "
                 "not hand them to docker (Mirantis/cri-dockerd#558). Move the node to containerd 1.7 or later, or "
                 "CRI-O, or keep it on the device plugin")

# The kubelet's --container-runtime-endpoint to the registry's runtime name: (pattern, name), first match wins.
_ENDPOINTS = (
    ("cri-dockerd", "docker"), ("dockershim", "docker"),
    ("crio", "crio"),
    ("/run/k3s/containerd", "k3s"),  # k3s and RKE2 share the socket; the caller tells them apart by binary
    ("/run/k0s/", "k0s"),
    ("microk8s", "microk8s"),
    ("containerd", "containerd"),
)


def runtime_of_endpoint(endpoint):
    """The registry name of the runtime behind a kubelet's CRI endpoint (``unix:///run/containerd/containerd.sock``),
    or None."""
    for pattern, name in _ENDPOINTS:
        if pattern in (endpoint or ""):
            return name
    return None


def version_tuple(version):
    """``(1, 7, 16)`` of ``1.7.16``, ``v2.1.4+unknown``, ``1.6.20~ds1``; None when there is none."""
    match = re.match(r"^v?(\d+)\.(\d+)(?:\.(\d+))?", str(version or "").strip())
    if not match:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def _name(version):
    return ".".join(str(p) for p in version)


def verdict(runtime, version, cdi_setting=None):
    """What DRA needs of ``runtime`` (a registry name) at ``version`` with its config's ``enable_cdi`` (True, False, or
    None when the config says nothing): ``{"cdi": "on" | "off", "enable": bool (turn it on),
    "max_spec_version": str or None, "notes": [..]}``. Raises :class:`KubegpuError` with the reason where the runtime
    cannot do it at all."""
    parsed = version_tuple(version)
    notes = []
    if runtime == "docker":
        raise KubegpuError(DOCKER_REASON, runtime=runtime, version=version)
    if runtime == "crio":
        spec = None
        if parsed:
            spec = SPEC_07 if parsed >= CRIO_SPEC_07 else SPEC_06
        else:
            notes.append("CRI-O's version is unknown: the CDI spec version it reads cannot be told")
        return {"cdi": "on", "enable": False, "max_spec_version": spec, "notes": notes}
    if runtime in CONTAINERD_DISTRIBUTIONS and parsed is None:
        # the distribution's version is not its containerd's: judge by what its generated config says
        notes.append("%s's containerd version is unknown: the CDI spec version it reads cannot be told (pass "
                     "containerd_version)" % runtime)
        return {"cdi": "off" if cdi_setting is False else "on", "enable": cdi_setting is False,
                "max_spec_version": None, "notes": notes}
    if runtime not in ("containerd",) + CONTAINERD_DISTRIBUTIONS:
        raise KubegpuError("cannot tell whether runtime %r can do CDI" % runtime, runtime=runtime)
    if parsed is None:
        raise KubegpuError("cannot tell containerd's version from %r" % (version,), runtime=runtime)
    if parsed < (1, 7, 0):
        raise KubegpuError(
            "containerd %s cannot start a DRA pod's devices: it has no CDI (containerd 1.7 added it), and the kubelet "
            "passes a claim's devices only as CDI device IDs in the CRI field CDIDevices (Kubernetes 1.31 and later). "
            "Upgrade containerd to 1.7 or later (2.x has CDI on by default), or keep the node on the device plugin"
            % _name(parsed), runtime=runtime, version=version)
    spec = SPEC_07 if parsed >= CONTAINERD_SPEC_07 else SPEC_06
    if parsed < (2, 0, 0):
        on = cdi_setting is True  # off by default in 1.7
    elif parsed < (2, 2, 0):
        on = cdi_setting is not False  # on by default in 2.0 and 2.1
    else:
        on = True  # 2.2 and later have no switch: always on
    return {"cdi": "on" if on else "off", "enable": not on, "max_spec_version": spec, "notes": notes}


def check_spec_version(runtime, version, wanted, max_spec):
    """Refuse a CDI spec version newer than the runtime reads, saying which to generate instead."""
    if not wanted or not max_spec:
        return
    if version_tuple(wanted) > version_tuple(max_spec):
        raise KubegpuError(
            "%s %s reads CDI specs up to %s, not %s: generate the spec as %s (CDI spec 0.7.0 needs containerd 1.7.16 "
            "or later, or CRI-O 1.30 or later), or upgrade the runtime" % (runtime, version, max_spec, wanted, max_spec),
            runtime=runtime, version=version)
