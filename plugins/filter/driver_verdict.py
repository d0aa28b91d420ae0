# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: driver_verdict
short_description: Judge a host's GPU drivers (NVIDIA, AMD, Intel) from its gpu facts
version_added: 0.1.0
author:
  - kubegpu.cluster contributors (@kubegpu)
description:
  - Takes the C(gpu) fact that M(kubegpu.cluster.gpu_facts) sets and returns a verdict with every problem found,
    each saying what was found and what to do.
  - Each vendor with a GPU on the host is judged by its own rules - NVIDIA by NVML (driver version, nouveau, GPUs
    NVML cannot see); AMD by what the ROCm device plugin needs (C(amdgpu) loaded and bound to each GPU,
    C(/sys/class/kfd) present); Intel by what its GPU device plugin needs (C(i915) or C(xe) loaded and bound to each
    GPU). The collection installs only NVIDIA's driver; for AMD and Intel the message says how to get theirs.
  - Used by the R(kubegpu.cluster.gpu_driver,ansible_collections.kubegpu.cluster.gpu_driver_role) role; usable on its own.
options:
  _input:
    description: The C(gpu) fact.
    type: dict
    required: true
  min_version:
    description: Oldest acceptable NVIDIA driver version, compared as a version (C(510.47.03) is newer than C(470.82.01)).
    type: str
    default: 418.81.07
  require_gpu:
    description: Whether a host without any GPU (NVIDIA, AMD or Intel) is a problem rather than a skip.
    type: bool
    default: false
  check_nouveau:
    description: Whether a loaded C(nouveau) kernel module is a problem.
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: Judge the driver
  ansible.builtin.set_fact:
    verdict: "{{ ansible_facts['gpu'] | kubegpu.cluster.driver_verdict(min_version='470') }}"
"""

RETURN = r"""
_value:
  description: The verdict.
  type: dict
  contains:
    status:
      description: V(ok), V(failed) (see RV(_value.problems)) or V(skipped) (no GPU of any vendor and none required).
      type: str
      sample: failed
    problems:
      description: One sentence per problem, with what to do.
      type: list
      elements: str
      sample:
        - NVIDIA driver 450.102.04 is older than the required 470; install driver 470 or newer.
    summary:
      description: One line for reports (one part per vendor with a GPU, joined with C(; )).
      type: str
      sample: 1 x Tesla T4, driver 450.102.04
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.kubegpu.cluster.plugins.module_utils import _gpus
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import KubegpuError
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.constants import DRIVER_MIN_VERSION


def driver_verdict(gpu, min_version=DRIVER_MIN_VERSION, require_gpu=False, check_nouveau=True):
    """Return ``{status, problems, summary}`` for one host's ``gpu`` fact."""
    try:
        return _gpus.verdict(gpu, min_version, require_gpu=require_gpu, check_nouveau=check_nouveau)
    except KubegpuError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule(object):
    def filters(self):
        return {"driver_verdict": driver_verdict}
