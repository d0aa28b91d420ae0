# SPDX-License-Identifier: GPL-3.0-or-later
"""Rendering and validation of the device plugin objects (pure functions), and the runner with a fake client."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

import pytest

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import KubegpuError, OptionError, fail_args
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import objects as k8s_objects, objectset
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import (
    allocatable, constants as nv, deployment, manifests, plugin_config,
)


def params(**over):
    base = dict(namespace="nvidia-device-plugin", version=nv.DEVICE_PLUGIN_VERSION, image=None, image_pull_secrets=[],
                mig_strategy="none", device_list_strategy=["envvar"], device_id_strategy="uuid",
                fail_on_init_error=True, nvidia_driver_root="/", sharing=None, runtime_class=None,
                node_selector=dict(nv.DEFAULT_NODE_SELECTOR), tolerations=None, priority_class="system-node-critical",
                gfd=False, state="present", wait=True, wait_timeout=300, expected={})
    base.update(over)
    return base


def by_kind(objects):
    return dict((o["kind"], o) for o in objects)


def test_default_config_is_the_plugin_schema():
    config = plugin_config.build_config(params())
    assert config == {"version": "v1", "flags": {
        "migStrategy": "none", "failOnInitError": True, "nvidiaDriverRoot": "/",
        "plugin": {"passDeviceSpecs": False, "deviceListStrategy": ["envvar"], "deviceIDStrategy": "uuid"}}}
    assert "sharing" not in config


def test_time_slicing_and_mps_sections():
    ts = plugin_config.build_config(params(sharing={"strategy": "time-slicing", "replicas": 4, "rename_by_default": True}))
    assert ts["sharing"] == {"timeSlicing": {"renameByDefault": True,
                                             "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}
    mps = plugin_config.build_config(params(sharing={"strategy": "mps", "replicas": 2, "devices": "all"}))
    assert mps["sharing"]["mps"]["failRequestsGreaterThanOne"] is True
    assert mps["sharing"]["mps"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 2, "devices": "all"}]
    assert mps["flags"]["mpsRoot"] == nv.MPS_ROOT


@pytest.mark.parametrize("over, option, words", [
    ({"sharing": {"strategy": "time-slicing", "replicas": 1}}, "sharing.replicas", ">= 2"),
    ({"sharing": {"strategy": "time-slicing"}}, "sharing.replicas", "required"),
    ({"sharing": {"strategy": "mps", "replicas": 2}, "mig_strategy": "mixed"}, "sharing.strategy", "mixed"),
    ({"sharing": {"strategy": "spread", "replicas": 2}}, "sharing.strategy", "unknown strategy"),
    ({"mig_strategy": "both"}, "mig_strategy", "unknown strategy"),
    ({"device_list_strategy": ["envvar", "magic"]}, "device_list_strategy", "magic"),
    ({"device_id_strategy": "serial"}, "device_id_strategy", "serial"),
    ({"sharing": {"strategy": "time-slicing", "replicas": 2, "resources": [{"name": "x" * 60}]}},
     "sharing.resources[0].name", "63 characters"),
    ({"sharing": {"strategy": "time-slicing", "replicas": 2, "resources": [{"name": "GPU_big"}]}},
     "sharing.resources[0].name", "not a valid resource name"),
    ({"sharing": {"strategy": "time-slicing", "replicas": 2, "devices": 0}}, "sharing.devices", "> 0"),
    ({"sharing": {"strategy": "time-slicing", "replicas": 2, "devices": "some"}}, "sharing.devices", "unknown value"),
    ({"sharing": {"strategy": "time-slicing", "replicas": 2, "devices": ["0", "GPU-xyz"]}}, "sharing.devices", "GPU-xyz"),
    ({"namespace": "Not_A_Namespace"}, "namespace", "namespace name"),
    ({"expected": {"n1": {"nvidia.com/gpu": -1}}}, "expected", ">= 0"),
    ({"max_unavailable": 0}, "max_unavailable", "a count of nodes (1 or more)"),
    ({"max_unavailable": "0%"}, "max_unavailable", "'1%' to '100%'"),
    ({"max_unavailable": "150%"}, "max_unavailable", "'150%'"),
    ({"max_unavailable": "ten"}, "max_unavailable", "'ten' is neither"),
    ({"max_unavailable": True}, "max_unavailable", "'True' is neither"),
])
def test_invalid_options_name_the_option(over, option, words):
    with pytest.raises(OptionError) as err:
        plugin_config.validate(params(**over))
    assert err.value.option == option and words in str(err.value), str(err.value)


@pytest.mark.parametrize("devices, want", [
    ("all", "all"), (2, 2), ("3", 3), (["0", "1:0", "GPU-572352bc-eb73-5c95-b1d4-77eed0a239ac"],
                                       ["0", "1:0", "GPU-572352bc-eb73-5c95-b1d4-77eed0a239ac"]),
])
def test_valid_devices(devices, want):
    config = plugin_config.build_config(params(sharing={"strategy": "time-slicing", "replicas": 2, "devices": devices}))
    assert config["sharing"]["timeSlicing"]["resources"][0]["devices"] == want


def test_resource_names_get_the_prefix():
    assert plugin_config.resource_name("gpu") == "nvidia.com/gpu"
    assert plugin_config.resource_name("nvidia.com/mig-1g.10gb") == "nvidia.com/mig-1g.10gb"


def test_daemonset_follows_the_static_manifest():
    objects = manifests.render(params())
    assert [o["kind"] for o in objects] == ["ConfigMap", "DaemonSet"]
    ds = by_kind(objects)["DaemonSet"]
    pod = ds["spec"]["template"]["spec"]
    ctr = pod["containers"][0]
    assert ctr["image"] == "nvcr.io/nvidia/k8s-device-plugin:" + nv.DEVICE_PLUGIN_VERSION
    assert ctr["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert ctr["env"] == [{"name": "CONFIG_FILE", "value": "/config/config.yaml"}]
    mounts = dict((m["name"], m["mountPath"]) for m in ctr["volumeMounts"])
    vols = dict((v["name"], v) for v in pod["volumes"])
    assert vols["device-plugin"]["hostPath"] == {"path": "/var/lib/kubelet/device-plugins", "type": "Directory"}
    assert mounts["config"] == "/config" and vols["config"]["configMap"]["name"] == nv.CONFIGMAP_NAME
    assert ds["spec"]["updateStrategy"] == {"type": "RollingUpdate"}
    assert pod["priorityClassName"] == "system-node-critical"
    # the GPU Operator's operand label, which NVIDIA's MIG manager sets to paused-for-mig-change to stop the pods
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.deploy.device-plugin": "true"}
    # the default config keeps off the nodes of named configs, with or without any (issue 26: adding the first one
    # changes nothing of the default DaemonSets)
    assert pod["affinity"] == DEFAULT_AFFINITY
    assert ds["metadata"]["name"] == "nvidia-device-plugin-daemonset"  # the names earlier releases used
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert "runtimeClassName" not in pod
    for obj in objects:
        assert obj["metadata"]["labels"]["app.kubernetes.io/name"] == "nvidia-device-plugin"
        assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "kubegpu.cluster"
    assert ds["spec"]["selector"]["matchLabels"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()


@pytest.mark.parametrize("value, want", [(10, 10), ("25", 25), ("10%", "10%"), (" 100% ", "100%")])
def test_max_unavailable_widens_every_daemonsets_rolling_update(value, want):
    objects = manifests.render(params(max_unavailable=value, gfd=True, sharing=MPS4))
    daemonsets = [o for o in objects if o["kind"] == "DaemonSet"]
    assert len(daemonsets) == 3  # the plugin, MPS's control daemon, GFD
    for ds in daemonsets:
        assert ds["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": want}}
    plugin_config.validate(params(max_unavailable=value))  # accepted before any API call


def test_config_map_holds_the_config_and_the_hash_follows_it():
    p1, p2 = params(), params(sharing={"strategy": "time-slicing", "replicas": 4})
    c1, c2 = plugin_config.build_config(p1), plugin_config.build_config(p2)
    cm = by_kind(manifests.render(p1))["ConfigMap"]
    assert json.loads(cm["data"]["config.yaml"]) == c1
    h1, h2 = plugin_config.config_hash(c1), plugin_config.config_hash(c2)
    assert h1 != h2 and h1 == plugin_config.config_hash(plugin_config.build_config(params()))
    for config, digest in ((p1, h1), (p2, h2)):
        ds = by_kind(manifests.render(config))["DaemonSet"]
        assert ds["spec"]["template"]["metadata"]["annotations"][k8s_objects.ANNOTATION_CONFIG_HASH] == digest


def test_options_reach_the_pod():
    objects = by_kind(manifests.render(params(runtime_class="nvidia", image="reg.example/dp:x", image_pull_secrets=["s1"],
                                       priority_class="", tolerations=[], version="v0.19.0")))
    assert objects["RuntimeClass"]["handler"] == "nvidia"
    assert objects["RuntimeClass"]["metadata"]["labels"][k8s_objects.LABEL_OWNER_NAMESPACE] == "nvidia-device-plugin"
    pod = objects["DaemonSet"]["spec"]["template"]["spec"]
    assert pod["runtimeClassName"] == "nvidia" and pod["imagePullSecrets"] == [{"name": "s1"}]
    assert pod["containers"][0]["image"] == "reg.example/dp:x"
    assert "priorityClassName" not in pod and pod["tolerations"] == []
    assert manifests.render(params(version="v0.19.0"))[1]["spec"]["template"]["spec"]["containers"][0]["image"].endswith(":v0.19.0")


def test_gfd_objects_and_least_privilege():
    objects = manifests.render(params(gfd=True))
    kinds = [o["kind"] for o in objects]
    assert kinds.count("DaemonSet") == 2 and "ServiceAccount" in kinds
    rules = [r for o in objects if o["kind"] in ("Role", "ClusterRole") for r in o["rules"]]
    assert {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]} in rules
    for rule in rules:
        assert "*" not in rule["verbs"] and "delete" not in rule["verbs"]
        assert rule["resources"] in (["nodes"], ["nodefeatures"])
    gfd = [o for o in objects if o["kind"] == "DaemonSet" and o["metadata"]["name"] == nv.GFD_NAME][0]
    ctr = gfd["spec"]["template"]["spec"]["containers"][0]
    assert ctr["command"] == ["gpu-feature-discovery"]
    assert ctr["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert plugin_config.build_config(params(gfd=True))["flags"]["gfd"]["sleepInterval"] == "60s"


def test_short_nodes_and_rollout():
    nodes = {"a": {"status": {"allocatable": {"nvidia.com/gpu": "4", "cpu": "8"}}}}
    assert objectset.short_nodes(nodes, {"a": {"nvidia.com/gpu": 4}}, nv.RESOURCE_PREFIX) == {}
    assert objectset.short_nodes(nodes, {"a": {"nvidia.com/gpu": 16}}, nv.RESOURCE_PREFIX) == {"a": ({"nvidia.com/gpu": 4}, {"nvidia.com/gpu": 16})}
    assert objectset.short_nodes(nodes, {"b": {"nvidia.com/gpu": 1}}, nv.RESOURCE_PREFIX) == {"b": (None, {"nvidia.com/gpu": 1})}
    assert objectset.short_nodes(nodes, {"a": {"nvidia.com/gpu.shared": 0, "nvidia.com/gpu": 4}}, nv.RESOURCE_PREFIX) == {}
    ds = {"metadata": {"generation": 2}, "status": {"observedGeneration": 2, "desiredNumberScheduled": 1,
                                                    "updatedNumberScheduled": 1, "numberAvailable": 1}}
    assert k8s_objects.rolled_out(ds)
    ds["status"]["observedGeneration"] = 1
    assert not k8s_objects.rolled_out(ds)


class FakeClient(object):
    """Records writes; ``live`` maps key -> object."""

    def __init__(self, live=None):
        self.live = live or {}
        self.writes = []
        self.clock = lambda: 0

    def get(self, api_version, kind, name, namespace=None):
        return self.live.get("/".join(p for p in (kind, namespace, name) if p))

    def apply(self, obj, dry_run=False):
        self.writes.append(("apply", obj["kind"], dry_run))
        return "created", None, obj

    def list(self, *args, **kwargs):
        return []

    def delete(self, *args, **kwargs):
        self.writes.append(("delete", args, kwargs))
        return True

    def wait(self, *args, **kwargs):
        raise AssertionError("no wait in check mode")


def test_check_mode_only_dry_runs():
    client = FakeClient()
    result = deployment.run(params(), check_mode=True, want_diff=True, client=client)
    assert result["changed"] is True
    assert client.writes == [("apply", "Namespace", True)]  # objects in a missing namespace are not sent at all
    assert set(o["action"] for o in result["objects"]) == {"created"}
    assert "ConfigMap/nvidia-device-plugin/nvidia-device-plugin-config" in result["diff"]["after"]


def test_invalid_config_makes_no_client():
    def factory(_params):
        raise AssertionError("connected before validating")
    with pytest.raises(OptionError):
        deployment.run(params(sharing={"strategy": "time-slicing", "replicas": 1}), client_factory=factory)


def test_someone_elses_namespace_and_runtime_class_are_left_alone():
    live = {"Namespace/nvidia-device-plugin": {"metadata": {"name": "nvidia-device-plugin"}},
            "RuntimeClass/nvidia": {"metadata": {"name": "nvidia", "labels": {}}}}
    client = FakeClient(live)
    result = deployment.run(params(runtime_class="nvidia", wait=False), client=client)
    kinds = [w[1] for w in client.writes]
    assert "Namespace" not in kinds and "RuntimeClass" not in kinds
    actions = dict((o["kind"], o["action"]) for o in result["objects"])
    assert actions["Namespace"] == "unchanged" and actions["RuntimeClass"] == "unchanged"


def test_failure_messages():
    assert fail_args(OptionError("sharing.replicas", "bad")) == {"msg": "sharing.replicas: bad",
                                                                 "option": "sharing.replicas"}
    assert "exception" in fail_args(RuntimeError("boom"))


def test_container_reasons_say_why_a_plugin_pod_does_not_run():
    assert k8s_objects.container_reasons({"status": {"containerStatuses": [{"state": {"running": {}}}]}}) == ""
    crash = {"status": {"containerStatuses": [{
        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 5m0s restarting failed container"}},
        "lastState": {"terminated": {"exitCode": 1, "message": "Failed to initialize NVML: could not load NVML library\n"}}}]}}
    assert k8s_objects.container_reasons(crash) == (", CrashLoopBackOff: back-off 5m0s restarting failed container; last exit 1: "
                                                    "Failed to initialize NVML: could not load NVML library")


def _v100s(count):
    return {"present": True, "count": count,
            "devices": [{"index": i, "uuid": "GPU-%d" % i, "name": "Tesla V100-PCIE-16GB"} for i in range(count)]}


def test_facts_give_the_expected_counts_under_the_deployed_config():
    result = deployment.run(params(facts={"host-1": _v100s(4), "cpu-host": {"present": False, "count": 0}},
                                   node_names={"host-1": "kg-1"}, wait=False,
                                   sharing={"strategy": "time-slicing", "replicas": 4, "rename_by_default": True}),
                            client=FakeClient())
    assert result["expected"] == {"kg-1": {"nvidia.com/gpu.shared": 16}}


def test_bad_facts_or_a_refused_node_fail_before_connecting():
    def factory(_params):
        raise AssertionError("connected before validating")
    with pytest.raises(OptionError, match="facts: host-1 has no gpu fact"):
        deployment.run(params(facts={"host-1": None}), client_factory=factory)
    mixed = _v100s(2)
    mixed["devices"][0]["mig"] = {"current": True, "devices": [{"profile": "1g.10gb"}]}
    with pytest.raises(allocatable.PluginExit, match="node host-1: NVIDIA's device plugin would exit there: all devices "
                                                     "on the node must be configured with the same migEnabled value; "
                                                     "turn MIG on or off"):
        deployment.run(params(facts={"host-1": mixed}, mig_strategy="single"), client_factory=factory)


def test_absent_needs_no_facts():
    result = deployment.run(params(state="absent", facts={"host-1": None}, wait=False), client=FakeClient())
    assert result["expected"] == {}


def test_deploy_labels_can_be_left_out():
    pod = by_kind(manifests.render(params(deploy_labels=False)))["DaemonSet"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}


MPS4 = {"strategy": "mps", "replicas": 4}


def _daemonsets(objects):
    return dict((o["metadata"]["name"], o) for o in objects if o["kind"] == "DaemonSet")


def test_mps_runs_nvidias_control_daemon_as_the_chart_does():
    objects = manifests.render(params(sharing=MPS4))
    ds = _daemonsets(objects)
    assert sorted(ds) == ["nvidia-device-plugin-daemonset", "nvidia-device-plugin-mps-control-daemon"]
    daemon = ds["nvidia-device-plugin-mps-control-daemon"]["spec"]["template"]["spec"]
    assert daemon["nodeSelector"] == {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.deploy.device-plugin": "true",
                                      "nvidia.com/mps.capable": "true"}
    init, = daemon["initContainers"]
    assert init["command"] == ["mps-control-daemon", "mount-shm"] and init["securityContext"] == {"privileged": True}
    assert init["volumeMounts"] == [{"name": "mps-root", "mountPath": "/mps", "mountPropagation": "Bidirectional"}]
    ctr, = daemon["containers"]
    assert ctr["command"] == ["mps-control-daemon"] and ctr["securityContext"] == {"privileged": True}
    assert {"name": "CONFIG_FILE", "value": "/config/config.yaml"} in ctr["env"]
    assert dict((m["name"], m["mountPath"]) for m in ctr["volumeMounts"]) == {
        "mps-shm": "/dev/shm", "mps-root": "/mps", "config": "/config"}
    volumes = dict((v["name"], v) for v in daemon["volumes"])
    assert volumes["mps-root"]["hostPath"] == {"path": "/run/nvidia/mps", "type": "DirectoryOrCreate"}
    assert volumes["mps-shm"]["hostPath"] == {"path": "/run/nvidia/mps/shm"}
    plugin = ds["nvidia-device-plugin-daemonset"]["spec"]["template"]["spec"]
    mounts = dict((m["name"], m["mountPath"]) for m in plugin["containers"][0]["volumeMounts"])
    assert mounts["mps-root"] == "/mps" and mounts["mps-shm"] == "/dev/shm"
    # the plugin itself keeps the vendor's hardened context; only the daemon is privileged, as in the chart
    assert plugin["containers"][0]["securityContext"] == {"allowPrivilegeEscalation": False,
                                                          "capabilities": {"drop": ["ALL"]}}


PER_NODE = dict(mig_strategy="mixed", gfd=True, configs={"mps4": {"mig_strategy": "none", "sharing": MPS4}},
                node_configs={"host-t4": "mps4"}, node_names={"host-t4": "kg-t4"})


DEFAULT_AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "nvidia.com/device-plugin.config", "operator": "DoesNotExist"}]},
    {"matchExpressions": [{"key": "nvidia.com/device-plugin.config", "operator": "In", "values": ["default"]}]}]}}}


def test_per_node_configs_run_a_daemonset_each():
    objects = manifests.render(params(**PER_NODE))
    cm = by_kind(objects)["ConfigMap"]
    assert sorted(cm["data"]) == ["config.yaml", "mps4.yaml"]
    assert json.loads(cm["data"]["mps4.yaml"])["flags"]["migStrategy"] == "none"
    assert json.loads(cm["data"]["config.yaml"])["flags"]["migStrategy"] == "mixed"
    ds = _daemonsets(objects)
    assert sorted(ds) == ["gpu-feature-discovery", "gpu-feature-discovery-mps4", "nvidia-device-plugin-daemonset",
                          "nvidia-device-plugin-mps-control-daemon-mps4", "nvidia-device-plugin-mps4"]
    named = ds["nvidia-device-plugin-mps4"]["spec"]["template"]["spec"]
    assert named["nodeSelector"]["nvidia.com/device-plugin.config"] == "mps4"
    assert named["volumes"][1]["configMap"]["items"] == [{"key": "mps4.yaml", "path": "config.yaml"}]
    default = ds["nvidia-device-plugin-daemonset"]["spec"]["template"]["spec"]
    assert "nvidia.com/device-plugin.config" not in default["nodeSelector"]
    assert default["affinity"] == DEFAULT_AFFINITY
    gfd = ds["gpu-feature-discovery-mps4"]["spec"]["template"]["spec"]
    assert gfd["nodeSelector"]["nvidia.com/gpu.deploy.gpu-feature-discovery"] == "true"
    # no two selectors are the same, and a named config's never matches another DaemonSet's pods: each named config's
    # pods carry its name; the default's selector (the one earlier releases used) also matches named pods, which the
    # DaemonSet controller leaves to the controller that owns them
    selectors = [tuple(sorted(d["spec"]["selector"]["matchLabels"].items())) for d in ds.values()]
    assert len(set(selectors)) == len(selectors)
    for d in ds.values():
        assert d["spec"]["selector"]["matchLabels"].items() <= d["spec"]["template"]["metadata"]["labels"].items()
        if "mps4" in d["metadata"]["name"]:
            for other in ds.values():
                if other is not d:
                    assert not (d["spec"]["selector"]["matchLabels"].items()
                                <= other["spec"]["template"]["metadata"]["labels"].items())


def test_a_named_config_for_one_node_leaves_the_default_daemonsets_as_they_were():
    """Adding a named config (or removing one) must not change the default DaemonSets' pod template, or the plugin and
    GFD would roll on every node that kept the default."""
    two = dict(PER_NODE)
    two["configs"] = dict(PER_NODE["configs"], ts2={"sharing": {"strategy": "time-slicing", "replicas": 2}})
    two["node_configs"] = dict(PER_NODE["node_configs"], host_a="ts2")
    before, after = _daemonsets(manifests.render(params(**PER_NODE))), _daemonsets(manifests.render(params(**two)))
    assert "nvidia-device-plugin-ts2" in after
    for name in ("nvidia-device-plugin-daemonset", "gpu-feature-discovery"):
        assert after[name] == before[name]


@pytest.mark.parametrize("gfd, mps", [(False, False), (True, False), (True, True)])
def test_the_first_named_config_and_the_last_change_no_default_daemonset(gfd, mps):
    """Issue 26: with no named config the default DaemonSets are the very objects they are beside named ones (name,
    selector, pod template), so adding the first named config, or removing the last, restarts no pod of a node whose
    config stayed the default."""
    alone = params(gfd=gfd, sharing=MPS4 if mps else None)
    named = dict(alone, configs={"ts2": {"sharing": {"strategy": "time-slicing", "replicas": 2}}},
                 node_configs={"host-a": "ts2"}, node_names={"host-a": "kg-a"})
    before, after = _daemonsets(manifests.render(alone)), _daemonsets(manifests.render(named))
    assert set(before) < set(after) and "nvidia-device-plugin-ts2" in after
    for name in before:
        assert after[name] == before[name], name


@pytest.mark.parametrize("name, taken", [
    ("daemonset", "nvidia-device-plugin-daemonset"),
    ("mps-control-daemon", "nvidia-device-plugin-mps-control-daemon"),
    ("mps-control-daemon-x", "nvidia-device-plugin-mps-control-daemon-x"),
])
def test_a_config_name_that_would_take_another_daemonsets_name_is_refused(name, taken):
    with pytest.raises(OptionError, match="would give a named config's DaemonSet the name %s" % taken) as info:
        plugin_config.named_configs(params(configs={name: {"mig_strategy": "single"}}))
    assert info.value.option == "configs.%s" % name


def test_per_node_configs_predict_each_node_under_its_own():
    facts = {"host-t4": _v100s(1), "host-a": _v100s(2)}
    result = deployment.run(params(facts=facts, wait=False, **PER_NODE), client=FakeClient())
    assert result["expected"] == {"kg-t4": {"nvidia.com/gpu": 4}, "host-a": {"nvidia.com/gpu": 2}}
    assert sorted(result["configs"]) == ["default", "mps4"]


@pytest.mark.parametrize("configs, node_configs, option, words", [
    ({"default": {"sharing": MPS4}}, {}, "configs.default", "top-level options"),
    ({"Bad_Name": {}}, {}, "configs.Bad_Name", "DNS label"),
    ({"x" * 21: {}}, {}, "configs." + "x" * 21, "at most 20"),
    ({"mps": {"replicas": 4}}, {}, "configs.mps", "unknown option(s) replicas"),
    ({"mps": {"mig_strategy": "none", "sharing": {"strategy": "mps", "replicas": 1}}}, {}, "configs.mps.sharing.replicas",
     ">= 2"),
    ({"mps": {"sharing": MPS4}}, {}, "configs.mps.sharing.strategy", "mixed"),  # inherits mig_strategy mixed
    ({}, {"n1": "nope"}, "node_configs.n1", "'nope' is not a config"),
])
def test_bad_configs_name_the_option(configs, node_configs, option, words):
    def factory(_params):
        raise AssertionError("connected before validating")
    with pytest.raises(OptionError) as err:
        deployment.run(params(mig_strategy="mixed", configs=configs, node_configs=node_configs, facts={"n1": _v100s(1)}),
                       client_factory=factory)
    assert err.value.option == option and words in err.value.message


def test_every_node_the_plugin_would_exit_on_is_named_before_connecting():
    def factory(_params):
        raise AssertionError("connected before validating")
    lost = _v100s(2)
    lost["devices"][1] = {"index": 1, "healthy": False, "errors": {"handle": "GPU is lost"},
                          "nvml_returns": {"nvmlDeviceGetHandleByIndex": "GPU_IS_LOST"}}
    no_cc = _v100s(1)
    no_cc["devices"][0]["nvml_returns"] = {"nvmlDeviceGetCudaComputeCapability": "NOT_SUPPORTED"}
    with pytest.raises(KubegpuError) as err:
        deployment.run(params(facts={"h1": lost, "h2": no_cc, "h3": _v100s(1)}), client_factory=factory)
    assert err.value.details["nodes"] == {
        "h1": "error getting device handle for index '1': GPU_IS_LOST",
        "h2": "error visiting device 0: error getting device compute capability: NOT_SUPPORTED"}
    assert "would exit on 2 nodes" in err.value.message and "drain the node" in err.value.message


def test_an_mps_node_where_no_daemon_can_run_is_refused_before_connecting():
    """MPS under mig_strategy none on a node with a GPU in MIG mode: the plugin would wait for NVIDIA's MPS control
    daemon, which runs only where nvidia.com/mps.capable=true, which GFD never writes there. Named with the reason and
    what to do; the other nodes and the other configs are not touched by the refusal."""
    def factory(_params):
        raise AssertionError("connected before validating")
    mig_on = _v100s(2)
    mig_on["devices"][0]["mig"] = {"capable": True, "current": True, "devices": [{"profile": "1g.10gb"}]}
    mps = {"strategy": "mps", "replicas": 4}
    with pytest.raises(allocatable.NoMpsDaemon) as err:
        deployment.run(params(facts={"gpu-7": mig_on, "gpu-8": _v100s(1)}, sharing=mps), client_factory=factory)
    assert err.value.details["nodes"] == {"gpu-7": "error creating sharing labeler: failed to check MPS-capable: MPS "
                                                   "sharing is not supported for mig devices"}
    assert err.value.message.startswith("node gpu-7: NVIDIA's device plugin would advertise nothing there")
    assert "nvidia.com/mps.capable=true" in err.value.message and "turn MIG off" in err.value.message
    # the same node under a config without MPS is fine
    result = deployment.run(params(facts={"gpu-7": mig_on, "gpu-8": _v100s(1)}, sharing=mps, wait=False,
                                   configs={"ts": {"sharing": {"strategy": "time-slicing", "replicas": 2}}},
                                   node_configs={"gpu-7": "ts"}), client=FakeClient())
    assert result["expected"] == {"gpu-7": {"nvidia.com/gpu": 4}, "gpu-8": {"nvidia.com/gpu": 4}}


# --- Issue 26: the device list and MIG strategies get what NVIDIA's chart gives the plugin for them -------------------
# deployments/helm/nvidia-device-plugin/templates/daemonset-device-plugin.yml and _helpers.tpl (NVIDIA/k8s-device-plugin
# 1b826ac): /var/run/cdi (hostPath DirectoryOrCreate) where the plugin writes its CDI spec (internal/cdi/cdi.go), the
# driver root read-only at /driver-root (hostPath Directory) from which it generates the spec, NVIDIA_MIG_MONITOR_DEVICES
# for MIG, and SYS_ADMIN (requiresCapSysAdmin) for MIG or volume-mounts.
CHART_CDI_MOUNTS = [{"name": "driver-root", "mountPath": "/driver-root", "readOnly": True},
                    {"name": "cdi-root", "mountPath": "/var/run/cdi"}]


def _plugin_container(objects, name="nvidia-device-plugin-daemonset"):
    pod = _daemonsets(objects)[name]["spec"]["template"]["spec"]
    return pod["containers"][0], dict((v["name"], v) for v in pod["volumes"])


@pytest.mark.parametrize("strategy", [["cdi-cri"], ["cdi-annotations"], ["envvar", "cdi-cri"], "cdi-cri"])
def test_a_cdi_strategy_mounts_the_cdi_spec_dir_and_the_driver_root_as_the_chart_does(strategy):
    ctr, volumes = _plugin_container(manifests.render(params(device_list_strategy=strategy)))
    assert [m for m in ctr["volumeMounts"] if m["name"] in ("driver-root", "cdi-root")] == CHART_CDI_MOUNTS
    assert volumes["cdi-root"]["hostPath"] == {"path": "/var/run/cdi", "type": "DirectoryOrCreate"}
    assert volumes["driver-root"]["hostPath"] == {"path": "/", "type": "Directory"}
    # nothing else changes: the hardened context, the env
    assert ctr["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert ctr["env"] == [{"name": "CONFIG_FILE", "value": "/config/config.yaml"}]


def test_a_driver_container_root_is_what_the_cdi_strategy_mounts():
    ctr, volumes = _plugin_container(manifests.render(params(device_list_strategy=["cdi-cri"],
                                                             nvidia_driver_root="/run/nvidia/driver")))
    assert volumes["driver-root"]["hostPath"] == {"path": "/run/nvidia/driver", "type": "Directory"}


@pytest.mark.parametrize("strategy", [["envvar"], ["volume-mounts"]])
def test_the_other_strategies_mount_neither(strategy):
    ctr, volumes = _plugin_container(manifests.render(params(device_list_strategy=strategy)))
    assert not set(volumes) & {"driver-root", "cdi-root"}
    assert not set(m["name"] for m in ctr["volumeMounts"]) & {"driver-root", "cdi-root"}


@pytest.mark.parametrize("over, sys_admin, mig_env", [
    ({}, False, False),
    ({"device_list_strategy": ["volume-mounts"]}, True, False),
    ({"mig_strategy": "single"}, True, True),
    ({"mig_strategy": "mixed", "device_list_strategy": ["cdi-cri"]}, True, True),
])
def test_mig_and_volume_mounts_get_the_charts_capability_and_env(over, sys_admin, mig_env):
    ctr, _volumes = _plugin_container(manifests.render(params(**over)))
    assert (ctr["securityContext"] == {"capabilities": {"add": ["SYS_ADMIN"]}}) is sys_admin
    assert ({"name": "NVIDIA_MIG_MONITOR_DEVICES", "value": "all"} in ctr["env"]) is mig_env


def test_each_named_config_gets_what_its_own_strategies_need():
    objects = manifests.render(params(**dict(PER_NODE, device_list_strategy=["cdi-cri"])))
    default, _v = _plugin_container(objects)  # mixed MIG
    mps4, _v = _plugin_container(objects, "nvidia-device-plugin-mps4")  # MIG none
    assert default["securityContext"] == {"capabilities": {"add": ["SYS_ADMIN"]}}
    assert mps4["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    for ctr in (default, mps4):
        assert [m for m in ctr["volumeMounts"] if m["name"] in ("driver-root", "cdi-root")] == CHART_CDI_MOUNTS
