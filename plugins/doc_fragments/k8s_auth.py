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
      - A kubeconfig whose user gets its credentials from an C(exec) plugin that is missing or fails is refused, naming
        the plugin (the Python client itself would go on without credentials, and the API server would answer
        C(403 ... system:anonymous)).
      - An absolute path (C(~) is expanded), since the module runs on the managed host, in a working directory nobody chose.
    type: path
  context:
    description: The kubeconfig context to use; the file's current context when omitted.
    type: str
  request_timeout:
    description:
      - Seconds each request to the API server may take to connect, and then to answer (the read timeout), API
        discovery included.
      - A request that gets no answer in that time is not retried. The module fails at once, naming the API server,
        the request and the changes the run had made before it; it asks that server nothing more.
      - Waits for a rollout, pods or Jobs have their own bound (the module's wait timeout); each request they make is
        bounded by this one too.
      - 1 or more; the module refuses less before it does anything.
    type: int
    default: 30
notes:
  - The API discovery of the Kubernetes client is cached in C(kubegpu/discovery) under E(XDG_CACHE_HOME) (else
    C(~/.cache)) of the user the module runs as, a directory of mode 0700; where no such private directory can be had,
    nothing is cached on disk. The Python client's default, a predictable name in the system's temporary directory,
    is never used.
requirements:
  - kubernetes (the Python client) on the host that runs the module.
"""
