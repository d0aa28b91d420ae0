# SPDX-License-Identifier: GPL-3.0-or-later
"""Where the kubelet nodes' pieces are, and their facts (kubelet.env; the kubelet's version is versions.env's)."""

from __future__ import annotations

import os
import re
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
# The fleet.yml key that gives a kubelet node containerd 2.x instead of Debian's 1.6 (README.md, "containerd 2.x on a
# kubelet node"): ``containerd: "2"``. Its binaries: sandbox/containerd2/rules.mk (containerd, and the shim and ctr of
# the same version, make kubelet-containerd2), installed in the node under /usr/local/bin
CONTAINERD_KEY = "containerd"
CONTAINERD2_RULES = HERE.parent / "containerd2" / "rules.mk"
CONTAINERD2_PROGRAMS = ("containerd", "containerd-shim-runc-v2", "ctr")


def containerd2_version() -> str:
    """CONTAINERD2_VERSION of sandbox/containerd2/rules.mk (the one place it is written)."""
    found = re.search(r"^CONTAINERD2_VERSION\s*:?=\s*(\S+)", CONTAINERD2_RULES.read_text(encoding="utf-8"), re.M)
    return found.group(1)


def containerd2_binaries() -> dict:
    """{program: path} of containerd 2.x for the nodes, as rules.mk builds them ($CONTAINERD2 names the daemon when
    set, as for the runtime tests)."""
    cache = k8s_paths.cache_dir()
    version = containerd2_version()
    daemon = os.environ.get("CONTAINERD2") or str(cache / "containerd" / version / "bin" / "containerd")
    tools = cache / "containerd-shim" / version / "bin"
    return {"containerd": Path(daemon), "containerd-shim-runc-v2": tools / "containerd-shim-runc-v2", "ctr": tools / "ctr"}


def wants_containerd2(node: dict) -> bool:
    """Whether a fleet node asks for containerd 2.x (``containerd: "2"``; 1.6 otherwise)."""
    value = str(node.get(CONTAINERD_KEY) or "").strip()
    if value not in ("", "1.6", "2"):
        raise ValueError("%s: %s: %r, expected \"2\" (containerd 2.x) or \"1.6\" (Debian's)"
                         % (node.get("name"), CONTAINERD_KEY, value))
    return value == "2"


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
