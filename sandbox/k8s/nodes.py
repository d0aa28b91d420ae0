# SPDX-License-Identifier: GPL-3.0-or-later
"""kwok Node objects for the simulated fleet (sandbox/fleet.yml) and for extra scale nodes.

Each node looks like a kubelet-registered GPU node: architecture, OS, kernel and kubelet version
in ``status.nodeInfo``, the well-known ``kubernetes.io/*`` labels, CPU/memory/pods capacity, and
optionally the ``nvidia.com/gpu=present:NoSchedule`` taint. GPU nodes carry the annotation
``sandbox.kubegpu.io/profile: <profile>``; the device-manager simulator reads the profile from it.
A scale node may instead carry ``sandbox.kubegpu.io/profile-path: /abs/path.json`` (a profile
file outside sandbox/profiles, for tests). A node whose GPUs' MIG layout can change (a node container's fake NVML
writes its MIG state, sandbox/fakenvml/README.md) carries ``sandbox.kubegpu.io/mig-state-path: /abs/mig-state.json``;
devsim applies that state to the profile. No ``nvidia.com/*`` resources are set here: those appear only when a device
plugin runs (devsim).
"""

from __future__ import annotations

import os
import platform

import yaml

from .paths import FLEET_FILE

PROFILE_ANNOTATION = "sandbox.kubegpu.io/profile"
PROFILE_PATH_ANNOTATION = "sandbox.kubegpu.io/profile-path"
MIG_STATE_ANNOTATION = "sandbox.kubegpu.io/mig-state-path"
MIG_STATE_FILE = "mig-state.json"  # the fake NVML's default state file name (sandbox/fakenvml/mig_state.py)
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
FLEET_LABEL = "sandbox.kubegpu.io/fleet"
ROLE_LABEL = "sandbox.kubegpu.io/role"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
SCALE_PREFIX = "kg-scale"

# What the kubelet inside a node container would report; the containers run Debian 12 with
# containerd from Debian (1.6.x) on this host's kernel.
OS_IMAGE = "Debian GNU/Linux 12 (bookworm)"
CONTAINER_RUNTIME = "containerd://1.6.20"
CAPACITY = {"cpu": "16", "memory": "65842396Ki", "pods": "110", "ephemeral-storage": "263174212Ki", "hugepages-2Mi": "0"}


def host_arch() -> str:
    """Return the Kubernetes name of this machine's architecture."""
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64", "ppc64le": "ppc64le", "s390x": "s390x"}.get(machine, machine)


def load_fleet(path=FLEET_FILE) -> list:
    """Return the ``nodes`` list of fleet.yml (each a dict with name, variant, optional profile)."""
    with open(path, encoding="utf-8") as handle:
        fleet = yaml.safe_load(handle) or {}
    nodes = fleet.get("nodes") or []
    for node in nodes:
        if not node.get("name"):
            raise ValueError("fleet node without a name in %s" % path)
    return nodes


def node_manifest(name: str, kube_version: str, profile: str | None = None, profile_path: str | None = None,
                  gpu_taint: bool = False, labels: dict | None = None, mig_state_path: str | None = None) -> dict:
    """Return a Node object for kwok to manage."""
    arch = host_arch()
    annotations = {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"}
    if mig_state_path:
        annotations[MIG_STATE_ANNOTATION] = os.path.abspath(mig_state_path)
    if profile:
        annotations[PROFILE_ANNOTATION] = profile
    if profile_path:
        annotations[PROFILE_PATH_ANNOTATION] = os.path.abspath(profile_path)
        annotations.setdefault(PROFILE_ANNOTATION, os.path.splitext(os.path.basename(profile_path))[0])
    node_labels = {
        "kubernetes.io/arch": arch,
        "kubernetes.io/os": "linux",
        "kubernetes.io/hostname": name,
        "beta.kubernetes.io/arch": arch,
        "beta.kubernetes.io/os": "linux",
        "type": "kwok",
    }
    node_labels.update(labels or {})
    spec = {}
    if gpu_taint and (profile or profile_path):
        spec["taints"] = [dict(GPU_TAINT)]
    version = kube_version if kube_version.startswith("v") else "v" + kube_version
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": node_labels, "annotations": annotations},
        "spec": spec,
        "status": {
            "capacity": dict(CAPACITY),
            "allocatable": dict(CAPACITY),
            "nodeInfo": {
                "architecture": arch,
                "operatingSystem": "linux",
                "kernelVersion": platform.release(),
                "osImage": OS_IMAGE,
                "containerRuntimeVersion": CONTAINER_RUNTIME,
                "kubeletVersion": version,
                "kubeProxyVersion": version,
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
            },
        },
    }


def fleet_manifests(kube_version: str, gpu_taint: bool = False, fleet_path=FLEET_FILE, mig_state_dir=None,
                    skip=()) -> list:
    """Return Node objects for every node of fleet.yml but those named in ``skip`` (kubelet nodes, which register
    themselves: sandbox/kubelet), named exactly like the node containers. With
    ``mig_state_dir``, a GPU node's MIG state is ``<mig_state_dir>/<name>/mig-state.json``, where its node container's
    fake NVML writes it (sandbox/images/nodes.yml mounts that directory)."""
    out = []
    for node in load_fleet(fleet_path):
        if node["name"] in skip:
            continue
        labels = {FLEET_LABEL: "true", ROLE_LABEL: node.get("variant") or "base"}
        state = (os.path.join(str(mig_state_dir), node["name"], MIG_STATE_FILE)
                 if mig_state_dir and node.get("profile") else None)
        out.append(node_manifest(node["name"], kube_version, profile=node.get("profile"), gpu_taint=gpu_taint,
                                 labels=labels, mig_state_path=state))
    return out


def scale_manifests(count: int, kube_version: str, profile: str | None = None, gpu_taint: bool = False,
                    prefix: str = SCALE_PREFIX, start: int = 0, labels: dict | None = None) -> list:
    """Return ``count`` extra nodes named ``<prefix>-<profile or cpu>-NNNN``.

    ``profile`` is a profile name (sandbox/profiles/<name>.json) or a path to a ``.json`` file.
    """
    profile_name, profile_path = profile, None
    if profile and (profile.endswith(".json") or os.sep in profile):
        profile_path = profile
        profile_name = os.path.splitext(os.path.basename(profile))[0]
    tag = profile_name or "cpu"
    node_labels = {ROLE_LABEL: "scale"}
    node_labels.update(labels or {})
    return [node_manifest("%s-%s-%04d" % (prefix, tag, start + i), kube_version, profile=profile_name, profile_path=profile_path,
                          gpu_taint=gpu_taint, labels=node_labels)
            for i in range(count)]
