# SPDX-License-Identifier: GPL-3.0-or-later
"""The end-to-end proof on real kubelet nodes (issue 24): what the collection deploys runs as written, and the proof
proves something.

Two gpu node containers of this module's own (``e2e-h100``, profile h100, driver 550 / CUDA 12.4; ``e2e-gtx1060``,
profile gtx1060, driver 390.30 / CUDA 9.1), made by sandbox/images/nodes.yml with the owner label ``kubegpu.e2e``, are
kubelet nodes (sandbox/kubelet) of a control plane of this module's own (under $TEST_STATE_DIR/gpu-e2e). On both
nodes the collection's ``container_toolkit`` role (through ansible-playbook, as molecule's container_toolkit scenario
runs it) installs the stand-in toolkit packages from the apt repository each node has mounted (NVIDIA's
nvidia-container-runtime, nvidia-ctk and nvidia-cdi-hook built from source, sandbox/aptrepo) and makes NVIDIA's
runtime containerd's default; the loader has put the stand-in images (sandbox/standins) and the proof image
(sandbox/proof) into the node's containerd.

Only real components from there on:
1. ``device_plugin_deploy`` (``ansible localhost -m``) deploys NVIDIA's device plugin DaemonSet, unchanged; the real
   kubelet starts the stand-in plugin through NVIDIA's runtime (jit-cdi: the fake NVML reaches the plugin's container
   only that way), the plugin registers over the kubelet's socket and the kubelet reports allocatable nvidia.com/gpu;
   the device-manager simulator only annotates (it patches no kubelet node's status).
2. Deleting the plugin pod makes the kubelet's allocatable fall to 0; it comes back when the DaemonSet's new pod
   registers.
3. ``gpu_proof`` per node: passes on h100 (vectorAdd's "Test PASSED", read from the pod through the kubelet) and fails
   on gtx1060 with CUDA's "CUDA driver version is insufficient for CUDA runtime version" and the module's hint.
4. A pod asking for ``nvidia.com/gpu`` gets, inside its container, ``NVIDIA_VISIBLE_DEVICES`` as the plugin answered
   the kubelet (the kubelet's checkpoint), the device node of that GPU only, and the node's fake NVML, bind-mounted by
   NVIDIA's runtime, answering with that GPU.
5. DaemonSet changes the collection makes (device_plugin_deploy options) are what the kubelet runs: the config (device
   list and ID strategies), the security context (SYS_ADMIN for volume-mounts) and the CDI host paths, read from
   containerd's spec of the restarted plugin container and from what the plugin wrote through the host path; a node
   selector and a toleration, read from which kubelets run the plugin (their /pods, their containerd) and advertise.
6. Time-slicing with 2 replicas: allocatable 2 (last; it leaves the plugin shared).

Why h100 and not t4 for the passing node: the proof image is ``vectoradd-cuda12.5.0``, and a CUDA 12 program needs a
driver of CUDA 12 (>= 525, CUDA's minor version compatibility); t4's profile has driver 450.102.04 (CUDA 11.0), so
the proof fails there too, as NVIDIA's image would (sandbox/proof/README.md).

The node image must have the fake NVML's driver files unit (sandbox/images, the runtime slice of issue 24);
``KUBEGPU_E2E_NODE_IMAGE`` (``repository``, the variant ``gpu`` is its tag) names another image for a worktree whose
node images are not rebuilt yet.
"""

import base64
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from ansible_cli import _environment, run_module
from k8s_helpers import wait_for
from node_container import NodeContainer, docker_checked as _docker, nodes_play
from setup_steps import missing_setup

ROOT = Path(__file__).resolve().parents[2]
# KUBEGPU_E2E_OWNER_LABEL and KUBEGPU_E2E_PREFIX: another owner label and name prefix for the containers, so that a
# second run on the same machine (a worktree's, beside `make test`) neither takes nor removes this one's
OWNER_LABEL = os.environ.get("KUBEGPU_E2E_OWNER_LABEL", "kubegpu.e2e")
PREFIX = os.environ.get("KUBEGPU_E2E_PREFIX", "e2e-")
NODE_IMAGE_REPO = os.environ.get("KUBEGPU_E2E_NODE_IMAGE", "kubegpu/node")
PASSING, FAILING = PREFIX + "h100", PREFIX + "gtx1060"
FLEET = [{"name": PASSING, "variant": "gpu", "profile": "h100"},
         {"name": FAILING, "variant": "gpu", "profile": "gtx1060"}]
