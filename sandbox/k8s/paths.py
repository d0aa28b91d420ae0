# SPDX-License-Identifier: GPL-3.0-or-later
"""Where the sandbox keeps things, and the pinned versions (read from ``versions.env``)."""

from __future__ import annotations

import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
VERSIONS_FILE = HERE / "versions.env"
FLEET_FILE = ROOT / "sandbox" / "fleet.yml"
PROFILES_DIR = ROOT / "sandbox" / "profiles"
SANDBOX_DIR = ROOT / ".sandbox"
STATE_DIR = SANDBOX_DIR / "k8s"
KUBECONFIG = SANDBOX_DIR / "kubeconfig"
# The test session's own control plane (tests/sandbox/k8s/conftest.py), beside the demo's and never the same one.
# $TEST_STATE_DIR moves it, so that two test sessions on one checkout do not take each other's down.
TEST_STATE_DIR = Path(os.environ["TEST_STATE_DIR"]).resolve() if os.environ.get("TEST_STATE_DIR") else SANDBOX_DIR / "test-k8s"
TEST_KUBECONFIG = TEST_STATE_DIR / "kubeconfig"


def read_versions(path: Path = VERSIONS_FILE) -> dict:
    """Return the ``KEY=value`` pairs of versions.env."""
    versions = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        versions[key.strip()] = value.strip()
    return versions


def cache_dir() -> Path:
    """Return $CACHE_DIR (the Makefile's), defaulting to ~/.cache/kubegpu."""
    return Path(os.environ.get("CACHE_DIR") or Path.home() / ".cache" / "kubegpu")


def bin_dir(versions: dict | None = None) -> Path:
    """Return the directory build/build.sh puts the binaries in for the pinned Kubernetes version."""
    versions = versions or read_versions()
    return cache_dir() / "k8s" / versions["KUBE_VERSION"] / "bin"
