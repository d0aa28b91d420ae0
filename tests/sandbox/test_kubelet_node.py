# SPDX-License-Identifier: GPL-3.0-or-later
"""A kubelet node of the sandbox (sandbox/kubelet): a GPU node container running a real kubelet 1.36 next to its
containerd, registered with a control plane of this module's own.

One node container of its own (``kl-test-node``, label ``kubegpu.kl=1``, made by sandbox/images/nodes.yml from a fleet
file of one node, never one of the fleet's), one control plane of its own (under $TEST_STATE_DIR/kubelet), both
removed at the end. It checks what only a kubelet can do: the node is Ready without kwok, the API server reaches the
kubelet (node proxy, pod logs, exec), a pod's containers run (in the node's own cgroup), and the image loader skips what is
already there.
"""

import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from k8s_helpers import wait_for
from node_container import docker_checked as _docker, nodes_play
from setup_steps import missing_setup

ROOT = Path(__file__).resolve().parents[2]
NODE = "kl-test-node"
OWNER_LABEL = "kubegpu.kl"
PROFILE = "t4"


def _prerequisites():
    from sandbox.kubelet import config  # pylint: disable=import-outside-toplevel
    if _docker("info", check=False, timeout=30).returncode:
        missing_setup("no Docker engine (make docker-engine)")
    if _docker("image", "inspect", "kubegpu/node:gpu", check=False, timeout=30).returncode:
        missing_setup("no node image kubegpu/node:gpu (make node-images)")
    if not config.kubelet_binary().exists():
        missing_setup("no kubelet at %s (make kubelet)" % config.kubelet_binary())
    missing = [p for p in config.CNI_PLUGINS if not (config.HOST_CNI_DIR / p).exists()]
    if missing:
        missing_setup("no CNI plugins %s in %s (make kubelet-cni)" % (", ".join(missing), config.HOST_CNI_DIR))
    image_dir = config.image_dir()
    if not image_dir or not (image_dir / "pause.tar").exists():
        missing_setup("no pause image tar in $KUBELET_IMAGE_DIR (%s; make kubelet-images)" % image_dir)
    return image_dir


class _Cluster:
    """The module's control plane: its layout, state, admin kubeconfig and a core API client."""

    def __init__(self, layout, state):
        from kubernetes import client, config  # pylint: disable=import-outside-toplevel
        from sandbox.k8s import paths  # pylint: disable=import-outside-toplevel
        self.layout = layout
        self.state = state
        self.kubeconfig = str(layout.kubeconfig)
        self.core = client.CoreV1Api(config.new_client_from_config(config_file=self.kubeconfig))
        self.kube_version = paths.read_versions()["KUBE_VERSION"]


@pytest.fixture(scope="module")
def kubelet_node(tmp_path_factory):
    """A control plane with one kubelet node, kl-test-node (a t4 GPU node container), Ready."""
    _prerequisites()
    from sandbox.k8s import cluster, paths  # pylint: disable=import-outside-toplevel
    from sandbox.kubelet import cluster as kubelets  # pylint: disable=import-outside-toplevel
    state_dir = (paths.TEST_STATE_DIR / "kubelet").resolve()
    layout = cluster.Layout(state_dir / "k8s", state_dir / "kubeconfig")
    cluster.down(layout, quiet=True)
    fleet_file = tmp_path_factory.mktemp("kubelet-fleet") / "fleet.yml"
    fleet_file.write_text(yaml.safe_dump({"nodes": [{"name": NODE, "variant": "gpu", "profile": PROFILE}]}))
    nodes_play(state_dir, fleet_file, "absent", OWNER_LABEL)
    nodes_play(state_dir, fleet_file, "started", OWNER_LABEL)
    try:
        started = time.monotonic()
        state = cluster.up(layout, timeout=180, fleet=False,
                           kubelet_nodes=kubelets.select([{"name": NODE, "variant": "gpu", "profile": PROFILE}], "all"))
        print("sandbox with a kubelet node up in %.1f s: %s" % (time.monotonic() - started, json.dumps(state["kubelet"])))
        yield _Cluster(layout, state)
    finally:
        cluster.down(layout, quiet=True)
        nodes_play(state_dir, fleet_file, "absent", OWNER_LABEL)


