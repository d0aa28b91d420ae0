# SPDX-License-Identifier: GPL-3.0-or-later
"""dra_host_prep on this machine, with containerd's own binaries as the judges of what a config turns on:

- containerd 1.6 (Debian's, on this host) is refused before anything is done, with the reason;
- containerd 2.x (CONTAINERD2, `make containerd2`) has CDI on: nothing to turn on;
- containerd 1.7 (CONTAINERD17, `make containerd17`) has CDI behind enable_cdi: a version 2 config without it says
  cdi.enable; nvidia_runtime_config cdi=true (the machinery the role uses) turns it on, and containerd 1.7's own
  config dump then says it is on; a CDI spec newer than a runtime reads is refused, naming the one to generate;
- NVIDIA's device nodes, under a dev root of this test's own, with NVIDIA's own nvidia-ctk (NVIDIA_CTK, `make
  nvidia-ctk`): check mode names the missing ones, a real run asks nvidia-ctk (which fails here: this machine has no
  NVIDIA driver, so no device numbers), present ones change nothing.

The kubelet's root dir is given: a kubelet of another test's node container may run on this machine, and its /proc
entry is visible here (the finding itself is tests/unit/plugins/module_utils/test__kubelet.py's).
"""

import os
import shutil

import pytest

from ansible_cli import run_module
from setup_steps import missing_setup

MODULE = "kubegpu.cluster.dra_host_prep"
CONTAINERD = shutil.which("containerd") or next((p for p in ("/usr/sbin/containerd", "/usr/bin/containerd")
                                                 if os.path.exists(p)), None)
CONTAINERD2 = os.environ.get("CONTAINERD2")
CONTAINERD17 = os.environ.get("CONTAINERD17")
NVIDIA_CTK = os.environ.get("NVIDIA_CTK")
DEVICES = ["nvidiactl", "nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools"]


def _on_path(binary):
    return {"PATH": os.path.dirname(binary) + os.pathsep + os.environ.get("PATH", "")}


def prep(args, check=False, binary=None):
    base = dict(kubelet_root_dir="/var/lib/kubelet", device_nodes=False)
    base.update(args)
    return run_module(MODULE, base, check=check, env=_on_path(binary) if binary else None, timeout=300)


@pytest.fixture
def containerd2():
    if not CONTAINERD2 or not os.access(CONTAINERD2, os.X_OK):
        missing_setup("set CONTAINERD2 to a containerd 2.x binary (make containerd2 builds one)")
    return CONTAINERD2


@pytest.mark.parametrize("check", [True, False])
def test_containerd_16_is_refused_with_the_reason(tmp_path, check):
    # Debian bookworm's containerd (1.6), which make test-setup's host packages install
    if CONTAINERD is None or "1.6." not in os.popen(CONTAINERD + " --version").read():
        missing_setup("no containerd 1.6 binary on this host (make host-packages installs Debian's)")
    config = tmp_path / "config.toml"
    config.write_text('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  enable_cdi = true\n')
    rc, result = prep({"runtime": "containerd", "containerd_config": str(config)}, check=check, binary=CONTAINERD)
    assert rc != 0 and "containerd 1.6" in result["msg"] and "CDIDevices" in result["msg"], result


def test_docker_is_refused_with_the_reason():
    rc, result = prep({"runtime": "docker"})
    assert rc != 0 and "cri-dockerd" in result["msg"] and "CDIDevices" in result["msg"], result


def test_containerd_2_has_cdi_on(tmp_path, containerd2):
    config = tmp_path / "config.toml"
    config.write_text("version = 3\n")
    rc, result = prep({"runtime": "containerd", "containerd_config": str(config)}, binary=containerd2)
    assert rc == 0, result
    assert result["runtime_version"].startswith("2.")
    assert result["cdi"] == {"cdi": "on", "enable": False, "max_spec_version": "0.7.0"}
    assert result["kubelet_root_dir"] == "/var/lib/kubelet"
    assert result["kubelet"]["registrar_dir"] == "/var/lib/kubelet/plugins_registry"


def test_cdi_turned_on_through_nvidia_runtime_config(tmp_path):
    if not CONTAINERD17 or not os.access(CONTAINERD17, os.X_OK):
        missing_setup("set CONTAINERD17 to a containerd 1.7 binary (make containerd17 builds one)")
    config = tmp_path / "config.toml"
    config.write_text('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "registry.k8s.io/pause:3.10"\n')
    args = {"runtime": "containerd", "containerd_config": str(config)}
    rc, before = prep(args, binary=CONTAINERD17)
    assert rc == 0 and before["runtime_version"].startswith("1.7."), before
    assert before["cdi"] == {"cdi": "off", "enable": True, "max_spec_version": "0.7.0"}, before
    rc, spec_refused = prep(dict(args, runtime_version="1.7.15", cdi_spec_version="0.7.0"), binary=CONTAINERD17)
    assert rc != 0 and "generate the spec as 0.6.0" in spec_refused["msg"], spec_refused
    rc, turned = run_module("kubegpu.cluster.nvidia_runtime_config",
                            {"runtime": "containerd", "config_path": str(config), "cdi": True,
                             "set_as_default": False}, env=_on_path(CONTAINERD17), timeout=300)
    assert rc == 0 and turned["changed"], turned  # validated by containerd 1.7's own config dump of the candidate
    rc, after = prep(args, binary=CONTAINERD17)
    assert rc == 0 and after["cdi"] == {"cdi": "on", "enable": False, "max_spec_version": "0.7.0"}, after


def test_device_nodes(tmp_path, containerd2):
    if not NVIDIA_CTK or not os.access(NVIDIA_CTK, os.X_OK):
        missing_setup("set NVIDIA_CTK to an nvidia-ctk binary (make nvidia-ctk builds one)")
    (tmp_path / "dev").mkdir()
    config = tmp_path / "config.toml"
    config.write_text("version = 3\n")
    args = {"runtime": "containerd", "containerd_config": str(config), "device_nodes": True,
            "nvidia_ctk_path": NVIDIA_CTK, "dev_root": str(tmp_path)}
    rc, check = prep(args, check=True, binary=containerd2)
    assert rc == 0 and check["changed"] and check["device_nodes"] == {"missing": DEVICES, "created": DEVICES}, check
    assert os.listdir(str(tmp_path / "dev")) == []
    rc, real = prep(args, binary=containerd2)  # nvidia-ctk itself runs, and finds no NVIDIA driver on this machine
    assert rc != 0 and "nvidia-ctk could not create NVIDIA's device nodes" in real["msg"], real
    for name in DEVICES:
        (tmp_path / "dev" / name).write_text("")
    rc, present = prep(args, binary=containerd2)
    assert rc == 0 and not present["changed"] and present["device_nodes"] == {"missing": [], "created": []}, present