NODE_LABEL = "kubegpu.e2e/gpu-node"  # the plugin's node selector: only this module's nodes
NAMESPACE = "e2e-gpu"
HOLD_TAINT = "kubegpu.e2e/hold"  # a taint the collection's DaemonSet does not tolerate
PLUGIN_DS = "nvidia-device-plugin-daemonset"
MANAGED = "app.kubernetes.io/managed-by=kubegpu.cluster"
GPU = "nvidia.com/gpu"
INSUFFICIENT = "CUDA driver version is insufficient for CUDA runtime version"
RUNTIME_LOG = "/var/log/nvidia-container-runtime.log"
# The collection's container_toolkit role, as molecule's container_toolkit scenario runs it: the stand-in apt
# repository the node has mounted, served on its loopback (sandbox/aptrepo/serve.yml), the toolkit's packages from it,
# NVIDIA's runtime registered with containerd as its default, containerd restarted and checked
ROLE_PLAY = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Serve the stand-in apt repository on the node's loopback
      ansible.builtin.include_tasks: {serve}
    - name: Install the toolkit and make NVIDIA's runtime containerd's default
      ansible.builtin.include_role:
        name: kubegpu.cluster.container_toolkit
      vars:
        container_toolkit_apt_repo_url: http://127.0.0.1:8088/stable/deb/
        container_toolkit_apt_key_url: http://127.0.0.1:8088/gpgkey
        container_toolkit_runtimes: [containerd]
"""
# The runtime's debug log, so the test can read which mode it chose (read at every container's creation)
RUNTIME_DEBUG = r"""
set -euo pipefail
mkdir -p /etc/nvidia-container-runtime
test -e /etc/nvidia-container-runtime/config.toml || nvidia-ctk config default --output /etc/nvidia-container-runtime/config.toml
nvidia-ctk config --in-place --set nvidia-container-runtime.debug={log} \
    --set nvidia-container-runtime.log-level=debug 2>/dev/null
"""


def _play(names, playbook, tmp_path, timeout=300):
    """``ansible-playbook`` of the playbook text on these node containers at once (the docker connection, the node's
    python3, as molecule's platforms), with the JSON callback; returns (exit code, {host: [(task, result)]})."""
    path = tmp_path / "play.yml"
    path.write_text(playbook)
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"all": {"hosts": {name: {
        "ansible_connection": "community.docker.docker", "ansible_python_interpreter": "/usr/bin/python3"}
        for name in names}}}))
    command = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), str(path)]
    done = subprocess.run(command, env=_environment(), capture_output=True, text=True, check=False, cwd=ROOT,
                          timeout=timeout)
    try:
        plays = json.loads(done.stdout)["plays"]
    except (ValueError, KeyError) as exc:
        raise AssertionError("no JSON from ansible-playbook (rc %s):\n%s\n%s" % (done.returncode, done.stdout[-3000:],
                                                                                 done.stderr[-3000:])) from exc
    tasks = {name: [(t["task"]["name"], t["hosts"][name]) for play in plays for t in play["tasks"] if name in t["hosts"]]
             for name in names}
    return done.returncode, tasks


def _toolkit_version():
    with open(ROOT / "sandbox" / "aptrepo" / "versions.env", encoding="utf-8") as handle:
        return next(line.split("=", 1)[1].split() for line in handle if line.startswith("TOOLKIT_VERSIONS="))[-1]


def _prerequisites():
    """What test-setup makes; a missing piece ends the module with the make target that makes it."""
    from sandbox.kubelet import config  # pylint: disable=import-outside-toplevel
    if _docker("info", check=False, timeout=30).returncode:
        missing_setup("no Docker engine (make docker-engine)")
    image = "%s:gpu" % NODE_IMAGE_REPO
    if _docker("image", "inspect", image, check=False, timeout=30).returncode:
        missing_setup("no node image %s (make node-images)" % image)
    if not config.kubelet_binary().exists():
        missing_setup("no kubelet at %s (make kubelet)" % config.kubelet_binary())
    missing = [p for p in config.CNI_PLUGINS if not (config.HOST_CNI_DIR / p).exists()]
    if missing:
        missing_setup("no CNI plugins %s in %s (make kubelet-cni)" % (", ".join(missing), config.HOST_CNI_DIR))
    image_dir = config.image_dir()
    for tar, target in (("pause.tar", "kubelet-images"), ("standins.tar", "standin-images"),
                        ("proof.tar", "proof-image-loader")):
        if not image_dir or not (image_dir / tar).exists():
            missing_setup("no %s in $KUBELET_IMAGE_DIR (%s; make %s)" % (tar, image_dir, target))
    deb = ROOT / ".build" / "aptrepo" / "stable" / "deb" / "amd64" / (
        "nvidia-container-toolkit-base_%s_amd64.deb" % _toolkit_version())
    if not deb.exists():
        missing_setup("no %s (make apt-repo)" % deb)


class _Sandbox:
    """The module's control plane and its two kubelet nodes."""

    def __init__(self, layout, state):
        from kubernetes import client, config  # pylint: disable=import-outside-toplevel
        self.layout = layout
        self.state = state
        self.kubeconfig = str(layout.kubeconfig)
        api = config.new_client_from_config(config_file=self.kubeconfig)
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.timings = {}

    def deploy(self, **options):
        """device_plugin_deploy through ``ansible localhost -m``, on this module's nodes; returns its result."""
        args = dict(kubeconfig=self.kubeconfig, namespace=NAMESPACE, node_selector={NODE_LABEL: "true"},
                    deploy_labels=False, wait_timeout=120)
        args.update(options)
        started = time.monotonic()
        rc, result = run_module("kubegpu.cluster.device_plugin_deploy", args)
        self.timings.setdefault("device_plugin_deploy", []).append(round(time.monotonic() - started, 1))
        assert rc == 0, json.dumps(result, indent=1)[-6000:]
        return result

    def allocatable(self, node):
        alloc = self.core.read_node(node).status.allocatable or {}
        return int(alloc.get(GPU, "0"))

    def plugin_pods(self, node=None):
        pods = self.core.list_namespaced_pod(NAMESPACE, label_selector=MANAGED).items
        return [p for p in pods if p.metadata.name.startswith(PLUGIN_DS) and not p.metadata.deletion_timestamp
                and (node is None or p.spec.node_name == node)]


