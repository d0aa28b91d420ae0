# SPDX-License-Identifier: GPL-3.0-or-later
"""A GPU node's side of nano-gpu (module_utils/_nanogpu/host.py): the decision whether nano-gpu can work on a node,
from data only, one reason per case with what to do; the readers of the toolkit's mode, docker's default runtime and
the kubelet's runtime; and the backup / way back on binaries in a temporary directory, replaced the way
nano-gpu-agent's installer replaces them (the hook moved away, the toolkit renamed to -bak, nano-gpu's copied in)."""

import json
import os
import shutil
import stat

import pytest

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import FileError, KubegpuError
from ansible_collections.kubegpu.cluster.plugins.module_utils._nanogpu import constants as C
from ansible_collections.kubegpu.cluster.plugins.module_utils._nanogpu import host as H

GOOD = {
    "hostname": "gpu-1", "nvidia_gpus": 2,
    "binaries": {C.HOOK_PATH: {"exists": True, "kind": "file"}, C.TOOLKIT_PATH: {"exists": True, "kind": "symlink"}},
    "packages": {"nvidia-container-toolkit": "1.17.8-1"}, "held": [], "toolkit_version": (1, 17, 8), "mode": "auto",
    "docker": True, "docker_default": "nvidia", "docker_source": "docker info",
    "kubelet_runtime": "docker", "kubelet_endpoint": "unix:///run/cri-dockerd.sock",
    "kubelet_source": "/var/lib/kubelet/kubeadm-flags.env", "backed_up": False, "record": None, "leftovers": [],
    "apt_mark": None,
}


def observed(**changes):
    return dict(GOOD, **changes)


def test_a_node_that_can_work_has_no_problem():
    assert H.problems(GOOD) == []
    assert H.problems(observed(mode="legacy", toolkit_version=(1, 20, 0))) == []
    assert H.warnings_for(GOOD) == []


@pytest.mark.parametrize("changes, words", [
    ({"nvidia_gpus": 0}, "no NVIDIA GPU is on the PCI bus"),
    ({"binaries": {C.HOOK_PATH: None, C.TOOLKIT_PATH: {"exists": True}}},
     "/usr/bin/nvidia-container-runtime-hook is missing: install the NVIDIA container toolkit first"),
    ({"binaries": {}}, "/usr/bin/nvidia-container-runtime-hook and /usr/bin/nvidia-container-toolkit are missing"),
    ({"mode": "cdi"}, "not in legacy mode (mode is cdi, /etc/nvidia-container-runtime/config.toml)"),
    ({"mode": "auto", "toolkit_version": (1, 18, 0)}, "mode is auto, which is jit-cdi from toolkit 1.18.0 (installed: 1.18.0)"),
    ({"mode": "auto", "toolkit_version": None}, "(installed: unknown)"),
    ({"mode": "csv"}, "set mode = \"legacy\" under [nvidia-container-runtime]"),
    ({"docker": False, "docker_default": None}, "docker is not installed"),
    ({"docker_default": "runc", "docker_source": "docker info"},
     "docker's default runtime is runc (docker info), not nvidia: run the container_toolkit role with "
     "container_toolkit_set_as_default true"),
    ({"kubelet_runtime": "containerd", "kubelet_endpoint": "unix:///run/containerd/containerd.sock",
      "kubelet_source": "/var/lib/kubelet/config.yaml"},
     "the kubelet runs its pods on containerd (unix:///run/containerd/containerd.sock in /var/lib/kubelet/config.yaml)"),
    ({"leftovers": ["/usr/bin/mount_nano_gpu"]}, "nano-gpu-agent has run here already (/usr/bin/mount_nano_gpu)"),
])
def test_each_reason_says_why_and_what_to_do(changes, words):
    found = H.problems(observed(**changes))
    assert len(found) == 1, found
    assert words in found[0], found[0]


def test_leftovers_after_our_backup_are_expected():
    assert H.problems(observed(leftovers=list(C.AGENT_LEFTOVERS), backed_up=True)) == []


def test_an_unknown_kubelet_runtime_is_a_warning_not_a_refusal():
    node = observed(kubelet_runtime=None, kubelet_endpoint=None, kubelet_source=None)
    assert H.problems(node) == []
    assert "no kubelet configuration says which container runtime" in H.warnings_for(node)[0]


@pytest.mark.parametrize("mode, version, effective", [
    ("legacy", None, "legacy"), ("auto", (1, 17, 8), "legacy"), ("auto", (1, 18, 0), "jit-cdi"),
    ("auto", None, None), ("cdi", (1, 17, 0), "cdi"),
])
def test_effective_mode(mode, version, effective):
    assert H.effective_mode(mode, version) == effective


