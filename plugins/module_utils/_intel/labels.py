# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""Our node labels for Intel. Pure functions."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.cluster.plugins.module_utils._intel.constants import LABEL_GPU


def labels_for(host, facts, params=None):
    """Our labels of a host with Intel GPUs: the label Intel's NFD rule writes (``intel.feature.node.kubernetes.io/gpu``,
    deployments/nfd/overlays/node-feature-rules), which the plugin's NFD overlays select on; set from the facts, so
    the plugin runs without NFD too."""
    return {LABEL_GPU: "true"}