def _watch_node(sandbox, node, predicate, what, timeout=90):
    """Watch one Node (a bounded watch, no fixed sleeps) until ``predicate(node)``; returns the seconds it took."""
    from kubernetes import watch  # pylint: disable=import-outside-toplevel
    started = time.monotonic()
    deadline = started + timeout
    current = sandbox.core.read_node(node)
    while not predicate(current):
        remaining = int(deadline - time.monotonic())
        assert remaining > 0, "node %s: %s not seen within %d s; allocatable %s" % (
            node, what, timeout, current.status.allocatable)
        stream = watch.Watch()
        for event in stream.stream(sandbox.core.list_node, field_selector="metadata.name=" + node,
                                   resource_version=current.metadata.resource_version, timeout_seconds=remaining):
            current = event["object"]
            if predicate(current):
                stream.stop()
                break
    return time.monotonic() - started


def _profile(node):
    """The GPU profile of one of this module's nodes (sandbox/profiles)."""
    [entry] = [n for n in FLEET if n["name"] == node]
    return json.loads((ROOT / "sandbox" / "profiles" / (entry["profile"] + ".json")).read_text(encoding="utf-8"))


def _cuda(profile):
    """The driver's CUDA version as the proof prints it: 12040 -> 12.4 (NVML's cudaDriverVersion encoding)."""
    version = profile["cuda_driver_version"]
    return "%d.%d" % (version // 1000, version % 1000 // 10)


def _gpus(node_obj):
    return int((node_obj.status.allocatable or {}).get(GPU, "0"))


@pytest.fixture(scope="module")
def e2e(tmp_path_factory):
    """A control plane with the two kubelet nodes, NVIDIA's runtime their containerd's default, and the device plugin
    deployed by the collection (no sharing); everything removed at the end."""
    _prerequisites()
    from sandbox.k8s import cluster, paths  # pylint: disable=import-outside-toplevel
    from sandbox.kubelet import cluster as kubelets  # pylint: disable=import-outside-toplevel
    timings = {}
    state_dir = (paths.TEST_STATE_DIR / "gpu-e2e").resolve()
    layout = cluster.Layout(state_dir / "k8s", state_dir / "kubeconfig")
    cluster.down(layout, quiet=True)
    fleet_file = tmp_path_factory.mktemp("e2e-fleet") / "fleet.yml"
    fleet_file.write_text(yaml.safe_dump({"nodes": FLEET}))
    play_dir = tmp_path_factory.mktemp("e2e-plays")
    started = time.monotonic()
    if _docker("ps", "-aq", "--filter", "label=%s=1" % OWNER_LABEL).stdout.strip():  # an interrupted run's
        nodes_play(state_dir, fleet_file, "absent", OWNER_LABEL, NODE_IMAGE_REPO)
    nodes_play(state_dir, fleet_file, "started", OWNER_LABEL, NODE_IMAGE_REPO)
    timings["node containers"] = round(time.monotonic() - started, 1)
    try:
        for name in (n["name"] for n in FLEET):
            enabled = _docker("exec", name, "systemctl", "is-enabled", "fake-nvml-driver-files.service",
                              check=False).stdout.strip()
            if enabled != "enabled":
                missing_setup("%s:gpu lacks fake-nvml-driver-files.service, which puts the fake NVML where NVIDIA's "
                              "runtime finds it (make node-images)" % NODE_IMAGE_REPO)
        started = time.monotonic()
        state = cluster.up(layout, timeout=180, fleet=False, kubelet_nodes=kubelets.select(FLEET, "all"))
        timings["control plane and kubelets"] = round(time.monotonic() - started, 1)
        sandbox = _Sandbox(layout, state)
        # the collection's runtime configuration, after the kubelet's (a cluster first, then the GPU operator's part):
        # the nvidia runtime copies runc's options, SystemdCgroup = true (sandbox/kubelet/node/containerd_cri.py) too
        started = time.monotonic()
        names = [n["name"] for n in FLEET]
        rc, tasks = _play(names, ROLE_PLAY.format(serve=ROOT / "sandbox" / "aptrepo" / "serve.yml"), play_dir)
        failed = {name: [(task, result.get("msg")) for task, result in done if result.get("failed")]
                  for name, done in tasks.items()}
        assert rc == 0, failed
        for name in names:
            NodeContainer(name, label=OWNER_LABEL).run(RUNTIME_DEBUG.format(log=RUNTIME_LOG))
            installed = _docker("exec", name, "dpkg-query", "-W", "-f", "${Version}", "nvidia-container-toolkit-base").stdout
            assert installed.startswith(_toolkit_version()), installed
        timings["container_toolkit role"] = round(time.monotonic() - started, 1)
        for name in (n["name"] for n in FLEET):
            sandbox.core.patch_node(name, {"metadata": {"labels": {NODE_LABEL: "true"}}})
            _watch_node(sandbox, name, lambda n: any(c.type == "Ready" and c.status == "True"
                                                     for c in n.status.conditions), "Ready after containerd's restart")
        sandbox.timings.update(timings)
        yield sandbox
    finally:
        print("gpu e2e timings (s): %s" % json.dumps(timings))
        cluster.down(layout, quiet=True)
        nodes_play(state_dir, fleet_file, "absent", OWNER_LABEL, NODE_IMAGE_REPO)


@pytest.fixture(scope="module")
def plugin(e2e):
    """The collection's device plugin, deployed once (envvar strategy, no sharing); the module waits for both nodes'
    kubelets to report one GPU."""
    result = e2e.deploy(expected={PASSING: {GPU: 1}, FAILING: {GPU: 1}})
    return result


def test_the_kubelet_advertises_what_the_plugin_registered_through_nvidia_runtime(e2e, plugin):
    from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import constants as nvidia  # pylint: disable=import-outside-toplevel
    from sandbox.k8s.devsim import watcher  # pylint: disable=import-outside-toplevel
    assert plugin["resources"] == {PASSING: {GPU: 1}, FAILING: {GPU: 1}}, plugin["resources"]
    ds = e2e.apps.read_namespaced_daemon_set(PLUGIN_DS, NAMESPACE)
    assert ds.spec.template.spec.containers[0].image == nvidia.default_image()  # the stand-in, tagged as NVIDIA's
    for name in (PASSING, FAILING):
        node = e2e.core.read_node(name)
        assert node.status.capacity.get(GPU) == "1" and node.status.allocatable.get(GPU) == "1", node.status.allocatable
        # a kubelet node: the simulator wrote its verdict only, and no status patch of this node is in its log
        note = (node.metadata.annotations or {}).get(watcher.STATE_ANNOTATION, "")
        assert note.startswith(watcher.KUBELET_NOTE.split("%s", maxsplit=1)[0]), note
        devsim_log = e2e.layout.log("devsim").read_text(encoding="utf-8", errors="replace")
        assert "node %s: patching status" % name not in devsim_log
        # the plugin's pod ran on the node (the kubelet serves its log) and registered with the kubelet
        [pod] = e2e.plugin_pods(name)
        log = e2e.core.read_namespaced_pod_log(pod.metadata.name, NAMESPACE)
        assert "kubegpu sandbox stand-in" in log and "Registered device plugin for 'nvidia.com/gpu' with Kubelet" in log, log
        # NVIDIA's runtime made the pod's containers in jit-cdi mode and injected the GPU and the fake NVML
        runtime_log = _docker("exec", name, "cat", RUNTIME_LOG).stdout
        assert "Auto-detected mode as 'jit-cdi'" in runtime_log, runtime_log[-3000:]
        assert "Selecting /dev/nvidia0 as /dev/nvidia0" in runtime_log, runtime_log[-3000:]
    # without the runtime there is no NVML in the plugin's container, and no GPU to register: NVIDIA's runtime is the
    # CRI's default on both nodes, with runc's systemd cgroup driver (what containerd itself says it runs with)
    for name in (PASSING, FAILING):
        dump = _docker("exec", name, "containerd", "config", "dump").stdout
        # containerd 1.6 prints double quotes, 2.x (a node with containerd: "2") single ones
        assert re.search(r'^\s*default_runtime_name = ["\']nvidia["\']$', dump, re.M), dump
        nvidia = dump[dump.index(".runtimes.nvidia.options]"):]
        assert re.search(r'^\s*BinaryName = ["\']/usr/bin/nvidia-container-runtime["\']$', nvidia, re.M), nvidia[:800]
        assert re.search(r'^\s*SystemdCgroup = true$', nvidia.split("[plugins.", 1)[0], re.M), nvidia[:800]


def test_deleting_the_plugin_pod_drops_allocatable_until_the_new_pod_registers(e2e, plugin):
    """The kubelet publishes its node status every nodeStatusUpdateFrequency (10 s by default), and the DaemonSet's new
    pod registers a few seconds after the old one went: a 0 in between is often never published (seen: allocatable
    stayed 1 throughout). So a NoSchedule taint of the test's own, which the collection's DaemonSet does not tolerate,
    holds the new pod back until the kubelet has reported 0; the taint goes, and the new pod brings the GPU back."""
    [old] = e2e.plugin_pods(PASSING)
    hold = {"key": HOLD_TAINT, "value": "true", "effect": "NoSchedule"}
    taints = [t.to_dict() for t in e2e.core.read_node(PASSING).spec.taints or []]
    e2e.core.patch_node(PASSING, {"spec": {"taints": taints + [hold]}})
    try:
        e2e.core.delete_namespaced_pod(old.metadata.name, NAMESPACE)
        gone = _watch_node(e2e, PASSING, lambda n: _gpus(n) == 0,
                           "allocatable %s 0 after the plugin pod's deletion" % GPU)
        assert e2e.plugin_pods(PASSING) == [], "the DaemonSet's new pod did not wait for the taint"
        assert int(e2e.core.read_node(PASSING).status.capacity.get(GPU, "0")) == 1  # the kubelet keeps the capacity a while
    finally:
        e2e.core.patch_node(PASSING, {"spec": {"taints": taints or None}})
    back = _watch_node(e2e, PASSING, lambda n: _gpus(n) == 1, "allocatable %s 1 from the new plugin pod" % GPU)
    [new] = e2e.plugin_pods(PASSING)
    assert new.metadata.uid != old.metadata.uid
    assert "Registered device plugin for 'nvidia.com/gpu' with Kubelet" in e2e.core.read_namespaced_pod_log(
        new.metadata.name, NAMESPACE)
    print("allocatable 0 %.1f s after the deletion, back to 1 %.1f s after the hold went" % (gone, back))
    assert e2e.allocatable(FAILING) == 1  # the other node's plugin did not move


def test_gpu_proof_passes_on_h100_and_fails_on_gtx1060_with_cudas_message(e2e, plugin):
    from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import constants as nvidia  # pylint: disable=import-outside-toplevel
    started = time.monotonic()
    rc, result = run_module("kubegpu.cluster.gpu_proof", dict(
        kubeconfig=e2e.kubeconfig, namespace="e2e-proof", nodes=[PASSING, FAILING], timeout=120, require_log=True))
    print("gpu_proof: %.1f s" % (time.monotonic() - started))
    assert rc != 0 and result["passed"] is False, json.dumps(result, indent=1)[-4000:]
    by_node = {r["node"]: r for r in result["results"]}
    passed, failed = by_node[PASSING], by_node[FAILING]
    assert passed["passed"] is True and passed["log_checked"] is True, passed
    assert passed["resource"] == GPU and passed["phase"] == "Succeeded", passed
    assert "Test PASSED" in passed["log_tail"] and "[Vector addition of 50000 elements]" in passed["log_tail"], passed
    # the GPU the plugin allocated (by UUID, envvar strategy) is the one NVIDIA's runtime put in, with its NVML
    h100 = _profile(PASSING)
    gpu = h100["devices"][0]
    assert "GPU 0: %s (%s) at /dev/nvidia0" % (gpu["name"], gpu["uuid"]) in passed["log_tail"], passed["log_tail"]
    assert "driver CUDA %s" % _cuda(h100) in passed["log_tail"], passed["log_tail"]
    assert failed["passed"] is False and failed["phase"] == "Failed", failed
    assert INSUFFICIENT in failed["detail"], failed["detail"]
    [hint] = [action for needle, action in nvidia.PROOF_HINTS if needle in INSUFFICIENT]
    assert hint in failed["detail"], failed["detail"]
    assert "driver CUDA %s" % _cuda(_profile(FAILING)) in failed.get("log_tail", ""), failed


# --- A pod that asks for nvidia.com/gpu, seen from inside its container (issue 24, section 7) ---------------------------

# Run in the stand-in plugin image (Debian's python3 and pynvml, no NVML of its own: sandbox/standins/README.md), so
# whatever NVML the container has, NVIDIA's runtime put there
GPU_POD_SCRIPT = r"""
import glob, json, os, pynvml
pynvml.nvmlInit()
gpus = []
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    uuid = pynvml.nvmlDeviceGetUUID(h)
    gpus.append({"uuid": uuid.decode() if isinstance(uuid, bytes) else uuid, "minor": pynvml.nvmlDeviceGetMinorNumber(h)})
version = pynvml.nvmlSystemGetDriverVersion()
with open("/proc/self/maps") as maps:
    libs = sorted({line.split()[-1] for line in maps if "libnvidia-ml" in line})
with open("/proc/self/mountinfo") as mountinfo:
    mounts = [line.split()[4] for line in mountinfo]
print(json.dumps({"env": {k: v for k, v in os.environ.items() if k.startswith("NVIDIA_")},
                  "devices": sorted(glob.glob("/dev/nvidia*")), "gpus": gpus, "libs": libs, "mounts": mounts,
                  "lib1": os.path.realpath("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"),
                  "driver": version.decode() if isinstance(version, bytes) else version}))
"""
CHECKPOINT = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"


def _wait_pod(sandbox, name, namespace, phases=("Succeeded", "Failed"), timeout=90):
    """Watch one pod until its phase is one of ``phases``; returns the pod."""
    return wait_for(sandbox.core.list_namespaced_pod, namespace, field_selector="metadata.name=" + name,
                    predicate=lambda pod: pod.status.phase in phases, timeout=timeout,
                    describe="pod %s in phase %s" % (name, "/".join(phases)))


def test_a_gpu_pod_gets_its_gpu_and_the_fake_nvml_through_nvidia_runtime(e2e, plugin):
    """A pod asking for one nvidia.com/gpu on the h100 node: the plugin answered the kubelet's Allocate with that GPU's
    UUID in NVIDIA_VISIBLE_DEVICES (the kubelet's own checkpoint of the answer); inside the container NVIDIA's runtime
    has turned it into CDI edits (NVIDIA_VISIBLE_DEVICES is then "void"), the device node of exactly that GPU is there,
    and the NVML the process loads is the node's fake NVML, bind-mounted by the runtime (the image has none),
    answering with that GPU's UUID and the node's driver version."""
    from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import constants as nvidia  # pylint: disable=import-outside-toplevel
    name = "gpu-pod"
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE},
           "spec": {"restartPolicy": "Never", "nodeSelector": {"kubernetes.io/hostname": PASSING},
                    "containers": [{"name": "cuda", "image": nvidia.default_image(), "imagePullPolicy": "IfNotPresent",
                                    "command": ["python3", "-c", GPU_POD_SCRIPT],
                                    "resources": {"limits": {GPU: "1"}}}]}}
    e2e.core.create_namespaced_pod(NAMESPACE, pod)
    try:
        done = _wait_pod(e2e, name, NAMESPACE)
        log = e2e.core.read_namespaced_pod_log(name, NAMESPACE)
        assert done.status.phase == "Succeeded", "%s\n%s" % (done.status, log)
        seen = json.loads(log.strip().splitlines()[-1])
        # what the kubelet allocated, and the plugin's answer, as the kubelet checkpointed them
        checkpoint = json.loads(_docker("exec", PASSING, "cat", CHECKPOINT).stdout)["Data"]
        [entry] = [e for e in checkpoint["PodDeviceEntries"] if e["PodUID"] == done.metadata.uid]
        assert entry["ResourceName"] == GPU and entry["ContainerName"] == "cuda", entry
        allocated = [d for ids in entry["DeviceIDs"].values() for d in ids]
        answer = base64.b64decode(entry["AllocResp"])
        gpu = _profile(PASSING)["devices"][0]
        assert allocated == [gpu["uuid"]], allocated  # deviceIDStrategy uuid
        assert b"NVIDIA_VISIBLE_DEVICES" in answer and gpu["uuid"].encode() in answer, answer
        # NVIDIA's runtime turned the plugin's answer into CDI edits of the container (jit-cdi) and, as the common edits
        # of every spec it generates, set NVIDIA_VISIBLE_DEVICES=void, so that nothing injects devices a second time
        # (nvidia-container-toolkit v1.20.0 pkg/nvcdi/wrapper.go GetCommonEdits): neither the answer nor the image's "all"
        assert seen["env"]["NVIDIA_VISIBLE_DEVICES"] == "void", seen["env"]
        minors = [d for d in seen["devices"] if re.fullmatch(r"/dev/nvidia[0-9]+", d)]
        assert minors == ["/dev/nvidia%d" % gpu["minor_number"]], seen["devices"]
        assert "/dev/nvidiactl" in seen["devices"], seen["devices"]
        assert seen["gpus"] == [{"uuid": gpu["uuid"], "minor": gpu["minor_number"]}], seen["gpus"]
        assert seen["driver"] == _profile(PASSING)["driver_version"], seen["driver"]
        # the library NVML came from is a file NVIDIA's runtime bind-mounted (a mount point in the container)
        assert len(seen["libs"]) == 1 and seen["libs"][0] == seen["lib1"], seen
        assert seen["lib1"] in seen["mounts"], (seen["lib1"], [m for m in seen["mounts"] if "nvidia" in m])
        assert seen["lib1"].endswith("libnvidia-ml.so." + seen["driver"]), seen["lib1"]
    finally:
        e2e.core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)


