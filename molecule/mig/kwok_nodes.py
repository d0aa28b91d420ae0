# SPDX-License-Identifier: GPL-3.0-or-later
"""This scenario's control plane (no fleet nodes) and one kwok node per container, named like it, with its GPU
profile and the MIG state file its fake NVML writes, so that the device-manager simulator advertises that layout.

usage: python kwok_nodes.py STATE_DIR MIG_STATE_DIR NAME=PROFILE ... (from the repository root)"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for the sandbox package
from sandbox.k8s import cluster, nodes, paths  # noqa: E402 pylint: disable=wrong-import-position


def main(argv):
    state, mig_state = Path(argv[0]), Path(argv[1])
    layout = cluster.Layout(state, state / "kubeconfig")
    cluster.up(layout, timeout=180, fleet=False)
    version = paths.read_versions()["KUBE_VERSION"]
    made = []
    for pair in argv[2:]:
        name, profile = pair.split("=", 1)
        made.append(nodes.node_manifest(name, version, profile_path=str(paths.PROFILES_DIR / (profile + ".json")),
                                        mig_state_path=str(mig_state / name / nodes.MIG_STATE_FILE)))
    cluster.create_nodes(layout, made)
    cluster.wait_nodes_ready(layout, set(m["metadata"]["name"] for m in made), time.monotonic() + 120)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
