# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The options every vendor device plugin module beside NVIDIA's shares, and their defaults (pure: the vendors'
manifests read the defaults too)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import args as k8s_args

DEFAULT_WAIT_TIMEOUT = 300
DEFAULT_PRIORITY_CLASS = "system-node-critical"


def argument_spec(**options):
    """A vendor module's argument spec: the connection options, the options every vendor module shares (documented by
    the ``vendor_device_plugin`` doc fragment: change both together), then the vendor's ``options``."""
    spec = k8s_args.argument_spec(
        image_pull_secrets=dict(type="list", elements="str", default=[], no_log=False),  # names, not secrets
        priority_class=dict(type="str", default=DEFAULT_PRIORITY_CLASS),
        facts=dict(type="dict", default={}),
        node_names=dict(type="dict", default={}),
        label_facts=dict(type="dict"),
        missing_nodes=dict(type="str", default="fail", choices=["fail", "skip"]),
        state=dict(type="str", default="present", choices=["present", "absent"]),
        wait=dict(type="bool", default=True),
        wait_timeout=dict(type="int", default=DEFAULT_WAIT_TIMEOUT, minimum=0),
    )
    spec.update(options)
    return spec
