#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: dra_driver_deploy
short_description: Deploy NVIDIA's DRA driver for GPUs to Kubernetes and wait for the nodes' ResourceSlices
version_added: 0.3.0
description:
  - "Renders NVIDIA's DRA driver for GPUs (kubernetes-sigs/dra-driver-nvidia-gpu, v0.5.0 by default) as Kubernetes
    objects modelled on its Helm chart with C(resources.gpus.enabled=true): a namespace, the kubelet plugin's
    ServiceAccount and least-privilege ClusterRole, its DaemonSet (the C(gpus) container, privileged as the chart
    runs it) and the DeviceClasses C(gpu.nvidia.com) and C(mig.nvidia.com)."
  - The DaemonSet runs only on nodes labelled C(nvidia.com/gpu.deploy.dra-driver=true) (the GPU Operator's label for
    its DRA kubelet plugin), so that nodes move from the device plugin to DRA one at a time. A node labelled both
    C(nvidia.com/gpu.deploy.device-plugin=true) and C(nvidia.com/gpu.deploy.dra-driver=true) is refused before any
    write, naming it (the chart's rule - never both plugins on one GPU node).
  - "The Kubernetes version matrix (Kubernetes' C(pkg/features/kube_features.go)) is checked before any write: before
    1.32 is refused; on 1.32 and 1.33 C(resource.k8s.io) is beta and needs the C(DynamicResourceAllocation) feature
    gate on kube-apiserver, kube-controller-manager, kube-scheduler and kubelet and
    C(--runtime-config=resource.k8s.io/v1beta1=true) (1.33: C(v1beta2)); from 1.34 C(resource.k8s.io/v1) is on by
    default. The API version written is the highest the server serves of v1, v1beta2 and v1beta1, as the chart picks
    it. A refusal says what to turn on."
  - Objects are written with server-side apply (field manager C(kubegpu.cluster), conflicts forced).
  - With O(wait), watches the DaemonSet's rollout, then the driver's ResourceSlices until every node labelled for DRA
    lists its GPUs under C(gpu.nvidia.com) (as many as its C(nvidia.com/gpu.count) label says, else at least one); on
    timeout one error names each node that did not, what its slices list and its plugin pod's state.
author:
  - kubegpu.cluster contributors (@kubegpu)
options:
  namespace:
    description:
      - The namespace of the deployment. Created by the module when missing (and then deleted by O(state=absent));
        an existing namespace is used as is and never deleted.
    type: str
    default: nvidia-dra-driver-gpu
  version:
    description: The driver's release, used for the default O(image).
    type: str
    default: v0.5.0
  image:
    description: The image, for a private registry or mirror. Defaults to
      C(registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:<version>).
    type: str
  image_pull_secrets:
    description: Names of Secrets in O(namespace) to pull the image with.
    type: list
    elements: str
    default: []
  nvidia_driver_root:
    description: Where the NVIDIA driver is installed on the host (the chart's C(nvidiaDriverRoot)).
    type: str
    default: /
  kubelet_root_dir:
    description:
      - The kubelet's root directory on the DRA nodes; the plugin registers under C(<dir>/plugins_registry) and keeps
        its data under C(<dir>/plugins). V(/var/lib/kubelet) for kubeadm; k0s uses C(/var/lib/k0s/kubelet), microk8s
        C(/var/snap/microk8s/common/var/lib/kubelet). M(kubegpu.cluster.dra_host_prep) finds it on each node.
      - An absolute path.
    type: str
    default: /var/lib/kubelet
  node_selector:
    description: More node labels the plugin's pods select on, beside C(nvidia.com/gpu.deploy.dra-driver=true).
    type: dict
    default: {}
  tolerations:
    description: The plugin pods' tolerations. Defaults to C(nvidia.com/gpu) Exists NoSchedule, as the chart's.
    type: list
    elements: dict
  priority_class:
    description: The plugin pods' priorityClassName; an empty string for none.
    type: str
    default: system-node-critical
  extended_resource:
    description:
      - "Whether the C(gpu.nvidia.com) DeviceClass names C(extendedResourceName: nvidia.com/gpu), so that a pod asking
        for C(nvidia.com/gpu) is served through DRA on nodes without the device plugin (KEP-5004,
        C(DRAExtendedResource))."
      - Unset, it is on where the feature is on by default (Kubernetes 1.36 and later, with C(resource.k8s.io/v1)).
        V(true) on 1.34 and 1.35 needs the C(DRAExtendedResource) gate on every component - a server-side dry run of
        the DeviceClass refuses it, before any write, where kube-apiserver drops the field, and a warning reminds of
        the other components' gates. Refused before 1.34.
    type: bool
  compute_domains:
    description:
      - Compute domains (Multi-Node NVLink through IMEX - the chart's CRDs, its controller and their RBAC). Off by
        default, because they serve only GB200-class NVLink domains and need a controller Deployment and CRDs that
        plain GPU allocation does not; V(true) is refused in this release, before any write.
    type: bool
    default: false
  state:
    description:
      - V(present) applies the objects (and removes those of an earlier run no longer rendered).
      - V(absent) deletes exactly what the module created, and the namespace only when the module created it.
    type: str
    choices: [present, absent]
    default: present
  wait:
    description: Wait (with watches) for the rollout and the ResourceSlices, or with O(state=absent) for the pods to go.
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
      yet are reported as created. The refusals are the same as in a real run.
  diff_mode:
    support: full
    details: Before and after of every object that changes, without status and server-managed metadata.
  idempotent:
    description: Whether a second run with the same options changes nothing and reports no change.
    support: full
    details: The live objects are compared before and after the server-side apply, so a second run reports every
      object V(unchanged).
  platform:
    platforms: posix
seealso:
  - module: kubegpu.cluster.dra_host_prep
  - module: kubegpu.cluster.device_plugin_deploy
  - name: NVIDIA's DRA driver for GPUs
    description: Its Helm chart and kubelet plugin.
    link: https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu
"""

EXAMPLES = r"""
- name: Deploy NVIDIA's DRA driver; wait until every node labelled for DRA lists its GPUs
  kubegpu.cluster.dra_driver_deploy:
    kubeconfig: ~/.kube/config

- name: On k0s, whose kubelet keeps its plugins under /var/lib/k0s/kubelet
  kubegpu.cluster.dra_driver_deploy:
    kubelet_root_dir: /var/lib/k0s/kubelet

- name: Kubernetes 1.35 with DRAExtendedResource turned on everywhere - map nvidia.com/gpu to DRA
  kubegpu.cluster.dra_driver_deploy:
    extended_resource: true

- name: Remove it again
  kubegpu.cluster.dra_driver_deploy:
    state: absent
"""

RETURN = r"""
objects:
  description: Every object considered, with its C(kind), C(name), C(namespace) and C(action) (created, updated,
    unchanged or deleted; in check mode what would happen).
  returned: always
  type: list
  elements: dict
  sample: [{"kind": "DaemonSet", "name": "dra-driver-nvidia-gpu-kubelet-plugin", "namespace": "nvidia-dra-driver-gpu",
            "action": "created"}]
namespace:
  description: The namespace used.
  returned: always
  type: str
  sample: nvidia-dra-driver-gpu
kubernetes:
  description: The server's Kubernetes minor.
  returned: with O(state=present)
  type: str
  sample: "1.36"
api_version:
  description: The C(resource.k8s.io) version the DeviceClasses were written in.
  returned: with O(state=present)
  type: str
  sample: resource.k8s.io/v1
extended_resource:
  description: Whether the C(gpu.nvidia.com) DeviceClass maps C(nvidia.com/gpu).
  returned: with O(state=present)
  type: bool
  sample: true
nodes:
  description: The nodes the kubelet plugin runs on - labelled C(nvidia.com/gpu.deploy.dra-driver=true) and matching
    O(node_selector); the wait is for their ResourceSlices.
  returned: always
  type: list
  elements: str
  sample: [gpu-1]
slices:
  description: Per DRA node, the GPUs its ResourceSlices list under C(gpu.nvidia.com) after the wait.
  returned: always
  type: dict
  sample: {"gpu-1": ["gpu-0", "gpu-1"]}
diff:
  description: C(before) and C(after), each mapping C(Kind/namespace/name) to the object (null when absent).
  returned: in diff mode
  type: dict
  sample: {"before": {"DeviceClass//gpu.nvidia.com": null}, "after": {}}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubegpu.cluster.plugins.module_utils import _options
from ansible_collections.kubegpu.cluster.plugins.module_utils._kubelet import DEFAULT_ROOT_DIR
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import run_module
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.args import argument_spec
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.client import REQUIRES
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import constants as nv
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.dra.deployment import run


def main():
    module, rules = _options.module(
        AnsibleModule,
        argument_spec=argument_spec(
            namespace=dict(type="str", default=nv.DRA_NAMESPACE),
            version=dict(type="str", default=nv.DRA_DRIVER_VERSION),
            image=dict(type="str"),
            image_pull_secrets=dict(type="list", elements="str", default=[], no_log=False),  # names, not secrets
            nvidia_driver_root=dict(type="str", default=nv.DEFAULT_DRIVER_ROOT),
            kubelet_root_dir=dict(type="str", default=DEFAULT_ROOT_DIR, absolute=True),
            node_selector=dict(type="dict", default={}),
            tolerations=dict(type="list", elements="dict"),
            priority_class=dict(type="str", default=nv.DEFAULT_PRIORITY_CLASS),
            extended_resource=dict(type="bool"),
            compute_domains=dict(type="bool", default=False),
            state=dict(type="str", default="present", choices=["present", "absent"]),
            wait=dict(type="bool", default=True),
            wait_timeout=dict(type="int", default=nv.DRA_DEFAULT_WAIT_TIMEOUT, minimum=0),
        ),
        supports_check_mode=True,
    )
    run_module(module, lambda: run(module.params, check_mode=module.check_mode, want_diff=module._diff),
               requires=REQUIRES, rules=rules)


if __name__ == "__main__":
    main()
