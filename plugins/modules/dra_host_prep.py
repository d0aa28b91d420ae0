#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: dra_host_prep
short_description: Check that a GPU node can run NVIDIA's DRA driver, find its kubelet root dir, create NVIDIA's device nodes
version_added: 0.3.0
description:
  - "Run on a GPU node before it moves to Dynamic Resource Allocation. It refuses, with the reason, a container runtime
    that cannot start a DRA pod's devices: the kubelet hands a claim's devices to the runtime only as CDI device IDs
    in the CRI field C(CDIDevices) (Kubernetes 1.31 and later), so docker through cri-dockerd and containerd 1.6 (no
    CDI) are refused; containerd 1.7 needs C(enable_cdi); containerd 2.0 and 2.1 have it on unless turned off, 2.2 and
    later always; CRI-O always reads CDI specs."
  - It says in RV(cdi.enable) whether CDI must be turned on; the module changes no runtime configuration itself. Turn
    it on with M(kubegpu.cluster.nvidia_runtime_config) O(kubegpu.cluster.nvidia_runtime_config#module:cdi=true)
    (the C(kubegpu.cluster.dra) role does, through the container_toolkit role's backup, restart and rollback).
  - It gives the newest CDI spec version the runtime reads (RV(cdi.max_spec_version)); spec 0.7.0 needs containerd
    1.7.16 or later, or CRI-O 1.30 or later. With O(cdi_spec_version), a newer version is refused, naming the one to
    generate.
  - It finds the kubelet's root directory, where the DRA kubelet plugin must register (C(<root>/plugins_registry)) and
    keep its sockets (C(<root>/plugins)) - from the running kubelet's C(--root-dir) (for microk8s' kubelite, its
    C(--kubelet-args-file)), else the distribution's default (k0s C(/var/lib/k0s/kubelet), microk8s
    C(/var/snap/microk8s/common/var/lib/kubelet), else C(/var/lib/kubelet)). Pass RV(kubelet_root_dir) to
    M(kubegpu.cluster.dra_driver_deploy).
  - It creates NVIDIA's control device nodes (C(/dev/nvidiactl), C(nvidia-modeset), C(nvidia-uvm),
    C(nvidia-uvm-tools)) where they are missing, with C(nvidia-ctk system create-device-nodes --control-devices
    --load-kernel-modules), as nothing creates them at boot until a program opens the driver.
author:
  - kubegpu.cluster contributors (@kubegpu)
options:
  runtime:
    description: The node's container runtime. Found from the running kubelet's C(--container-runtime-endpoint) (or
      C(containerRuntimeEndpoint) in its C(--config)) when omitted.
    type: str
    choices: [containerd, crio, docker, k0s, k3s, microk8s, rke2]
  runtime_version:
    description: The runtime's version, in place of what its binary says.
    type: str
  containerd_version:
    description: For k3s, RKE2, k0s and microk8s, the version of the containerd they bundle (their own version is not
      containerd's); without it the CDI spec version they read is not told.
    type: str
  containerd_config:
    description: The containerd config whose C(config dump) says whether C(enable_cdi) is on. An absolute path.
    type: path
    default: /etc/containerd/config.toml
  cdi_spec_version:
    description: The CDI spec version that will be generated for this node; refused when the runtime reads older ones.
    type: str
  kubelet_root_dir:
    description: The kubelet's root directory, in place of finding it. An absolute path.
    type: path
  device_nodes:
    description: Create NVIDIA's missing control device nodes with C(nvidia-ctk). V(false) only reports them.
    type: bool
    default: true
  nvidia_ctk_path:
    description: The C(nvidia-ctk) binary; found on the C(PATH) when omitted. An absolute path.
    type: path
  dev_root:
    description: The root under which C(/dev) is (C(nvidia-ctk)'s C(--dev-root)). An absolute path.
    type: path
    default: /
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Says which device nodes it would create, and creates none.
  diff_mode:
    support: none
    details: It writes no file.
  idempotent:
    description: Whether a second run with the same options changes nothing and reports no change.
    support: full
    details: Once the device nodes exist, a second run changes nothing.
  platform:
    platforms: posix
seealso:
  - module: kubegpu.cluster.dra_driver_deploy
  - module: kubegpu.cluster.nvidia_runtime_config
  - module: kubegpu.cluster.container_runtime_facts
"""

EXAMPLES = r"""
- name: Check the node, find its kubelet root dir, create NVIDIA's device nodes
  kubegpu.cluster.dra_host_prep:
  register: dra_host

- name: Turn CDI on where the runtime has it off
  kubegpu.cluster.nvidia_runtime_config:
    runtime: "{{ dra_host.runtime }}"
    cdi: true
  when: dra_host.cdi.enable

- name: A node whose CDI specs are generated as 0.7.0
  kubegpu.cluster.dra_host_prep:
    cdi_spec_version: 0.7.0
"""

RETURN = r"""
runtime:
  description: The node's container runtime (a name of the collection's runtime registry).
  returned: always
  type: str
  sample: containerd
runtime_version:
  description: Its version.
  returned: always
  type: str
  sample: 2.1.4
cdi:
  description: What DRA needs of the runtime.
  returned: always
  type: dict
  contains:
    cdi:
      description: Whether CDI is on (V(on)) or off (V(off)).
      type: str
    enable:
      description: Whether CDI must be turned on (M(kubegpu.cluster.nvidia_runtime_config) with C(cdi=true)).
      type: bool
    max_spec_version:
      description: The newest CDI spec version the runtime reads; null when its version is unknown.
      type: str
  sample: {"cdi": "off", "enable": true, "max_spec_version": "0.7.0"}
kubelet_root_dir:
  description: The kubelet's root directory.
  returned: always
  type: str
  sample: /var/lib/k0s/kubelet
kubelet:
  description: What the kubelet runs with - C(root_dir), C(source) (how it was found), C(runtime_endpoint), C(pid),
    C(registrar_dir), C(plugins_dir).
  returned: always
  type: dict
  sample: {"root_dir": "/var/lib/kubelet", "source": "kubelet command line (pid 812)",
           "runtime_endpoint": "unix:///run/containerd/containerd.sock", "pid": 812,
           "registrar_dir": "/var/lib/kubelet/plugins_registry", "plugins_dir": "/var/lib/kubelet/plugins"}
device_nodes:
  description: NVIDIA's control device nodes that were missing, and those created (in check mode, to be created).
  returned: always
  type: dict
  sample: {"missing": ["nvidia-uvm", "nvidia-uvm-tools"], "created": ["nvidia-uvm", "nvidia-uvm-tools"]}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubegpu.cluster.plugins.module_utils import _options
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import run_module
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.dra.host import run
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime import registry
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.base import Host
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.containerd import Containerd


def main():
    module, rules = _options.module(
        AnsibleModule,
        argument_spec=dict(
            runtime=dict(type="str", choices=list(registry.NAMES)),
            runtime_version=dict(type="str"),
            containerd_version=dict(type="str"),
            containerd_config=dict(type="path", default=Containerd.config_path, absolute=True),
            cdi_spec_version=dict(type="str"),
            kubelet_root_dir=dict(type="path", absolute=True),
            device_nodes=dict(type="bool", default=True),
            nvidia_ctk_path=dict(type="path", absolute=True),
            dev_root=dict(type="path", default="/", absolute=True),
        ),
        supports_check_mode=True,
    )
    run_module(module, lambda: run(module.params, Host.from_module(module), check_mode=module.check_mode),
               rules=rules)


if __name__ == "__main__":
    main()
