#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: gpu_facts
short_description: Report a host's GPUs (NVIDIA, AMD, Intel) and the state of their drivers
version_added: 0.1.0
description:
  - Reads the host's NVIDIA GPUs through NVML (the C(nvidia-ml-py) bindings) in one NVML session, and every NVIDIA, AMD
    and Intel GPU on the PCI bus from sysfs independently of any driver, so that "GPU present, driver missing" is visible.
  - Reads AMD and Intel GPUs from what their kernel drivers publish in sysfs, without any vendor library - C(/sys/class/drm)
    (card and render nodes, memory), the KFD topology C(/sys/class/kfd) for AMD, and whether C(amdgpu), C(i915) or C(xe)
    is loaded and bound to each GPU - in RV(ansible_facts.gpu.amd) and RV(ansible_facts.gpu.intel).
  - Never fails because a host has no GPU, no NVIDIA library or no driver; it reports that in RV(ansible_facts.gpu.nvml),
    RV(ansible_facts.gpu.amd.status) and RV(ansible_facts.gpu.intel.status).
  - Sets the fact C(gpu) (C(ansible_facts['gpu'])).
author:
  - kubegpu.cluster contributors (@kubegpu)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.facts
  - kubegpu.cluster.python_requirements
requirements:
  - nvidia-ml-py (the C(pynvml) module) on the managed host, to read the NVIDIA GPUs through NVML. Without it the module
    still reports the GPUs on the PCI bus, with RV(ansible_facts.gpu.nvml.status) V(bindings_missing).
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
  - RV(ansible_facts.gpu.present), RV(ansible_facts.gpu.count) and RV(ansible_facts.gpu.devices) are NVIDIA's only (the
    container toolkit stage keys on C(present)); AMD's and Intel's GPUs are in RV(ansible_facts.gpu.amd) and
    RV(ansible_facts.gpu.intel), every vendor's in RV(ansible_facts.gpu.pci) and RV(ansible_facts.gpu.vendors).
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