# --- DaemonSet changes the collection makes, as the kubelet runs them (issue 24, section 7) -----------------------------
# What NVIDIA's chart (k8s-device-plugin deployments/helm/nvidia-device-plugin) does for each:
# - config: the plugin's config.yaml from a ConfigMap (templates/configmap.yml, CONFIG_FILE); the collection writes its
#   flags (deviceListStrategy, deviceIDStrategy) there and rolls the pods by a hash in the pod template
#   (templates/_helpers.tpl podAnnotations "checksum/config");
# - security context: templates/_helpers.tpl "nvidia-device-plugin.securityContext": capabilities add SYS_ADMIN when
#   "requiresCapSysAdmin" (a MIG strategy other than none, or volume-mounts among the device list strategies), else
#   allowPrivilegeEscalation false and every capability dropped;
# - host paths: templates/daemonset-device-plugin.yml mounts the driver root (nvidiaDriverRoot, hostPath type
#   Directory) read-only at /driver-root and the host's /var/run/cdi (DirectoryOrCreate) at /var/run/cdi;
# - placement: values.yaml nodeSelector ({} by default) and affinity (nvidia.com/gpu.present In true, or NFD's
#   pci-10de label); the collection selects with nodeSelector (node_selector), and the chart's affinity is its
#   config-label affinity;
# - tolerations: values.yaml, CriticalAddonsOnly Exists and nvidia.com/gpu Exists NoSchedule (the collection's
#   default, DEFAULT_TOLERATIONS); the option replaces them.
PLUGIN_CTR = "nvidia-device-plugin-ctr"
HERE_LABEL = "kubegpu.e2e/plugin-here"
DEDICATED_TAINT = "kubegpu.e2e/dedicated"


