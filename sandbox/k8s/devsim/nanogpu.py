# SPDX-License-Identifier: GPL-3.0-or-later
"""nano-gpu's agent (its device plugin) in the device-manager simulator.

While a nano-gpu agent pod is Running on node X - a container running ``nano-gpu-agent`` from the agent's image, as
``kubegpu.cluster.nano_gpu_deploy`` deploys it - and X's GPU profile has NVIDIA GPUs, X advertises
``nano-gpu/gpu-percent`` = 100 x GPUs in ``status.capacity`` and ``status.allocatable``, as the kubelet does once the
agent registered: the agent counts the GPUs through NVML and lists 100 devices per GPU (``nano-<gpu>-<nn>``;
nano-gpu-agent pkg/plugins/server.go NewNanoServer, pkg/common/const.go GPUPercentEachCard). When the pod goes, the
resource goes too (at once; the kubelet first drops allocatable to 0).

Only on kwok nodes: on a kubelet node (sandbox/kubelet) the agent's pod is a real container (the stand-in image,
sandbox/standins ``nanoagent.py``) that registers ``nano-gpu/gpu-percent`` with the kubelet, and the kubelet
advertises it; the simulator writes nothing there.

Not simulated: the agent's Allocate/PreStartContainer (it reads the extender's ``nano-gpu/container-<name>``
annotation and creates the GPU share), its installer's host changes, a profile whose NVML fails (it counts the
profile's devices).
"""

from __future__ import annotations

import json
import logging
import posixpath

from sandbox.nanogpu import C

from .agents import NodeAgents, kwok_node
from .watcher import read_node_profile

LOG = logging.getLogger("devsim.nanogpu")


def agent_container(pod: dict):
    """The container of ``pod`` that runs nano-gpu-agent, or None."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        command = container.get("command") or container.get("args") or []
        if command and posixpath.basename(str(command[0])) == posixpath.basename(C.AGENT_COMMAND) \
                and C.AGENT_IMAGE_REPOSITORY in (container.get("image") or ""):
            return container
    return None


def nvidia_gpus(profile) -> int:
    """The GPUs NVML counts on a node: its profile's devices, for an NVIDIA profile (no ``vendor``, or nvidia)."""
    if not profile or (profile.get("vendor") or "nvidia") != "nvidia":
        return 0
    return len(profile.get("devices") or [])


def advertised(profile, agent_running: bool) -> int | None:
    """What the node advertises: 100 per GPU while the agent runs and sees GPUs, else nothing (None)."""
    count = nvidia_gpus(profile) if agent_running else 0
    return count * C.PERCENT_PER_GPU if count else None


class NanoGpuSimulator(NodeAgents):
    """Plays the kubelet's part for nano-gpu's agent, on the simulator's event loop (the bookkeeping is
    :class:`.agents.NodeAgents`')."""

    what = "the nano-gpu agent"

    def match(self, pod):
        return agent_container(pod)

    def reconcile(self, name):
        node = self.nodes.get(name)
        if node is None or not kwok_node(node):
            return  # a kubelet node's kubelet advertises what the agent's own container registered
        running = bool(self.pods_on(name))
        profile = read_node_profile(name, (node.get("metadata") or {}).get("annotations") or {}, self.sim.profiles_dir) \
            if running else None
        want = advertised(profile, running)
        status = node.get("status") or {}
        patch = {}
        for part in ("capacity", "allocatable"):
            have = (status.get(part) or {}).get(C.RESOURCE_NAME)
            if (None if have is None else str(have)) != (None if want is None else str(want)):
                patch[part] = {C.RESOURCE_NAME: None if want is None else str(want)}
        if not patch:
            return
        LOG.info("node %s: nano-gpu agent %s; patching status %s", name, "runs" if running else "gone",
                 json.dumps(patch, sort_keys=True))
        self.remember(self.sim.api.patch_node_status(name, {"status": patch},
                                                     _content_type="application/merge-patch+json", _preload_content=False))
