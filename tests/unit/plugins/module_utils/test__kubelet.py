# SPDX-License-Identifier: GPL-3.0-or-later
"""The kubelet's root dir and CRI endpoint, read from a /proc of this test's own making."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.cluster.plugins.module_utils import _kubelet


def _proc(tmp_path, processes):
    proc = tmp_path / "proc"
    for pid, argv in processes.items():
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (proc / "self").mkdir(parents=True, exist_ok=True)
    return str(proc)


def test_root_dir_and_endpoint_from_the_command_line(tmp_path):
    proc = _proc(tmp_path, {1: ["/sbin/init"], 812: ["/var/lib/k0s/bin/kubelet", "--root-dir=/var/lib/k0s/kubelet",
                                                     "--container-runtime-endpoint", "unix:///run/k0s/containerd.sock"]})
    found = _kubelet.find(proc=proc)
    assert found["root_dir"] == "/var/lib/k0s/kubelet" and found["pid"] == 812
    assert found["registrar_dir"] == "/var/lib/k0s/kubelet/plugins_registry"
    assert found["plugins_dir"] == "/var/lib/k0s/kubelet/plugins"
    assert found["runtime_endpoint"] == "unix:///run/k0s/containerd.sock"
    assert found["source"] == "kubelet command line (pid 812)"


def test_microk8s_kubelite_args_file(tmp_path):
    args = tmp_path / "kubelet"
    args.write_text("# the snap's wrapper expands the variables\n--root-dir=${SNAP_COMMON}/var/lib/kubelet\n"
                    "--container-runtime-endpoint=${SNAP_COMMON}/run/containerd.sock\n")
    proc = _proc(tmp_path, {40: ["/snap/microk8s/1/kubelite", "--kubelet-args-file=%s" % args]})
    found = _kubelet.find(proc=proc)
    assert found["root_dir"] == "/var/snap/microk8s/common/var/lib/kubelet"
    assert found["runtime_endpoint"] == "/var/snap/microk8s/common/run/containerd.sock"


def test_endpoint_from_the_config_file_and_the_default_root(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("kind: KubeletConfiguration\ncontainerRuntimeEndpoint: unix:///var/run/crio/crio.sock\n")
    proc = _proc(tmp_path, {7: ["/usr/bin/kubelet", "--config", str(config)]})
    found = _kubelet.find(proc=proc)
    assert found["root_dir"] == "/var/lib/kubelet" and found["runtime_endpoint"] == "unix:///var/run/crio/crio.sock"
    assert "has no --root-dir" in found["source"]


def test_no_kubelet_running_uses_the_distributions_default(tmp_path):
    proc = _proc(tmp_path, {1: ["/sbin/init"]})
    assert _kubelet.find(proc=proc, exists=lambda p: p == "/var/lib/k0s")["root_dir"] == "/var/lib/k0s/kubelet"
    micro = _kubelet.find(proc=proc, exists=lambda p: p == "/var/snap/microk8s")
    assert micro["root_dir"] == "/var/snap/microk8s/common/var/lib/kubelet" and "no kubelet running" in micro["source"]
    assert _kubelet.find(proc=proc, exists=lambda p: False)["root_dir"] == "/var/lib/kubelet"
    assert _kubelet.find("/srv/kubelet/", proc=proc)["root_dir"] == "/srv/kubelet"
