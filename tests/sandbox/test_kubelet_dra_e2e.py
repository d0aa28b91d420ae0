# SPDX-License-Identifier: GPL-3.0-or-later
"""A DRA GPU pod on a real kubelet node (issue 27, the sandbox side).

One gpu node container of this module's own (``drae2e-h100``, profile h100: one H100, driver 550.127.05, CUDA 12.4;
label ``kubegpu.drae2e``, both moved by KUBEGPU_DRA_E2E_PREFIX / KUBEGPU_DRA_E2E_OWNER_LABEL) is a kubelet node
running **containerd 2.x** (fleet key ``containerd: "2"``, sandbox/kubelet/README.md: the kubelet hands DRA's CDI
devices to the runtime only through the CRI's CDIDevices, which Debian's containerd 1.6 ignores). The collection's
``container_toolkit`` role makes NVIDIA's runtime its default (as test_kubelet_gpu_e2e.py does). Then, with only real
Kubernetes components besides the stand-in plugin (sandbox/draplugin):

1. a DaemonSet of the stand-in of NVIDIA's DRA kubelet plugin, in the chart's shape (privileged ``gpus`` container,
   the plugins / plugins_registry / cdi / driver-root hostPaths, node selector nvidia.com/gpu.deploy.dra-driver=true;
   the collection's own rendering will replace it) and NVIDIA's DeviceClass ``gpu.nvidia.com``;
2. the node's ResourceSlices list its GPU under gpu.nvidia.com with NVIDIA's name and attributes, as the fake NVML
   reports them (the node's profile);
3. a pod with a ResourceClaimTemplate of that DeviceClass: the real kube-scheduler allocates the claim on the node,
   the kubelet asks the plugin to prepare it, containerd 2.x injects the claim's CDI device, the container has
   /dev/nvidia0 and the proof stand-in (sandbox/proof) passes in it; the claim's CDI spec is gone after the pod;
4. KEP-5004: with ``extendedResourceName: nvidia.com/gpu`` on the DeviceClass, an unmodified pod asking
   ``nvidia.com/gpu: 1`` is scheduled on the node through DRA (the node has no nvidia.com/gpu allocatable).

The pods set NVIDIA_VISIBLE_DEVICES=void so that NVIDIA's runtime (containerd's default here) adds nothing of its own:
whatever GPU a container has then came from the claim's CDI spec.
"""

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

import test_kubelet_gpu_e2e as gpu_e2e
from k8s_helpers import wait_for
from node_container import docker_checked as _docker, nodes_play
from setup_steps import missing_setup

ROOT = Path(__file__).resolve().parents[2]
OWNER_LABEL = os.environ.get("KUBEGPU_DRA_E2E_OWNER_LABEL", "kubegpu.drae2e")
PREFIX = os.environ.get("KUBEGPU_DRA_E2E_PREFIX", "drae2e-")
NODE_IMAGE_REPO = os.environ.get("KUBEGPU_E2E_NODE_IMAGE", "kubegpu/node")
NODE = PREFIX + "h100"
PROFILE = "h100"
# what the test leaves out to see a check fail (KUBEGPU_DRA_E2E_BREAK=<what>; sandbox/draplugin/README.md)
BREAK = os.environ.get("KUBEGPU_DRA_E2E_BREAK", "")
FLEET = [{"name": NODE, "variant": "gpu", "profile": "t4" if BREAK == "profile" else PROFILE}]
if BREAK != "containerd16":
    FLEET[0]["containerd"] = "2"
NAMESPACE = "dra-e2e"
PLUGIN_DS = "dra-driver-nvidia-gpu-kubelet-plugin"
DRA_LOG_LINE = "kubegpu sandbox stand-in for NVIDIA's DRA GPU kubelet plugin"


def _nvidia():
    from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import constants  # pylint: disable=import-outside-toplevel
    return constants


