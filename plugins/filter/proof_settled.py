# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: proof_settled
short_description: The GPU proof's result when, by nodes just listed, no proof has to run
version_added: 0.2.0
author:
  - kubegpu.cluster contributors (@kubegpu)
description:
  - Takes the nodes as a caller that just listed them has them (C(nodes_seen) of M(kubegpu.cluster.device_plugin_deploy)
    after its wait, or any list of node objects) and M(kubegpu.cluster.gpu_proof)'s options, and decides as that module
    does (the same functions) which proofs would run.
  - When none would - every planned proof stands on its node's C(kubegpu.cluster/last-proof) record - returns what the
    module would return, without a module run or another LIST of the nodes. Otherwise returns null, and the caller runs
    the module, which decides again on the nodes it lists itself (and says why where it fails).
  - The R(kubegpu.cluster.gpu_validation,ansible_collections.kubegpu.cluster.gpu_validation_role) role uses it to skip
    the proof module on a rerun where nothing changed.
options:
  _input:
    description: The node objects (C(metadata.name), C(metadata.annotations), C(status.allocatable)), every node of the cluster.
    type: list
    elements: dict
    required: true
  options:
    description:
      - M(kubegpu.cluster.gpu_proof)'s options that decide what runs - C(nodes), C(per_node), C(resource), C(reprove),
        C(proven_under), C(plugin_configs), C(image), C(command), C(args), C(runtime_class), C(success_pattern),
        C(namespace).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Skip the proof where the nodes' records stand
  ansible.builtin.set_fact:
    settled: >-
      {{ device_plugin_result.nodes_seen | kubegpu.cluster.proof_settled(options={'per_node': true,
         'proven_under': proven, 'plugin_configs': device_plugin_result.configs}) }}
"""

RETURN = r"""
_value:
  description:
    - Null when a proof would run. Otherwise M(kubegpu.cluster.gpu_proof)'s result for a run that proved nothing again
      (C(passed) true, C(results) from the records, C(recorded) empty, C(last_proofs), C(allocatable), C(namespace),
      C(changed) false).
  type: dict
"""

from ansible_collections.kubegpu.cluster.plugins.module_utils import _vendors
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.proof import Workload, settled

# gpu_proof's default vendor, whose proof the filter decides on (the role's AMD and Intel proofs are not decided here)
WORKLOAD = Workload(**_vendors.NVIDIA.proof)


def proof_settled(nodes, options):
    """See DOCUMENTATION."""
    return settled(dict(options or {}), list(nodes or []), WORKLOAD)


class FilterModule(object):
    def filters(self):
        return {"proof_settled": proof_settled}
