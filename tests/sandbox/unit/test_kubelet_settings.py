# SPDX-License-Identifier: GPL-3.0-or-later
"""The kubelet nodes' settings, without a node (sandbox/kubelet): which fleet nodes are kubelet nodes, what they
register with, the KubeletConfiguration's cgroup v1 choices, the pod network, and the containerd keys changed in place."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sandbox.k8s import nodes
from sandbox.kubelet import cluster, config, node

ROOT = Path(__file__).resolve().parents[3]
FLEET = [{"name": "a", "variant": "gpu", "profile": "t4"}, {"name": "b", "variant": "base", "kubelet": True},
         {"name": "c", "variant": "nodriver"}]


def test_fleet_opt_in_and_switch():
    assert [n["name"] for n in cluster.select(FLEET)] == ["b"]
    assert [n["name"] for n in cluster.select(FLEET, "none")] == []
    assert [(n["name"], n["index"]) for n in cluster.select(FLEET, "all")] == [("a", 1), ("b", 2), ("c", 3)]
    assert [n["name"] for n in cluster.select(FLEET, "c,a")] == ["a", "c"]
    with pytest.raises(ValueError, match="not fleet nodes: x"):
        cluster.select(FLEET, "a,x")


def test_the_shipped_fleets_nvidia_gpu_nodes_are_kubelet_nodes():
    # `make sandbox-up` / `make demo`: the NVIDIA GPU nodes run a real kubelet; AMD, Intel, CPU-only and no-driver
    # nodes stay kwok nodes (sandbox/kubelet/README.md, "Which fleet nodes")
    fleet = nodes.load_fleet()
    chosen = [n["name"] for n in cluster.select(fleet)]
    assert chosen == [n["name"] for n in fleet if n.get("variant") == "gpu"] and len(chosen) == 5, chosen


def test_kubelet_nodes_get_no_kwok_node():
    names = [m["metadata"]["name"] for m in nodes.fleet_manifests("1.36.3", skip={"kg-t4"})]
    assert "kg-t4" not in names and "kg-v100" in names


def test_a_fleet_node_can_be_another_container():
    # molecule's platforms: the container md-a registers as the fleet node a (a site whose host and node names differ)
    chosen = cluster.select(FLEET, "a=md-a,c")
    assert [(n["name"], cluster.container_of(n), n["index"]) for n in chosen] == [("a", "md-a", 1), ("c", "c", 3)]
    with pytest.raises(ValueError, match="not fleet nodes: md-a"):
        cluster.select(FLEET, "md-a=a")


def test_labels_mark_fleet_role_and_kubelet():
    assert cluster.labels_for(FLEET[0]) == {config.KUBELET_LABEL: "true", nodes.ROLE_LABEL: "gpu", nodes.FLEET_LABEL: "true"}
    assert nodes.FLEET_LABEL not in cluster.labels_for(FLEET[0], fleet=False)


def test_kubelet_configuration_fits_cgroup_v1_and_containerd_16():
    conf = node.kubelet_configuration()
    assert conf["failCgroupV1"] is False and conf["cgroupDriver"] == "systemd"
    assert conf["failSwapOn"] is False
    assert conf["authentication"]["anonymous"]["enabled"] is False and conf["authorization"]["mode"] == "Webhook"
    assert conf["cpuManagerPolicy"] == "static" and conf["memoryManagerPolicy"] == "Static"
    # the Static memory manager wants reservedMemory to add up to the reservations (here: the eviction threshold)
    assert conf["reservedMemory"][0]["limits"]["memory"] == conf["evictionHard"]["memory.available"]
    assert "registerWithTaints" not in conf
    assert node.kubelet_configuration(gpu_taint=True)["registerWithTaints"][0]["key"] == "nvidia.com/gpu"


def test_kubeconfig_checks_the_api_server_by_a_name_its_certificate_has():
    from sandbox.k8s import pki  # pylint: disable=import-outside-toplevel
    kc = yaml.safe_load(node.kubeconfig("https://172.17.0.1:1234", b"ca", b"cert", b"key", "n1"))
    cluster_entry = kc["clusters"][0]["cluster"]
    assert "DNS:" + cluster_entry["tls-server-name"] in pki.LEAVES["kube-apiserver"][2]
    assert kc["users"][0]["name"] == "system:node:n1"


def test_pod_network_per_node():
    conf = json.loads(node.cni_conflist(3, config.read_env()["POD_SUBNET_PREFIX"]))
    assert conf["name"] == config.CNI_NETWORK
    assert conf["plugins"][0]["ipam"]["ranges"] == [[{"subnet": "10.244.3.0/24"}]]
    assert {p["type"] for p in conf["plugins"]} <= set(config.CNI_PLUGINS)


def test_containerd_keys_change_in_place(tmp_path):
    # the script runs under this venv's python, whose tomlkit requirements.txt pins (a missing one fails here)
    script = (config.NODE_FILES / "containerd_cri.py").read_text(encoding="utf-8")
    target = tmp_path / "config.toml"
    target.write_text('version = 2\n# kept\n[plugins."io.containerd.grpc.v1.cri".containerd]\n  default_runtime_name = "nvidia"\n')
    code = script.replace('PATH = "/etc/containerd/config.toml"', "PATH = %r" % str(target))
    pause = config.read_env()["PAUSE_IMAGE"]
    run = [sys.executable, "-c", code, pause]
    first = subprocess.run(run, capture_output=True, text=True, check=True)
    second = subprocess.run(run, capture_output=True, text=True, check=True)
    assert (first.stdout.strip(), second.stdout.strip()) == ("changed", "unchanged")
    import tomlkit  # pylint: disable=import-outside-toplevel
    text = target.read_text()
    cri = tomlkit.parse(text)["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == pause and cri["restrict_oom_score_adj"] is True
    assert cri["containerd"]["default_runtime_name"] == "nvidia" and "# kept" in text
    assert cri["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is True
    assert cri["containerd"]["runtimes"]["runc"]["privileged_without_host_devices"] is True


def test_inotify_limit_is_what_make_raises_it_to():
    rules = (config.HERE / "rules.mk").read_text(encoding="utf-8")
    assert "KUBELET_INOTIFY_INSTANCES ?= %d\n" % cluster.INOTIFY_WANTED in rules
    assert cluster.inotify_limit() >= 1


def test_containerd_2_nodes_get_config_version_3_with_cdi(tmp_path):
    """``containerd_cri.py --v3`` (a node with ``containerd: "2"``): the node image's version 2 file is kept aside, the
    settings land at their version 3 places with CDI's spec directories, a second run changes nothing, and containerd
    2.x itself reads the file (when the cached binary is there)."""
    script = (config.NODE_FILES / "containerd_cri.py").read_text(encoding="utf-8")
    target = tmp_path / "config.toml"
    target.write_text('version = 2\n[plugins."io.containerd.grpc.v1.cri".cni]\n  bin_dir = "/usr/lib/cni"\n')
    code = script.replace('PATH = "/etc/containerd/config.toml"', "PATH = %r" % str(target))
    pause = config.read_env()["PAUSE_IMAGE"]
    run = [sys.executable, "-c", code, pause, "--v3"]
    first = subprocess.run(run, capture_output=True, text=True, check=True)
    second = subprocess.run(run, capture_output=True, text=True, check=True)
    assert (first.stdout.strip(), second.stdout.strip()) == ("changed", "unchanged")
    assert (tmp_path / "config.toml.v2").read_text().startswith("version = 2")
    import tomlkit  # pylint: disable=import-outside-toplevel
    doc = tomlkit.parse(target.read_text())
    assert doc["version"] == 3
    assert doc["plugins"]["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"] == pause
    runtime = doc["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["cdi_spec_dirs"] == ["/etc/cdi", "/var/run/cdi"] and runtime["restrict_oom_score_adj"] is True
    runc = runtime["containerd"]["runtimes"]["runc"]
    assert runc["options"]["SystemdCgroup"] is True and runc["privileged_without_host_devices"] is True
    assert "enable_cdi" not in runtime  # always on in 2.x, and dropped by its migration
    daemon = config.containerd2_binaries()["containerd"]
    if not daemon.exists():
        print("containerd 2.x not built (make containerd2): the file is not checked with containerd itself")
        return
    dump = subprocess.run([str(daemon), "--config", str(target), "config", "dump"], capture_output=True, text=True,
                          check=True, timeout=60).stdout.replace("'", '"')
    assert 'cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]' in dump and "SystemdCgroup = true" in dump, dump[:2000]


def test_containerd_choice_per_fleet_node():
    assert config.wants_containerd2({"name": "a", "containerd": "2"}) is True
    assert config.wants_containerd2({"name": "a", "containerd": 2}) is True
    assert config.wants_containerd2({"name": "a"}) is False and config.wants_containerd2({"containerd": "1.6"}) is False
    with pytest.raises(ValueError, match="containerd"):
        config.wants_containerd2({"name": "a", "containerd": "1.7"})
    assert config.containerd2_version() in str(config.containerd2_binaries()["containerd-shim-runc-v2"])