def _kubectl(sandbox, *args, stdin=None, check=True):
    done = subprocess.run(["kubectl", "--kubeconfig", sandbox.kubeconfig, *args], input=stdin, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0 or not check, "kubectl %s: %s%s" % (" ".join(args), done.stdout, done.stderr)
    return done


def _apply(sandbox, objects):
    return _kubectl(sandbox, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(objects))


def plugin_daemonset():
    """The chart's kubelet plugin DaemonSet (kubernetes-sigs/dra-driver-nvidia-gpu deployments/helm/
    dra-driver-nvidia-gpu/templates/kubeletplugin.yaml), reduced to what the stand-in needs: the gpus container with
    its command, environment and mounts, the init container, the node selector NVIDIA's GPU Operator gates it on."""
    nvidia = _nvidia()
    image = "%s:%s" % (nvidia.DRA_DRIVER_IMAGE_REPOSITORY, nvidia.DRA_DRIVER_VERSION)
    registrar, plugins = "/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins"
    env = [{"name": "LOG_VERBOSITY", "value": "4"}, {"name": "NVIDIA_DRIVER_ROOT", "value": "/"},
           {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}, {"name": "CDI_ROOT", "value": "/var/run/cdi"},
           {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
           {"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
           {"name": "KUBELET_REGISTRAR_DIRECTORY_PATH", "value": registrar},
           {"name": "KUBELET_PLUGINS_DIRECTORY_PATH", "value": plugins},
           {"name": "HEALTHCHECK_PORT", "value": "51516"}]
    mounts = [{"name": "plugins-registry", "mountPath": registrar},
              {"name": "plugins", "mountPath": plugins, "mountPropagation": "Bidirectional"},
              {"name": "cdi", "mountPath": "/var/run/cdi"},
              {"name": "driver-root", "mountPath": "/driver-root", "mountPropagation": "HostToContainer"}]
    if BREAK == "cdi-mount":
        mounts = [m for m in mounts if m["name"] != "cdi"]
    volumes = [{"name": "plugins-registry", "hostPath": {"path": registrar}},
               {"name": "plugins", "hostPath": {"path": plugins}},
               {"name": "cdi", "hostPath": {"path": "/var/run/cdi"}},
               {"name": "driver-root-parent", "hostPath": {"path": "/", "type": "DirectoryOrCreate"}},
               {"name": "driver-root", "hostPath": {"path": "/", "type": "DirectoryOrCreate"}}]
    labels = {"app.kubernetes.io/name": "dra-driver-nvidia-gpu", "app.kubernetes.io/component": "kubelet-plugin"}
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": PLUGIN_DS, "namespace": NAMESPACE},
        "spec": {"selector": {"matchLabels": labels},
                 "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}},
                 "template": {"metadata": {"labels": labels}, "spec": {
                     "nodeSelector": {nvidia.LABEL_DEPLOY_DRA_DRIVER: "true"},
                     "priorityClassName": "system-node-critical",
                     "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                     "initContainers": [{
                         "name": "init-container", "image": image, "imagePullPolicy": "IfNotPresent",
                         "securityContext": {"privileged": True},
                         "command": ["bash", "/usr/bin/kubelet-plugin-prestart.sh"],
                         "env": [{"name": "NVIDIA_DRIVER_ROOT", "value": "/"},
                                 {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}],
                         "volumeMounts": [{"name": "driver-root-parent", "mountPath": "/driver-root-parent",
                                           "readOnly": True}]}],
                     "containers": [{
                         "name": "gpus", "image": image, "imagePullPolicy": "IfNotPresent",
                         "securityContext": {"privileged": True},
                         "command": ["bash", "-c"], "args": ["gpu-kubelet-plugin -v $(LOG_VERBOSITY)"],
                         "startupProbe": {"grpc": {"port": 51516, "service": "liveness"}, "failureThreshold": 120,
                                          "periodSeconds": 1},
                         "env": env, "volumeMounts": mounts}],
                     "volumes": volumes}}}}


