#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: gpu_node_maintenance
short_description: Take a GPU node out of service for work on its GPUs (MIG layout, driver), and give it back as it was
version_added: 0.2.0
description:
  - With O(state=drained), before anything changes, writes what the node has to one annotation
    (C(kubegpu.cluster/maintenance)) - whether it was already cordoned, the value of each label it changes - then, in
    one patch, cordons it (O(cordon); a node an admin cordoned stays as it is and is never uncordoned by this module),
    sets each operand deploy label that is V(true) (C(nvidia.com/gpu.deploy.*), the labels the device plugin, GPU
    feature discovery and MPS control daemon pods select on) to O(pause_value), as NVIDIA's MIG manager does, and sets
    O(labels). Then it evicts every pod on the node that uses a GPU - one that asks for an C(nvidia.com/*) resource, or
    runs under one of O(runtime_classes) without asking for one - through the Eviction API, so that
    PodDisruptionBudgets hold (retried while a budget refuses), and watches until those pods and the paused operand
    pods are gone, at most O(wait_timeout) seconds.
  - DaemonSet pods of others that use a GPU are not evicted (their controller would put them back at once); they are
    returned in RV(left) and warned about.
  - With O(state=restored), puts back what the annotation recorded (the labels' values, removing those that were not
    there; the cordon only where this module set it), sets O(labels), and removes the annotation.
  - Both states are idempotent; a drained node stays recorded until it is restored, in this run or a later one.
author:
  - kubegpu.cluster contributors (@kubegpu)
options:
  node:
    description: The Kubernetes node name.
    type: str
    required: true
  state:
    description: V(drained) takes the node out of service; V(restored) gives it back.
    type: str
    choices: [drained, restored]
    default: drained
  cordon:
    description: With O(state=drained), mark the node unschedulable (when it is not already).
    type: bool
    default: true
  evict:
    description: With O(state=drained), evict the pods that use a GPU.
    type: bool
    default: true
  wait:
    description: With O(state=drained), wait until the evicted pods and the paused operand pods are gone.
    type: bool
    default: true
  wait_timeout:
    description:
      - Bound of the evictions and of that wait, in seconds.
      - 0 or more; the module refuses less before it does anything.
    type: int
    default: 300
  runtime_classes:
    description: RuntimeClass names whose pods use the GPU even without asking for an C(nvidia.com/*) resource.
    type: list
    elements: str
    default: [nvidia]
  pause_value:
    description: The value a paused operand deploy label gets (NVIDIA's MIG manager's own).
    type: str
    default: paused-for-mig-change
  mig_config_state:
    description:
      - The value of the node label C(nvidia.com/mig.config.state), as NVIDIA's MIG manager reports its work
        (V(pending), V(rebooting), V(success), V(failed)); unset leaves the label alone. Set like O(labels).
    type: str
    choices: [pending, rebooting, success, failed]
  labels:
    description:
      - Further node labels to set (a null value removes one).
      - With O(state=drained) their previous values are recorded too; with O(state=restored) they are set as given
        instead of as recorded.
    type: dict
    default: {}
extends_documentation_fragment:
  - kubegpu.cluster.k8s_auth
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reads the node and its pods and says what it would change and evict.
  diff_mode:
    support: none
    details: RV(evicted), RV(paused_labels) and RV(restored_labels) say what changes.
  idempotent:
    description: Whether a second run with the same options changes nothing and reports no change.
    support: full
  platform:
    platforms: posix
notes:
  - RBAC needed - C(get) and C(patch) nodes, C(list) and C(watch) pods, C(create) C(pods/eviction).
"""

EXAMPLES = r"""
- name: Take the node out of service before its MIG layout changes
  kubegpu.cluster.gpu_node_maintenance:
    node: gpu-node-1
    mig_config_state: pending
  delegate_to: localhost

- name: Give it back
  kubegpu.cluster.gpu_node_maintenance:
    node: gpu-node-1
    state: restored
    mig_config_state: success
  delegate_to: localhost
"""

RETURN = r"""
node:
  description: The node.
  returned: always
  type: str
cordoned_by_us:
  description: Whether this module cordoned the node (and will uncordon it).
  returned: O(state=drained)
  type: bool
admin_cordoned:
  description: Whether the node was cordoned by someone else (and stays cordoned).
  returned: O(state=drained)
  type: bool
paused_labels:
  description: The operand deploy labels that are paused.
  returned: O(state=drained)
  type: list
  elements: str
evicted:
  description: The pods (C(namespace/name)) evicted (in check mode, that would be).
  returned: O(state=drained)
  type: list
  elements: str
left:
  description: DaemonSet pods of others that use a GPU and were not evicted.
  returned: O(state=drained)
  type: list
  elements: str
uncordoned:
  description: Whether the node was uncordoned.
  returned: O(state=restored)
  type: bool
restored_labels:
  description: The labels put back as recorded.
  returned: O(state=restored)
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubegpu.cluster.plugins.module_utils import _options
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import run_module
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import client, maintenance
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.args import argument_spec
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.objects import LABEL_MANAGED_BY, LABEL_NAME, MANAGER
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import constants as nv


def work(params, check_mode):
    labels = dict(params["labels"])
    if params["mig_config_state"]:
        labels[nv.LABEL_MIG_CONFIG_STATE] = params["mig_config_state"]
    params = dict(params, labels=labels, resource_prefixes=[nv.RESOURCE_PREFIX + "/"], deploy_label_prefix=nv.LABEL_DEPLOY_PREFIX,
                  operand_selector={LABEL_NAME: nv.APP_NAME, LABEL_MANAGED_BY: MANAGER})
    api = client.from_params(params)
    maint = maintenance.Maintenance(api.core, api, params["pause_value"])
    if params["state"] == "restored":
        return maintenance.restore(maint, params["node"], params, check_mode=check_mode)
    result = maintenance.drain(maint, params["node"], params, check_mode=check_mode)
    if result["left"]:
        result["warnings"] = ["node %s: DaemonSet pods of others use its GPUs and were not evicted: %s"
                              % (params["node"], ", ".join(result["left"]))]
    return result


def main():
    module, rules = _options.module(
        AnsibleModule,
        argument_spec=argument_spec(
            node=dict(type="str", required=True),
            state=dict(type="str", default="drained", choices=["drained", "restored"]),
            cordon=dict(type="bool", default=True),
            evict=dict(type="bool", default=True),
            wait=dict(type="bool", default=True),
            wait_timeout=dict(type="int", default=300, minimum=0),
            runtime_classes=dict(type="list", elements="str", default=[nv.RUNTIME_NAME]),
            pause_value=dict(type="str", default=nv.DEPLOY_LABEL_PAUSED),
            mig_config_state=dict(type="str", choices=list(nv.MIG_CONFIG_STATES)),
            labels=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
    )
    run_module(module, lambda: work(module.params, module.check_mode), requires=client.REQUIRES, rules=rules)


if __name__ == "__main__":
    main()
