# SPDX-License-Identifier: GPL-3.0-or-later
"""dra_driver_deploy end to end: `ansible localhost -m kubegpu.cluster.dra_driver_deploy` against a sandbox control
plane's real kube-apiserver (Kubernetes 1.36, resource.k8s.io/v1 served), on kwok nodes of this test's own.

kwok nodes run no kubelet and no DRA kubelet plugin: THIS TEST PLAYS NVIDIA's KUBELET PLUGIN. It publishes each node's
ResourceSlices itself (driver gpu.nvidia.com, one full GPU per device, named gpu-<minor> with the attribute
type=gpu, as cmd/gpu-kubelet-plugin/deviceinfo.go does), after the module has applied the DaemonSet and while it
watches, so that the module's bounded watch is what sees them arrive. The real plugin, on a kubelet node, is the
sandbox's stand-in (dra-sandbox).

DeviceClasses are cluster-wide and named by the driver (gpu.nvidia.com), so one deployment of this module exists per
cluster: these tests run on a control plane of their own (cluster.up, kwok nodes, no fleet), so that another test's
DRA deployment on the session's sandbox never shares (or deletes) their DeviceClasses.

The dra role's `main` entry point is tested here too: it deploys under the kubelet root dir the GPU hosts' preparation
found, and refuses hosts that disagree before any write. Its GPU hosts are inventory entries the play adds, each with the
``dra_host`` result the `host` entry point would have registered: THE HOST PREPARATION IS NOT RUN HERE
(tests/integration/test_dra_role_host.py runs it on a node container).
"""

import time
import uuid

import pytest
from kubernetes import client as k8s, config, dynamic

from ansible_cli import BackgroundModule, run_module, run_playbook
from k8s_helpers import delete_quietly, wait_for

MODULE = "kubegpu.cluster.dra_driver_deploy"
DRA_LABEL = "nvidia.com/gpu.deploy.dra-driver"
DP_LABEL = "nvidia.com/gpu.deploy.device-plugin"
COUNT_LABEL = "nvidia.com/gpu.count"
DS = "dra-driver-nvidia-gpu-kubelet-plugin"
PLAY = """
- name: DRA on the sandbox
  hosts: localhost
  gather_facts: false
  tasks:
    - name: A GPU host prepared on k0s
      ansible.builtin.add_host:
        name: gpu-a
        dra_host: {kubelet_root_dir: /var/lib/k0s/kubelet}
    - name: Another GPU host
      ansible.builtin.add_host:
        name: gpu-b
        dra_host: {kubelet_root_dir: "{{ second_root }}"}
    - name: DRA
      ansible.builtin.include_role:
        name: kubegpu.cluster.dra
      vars:
        dra_gpu_hosts: [gpu-a, gpu-b]
"""


def _actions(result):
    return dict(("%s/%s" % (o["kind"], o["name"]), o["action"]) for o in result["objects"])


class OwnControlPlane:
    """A control plane of these tests' own (kube-apiserver, controller manager, scheduler, kwok), no fleet nodes."""

    def __init__(self, layout):
        from sandbox.k8s import paths  # pylint: disable=import-outside-toplevel
        self.layout = layout
        self.kubeconfig = str(layout.kubeconfig)
        self.api_client = config.new_client_from_config(config_file=self.kubeconfig)
        self.core = k8s.CoreV1Api(self.api_client)
        self.apps = k8s.AppsV1Api(self.api_client)
        self.kube_version = paths.read_versions()["KUBE_VERSION"]

    def kwok_nodes(self, count):
        from sandbox.k8s import cluster, nodes  # pylint: disable=import-outside-toplevel
        prefix = "dra-" + uuid.uuid4().hex[:6]
        manifests = nodes.scale_manifests(count, self.kube_version, None, False, prefix=prefix)
        cluster.create_nodes(self.layout, manifests)
        return [m["metadata"]["name"] for m in manifests]


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    """Shadows the session's plane for this file: a control plane of its own, down at the end."""
    from sandbox.k8s import cluster  # pylint: disable=import-outside-toplevel
    base = tmp_path_factory.mktemp("dra-cp")
    layout = cluster.Layout(base / "state", base / "kubeconfig")
    cluster.up(layout, timeout=120, fleet=False)
    try:
        yield OwnControlPlane(layout)
    finally:
        cluster.down(layout)