def _wait_pod(core, name, namespace, phases, timeout=120):
    """Watch a pod until its phase is one of ``phases``; return it."""
    return wait_for(core.list_namespaced_pod, namespace, field_selector="metadata.name=" + name,
                    predicate=lambda pod: pod.status.phase in phases, timeout=timeout,
                    describe="pod %s in phase %s" % (name, "/".join(sorted(phases))))


def _pause_pod(name, args=None, restart="Always", guaranteed=False):
    from sandbox.kubelet import config  # pylint: disable=import-outside-toplevel
    container = {"name": "main", "image": config.read_env()["PAUSE_IMAGE"], "imagePullPolicy": "IfNotPresent"}
    if args:
        container["args"] = args
    if guaranteed:
        container["resources"] = {"limits": {"cpu": "1", "memory": "32Mi"}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": NODE}, "restartPolicy": restart,
                     "containers": [container], "terminationGracePeriodSeconds": 2}}


def test_node_is_a_ready_kubelet_node(kubelet_node):
    sandbox = kubelet_node
    node = sandbox.core.read_node(NODE)
    from sandbox.k8s import nodes  # pylint: disable=import-outside-toplevel
    assert nodes.KWOK_ANNOTATION not in (node.metadata.annotations or {})
    assert node.metadata.labels.get("sandbox.kubegpu.io/kubelet") == "true"
    assert node.metadata.labels.get(nodes.ROLE_LABEL) == "gpu"
    ready = [c for c in node.status.conditions if c.type == "Ready"]
    assert ready and ready[0].status == "True", node.status.conditions
    info = node.status.node_info
    assert info.kubelet_version == "v" + sandbox.kube_version
    assert info.container_runtime_version.startswith("containerd://1.6."), info.container_runtime_version
    # the node's own address, which the API server dials for the kubelet
    ip = _docker("inspect", "-f", "{{.NetworkSettings.IPAddress}}", NODE).stdout.strip()
    assert {"type": "InternalIP", "address": ip} in [{"type": a.type, "address": a.address} for a in node.status.addresses]


