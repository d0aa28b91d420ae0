# SPDX-License-Identifier: GPL-3.0-or-later
"""Watch-based waits and small object builders for the sandbox integration tests."""

import contextlib
import time
import uuid
from pathlib import Path

from kubernetes import watch
from kubernetes.client import ApiextensionsV1Api
from kubernetes.client.rest import ApiException

from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.client import Client
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.objectset import open_crd_storage
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.constants import MPS_ROOT, PROOF_IMAGE, default_image

PLUGIN_IMAGE = default_image()
FIXTURES = Path(__file__).resolve().parent / "fixtures"  # tests/fixtures


class Sandbox:
    """A running sandbox and API clients for it."""

    def __init__(self, layout, state):
        from kubernetes import client, config  # pylint: disable=import-outside-toplevel
        from sandbox.k8s import paths  # pylint: disable=import-outside-toplevel

        self.layout = layout
        self.state = state
        self.kubeconfig = str(layout.kubeconfig)
        self.api_client = config.new_client_from_config(config_file=self.kubeconfig)
        self.core = client.CoreV1Api(self.api_client)
        self.apps = client.AppsV1Api(self.api_client)
        self.batch = client.BatchV1Api(self.api_client)
        self.kube_version = paths.read_versions()["KUBE_VERSION"]


def gpu_fact(fake_nvml_dir, profile_name):
    """The gpu fact the real gpu_facts module reads from the fake NVML with a shipped profile (sandbox/profiles)."""
    from ansible_cli import run_module  # pylint: disable=import-outside-toplevel
    profile = FIXTURES.parent.parent / "sandbox" / "profiles" / (profile_name + ".json")
    env = {"LD_LIBRARY_PATH": str(fake_nvml_dir), "FAKE_NVML_PROFILE": str(profile)}
    rc, result = run_module("kubegpu.cluster.gpu_facts", env=env)
    assert rc == 0, result
    return result["ansible_facts"]["gpu"]


def fixture_profile(name):
    """Return the path of a test GPU profile under fixtures/profiles."""
    path = FIXTURES / "profiles" / (name + ".json")
    assert path.exists(), path
    return str(path)


def delete_quietly(fn, *args, **kwargs):
    """Call a delete function, ignoring 404."""
    try:
        fn(*args, **kwargs)
    except ApiException as exc:
        if exc.status != 404:
            raise


def wait_for(list_fn, *args, predicate, timeout=30.0, describe="condition", **kwargs):
    """List, then watch, until ``predicate(obj)`` holds for an object; return it.

    ``list_fn`` is a CoreV1Api-style list function; pass ``field_selector`` to narrow it.
    Raises AssertionError with the last object seen when ``timeout`` passes.
    """
    deadline = time.monotonic() + timeout
    listing = list_fn(*args, **kwargs)
    last = None
    for obj in listing.items:
        last = obj
        if predicate(obj):
            return obj
    version = listing.metadata.resource_version
    while True:
        remaining = int(deadline - time.monotonic())
        if remaining <= 0:
            raise AssertionError("timed out after %.0f s waiting for %s; last object seen: %s" % (timeout, describe, last))
        stream = watch.Watch()
        try:
            for event in stream.stream(list_fn, *args, resource_version=version, timeout_seconds=remaining, **kwargs):
                obj = event["object"]
                version = obj.metadata.resource_version
                if event["type"] == "DELETED":
                    continue
                last = obj
                if predicate(obj):
                    stream.stop()
                    return obj
        except ApiException as exc:
            if exc.status != 410:
                raise
            listing = list_fn(*args, **kwargs)
            version = listing.metadata.resource_version
            for obj in listing.items:
                last = obj
                if predicate(obj):
                    return obj


def wait_gone(list_fn, *args, timeout=30.0, describe="objects", **kwargs):
    """List, then watch, until ``list_fn`` (narrowed by ``field_selector``/``label_selector``) lists nothing. A timeout
    names what is left and, where it says why it stays (a CRD's Terminating condition), its words."""
    deadline = time.monotonic() + timeout
    while True:
        listing = list_fn(*args, **kwargs)
        left = dict((o.metadata.name, o) for o in listing.items)
        if not left:
            return
        remaining = int(deadline - time.monotonic())
        if remaining <= 0:
            raise AssertionError("timed out after %.0f s waiting for %s to go; still there: %s"
                                 % (timeout, describe, ", ".join(_why_still_there(o) for _n, o in sorted(left.items()))))
        stream = watch.Watch()
        try:
            for event in stream.stream(list_fn, *args, resource_version=listing.metadata.resource_version,
                                       timeout_seconds=remaining, **kwargs):
                if event["type"] == "DELETED":
                    left.pop(event["object"].metadata.name, None)
                elif event["type"] in ("ADDED", "MODIFIED"):
                    left[event["object"].metadata.name] = event["object"]
                if not left:
                    stream.stop()
                    return
        except ApiException as exc:
            if exc.status != 410:
                raise


def _why_still_there(obj):
    status = getattr(obj, "status", None)
    words = ["%s: %s" % (c.reason, c.message) for c in (getattr(status, "conditions", None) or [])
             if c.type == "Terminating"]
    return obj.metadata.name + (" (%s)" % "; ".join(words) if words else "")


