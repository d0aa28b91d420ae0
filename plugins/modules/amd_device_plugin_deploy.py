#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: amd_device_plugin_deploy
short_description: Deploy AMD's ROCm device plugin and node labeller to Kubernetes and wait for the GPUs
version_added: 0.2.0
description:
  - Renders AMD's ROCm device plugin (C(amd.com/gpu)) and its node labeller as Kubernetes objects modelled on the
    project's manifests (ROCm/k8s-device-plugin C(k8s-ds-amdgpu-dp.yaml), C(k8s-ds-amdgpu-labeller.yaml) and its Helm
    chart) with their security contexts, the labeller with least-privilege RBAC (its ServiceAccount may only C(get),
    C(list), C(watch) and C(update) nodes).
  - Takes the C(gpu) facts of all GPU hosts (O(facts)) and acts on those whose C(gpu.amd.count) is above 0. It labels
    their nodes C(feature.node.kubernetes.io/amd-gpu=true) (the label AMD's own NFD rule writes, and the pods' default
    O(node_selector)) under its own field manager C(kubegpu.cluster/labels-amd), applies the objects, and waits until
    every such node advertises what its GPUs give by the plugin's rules (O(resource_naming_strategy)).
  - Everything is checked before any API call - the options, and each host's facts, so that a host where the plugin
    would advertise nothing (no amdgpu, no C(/sys/class/kfd)) or exit (GPUs in different partition modes with the
    single strategy) fails the module naming the host instead of waiting out O(wait_timeout).
  - Objects are written with server-side apply (field manager C(kubegpu.cluster), conflicts forced).
  - O(state=absent) also removes the labels the node labeller wrote (every C(amd.com/*) and C(beta.amd.com/*) node
    label, which the labeller takes as its own) once it deleted the labeller in that run; the labeller never removes
    them itself.
author:
  - kubegpu.cluster contributors (@kubegpu)
options:
  namespace:
    description:
      - The namespace of the deployment. Created by the module when missing (and then deleted again with
        O(state=absent)); an existing namespace is used as is and never deleted.
    type: str
    default: amd-gpu-device-plugin
  version:
    description: The ROCm device plugin release, used for the default O(image) and O(labeller_image).
    type: str
    default: 1.31.0.10
  image:
    description: The plugin image, for a private registry or mirror. Defaults to C(docker.io/rocm/k8s-device-plugin:<version>).
    type: str
  labeller_image:
    description: The labeller image. Defaults to C(docker.io/rocm/k8s-device-plugin:labeller-<version>).
    type: str
  resource_naming_strategy:
    description:
      - The plugin's C(-resource_naming_strategy). V(single) advertises every GPU as C(amd.com/gpu) (the plugin exits
        on a node whose GPUs are in different partition modes). V(mixed) advertises partitioned GPUs by partition type,
        C(amd.com/<compute>_<memory>) in lower case (C(amd.com/cpx_nps4)), and GPUs without partition modes as
        C(amd.com/gpu).
    type: str
    choices: [single, mixed]
    default: single
  labeller:
    description: Also deploy the node labeller (C(beta.amd.com/gpu.*) and C(amd.com/gpu.*) labels), with its RBAC.
    type: bool
    default: true
  labeller_flags:
    description: The labeller's label families, each passed as C(-<flag>). The default is the project's manifests'.
    type: list
    elements: str
    choices: [vram, cu-count, simd-count, device-id, family, product-name, driver-version, driver-src-version, firmware]
    default: [vram, cu-count, simd-count, device-id, family]
  node_selector:
    description: The pods' nodeSelector. The module sets the default label on the nodes of the hosts with AMD GPUs.
    type: dict
    default: {"feature.node.kubernetes.io/amd-gpu": "true"}
  tolerations:
    description: The pods' tolerations. Defaults to C(CriticalAddonsOnly) Exists and C(amd.com/gpu) Exists NoSchedule.
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
  - module: kubegpu.cluster.intel_device_plugin_deploy
  - name: ROCm k8s-device-plugin
    description: The plugin, its node labeller and their manifests.
    link: https://github.com/ROCm/k8s-device-plugin
"""

EXAMPLES = r"""
- name: Deploy the ROCm plugin where the facts show AMD GPUs, and wait for them
  kubegpu.cluster.amd_device_plugin_deploy:
    facts: "{{ dict(groups['gpu_nodes'] | zip(groups['gpu_nodes'] | map('extract', hostvars, ['ansible_facts', 'gpu']))) }}"

- name: Partitioned MI300X, one resource per partition type, without the labeller
  kubegpu.cluster.amd_device_plugin_deploy:
    resource_naming_strategy: mixed
    labeller: false
    facts: "{{ gpu_facts_by_host }}"

- name: Remove it again
  kubegpu.cluster.amd_device_plugin_deploy:
    state: absent
"""

RETURN = r"""
objects:
  description: Every object considered, with its C(kind), C(name), C(namespace) and C(action) (created, updated,
    unchanged or deleted; in check mode what would happen).
  returned: always
  type: list
  elements: dict
  sample: [{"kind": "DaemonSet", "name": "amdgpu-device-plugin-daemonset", "namespace": "amd-gpu-device-plugin",
            "action": "created"}]
namespace:
  description: The namespace used.
  returned: always
  type: str
  sample: amd-gpu-device-plugin
expected:
  description: Per node with AMD GPUs, the C(amd.com/*) counts it must advertise, worked out from O(facts).
  returned: always
  type: dict
  sample: {"kg-mi210": {"amd.com/gpu": 2}}
nodes:
  description: The node names the module handled (those of RV(expected)).
  returned: always
  type: list
  elements: str
  sample: [kg-mi210]
resources:
  description: Per node of RV(expected), the C(amd.com/*) allocatable counts it advertises after the wait.
  returned: always
  type: dict
  sample: {"kg-mi210": {"amd.com/gpu": 2}}
labels:
  description: What labelling (or unlabelling) the nodes did, as M(kubegpu.cluster.gpu_node_labels) returns it.
  returned: always
  type: dict
  sample: {"changed": false, "summary": {"total": 1, "changed": 0, "unchanged": 1, "missing": 0}}
labeller_labels_removed:
  description: With O(state=absent), per node the labeller's labels removed (in check mode, that would be).
  returned: when O(state=absent)
  type: dict
  sample: {"kg-mi210": ["amd.com/gpu.family", "beta.amd.com/gpu.family.AI"]}
resources_gone:
  description: With O(state=absent) and O(wait), the nodes that advertised C(amd.com/*) resources and no longer do.
  returned: when O(state=absent), O(wait) and something was removed
  type: list
  elements: str
  sample: [kg-mi210]
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
from ansible_collections.kubegpu.cluster.plugins.module_utils._amd import constants as amd
from ansible_collections.kubegpu.cluster.plugins.module_utils._amd.deployment import run


def main():
    module, rules = _options.module(
        AnsibleModule,
        argument_spec=argument_spec(
            namespace=dict(type="str", default=amd.DEVICE_PLUGIN_NAMESPACE),
            version=dict(type="str", default=amd.DEVICE_PLUGIN_VERSION),
            image=dict(type="str"),
            labeller_image=dict(type="str"),
            resource_naming_strategy=dict(type="str", default=amd.DEFAULT_RESOURCE_NAMING_STRATEGY,
                                          choices=list(amd.RESOURCE_NAMING_STRATEGIES)),
            labeller=dict(type="bool", default=True),
            labeller_flags=dict(type="list", elements="str", default=list(amd.DEFAULT_LABELLER_FLAGS),
                                choices=list(amd.LABELLER_FLAGS)),
            node_selector=dict(type="dict", default=dict(amd.DEFAULT_NODE_SELECTOR)),
            tolerations=dict(type="list", elements="dict"),
        ),
        supports_check_mode=True,
    )
    run_module(module, lambda: run(module.params, check_mode=module.check_mode, want_diff=module._diff),
               requires=REQUIRES, rules=rules)


if __name__ == "__main__":
    main()
