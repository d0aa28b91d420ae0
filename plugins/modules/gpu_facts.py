#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: gpu_facts
short_description: Report a host's NVIDIA GPUs and the state of their driver
version_added: 0.1.0
description:
  - Reads the host's NVIDIA GPUs through NVML (the C(nvidia-ml-py) bindings) in one NVML session, and the NVIDIA
    devices on the PCI bus from sysfs independently of the driver, so that "GPU present, driver missing" is visible.
  - Never fails because a host has no GPU, no NVIDIA library or no driver; it reports that in RV(ansible_facts.gpu.nvml).
  - Sets the fact C(gpu) (C(ansible_facts['gpu'])).
author:
  - kubegpu.cluster contributors (@kubegpu)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.facts
  - kubegpu.cluster.python_requirements
requirements:
  - nvidia-ml-py (the C(pynvml) module) on the managed host.
attributes:
  check_mode:
    support: full
    details: The module only reads.
  diff_mode:
    support: none
    details: The module changes nothing, so there is nothing to show.
  idempotent:
    description: Whether a second run with the same options changes nothing and reports no change.
    support: full
    details: The module only reads; it always reports no change.
  facts:
    support: full
  platform:
    platforms: posix
notes:
  - NVML is loaded from C(libnvidia-ml.so.1) through the dynamic loader, as the NVIDIA tools do.
seealso:
  - name: NVML API reference
    description: The NVIDIA Management Library calls this module makes.
    link: https://docs.nvidia.com/deploy/nvml-api/
"""

EXAMPLES = r"""
- name: Read the GPUs of every node
  kubegpu.cluster.gpu_facts:

- name: Show what each node has
  ansible.builtin.debug:
    msg: "{{ ansible_facts['gpu']['count'] }} x {{ ansible_facts['gpu']['devices'] | map(attribute='name') | unique | join(', ') }}"

- name: Stop when the driver is not answering
  ansible.builtin.assert:
    that: ansible_facts['gpu']['nvml']['status'] == 'ok'
    fail_msg: "{{ inventory_hostname }}: {{ ansible_facts['gpu']['nvml']['message'] }}"
