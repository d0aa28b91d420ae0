# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: nano_gpu_kubespray_extenders
short_description: Kubespray's kube_scheduler_extenders with nano-gpu's extender in it
version_added: 0.3.0
author:
  - kubegpu.cluster contributors (@kubegpu)
description:
  - Kubespray renders kube-scheduler's KubeSchedulerConfiguration itself (roles/kubernetes/control-plane,
    C(kubescheduler-config.yaml.j2)) and writes its variable C(kube_scheduler_extenders) under C(extenders) as it is,
    so an edit of the file on the node would be undone by its next run.
  - This filter returns the value to set instead - the extenders given as input, with nano-gpu's entry (the same one
    M(kubegpu.cluster.scheduler_extender) writes on a kubeadm control plane) in place of an earlier one for
    C(nano-gpu/gpu-percent), or appended.
  - Fails on another extender that binds (kube-scheduler takes only one).
options:
  _input:
    description: The URL prefix of nano-gpu's extender, such as V(http://10.96.0.50:39999/scheduler).
    type: str
    required: true
  existing:
    description: The inventory's C(kube_scheduler_extenders) so far.
    type: list
    elements: dict
    default: []
  weight:
    description: The extender's weight.
    type: int
    default: 1
  http_timeout:
    description: The scheduler's timeout for each call, such as V(30s).
    type: str
  ignorable:
    description: Schedule anyway when the extender does not answer.
    type: bool
    default: false
"""

EXAMPLES = r"""
# group_vars/k8s_cluster/k8s-cluster.yml of a Kubespray inventory
kube_scheduler_extenders: "{{ 'http://10.96.0.50:39999/scheduler' | kubegpu.cluster.nano_gpu_kubespray_extenders }}"
"""

RETURN = r"""
_value:
  description: The list of extenders, each with the keys of a KubeSchedulerConfiguration v1 extender.
  type: list
  elements: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import KubegpuError
from ansible_collections.kubegpu.cluster.plugins.module_utils._nanogpu.kubeadm import kubespray_extenders


def nano_gpu_kubespray_extenders(url_prefix, existing=None, weight=1, http_timeout=None, ignorable=False):
    """See DOCUMENTATION."""
    try:
        return kubespray_extenders(url_prefix, existing=list(existing or []), weight=weight, http_timeout=http_timeout,
                                   ignorable=ignorable)
    except KubegpuError as exc:
        raise AnsibleFilterError("nano_gpu_kubespray_extenders: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"nano_gpu_kubespray_extenders": nano_gpu_kubespray_extenders}
