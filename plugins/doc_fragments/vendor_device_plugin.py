# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """The options every vendor device plugin module beside NVIDIA's shares (amd_device_plugin_deploy,
    intel_device_plugin_deploy). Paired with the argument spec of plugins/module_utils/_k8s/vendor_args.py:
    change both together."""

    DOCUMENTATION = r"""
options:
  image_pull_secrets:
    description: Names of Secrets in O(namespace) to pull the images with.
    type: list
    elements: str
    default: []
  priority_class:
    description: The pods' priorityClassName; an empty string for none.
    type: str
    default: system-node-critical
  facts:
    description:
      - Inventory host to its C(gpu) fact, as M(kubegpu.cluster.gpu_facts) returns it, for all GPU hosts. The module
        acts on the hosts whose fact counts the vendor's GPUs (C(gpu.amd.count), C(gpu.intel.count)) - it labels
        their nodes, and waits until each advertises what its GPUs give by the plugin's rules; the other hosts lose
        the module's labels if they had them.
      - A host where the plugin would advertise nothing (its driver not loaded, a C(status) other than C(ok)) or exit
        fails the module before any API call, naming every such host and why.
    type: dict
    default: {}
  node_names:
    description: Inventory host to its Kubernetes node name, for hosts whose names differ.
    type: dict
    default: {}
  label_facts:
    description:
      - Inventory host to its C(gpu) fact, the hosts to label (or unlabel) when they are not those of O(facts); by
        default the module labels from O(facts).
    type: dict
  missing_nodes:
    description:
      - What to do about hosts whose nodes are not in the cluster. V(fail) fails before any node is changed, naming
        them all. V(skip) warns, and neither labels them nor waits for them.
    type: str
    choices: [fail, skip]
    default: fail
  state:
    description:
      - V(present) labels the nodes, applies the objects (and removes those of an earlier run no longer needed).
      - V(absent) deletes exactly what the module created (found by label C(app.kubernetes.io/managed-by=kubegpu.cluster)
        in O(namespace), the cluster-scoped ones by label C(kubegpu.cluster/namespace)), the namespace when the module
        created it, waits for the pods and the vendor's resources to go, and removes every node label of the vendor's
        own field manager (C(kubegpu.cluster/labels-<vendor>)).
    type: str
    choices: [present, absent]
    default: present
  wait:
    description: Wait (with watches) for the rollout and the resources, or with O(state=absent) for them to go.
    type: bool
    default: true
  wait_timeout:
    description:
      - How long to wait in all, in seconds.
      - 0 or more; the module refuses less before it does anything.
    type: int
    default: 300
"""