@pytest.fixture
def dra(plane):
    """Two kwok nodes labelled for DRA (2 GPUs and 1 GPU by their gpu.count labels), a namespace name, a helper to
    publish ResourceSlices as the kubelet plugin would; everything removed afterwards."""
    ns = "dra-" + uuid.uuid4().hex[:8]
    nodes = plane.kwok_nodes(2)
    for name, count in zip(nodes, ("2", "1")):
        plane.core.patch_node(name, {"metadata": {"labels": {DRA_LABEL: "true", COUNT_LABEL: count}}})
    slices = dynamic.DynamicClient(plane.api_client).resources.get(api_version="resource.k8s.io/v1", kind="ResourceSlice")
    published = []

    def publish(node, gpus):
        """What NVIDIA's kubelet plugin publishes for ``node``: one slice, a pool named after the node."""
        body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                "metadata": {"name": "%s-gpu.nvidia.com" % node},
                "spec": {"driver": "gpu.nvidia.com", "nodeName": node,
                         "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                         "devices": [{"name": "gpu-%d" % minor, "attributes": {"type": {"string": "gpu"}}}
                                     for minor in range(gpus)]}}
        slices.create(body=body)
        published.append(body["metadata"]["name"])

    def run(check=False, diff=False, **options):
        args = dict(kubeconfig=plane.kubeconfig, namespace=ns, wait_timeout=60)
        args.update(options)
        return run_module(MODULE, args, check=check, diff=diff)

    yield nodes, ns, publish, run
    run_module(MODULE, dict(kubeconfig=plane.kubeconfig, namespace=ns, state="absent", wait_timeout=60))
    for name in published:
        delete_quietly(slices.delete, name=name)
    for name in nodes:
        delete_quietly(plane.core.delete_node, name)


