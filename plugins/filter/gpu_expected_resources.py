# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: gpu_expected_resources
short_description: What each node will advertise once the NVIDIA device plugin runs, from its GPU facts
version_added: 0.1.0
author:
  - kubegpu.cluster contributors (@kubegpu)
description:
  - Takes node name to C(gpu) fact (as M(kubegpu.cluster.gpu_facts) returns it) and the device plugin's MIG strategy
    and sharing options, and returns node name to the C(nvidia.com/*) allocatable counts the plugin will advertise,
    following the plugin's rules. Nodes without GPUs are left out.
  - A preview of what M(kubegpu.cluster.device_plugin_deploy) works out and waits for itself when given the same facts
    as O(kubegpu.cluster.device_plugin_deploy#module:facts); both use the same code. Its result can also be passed as
    O(kubegpu.cluster.device_plugin_deploy#module:expected).
  - "C(none): one C(nvidia.com/gpu) per GPU, MIG or not. C(single): C(nvidia.com/gpu) per MIG device when every GPU
    has MIG on with one profile (anything else is refused, as the plugin refuses it). C(mixed): C(nvidia.com/mig-<profile>)
    per MIG device plus C(nvidia.com/gpu) per GPU with MIG off."
  - Time-slicing and MPS multiply each shared resource by its replicas, renamed to C(<name>.shared) with
    C(rename_by_default).
  - A node NVIDIA's plugin would exit on (a lost GPU, a C(1c.2g.20gb) MIG device under C(mixed), ...) fails the filter
    with the plugin's reason.
  - So does a node that shares by MPS where NVIDIA's MPS control daemon cannot run, because GPU feature discovery would
    not label it C(nvidia.com/mps.capable=true) (a GPU in MIG mode under C(none), a lost GPU, ...), where the plugin
    waits for the daemon and advertises nothing.
  - The counts are allocatable ones; a GPU that raised a critical XID while its facts were read (the fact's
    C(xid_events)) is one the plugin marks unhealthy, by the plugin's rules (see O(health_checks)).
options:
  _input:
    description: Node name to C(gpu) fact.
    type: dict
    required: true
  mig_strategy:
    description: The device plugin's MIG strategy.
    type: str
    choices: [none, single, mixed]
    default: none
  sharing:
    description: The O(kubegpu.cluster.device_plugin_deploy#module:sharing) option of the deploy module.
    type: dict
  node_names:
    description: Inventory name to Kubernetes node name, for hosts whose names differ; the result uses node names.
    type: dict
  configs:
    description: Named configs, as O(kubegpu.cluster.device_plugin_deploy#module:configs).
    type: dict
  node_configs:
    description: Node (or inventory) name to config name, as O(kubegpu.cluster.device_plugin_deploy#module:node_configs).
    type: dict
  health_checks:
    description:
      - The plugin's XID health checks, as O(kubegpu.cluster.device_plugin_deploy#module:health_checks) (C(enabled),
        C(ignore_xids), C(check_xids)). Devices the plugin marks unhealthy on the XID events in the facts are left out
        of the counts (allocatable, not capacity).
    type: dict
"""

EXAMPLES = r"""
- name: Deploy the plugin and wait until every GPU node advertises what its GPUs give
  kubegpu.cluster.device_plugin_deploy:
    sharing: "{{ sharing }}"
    expected: "{{ facts_by_node | kubegpu.cluster.gpu_expected_resources(sharing=sharing) }}"
  vars:
    sharing: {strategy: time-slicing, replicas: 4}
    facts_by_node: "{{ dict(groups['gpu_nodes'] | zip(groups['gpu_nodes'] | map('extract', hostvars, ['ansible_facts', 'gpu']))) }}"
"""

RETURN = r"""
_value:
  description: Node name to resource name to count.
  type: dict
  sample: {"gpu-1": {"nvidia.com/gpu": 16}}
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import KubegpuError
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import allocatable, health, plugin_config


def gpu_expected_resources(facts, mig_strategy="none", sharing=None, node_names=None, configs=None, node_configs=None,
                           health_checks=None):
    if not isinstance(facts, dict):
        raise AnsibleFilterError("gpu_expected_resources: expects node name to gpu fact, got %s" % type(facts).__name__)
    params = {"mig_strategy": mig_strategy, "sharing": sharing, "facts": facts, "node_names": node_names,
              "configs": configs, "node_configs": node_configs, "health_checks": health_checks}
    try:
        health.settings(health_checks)
        named = plugin_config.named_configs(params)
        return allocatable.expected(params, named[0][1], plugin_config.configs_by_node(params, named))
    except KubegpuError as exc:
        raise AnsibleFilterError("gpu_expected_resources: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"gpu_expected_resources": gpu_expected_resources}
