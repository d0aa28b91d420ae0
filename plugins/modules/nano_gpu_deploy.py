#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: nano_gpu_deploy
short_description: Deploy nano-gpu's scheduler extender and agent (fractional GPUs as nano-gpu/gpu-percent)
version_added: 0.2.0
description:
  - "Renders nano-gpu's cluster side as Kubernetes objects modelled on its upstream manifests (release 0.3.0 by
    default): the scheduler extender (a ServiceAccount, a least-privilege ClusterRole and binding, a Deployment of one
    replica and the Service the kube-scheduler calls on port 39999, path C(/scheduler)) and the agent (a
    ServiceAccount, its ClusterRole and binding, and a privileged DaemonSet on the GPU nodes that advertises
    C(nano-gpu/gpu-percent), 100 per GPU)."
  - The extender decides which GPU each container of a pod gets (a container's share must fit in one GPU), writes the
    GPU index per container into the pod's annotations C(nano-gpu/container-<name>) and marks it C(nano-gpu/assume),
    then binds it. The kube-scheduler only calls it for pods asking for C(nano-gpu/gpu-percent), once its
    C(extenders) entry is configured; this module returns that entry (RV(extender)) for the Service's cluster IP.
    Configuring the kube-scheduler itself, and preparing the GPU hosts for the agent, is the nano_gpu role's work.
  - Objects are written with server-side apply (field manager C(kubegpu.cluster), conflicts forced), validated before
    any API call.
  - With O(wait), watches the rollouts and then every node in O(expected) (or worked out from O(facts)) until it
    advertises its C(nano-gpu/gpu-percent); on timeout it names each node that is short and its agent pod's state.
author:
  - kubegpu.cluster contributors (@kubegpu)
options:
  namespace:
    description:
      - The namespace of both parts; upstream uses C(kube-system). A namespace the module creates is marked with the
        annotation C(kubegpu.cluster/created-by), so that O(state=absent) deletes it again; an existing one is used
        as is and never deleted.
    type: str
    default: kube-system
  version:
    description: The nano-gpu release, used for the default images.
    type: str
    default: 0.3.0
  scheduler_image:
    description: The extender's image. Defaults to C(nanogpu/nano-gpu-scheduler:<version>).
    type: str
  agent_image:
    description: The agent's image. Defaults to C(nanogpu/nano-gpu-agent:<version>).
    type: str
  image_pull_secrets:
    description: Names of Secrets in O(namespace) to pull the images with.
    type: list
    elements: str
    default: []
  priority:
    description: How the extender chooses among nodes and GPUs (its C(--priority)); V(binpack) fills used GPUs first,
      V(spread) prefers free ones.
    type: str
    choices: [binpack, spread]
    default: binpack
  scheduler_node_selector:
    description:
      - The extender pod's nodeSelector. Empty runs it on any node.
      - On an edge cluster (SuperEdge) the kube-scheduler runs in the cloud and edge nodes may be cut off from it, so
        the extender belongs in the cloud too; select the cloud nodes here, for example
        C(node-role.kubernetes.io/control-plane) with an empty value, with the matching O(scheduler_tolerations).
    type: dict
    default: {}
  scheduler_tolerations:
    description: The extender pod's tolerations (for a control-plane node, C(node-role.kubernetes.io/control-plane)
      Exists NoSchedule).
    type: list
    elements: dict
    default: []
  agent_node_selector:
    description: The agent pods' nodeSelector, the NVIDIA GPU nodes. Defaults to C(nvidia.com/gpu.present=true), the
      label M(kubegpu.cluster.gpu_node_labels) sets.
    type: dict
  agent_tolerations:
    description: The agent pods' tolerations. Defaults to C(nvidia.com/gpu) Exists NoSchedule and
      C(CriticalAddonsOnly) Exists.
    type: list
    elements: dict
  agent_installer:
    description:
      - Run the agent's init container, which replaces the host's C(nvidia-container-runtime-hook) and
        C(nvidia-container-toolkit) with nano-gpu's through the host's root filesystem, as upstream does.
      - V(false) when the hosts were prepared otherwise (the nano_gpu role backs those files up first).
    type: bool
    default: true
  extender_ignorable:
    description: The C(ignorable) field of the returned RV(extender) entry; V(true) lets the kube-scheduler go on when
      the extender does not answer (the pods asking for the resource are then bound without a GPU index).
    type: bool
    default: false
  state:
    description:
      - V(present) applies the objects (and removes those of an earlier run no longer rendered).
      - V(absent) deletes exactly what the module created, found by label
        C(app.kubernetes.io/managed-by=kubegpu.cluster) in O(namespace) and the cluster-scoped ones by label
        C(kubegpu.cluster/namespace); with O(wait), it then waits until the agent pods are gone and no node that
        advertised C(nano-gpu/gpu-percent) before still does.
    type: str
    choices: [present, absent]
    default: present
  wait:
    description: Wait (with watches) for the rollouts and O(expected), or with O(state=absent) for the pods to go.
    type: bool
    default: true
  wait_timeout:
    description:
      - How long to wait in all, in seconds.
      - 0 or more; the module refuses less before it does anything.
    type: int
    default: 300
  expected:
    description:
      - Node name to the C(nano-gpu/gpu-percent) it must advertise (100 per GPU), for example C(gpu-1) with V(400).
      - Mutually exclusive with O(facts).
    type: dict
    default: {}
  facts:
    description:
      - Host name to its C(gpu) fact, as M(kubegpu.cluster.gpu_facts) returns it; each host with NVIDIA GPUs must
        advertise 100 per GPU (the agent counts them through NVML). Hosts without GPUs are left out, and so are
        hosts whose GPUs are all in MIG mode (see RV(left_out)).
      - Mutually exclusive with O(expected).
    type: dict
    default: {}
  node_names:
    description: Host name in O(facts) to its Kubernetes node name, for hosts whose names differ.
    type: dict
    default: {}
