# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """How the collection's Kubernetes modules find the API server."""

    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - Path to a kubeconfig file on the host that runs the module. Its contents are never logged or returned, and
        errors name only its path and, for a file that is not valid YAML, the line and column.
      - Without O(kubeconfig) and O(context), the in-cluster configuration (the pod's service account) is used, and
        when the module does not run in a pod, the default kubeconfig (E(KUBECONFIG) or C(~/.kube/config)).
    type: path
  context:
    description: The kubeconfig context to use; the file's current context when omitted.
    type: str
requirements:
  - kubernetes (the Python client) on the host that runs the module.
"""
