#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: gpu_fleet_audit
short_description: Where every GPU node of a fleet stands, and whether a rerun of the bring-up would change it
version_added: 0.2.0
description:
  - Takes what each GPU host said of itself (O(hosts)) and reads the cluster once - one paged LIST of the nodes - for
    what each node advertises (C(nvidia.com/*) capacity and allocatable), its labels, its kernel as its kubelet reports
    it, its MIG config state and the last passed GPU proof recorded on it (C(kubegpu.cluster/last-proof)); and, where the
    cluster serves the C(resource.k8s.io) API, one LIST of the ResourceSlices of NVIDIA's DRA driver, for how each
    node's GPUs are handed out (device plugin, DRA, or wrongly both), the published devices against NVML's GPU count,
    and device-plugin labels left on a node moved to DRA.
  - Judges the labels the device plugin stage would set on each node with that stage's own rules
    (M(kubegpu.cluster.gpu_node_labels) in check mode, on the same LIST), and words every drift the hosts' reads
    carry (what the container_toolkit role decided it would configure, install or fail on, what the collection's
    virtualenv lacks).
  - Returns the report as data, a table a person reads at a glance, and the counts. Changes nothing, ever.
  - The R(kubegpu.cluster.audit,ansible_collections.kubegpu.cluster.audit_role) role and the C(kubegpu.cluster.audit)
    playbook gather O(hosts) and write the report; docs/audit.md describes every field.
author:
  - kubegpu.cluster contributors (@kubegpu)
options:
  hosts:
    description:
      - Inventory name to what that host's read said - C(reachable) (false for a host Ansible could not reach),
        C(errors) (reads that failed, in words), C(gpu) (the C(gpu) fact of M(kubegpu.cluster.gpu_facts)),
        C(driver_verdict) (the C(driver_verdict) filter's result), C(python_unmet) (the virtualenv's unmet
        requirements), and C(toolkit) (C(runtimes) and C(plans) of M(kubegpu.cluster.container_runtime_facts), the
        C(runtime_decisions) filter's result as C(decided), C(install) with C(needed), C(missing) and C(repository_ok),
        and C(runtime_name), C(runtime_path), C(set_as_default)).
      - The audit role builds these; every key may be missing where that read did not run.
    type: dict
    required: true
  node_names:
    description: Inventory name to Kubernetes node name, for hosts whose names differ.
    type: dict
    default: {}
  labels:
    description: Judge the labels the device plugin stage would set (give it the options that stage runs with).
    type: bool
    default: true
  accelerator_label:
    description: Key of the label the device plugin stage sets to the product slug (as M(kubegpu.cluster.gpu_node_labels)).
    type: str
    default: accelerator
  gfd:
    description: GPU feature discovery publishes its labels (as M(kubegpu.cluster.gpu_node_labels)).
    type: bool
    default: false
  retries:
    description:
      - How many times the LIST is retried on 429, 5xx or a connection error, with a doubling pause.
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
    details: The module never writes; check mode changes nothing about what it does.
  diff_mode:
    support: none
  idempotent:
    description: Whether a second run with the same options changes nothing and reports no change.
    support: full
  platform:
    platforms: posix
notes:
  - A host missing from the cluster, a host that was unreachable or whose reads failed, and a node whose labels cannot
    be judged are reported, never a failure; only a cluster that cannot be listed fails the module.
seealso:
  - module: kubegpu.cluster.gpu_facts
  - module: kubegpu.cluster.container_runtime_facts
  - module: kubegpu.cluster.gpu_node_labels
"""

EXAMPLES = r"""
# The playbook kubegpu.cluster.audit runs this after the audit role's node entry point set audit_read on every GPU host.
- name: Audit the fleet
  kubegpu.cluster.gpu_fleet_audit:
    kubeconfig: /etc/kubernetes/admin.conf
    hosts: "{{ dict(groups['gpu_nodes'] | zip(groups['gpu_nodes'] | map('extract', hostvars) | map(attribute='audit_read'))) }}"
    node_names:
      gpu-01.example.com: gpu-01
    mig_strategy: mixed
  register: audit

- name: Show it
  ansible.builtin.debug:
    msg: "{{ audit.table }}"

# Only the facts: a host with a gpu fact and nothing else is judged on its GPUs, node and labels.
- name: Audit from gpu_facts alone
  kubegpu.cluster.gpu_fleet_audit:
    hosts:
      gpu-01: {gpu: "{{ hostvars['gpu-01']['ansible_facts']['gpu'] }}"}
"""

RETURN = r"""
report:
  description: The report (docs/audit.md has every field).
  returned: success
  type: dict
  contains:
    schema:
      description: The report's format version.
      type: int
      sample: 1
    generated_at:
      description: When the cluster was read (UTC).
      type: str
      sample: "2026-11-26T04:10:00Z"
    summary:
      description: Nodes per state (C(ok), C(drift), C(problem), C(error), C(unreachable)), C(total) and the C(drifted) hosts.
      type: dict
      sample: {"ok": 6, "drift": 1, "problem": 0, "error": 0, "unreachable": 0, "total": 7, "drifted": ["kg-v100"]}
    nodes:
      description:
        - One entry per host, sorted - C(host), C(node), C(state), C(reachable), C(errors), C(problems), C(in_cluster),
          C(schedulable), C(gpus), C(nvml), C(driver), C(kernel), C(nouveau), C(runtimes), C(drift) (each with
          C(stage), C(subject) and C(reason)), C(advertised), C(mig), C(labels), C(proof).
      type: list
      elements: dict
table:
  description: The report as a fixed-width table, then one line per drift, problem and error, then the counts.
  returned: success
  type: str
  sample: "NODE     STATE  GPUS ...\nkg-v100  drift  4x Tesla V100-PCIE-16GB 16 GiB ...\n"
summary:
  description: The report's C(summary).
  returned: success
  type: dict
  sample: {"ok": 7, "drift": 0, "problem": 0, "error": 0, "unreachable": 0, "total": 7, "drifted": []}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubegpu.cluster.plugins.module_utils import _options
from ansible_collections.kubegpu.cluster.plugins.module_utils._audit import fleet
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import run_module
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import client
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.args import argument_spec
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import constants as nv
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.args import plugin_config_spec


def main():
    module, rules = _options.module(
        AnsibleModule,
        argument_spec=argument_spec(
            hosts=dict(type="dict", required=True),
            node_names=dict(type="dict", default={}),
            labels=dict(type="bool", default=True),
            accelerator_label=dict(type="str", default=nv.DEFAULT_ACCELERATOR_LABEL),
            gfd=dict(type="bool", default=False),
            retries=dict(type="int", default=4, minimum=0),
            **plugin_config_spec()
        ),
        supports_check_mode=True,
    )
    run_module(module, lambda: fleet.run(module.params), requires=client.REQUIRES, rules=rules)


if __name__ == "__main__":
    main()
