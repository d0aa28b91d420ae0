# SPDX-License-Identifier: GPL-3.0-or-later
"""Kubelet nodes in a sandbox control plane's life: which fleet nodes are kubelet nodes, bringing their kubelets up
once the control plane runs (``start``, called by sandbox/k8s/cluster.py's ``up``) and stopping them (``stop``,
called by its ``down``).

The kubelets reach the API server through a relay on their Docker bridge's gateway address (gateway.py), recorded in
the sandbox's state like its other processes, so ``down`` stops it. The API server reaches each kubelet at its node
container's address (port 10250; the sandbox API server runs with --kubelet-preferred-address-types=InternalIP).
"""

from __future__ import annotations

import concurrent.futures
import socket
import sys
import time
from pathlib import Path

from . import config
from . import node as node_mod

GATEWAY = "kubelet-gateway"
# nodes provisioned at once
PARALLEL = 4
# inotify instances: what one kubelet node adds (seen: the kubelet 6, its containerd 1), and the limit make
# kubelet-inotify sets (rules.mk KUBELET_INOTIFY_INSTANCES)
INOTIFY_PER_NODE = 8
INOTIFY_WANTED = 1024
INOTIFY_LIMIT = Path("/proc/sys/fs/inotify/max_user_instances")


def select(fleet: list, choice: str | None = None) -> list:
    """The fleet nodes that are kubelet nodes, each with its index in the fleet (its pod subnet): those with
    ``kubelet: true`` in fleet.yml, or ``choice``: "all", "none", or names separated by commas. ``NAME=CONTAINER``
    in place of a name: the fleet node NAME is the node container CONTAINER (its ``container``), as molecule's
    platforms are (md-h100 registers as kg-h100: a site whose host and node names differ)."""
    indexed = [dict(n, index=i + 1) for i, n in enumerate(fleet)]
    if choice is None or choice == "":
        return [n for n in indexed if n.get(config.FLEET_KEY)]
    if choice == "none":
        return []
    if choice == "all":
        return indexed
    containers = dict((c.strip().split("=", 1) + [""])[:2] for c in choice.split(",") if c.strip())
    unknown = sorted(set(containers) - {n["name"] for n in indexed})
    if unknown:
        raise ValueError("not fleet nodes: %s" % ", ".join(unknown))
    return [dict(n, container=containers[n["name"]]) if containers[n["name"]] else n
            for n in indexed if n["name"] in containers]


def container_of(node: dict) -> str:
    """The node container of a kubelet node (``select``): its own name unless another container is that node."""
    return node.get("container") or node["name"]


def labels_for(node: dict, fleet: bool = True) -> dict:
    """The labels a kubelet node registers with: the fleet's (as its kwok nodes carry) and the kubelet mark."""
    from sandbox.k8s import nodes as k8s_nodes  # pylint: disable=import-outside-toplevel
    labels = {config.KUBELET_LABEL: "true", k8s_nodes.ROLE_LABEL: node.get("variant") or "base"}
    if fleet:
        labels[k8s_nodes.FLEET_LABEL] = "true"
    return labels


def inotify_limit() -> int:
    """fs.inotify.max_user_instances: every root process of every container on this machine counts against it (one user
    in one user namespace), 128 by default. A kubelet takes about INOTIFY_PER_NODE; one that gets none fails to start
    cAdvisor ("inotify_init: too many open files") and restarts until one frees up (seen: four kubelet nodes beside the
    other runs of this machine Ready after 100 s instead of 1 s). kind's known issues name the same limit."""
    return int(INOTIFY_LIMIT.read_text(encoding="utf-8"))


def starved(names) -> list:
    """The nodes among ``names`` whose kubelet ran out of inotify instances since its start."""
    out = []
    for name in names:
        done = node_mod.docker("exec", name, "sh", "-c", "journalctl -u kubelet.service -b --no-pager -o cat "
                               "| grep -c 'inotify_init: too many open files' || true", check=False, timeout=30)
        if done.returncode == 0 and done.stdout.decode().strip() not in ("", "0"):
            out.append(name)
    return out


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


# What the device-manager simulator still does on a kubelet node, said on the node itself (sandbox/kubelet/README.md
# "GFD and NFD labels on kubelet nodes"): GFD's and NFD's labels come from the profile annotation, not from a program
# that read the node's NVML
SIMULATED_ANNOTATION = "sandbox.kubegpu.io/simulated"
SIMULATED_NOTE = ("gfd,nfd: the device-manager simulator writes GPU feature discovery's and node feature discovery's "
                  "NodeFeature objects from this node's GPU profile (%s); their stand-in pods run and only wait")


def simulated_annotations(node: dict, mig_state_dir=None) -> dict:
    """The annotations a fleet kubelet node with a GPU profile gets once registered, so that the device-manager
    simulator labels it as GFD and NFD would (it reads the profile from them, as on a kwok node); none without one.
    Nothing of the simulator's device-plugin part follows from them: it keys on kwok's annotation."""
    from sandbox.k8s import nodes as k8s_nodes  # pylint: disable=import-outside-toplevel
    profile = node.get("profile")
    if not profile:
        return {}
    out = {k8s_nodes.PROFILE_ANNOTATION: profile, SIMULATED_ANNOTATION: SIMULATED_NOTE % profile}
    if mig_state_dir:
        out[k8s_nodes.MIG_STATE_ANNOTATION] = str(Path(mig_state_dir).resolve() / node["name"] / k8s_nodes.MIG_STATE_FILE)
    return out


