# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The options that say how the NVIDIA device plugin advertises GPUs (its config, per node), taken by every module
that must know it: the deploy module (what to run, what to wait for) and the labels module (GFD's values). Documented
by the ``nvidia_plugin_config`` doc fragment."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import constants as nv
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.health import HEALTH_CHECKS_SPEC

# Paired with plugins/doc_fragments/nvidia_plugin_config.py: change both together.
SHARING_SPEC = dict(
    strategy=dict(type="str", default="none", choices=list(nv.SHARING_STRATEGIES)),
    replicas=dict(type="int"),
    rename_by_default=dict(type="bool", default=False),
    fail_requests_greater_than_one=dict(type="bool"),
    devices=dict(type="raw"),
    resources=dict(type="list", elements="dict"),
)
PLUGIN_CONFIG_ARG_SPEC = dict(
    mig_strategy=dict(type="str", default=nv.DEFAULT_MIG_STRATEGY, choices=list(nv.MIG_STRATEGIES)),
    sharing=dict(type="dict", options=SHARING_SPEC),
    configs=dict(type="dict", default={}),
    node_configs=dict(type="dict", default={}),
)


def plugin_config_spec():
    """A copy of the plugin config options, for a module's argument spec."""
    return copy.deepcopy(PLUGIN_CONFIG_ARG_SPEC)


def health_checks_spec():
    """A copy of the ``health_checks`` suboptions (documented in device_plugin_deploy and gpu_expected_resources)."""
    return copy.deepcopy(HEALTH_CHECKS_SPEC)