extends_documentation_fragment:
  - kubegpu.cluster.k8s_auth
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: A server-side dry run (C(dryRun=All)) tells what would change.
  diff_mode:
    support: full
    details: Before and after of every object that changes, without status and server-managed metadata.
  idempotent:
    description: Whether a second run with the same options changes nothing and reports no change.
    support: full
  platform:
    platforms: posix
notes:
  - The agent only works with the legacy NVIDIA hook and docker's C(default-runtime) set to C(nvidia); see
    docs/nano-gpu.md.
seealso:
  - module: kubegpu.cluster.device_plugin_deploy
  - name: nano-gpu scheduler
    description: The extender's source and manifests.
    link: https://github.com/nano-gpu/nano-gpu-scheduler
  - name: nano-gpu agent
    description: The agent's source and manifests.
    link: https://github.com/nano-gpu/nano-gpu-agent
"""

EXAMPLES = r"""
- name: Deploy nano-gpu and wait until gpu-1 advertises its 4 GPUs as 400 percent
  kubegpu.cluster.nano_gpu_deploy:
    expected:
      gpu-1: 400
  register: nano_gpu

- name: Show the kube-scheduler's extenders entry
  ansible.builtin.debug:
    var: nano_gpu.extender

- name: SuperEdge - the extender in the cloud, on the control plane
  kubegpu.cluster.nano_gpu_deploy:
    scheduler_node_selector:
      node-role.kubernetes.io/control-plane: ""
    scheduler_tolerations:
      - key: node-role.kubernetes.io/control-plane
        operator: Exists
        effect: NoSchedule
    facts: "{{ dict(groups['gpu_nodes'] | zip(groups['gpu_nodes'] | map('extract', hostvars, ['ansible_facts', 'gpu']))) }}"

- name: Remove it again
  kubegpu.cluster.nano_gpu_deploy:
    state: absent
"""

RETURN = r"""
objects:
  description: Every object considered, with its C(kind), C(name), C(namespace) and C(action) (created, updated,
    unchanged or deleted; in check mode what would happen).
  returned: always
  type: list
  elements: dict
  sample: [{"kind": "Deployment", "name": "nano-gpu-scheduler", "namespace": "kube-system", "action": "created"}]
namespace:
  description: The namespace used.
  returned: always
  type: str
  sample: kube-system
images:
  description: The images used, C(scheduler) and C(agent).
  returned: always
  type: dict
  sample: {"scheduler": "nanogpu/nano-gpu-scheduler:0.3.0", "agent": "nanogpu/nano-gpu-agent:0.3.0"}