"""

RETURN = r"""
python_unmet:
  description: The O(python_requirements) the interpreter does not have (empty when it has them all).
  type: list
  elements: str
  returned: always
  sample: []
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    gpu:
      description: What the host has, as NVML and sysfs report it.
      returned: always
      type: dict
      contains:
        present:
          description: Whether the host has an NVIDIA GPU, seen by NVML, on the PCI bus, or implied by NVML refusing access (V(no_permission)).
          type: bool
          returned: always
          sample: true
        nvml:
          description: Whether NVML answered.
          type: dict
          returned: always
          contains:
            status:
              description:
                - V(ok), V(library_not_found) (no C(libnvidia-ml.so.1)), V(driver_not_loaded) (library present,
                  kernel driver not loaded), V(no_permission), V(version_mismatch) (the driver was upgraded and the old
                  kernel module is still loaded, so reboot), or V(error).
              type: str
              returned: always
              sample: ok
            message:
              description: NVML's own error text with what it means; for V(ok), any system-level value that could not be read.
              type: str
              returned: always
              sample: ""
        driver_version:
          description: NVIDIA driver version, or C(null) when NVML did not answer.
          type: str
          returned: always
          sample: 510.47.03
        cuda_driver_version:
          description: Highest CUDA version the driver supports, as C(major.minor).
          type: str
          returned: always
          sample: "11.6"
        nvml_version:
          description: NVML library version.
          type: str
          returned: always
          sample: 11.510.47.03
        count:
          description: Number of GPUs NVML reports.
          type: int
          returned: always
          sample: 4
        devices:
          description: One entry per GPU, in NVML index order.
          type: list
          elements: dict
          returned: always
          contains:
            index:
              description: NVML index.
              type: int
              returned: always
              sample: 0
            uuid:
              description: GPU UUID.
              type: str
              returned: when healthy
              sample: GPU-3f2a1c6e-5b1d-4c1e-9d7a-0a1b2c3d4e00
            name:
              description: Product name.
              type: str
              returned: when healthy
              sample: Tesla V100-PCIE-16GB
            product_slug:
              description: Label-safe product name (a valid Kubernetes label value).
              type: str
              returned: when healthy
              sample: nvidia-tesla-v100-pcie-16gb
            memory_total_mib:
              description: Total memory in MiB.
              type: int
              returned: when healthy
              sample: 16160
            pci_bus_id:
              description: PCI bus id as NVML reports it.
              type: str
              returned: when healthy
              sample: 00000000:3B:00.0
            minor_number:
              description: The GPU's minor number (its C(/dev/nvidia<minor>) device node).
              type: int
              returned: when healthy
              sample: 0
            compute_capability:
              description: CUDA compute capability.
              type: str
              returned: when healthy
              sample: "7.0"
            architecture:
              description: Family name as GPU feature discovery uses it (V(volta), V(turing), V(ampere), V(ada-lovelace), V(hopper), ...).
              type: str
              returned: when healthy
              sample: volta
            persistence_mode:
              description: Whether persistence mode is on; C(null) where the GPU does not support it.
              type: bool
              returned: when healthy
              sample: true
            mig:
              description: Multi-Instance GPU state.
              type: dict
              returned: when healthy
              contains:
                capable:
                  description: Whether the GPU supports MIG.
                  type: bool
                  returned: always
                  sample: true
                current:
                  description: Whether MIG mode is on now.
                  type: bool
                  returned: always
                  sample: true
                pending:
                  description: MIG mode after the next GPU reset.
                  type: bool
                  returned: always
                  sample: true
                profiles:
                  description:
                    - The MIG profiles the GPU offers, named and ordered as go-nvlib lists them for NVIDIA's device
                      plugin (every GPU instance profile NVML answers for, and the compute instance profiles that fit
                      in it), whether MIG is on or not.
                  type: list
                  elements: str
                  returned: always
                  sample: ["1g.10gb", "1c.2g.20gb", "2g.20gb", "3g.40gb"]
                devices:
                  description: The MIG devices when MIG is on.
                  type: list
                  elements: dict
                  returned: always
                  contains:
                    uuid:
                      description: MIG device UUID.
                      type: str
                      returned: always
                      sample: MIG-9df40cf6-fdfa-5aba-924b-2e1c28d8a2f0
                    profile:
                      description:
                        - Profile name as go-nvlib gives it to the device plugin (C(1g.10gb), C(1g.10gb+me),
                          C(1c.2g.20gb)), found from the device's GPU and compute instance profiles, its memory and the
                          GPU's; C(null) when NVML does not answer that walk (see RV(ansible_facts.gpu.devices[].mig.devices[].nvml_returns)).
                      type: str
                      returned: always
                      sample: 1g.10gb
                    gpu_instance_profile:
                      description: The NVML GPU instance profile constant (C(NVML_GPU_INSTANCE_PROFILE_*)) of its GPU instance.
                      type: int
                      returned: always
                      sample: 0
                    compute_instance_profile:
                      description: The NVML compute instance profile constant (C(NVML_COMPUTE_INSTANCE_PROFILE_*)).
                      type: int
                      returned: always
                      sample: 0
                    attributes:
                      description: NVML's attributes of the MIG device (C(nvmlDeviceAttributes_t)), which the device
                        plugin compares to tell MIG device types apart.
                      type: dict
                      returned: always
                      sample: {"multiprocessorCount": 14, "sharedCopyEngineCount": 1, "sharedDecoderCount": 0,
                               "sharedEncoderCount": 0, "sharedJpegCount": 0, "sharedOfaCount": 0,
                               "gpuInstanceSliceCount": 1, "computeInstanceSliceCount": 1, "memorySizeMB": 9728}
                    nvml_returns:
                      description: The NVML calls for this MIG device that did not succeed, with NVML's return code name.
                      type: dict
                      returned: always
                      sample: {}
                    memory_mib:
                      description: Memory of the MIG device in MiB.
                      type: int
                      returned: always
                      sample: 9856
                    multiprocessor_count:
                      description: Streaming multiprocessors in the MIG device.
                      type: int
                      returned: always
                      sample: 14
                    gpu_instance_id:
                      description: GPU instance id.
                      type: int
                      returned: always
                      sample: 7
                    compute_instance_id:
                      description: Compute instance id.
                      type: int
                      returned: always
                      sample: 0
            healthy:
              description: Whether NVML answered the identity calls (handle, name, UUID, memory) for this GPU.
              type: bool
              returned: always
              sample: true
            errors:
              description: Values that could not be read, with NVML's reason (values the GPU does not support are just C(null)).
              type: dict
              returned: always
              sample: {"handle": "GPU is lost"}
            nvml_returns:
              description:
                - Every NVML call for this GPU that did not succeed, by function name, with NVML's return code name
                  (C(NOT_SUPPORTED), C(GPU_IS_LOST), ...). NVIDIA's device plugin decides on exactly these answers (a
                  lost GPU or an unanswered compute capability ends it), so M(kubegpu.cluster.device_plugin_deploy)
                  predicts from them.
              type: dict
              returned: always
              sample: {"nvmlDeviceGetHandleByIndex": "GPU_IS_LOST"}
        pci:
          description: NVIDIA display and 3D controllers on the PCI bus (vendor C(0x10de)), read from sysfs.
          type: list
          elements: dict
          returned: always
          contains:
            address:
              description: PCI address.
              type: str
              returned: always
              sample: "0000:3b:00.0"
            device_id:
              description: PCI device id.
              type: str
              returned: always
              sample: "0x1db4"
            subsystem_id:
              description: PCI subsystem device and vendor id.
              type: str
              returned: always
              sample: "0x121410de"
            class:
              description: PCI class code.
              type: str
              returned: always
              sample: "0x030200"
            driver:
              description: Kernel driver bound to the device (V(nvidia), V(nouveau), V(vfio-pci)), or C(null).
              type: str
              returned: always
              sample: nvidia
        kernel_modules:
          description: Whether the C(nvidia) and C(nouveau) kernel modules are loaded (C(null) when unknown).
          type: dict
          returned: always
          sample: {"nvidia": true, "nouveau": false}
"""

import traceback

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubegpu.cluster.plugins.module_utils import _python
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import run_module
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.nvml import gather_gpu_facts

try:
    import pynvml
    PYNVML_IMPORT_ERROR = None
except ImportError:
    pynvml = None
    PYNVML_IMPORT_ERROR = traceback.format_exc()


def main():
    module = AnsibleModule(argument_spec=dict(_python.ARG_SPEC), supports_check_mode=True)
    run_module(module, lambda: {"changed": False, "python_unmet": _python.unmet(module.params["python_requirements"]),
                                "ansible_facts": {"gpu": gather_gpu_facts(pynvml)}},
               requires=(("nvidia-ml-py", PYNVML_IMPORT_ERROR, "https://pypi.org/project/nvidia-ml-py/"),))


if __name__ == "__main__":
    main()