def device_class(extended=False):
    """The chart's DeviceClass gpu.nvidia.com (templates/deviceclass-gpu.yaml), resource.k8s.io/v1; ``extended``: with
    KEP-5004's extendedResourceName nvidia.com/gpu."""
    nvidia = _nvidia()
    spec = {"selectors": [{"cel": {"expression": "device.driver == '%s' && device.attributes['%s'].type == '%s'" % (
        nvidia.DRA_DRIVER_NAME, nvidia.DRA_DRIVER_NAME, nvidia.DRA_DEVICE_TYPE_GPU)}}]}
    if extended:
        spec["extendedResourceName"] = "nvidia.com/gpu"
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": nvidia.DRA_DEVICE_CLASS_GPU}, "spec": spec}


# The proof image has no shell: the claim pod runs the proof (vectorAdd stand-in) in one container and lists the
# device nodes in a second one (the plugin image has bash) sharing the claim, which then waits, so that the claim (the
# resourceclaim controller deletes a template's claim once its pod is done) and its CDI spec can be read meanwhile
CHECK = "ls /dev/nvidia*; test -e /dev/nvidia0 && echo HAS-NVIDIA0; exec sleep 300"


def claim_pod(name, extended=False):
    nvidia = _nvidia()
    plugin_image = "%s:%s" % (nvidia.DRA_DRIVER_IMAGE_REPOSITORY, nvidia.DRA_DRIVER_VERSION)
    env = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]
    containers = [{"name": "proof", "image": nvidia.PROOF_IMAGE, "imagePullPolicy": "IfNotPresent", "env": env},
                  {"name": "devices", "image": plugin_image, "imagePullPolicy": "IfNotPresent", "env": env,
                   "command": ["bash", "-c", CHECK]}]
    spec = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 2, "containers": containers,
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}
    if extended:  # the proof alone, as an unmodified pod of the device plugin's world asks
        containers[:] = containers[:1]
        containers[0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    else:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}]
        for c in containers:
            c["resources"] = {"claims": [{"name": "gpu"}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec}


def claim_template():
    nvidia = _nvidia()
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "single-gpu", "namespace": NAMESPACE},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": nvidia.DRA_DEVICE_CLASS_GPU}}]}}}}


class _Sandbox:
    def __init__(self, layout):
        from kubernetes import client, config  # pylint: disable=import-outside-toplevel
        self.layout = layout
        self.kubeconfig = str(layout.kubeconfig)
        self.api = config.new_client_from_config(config_file=self.kubeconfig)
        self.core = client.CoreV1Api(self.api)
        self.timings = {}

    def resource(self):
        from kubernetes import client  # pylint: disable=import-outside-toplevel
        return client.CustomObjectsApi(self.api)

    def slices(self):
        nvidia = _nvidia()
        got = self.resource().list_cluster_custom_object("resource.k8s.io", "v1", "resourceslices",
                                                         field_selector="spec.nodeName=" + NODE)
        return [s for s in got["items"] if s["spec"]["driver"] == nvidia.DRA_DRIVER_NAME]

    def plugin_log(self):
        """The gpus container's log of the plugin pod on the node (or why there is none)."""
        pods = [p for p in self.core.list_namespaced_pod(NAMESPACE).items if p.metadata.name.startswith(PLUGIN_DS)]
        try:
            return "\n".join(self.core.read_namespaced_pod_log(p.metadata.name, NAMESPACE, container="gpus")[-4000:]
                             for p in pods) or "no plugin pod"
        except Exception as exc:  # pylint: disable=broad-except
            return "no log: %s" % exc

    def wait_pod(self, name, phases=("Succeeded", "Failed"), timeout=120):
        return wait_for(self.core.list_namespaced_pod, NAMESPACE, field_selector="metadata.name=" + name,
                        predicate=lambda pod: pod.status.phase in phases, timeout=timeout,
                        describe="pod %s in phase %s" % (name, "/".join(phases)))


