#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: node_feature_discovery
short_description: Deploy node feature discovery (NFD) to Kubernetes, or use the one the cluster runs
version_added: 0.1.0
description:
  - "Renders node feature discovery (v0.19.0 by default, the release the GPU Operator v26.7.0 ships) as Kubernetes
    objects modelled on NFD's Helm chart: its CustomResourceDefinitions (C(NodeFeature), C(NodeFeatureRule),
    C(NodeFeatureGroup) in C(nfd.k8s-sigs.io)), nfd-master (a Deployment, one replica) with its config file, and
    nfd-worker (a DaemonSet) with its config file, each with least-privilege RBAC and NFD's hardened security context
    (no privilege escalation, no capabilities, read-only root file system, not root)."
  - nfd-worker publishes each node's features as a C(NodeFeature) object; other publishers such as GPU feature
    discovery write C(NodeFeature) objects too, and nfd-master turns them into node labels (by default under
    C(feature.node.kubernetes.io/), and the label namespaces NFD allows, for example C(nvidia.com/)).
  - "An NFD the cluster already runs is used as it is (O(use_existing)): it counts as present when the C(NodeFeature)
    CRD exists and a Deployment in any namespace runs C(nfd-master) (its container's command, or first argument, is
    that program), as NFD's Helm chart, its kustomize overlays, the NFD operator and the GPU Operator deploy it. Then
    nothing is applied and RV(existing) names it."
  - The options are checked before any API call. Objects are written with server-side apply (field manager
    C(kubegpu.cluster)); a hash of the config files is put in the pod templates, so a config change rolls the pods. An
    existing CRD of the same name that this module did not create is used as it is, never changed nor deleted.
  - With O(wait), watches until the CRDs are established and nfd-master's and nfd-worker's rollouts are complete, or
    names the pods that do not run and why.
author:
  - kubegpu.cluster contributors (@kubegpu)
