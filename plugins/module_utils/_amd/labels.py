# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""Node labels for AMD: ours (the node selector of the plugin and the labeller) and the ones AMD's node labeller
writes, which ``state=absent`` takes away with it. Pure functions."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.cluster.plugins.module_utils._amd.constants import LABEL_GPU, LABELLER_LABEL_PREFIXES


def labels_for(host, facts, params=None):
    """Our labels of a host with AMD GPUs: the vendor's node-selector label (``feature.node.kubernetes.io/amd-gpu``,
    which AMD's NFD rule writes; kept off ``amd.com/``, whose labels the labeller deletes as its own)."""
    return {LABEL_GPU: "true"}


def is_labeller_label(key):
    """Whether a node label is one the ROCm node labeller owns: it deletes every ``amd.com/*`` and ``beta.amd.com/*``
    label before writing its own (ROCm/k8s-device-plugin cmd/k8s-node-labeller/controller.go Reconcile)."""
    return any(key.startswith(prefix) for prefix in LABELLER_LABEL_PREFIXES)


def labeller_labels(node):
    """The labeller's labels on a node (plain API JSON)."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    return dict((key, value) for key, value in labels.items() if is_labeller_label(key))
