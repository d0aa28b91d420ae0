#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: intel_device_plugin_deploy
short_description: Deploy Intel's GPU device plugin to Kubernetes and wait for the GPUs
version_added: 0.2.0
description:
  - Renders Intel's GPU plugin as Kubernetes objects modelled on the project's kustomize base
    (intel/intel-device-plugins-for-kubernetes C(deployments/gpu_plugin/base)) with a read-only root file system and
    no capabilities, and with O(nfd_rule) Intel's NFD rule for GPUs as a NodeFeatureRule. The plugin needs no RBAC.
  - The plugin advertises each card as C(gpu.intel.com/i915) or C(gpu.intel.com/xe), after the kernel driver bound to
    it, O(shared_dev_num) times.
  - Takes the C(gpu) facts of all GPU hosts (O(facts)) and acts on those whose C(gpu.intel.count) is above 0. It
    labels their nodes C(intel.feature.node.kubernetes.io/gpu=true) (the label Intel's NFD rule writes, and the pod's
    default O(node_selector)) under its own field manager C(kubegpu.cluster/labels-intel), applies the objects, and
    waits until every such node advertises what its GPUs give by the plugin's rules.
  - Everything is checked before any API call - the options with the plugin's own rules, and each host's facts, so
    that a host where the plugin would find no card fails the module naming the host.
  - Objects are written with server-side apply (field manager C(kubegpu.cluster), conflicts forced).
author:
  - kubegpu.cluster contributors (@kubegpu)
options:
  namespace:
    description:
      - The namespace of the deployment. Created by the module when missing (and then deleted again with
        O(state=absent)); an existing namespace is used as is and never deleted.
    type: str
    default: intel-gpu-plugin
  version:
    description: The plugin release, used for the default O(image).
    type: str
    default: 0.34.0
  image:
    description: The plugin image, for a private registry or mirror. Defaults to C(intel/intel-gpu-plugin:<version>).
    type: str
  shared_dev_num:
    description: The plugin's C(-shared-dev-num), how many containers may share one card (each card is advertised that
      many times).
    type: int
    default: 1
  allocation_policy:
    description: The plugin's C(-allocation-policy), how it picks cards for a container when cards are shared.
    type: str
    choices: [none, balanced, packed]
    default: none
  enable_monitoring:
    description: The plugin's C(-enable-monitoring), which adds C(gpu.intel.com/<driver>_monitoring) (all cards, 1 per node).
    type: bool
    default: false
  nfd_rule:
    description:
      - Also apply Intel's NFD rule for GPUs (rule C(intel.gpu)) as a NodeFeatureRule, so that node feature discovery
        labels new Intel GPU nodes by itself. Needs NFD's CRDs (M(kubegpu.cluster.node_feature_discovery)); the module
        fails before any change where they are not served.
    type: bool
    default: false
  node_selector:
    description: The pod's nodeSelector. The module sets the default label on the nodes of the hosts with Intel GPUs.
    type: dict
    default: {"intel.feature.node.kubernetes.io/gpu": "true"}
  tolerations:
    description: The pod's tolerations. Defaults to C(CriticalAddonsOnly) Exists.
    type: list
    elements: dict
extends_documentation_fragment:
  - kubegpu.cluster.k8s_auth
  - kubegpu.cluster.vendor_device_plugin
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: A server-side dry run (C(dryRun=All)) tells what would change, labels included.
  diff_mode:
    support: full
    details: Before and after of every object and every node's labels that change.
  idempotent:
    description: Whether a second run with the same options changes nothing and reports no change.
    support: full
  platform:
    platforms: posix
seealso:
  - module: kubegpu.cluster.gpu_facts
  - module: kubegpu.cluster.amd_device_plugin_deploy
  - module: kubegpu.cluster.node_feature_discovery
  - name: Intel device plugins for Kubernetes
    description: The GPU plugin, its manifests and NFD rules.
    link: https://github.com/intel/intel-device-plugins-for-kubernetes
"""

EXAMPLES = r"""
- name: Deploy Intel's GPU plugin where the facts show Intel GPUs, each card shared by 4 containers
  kubegpu.cluster.intel_device_plugin_deploy:
    shared_dev_num: 4
    allocation_policy: balanced
    facts: "{{ dict(groups['gpu_nodes'] | zip(groups['gpu_nodes'] | map('extract', hostvars, ['ansible_facts', 'gpu']))) }}"

- name: Remove it again
  kubegpu.cluster.intel_device_plugin_deploy:
    state: absent
"""

RETURN = r"""
objects:
  description: Every object considered, with its C(kind), C(name), C(namespace) and C(action) (created, updated,
    unchanged or deleted; in check mode what would happen).
  returned: always
  type: list
  elements: dict
  sample: [{"kind": "DaemonSet", "name": "intel-gpu-plugin", "namespace": "intel-gpu-plugin", "action": "created"}]
namespace:
  description: The namespace used.
  returned: always
  type: str
  sample: intel-gpu-plugin
expected:
  description: Per node with Intel GPUs, the C(gpu.intel.com/*) counts it must advertise, worked out from O(facts).
  returned: always
  type: dict
  sample: {"kg-flex": {"gpu.intel.com/i915": 1}}
nodes:
  description: The node names the module handled (those of RV(expected)).
  returned: always
  type: list
  elements: str
  sample: [kg-flex]
resources:
  description: Per node of RV(expected), the C(gpu.intel.com/*) allocatable counts it advertises after the wait.
  returned: always
  type: dict
  sample: {"kg-flex": {"gpu.intel.com/i915": 1}}
labels:
  description: What labelling (or unlabelling) the nodes did, as M(kubegpu.cluster.gpu_node_labels) returns it.
  returned: always
  type: dict
  sample: {"changed": false, "summary": {"total": 1, "changed": 0, "unchanged": 1, "missing": 0}}
resources_gone:
  description: With O(state=absent) and O(wait), the nodes that advertised C(gpu.intel.com/*) resources and no longer do.
  returned: when O(state=absent), O(wait) and something was removed
  type: list
  elements: str
  sample: [kg-flex]
diff:
  description: C(before) and C(after) of every object that changes; with changed labels, a list with one entry per node.
  returned: in diff mode
  type: raw
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubegpu.cluster.plugins.module_utils import _options
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import run_module
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.vendor_args import argument_spec
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.client import REQUIRES
from ansible_collections.kubegpu.cluster.plugins.module_utils._intel import constants as intel
from ansible_collections.kubegpu.cluster.plugins.module_utils._intel.deployment import run


def main():
    module, rules = _options.module(
        AnsibleModule,
        argument_spec=argument_spec(
            namespace=dict(type="str", default=intel.DEVICE_PLUGIN_NAMESPACE),
            version=dict(type="str", default=intel.DEVICE_PLUGIN_VERSION),
            image=dict(type="str"),
            shared_dev_num=dict(type="int", default=intel.DEFAULT_SHARED_DEV_NUM),
            allocation_policy=dict(type="str", default=intel.DEFAULT_ALLOCATION_POLICY,
                                   choices=list(intel.ALLOCATION_POLICIES)),
            enable_monitoring=dict(type="bool", default=False),
            nfd_rule=dict(type="bool", default=False),
            node_selector=dict(type="dict", default=dict(intel.DEFAULT_NODE_SELECTOR)),
            tolerations=dict(type="list", elements="dict"),
        ),
        supports_check_mode=True,
    )
    run_module(module, lambda: run(module.params, check_mode=module.check_mode, want_diff=module._diff),
               requires=REQUIRES, rules=rules)


if __name__ == "__main__":
    main()