url_prefix:
  description: The extender's URL for the kube-scheduler, on the Service's cluster IP; null while the Service has none
    (check mode before the first run, or O(state=absent)).
  returned: always
  type: str
  sample: http://10.96.12.34:39999/scheduler
extender:
  description: The kube-scheduler's C(extenders) entry (KubeSchedulerConfiguration v1) for RV(url_prefix), as the
    nano_gpu role writes it; null when RV(url_prefix) is.
  returned: always
  type: dict
  sample: {"urlPrefix": "http://10.96.12.34:39999/scheduler", "filterVerb": "filter", "prioritizeVerb": "priorities",
           "bindVerb": "bind", "weight": 1, "nodeCacheCapable": true, "ignorable": false,
           "managedResources": [{"name": "nano-gpu/gpu-percent", "ignoredByScheduler": false}]}
expected:
  description: What the module waits for per node, from O(expected) or worked out from O(facts).
  returned: always
  type: dict
  sample: {"gpu-1": {"nano-gpu/gpu-percent": 400}}
left_out:
  description:
    - Per node of O(facts) that the agent is kept off (by a node affinity on C(kubernetes.io/hostname)), why.
      That is a node whose GPUs are all in MIG mode. The agent offers 100 percent per GPU whatever its MIG mode, and
      a share of a MIG-mode GPU gets no CUDA device. A node with only some GPUs in MIG mode keeps the agent, with a
      warning.
  returned: always
  type: dict
  sample: {"gpu-a100": "its 8 GPU(s) are all in MIG mode: ..."}
resources:
  description: Per node, the C(nano-gpu/gpu-percent) it advertises after the wait (every node that advertises it when
    neither O(expected) nor O(facts) is given).
  returned: always
  type: dict
  sample: {"gpu-1": {"nano-gpu/gpu-percent": 400}}
resources_gone:
  description: With O(state=absent) and O(wait), the nodes that advertised C(nano-gpu/gpu-percent) before the removal
    and no longer do.
  returned: when O(state=absent), O(wait) and something was removed
  type: list
  elements: str
  sample: [gpu-1]
diff:
  description: C(before) and C(after), each mapping C(Kind/namespace/name) to the object (null when absent).
  returned: in diff mode
  type: dict
  sample: {"before": {"Service/kube-system/nano-gpu-scheduler": null}, "after": {}}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubegpu.cluster.plugins.module_utils import _options
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import run_module
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.args import argument_spec
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.client import REQUIRES
from ansible_collections.kubegpu.cluster.plugins.module_utils._nanogpu import constants as C
from ansible_collections.kubegpu.cluster.plugins.module_utils._nanogpu.deployment import run


def main():
    module, rules = _options.module(
        AnsibleModule,
        argument_spec=argument_spec(
            namespace=dict(type="str", default=C.NAMESPACE),
            version=dict(type="str", default=C.VERSION),
            scheduler_image=dict(type="str"),
            agent_image=dict(type="str"),
            image_pull_secrets=dict(type="list", elements="str", default=[], no_log=False),  # names, not secrets
            priority=dict(type="str", default=C.DEFAULT_PRIORITY, choices=list(C.PRIORITIES)),
            scheduler_node_selector=dict(type="dict", default={}),
            scheduler_tolerations=dict(type="list", elements="dict", default=[]),
            agent_node_selector=dict(type="dict"),
            agent_tolerations=dict(type="list", elements="dict"),
            agent_installer=dict(type="bool", default=True),
            extender_ignorable=dict(type="bool", default=False),
            state=dict(type="str", default="present", choices=["present", "absent"]),
            wait=dict(type="bool", default=True),
            wait_timeout=dict(type="int", default=C.DEFAULT_WAIT_TIMEOUT, minimum=0),
            expected=dict(type="dict", default={}),
            facts=dict(type="dict", default={}),
            node_names=dict(type="dict", default={}),
        ),
        mutually_exclusive=[("expected", "facts")],
        supports_check_mode=True,
    )
    run_module(module, lambda: run(module.params, check_mode=module.check_mode, want_diff=module._diff),
               requires=REQUIRES, rules=rules)


if __name__ == "__main__":
    main()
