# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The kube-scheduler's side of nano-gpu: the ``extenders`` entry of a KubeSchedulerConfiguration (v1) that sends
the pods asking for ``nano-gpu/gpu-percent`` through nano-gpu's scheduler extender. The one place that renders it:
the kubeadm static-pod scheduler, the Kubespray variable and the sandbox's own kube-scheduler all use it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.cluster.plugins.module_utils._nanogpu import constants as C


def extender_entry(url_prefix, weight=1, http_timeout=None, ignorable=False):
    """The ``extenders`` item for nano-gpu's extender at ``url_prefix`` (``http://host:port/<path>``, without the
    verb). ``nodeCacheCapable``: the extender keeps its own view of the nodes, so the scheduler sends node names only.
    ``managedResources``: the scheduler calls the extender only for pods that ask for the resource, and its own
    resource fit does not count the resource (``ignoredByScheduler``: the extender decides which GPU fits)."""
    entry = {
        "urlPrefix": str(url_prefix).rstrip("/"),
        "filterVerb": C.FILTER_VERB,
        "prioritizeVerb": C.PRIORITIZE_VERB,
        "bindVerb": C.BIND_VERB,
        "weight": int(weight),
        "nodeCacheCapable": True,
        "managedResources": [{"name": C.RESOURCE_NAME, "ignoredByScheduler": False}],
        "ignorable": bool(ignorable),
    }
    if http_timeout:
        entry["httpTimeout"] = str(http_timeout)
    return entry
