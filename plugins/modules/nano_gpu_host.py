#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: nano_gpu_host
short_description: Prepare a GPU node for nano-gpu-agent, which replaces the NVIDIA toolkit's hook binaries
version_added: 0.3.0
description:
  - nano-gpu-agent's installer (an init container with the host's C(/) mounted) replaces the host's
    C(/usr/bin/nvidia-container-runtime-hook) and C(/usr/bin/nvidia-container-toolkit) with nano-gpu's own, which only
    work as the NVIDIA toolkit's legacy prestart hook, in containers docker starts with its default runtime C(nvidia).
  - With O(state=present) the module refuses a node where that cannot work, naming the host and each reason with what
    to do - no NVIDIA GPU on the PCI bus, the toolkit's binaries missing, the toolkit's C(mode) not legacy (C(auto) is
    jit-cdi from toolkit 1.18.0), docker missing or its default runtime not C(nvidia), a kubelet on containerd or
    CRI-O, or an agent that already ran before any backup was taken - and writes nothing then.
  - On a node that can, it backs the two binaries up once (content, owner, mode; a symlink as a symlink) into
    O(state_dir) with a record, C(host.json), that the container_toolkit role reads so that it does not reinstall or
    upgrade the toolkit's packages over nano-gpu's binaries; on apt it also holds the toolkit's packages.
  - With O(state=absent) it puts the backed-up binaries back (only those that differ), removes what the agent left
    in C(/usr/bin) (C(mount_nano_gpu), C(nvidia-container-toolkit-bak)), releases the holds it took, and removes
    O(state_dir). Remove the agent's DaemonSet first, or its next start replaces them again.
author:
  - kubegpu.cluster contributors (@kubegpu)
options:
  state:
    description: V(present) checks and backs up; V(absent) gives the host's own binaries back.
    type: str
    choices: [present, absent]
    default: present
  hold_packages:
    description:
      - On apt, hold the toolkit's installed packages (apt-mark), as an upgrade would put NVIDIA's binaries back;
        O(state=absent) releases only the holds this module took.
    type: bool
    default: true
  remove_leftovers:
    description: With O(state=absent), remove the files nano-gpu-agent's installer left in C(/usr/bin).
    type: bool
    default: true
  state_dir:
    description:
      - Where the backup and its record go; the container_toolkit role reads the record at the default place.
      - An absolute path (C(~) is expanded), since the module runs on the managed host, in a working directory nobody chose.
    type: path
    default: /var/lib/kubegpu/nano-gpu
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Runs every check and says what it would back up, hold, put back or remove, changing nothing.
  diff_mode:
    support: full
    details: The record before and the binaries backed up after; for V(absent), the binaries now and as they are put back.
  idempotent:
    description: Whether a second run with the same options changes nothing and reports no change.
    support: full
    details: The backup is taken once, and never again over nano-gpu's binaries.
  platform:
    platforms: posix
requirements:
  - root, and Python 3.11 (C(tomllib)) or tomlkit to read the toolkit's C(config.toml).
notes:
  - The kubelet's runtime is read from C(/var/lib/kubelet/kubeadm-flags.env), C(/etc/kubernetes/kubelet.env),
    C(/etc/default/kubelet), C(/etc/sysconfig/kubelet) (C(--container-runtime-endpoint)) and the
    KubeletConfiguration (C(containerRuntimeEndpoint)); where none says, a warning, not a refusal.
seealso:
  - module: kubegpu.cluster.scheduler_extender
  - name: nano-gpu-agent
    description: Its installer (tools/install.sh), kept in the history of elastic-ai/elastic-gpu-agent.
    link: https://github.com/elastic-ai/elastic-gpu-agent
"""

EXAMPLES = r"""
- name: Check the node and back up the toolkit's hook before nano-gpu-agent replaces it
  kubegpu.cluster.nano_gpu_host:
  become: true

- name: Give the host its own hook back once the agent is gone
  kubegpu.cluster.nano_gpu_host:
    state: absent
  become: true
"""

RETURN = r"""
checks:
  description: What the checks read.
  returned: always
  type: dict
  sample: {nvidia_gpus: 2, mode: legacy, toolkit_version: 1.17.8, docker_default: nvidia, docker_source: docker info,
           kubelet_runtime: docker, kubelet_endpoint: "unix:///run/cri-dockerd.sock",
           kubelet_source: /var/lib/kubelet/kubeadm-flags.env}
problems:
  description: Why nano-gpu cannot work on the node, with what to do (the module fails when there is one).
  returned: always
  type: list
  elements: str
actions:
  description: What the module did (or, in check mode, would do).
  returned: always
  type: list
  elements: str
  sample: ["back up /usr/bin/nvidia-container-runtime-hook and /usr/bin/nvidia-container-toolkit into /var/lib/kubegpu/nano-gpu"]
backup_dir:
  description: Where the backup is.
  returned: always
  type: str
record:
  description: The record of the backup (what container_toolkit reads).
  returned: always
  type: str
  sample: /var/lib/kubegpu/nano-gpu/host.json
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubegpu.cluster.plugins.module_utils import _options
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import run_module
from ansible_collections.kubegpu.cluster.plugins.module_utils._nanogpu import constants as C
from ansible_collections.kubegpu.cluster.plugins.module_utils._nanogpu.host import run
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.base import Host


def main():
    module, rules = _options.module(
        AnsibleModule,
        argument_spec=dict(
            state=dict(type="str", choices=["present", "absent"], default="present"),
            hold_packages=dict(type="bool", default=True),
            remove_leftovers=dict(type="bool", default=True),
            state_dir=dict(type="path", default=C.HOST_STATE_DIR, absolute=True),
        ),
        supports_check_mode=True,
    )
    run_module(module, lambda: run(module.params, Host.from_module(module), check_mode=module.check_mode,
                                   want_diff=module._diff), rules=rules)


if __name__ == "__main__":
    main()
