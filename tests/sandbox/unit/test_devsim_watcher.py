# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests of sandbox.k8s.devsim.watcher without a cluster: a fake CoreV1Api records patches."""

import json

from kubernetes.client.rest import ApiException

from sandbox.k8s.devsim.watcher import STATE_ANNOTATION, Simulator, evaluate_plugin_pod
from sandbox_gpu_profiles import plain

TS5 = "sharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 5\n"


class FakeResponse:
    def __init__(self, data):
        self.data = json.dumps(data).encode()


class FakeApi:
    """Just enough of CoreV1Api for Simulator.reconcile."""

    def __init__(self, configmaps=None, nodes=None):
        self.configmaps = configmaps or {}
        self.status_patches = []
        self.meta_patches = []
        self.nodes = nodes or {}
        self.revision = 100

    def _apply(self, name, body):
        """Merge-patch a node kept here (if any) and return it like the API server would."""
        if name not in self.nodes:
            return None
        self.revision += 1
        node = self.nodes[name]
        for section in ("metadata", "status"):
            for field, values in (body.get(section) or {}).items():
                target = node.setdefault(section, {}).setdefault(field, {})
                for key, value in values.items():
                    if value is None:
                        target.pop(key, None)
                    else:
                        target[key] = value
        node["metadata"]["resourceVersion"] = str(self.revision)
        return FakeResponse(node)

    def read_namespaced_config_map(self, name, namespace, **_kwargs):
        if (namespace, name) not in self.configmaps:
            raise ApiException(status=404, reason="Not Found")
        return FakeResponse({"data": self.configmaps[(namespace, name)]})

    def patch_node_status(self, name, body, **_kwargs):
        self.status_patches.append((name, body))
        return self._apply(name, body)

    def patch_node(self, name, body, **_kwargs):
        self.meta_patches.append((name, body))
        return self._apply(name, body)