def _plugin_container(node, pod):
    """The OCI spec containerd holds for the plugin container of ``pod`` (read in the node with ``ctr``), and its id."""
    [status] = [s for s in pod.status.container_statuses or [] if s.name == PLUGIN_CTR]
    assert status.container_id and status.state.running, status
    container_id = status.container_id.split("://", 1)[1]
    info = json.loads(_docker("exec", node, "ctr", "-n", "k8s.io", "containers", "info", container_id).stdout)
    return info["Spec"], container_id


def _mounts(spec):
    return {m["destination"]: m for m in spec.get("mounts") or []}


def _kubelet_pods(sandbox, node):
    """The pods the node's kubelet itself runs (its /pods through the API server's node proxy), name to phase."""
    raw = sandbox.core.connect_get_node_proxy_with_path(node, "pods", _preload_content=False)
    body = raw.data if hasattr(raw, "data") else raw  # the HTTP response (its body as bytes), or the text
    return {p["metadata"]["name"]: p.get("status", {}).get("phase") for p in json.loads(body)["items"] or []}  # null when none


def _running_plugin_containers(node):
    """Plugin containers running in the node's containerd (what runc runs, whatever the API server says)."""
    done = _docker("exec", node, "ctr", "-n", "k8s.io", "tasks", "list")
    running = {line.split()[0] for line in done.stdout.splitlines()[1:] if line.split()[-1:] == ["RUNNING"]}
    listed = _docker("exec", node, "ctr", "-n", "k8s.io", "containers", "list", "-q",
                     "labels.\"io.kubernetes.container.name\"==" + PLUGIN_CTR).stdout.split()
    return sorted(running.intersection(listed))