def annotate(layout, nodes: list, mig_state_dir=None) -> None:
    """Write :func:`simulated_annotations` on each registered node (a merge patch; the kubelet keeps them)."""
    from sandbox.k8s import cluster  # pylint: disable=import-outside-toplevel
    client, api_client = cluster._api(layout)  # pylint: disable=protected-access
    core = client.CoreV1Api(api_client)
    for n in nodes:
        wanted = simulated_annotations(n, mig_state_dir)
        if wanted:
            core.patch_node(n["name"], {"metadata": {"annotations": wanted}})


def start(layout, state: dict, nodes: list, timeout: float, launch, gpu_taint: bool = False, fleet: bool = True,
          mig_state_dir=None) -> dict:
    """Provision every node of ``nodes`` (dicts with name, variant, index) as a kubelet node of the sandbox whose
    ``state`` is given, and wait (a watch, at most ``timeout`` seconds) until each is Ready. ``launch(name, argv)``
    starts and records a sandbox process (the relay). Fleet nodes with a GPU profile then get
    :func:`simulated_annotations`. Returns a report per node."""
    from sandbox.k8s import cluster  # pylint: disable=import-outside-toplevel
    deadline = time.monotonic() + timeout
    if inotify_limit() < INOTIFY_WANTED:
        print("sandbox: fs.inotify.max_user_instances is %d; %d kubelet node(s) take about %d more (make kubelet-inotify)"
              % (inotify_limit(), len(nodes), len(nodes) * INOTIFY_PER_NODE))
    infos = {n["name"]: node_mod.inspect(container_of(n)) for n in nodes}
    stopped = sorted(container_of(n) for n in nodes if not infos[n["name"]]["running"])
    if stopped:
        raise node_mod.KubeletNodeError("node containers not running: %s (make nodes-up)" % ", ".join(stopped))
    api_port = state["ports"]["kube-apiserver"]
    servers = {}
    for gateway in sorted({i["gateway"] for i in infos.values()}):
        if not gateway:
            raise node_mod.KubeletNodeError("a node container has no bridge gateway: %s" % infos)
        port = _free_port(gateway)
        name = GATEWAY if not servers else "%s-%d" % (GATEWAY, len(servers))
        record = launch(name, [sys.executable, "-m", "sandbox.kubelet.gateway", "--listen", "%s:%d" % (gateway, port),
                               "--to", "127.0.0.1:%d" % api_port])
        cluster.poll_until("the API relay on %s:%d" % (gateway, port), lambda g=gateway, p=port: _answers(g, p),
                           deadline, [record], layout=layout)
        servers[gateway] = "https://%s:%d" % (gateway, port)
    state["kubelet_nodes"] = [container_of(n) for n in nodes]  # the containers, which stop() resets
    state["kubelet_servers"] = {n["name"]: servers[infos[n["name"]]["gateway"]] for n in nodes}
    cluster.save_state(layout, state)
    image_dir = config.image_dir()
    node_mod.issue_identity(layout.pki, nodes[0]["name"])  # the first, alone: the CA files exist before the others ask

    def provision(n):
        return node_mod.provision(container_of(n), index=n["index"], server=servers[infos[n["name"]]["gateway"]],
                                  pki_dir=layout.pki, labels=labels_for(n, fleet), gpu_taint=gpu_taint, image_dir=image_dir,
                                  node_name=n["name"], containerd2=config.wants_containerd2(n))

    # a few nodes at a time: each step is a docker command that mostly waits (copies, systemctl in the node)
    with concurrent.futures.ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        reports = dict(zip((n["name"] for n in nodes), pool.map(provision, nodes)))
    ready_from = time.monotonic()
    try:
        cluster.wait_nodes_ready(layout, {n["name"] for n in nodes}, deadline)
    except cluster.SandboxError as exc:
        short = starved(container_of(n) for n in nodes)
        if short:
            raise node_mod.KubeletNodeError(
                "%s; the kubelet of %s ran out of inotify instances (fs.inotify.max_user_instances=%d is shared by every "
                "container's root): make kubelet-inotify" % (exc, ", ".join(short), inotify_limit())) from exc
        raise
    for report in reports.values():
        report["ready_wait_seconds"] = round(time.monotonic() - ready_from, 1)
    if fleet:
        annotate(layout, nodes, mig_state_dir)
    return reports


def stop(state: dict) -> None:
    """Stop the kubelets of the nodes ``start`` recorded (their containers may be gone already)."""
    for name in state.get("kubelet_nodes") or []:
        try:
            if node_mod.inspect(name)["running"]:
                started = time.monotonic()
                said = node_mod.reset(name)
                print("sandbox: %s: %s (%.1f s)" % (name, said, time.monotonic() - started))
        except node_mod.KubeletNodeError as exc:
            print("sandbox: %s: %s" % (name, exc))
