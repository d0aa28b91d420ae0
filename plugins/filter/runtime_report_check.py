# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: runtime_report_check
short_description: Whether what a container runtime's daemon reports has the NVIDIA runtime as asked
version_added: 0.2.0
author:
  - kubegpu.cluster contributors (@kubegpu)
description:
  - Takes one runtime's report from M(kubegpu.cluster.container_runtime_facts) (C(runtimes.<name>.reports), what
    C(docker info), C(containerd config dump), C(crio config) or a distribution's generated config say) and judges it
    the same way for every runtime.
  - The R(kubegpu.cluster.container_toolkit,ansible_collections.kubegpu.cluster.container_toolkit_role) role decides
    with it which runtimes to configure and which to verify, for all of a host's runtimes in one task.
options:
  _input:
    description: The runtime's report (C(ok), C(default_runtime), C(runtimes), C(error)); empty when there is none.
    type: dict
    required: true
  runtime:
    description: The runtime the report is of (C(docker), C(containerd), C(crio), C(k3s), ...).
    type: str
    required: true
  crictl:
    description: The C(crictl info) report (C(container_runtimes.crictl.reports)), or none where crictl is not installed.
    type: dict
extends_documentation_fragment:
  - kubegpu.cluster.nvidia_runtime
"""

EXAMPLES = r"""
- name: Judge what containerd reports
  ansible.builtin.debug:
    msg: >-
      {{ ansible_facts['container_runtimes']['runtimes']['containerd']['reports']
         | kubegpu.cluster.runtime_report_check(runtime='containerd', crictl=ansible_facts['container_runtimes']['crictl']['reports']) }}
"""

RETURN = r"""
_value:
  description: The judgement.
  type: dict
  contains:
    ours:
      description: The NVIDIA runtime's entry in the report (its C(path), and its C(type) for containerd), empty when absent.
      type: dict
    as_asked:
      description: The report could be read, names the NVIDIA runtime with the binary asked for, and has it as the default when asked.
      type: bool
    ok:
      description:
        - What the role verifies - C(as_asked) and, for containerd, the runc shim (C(io.containerd.runc.v2)) and the
          runtime in what the CRI reports through crictl where crictl is installed.
      type: bool
"""

from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.constants import RUNTIME_NAME, RUNTIME_PATH
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.constants import RUNC_V2


def runtime_report_check(report, runtime, name=RUNTIME_NAME, path=RUNTIME_PATH, set_as_default=True, crictl=None):
    """See DOCUMENTATION."""
    report = report or {}
    ours = (report.get("runtimes") or {}).get(name) or {}
    as_asked = bool(report.get("ok")) and ours.get("path") == path and (
        report.get("default_runtime") == name or not set_as_default)
    ok = as_asked
    if runtime == "containerd":
        ok = ok and ours.get("type") == RUNC_V2 and (
            crictl is None or bool(crictl.get("ok")) and name in (crictl.get("runtimes") or {}))
    return {"ours": ours, "as_asked": as_asked, "ok": ok}


class FilterModule(object):
    def filters(self):
        return {"runtime_report_check": runtime_report_check}
