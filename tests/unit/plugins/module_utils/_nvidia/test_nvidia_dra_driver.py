# SPDX-License-Identifier: GPL-3.0-or-later
"""NVIDIA's DRA driver as data (pure rendering, held to the chart's facts) and dra_driver_deploy's runner with a fake
client: what is refused happens before any write."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import KubegpuError, OptionError
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import constants as nv
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.dra import deployment as dra_deployment, manifests as dra_manifests

from ansible_collections.kubegpu.cluster.tests.unit.plugins.module_utils.vendor_fakes import FakeClient, node


def params(**over):
    base = dict(namespace=nv.DRA_NAMESPACE, version=nv.DRA_DRIVER_VERSION, image=None, image_pull_secrets=[],
                nvidia_driver_root="/", kubelet_root_dir="/var/lib/kubelet", node_selector={}, tolerations=None,
                priority_class="system-node-critical", extended_resource=None, compute_domains=False,
                state="present", wait=True, wait_timeout=60)
    base.update(over)
    return base


def by_kind(objects):
    return dict((o["kind"] + "/" + o["metadata"]["name"], o) for o in objects)


def test_daemonset_is_the_charts_gpus_container_on_dra_nodes_only():
    objects = by_kind(dra_manifests.render(params(), "resource.k8s.io/v1", True))
    ds = objects["DaemonSet/" + nv.DRA_KUBELET_PLUGIN_NAME]
    spec = ds["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {nv.LABEL_DEPLOY_DRA_DRIVER: "true"}
    assert spec["tolerations"] == [nv.GPU_TOLERATION]
    assert spec["priorityClassName"] == "system-node-critical"
    (gpus,) = spec["containers"]
    assert gpus["name"] == "gpus" and gpus["securityContext"] == {"privileged": True}
    assert gpus["image"] == "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.5.0"
    env = dict((e["name"], e.get("value")) for e in gpus["env"])
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void" and env["CDI_ROOT"] == "/var/run/cdi"
    assert env["KUBELET_REGISTRAR_DIRECTORY_PATH"] == "/var/lib/kubelet/plugins_registry"
    assert env["KUBELET_PLUGINS_DIRECTORY_PATH"] == "/var/lib/kubelet/plugins"
    mounts = dict((m["name"], m) for m in gpus["volumeMounts"])
    assert mounts["plugins"]["mountPropagation"] == "Bidirectional"
    assert gpus["livenessProbe"]["grpc"] == {"port": 51516, "service": "liveness"}
    assert ds["spec"]["updateStrategy"]["rollingUpdate"] == {"maxUnavailable": "100%"}


def test_kubelet_root_dir_moves_both_directories():
    ds = dra_manifests.daemonset(params(kubelet_root_dir="/var/lib/k0s/kubelet/"), "ns")
    paths = dict((v["name"], v["hostPath"]["path"]) for v in ds["spec"]["template"]["spec"]["volumes"])
    assert paths["plugins-registry"] == "/var/lib/k0s/kubelet/plugins_registry"
    assert paths["plugins"] == "/var/lib/k0s/kubelet/plugins"
    mounts = dict((m["name"], m["mountPath"]) for m in ds["spec"]["template"]["spec"]["containers"][0]["volumeMounts"])
    assert mounts["plugins-registry"] == paths["plugins-registry"] and mounts["plugins"] == paths["plugins"]


def test_driver_root_elsewhere_mounts_its_parent_for_the_init_container():
    ds = dra_manifests.daemonset(params(nvidia_driver_root="/run/nvidia/driver"), "ns")
    paths = dict((v["name"], v["hostPath"]["path"]) for v in ds["spec"]["template"]["spec"]["volumes"])
    assert paths["driver-root-parent"] == "/run/nvidia" and paths["driver-root"] == "/run/nvidia/driver"
    (mount,) = ds["spec"]["template"]["spec"]["initContainers"][0]["volumeMounts"]
    assert mount["mountPropagation"] == "HostToContainer" and "readOnly" not in mount


def test_rbac_is_the_kubelet_plugins_for_gpus_alone():
    objects = by_kind(dra_manifests.render(params(), "resource.k8s.io/v1", False))
    role = objects["ClusterRole/%s-%s" % (nv.DRA_NAMESPACE, nv.DRA_KUBELET_PLUGIN_NAME)]
    rules = dict((r["resources"][0], set(r["verbs"])) for r in role["rules"])
    assert rules["resourceslices"] == {"get", "list", "watch", "create", "update", "delete"}
    assert rules["nodes"] == {"get", "list", "watch"}  # no writes to nodes: that is the compute-domain plugin's
    assert "computedomains" not in rules
    binding = objects["ClusterRoleBinding/%s-%s" % (nv.DRA_NAMESPACE, nv.DRA_KUBELET_PLUGIN_NAME)]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": nv.DRA_KUBELET_PLUGIN_NAME,
                                    "namespace": nv.DRA_NAMESPACE}]


@pytest.mark.parametrize("api, mapped", [("resource.k8s.io/v1", True), ("resource.k8s.io/v1beta2", False)])
def test_device_classes(api, mapped):
    objects = by_kind(dra_manifests.render(params(), api, mapped))
    gpu, mig = objects["DeviceClass/gpu.nvidia.com"], objects["DeviceClass/mig.nvidia.com"]
    assert gpu["apiVersion"] == api == mig["apiVersion"]
    assert gpu["spec"]["selectors"][0]["cel"]["expression"] == (
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'")
    assert mig["spec"]["selectors"][0]["cel"]["expression"].endswith("type == 'mig'")
    assert ("extendedResourceName" in gpu["spec"]) is mapped and "extendedResourceName" not in mig["spec"]
    if mapped:
        assert gpu["spec"]["extendedResourceName"] == "nvidia.com/gpu"


class Client(FakeClient):
    def __init__(self, version="v1.36.3", served=("v1",), **kwargs):
        super(Client, self).__init__(**kwargs)
        self.version = version
        self.served = list(served)

    def server_version(self):
        return {"gitVersion": self.version}

    def served_versions(self, group):
        assert group == "resource.k8s.io"
        return self.served


def test_both_plugins_on_a_node_is_refused_before_any_write():
    client = Client(nodes={"g1": node("g1", {nv.LABEL_DEPLOY_DRA_DRIVER: "true", nv.LABEL_DEPLOY_DEVICE_PLUGIN: "true"})})
    with pytest.raises(KubegpuError, match="node g1 is labelled for both"):
        dra_deployment.run(params(), client=client)
    assert client.writes == []


@pytest.mark.parametrize("version, served, words", [
    ("v1.31.0", ["v1beta1"], "too old"),
    ("v1.33.2", [], "--runtime-config=resource.k8s.io/v1beta2=true"),
])
def test_unsupported_versions_are_refused_before_any_write(version, served, words):
    client = Client(version=version, served=served)
    with pytest.raises(KubegpuError, match=words.replace(".", r"\.")):
        dra_deployment.run(params(), client=client, check_mode=True)
    assert client.writes == []


def test_compute_domains_refused_before_connecting():
    with pytest.raises(OptionError) as err:
        dra_deployment.run(params(compute_domains=True), client_factory=lambda p: pytest.fail("connected"))
    assert err.value.option == "compute_domains"


def test_present_applies_in_order_and_warns_when_no_node_is_labelled():
    client = Client()
    result = dra_deployment.run(params(wait=False), client=client)
    kinds = [w[1] for w in client.writes if w[0] == "apply"]
    assert kinds == ["Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DeviceClass", "DeviceClass",
                     "DaemonSet"]
    assert result["api_version"] == "resource.k8s.io/v1" and result["extended_resource"] is True
    assert result["nodes"] == [] and "runs nowhere" in result["warnings"][0]


class DroppingClient(Client):
    """An API server of 1.35 without DRAExtendedResource: a write clears extendedResourceName."""

    def apply(self, obj, dry_run=False):
        self.writes.append(("apply", obj["kind"], dry_run))
        after = dict(obj, spec=dict((k, v) for k, v in (obj.get("spec") or {}).items() if k != "extendedResourceName"))
        return "created", None, after


def test_extended_resource_on_135_refused_where_the_api_server_drops_it():
    client = DroppingClient(version="v1.35.2", served=["v1"])
    with pytest.raises(KubegpuError, match="DRAExtendedResource is off there"):
        dra_deployment.run(params(extended_resource=True, wait=False), client=client)
    assert client.writes == [("apply", "DeviceClass", True)]  # the dry run, nothing else
    result = dra_deployment.run(params(extended_resource=True, wait=False), client=Client(version="v1.35.2"))
    assert result["extended_resource"] is True and "DRAExtendedResource=true" in result["warnings"][0]
