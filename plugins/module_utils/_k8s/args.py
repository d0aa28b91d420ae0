# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The options every Kubernetes module takes to find the API server, documented by the ``k8s_auth`` doc fragment."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

# Seconds each request to the API server may take to connect, and then to answer (the read timeout): the
# request_timeout option's default.
DEFAULT_REQUEST_TIMEOUT = 30

# Paired with plugins/doc_fragments/k8s_auth.py: change both together. ``absolute`` and ``minimum``: rules the argument
# spec cannot say (plugins/module_utils/_options.py), taken out before AnsibleModule sees the spec.
AUTH_ARG_SPEC = dict(
    kubeconfig=dict(type="path", absolute=True),
    context=dict(type="str"),
    request_timeout=dict(type="int", default=DEFAULT_REQUEST_TIMEOUT, minimum=1),
)


def argument_spec(**options):
    """The module's argument spec: the connection options plus ``options``."""
    spec = copy.deepcopy(AUTH_ARG_SPEC)
    spec.update(options)
    return spec