def _prerequisites():
    gpu_e2e._prerequisites()  # pylint: disable=protected-access
    from sandbox.kubelet import config  # pylint: disable=import-outside-toplevel
    absent = [str(p) for p in config.containerd2_binaries().values() if not p.exists()]
    if absent:
        missing_setup("no containerd 2.x for the node: %s (make kubelet-containerd2)" % ", ".join(absent))
    image_dir = config.image_dir()
    if not image_dir or not (image_dir / "draplugin.tar").exists():
        missing_setup("no draplugin.tar in $KUBELET_IMAGE_DIR (%s; make draplugin-image)" % image_dir)


@pytest.fixture(scope="module")
def dra(tmp_path_factory):
    """The control plane, the containerd 2.x kubelet node with NVIDIA's runtime, the stand-in plugin's DaemonSet and
    the DeviceClass; everything removed at the end."""
    _prerequisites()
    from sandbox.k8s import cluster, paths  # pylint: disable=import-outside-toplevel
    from sandbox.kubelet import cluster as kubelets  # pylint: disable=import-outside-toplevel
    timings = {}
    state_dir = (paths.TEST_STATE_DIR / "dra-e2e").resolve()
    layout = cluster.Layout(state_dir / "k8s", state_dir / "kubeconfig")
    cluster.down(layout, quiet=True)
    fleet_file = tmp_path_factory.mktemp("dra-fleet") / "fleet.yml"
    fleet_file.write_text(yaml.safe_dump({"nodes": FLEET}))
    started = time.monotonic()
    if _docker("ps", "-aq", "--filter", "label=%s=1" % OWNER_LABEL).stdout.strip():
        nodes_play(state_dir, fleet_file, "absent", OWNER_LABEL, NODE_IMAGE_REPO)
    nodes_play(state_dir, fleet_file, "started", OWNER_LABEL, NODE_IMAGE_REPO)
    timings["node container"] = round(time.monotonic() - started, 1)
    try:
        started = time.monotonic()
        cluster.up(layout, timeout=180, fleet=False, kubelet_nodes=kubelets.select(FLEET, "all"))
        timings["control plane and kubelet"] = round(time.monotonic() - started, 1)
        sandbox = _Sandbox(layout)
        started = time.monotonic()
        rc, tasks = gpu_e2e._play([NODE], gpu_e2e.ROLE_PLAY.format(  # pylint: disable=protected-access
            serve=ROOT / "sandbox" / "aptrepo" / "serve.yml"), tmp_path_factory.mktemp("dra-plays"))
        failed = [(task, result.get("msg")) for task, result in tasks[NODE] if result.get("failed")]
        assert rc == 0, failed
        timings["container_toolkit role"] = round(time.monotonic() - started, 1)
        wait_for(sandbox.core.list_node, field_selector="metadata.name=" + NODE, timeout=90,
                 predicate=lambda n: any(c.type == "Ready" and c.status == "True" for c in n.status.conditions),
                 describe="node %s Ready after containerd's restart" % NODE)
        nvidia = _nvidia()
        started = time.monotonic()
        _apply(sandbox, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
                         plugin_daemonset(), device_class(extended=BREAK != "extended-resource-name"),
                         claim_template()])
        if BREAK != "deploy-label":
            sandbox.core.patch_node(NODE, {"metadata": {"labels": {nvidia.LABEL_DEPLOY_DRA_DRIVER: "true"}}})
        try:
            wait_for(sandbox.core.list_namespaced_pod, NAMESPACE, timeout=120,
                     label_selector="app.kubernetes.io/component=kubelet-plugin",
                     describe="the DRA kubelet plugin pod ready on %s" % NODE,
                     predicate=lambda pod: pod.spec.node_name == NODE and any(
                         c.type == "Ready" and c.status == "True" for c in pod.status.conditions or []))
        except AssertionError as exc:
            raise AssertionError("%s\nthe plugin's log:\n%s" % (str(exc)[-1500:], sandbox.plugin_log())) from exc
        timings["plugin ready"] = round(time.monotonic() - started, 1)
        sandbox.timings = timings
        yield sandbox
    finally:
        print("dra e2e timings (s): %s" % json.dumps(timings))
        cluster.down(layout, quiet=True)
        nodes_play(state_dir, fleet_file, "absent", OWNER_LABEL, NODE_IMAGE_REPO)