def test_deploy_check_diff_idempotent_watch_and_absent(plane, dra):
    nodes, ns, publish, run = dra

    # check mode: what would be created, nothing written
    rc, check = run(check=True, diff=True)
    assert rc == 0, check
    assert check["changed"] and check["api_version"] == "resource.k8s.io/v1" and check["kubernetes"] == "1.36"
    assert check["extended_resource"] is True  # DRAExtendedResource is beta and on in 1.36
    assert set(_actions(check).values()) == {"created"}, check["objects"]
    assert "DaemonSet/%s/%s" % (ns, DS) in check["diff"]["after"]
    assert not [d for d in plane.apps.list_daemon_set_for_all_namespaces().items if d.metadata.name == DS]

    # the real run: the module applies, waits for the rollout, then watches the slices this test publishes
    args = dict(kubeconfig=plane.kubeconfig, namespace=ns, wait_timeout=90)
    with BackgroundModule(MODULE, args, diff=True) as module:
        wait_for(plane.apps.list_namespaced_daemon_set, ns, predicate=lambda obj: obj.metadata.name == DS, timeout=60,
                 describe="the module's DaemonSet")
        time.sleep(1)  # the module is in its watch by now, or lists the slices when it gets there: both are the watch
        assert module.running(), module.result(timeout=5)
        publish(nodes[0], 2)
        publish(nodes[1], 1)
        rc, first = module.result(timeout=120)
    assert rc == 0, first
    assert first["changed"] and first["slices"] == {nodes[0]: ["gpu-0", "gpu-1"], nodes[1]: ["gpu-0"]}
    assert sorted(first["nodes"]) == sorted(nodes)
    ds = plane.apps.read_namespaced_daemon_set(DS, ns)
    assert ds.spec.template.spec.node_selector == {DRA_LABEL: "true"}
    classes = dynamic.DynamicClient(plane.api_client).resources.get(api_version="resource.k8s.io/v1", kind="DeviceClass")
    gpu_class = classes.get(name="gpu.nvidia.com").to_dict()
    assert gpu_class["spec"]["extendedResourceName"] == "nvidia.com/gpu"

    # idempotent: check mode and a real rerun change nothing
    rc, again_check = run(check=True, diff=True)
    assert rc == 0 and not again_check["changed"], again_check
    rc, again = run(diff=True)
    assert rc == 0 and not again["changed"], again
    assert set(_actions(again).values()) == {"unchanged"}
    assert again["diff"] == {"before": {}, "after": {}}

    # a node that lists fewer GPUs than its label says: the bounded watch ends naming it
    plane.core.patch_node(nodes[1], {"metadata": {"labels": {COUNT_LABEL: "3"}}})
    started = time.monotonic()
    rc, short = run(wait_timeout=5)
    assert rc != 0 and time.monotonic() - started < 60, short
    assert "node %s: its ResourceSlices of gpu.nvidia.com list gpu-0, expected 3" % nodes[1] in short["msg"], short
    assert nodes[0] not in short["msg"].split("list their GPUs:")[1]
    plane.core.patch_node(nodes[1], {"metadata": {"labels": {COUNT_LABEL: "1"}}})

    # a node labelled for both plugins: refused before any write, naming it
    generation = plane.apps.read_namespaced_daemon_set(DS, ns).metadata.generation
    plane.core.patch_node(nodes[0], {"metadata": {"labels": {DP_LABEL: "true"}}})
    rc, both = run(image="registry.example.com/dra:v0")  # a change it would have made
    assert rc != 0 and "node %s is labelled for both" % nodes[0] in both["msg"], both
    assert plane.apps.read_namespaced_daemon_set(DS, ns).metadata.generation == generation
    plane.core.patch_node(nodes[0], {"metadata": {"labels": {DP_LABEL: None}}})

    # absent: everything of ours goes; a second absent changes nothing
    rc, gone = run(state="absent")
    assert rc == 0 and gone["changed"], gone
    assert set(_actions(gone).values()) == {"deleted"}
    assert not [c for c in classes.get().to_dict()["items"] if c["metadata"]["name"] in ("gpu.nvidia.com", "mig.nvidia.com")]
    rc, gone_again = run(state="absent")
    assert rc == 0 and not gone_again["changed"], gone_again


def test_role_deploys_under_the_hosts_root_dir_and_refuses_disagreeing_hosts(tmp_path, plane):
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAY)
    ns = "dra-role-" + uuid.uuid4().hex[:6]
    base = {"dra_kubeconfig": plane.kubeconfig, "dra_namespace": ns, "dra_wait": False}
    try:
        code, tasks = run_playbook(playbook, dict(base, second_root="/var/lib/kubelet"))
        assert code != 0, tasks
        failed = [r for _name, r in tasks if r.get("failed")]
        assert "different root dirs (/var/lib/k0s/kubelet, /var/lib/kubelet)" in failed[0]["msg"], failed
        assert not plane.apps.list_namespaced_daemon_set(ns).items, "written before the refusal"

        code, tasks = run_playbook(playbook, dict(base, second_root="/var/lib/k0s/kubelet/"))  # the same dir
        assert code == 0, tasks
        ds = plane.apps.read_namespaced_daemon_set("dra-driver-nvidia-gpu-kubelet-plugin", ns)
        paths = dict((v.name, v.host_path.path) for v in ds.spec.template.spec.volumes if v.host_path)
        assert paths["plugins-registry"] == "/var/lib/k0s/kubelet/plugins_registry"
        assert paths["plugins"] == "/var/lib/k0s/kubelet/plugins"
    finally:
        rc, gone = run_module("kubegpu.cluster.dra_driver_deploy", dict(kubeconfig=plane.kubeconfig, namespace=ns,
                                                                        state="absent", wait_timeout=60))
        assert rc == 0, gone