def plugin_pod(uid="u1", node="n1", phase="Running", config=True, created="2026-01-01T00:00:00Z"):
    container = {"name": "ctr", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"}
    volumes = []
    if config:
        container["env"] = [{"name": "CONFIG_FILE", "value": "/config/config.yaml"}]
        container["volumeMounts"] = [{"name": "cfg", "mountPath": "/config"}]
        volumes = [{"name": "cfg", "configMap": {"name": "dp"}}]
    return {"metadata": {"name": "dp-" + uid, "namespace": "kube-system", "uid": uid, "creationTimestamp": created},
            "spec": {"nodeName": node, "containers": [container], "volumes": volumes}, "status": {"phase": phase}}


def configmap(data, namespace="kube-system", name="dp"):
    """A ConfigMap as its watch event brings it."""
    return {"metadata": {"namespace": namespace, "name": name}, "data": dict(data)}


def node(name="n1", profile_path=None, capacity=None, kubelet=False):
    """A kwok node as sandbox/k8s/nodes.py makes it, or (``kubelet``) one a real kubelet registered: no kwok
    annotation."""
    annotations = {"sandbox.kubegpu.io/profile-path": profile_path} if profile_path else {}
    if not kubelet:
        annotations["kwok.x-k8s.io/node"] = "fake"
    return {"metadata": {"name": name, "annotations": annotations}, "status": {"capacity": capacity or {"cpu": "4"}, "allocatable": capacity or {"cpu": "4"}}}


def simulator(tmp_path, api, gpus=4, kubelet=False):
    prof = tmp_path / "p.json"
    prof.write_text(json.dumps(plain(gpus)))
    sim = Simulator(api, str(tmp_path))
    for kind, items in (("nodes", [node(profile_path=str(prof), kubelet=kubelet)]), ("pods", []), ("configmaps", [])):
        sim.handle(kind, "SYNC", items)
    return sim, str(prof)


def test_evaluate_missing_configmap_is_not_final():
    outcome = evaluate_plugin_pod(plugin_pod(), plain(4), lambda ns, name: None)
    assert outcome.resources == {} and not outcome.final and outcome.configmap == ("kube-system", "dp")


def test_running_plugin_pod_patches_capacity_and_allocatable(tmp_path):
    api = FakeApi({("kube-system", "dp"): {"config.yaml": TS5}})
    sim = simulator(tmp_path, api)[0]
    sim.handle("pods", "ADDED", plugin_pod())
    name, body = api.status_patches[-1]
    assert name == "n1"
    assert body["status"]["capacity"] == {"nvidia.com/gpu": "20"}
    assert body["status"]["allocatable"] == {"nvidia.com/gpu": "20"}
    assert "nvidia.com/gpu=20" in api.meta_patches[-1][1]["metadata"]["annotations"][STATE_ANNOTATION]


def test_pod_deletion_removes_resources(tmp_path):
    api = FakeApi({("kube-system", "dp"): {"config.yaml": TS5}})
    sim, prof = simulator(tmp_path, api)
    sim.handle("pods", "ADDED", plugin_pod())
    sim.handle("nodes", "MODIFIED", node(profile_path=prof, capacity={"cpu": "4", "nvidia.com/gpu": "20"}))
    sim.handle("pods", "DELETED", plugin_pod())


def test_pending_pod_advertises_nothing(tmp_path):
    api = FakeApi({("kube-system", "dp"): {"config.yaml": TS5}})
    sim = simulator(tmp_path, api)[0]
    sim.handle("pods", "ADDED", plugin_pod(phase="Pending"))
    assert not api.status_patches


def test_configmap_arriving_later_is_picked_up(tmp_path):
    api = FakeApi()
    sim = simulator(tmp_path, api)[0]
    sim.handle("pods", "ADDED", plugin_pod())
    assert not api.status_patches
    api.configmaps[("kube-system", "dp")] = {"config.yaml": TS5}
    sim.handle("configmaps", "ADDED", configmap(api.configmaps[("kube-system", "dp")]))
    assert api.status_patches[-1][1]["status"]["capacity"] == {"nvidia.com/gpu": "20"}


def test_successful_config_is_read_once_per_pod(tmp_path):
    api = FakeApi({("kube-system", "dp"): {"config.yaml": TS5}})
    sim, prof = simulator(tmp_path, api)
    sim.handle("pods", "ADDED", plugin_pod())
    sim.handle("nodes", "MODIFIED", node(profile_path=prof, capacity={"cpu": "4", "nvidia.com/gpu": "20"}))
    api.configmaps[("kube-system", "dp")] = {"config.yaml": TS5.replace("5", "2")}
    sim.handle("configmaps", "MODIFIED", configmap(api.configmaps[("kube-system", "dp")]))
    sim.handle("pods", "MODIFIED", plugin_pod())
    assert len(api.status_patches) == 1
    # A new pod (a restart) reads the new config.
    sim.handle("pods", "DELETED", plugin_pod())
    sim.handle("pods", "ADDED", plugin_pod(uid="u2"))
    assert api.status_patches[-1][1]["status"]["capacity"] == {"nvidia.com/gpu": "8"}


def test_newest_plugin_pod_wins(tmp_path):
    api = FakeApi({("kube-system", "dp"): {"config.yaml": TS5}})
    sim = simulator(tmp_path, api)[0]
    sim.handle("pods", "ADDED", plugin_pod(uid="old", config=True, created="2026-01-01T00:00:00Z"))
    sim.handle("pods", "ADDED", plugin_pod(uid="new", config=False, created="2026-01-02T00:00:00Z"))
    assert api.status_patches[-1][1]["status"]["capacity"] == {"nvidia.com/gpu": "4"}


def test_invalid_config_advertises_nothing_and_says_why(tmp_path):
    api = FakeApi({("kube-system", "dp"): {"config.yaml": TS5.replace("5", "1")}})
    sim = simulator(tmp_path, api)[0]
    sim.handle("pods", "ADDED", plugin_pod())
    assert not api.status_patches
    assert "replicas must be >= 2" in api.meta_patches[-1][1]["metadata"]["annotations"][STATE_ANNOTATION]


def test_nothing_happens_before_every_watch_synced(tmp_path):
    api = FakeApi()
    sim = Simulator(api, str(tmp_path))
    sim.handle("nodes", "SYNC", [node()])
    sim.handle("pods", "SYNC", [plugin_pod(config=False)])
    assert not api.meta_patches
    sim.handle("configmaps", "SYNC", [])
    assert api.meta_patches


def test_stale_node_events_do_not_cause_repeated_patches(tmp_path):
    prof = tmp_path / "p.json"
    prof.write_text(json.dumps(plain(4)))
    before = node(profile_path=str(prof))
    before["metadata"]["resourceVersion"] = "50"
    api = FakeApi({("kube-system", "dp"): {"config.yaml": TS5}}, nodes={"n1": json.loads(json.dumps(before))})
    sim = Simulator(api, str(tmp_path))
    for kind, items in (("nodes", [before]), ("pods", []), ("configmaps", [])):
        sim.handle(kind, "SYNC", items)
    sim.handle("pods", "ADDED", plugin_pod())
    assert len(api.status_patches) == 1
    # The watch now delivers the node as it was after the annotation patch only (older than the status patch).
    stale = json.loads(json.dumps(before))
    stale["metadata"]["resourceVersion"] = "101"
    sim.handle("nodes", "MODIFIED", stale)
    assert len(api.status_patches) == 1


def gpu_request_pod(uid, gpus, node_name="n1", phase="Pending", resource="nvidia.com/gpu"):
    return {"metadata": {"name": "w-" + uid, "namespace": "default", "uid": uid},
            "spec": {"nodeName": node_name, "containers": [{"name": "c", "image": "x", "resources": {"limits": {resource: str(gpus)}}}]},
            "status": {"phase": phase}}


class RecordingApi(FakeApi):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.pod_patches = []

    def patch_namespaced_pod_status(self, name, namespace, body, **_kwargs):
        self.pod_patches.append((namespace, name, body))


def test_fail_requests_greater_than_one_rejects_pods_at_admission(tmp_path):
    text = TS5.replace("timeSlicing:", "timeSlicing:\n    failRequestsGreaterThanOne: true")
    api = RecordingApi({("kube-system", "dp"): {"config.yaml": text}})
    sim = simulator(tmp_path, api)[0]
    sim.handle("pods", "ADDED", plugin_pod())
    sim.handle("pods", "ADDED", gpu_request_pod("ok", 1))
    sim.handle("pods", "ADDED", gpu_request_pod("other-node", 2, node_name="n2"))
    sim.handle("pods", "ADDED", gpu_request_pod("done", 2, phase="Succeeded"))
    sim.handle("pods", "ADDED", gpu_request_pod("unbound", 2, node_name=None))
    assert not api.pod_patches
    sim.handle("pods", "MODIFIED", gpu_request_pod("two", 2))
    sim.handle("pods", "MODIFIED", gpu_request_pod("two", 2))
    assert len(api.pod_patches) == 1
    namespace, name, body = api.pod_patches[0]
    assert (namespace, name) == ("default", "w-two")
    assert body["status"]["phase"] == "Failed"
    assert body["status"]["reason"] == "UnexpectedAdmissionError"
    assert "maximum request size for shared resources is 1; found 2" in body["status"]["message"]


def test_without_fail_requests_greater_than_one_pods_are_admitted(tmp_path):
    api = RecordingApi({("kube-system", "dp"): {"config.yaml": TS5}})
    sim = simulator(tmp_path, api)[0]
    sim.handle("pods", "ADDED", plugin_pod())
    sim.handle("pods", "ADDED", gpu_request_pod("two", 2))
    assert not api.pod_patches


def test_pods_bound_before_the_simulator_started_are_not_readmitted(tmp_path):
    text = TS5.replace("timeSlicing:", "timeSlicing:\n    failRequestsGreaterThanOne: true")
    api = RecordingApi({("kube-system", "dp"): {"config.yaml": text}})
    prof = tmp_path / "p.json"
    prof.write_text(json.dumps(plain(4)))
    sim = Simulator(api, str(tmp_path))
    for kind, items in (("nodes", [node(profile_path=str(prof))]), ("pods", [plugin_pod(), gpu_request_pod("old", 2, phase="Running")]),
                        ("configmaps", [])):
        sim.handle(kind, "SYNC", items)
    assert api.status_patches
    sim.handle("pods", "MODIFIED", gpu_request_pod("old", 2, phase="Running"))
    assert not api.pod_patches


MPS3 = "flags:\n  mpsRoot: /run/nvidia/mps\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 3\n"


def _mps_mount(pod, container, host="/run/nvidia/mps"):
    container.setdefault("volumeMounts", []).append({"name": "mps-root", "mountPath": "/mps"})
    pod["spec"]["volumes"].append({"name": "mps-root", "hostPath": {"path": host, "type": "DirectoryOrCreate"}})
    return pod


def mps_daemon_pod(uid="d1", node="n1", phase="Running", host="/run/nvidia/mps"):
    init = {"name": "mounts", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.20.0",
            "command": ["mps-control-daemon", "mount-shm"]}
    daemon = {"name": "ctr", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.20.0", "command": ["mps-control-daemon"]}
    pod = {"metadata": {"name": "mps-" + uid, "namespace": "kube-system", "uid": uid},
           "spec": {"nodeName": node, "initContainers": [init], "containers": [daemon], "volumes": []},
           "status": {"phase": phase}}
    return _mps_mount(pod, daemon, host)


def advertised(api, name="n1"):
    """What the node's capacity says after every status patch so far."""
    capacity = {}
    for node_name, body in api.status_patches:
        if node_name == name:
            for key, value in body["status"].get("capacity", {}).items():
                if value is None:
                    capacity.pop(key, None)
                else:
                    capacity[key] = value
    return capacity


def test_mps_replicas_only_where_the_control_daemon_runs(tmp_path):
    api = FakeApi({("kube-system", "dp"): {"config.yaml": MPS3}})
    sim, prof = simulator(tmp_path, api)
    api.nodes["n1"] = node(profile_path=prof)  # patches land on a node the fake API keeps, as on a real one
    plugin = plugin_pod()
    _mps_mount(plugin, plugin["spec"]["containers"][0])
    sim.handle("pods", "ADDED", plugin)
    assert "nvidia.com/gpu" not in advertised(api)
    assert "waits for the MPS control daemon" in api.meta_patches[-1][1]["metadata"]["annotations"][STATE_ANNOTATION]
    sim.handle("pods", "ADDED", mps_daemon_pod(phase="Pending"))
    assert "nvidia.com/gpu" not in advertised(api)
    sim.handle("pods", "MODIFIED", mps_daemon_pod())
    assert advertised(api) == {"nvidia.com/gpu": "12"}
    sim.handle("pods", "DELETED", mps_daemon_pod())
    assert "nvidia.com/gpu" not in advertised(api)


def test_mps_daemon_with_another_root_or_on_another_node_does_not_count(tmp_path):
    api = FakeApi({("kube-system", "dp"): {"config.yaml": MPS3}})
    sim, prof = simulator(tmp_path, api)
    api.nodes["n1"] = node(profile_path=prof)  # patches land on a node the fake API keeps, as on a real one
    plugin = plugin_pod()
    _mps_mount(plugin, plugin["spec"]["containers"][0])
    sim.handle("pods", "ADDED", plugin)
    sim.handle("pods", "ADDED", mps_daemon_pod(uid="d1", host="/var/run/elsewhere"))
    sim.handle("pods", "ADDED", mps_daemon_pod(uid="d2", node="n2"))
    assert "nvidia.com/gpu" not in advertised(api)
    assert "no mps-control-daemon pod runs here" in api.meta_patches[-1][1]["metadata"]["annotations"][STATE_ANNOTATION]


def test_mps_plugin_without_an_mps_mount_never_sees_the_daemon(tmp_path):
    api = FakeApi({("kube-system", "dp"): {"config.yaml": MPS3}})
    sim, prof = simulator(tmp_path, api)
    api.nodes["n1"] = node(profile_path=prof)  # patches land on a node the fake API keeps, as on a real one
    sim.handle("pods", "ADDED", plugin_pod())
    sim.handle("pods", "ADDED", mps_daemon_pod())
    assert "nvidia.com/gpu" not in advertised(api)
    assert "sees no MPS root at /mps" in api.meta_patches[-1][1]["metadata"]["annotations"][STATE_ANNOTATION]


def test_configmap_comes_from_the_watch_once_it_brought_it(tmp_path):
    """A plugin pod's ConfigMap is read from the watch's view; the API server is asked only for one not seen yet."""
    api = FakeApi()
    sim = simulator(tmp_path, api)[0]
    sim.handle("configmaps", "ADDED", configmap({"config.yaml": TS5}))
    sim.handle("pods", "ADDED", plugin_pod())  # FakeApi has no ConfigMap: a GET would find none
    assert api.status_patches[-1][1]["status"]["capacity"] == {"nvidia.com/gpu": "20"}
    sim.handle("configmaps", "DELETED", configmap({}))
    sim.handle("pods", "ADDED", plugin_pod(uid="u2", created="2026-01-02T00:00:00Z"))
    assert api.meta_patches[-1][1]["metadata"]["annotations"]["sandbox.kubegpu.io/device-plugin"].startswith("plugin has no config")


def test_a_batch_reconciles_each_node_once_in_parallel(tmp_path):
    """Events that arrived together are applied in order, then every node they touch is patched once."""
    prof = tmp_path / "p.json"
    prof.write_text(json.dumps(plain(2)))
    names = ["n%d" % i for i in range(20)]
    api = FakeApi({("kube-system", "dp"): {"config.yaml": TS5}},
                  nodes={n: node(name=n, profile_path=str(prof)) for n in names})
    sim = Simulator(api, str(tmp_path))
    for kind, items in (("nodes", [node(name=n, profile_path=str(prof)) for n in names]), ("pods", []), ("configmaps", [])):
        sim.handle(kind, "SYNC", items)
    batch = [("pods", "ADDED", plugin_pod(uid="u" + n, node=n, phase="Pending")) for n in names]
    batch += [("pods", "MODIFIED", plugin_pod(uid="u" + n, node=n)) for n in names]
    sim.handle_batch(batch)
    assert sorted(patch[0] for patch in api.status_patches) == sorted(names)
    assert all(patch[1]["status"]["capacity"] == {"nvidia.com/gpu": "10"} for patch in api.status_patches)


def test_kubelet_node_is_not_patched_and_admits_its_own_pods(tmp_path):
    """A node without kwok's annotation has a real kubelet: its device manager advertises what the stand-in plugin
    registered and its Allocate refuses what it refuses, so the simulator patches no resource and rejects no pod there;
    its annotation still says what the rules predict."""
    text = TS5.replace("timeSlicing:", "timeSlicing:\n    failRequestsGreaterThanOne: true")
    api = RecordingApi({("kube-system", "dp"): {"config.yaml": text}})
    sim = simulator(tmp_path, api, kubelet=True)[0]
    sim.handle("pods", "ADDED", plugin_pod())
    sim.handle("pods", "ADDED", gpu_request_pod("two", 2))
    assert not api.status_patches and not api.pod_patches
    note = api.meta_patches[-1][1]["metadata"]["annotations"][STATE_ANNOTATION]
    assert note.startswith("kubelet node:") and "nvidia.com/gpu=20" in note