def test_toolkit_mode_from_config_toml():
    assert H.toolkit_mode(None) == "auto"
    assert H.toolkit_mode('[nvidia-container-runtime]\ndebug = "/var/log/x"\n') == "auto"
    assert H.toolkit_mode('[nvidia-container-runtime]\nmode = "legacy"\n') == "legacy"
    with pytest.raises(FileError, match="config.toml: field 'nvidia-container-runtime.mode': is not a string"):
        H.toolkit_mode('[nvidia-container-runtime]\nmode = 1\n')


def test_toolkit_mode_without_a_toml_reader(monkeypatch):
    from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime import common
    monkeypatch.setattr(common, "tomlkit", None)
    monkeypatch.setattr(common, "_tomllib", None)
    text = ('disable-require = false\n[nvidia-container-cli]\nmode = "x"\n[nvidia-container-runtime]\n'
            '#mode = "cdi"\nmode = "legacy"  # for nano-gpu\n[nvidia-container-runtime.modes.cdi]\n')
    assert H.toolkit_mode(text) == "legacy"
    assert H.toolkit_mode("[nvidia-container-runtime]\ndebug = 1\n") == "auto"


@pytest.mark.parametrize("texts, expected", [
    ({"/var/lib/kubelet/kubeadm-flags.env":
      'KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///var/run/cri-dockerd.sock --pod-infra-container-image=x"\n'},
     ("docker", "unix:///var/run/cri-dockerd.sock", "/var/lib/kubelet/kubeadm-flags.env")),
    ({"/etc/kubernetes/kubelet.env": "KUBELET_ARGS=--container-runtime=docker\n"},
     ("docker", "dockershim", "/etc/kubernetes/kubelet.env")),
    ({"/var/lib/kubelet/config.yaml": "kind: KubeletConfiguration\ncontainerRuntimeEndpoint: unix:///run/containerd/containerd.sock\n"},
     ("containerd", "unix:///run/containerd/containerd.sock", "/var/lib/kubelet/config.yaml")),
    ({"/var/lib/kubelet/config.yaml": "containerRuntimeEndpoint: \"unix:///var/run/crio/crio.sock\"\n",
      "/var/lib/kubelet/kubeadm-flags.env": 'KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/cri-dockerd.sock"'},
     ("docker", "unix:///run/cri-dockerd.sock", "/var/lib/kubelet/kubeadm-flags.env")),  # a flag beats the config
    ({}, (None, None, None)),
])
def test_kubelet_runtime(texts, expected):
    assert H.kubelet_runtime(texts) == expected


def test_docker_default_from_the_daemon_else_daemon_json():
    assert H.docker_default((0, json.dumps({"DefaultRuntime": "nvidia", "Runtimes": {}}), ""), None) == ("nvidia", "docker info")
    assert H.docker_default((1, "", "Cannot connect"), '{"default-runtime": "nvidia"}')[0] == "nvidia"
    assert H.docker_default(None, None)[0] == "runc"
    with pytest.raises(FileError, match="/etc/docker/daemon.json: is not JSON"):
        H.docker_default(None, "{")


# --- The backup and the way back, on files in tmp_path -------------------------------------------------------------

class FakeHost(object):
    def __init__(self):
        self.calls = []

    def run_command(self, argv):
        self.calls.append(argv)
        return 0, "", ""

    def get_bin_path(self, name):
        return None


@pytest.fixture
def bins(tmp_path, monkeypatch):
    usr_bin = tmp_path / "usr" / "bin"
    usr_bin.mkdir(parents=True)
    hook = usr_bin / "nvidia-container-runtime-hook"
    hook.write_bytes(b"#!/bin/sh\n# NVIDIA's hook\n")
    os.chmod(hook, 0o755)
    toolkit = usr_bin / "nvidia-container-toolkit"
    os.symlink(str(hook), str(toolkit))  # as NVIDIA's deb's postinst makes it
    monkeypatch.setattr(C, "REPLACED_BINARIES", (str(hook), str(toolkit)))
    monkeypatch.setattr(C, "AGENT_LEFTOVERS", (str(usr_bin / "mount_nano_gpu"), str(usr_bin / "nvidia-container-toolkit-bak")))
    return {"hook": str(hook), "toolkit": str(toolkit), "dir": str(usr_bin), "state_dir": str(tmp_path / "state")}


def node_now(bins, **changes):
    binaries = dict((p, H.describe(p)) for p in C.REPLACED_BINARIES)
    record = H.read_record(bins["state_dir"])
    leftovers = [p for p in C.AGENT_LEFTOVERS if os.path.lexists(p)]
    return observed(binaries=binaries, record=record, backed_up=record is not None, leftovers=leftovers, **changes)


def agent_installs(bins):
    """What nano-gpu-agent's tools/install.sh does to the host (through its /host mount)."""
    os.unlink(bins["hook"])  # mv /host/usr/bin/nvidia-container-runtime-hook into the container
    os.rename(bins["toolkit"], os.path.join(bins["dir"], "nvidia-container-toolkit-bak"))
    for name in ("nvidia-container-runtime-hook", "nvidia-container-toolkit", "mount_nano_gpu"):
        path = os.path.join(bins["dir"], name)
        with open(path, "wb") as handle:
            handle.write(b"\x7fELF nano-gpu's " + name.encode())
        os.chmod(path, 0o700)


