#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: nvidia_cdi_spec
short_description: Keep the NVIDIA Container Toolkit's CDI spec in line with the GPUs after a MIG or driver change
version_added: 0.3.0
description:
  - Where a host uses the NVIDIA Container Toolkit's CDI spec (C(/var/run/cdi/nvidia.yaml), which the toolkit's
    C(nvidia-cdi-refresh.service) writes from toolkit 1.18 on, or C(/etc/cdi/nvidia.yaml)), regenerates it with
    C(nvidia-ctk cdi generate) as that service runs it (the variables of its environment file,
    C(/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env)), and checks with C(nvidia-ctk cdi list) that it names by
    UUID exactly the devices the GPUs have now (O(gpu)) - the MIG devices of a GPU in MIG mode, every other GPU itself.
  - The toolkit regenerates the spec when the kernel modules or nvidia-ctk change, not when a MIG layout does, so a
    spec written before a layout change names MIG devices that are gone. Run this after M(kubegpu.cluster.mig_layout)
    changed a host (the mig role does) and after a driver upgrade (the gpu_driver role does, with O(force), since the
    driver's library paths in the spec change with its version).
  - "Devices are checked by their UUID names (C(nvidia.com/gpu=MIG-...)): a MIG device's index name (C(0:1)) depends
    on the tool that made the layout. Where the environment file leaves C(uuid) out of
    C(NVIDIA_CTK_CDI_GENERATE_DEVICE_NAME_STRATEGIES), it is added, with a warning."
  - A host whose GPUs expose no device (every GPU in MIG mode without MIG devices, the GPU Operator's C(all-enabled))
    cannot have a valid spec (nvidia-ctk refuses it); the old one is removed.
  - A host without the toolkit's CDI spec is left alone (RV(not_in_use); not as a skipped task, so that a play sees it ran).
author:
  - kubegpu.cluster contributors (@kubegpu)
options:
  gpu:
    description: The host's C(gpu) fact as M(kubegpu.cluster.gpu_facts) (or M(kubegpu.cluster.mig_layout)) returns it, read after the change.
    type: dict
    required: true
  paths:
    description:
      - The CDI spec files to keep in line. Default - nvidia-cdi-refresh's output (C(NVIDIA_CTK_CDI_OUTPUT_FILE_PATH) of
        O(env_file), else C(/var/run/cdi/nvidia.yaml)) where that file exists or the service is installed, and
        C(/etc/cdi/nvidia.yaml) where it exists.
    type: list
    elements: path
  env_file:
    description: nvidia-cdi-refresh's environment file, whose variables configure C(nvidia-ctk cdi generate).
    type: path
    default: /etc/nvidia-container-toolkit/nvidia-cdi-refresh.env
  nvidia_ctk:
    description: The nvidia-ctk binary.
    type: path
    default: /usr/bin/nvidia-ctk
  spec_dirs:
    description: The CDI spec folders C(nvidia-ctk cdi list) reads; default its own (C(/etc/cdi), C(/var/run/cdi)).
    type: list
    elements: path
  force:
    description:
      - Regenerate even where the spec names the right devices (after a driver upgrade, whose library paths the spec
        holds); a spec that comes out the same is not rewritten.
    type: bool
    default: false
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Lists the devices and generates the spec in a folder of its own, to say whether the file would change; writes nothing.
  diff_mode:
    support: none
    details: The spec is nvidia-ctk's; the result names the devices before and after.
  idempotent:
    description: Whether a second run with the same options changes nothing and reports no change.
    support: full
    details: A spec that names the devices the GPUs have is left alone; with O(force), one that comes out the same.
  platform:
    platforms: posix
notes:
  - nvidia-ctk reads C(/proc/driver/nvidia-caps/mig-minors) and the driver's device nodes to write a MIG device's
    edits; it runs as the module's user (root).
seealso:
  - name: NVIDIA Container Toolkit, CDI support
    description: Generating and listing CDI specs with nvidia-ctk, and the nvidia-cdi-refresh service.
    link: https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/cdi-support.html
"""

EXAMPLES = r"""
- name: Regenerate the CDI spec after a MIG layout change
  kubegpu.cluster.nvidia_cdi_spec:
    gpu: "{{ ansible_facts['gpu'] }}"

- name: After a driver upgrade, whose library paths the spec holds
  kubegpu.cluster.nvidia_cdi_spec:
    gpu: "{{ ansible_facts['gpu'] }}"
    force: true
"""

RETURN = r"""
paths:
  description: The CDI spec files kept in line; empty where the host has none of the toolkit's.
  type: list
  elements: str
  returned: always
  sample: ["/var/run/cdi/nvidia.yaml"]
expected:
  description: The device names by UUID the GPUs have now (from O(gpu)).
  type: list
  elements: str
  returned: always
  sample: ["MIG-5b9a1f4e-26a5-5e8f-9b3c-0f0e1d2c3b4a"]
before:
  description: The device names by UUID C(nvidia-ctk cdi list) gave before.
  type: list
  elements: str
  returned: when the host uses the toolkit's CDI spec
  sample: ["GPU-3f2a1c6e-5b1d-4c1e-9d7a-0a1b2c3d4e00"]
devices:
  description: The device names by UUID C(nvidia-ctk cdi list) gives now (in check mode, what it would give).
  type: list
  elements: str
  returned: when the host uses the toolkit's CDI spec
  sample: ["MIG-5b9a1f4e-26a5-5e8f-9b3c-0f0e1d2c3b4a"]
regenerated:
  description: The spec files written anew (in check mode, those that would be).
  type: list
  elements: str
  returned: always
  sample: ["/var/run/cdi/nvidia.yaml"]
removed:
  description: The spec files removed because the GPUs expose no device.
  type: list
  elements: str
  returned: always
  sample: []
not_in_use:
  description: Why nothing was done.
  type: str
  returned: when the host has no CDI spec of the toolkit
  sample: the host has no CDI spec of the NVIDIA Container Toolkit
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import run_module
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import cdi


def main():
    module = AnsibleModule(
        argument_spec=dict(
            gpu=dict(type="dict", required=True),
            paths=dict(type="list", elements="path"),
            env_file=dict(type="path", default=cdi.REFRESH_ENV_FILE),
            nvidia_ctk=dict(type="path", default=cdi.NVIDIA_CTK),
            spec_dirs=dict(type="list", elements="path"),
            force=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )

    def runner(args, environ):
        return module.run_command(args, environ_update=environ)

    run_module(module, lambda: cdi.run(module.params, runner, check_mode=module.check_mode))


if __name__ == "__main__":
    main()
