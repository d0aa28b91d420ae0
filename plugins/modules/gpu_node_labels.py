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
  - Takes the C(gpu) fact of each node (as M(kubegpu.cluster.gpu_facts) returns it) and sets the labels GPU feature
    discovery (GFD) would set, under GFD's names, plus C(nvidia.com/gpu.present) and an C(accelerator) label, on all
    nodes at once. Run it once, from the controller or any host that reaches the API server, not once per node.
  - "Labels set on a node with GPUs: C(nvidia.com/gpu.present=true); C(nvidia.com/gpu.product), the product name in
    GFD's form (blanks become C(-), other characters that a label value cannot hold are dropped, at most 63
    characters: C(Tesla-V100-PCIE-16GB)); C(nvidia.com/gpu.count); C(nvidia.com/gpu.memory), MiB of that GPU;
    C(nvidia.com/cuda.driver-version.major), C(.minor), C(.revision) and C(.full), from the driver version
    (V(510.47.03) gives V(510), V(47), V(03), V(510.47.03); a two-part version such as V(390.30) has no revision
    label); C(nvidia.com/cuda.runtime-version.major), C(.minor) and C(.full), which GFD takes, like this module, from
    the highest CUDA version the driver supports (C(cuda_driver_version), V(11.6)); and O(accelerator_label) set to
    the product slug (C(nvidia-tesla-v100-pcie-16gb)), the label the Kubernetes docs use in C(nodeSelector) examples."
  - A node with GPUs of several models is labelled after its first GPU (NVML index order) that has a name, as GFD
    labels a node after one model too. The count is the number of GPUs of any model.
  - A node whose fact says it has no GPU (C(present) false, or C(count) 0, for example a driver that is not loaded)
    gets none of these labels, and the ones this module set earlier are removed.
  - Labels are written by server-side apply with the field manager C(kubegpu.cluster/labels), applying only
    C(metadata.labels). The API server itself then removes labels this module applied earlier and no longer sends,
    and never touches labels set by anyone else (C(kubectl label), GFD, the node's kubelet), even under the same
    names; a label this module set and another manager also set is kept when this module drops it.
  - One LIST request reads every node; only the nodes whose labels differ from what they should be are patched, in
    parallel (O(concurrency)), each request bounded by O(request_timeout) and retried on conflicts (409),
    throttling (429), server errors (5xx) and connection errors.
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
  missing_nodes:
    description:
      - What to do about nodes in O(nodes) that are not in the cluster.
      - V(fail) fails before any node is changed, naming them all. V(skip) warns and labels the others (a node that
        has not joined yet is labelled on the next run).
    type: str
    choices: [fail, skip]
    default: fail
  concurrency:
    description: How many PATCH requests run in parallel.
    type: int
    default: 8
  request_timeout:
    description: Seconds each API request may take before it counts as failed (and is retried).
    type: int
    default: 30
  retries:
    description: How many times a request is retried on 409, 429, 5xx or a connection error, with a doubling pause.
    type: int
    default: 4
extends_documentation_fragment:
  - kubegpu.cluster.k8s_auth
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
  - With MIG, GFD's C(single) strategy names the product C(<model>-MIG-<profile>); this module always writes the
    plain model name, which is what GFD writes with the C(none) and C(mixed) strategies.
  - When GFD runs too, both write the same names with the same values. Conflicts are forced, so this module's
    values win on the labels it applies.
  - C(changed) is only true when a label value appears, changes or goes away. Taking over a label that already has
    the wanted value (set by someone else) is an apply request but not a change.
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
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import run_module
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import client, node_labels
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.args import argument_spec
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import constants as nv
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.labels import labels_for


def main():
    module = AnsibleModule(
        argument_spec=argument_spec(
            nodes=dict(type="dict"),
            node_names=dict(type="dict", default={}),
            accelerator_label=dict(type="str", default=nv.DEFAULT_ACCELERATOR_LABEL),
            state=dict(type="str", default="present", choices=["present", "absent"]),
            missing_nodes=dict(type="str", default="fail", choices=["fail", "skip"]),
            concurrency=dict(type="int", default=8),
            request_timeout=dict(type="int", default=30),
            retries=dict(type="int", default=4),
        ),
        required_if=[("state", "present", ["nodes"])],
        supports_check_mode=True,
    )
    params = module.params

    def work():
        # the core API only (no discovery), with as many pooled connections as parallel patches
        core = client.from_params(params, field_manager=node_labels.FIELD_MANAGER, pool_size=params["concurrency"]).core
        labeller = node_labels.NodeLabeller(core, timeout=params["request_timeout"], retries=params["retries"])
        return node_labels.run(params, labeller, labels_for, check_mode=module.check_mode, want_diff=module._diff)

    run_module(module, work, requires=client.REQUIRES)


if __name__ == "__main__":
    main()