def test_the_node_runs_containerd_2_with_cdi_and_an_ordinary_pod(dra):
    from sandbox.kubelet import config  # pylint: disable=import-outside-toplevel
    node = dra.core.read_node(NODE)
    # "containerd://2.4.2+unknown": go install stamps no VCS revision
    assert node.status.node_info.container_runtime_version.startswith("containerd://" + config.containerd2_version()), \
        node.status.node_info
    head = _docker("exec", NODE, "head", "-n", "5", "/etc/containerd/config.toml").stdout
    assert "version = 3" in head, head
    # what containerd itself runs with (2.4 prints its config as version 4, single-quoted)
    dump = _docker("exec", NODE, "containerd", "config", "dump").stdout.replace("'", '"')
    assert 'cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]' in dump, dump[:3000]
    assert 'default_runtime_name = "nvidia"' in dump  # the collection's container_toolkit role ran on a v3 file
    # an ordinary pod: the plugin's own pod runs (the fixture waited for it Ready); and its log says what it is
    [pod] = [p for p in dra.core.list_namespaced_pod(NAMESPACE).items if p.metadata.name.startswith(PLUGIN_DS)]
    log = dra.core.read_namespaced_pod_log(pod.metadata.name, NAMESPACE, container="gpus")
    assert DRA_LOG_LINE in log, log