def _wait(what, predicate, timeout=60):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "%s not seen within %d s" % (what, timeout)
        time.sleep(1)


def test_config_security_context_and_host_paths_the_collection_changes_reach_the_kubelet(e2e, plugin):
    """device_plugin_deploy with the device list strategies volume-mounts and cdi-annotations and the index ID
    strategy: the config changes (a new hash rolls the pods), the chart's security context for volume-mounts
    (SYS_ADMIN in place of the hardened one) and its CDI host paths (the driver root at /driver-root, read-only, and
    /var/run/cdi). On each node: a new pod that the kubelet started with that spec (containerd's OCI spec of its
    container: the capability, no no_new_privs, the binds), and the plugin in it read the new config: it wrote its CDI
    spec, devices named by index, through the host path into the node's /var/run/cdi."""
    before = {}
    for name in (PASSING, FAILING):
        [pod] = e2e.plugin_pods(name)
        spec = _plugin_container(name, pod)[0]
        before[name] = pod.metadata.uid
        # the hardened context the collection gives by default: no capability at all, no privilege escalation
        assert spec["process"]["capabilities"].get("effective") in (None, []), spec["process"]["capabilities"]
        assert spec["process"].get("noNewPrivileges") is True, spec["process"]
        assert "/driver-root" not in _mounts(spec) and "/var/run/cdi" not in _mounts(spec), sorted(_mounts(spec))
    changed = e2e.deploy(device_list_strategy=["volume-mounts", "cdi-annotations"], device_id_strategy="index",
                         expected={PASSING: {GPU: 1}, FAILING: {GPU: 1}})
    assert changed["changed"] is True and changed["config_hash"] != plugin["config_hash"], changed
    for name in (PASSING, FAILING):
        [pod] = e2e.plugin_pods(name)
        assert pod.metadata.uid != before[name], "%s: the plugin pod was not restarted" % name
        assert pod.metadata.annotations.get("kubegpu.cluster/config-hash") == changed["config_hash"]
        assert pod.metadata.name in _kubelet_pods(e2e, name)
        spec, container_id = _plugin_container(name, pod)
        assert "CAP_SYS_ADMIN" in spec["process"]["capabilities"].get("effective", []), spec["process"]["capabilities"]
        assert not spec["process"].get("noNewPrivileges"), spec["process"]
        mounts = _mounts(spec)
        assert mounts.get("/driver-root", {}).get("source") == "/", sorted(mounts)  # nvidia_driver_root's default
        assert "ro" in mounts["/driver-root"].get("options", []), mounts["/driver-root"]
        # containerd resolves the host path's symbolic links (the node's /var/run is /run)
        assert mounts.get("/var/run/cdi", {}).get("source") in ("/var/run/cdi", "/run/cdi"), sorted(mounts)
        assert "rw" in mounts["/var/run/cdi"].get("options", []), mounts["/var/run/cdi"]
        # what the plugin wrote in its container's /var/run/cdi is in the node's: the bind is real, and the spec's
        # device names are the config's index strategy (the ConfigMap the kubelet mounted)
        written = json.loads(_docker("exec", name, "cat", "/var/run/cdi/k8s.device-plugin.nvidia.com-gpu.json").stdout)
        assert written["kind"] == "k8s.device-plugin.nvidia.com/gpu", written.get("kind")
        names = [d["name"] for d in written["devices"]]
        assert [n for n in names if n != "all"] == ["0"], names  # nvidia-ctk adds "all"; uuid would name GPU-...
        # the deploy's wait ends on allocatable, which the old plugin's registration still holds at 1: the new one
        # registers a moment later (seen: its log read at once ended at "Starting to serve")
        _wait("%s: the new plugin's registration in its log" % name,
              lambda: "Registered device plugin for 'nvidia.com/gpu' with Kubelet" in e2e.core.read_namespaced_pod_log(
                  pod.metadata.name, NAMESPACE), timeout=30)
        print("%s: plugin container %s, mounts %s" % (name, container_id[:12], sorted(mounts)))