def snapshot(bins):
    out = {}
    for name in sorted(os.listdir(bins["dir"])):
        path = os.path.join(bins["dir"], name)
        info = os.lstat(path)
        out[name] = (stat.S_IFMT(info.st_mode), stat.S_IMODE(info.st_mode),
                     os.readlink(path) if os.path.islink(path) else open(path, "rb").read())
    return out


def params(bins, **changes):
    return dict({"state": "present", "hold_packages": True, "remove_leftovers": True, "state_dir": bins["state_dir"]}, **changes)


def test_backup_once_check_mode_idempotence_and_the_way_back(bins):
    original = snapshot(bins)
    host = FakeHost()
    result = H.run(params(bins), host, check_mode=True, want_diff=True, observed=node_now(bins))
    assert result["changed"] and not os.path.exists(bins["state_dir"])
    result = H.run(params(bins), host, observed=node_now(bins))
    assert result["changed"] and result["problems"] == []
    record = json.load(open(os.path.join(bins["state_dir"], C.HOST_STATE_FILE)))
    assert record["binaries"][bins["toolkit"]]["kind"] == "symlink" and record["binaries"][bins["toolkit"]]["backup"] is None
    assert open(record["binaries"][bins["hook"]]["backup"], "rb").read() == b"#!/bin/sh\n# NVIDIA's hook\n"
    assert not H.run(params(bins), host, observed=node_now(bins))["changed"]
    agent_installs(bins)
    agent_installs(bins)  # the pod started twice: the -bak now holds nano-gpu's toolkit
    # the backup is never taken again over nano-gpu's binaries
    assert not H.run(params(bins), host, observed=node_now(bins))["changed"]
    assert json.load(open(os.path.join(bins["state_dir"], C.HOST_STATE_FILE))) == record
    absent = params(bins, state="absent")
    result = H.run(absent, host, check_mode=True, want_diff=True, observed=node_now(bins))
    assert result["changed"] and snapshot(bins) != original
    assert "put back %s from %s" % (bins["hook"], bins["state_dir"]) in result["actions"]
    H.run(absent, host, observed=node_now(bins))
    assert snapshot(bins) == original  # content, mode, and the symlink as a symlink; the agent's leftovers gone
    assert not os.path.exists(bins["state_dir"])
    assert not H.run(absent, host, observed=node_now(bins))["changed"]
    assert host.calls == []  # no apt-mark here


def test_a_refused_node_gets_nothing_written(bins):
    with pytest.raises(KubegpuError) as caught:
        H.run(params(bins), FakeHost(), observed=node_now(bins, docker_default="runc", mode="cdi"))
    assert str(caught.value).startswith("nano-gpu cannot work on gpu-1: (1) the NVIDIA container toolkit is not in legacy")
    assert "(2) docker's default runtime is runc" in str(caught.value)
    assert not os.path.exists(bins["state_dir"])


def test_holds_on_apt_are_recorded_and_released(bins):
    host = FakeHost()
    packages = {"nvidia-container-toolkit": "1.17.8-1", "libnvidia-container1": "1.17.8-1", "nvidia-container-toolkit-base": None}
    apt = dict(apt_mark="/usr/bin/apt-mark", packages=packages, held=["libnvidia-container1"])
    result = H.run(params(bins), host, observed=node_now(bins, **apt))
    assert "hold nvidia-container-toolkit (apt-mark)" in result["actions"]
    assert host.calls == [["/usr/bin/apt-mark", "hold", "nvidia-container-toolkit"]]
    assert json.load(open(os.path.join(bins["state_dir"], C.HOST_STATE_FILE)))["held"] == ["nvidia-container-toolkit"]
    H.run(params(bins, state="absent"), host, observed=node_now(bins, **apt))
    # only the hold this module took is released; the one that was there before stays
    assert host.calls[-1] == ["/usr/bin/apt-mark", "unhold", "nvidia-container-toolkit"]


def test_a_backup_that_does_not_match_its_record_is_not_put_back(bins):
    H.run(params(bins), FakeHost(), observed=node_now(bins))
    agent_installs(bins)
    record = H.read_record(bins["state_dir"])
    with open(record["binaries"][bins["hook"]]["backup"], "ab") as handle:
        handle.write(b"tampered")
    with pytest.raises(FileError, match="the backup does not match its record"):
        H.run(params(bins, state="absent"), FakeHost(), observed=node_now(bins))
    # and a rerun of the bring-up says so before the way back is needed
    with pytest.raises(FileError, match="the backup of %s is missing or not the file recorded" % bins["hook"]):
        H.run(params(bins), FakeHost(), observed=node_now(bins))
    shutil.rmtree(bins["state_dir"])