def test_api_server_reaches_the_kubelet(kubelet_node):
    sandbox = kubelet_node
    done = subprocess.run(["kubectl", "--kubeconfig", sandbox.kubeconfig, "get", "--raw",
                           "/api/v1/nodes/%s/proxy/healthz" % NODE], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr
    # the kubelet answers nobody who is not the API server (anonymous is off)
    ip = _docker("inspect", "-f", "{{.NetworkSettings.IPAddress}}", NODE).stdout.strip()
    probe = _docker("exec", NODE, "curl", "-sk", "-o", "/dev/null", "-w", "%{http_code}", "https://%s:10250/pods" % ip,
                    check=False)
    assert probe.stdout.strip() == "401", probe.stdout + probe.stderr


def test_node_credentials_are_a_nodes(kubelet_node, tmp_path):
    """The kubelet's own certificate (system:node:<name>) is held to what the Node authorizer and NodeRestriction
    allow: no cluster-wide secrets, no label under node-restriction.kubernetes.io/ on its own Node."""
    sandbox = kubelet_node
    kubeconfig = yaml.safe_load(_docker("exec", NODE, "cat", "/etc/kubernetes/kubelet.conf").stdout)
    assert kubeconfig["users"][0]["name"] == "system:node:" + NODE
    kubeconfig["clusters"][0]["cluster"]["server"] = sandbox.state["server"]  # loopback, not the relay
    path = tmp_path / "kubelet.conf"
    path.write_text(yaml.safe_dump(kubeconfig))

    def kubectl(*args):
        return subprocess.run(["kubectl", "--kubeconfig", str(path), *args], capture_output=True, text=True,
                              timeout=60, check=False)
    assert kubectl("get", "node", NODE, "-o", "name").stdout.strip() == "node/" + NODE
    secrets = kubectl("get", "secrets", "--all-namespaces")
    assert secrets.returncode != 0 and "forbidden" in secrets.stderr.lower(), secrets.stdout + secrets.stderr
    label = kubectl("label", "node", NODE, "node-restriction.kubernetes.io/kl-test=yes")
    assert label.returncode != 0 and "node-restriction.kubernetes.io" in label.stderr, label.stdout + label.stderr


def test_pods_run_and_log(kubelet_node):
    sandbox = kubelet_node
    core = sandbox.core
    core.create_namespaced_pod("default", _pause_pod("kl-hello", args=["--version"], restart="Never"))
    core.create_namespaced_pod("default", _pause_pod("kl-sleeper", guaranteed=True))
    try:
        hello = _wait_pod(core, "kl-hello", "default", {"Succeeded", "Failed"})
        assert hello.status.phase == "Succeeded", hello.status
        log = core.read_namespaced_pod_log("kl-hello", "default")
        assert "kubegpu sandbox pause" in log, log
        sleeper = _wait_pod(core, "kl-sleeper", "default", {"Running", "Failed"})
        assert sleeper.status.phase == "Running", sleeper.status
        assert sleeper.status.pod_ip.startswith("10.244."), sleeper.status.pod_ip
        # the pod's cgroup is below its node container's (the host's /docker/<id>/kubepods.slice/...), and the static
        # CPU manager gave the Guaranteed pod a CPU of its own
        node_id = _docker("inspect", "-f", "{{.Id}}", NODE).stdout.strip()
        uid = sleeper.metadata.uid.replace("-", "_")
        pod_slice = Path("/sys/fs/cgroup/memory/docker/%s/kubepods.slice/kubepods-pod%s.slice" % (node_id, uid))
        assert pod_slice.is_dir(), "no %s on the host" % pod_slice
        state = json.loads(_docker("exec", NODE, "cat", "/var/lib/kubelet/cpu_manager_state").stdout)
        assert state["policyName"] == "static" and sleeper.metadata.uid in state.get("entries", {}), state
        # exec through the API server and the kubelet's streaming server, into the running container
        done = subprocess.run(["kubectl", "--kubeconfig", sandbox.kubeconfig, "exec", "kl-sleeper", "--", "/pause", "--version"],
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0 and "kubegpu sandbox pause" in done.stdout, done.stdout + done.stderr
    finally:
        for name in ("kl-hello", "kl-sleeper"):
            core.delete_namespaced_pod(name, "default", grace_period_seconds=0)


def test_image_loader_skips_what_is_there(kubelet_node):
    from sandbox.kubelet import node  # pylint: disable=import-outside-toplevel
    started = time.monotonic()
    report = node.load_images(NODE)
    assert report["images"]["pause.tar"]["containerd"] == "present", report
    assert report["images"]["pause.tar"]["docker"] == "present", report
    assert time.monotonic() - started < 30


def test_a_reboot_brings_the_node_back(kubelet_node):
    """A node container's restart (what a reboot inside it does: the mig role's) loses /run, /var/lib/containerd and
    /var/lib/docker (tmpfs): the fix-ups run again, the images are loaded again, and the kubelet restarts the pod."""
    sandbox = kubelet_node
    core = sandbox.core
    core.create_namespaced_pod("default", _pause_pod("kl-survivor"))
    try:
        _wait_pod(core, "kl-survivor", "default", {"Running"})
        _docker("restart", "-t", "5", NODE)
        deadline = time.monotonic() + 120
        while True:
            pod = core.read_namespaced_pod("kl-survivor", "default")
            status = (pod.status.container_statuses or [None])[0]
            if status and status.restart_count >= 1 and status.ready:
                break
            assert time.monotonic() < deadline, "the pod did not come back after the node's restart: %s" % pod.status
            time.sleep(1)
        node = core.read_node(NODE)
        assert [c.status for c in node.status.conditions if c.type == "Ready"] == ["True"]
        booted = _docker("exec", NODE, "systemctl", "is-active", "kubegpu-kubelet-prep.service",
                         "kubegpu-image-load.service", "kubelet.service").stdout.split()
        assert booted == ["active"] * 3, booted
    finally:
        core.delete_namespaced_pod("kl-survivor", "default", grace_period_seconds=0)


def test_down_stops_the_kubelet(kubelet_node):
    from sandbox.k8s import cluster  # pylint: disable=import-outside-toplevel
    sandbox = kubelet_node
    assert cluster.down(sandbox.layout) == 0
    active = _docker("exec", NODE, "systemctl", "is-active", "kubelet.service", check=False).stdout.strip()
    assert active == "inactive", active
    left = _docker("exec", NODE, "ctr", "-n", "k8s.io", "tasks", "ls", "-q").stdout.split()
    assert left == [], left