def test_a_node_selector_and_a_toleration_the_collection_sets_place_the_plugin_where_the_kubelet_runs_it(e2e, plugin):
    """A NoExecute taint of the test's own on the h100 node takes its plugin off (the DaemonSet's pods do not tolerate
    it); device_plugin_deploy then adds a toleration of it and narrows the node selector to a label only the h100 node
    has. The h100 node's kubelet runs the plugin again, under the taint, and registers its GPU; the gtx1060 node's
    kubelet stops its plugin (no plugin container runs in its containerd) and reports allocatable 0."""
    from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import constants as nvidia  # pylint: disable=import-outside-toplevel
    dedicated = {"key": DEDICATED_TAINT, "value": "gpu", "effect": "NoExecute"}
    taints = [t.to_dict() for t in e2e.core.read_node(PASSING).spec.taints or []]
    e2e.core.patch_node(PASSING, {"metadata": {"labels": {HERE_LABEL: "true"}}, "spec": {"taints": taints + [dedicated]}})
    try:
        _wait("%s: the plugin pod evicted by the NoExecute taint" % PASSING,
              lambda: not e2e.plugin_pods(PASSING) and not _running_plugin_containers(PASSING))
        tolerations = list(nvidia.DEFAULT_TOLERATIONS) + [{"key": DEDICATED_TAINT, "operator": "Exists",
                                                           "effect": "NoExecute"}]
        placed = e2e.deploy(node_selector={NODE_LABEL: "true", HERE_LABEL: "true"}, tolerations=tolerations,
                            expected={PASSING: {GPU: 1}})
        assert placed["changed"] is True, placed
        # the h100 node: a plugin pod runs under the taint (the toleration), in its containerd and its kubelet
        assert len(_running_plugin_containers(PASSING)) == 1, "%s: no plugin container runs" % PASSING
        running = [n for n, phase in _kubelet_pods(e2e, PASSING).items() if n.startswith(PLUGIN_DS) and phase == "Running"]
        assert running == [p.metadata.name for p in e2e.plugin_pods(PASSING)], running
        assert e2e.allocatable(PASSING) == 1
        # the gtx1060 node: the selector took its plugin away, from the API server, its containerd and its kubelet
        # (the kubelet forgets a pod after the API server deleted it: it listed it, Succeeded, once the rest had gone)
        _wait("%s: no plugin pod in the API server, no plugin container, no plugin pod in its kubelet" % FAILING,
              lambda: not e2e.plugin_pods(FAILING) and not _running_plugin_containers(FAILING)
              and not [p for p in _kubelet_pods(e2e, FAILING) if p.startswith(PLUGIN_DS)])
        _watch_node(e2e, FAILING, lambda n: _gpus(n) == 0, "allocatable %s 0 once the selector left it out" % GPU)
        ds = e2e.apps.read_namespaced_daemon_set(PLUGIN_DS, NAMESPACE)
        assert ds.status.desired_number_scheduled == 1, ds.status
    finally:
        e2e.core.patch_node(PASSING, {"metadata": {"labels": {HERE_LABEL: None}}, "spec": {"taints": taints or None}})


def test_a_time_slicing_config_the_collection_rolls_out_is_what_the_kubelet_advertises(e2e, plugin):
    """Last: it leaves the plugin shared (the module's fixture removes everything afterwards)."""
    shared = e2e.deploy(sharing={"strategy": "time-slicing", "replicas": 2},
                        expected={PASSING: {GPU: 2}, FAILING: {GPU: 2}})
    assert shared["changed"] is True and shared["config_hash"] != plugin["config_hash"]
    assert shared["resources"] == {PASSING: {GPU: 2}, FAILING: {GPU: 2}}, shared["resources"]
    for name in (PASSING, FAILING):
        assert e2e.allocatable(name) == 2
        [pod] = e2e.plugin_pods(name)
        assert pod.metadata.annotations.get("kubegpu.cluster/config-hash") == shared["config_hash"]
    print("device_plugin_deploy runs (s): %s; set-up (s): %s" % (
        e2e.timings.get("device_plugin_deploy"), {k: v for k, v in e2e.timings.items() if k != "device_plugin_deploy"}))
