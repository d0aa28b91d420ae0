#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: gpu_node_labels
short_description: Label every GPU node of a Kubernetes cluster from its GPU facts, in one call
version_added: 0.1.0
description:
  - Takes the C(gpu) fact of each node (as M(kubegpu.cluster.gpu_facts) returns it) and labels all nodes at once. Run
    it once, from the controller or any host that reaches the API server, not once per node.
  - "Labels that are always this module's, on a node with GPUs: C(nvidia.com/gpu.present=true); O(accelerator_label)
    set to the product slug (C(nvidia-tesla-v100-pcie-16gb)), the label the Kubernetes docs use in C(nodeSelector)
    examples; and the operand deploy labels C(nvidia.com/gpu.deploy.device-plugin) and
    C(nvidia.com/gpu.deploy.gpu-feature-discovery), set to V(true) only where the node has no such label or already
    V(true): another value (V(paused-for-mig-change) from NVIDIA's MIG manager, V(false) from an admin) is never
    overwritten, and then the label is not this module's."
  - "GPU feature discovery's labels, with GFD's values, when GFD does not run (O(gfd=false)): C(nvidia.com/gpu.product)
    (the model with blanks turned into C(-), C(-SHARED) appended under sharing without renaming,
    C(<model>-MIG-<profile>) with O(mig_strategy=single)), C(gpu.count), C(gpu.replicas), C(gpu.sharing-strategy),
    C(gpu.memory) (MiB), C(gpu.family), C(gpu.compute.major) and C(.minor), C(gpu.mode) (when the fact's PCI scan
    holds the GPUs), the MIG attributes (C(gpu.multiprocessors), C(gpu.slices.gi), C(.ci), C(gpu.engines.*)) or, with
    O(mig_strategy=mixed), C(nvidia.com/mig-<profile>.*), C(nvidia.com/mig.capable), C(nvidia.com/mps.capable) (which
    the MPS control daemon's node selector needs), C(nvidia.com/mig.strategy), C(nvidia.com/cuda.driver-version.major),
    C(.minor), C(.revision) and C(.full), C(nvidia.com/cuda.runtime-version.major), C(.minor) and C(.full) (the CUDA
    version of the driver), and the deprecated C(nvidia.com/cuda.driver.*) and C(nvidia.com/cuda.runtime.*). They are
    computed from the fact and the node's device plugin config, built from O(mig_strategy), O(sharing), O(configs)
    and O(node_configs) exactly as M(kubegpu.cluster.device_plugin_deploy) builds it: give both modules the same
    values."
  - A node that O(node_configs) gives a named config also gets C(nvidia.com/device-plugin.config=<name>), which places
    that config's plugin, GFD and MPS control daemon pods on it.
  - A node with GPUs of several models gets the whole-GPU labels of one model, as GFD does; where GFD picks one at
    random, this module picks the model of the first GPU (NVML index order) that is not in MIG mode (or of the first
    GPU when all are), and counts the GPUs of that model.
  - With O(gfd=true) GFD writes its labels itself (through node feature discovery), so this module does not apply
    them at all; labels it set earlier that GFD publishes on that node are released (this module gives up its
    ownership and the label stays) rather than removed, and GFD's other labels it set earlier (a MIG layout that is
    gone, say) are removed, since GFD will not write them.
  - A node whose fact says it has no GPU (C(present) false, or C(count) 0, for example a driver that is not loaded)
    gets none of these labels, and the ones this module set earlier are removed.
  - Labels are written by server-side apply with the field manager C(kubegpu.cluster/labels), applying only
    C(metadata.labels). The API server itself then removes labels this module applied earlier and no longer sends,
    and never touches labels set by anyone else (C(kubectl label), NFD, the node's kubelet); a label this module set
    and another manager also set is kept when this module drops it.
  - One LIST request reads every node; only the nodes whose labels differ from what they should be are patched, in
    parallel (O(concurrency)), each request bounded by O(request_timeout) and retried on conflicts (409),
    throttling (429), server errors (5xx) and connection errors; a request the API server does not answer within
    O(request_timeout) ends the run at once.
author:
  - kubegpu.cluster contributors (@kubegpu)
options:
  nodes:
    description:
      - Node name to the C(gpu) fact of that node, for example
        C("{{ dict(groups['gpu_nodes'] | zip(groups['gpu_nodes'] | map('extract', hostvars, ['ansible_facts', 'gpu']))) }}").
      - Keys are inventory names, which are taken as node names unless O(node_names) maps them.
      - Required with O(state=present). With O(state=absent) the values are ignored, and when O(nodes) is omitted
        every node on which this module owns labels is cleaned.
      - A value that is not a C(gpu) fact (facts were not gathered) fails the module, rather than strip the labels.
    type: dict
  node_names:
    description: Inventory name to Kubernetes node name, for hosts whose names differ.
    type: dict
    default: {}
  accelerator_label:
    description: Key of the label set to the product slug. An empty string sets no such label (and removes it).
    type: str
    default: accelerator
  state:
    description:
      - V(present) sets the labels from the facts and removes stale ones this module set.
      - V(absent) removes every label this module set on the nodes.
    type: str
    choices: [present, absent]
    default: present
  gfd:
    description:
      - GPU feature discovery runs on the nodes (M(kubegpu.cluster.device_plugin_deploy) with its O(gfd) option, and
        node feature discovery to publish its labels), so its labels are left to it.
    type: bool
    default: false
  missing_nodes:
    description:
      - What to do about nodes in O(nodes) that are not in the cluster.
      - V(fail) fails before any node is changed, naming them all. V(skip) warns and labels the others (a node that
        has not joined yet is labelled on the next run).
    type: str
    choices: [fail, skip]
    default: fail
  concurrency:
    description:
      - How many PATCH requests run in parallel.
      - 1 or more; the module refuses less before it does anything.
    type: int
    default: 8
  retries:
    description:
      - How many times a request is retried on 409, 429, 5xx or a connection error, with a doubling pause.
      - A 429 with C(Retry-After) (the API server throttling, API Priority and Fairness) is retried up to 30 times in a row
        (or this many, if more), each after its C(Retry-After) stretched by up to as much again.
      - 0 or more; the module refuses less before it does anything.
    type: int
    default: 4
extends_documentation_fragment:
  - kubegpu.cluster.k8s_auth
  - kubegpu.cluster.nvidia_plugin_config
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Only the LIST request is made; what would change is computed from the labels and their C(managedFields).
  diff_mode:
    support: full
    details: One before/after entry per changed node, with the values of the labels involved.
  idempotent:
    description: Whether a second run with the same options changes nothing and reports no change.
    support: full
    details: Only nodes whose labels differ from the wanted ones are patched; a second run patches none.
  platform:
    platforms: posix
notes:
  - "What the fact cannot tell is left to GFD even with O(gfd=false): C(gpu.machine), C(gfd.timestamp), the vGPU, IMEX
    and fabric labels, and the MIG engine counts when the fact lacks the MIG devices' NVML attributes. Where GFD
    itself fails (MPS on a node with a GPU in MIG mode) this module fails too, naming the node."
  - C(changed) is only true when a label value appears, changes or goes away. Taking over a label that already has
    the wanted value (set by someone else), or releasing one to GFD, is a request but not a change.
seealso:
  - module: kubegpu.cluster.gpu_facts
  - name: GPU feature discovery labels
    description: The label names GFD sets.
    link: https://github.com/NVIDIA/k8s-device-plugin/tree/main/docs/gpu-feature-discovery
  - name: Server-side apply
    description: Field management, and how an applier's dropped fields are removed.
    link: https://kubernetes.io/docs/reference/using-api/server-side-apply/
"""

EXAMPLES = r"""
# Run once (for example on localhost) after kubegpu.cluster.gpu_facts ran on every host of gpu_nodes.
- name: Label all GPU nodes in one call
  kubegpu.cluster.gpu_node_labels:
    kubeconfig: /etc/kubernetes/admin.conf
    nodes: "{{ dict(groups['gpu_nodes'] | zip(groups['gpu_nodes'] | map('extract', hostvars, ['ansible_facts', 'gpu']))) }}"
    node_names:
      gpu-01.example.com: gpu-01
  register: labelled

- name: Label nodes whose GPUs are time-sliced 4 ways (nvidia.com/gpu.replicas=4, product ...-SHARED)
  kubegpu.cluster.gpu_node_labels:
    nodes: "{{ dict(groups['gpu_nodes'] | zip(groups['gpu_nodes'] | map('extract', hostvars, ['ansible_facts', 'gpu']))) }}"
    sharing:
      strategy: time-slicing
      replicas: 4

- name: GPU feature discovery runs, so leave its labels to it
  kubegpu.cluster.gpu_node_labels:
    nodes: "{{ dict(groups['gpu_nodes'] | zip(groups['gpu_nodes'] | map('extract', hostvars, ['ansible_facts', 'gpu']))) }}"
    gfd: true

- name: Show what changed
  ansible.builtin.debug:
    var: labelled.summary

- name: Remove every label this module set, on every node
  kubegpu.cluster.gpu_node_labels:
    kubeconfig: /etc/kubernetes/admin.conf
    state: absent
"""

RETURN = r"""
changed:
  description: Whether a label appeared, changed or went away on any node (in check mode, would).
  returned: always
  type: bool
  sample: true
nodes:
  description: One entry per node in O(nodes) (or cleaned, with O(state=absent) and no O(nodes)), by node name.
  returned: always
  type: dict
  sample:
    kg-v100:
      status: changed
      labels:
        accelerator: nvidia-tesla-v100-pcie-16gb
        nvidia.com/gpu.present: "true"
        nvidia.com/gpu.product: Tesla-V100-PCIE-16GB
        nvidia.com/gpu.count: "4"
        nvidia.com/gpu.memory: "16160"
        nvidia.com/cuda.driver-version.major: "510"
        nvidia.com/cuda.driver-version.minor: "47"
        nvidia.com/cuda.driver-version.revision: "03"
        nvidia.com/cuda.driver-version.full: 510.47.03
        nvidia.com/cuda.runtime-version.major: "11"
        nvidia.com/cuda.runtime-version.minor: "6"
        nvidia.com/cuda.runtime-version.full: "11.6"
      labels_set: {"nvidia.com/gpu.count": "4"}
      labels_removed: []
      labels_released: []
  contains:
    status:
      description: V(changed), V(unchanged), or V(missing) (not in the cluster, skipped with O(missing_nodes=skip)).
      type: str
      returned: always
      sample: changed
    labels:
      description: Every label this module wants on the node (empty for a node without GPUs or O(state=absent)).
      type: dict
      returned: always
      sample: {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": "4"}
    labels_set:
      description: Labels that appear or get a new value, with that value.
      type: dict
      returned: always
      sample: {"nvidia.com/gpu.count": "4"}
    labels_removed:
      description: Labels removed because this module set them earlier and no longer wants them.
      type: list
      elements: str
      returned: always
      sample: ["nvidia.com/gpu.memory"]
    labels_released:
      description: Labels this module set earlier that GFD now owns (O(gfd=true)); they stay, no longer owned by this module.
      type: list
      elements: str
      returned: always
      sample: ["nvidia.com/gpu.product"]
summary:
  description: Counts over RV(nodes).
  returned: always
  type: dict
  sample: {"total": 500, "changed": 12, "unchanged": 488, "missing": 0}
field_manager:
  description: The server-side apply field manager that owns the labels.
  returned: always
  type: str
  sample: kubegpu.cluster/labels
diff:
  description: One entry per changed node, with C(before_header), C(after_header), C(before) and C(after) label values.
  returned: in diff mode
  type: list
  elements: dict
  sample: [{"before_header": "node/kg-t4 labels", "after_header": "node/kg-t4 labels",
            "before": {"nvidia.com/gpu.count": "2"}, "after": {"nvidia.com/gpu.count": "1"}}]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubegpu.cluster.plugins.module_utils import _options
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import run_module
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import client, node_labels
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.args import argument_spec
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import constants as nv
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.args import plugin_config_spec
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.labels import node_rules


def main():
    module, rules = _options.module(
        AnsibleModule,
        argument_spec=argument_spec(
            nodes=dict(type="dict"),
            node_names=dict(type="dict", default={}),
            accelerator_label=dict(type="str", default=nv.DEFAULT_ACCELERATOR_LABEL),
            state=dict(type="str", default="present", choices=["present", "absent"]),
            gfd=dict(type="bool", default=False),
            missing_nodes=dict(type="str", default="fail", choices=["fail", "skip"]),
            concurrency=dict(type="int", default=8, minimum=1),
            retries=dict(type="int", default=4, minimum=0),
            **plugin_config_spec()
        ),
        required_if=[("state", "present", ["nodes"])],
        supports_check_mode=True,
    )
    params = module.params

    def work():
        labels_for, soft, releases = node_rules(params)  # the plugin config is checked before any API call
        # the core API only (no discovery), with as many pooled connections as parallel patches
        core = client.from_params(params, field_manager=node_labels.FIELD_MANAGER, pool_size=params["concurrency"]).core
        labeller = node_labels.NodeLabeller(core, retries=params["retries"])
        return node_labels.run(params, labeller, labels_for, check_mode=module.check_mode, want_diff=module._diff,
                               soft=soft, releases=releases)

    run_module(module, work, requires=client.REQUIRES, rules=rules)


if __name__ == "__main__":
    main()