def delete_crds(sandbox, crds, timeout=60):
    """Delete the CRDs of ``crds`` (manifests) as the collection's removal does (their objects' storage opened first:
    objectset.open_crd_storage), then wait until they are gone: a deleted CRD stays (Terminating) until the API
    server has removed its objects, and later tests count the CRDs present."""
    ext = ApiextensionsV1Api(sandbox.api_client)
    ours = Client(api_client=sandbox.api_client)
    for crd in crds:
        open_crd_storage(ours, crd)
        delete_quietly(ext.delete_custom_resource_definition, crd["metadata"]["name"])
    for crd in crds:
        wait_gone(ext.list_custom_resource_definition, field_selector="metadata.name=" + crd["metadata"]["name"],
                  timeout=timeout, describe=crd["metadata"]["name"])


def gpu_resources(node):
    """Return (capacity, allocatable) restricted to nvidia.com/* as {name: int}."""
    def pick(values):
        return {k: int(v) for k, v in (values or {}).items() if k.startswith("nvidia.com/")}
    return pick(node.status.capacity), pick(node.status.allocatable)


def plugin_daemonset(name, node_selector, env=None, configmap=None, args=None):
    """A device plugin DaemonSet like the static manifest, pinned to some nodes, optionally with a config."""
    container = {
        "name": "nvidia-device-plugin-ctr",
        "image": PLUGIN_IMAGE,
        "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": "kubelet-device-plugins-dir", "mountPath": "/var/lib/kubelet/device-plugins"}],
    }
    if args:
        container["args"] = list(args)
    # the MPS root, where the plugin looks for the MPS control daemon (the chart mounts it whatever the sharing)
    container["volumeMounts"].append({"name": "mps-root", "mountPath": "/mps"})
    volumes = [{"name": "kubelet-device-plugins-dir", "hostPath": {"path": "/var/lib/kubelet/device-plugins", "type": "Directory"}},
               {"name": "mps-root", "hostPath": {"path": MPS_ROOT, "type": "DirectoryOrCreate"}}]
    if configmap:
        container["env"].append({"name": "CONFIG_FILE", "value": "/config/config.yaml"})
        container["volumeMounts"].append({"name": "config", "mountPath": "/config"})
        volumes.append({"name": "config", "configMap": {"name": configmap}})
    labels = {"name": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": labels},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": node_selector,
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                    "priorityClassName": "system-node-critical",
                    "containers": [container],
                    "volumes": volumes,
                },
            },
        },
    }


def mps_daemon_daemonset(name, node_selector):
    """NVIDIA's MPS control daemon as the plugin's chart runs it (trimmed to what the simulator reads): the plugin
    image running ``mps-control-daemon`` with the same MPS root at /mps."""
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"name": name}},
            "template": {
                "metadata": {"labels": {"name": name}},
                "spec": {
                    "nodeSelector": node_selector,
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [{"name": "mps-control-daemon-ctr", "image": PLUGIN_IMAGE, "command": ["mps-control-daemon"],
                                    "securityContext": {"privileged": True},
                                    "volumeMounts": [{"name": "mps-root", "mountPath": "/mps"}]}],
                    "volumes": [{"name": "mps-root", "hostPath": {"path": MPS_ROOT, "type": "DirectoryOrCreate"}}],
                },
            },
        },
    }


def gpu_pod(name, gpus, resource="nvidia.com/gpu", restart_policy="Never", node_selector=None):
    """A run-to-completion pod asking for GPUs in its limits, like the CUDA vectoradd sample."""
    spec = {
        "restartPolicy": restart_policy,
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [{"name": "cuda-vectoradd", "image": PROOF_IMAGE,
                        "resources": {"limits": {resource: str(gpus)}}}],
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


@contextlib.contextmanager
def plugin_nodes(sandbox, prefix, cases):
    """Per case ``{key: (profile, config text or None, env, args)}``: a kwok node with that GPU profile (a name or a
    path; None: no GPU) and a device plugin DaemonSet pinned to it, reading that config from a ConfigMap, in one
    namespace of its own. All are created at once; yields ``{key: node name}``; the namespace and the nodes go
    afterwards."""
    from sandbox.k8s import cluster, nodes  # pylint: disable=import-outside-toplevel
    namespace = "%s-%s" % (prefix, uuid.uuid4().hex[:8])
    sandbox.core.create_namespace({"metadata": {"name": namespace}})
    made = {}
    try:
        manifests = []
        for key, (profile, _text, _env, _args) in cases.items():
            manifest = nodes.scale_manifests(1, sandbox.kube_version, profile, prefix="kg-test-" + uuid.uuid4().hex[:6])[0]
            manifests.append(manifest)
            made[key] = manifest["metadata"]["name"]
        cluster.create_nodes(sandbox.layout, manifests)
        configs = {}
        for index, (key, (_profile, text, env, args)) in enumerate(cases.items()):
            if text is not None and text not in configs:
                configs[text] = "dp-config-%d" % len(configs)
                sandbox.core.create_namespaced_config_map(namespace, {"metadata": {"name": configs[text]},
                                                                      "data": {"config.yaml": text}})
            ds = plugin_daemonset("dp-%d" % index, {"kubernetes.io/hostname": made[key]}, env=env,
                                  configmap=configs.get(text), args=args)
            sandbox.apps.create_namespaced_daemon_set(namespace, ds)
            if text is not None and "mps:" in text:  # the plugin advertises MPS replicas only beside its daemon
                sandbox.apps.create_namespaced_daemon_set(namespace, mps_daemon_daemonset(
                    "mps-%d" % index, {"kubernetes.io/hostname": made[key]}))
        yield made
    finally:
        delete_quietly(sandbox.core.delete_namespace, namespace)
        for name in made.values():
            delete_quietly(sandbox.core.delete_node, name)