options:
  namespace:
    description:
      - The namespace of the deployment. Created by the module when missing, and then marked with the annotation
        C(kubegpu.cluster/created-by), so that O(state=absent) deletes it again; an existing namespace is used as is
        and never deleted.
    type: str
    default: node-feature-discovery
  version:
    description: The NFD release, used for the default O(image).
    type: str
    default: v0.19.0
  image:
    description: The image, for a private registry or mirror. Defaults to C(registry.k8s.io/nfd/node-feature-discovery:<version>).
    type: str
  image_pull_secrets:
    description: Names of Secrets in O(namespace) to pull the image with.
    type: list
    elements: str
    default: []
  extra_label_ns:
    description:
      - Label namespaces nfd-master publishes even where NFD would deny them (its C(extraLabelNs)), for example
        V(nvidia.com), which the device plugin's Helm chart sets. Unset or empty allows only NFD's own (every
        namespace outside C(kubernetes.io)).
    type: list
    elements: str
  pci_device_classes:
    description:
      - PCI device class prefixes (hexadecimal) nfd-worker labels devices of (its C(sources.pci.deviceClassWhitelist)),
        for example V(02) and V(03), which the device plugin's Helm chart sets. Unset or empty keeps NFD's own
        default (V(03), V(0b40), V(12)).
    type: list
    elements: str
  pci_label_fields:
    description:
      - Fields a PCI device label is made of (its C(sources.pci.deviceLabelFields)); V(vendor) alone gives
        C(feature.node.kubernetes.io/pci-10de.present) for an NVIDIA device. Unset or empty keeps NFD's own default
        (V(class), V(vendor)).
    type: list
    elements: str
    choices: [class, vendor, device, subsystem_vendor, subsystem_device]
  worker_tolerations:
    description: The tolerations of nfd-worker's pods, for example of a taint GPU nodes carry; none when unset.
    type: list
    elements: dict
  worker_node_selector:
    description: The nodeSelector of nfd-worker's pods; empty runs it on every node.
    type: dict
    default: {}
  master_tolerations:
    description: The tolerations of nfd-master's pod. Defaults to NFD's, for the control-plane taint.
    type: list
    elements: dict
  priority_class:
    description: The pods' priorityClassName; empty for none (NFD's default).
    type: str
    default: ""
  use_existing:
    description:
      - Use an NFD the cluster already runs (see the description) instead of deploying one. V(false) deploys this
        module's NFD in any case.
    type: bool
    default: true
  state:
    description:
      - V(present) applies the objects (and removes those of an earlier run no longer needed).
      - V(absent) first deletes every C(NodeFeature) object, so that nfd-master removes the node labels it set (what
        NFD's Helm chart does with C(nfd-master -prune) when it is uninstalled), waits for that, then deletes exactly
        what the module created, found by label C(app.kubernetes.io/managed-by=kubegpu.cluster) in O(namespace), the
        cluster-scoped ones (CRDs, ClusterRole, ClusterRoleBinding) by label C(kubegpu.cluster/namespace), and the
        namespace only when the module created it. An NFD the module did not deploy is never touched.
    type: str
    choices: [present, absent]
    default: present
  wait:
    description:
      - Wait (with watches) for the CRDs and the rollouts, or with O(state=absent) for the labels, the pods and the CRDs to go.
      - A deleted CRD stays until the API server has removed its objects; creating it again meanwhile fails.
    type: bool
    default: true
  wait_timeout:
    description:
      - How long to wait in all, in seconds.
      - 0 or more; the module refuses less before it does anything.
    type: int
    default: 300
extends_documentation_fragment:
  - kubegpu.cluster.k8s_auth
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: A server-side dry run (C(dryRun=All)) tells what would change; objects in a namespace that does not exist
      yet are reported as created.
  diff_mode:
    support: full
    details: Before and after of every object that changes, without status and server-managed metadata.
  idempotent:
    description: Whether a second run with the same options changes nothing and reports no change.
    support: full
    details: The live objects are compared before and after the server-side apply; pods roll only when a config changes.
  platform:
    platforms: posix
notes:
  - NFD's garbage collector (nfd-gc) is not deployed. nfd-worker makes its pod and DaemonSet the owners of its
    C(NodeFeature) object, so Kubernetes' own garbage collector deletes it with them.
  - nfd-master runs one replica without leader election, so it needs no Lease; it gets no rights on namespaces, since
    no C(NodeFeature) namespace selector is configured.
seealso:
  - module: kubegpu.cluster.device_plugin_deploy
  - module: kubegpu.cluster.gpu_node_labels
  - name: Node feature discovery
    description: NFD's documentation.
    link: https://kubernetes-sigs.github.io/node-feature-discovery/
"""

EXAMPLES = r"""
- name: NFD as the device plugin's Helm chart configures it (for GPU feature discovery), unless one runs already
  kubegpu.cluster.node_feature_discovery:
    kubeconfig: ~/.kube/config
    extra_label_ns: [nvidia.com]
    pci_device_classes: ["02", "03"]
    pci_label_fields: [vendor]
    worker_tolerations:
      - key: nvidia.com/gpu
        operator: Exists
        effect: NoSchedule
  register: nfd

- name: Say which NFD is used
  ansible.builtin.debug:
    msg: "{{ nfd.existing or 'ours, in ' + nfd.namespace }}"

- name: Remove it again, with the labels it set
  kubegpu.cluster.node_feature_discovery:
    state: absent
"""

RETURN = r"""
existing:
  description: The nfd-master Deployment (C(namespace/name)) of an NFD the cluster already runs, which is used; null
    when the module's own NFD is used.
  returned: always
  type: str
  sample: gpu-operator/gpu-operator-node-feature-discovery-master
namespace:
  description: The namespace of the module's NFD.
  returned: always
  type: str
  sample: node-feature-discovery
objects:
  description: Every object considered, with its C(kind), C(name), C(namespace) and C(action) (created, updated,
    unchanged or deleted; in check mode what would happen).
  returned: always
  type: list
  elements: dict
  sample: [{"kind": "DaemonSet", "name": "nfd-worker", "namespace": "node-feature-discovery", "action": "created"}]
master_config:
  description: nfd-master's config file as data.
  returned: always
  type: dict
  sample: {"extraLabelNs": ["nvidia.com"]}
worker_config:
  description: nfd-worker's config file as data.
  returned: always
  type: dict
  sample: {"sources": {"pci": {"deviceClassWhitelist": ["02", "03"], "deviceLabelFields": ["vendor"]}}}
node_features_deleted:
  description: With O(state=absent), the C(NodeFeature) objects (C(namespace/name)) deleted so that nfd-master removes
    its labels.
  returned: always
  type: list
  elements: str
  sample: ["node-feature-discovery/gpu-1", "nvidia-device-plugin/nvidia-features-for-gpu-1"]
diff:
  description: C(before) and C(after), each mapping C(Kind/namespace/name) to the object (null when absent).
  returned: in diff mode
  type: dict
  sample: {"before": {"DaemonSet/node-feature-discovery/nfd-worker": null}, "after": {}}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubegpu.cluster.plugins.module_utils import _options
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import run_module
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.args import argument_spec
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.client import REQUIRES
from ansible_collections.kubegpu.cluster.plugins.module_utils._nfd.args import NFD_OPTIONS
from ansible_collections.kubegpu.cluster.plugins.module_utils._nfd.deployment import run


def main():
    module, rules = _options.module(
        AnsibleModule,
        argument_spec=argument_spec(**NFD_OPTIONS),
        supports_check_mode=True,
    )
    run_module(module, lambda: run(module.params, check_mode=module.check_mode, want_diff=module._diff),
               requires=REQUIRES, rules=rules)


if __name__ == "__main__":
    main()
