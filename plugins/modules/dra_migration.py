#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: dra_migration
short_description: Move GPU nodes from NVIDIA's device plugin to NVIDIA's DRA driver, or back, node by node
version_added: 0.3.0
description:
  - "With O(to=dra), sets on each of O(nodes) the operand deploy labels C(nvidia.com/gpu.deploy.device-plugin=false)
    (the device plugin's DaemonSet leaves the node) and C(nvidia.com/gpu.deploy.dra-driver=true) (the DRA kubelet
    plugin's DaemonSet arrives, as NVIDIA's GPU Operator gates it), in one server-side apply per node under the field
    manager C(kubegpu.cluster/dra-migration), then watches until each node advertises no C(nvidia.com/*) device-plugin
    resource (allocatable 0 or gone) and the ResourceSlices of the driver C(gpu.nvidia.com) list its GPUs (as many
    as its C(nvidia.com/gpu.count) label says, when it has one), at most O(wait_timeout) seconds."
  - "With O(to=device_plugin), the way back: applies C(nvidia.com/gpu.deploy.device-plugin=true) alone, so the
    C(dra-driver) label this module set is removed (where someone else set it to V(true) as well, it is set to
    V(false): the node must not run both plugins), and watches until no
    ResourceSlice of the driver is left for the node (the kubelet wipes them 30 s after the plugin leaves) and the
    node advertises C(nvidia.com/*) again."
  - The kubelet keeps a departed device plugin's capacity for 5 minutes before it sets it to 0; the scheduler looks
    at allocatable, which drops at once, so the module waits for allocatable and reports capacity
    (C(capacity_gpu) in RV(nodes)).
  - "Refused before any change, with the reason: a node that does not exist; a cluster that serves no
    C(resource.k8s.io) API; with O(to=dra), no DeviceClass C(gpu.nvidia.com) (the DRA driver is not deployed) or a
    node whose container runtime cannot hand CDI devices to a container (containerd before 1.7, cri-dockerd); a node
    where running pods hold GPUs (drain it first with M(kubegpu.cluster.gpu_node_maintenance), or set
    O(allow_busy))."
  - A node already on the side asked for changes nothing; a rerun reports no change.
author:
  - kubegpu.cluster contributors (@kubegpu)
options:
  nodes:
    description: The Kubernetes node names to move, all in one run.
    type: list
    elements: str
    required: true
  to:
    description: The side to move them to.
    type: str
    choices: [dra, device_plugin]
    default: dra
  wait:
    description: Watch until every node has arrived.
    type: bool
    default: true
  wait_timeout:
    description:
      - Bound of that watch, in seconds, for all the nodes together.
      - 0 or more; the module refuses less before it does anything.
    type: int
    default: 300
  allow_busy:
    description: Move nodes where running pods hold GPUs (their GPUs may then be handed out twice).
    type: bool
    default: false
extends_documentation_fragment:
  - kubegpu.cluster.k8s_auth
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reads the nodes, pods and ResourceSlices, validates the label patches with a server-side dry run.
  diff_mode:
    support: full
    details: The labels each node gets, before and after.
  idempotent:
    description: Whether a second run with the same options changes nothing and reports no change.
    support: full
  platform:
    platforms: posix
notes:
  - RBAC needed - C(get), C(list), C(watch) and C(patch) nodes, C(list) pods, C(get) deviceclasses, C(list) and
    C(watch) resourceslices.
  - Deploy the DRA driver first (M(kubegpu.cluster.dra_driver_deploy) or the C(kubegpu.cluster.dra) role), whose
    kubelet plugin DaemonSet selects C(nvidia.com/gpu.deploy.dra-driver=true).
seealso:
  - module: kubegpu.cluster.gpu_node_maintenance
  - module: kubegpu.cluster.gpu_fleet_audit
"""

EXAMPLES = r"""
- name: Move two nodes to DRA
  kubegpu.cluster.dra_migration:
    nodes: [gpu-node-1, gpu-node-2]
    to: dra
  delegate_to: localhost
  run_once: true

- name: And back to the device plugin
  kubegpu.cluster.dra_migration:
    nodes: [gpu-node-1, gpu-node-2]
    to: device_plugin
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
to:
  description: The side asked for.
  returned: always
  type: str
moved:
  description: The nodes whose labels changed (in check mode, would change).
  returned: always
  type: list
  elements: str
resource_api:
  description: The C(resource.k8s.io) version the API server serves (the newest), read for ResourceSlices.
  returned: always
  type: str
  sample: resource.k8s.io/v1
nodes:
  description:
    - Per node, after the wait (before it in check mode or without O(wait)) - C(kind) (C(device_plugin), C(dra),
      C(both) or C(none)), C(allocatable) (its C(nvidia.com/*) allocatable), C(capacity_gpu), C(slice_devices) (the
      device names its ResourceSlices publish), C(expected_gpus), C(arrived), C(missing).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubegpu.cluster.plugins.module_utils import _options
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import run_module
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import client
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.args import argument_spec
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.dra import migration as dra_migration


def main():
    module, rules = _options.module(
        AnsibleModule,
        argument_spec=argument_spec(
            nodes=dict(type="list", elements="str", required=True),
            to=dict(type="str", default=dra_migration.TO_DRA, choices=[dra_migration.TO_DRA, dra_migration.TO_DEVICE_PLUGIN]),
            wait=dict(type="bool", default=True),
            wait_timeout=dict(type="int", default=300, minimum=0),
            allow_busy=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    run_module(module, lambda: dra_migration.run(module.params, check_mode=module.check_mode), requires=client.REQUIRES,
               rules=rules)


if __name__ == "__main__":
    main()
