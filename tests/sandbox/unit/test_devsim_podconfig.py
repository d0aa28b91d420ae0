# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests of sandbox.k8s.devsim.podconfig: finding the plugin container and its config source."""

import pytest

from sandbox.k8s.devsim.podconfig import ConfigRef, is_plugin_pod, plugin_inputs
from sandbox.k8s.devsim.rules import PluginError


def pod(containers, volumes=None, namespace="kube-system"):
    return {"metadata": {"name": "p", "namespace": namespace, "uid": "u1"}, "spec": {"containers": containers, "volumes": volumes or []}}


def plugin(**extra):
    container = {"name": "nvidia-device-plugin-ctr", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"}
    container.update(extra)
    return container


CM_VOLUME = {"name": "cfg", "configMap": {"name": "plugin-config"}}


@pytest.mark.parametrize("container, expected", [
    (plugin(), True),
    (plugin(command=["nvidia-device-plugin"]), True),
    (plugin(command=["/usr/bin/nvidia-device-plugin"], args=["--mig-strategy=mixed"]), True),
    (plugin(command=["gpu-feature-discovery"]), False),
    (plugin(command=["config-manager"]), False),
    (plugin(command=["mps-control-daemon"]), False),
    ({"name": "x", "image": "registry.k8s.io/pause:3.10"}, False),
    ({"name": "x", "image": "example.com/mirror/k8s-device-plugin:v0.17.1"}, True),
])
def test_plugin_pod_recognition(container, expected):
    assert is_plugin_pod(pod([container])) is expected


def test_helm_style_pod_picks_the_plugin_not_the_sidecar():
    sidecar = plugin(name="config-manager", command=["config-manager"])
    main = plugin(command=["nvidia-device-plugin"], env=[{"name": "CONFIG_FILE", "value": "/config/config.yaml"}],
                  volumeMounts=[{"name": "cfg", "mountPath": "/config"}])
    inputs = plugin_inputs(pod([sidecar, main], [CM_VOLUME]))
    assert inputs.container == "nvidia-device-plugin-ctr"
    assert inputs.config_ref == ConfigRef("kube-system", "plugin-config", "config.yaml")


def test_no_config_file():
    inputs = plugin_inputs(pod([plugin(env=[{"name": "MIG_STRATEGY", "value": "mixed"}])]))
    assert inputs.config_ref is None
    assert inputs.env == {"MIG_STRATEGY": "mixed"}


def test_config_file_from_cli_wins_over_env():
    container = plugin(args=["--config-file", "/etc/dp/b.yaml"], env=[{"name": "CONFIG_FILE", "value": "/etc/dp/a.yaml"}],
                       volumeMounts=[{"name": "cfg", "mountPath": "/etc/dp"}])
    assert plugin_inputs(pod([container], [CM_VOLUME])).config_ref.key == "b.yaml"


def test_items_map_paths_to_keys():
    volume = {"name": "cfg", "configMap": {"name": "plugin-config", "items": [{"key": "time-slicing", "path": "sub/config.yaml"}]}}
    container = plugin(env=[{"name": "CONFIG_FILE", "value": "/config/sub/config.yaml"}], volumeMounts=[{"name": "cfg", "mountPath": "/config"}])
    assert plugin_inputs(pod([container], [volume])).config_ref == ConfigRef("kube-system", "plugin-config", "time-slicing")


def test_sub_path_mount_of_one_key():
    container = plugin(env=[{"name": "CONFIG_FILE", "value": "/etc/nvidia/config.yaml"}],
                       volumeMounts=[{"name": "cfg", "mountPath": "/etc/nvidia/config.yaml", "subPath": "any.yaml"}])
    assert plugin_inputs(pod([container], [CM_VOLUME])).config_ref.key == "any.yaml"


def test_longest_mount_wins():
    container = plugin(env=[{"name": "CONFIG_FILE", "value": "/config/dp/config.yaml"}],
                       volumeMounts=[{"name": "other", "mountPath": "/config"}, {"name": "cfg", "mountPath": "/config/dp"}])
    volumes = [{"name": "other", "emptyDir": {}}, CM_VOLUME]
    assert plugin_inputs(pod([container], volumes)).config_ref.name == "plugin-config"


def test_projected_configmap():
    volume = {"name": "cfg", "projected": {"sources": [{"secret": {"name": "s"}}, {"configMap": {"name": "plugin-config", "optional": True}}]}}
    container = plugin(env=[{"name": "CONFIG_FILE", "value": "/config/config.yaml"}], volumeMounts=[{"name": "cfg", "mountPath": "/config"}])
    assert plugin_inputs(pod([container], [volume])).config_ref == ConfigRef("kube-system", "plugin-config", "config.yaml", True)


@pytest.mark.parametrize("mounts, volumes, message", [
    ([], [], "not inside any volumeMount"),
    ([{"name": "cfg", "mountPath": "/config"}], [{"name": "cfg", "emptyDir": {}}], "cannot read"),
    ([{"name": "cfg", "mountPath": "/config"}], [{"name": "cfg", "hostPath": {"path": "/etc"}}], "cannot read"),
    ([{"name": "cfg", "mountPath": "/config"}], [], "missing volume"),
    ([{"name": "cfg", "mountPath": "/config/config.yaml"}], [CM_VOLUME], "names a directory"),
])
def test_unreadable_config_sources(mounts, volumes, message):
    container = plugin(env=[{"name": "CONFIG_FILE", "value": "/config/config.yaml"}], volumeMounts=mounts)
    with pytest.raises(PluginError, match=message):
        plugin_inputs(pod([container], volumes))


def test_value_from_env_is_noted_and_ignored():
    container = plugin(env=[{"name": "MIG_STRATEGY", "valueFrom": {"configMapKeyRef": {"name": "x", "key": "y"}}}])
    inputs = plugin_inputs(pod([container]))
    assert "MIG_STRATEGY" not in inputs.env
    assert inputs.notes