- name: Show the AMD GPUs and their ROCm targets
  ansible.builtin.debug:
    msg: "{{ ansible_facts['gpu']['amd']['devices'] | map(attribute='gfx_target') | list }} ({{ ansible_facts['gpu']['amd']['status'] }})"
  when: "'amd' in ansible_facts['gpu']['vendors']"
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
                  kernel module is still loaded, so reboot), V(bindings_missing) (no C(nvidia-ml-py) for the Python
                  that ran the module, so NVML was not asked and only the PCI bus was read), or V(error).
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
        nvml_returns:
          description:
            - The NVML calls for the whole host that did not succeed, by function name, with NVML's return code name,
              of the driver and CUDA driver versions (both versions of C(nvmlSystemGetCudaDriverVersion), since GPU
              feature discovery asks the first and exits when it does not answer), the device count, and the XID
              event set (C(nvmlEventSetCreate), C(nvmlEventSetWait)).
          type: dict
          returned: always
          sample: {"nvmlSystemGetCudaDriverVersion_v2": "NOT_SUPPORTED"}
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
            xid_events:
              description:
                - The critical XID errors NVML reported for this GPU while the facts were read, read as NVIDIA's device
                  plugin's health check reads them (an event set with the GPU registered for XID and ECC events, then
                  drained without waiting). NVML reports only what happens after a registration, so this holds XIDs
                  the GPU raises while it is watched. C(gpu_instance_id) and C(compute_instance_id) are C(null) for
                  the whole GPU. M(kubegpu.cluster.device_plugin_deploy) predicts the devices the plugin marks
                  unhealthy from them.
              type: list
              elements: dict
              returned: when NVML has XID events
              sample: [{"xid": 79, "gpu_instance_id": null, "compute_instance_id": null}]
            nvml_returns:
              description:
                - Every NVML call for this GPU that did not succeed, by function name, with NVML's return code name
                  (C(NOT_SUPPORTED), C(GPU_IS_LOST), ...). NVIDIA's device plugin decides on exactly these answers (a
                  lost GPU or an unanswered compute capability ends it), so M(kubegpu.cluster.device_plugin_deploy)
                  predicts from them.
              type: dict
              returned: always
              sample: {"nvmlDeviceGetHandleByIndex": "GPU_IS_LOST"}
        vendors:
          description: The GPU vendors of the host (V(nvidia), V(amd), V(intel)), sorted; empty on a host without a GPU.
          type: list
          elements: str
          returned: always
          sample: ["amd"]
        pci:
          description:
            - Every NVIDIA (C(0x10de)), AMD (C(0x1002)) and Intel (C(0x8086)) display and 3D controller on the PCI bus,
              read from sysfs, sorted by address. NVIDIA's checks take the entries of vendor V(nvidia).
          type: list
          elements: dict
          returned: always
          contains:
            address:
              description: PCI address.
              type: str
              returned: always
              sample: "0000:3b:00.0"
            vendor:
              description: V(nvidia), V(amd) or V(intel).
              type: str
              returned: always
              sample: nvidia
            vendor_id:
              description: PCI vendor id.
              type: str
              returned: always
              sample: "0x10de"
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
              description: Kernel driver bound to the device (V(nvidia), V(nouveau), V(amdgpu), V(i915), V(xe), V(vfio-pci)), or C(null).
              type: str
              returned: always
              sample: nvidia
        amd:
          description: The AMD GPUs as the amdgpu driver shows them in sysfs (no ROCm library needed); count 0 without one.
          type: dict
          returned: always
          contains:
            count:
              description: AMD GPUs on the PCI bus.
              type: int
              returned: always
              sample: 2
            status:
              description:
                - V(ok); V(no_gpu); V(driver_not_loaded) (the C(amdgpu) module is not loaded); V(driver_not_bound) (a GPU
                  is bound to another driver, such as C(vfio-pci), or none); V(no_kfd) (no C(/sys/class/kfd), so ROCm
                  cannot compute). The ROCm device plugin needs V(ok).
              type: str
              returned: always
              sample: ok
            driver:
              description: The C(amdgpu) module - C(module), C(loaded) (C(null) when unknown), C(version)
                (C(/sys/module/amdgpu/version), which AMD's amdgpu-dkms has; C(null) for the in-tree driver) and C(kfd)
                (whether C(/sys/class/kfd/kfd) exists).
              type: dict
              returned: always
              sample: {"module": "amdgpu", "loaded": true, "version": "6.8.5", "kfd": true}
            devices:
              description: One entry per AMD GPU, by PCI address.
              type: list
              elements: dict
              returned: always
              contains:
                address:
                  description: PCI address.
                  type: str
                  returned: always
                  sample: "0000:43:00.0"
                device_id:
                  description: PCI device id.
                  type: str
                  returned: always
                  sample: "0x740f"
                subsystem_id:
                  description: PCI subsystem device and vendor id.
                  type: str
                  returned: always
                  sample: "0x0c341002"
                name:
                  description: Product name from the device id (C(null) for an id the collection does not know).
                  type: str
                  returned: always
                  sample: AMD Instinct MI210
                driver:
                  description: Kernel driver bound to it.
                  type: str
                  returned: always
                  sample: amdgpu
                memory_total_mib:
                  description: VRAM in MiB (amdgpu's C(mem_info_vram_total)); C(null) when sysfs lacks it.
                  type: int
                  returned: always
                  sample: 65520
                card:
                  description: Its DRM primary node in C(/sys/class/drm) (C(/dev/dri/card0)).
                  type: str
                  returned: always
                  sample: card0
                render:
                  description: Its DRM render node (C(/dev/dri/renderD128)).
                  type: str
                  returned: always
                  sample: renderD128
                kfd_node:
                  description:
                    - Its node in the KFD topology (C(/sys/class/kfd/kfd/topology/nodes/<n>)), matched by render
                      minor; C(null) without one.
                  type: int
                  returned: always
                  sample: 1
                gpu_id:
                  description: KFD's gpu_id of the node.
                  type: int
                  returned: always
                  sample: 53012
                gfx_target_version:
                  description: KFD's C(gfx_target_version).
                  type: int
                  returned: always
                  sample: 90010
                gfx_target:
                  description: The LLVM target it gives (what ROCm builds for).
                  type: str
                  returned: always
                  sample: gfx90a
                simd_count:
                  description: SIMDs (KFD C(simd_count)).
                  type: int
                  returned: always
                  sample: 416
                cu_count:
                  description: Compute units (C(simd_count) / C(simd_per_cu)).
                  type: int
                  returned: always
                  sample: 104
                num_xcc:
                  description: Accelerator complex dies (KFD C(num_xcc)).
                  type: int
                  returned: always
                  sample: 1
        intel:
          description: The Intel GPUs as the i915 and xe drivers show them in sysfs (no Intel library needed); count 0 without one.
          type: dict
          returned: always
          contains:
            count:
              description: Intel GPUs on the PCI bus (integrated ones too).
              type: int
              returned: always
              sample: 1
            status:
              description:
                - V(ok); V(no_gpu); V(driver_not_loaded) (neither C(i915) nor C(xe) is loaded); V(driver_not_bound) (a
                  GPU is bound to another driver or none, such as a device id the loaded driver does not probe). Intel's
                  GPU device plugin needs V(ok).
              type: str
              returned: always
              sample: ok
            driver:
              description: The module the GPUs use (the one bound to them, else the one loaded, else C(i915)) - C(module),
                C(loaded), C(version) (C(/sys/module/<module>/version) where the driver has one).
              type: dict
              returned: always
              sample: {"module": "i915", "loaded": true, "version": null}
            modules:
              description: Whether C(i915) and C(xe) are loaded (C(null) when unknown).
              type: dict
              returned: always
              sample: {"i915": true, "xe": false}
            devices:
              description: One entry per Intel GPU, by PCI address.
              type: list
              elements: dict
              returned: always
              contains:
                address:
                  description: PCI address.
                  type: str
                  returned: always
                  sample: "0000:4d:00.0"
                device_id:
                  description: PCI device id.
                  type: str
                  returned: always
                  sample: "0x56c0"
                subsystem_id:
                  description: PCI subsystem device and vendor id.
                  type: str
                  returned: always
                  sample: "0x40908086"
                name:
                  description: Product name from the device id (C(null) for an id the collection does not know).
                  type: str
                  returned: always
                  sample: Intel Data Center GPU Flex 170
                driver:
                  description: Kernel driver bound to it (V(i915), V(xe), another, or C(null)).
                  type: str
                  returned: always
                  sample: i915
                memory_total_mib:
                  description:
                    - Local memory in MiB (xe's per-tile C(physical_vram_size_bytes), or i915's C(lmem_total_bytes)
                      times the tiles); C(null) where sysfs has neither (integrated GPUs, mainline i915).
                  type: int
                  returned: always
                  sample: 16384
                tiles:
                  description: Tiles (i915 C(gt/gt*), xe C(device/tile*)); C(null) without a DRM card.
                  type: int
                  returned: always
                  sample: 1
                card:
                  description: Its DRM primary node.
                  type: str
                  returned: always
                  sample: card0
                render:
                  description: Its DRM render node.
                  type: str
                  returned: always
                  sample: renderD128
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
from ansible_collections.kubegpu.cluster.plugins.module_utils._gpus import gather

try:
    import pynvml
    PYNVML_IMPORT_ERROR = None
except ImportError:
    pynvml = None
    PYNVML_IMPORT_ERROR = traceback.format_exc()


def main():
    module = AnsibleModule(argument_spec=dict(_python.ARG_SPEC), supports_check_mode=True)
    # without nvidia-ml-py the PCI bus and the kernel modules are still read (nvml.status bindings_missing): the module
    # never fails for what a host lacks, and a plain host (or a fresh node in check mode) still says what it has
    run_module(module, lambda: {"changed": False, "python_unmet": _python.unmet(module.params["python_requirements"]),
                                "ansible_facts": {"gpu": gather(pynvml)}})


if __name__ == "__main__":
    main()
