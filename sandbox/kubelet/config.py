# SPDX-License-Identifier: GPL-3.0-or-later
"""Where the kubelet nodes' pieces are, and their facts (kubelet.env; the kubelet's version is versions.env's)."""

from __future__ import annotations

import os
from pathlib import Path

from sandbox.k8s import paths as k8s_paths

HERE = Path(__file__).resolve().parent
ENV_FILE = HERE / "kubelet.env"
NODE_FILES = HERE / "node"
# the fleet.yml key that makes a fleet node a kubelet node (opt-in per node)
FLEET_KEY = "kubelet"
# the label every kubelet node carries (kwok nodes do not)
KUBELET_LABEL = "sandbox.kubegpu.io/kubelet"
# where a node keeps the image tars it loads at boot, and the CNI network's name
NODE_IMAGE_DIR = "/var/lib/kubegpu/images"
CNI_NETWORK = "kubegpu-bridge"
CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap")
HOST_CNI_DIR = Path("/usr/lib/cni")


def read_env() -> dict:
    """kubelet.env's KEY=value pairs."""
    return k8s_paths.read_versions(ENV_FILE)


def kubelet_binary(versions: dict | None = None) -> Path:
    """The kubelet sandbox/kubelet/build.sh builds for the pinned Kubernetes version."""
    versions = versions or k8s_paths.read_versions()
    return k8s_paths.cache_dir() / "kubelet" / versions["KUBE_VERSION"] / "bin" / "kubelet"


def image_dir() -> Path | None:
    """The directory of image tars every kubelet node loads ($KUBELET_IMAGE_DIR, which the Makefile sets), or None."""
    value = os.environ.get("KUBELET_IMAGE_DIR")
    return Path(value).resolve() if value else None