def test_resourceslices_list_the_gpus_with_nvidias_names_and_attributes(dra):
    nvidia = _nvidia()
    profile = json.loads((ROOT / "sandbox" / "profiles" / (PROFILE + ".json")).read_text(encoding="utf-8"))
    from kubernetes import client  # pylint: disable=import-outside-toplevel
    # the plugin publishes once started: watched (bounded) until a slice of NVIDIA's driver for the node is there
    wait_for(client.ResourceV1Api(dra.api).list_resource_slice, field_selector="spec.nodeName=" + NODE, timeout=60,
             predicate=lambda found: found.spec.driver == nvidia.DRA_DRIVER_NAME,
             describe="a ResourceSlice of %s for %s" % (nvidia.DRA_DRIVER_NAME, NODE))
    slices = dra.slices()
    assert len(slices) == 1, slices
    spec = slices[0]["spec"]
    assert spec["pool"]["name"] == NODE and spec["nodeName"] == NODE, spec
    devices = {d["name"]: d for d in spec["devices"]}
    want = {}
    for gpu in profile["devices"]:
        cuda = profile["cuda_driver_version"]
        major, minor_cc = gpu["compute_capability"].split(".")
        bus = gpu["pci_bus_id"].lower()
        want[nvidia.DRA_GPU_DEVICE_NAME % gpu["minor_number"]] = {
            "type": {"string": nvidia.DRA_DEVICE_TYPE_GPU}, "uuid": {"string": gpu["uuid"]},
            "productName": {"string": gpu["name"]}, "brand": {"string": gpu["brand"].capitalize()},
            "architecture": {"string": gpu["architecture"].capitalize()},
            "cudaComputeCapability": {"version": "%s.%s.0" % (major, minor_cc)},
            "driverVersion": {"version": ".".join(str(int(p)) for p in profile["driver_version"].split("."))},
            "cudaDriverVersion": {"version": "%d.%d.0" % (cuda // 1000, cuda % 1000 // 10)},
            "resource.kubernetes.io/pciBusID": {"string": bus[4:] if bus.startswith("0000") and len(bus) > 12 else bus},
        }
    assert sorted(devices) == sorted(want), (sorted(devices), sorted(want))
    for name, attrs in want.items():
        got = devices[name]["attributes"]
        for key, value in attrs.items():
            assert got.get(key) == value, (name, key, got.get(key), value, got)
        mib = [g for g in profile["devices"] if nvidia.DRA_GPU_DEVICE_NAME % g["minor_number"] == name][0]["memory_total_mib"]
        assert devices[name]["capacity"]["memory"]["value"] == "%dMi" % mib, devices[name]["capacity"]


def _proof_done(pod):
    """The proof container has ended and the devices container (when there is one) runs."""
    states = {c.name: c.state for c in pod.status.container_statuses or []}
    proof = states.get("proof")
    return pod.status.phase in ("Succeeded", "Failed") or (
        proof is not None and proof.terminated is not None and ("devices" not in states or states["devices"].running))


def test_a_claim_is_allocated_by_the_scheduler_and_its_pod_gets_the_gpu(dra):
    nvidia = _nvidia()
    name = "claim-pod"
    dra.core.create_namespaced_pod(NAMESPACE, claim_pod(name))
    try:
        pod = wait_for(dra.core.list_namespaced_pod, NAMESPACE, field_selector="metadata.name=" + name, timeout=120,
                       predicate=_proof_done, describe="pod %s: the proof done" % name)
        logs = {c: dra.core.read_namespaced_pod_log(name, NAMESPACE, container=c) for c in ("proof", "devices")}
        assert pod.spec.node_name == NODE
        proof = [c for c in pod.status.container_statuses if c.name == "proof"][0].state.terminated
        assert proof.exit_code == 0, (proof, logs, dra.plugin_log())
        # the claim the template made, allocated by the real scheduler to the node's gpu-0 of NVIDIA's driver
        [status] = pod.status.resource_claim_statuses
        claim = dra.resource().get_namespaced_custom_object("resource.k8s.io", "v1", NAMESPACE, "resourceclaims",
                                                            status.resource_claim_name)
        [result] = claim["status"]["allocation"]["devices"]["results"]
        assert (result["driver"], result["pool"], result["device"]) == (
            nvidia.DRA_DRIVER_NAME, NODE, nvidia.DRA_GPU_DEVICE_NAME % 0), result
        assert "HAS-NVIDIA0" in logs["devices"], logs["devices"]
        assert "Test PASSED" in logs["proof"], logs["proof"]
        assert "at /dev/nvidia0" in logs["proof"], logs["proof"]
        # the claim's CDI spec, written by the plugin on the node's /var/run/cdi: one device, NVIDIA's name for it
        uid = claim["metadata"]["uid"]
        listed = _docker("exec", NODE, "ls", "/var/run/cdi").stdout.split()
        [spec_file] = [f for f in listed if uid in f]
        spec = yaml.safe_load(_docker("exec", NODE, "cat", "/var/run/cdi/" + spec_file).stdout)
        assert spec["kind"] == nvidia.DRA_CDI_KIND, spec["kind"]
        assert [d["name"] for d in spec["devices"]] == ["%s-%s" % (uid, nvidia.DRA_GPU_DEVICE_NAME % 0)], spec["devices"]
        nodes = [n["path"] for n in spec["devices"][0]["containerEdits"].get("deviceNodes", [])]
        assert "/dev/nvidia0" in nodes, nodes
        assert "prepared claim %s/%s" % (NAMESPACE, status.resource_claim_name) in dra.plugin_log()
    finally:
        dra.core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)
    # after the pod the kubelet unprepares the claim: the plugin removes its spec file
    deadline = time.monotonic() + 60
    while spec_file in _docker("exec", NODE, "ls", "/var/run/cdi").stdout.split():
        assert time.monotonic() < deadline, "claim %s's CDI spec %s still there 60 s after its pod" % (uid, spec_file)
        time.sleep(1)


def test_an_unmodified_nvidia_gpu_pod_is_scheduled_through_dra(dra):
    node = dra.core.read_node(NODE)
    assert int((node.status.allocatable or {}).get("nvidia.com/gpu", "0")) == 0, node.status.allocatable
    name = "extended-pod"
    dra.core.create_namespaced_pod(NAMESPACE, claim_pod(name, extended=True))
    try:
        done = dra.wait_pod(name, timeout=120)
        logs = {"proof": dra.core.read_namespaced_pod_log(name, NAMESPACE, container="proof")}
        assert done.status.phase == "Succeeded", (done.status, logs)
        assert done.spec.node_name == NODE
        # the scheduler made a claim for the extended resource (status.extendedResourceClaimStatus, KEP-5004)
        extended = done.status.extended_resource_claim_status
        assert extended is not None and extended.resource_claim_name, done.status
        assert "Test PASSED" in logs["proof"], logs
    finally:
        dra.core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)


