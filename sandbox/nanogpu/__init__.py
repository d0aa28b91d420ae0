# SPDX-License-Identifier: GPL-3.0-or-later
"""A stand-in for nano-gpu's scheduler extender (nano-gpu/nano-gpu-scheduler), for the sandbox control plane.

The Go proxy does not serve github.com/nano-gpu/nano-gpu-scheduler (403 on ``@v/list``), so the sandbox cannot build
the real one. This package follows its HTTP API and its decisions, as read in its source (now in
elastic-ai/elastic-gpu-scheduler's history; each rule cites its file): ``dealer`` decides (pure), ``server`` answers
the kube-scheduler on loopback, ``schedconf`` writes the kube-scheduler's configuration with the collection's own
``extenders`` entry. The facts (resource name, annotations, verbs, port) come from the collection's
``_nanogpu/constants.py``, imported through the collection link ``make venv`` makes (``.build/collections``).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COLLECTIONS = ROOT / ".build" / "collections"


def _collection_on_path() -> None:
    try:
        import ansible_collections.kubegpu.cluster  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
        return
    except ImportError:
        pass
    if not (COLLECTIONS / "ansible_collections" / "kubegpu" / "cluster").exists():
        raise ImportError("the collection link %s/ansible_collections/kubegpu/cluster is missing: run `make venv`"
                          % COLLECTIONS)
    sys.path.insert(0, str(COLLECTIONS))


_collection_on_path()

# pylint: disable=wrong-import-position
from ansible_collections.kubegpu.cluster.plugins.module_utils._nanogpu import constants as C  # noqa: E402
from ansible_collections.kubegpu.cluster.plugins.module_utils._nanogpu.scheduler import extender_entry  # noqa: E402

__all__ = ["C", "extender_entry"]
