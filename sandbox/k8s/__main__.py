# SPDX-License-Identifier: GPL-3.0-or-later
"""Sandbox control plane CLI: ``python -m sandbox.k8s {up,down,status,nodes}`` (run from the repository root)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sandbox.kubelet.node import KubeletNodeError

from . import cluster, nodes, paths


def main(argv=None) -> int:
    """Dispatch the sub-command."""
    parser = argparse.ArgumentParser(prog="python -m sandbox.k8s", description=__doc__)
    parser.add_argument("--state-dir", type=Path, default=paths.STATE_DIR)
    parser.add_argument("--kubeconfig", type=Path, default=paths.KUBECONFIG)
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up", help="start the control plane, kwok nodes and the device-manager simulator")
    p_up.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for readiness")
    p_up.add_argument("--extra-nodes", type=int, default=0, help="extra scale nodes besides the fleet")
    p_up.add_argument("--extra-profile", default=None, help="GPU profile (name or .json path) of the extra nodes; none = CPU only")
    p_up.add_argument("--gpu-taint", action="store_true", help="taint GPU nodes nvidia.com/gpu=present:NoSchedule")
    p_up.add_argument("--profiles-dir", type=Path, default=paths.PROFILES_DIR)
    p_up.add_argument("--mig-state-dir", type=Path, default=None,
                      help="where the fleet containers' fake NVML keeps MIG state, <dir>/<node>/mig-state.json "
                           "(make sandbox-up passes the Makefile's MIG_STATE, which nodes-up mounts); devsim applies "
                           "it to the profiles. Without it the fleet's nodes advertise their profiles' layouts")
    p_up.add_argument("--kubelet-nodes", default=None,
                      help="fleet nodes that run a real kubelet instead of being kwok nodes: all, none, or names "
                           "separated by commas (default: those with `kubelet: true` in sandbox/fleet.yml); their node "
                           "containers must run (make nodes-up). NAME=CONTAINER: the node container CONTAINER is the "
                           "fleet node NAME (molecule's platforms)")
    p_up.add_argument("--apf", action="store_true",
                      help="kube-apiserver with API Priority and Fairness on, and a client identity it does not exempt "
                           "(operator.kubeconfig in the state directory; sandbox/k8s/apf.py). Default: off")
    sub.add_parser("down", help="stop every process `up` started")
    sub.add_parser("status", help="show what runs")
    p_nodes = sub.add_parser("nodes", help="add extra scale nodes to a running sandbox")
    p_nodes.add_argument("--count", type=int, required=True)
    p_nodes.add_argument("--profile", default=None)
    p_nodes.add_argument("--start", type=int, default=0, help="first index of the generated names")
    p_nodes.add_argument("--gpu-taint", action="store_true")
    args = parser.parse_args(argv)
    layout = cluster.Layout(args.state_dir, args.kubeconfig)
    try:
        if args.command == "up":
            from sandbox.kubelet import cluster as kubelets  # pylint: disable=import-outside-toplevel
            try:
                kubelet_nodes = kubelets.select(nodes.load_fleet(), args.kubelet_nodes)
            except ValueError as exc:
                parser.error("--kubelet-nodes: %s" % exc)
            cluster.up(layout, timeout=args.timeout, extra_nodes=args.extra_nodes, extra_profile=args.extra_profile,
                       gpu_taint=args.gpu_taint, profiles_dir=args.profiles_dir, mig_state_dir=args.mig_state_dir,
                       kubelet_nodes=kubelet_nodes, apf=args.apf)
            return 0
        if args.command == "down":
            return cluster.down(layout)
        if args.command == "status":
            return cluster.status(layout)
        if not cluster.running(layout):
            print("sandbox: not running; run `make sandbox-up` first", file=sys.stderr)
            return 1
        manifests = nodes.scale_manifests(args.count, paths.read_versions()["KUBE_VERSION"], args.profile, args.gpu_taint, start=args.start)
        cluster.create_nodes(layout, manifests)
        print("sandbox: added %d nodes (%s .. %s)" % (len(manifests), manifests[0]["metadata"]["name"], manifests[-1]["metadata"]["name"])
              if manifests else "sandbox: no nodes added")
        return 0
    except (cluster.SandboxError, KubeletNodeError) as exc:
        print("sandbox: %s" % exc, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