def _node_state(dra):
    """``(nvidia.com/gpu allocatable, capacity, the device names of the node's slices)``."""
    node = dra.core.read_node(NODE)
    allocatable = int((node.status.allocatable or {}).get("nvidia.com/gpu", "0"))
    capacity = int((node.status.capacity or {}).get("nvidia.com/gpu", "0"))
    return allocatable, capacity, sorted(d["name"] for s in dra.slices() for d in s["spec"]["devices"])


def test_the_node_moves_to_the_device_plugin_and_back_to_dra_through_the_collection(dra):
    """dra_migration on a real kubelet: the way back (the DRA kubelet plugin's pod leaves, the kubelet wipes its slices,
    the collection's device plugin registers nvidia.com/gpu), then to DRA again (the device plugin's pod leaves and the
    kubelet drops its allocatable to 0 at once, capacity later; the slices come back), counts checked at each step, and
    reruns that change nothing. Starts and ends on DRA, as the module's other tests expect the node."""
    from ansible_cli import run_module  # pylint: disable=import-outside-toplevel
    nvidia = _nvidia()
    assert _node_state(dra)[2] == [nvidia.DRA_GPU_DEVICE_NAME % 0]
    plugin_ns = "dra-e2e-plugin"
    rc, deployed = run_module("kubegpu.cluster.device_plugin_deploy", dict(
        kubeconfig=dra.kubeconfig, namespace=plugin_ns, node_selector={"kubernetes.io/hostname": NODE},
        deploy_labels=True, wait=False))
    assert rc == 0, deployed

    def migrate(to, changed):
        rc, result = run_module("kubegpu.cluster.dra_migration",
                                dict(kubeconfig=dra.kubeconfig, nodes=[NODE], to=to, wait_timeout=150))
        assert rc == 0, (result, dra.plugin_log())
        assert result["changed"] is changed, result
        return result["nodes"][NODE]

    try:
        back = migrate("device_plugin", True)
        assert back["kind"] == "device_plugin" and back["allocatable"].get("nvidia.com/gpu") == 1, back
        allocatable, capacity, devices = _node_state(dra)
        assert (allocatable, capacity, devices) == (1, 1, []), (allocatable, capacity, devices)
        labels = dra.core.read_node(NODE).metadata.labels
        assert labels[nvidia.LABEL_DEPLOY_DEVICE_PLUGIN] == "true"
        # the fixture's own dra-driver=true (not the module's) is set to false: the node must not run both plugins
        assert labels[nvidia.LABEL_DEPLOY_DRA_DRIVER] == "false"
        assert migrate("device_plugin", False)["kind"] == "device_plugin"
    finally:
        # to DRA again: the device plugin's pod leaves through its deploy label
        moved = migrate("dra", True)
        rc, gone = run_module("kubegpu.cluster.device_plugin_deploy", dict(kubeconfig=dra.kubeconfig,
                                                                           namespace=plugin_ns, state="absent"))
        assert rc == 0, gone
    assert moved["kind"] == "dra" and moved["slice_devices"] == [nvidia.DRA_GPU_DEVICE_NAME % 0], moved
    allocatable, capacity, devices = _node_state(dra)
    # allocatable at once; the kubelet keeps the departed plugin's capacity for 5 minutes (endpointStopGracePeriod)
    assert allocatable == 0 and capacity in (0, 1) and devices == [nvidia.DRA_GPU_DEVICE_NAME % 0], \
        (allocatable, capacity, devices)
    assert moved["capacity_gpu"] in (0, 1)
    assert migrate("dra", False)["kind"] == "dra"
