# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: runtime_decisions
short_description: What the container_toolkit role does with each selected runtime, decided once per read of the host
version_added: 0.2.0
author:
  - kubegpu.cluster contributors (@kubegpu)
description:
  - Takes what M(kubegpu.cluster.container_runtime_facts) read on a host and judges every selected runtime's report with
    P(kubegpu.cluster.runtime_report_check#filter), then says which runtimes the
    R(kubegpu.cluster.container_toolkit,ansible_collections.kubegpu.cluster.container_toolkit_role) role configures (a
    file that C(nvidia_runtime_config) would change, or a daemon not as asked), which it fails on (the daemon does not
    report the NVIDIA runtime as the role verifies it) and what each daemon reported.
  - The role sets these once after each read of the host; as lazily evaluated role variables the same judgement was
    templated again in every task that looked at it.
options:
  _input:
    description: The facts of M(kubegpu.cluster.container_runtime_facts) (C(ansible_facts.container_runtimes)).
    type: dict
    required: true
  selected:
    description: The runtimes the role works on (C(container_toolkit_selected)); each must be in the facts' C(runtimes).
    type: list
    elements: str
    required: true
extends_documentation_fragment:
  - kubegpu.cluster.nvidia_runtime
"""

EXAMPLES = r"""
- name: Decide what to do with docker and containerd
  ansible.builtin.set_fact:
    decided: >-
      {{ ansible_facts['container_runtimes'] | kubegpu.cluster.runtime_decisions(selected=['containerd', 'docker']) }}
"""

RETURN = r"""
_value:
  description: The decisions.
  type: dict
  contains:
    checks:
      description: Per selected runtime, P(kubegpu.cluster.runtime_report_check#filter)'s judgement of its report.
      type: dict
    to_configure:
      description:
        - The selected runtimes whose files C(nvidia_runtime_config) would change (or whose plan is unknown), or whose
          daemon does not report the NVIDIA runtime as asked, in the order of O(selected).
      type: list
      elements: str
    unverified:
      description: The selected runtimes whose daemon does not report the NVIDIA runtime as the role verifies it.
      type: list
      elements: str
    verified:
      description: Per selected runtime with a report, its default runtime and its runtimes (sorted).
      type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.kubegpu.cluster.plugins.filter.runtime_report_check import runtime_report_check
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.constants import RUNTIME_NAME, RUNTIME_PATH


def runtime_decisions(facts, selected, name=RUNTIME_NAME, path=RUNTIME_PATH, set_as_default=True):
    """See DOCUMENTATION."""
    runtimes = (facts or {}).get("runtimes") or {}
    missing = [runtime for runtime in selected if runtime not in runtimes]
    if missing:
        raise AnsibleFilterError("runtime_decisions: %s not among the runtimes read (%s)" % (
            ", ".join(missing), ", ".join(sorted(runtimes)) or "none"))
    crictl = ((facts.get("crictl") or {}).get("reports"))
    plans = facts.get("plans") or {}
    checks, to_configure, unverified, verified = {}, [], [], {}
    for runtime in selected:
        report = runtimes[runtime].get("reports") or {}
        check = runtime_report_check(report, runtime, name=name, path=path, set_as_default=set_as_default,
                                     crictl=crictl)
        checks[runtime] = check
        if (plans.get(runtime) or {}).get("changed") is not False or not check["as_asked"]:
            to_configure.append(runtime)
        if not check["ok"]:
            unverified.append(runtime)
        if report:
            verified[runtime] = {"default_runtime": report.get("default_runtime"),
                                 "runtimes": sorted(report.get("runtimes") or {})}
    return {"checks": checks, "to_configure": to_configure, "unverified": unverified, "verified": verified}


class FilterModule(object):
    def filters(self):
        return {"runtime_decisions": runtime_decisions}
