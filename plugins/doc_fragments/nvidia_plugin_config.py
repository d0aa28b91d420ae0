# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """How the NVIDIA device plugin advertises GPUs: its config, and per-node configs (module_utils/_nvidia/args.py)."""

    DOCUMENTATION = r"""
options:
  mig_strategy:
    description: The device plugin's C(flags.migStrategy) in the default config.
    type: str
    choices: [none, single, mixed]
    default: none
  sharing:
    description: GPU sharing in the default config (the C(sharing) section of the plugin's config).
    type: dict
    suboptions:
      strategy:
        description:
          - V(time-slicing) or V(mps) advertise every GPU O(sharing.replicas) times. MPS is refused with
            O(mig_strategy=mixed) and on MIG devices, and sets C(flags.mpsRoot) to C(/run/nvidia/mps).
          - With V(mps) the plugin advertises the replicas only once NVIDIA's MPS control daemon answers on the node;
            M(kubegpu.cluster.device_plugin_deploy) runs that daemon where C(nvidia.com/mps.capable=true).
        type: str
        choices: [none, time-slicing, mps]
        default: none
      replicas:
        description: Replicas per GPU, at least 2 (the plugin refuses fewer); the default for O(sharing.resources).
        type: int
      rename_by_default:
        description: Advertise the shared resources as C(<name>.shared), for example C(nvidia.com/gpu.shared).
        type: bool
        default: false
      fail_requests_greater_than_one:
        description: Refuse containers that ask for more than one shared device (always on for MPS unless set).
        type: bool
      devices:
        description:
          - Which GPUs are shared, V(all), a count greater than 0, or a list of GPU indexes, C(gpu:mig) indexes or
            C(GPU-)/C(MIG-) UUIDs. Note that v0.20.0 logs and ignores device subsets.
        type: raw
      resources:
        description: Resources to share, each a dict with C(name), C(replicas) and C(devices); defaults to C(nvidia.com/gpu).
        type: list
        elements: dict
  configs:
    description:
      - Named configs besides the default one, for nodes that need another MIG strategy or sharing (MPS on some
        nodes and MIG on others, say). Name (a DNS label of at most 20 characters, not V(default)) to a dict with
        C(mig_strategy) and/or C(sharing) as above; what a config leaves out is the default config's.
      - Each config runs its own plugin DaemonSet (and GFD and MPS control daemon DaemonSets where they apply) on the
        nodes labelled C(nvidia.com/device-plugin.config=<name>); the default config runs on every other GPU node.
    type: dict
    default: {}
  node_configs:
    description:
      - Node name (or inventory name, mapped by O(node_names)) to the name of one of O(configs). Nodes not named
        here use the default config. M(kubegpu.cluster.gpu_node_labels) sets the C(nvidia.com/device-plugin.config)
        label that places each node's pods.
    type: dict
    default: {}
"""
