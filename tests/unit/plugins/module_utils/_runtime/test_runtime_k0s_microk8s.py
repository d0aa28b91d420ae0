# SPDX-License-Identifier: GPL-3.0-or-later
"""k0s (a merge patch in /etc/k0s/containerd.d) and microk8s (its containerd template, in place): never the files
those distributions generate."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import tomllib

import pytest

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import FileError, KubegpuError
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime import engine, k0s

BIN = "/usr/bin/nvidia-container-runtime"
FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "fixtures", "runtime")
V3_RUNTIME = "io.containerd.cri.v1.runtime"

# What k0s generated at its last start (/run/k0s/containerd-cri.toml): containerd's defaults patched by the user's
# own drop-in, which turned on the systemd cgroup driver for runc.
GENERATED_V3 = """version = 3
[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "quay.io/k0sproject/pause:3.10.1"
[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = "runc"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
  SystemdCgroup = true
"""


@pytest.fixture
def k0s_host(tmp_path, monkeypatch):
    """k0s' paths under tmp_path: containerd.toml (k0s-managed), the generated CRI file, the bundled containerd."""
    (tmp_path / "etc").mkdir()
    main = tmp_path / "etc" / "containerd.toml"
    main.write_text(k0s.MANAGED_LINE + "\n# This is a placeholder configuration for k0s managed containerd.\n")
    monkeypatch.setattr(k0s, "MAIN", str(main))
    monkeypatch.setattr(k0s, "GENERATED", str(tmp_path / "containerd-cri.toml"))
    monkeypatch.setattr(k0s, "CONTAINERD", str(tmp_path / "bin" / "containerd"))
    return tmp_path


def k0s_params(tmp_path, **over):
    base = dict(runtime="k0s", config_path=str(tmp_path / "containerd.d" / "nvidia.toml"), drop_in_path=None,
                runtime_name="nvidia", runtime_path=BIN, set_as_default=True, cdi=False, config_version="auto",
                state="present", backup=False, validate=None)
    base.update(over)
    return base


def test_k0s_patch_carries_our_runtime_only_and_goes_on_absent(k0s_host):
    (k0s_host / "containerd-cri.toml").write_text(GENERATED_V3)
    args = k0s_params(k0s_host)
    first = engine.run(dict(args))
    path = k0s_host / "containerd.d" / "nvidia.toml"
    assert first["changed"] and first["restart_required"] and first["config_version"] == 3
    text = path.read_text()
    assert text.startswith(k0s.HEADER)
    data = tomllib.loads(text)
    # a merge patch: only what we set; runc's options are the template (SystemdCgroup follows the user's runc)
    assert data == {"version": 3, "plugins": {V3_RUNTIME: {"containerd": {
        "default_runtime_name": "nvidia",
        "runtimes": {"nvidia": {"runtime_type": "io.containerd.runc.v2",
                                "options": {"BinaryName": BIN, "SystemdCgroup": True}}}}}}}
    assert engine.run(dict(args))["changed"] is False
    # after k0s restarted, its generated file holds ours too: still no change
    generated = tomllib.loads(GENERATED_V3)
    generated["plugins"][V3_RUNTIME]["containerd"]["runtimes"]["nvidia"] = data["plugins"][V3_RUNTIME]["containerd"]["runtimes"]["nvidia"]
    generated["plugins"][V3_RUNTIME]["containerd"]["default_runtime_name"] = "nvidia"
    (k0s_host / "containerd-cri.toml").write_text(_toml(generated))
    assert engine.run(dict(args))["changed"] is False
    gone = engine.run(dict(args, state="absent"))
    assert gone["changed"] and not path.exists()
    assert not os.path.exists(str(path) + ".kubegpu.json")  # nothing to remember: the patch takes its settings along


def _toml(data):
    from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.toml import render_tree
    return render_tree(data, "generated")


def test_k0s_not_the_default_and_cdi(k0s_host):
    (k0s_host / "containerd-cri.toml").write_text(
        GENERATED_V3 + '[plugins."io.containerd.cri.v1.runtime"]\n  enable_cdi = false\n')
    engine.run(k0s_params(k0s_host, set_as_default=False, cdi=True))
    data = tomllib.loads((k0s_host / "containerd.d" / "nvidia.toml").read_text())
    assert "default_runtime_name" not in data["plugins"][V3_RUNTIME]["containerd"]
    assert data["plugins"][V3_RUNTIME]["enable_cdi"] is True  # turned off by the user: ours turns it on


def test_k0s_on_containerd_1x_takes_version_2(k0s_host):
    (k0s_host / "bin").mkdir()
    (k0s_host / "bin" / "containerd").write_text("")
    seen = []

    def run_command(argv, **_kw):
        seen.append(argv)
        return 0, "containerd github.com/containerd/containerd v1.7.30 abc\n", ""

    result = engine.run(k0s_params(k0s_host, cdi=True), host=engine.Host(run_command=run_command))
    data = tomllib.loads((k0s_host / "containerd.d" / "nvidia.toml").read_text())
    assert result["config_version"] == 2 and seen == [[k0s.CONTAINERD, "--version"]]
    cri = data["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["enable_cdi"] is True and cri["containerd"]["runtimes"]["nvidia"]["options"] == {"BinaryName": BIN}


def test_k0s_refusals(k0s_host):
    with pytest.raises(KubegpuError, match="start k0s first, or pass config_version"):
        engine.run(k0s_params(k0s_host))
    with pytest.raises(KubegpuError, match="k0s takes auto or 2 or 3"):
        engine.run(k0s_params(k0s_host, config_version="4"))
    with pytest.raises(KubegpuError, match=r"only the \*.toml files"):
        engine.run(k0s_params(k0s_host, config_path=str(k0s_host / "containerd.d" / "nvidia.conf")))
    (k0s_host / "etc" / "containerd.toml").write_text("version = 3\n# taken over by the user\n")
    with pytest.raises(FileError, match="is not managed by k0s.*runtime=containerd") as info:
        engine.run(k0s_params(k0s_host, config_version="3"))
    assert info.value.path == k0s.MAIN
    assert not (k0s_host / "containerd.d").exists()


def test_containerd_refuses_what_k0s_generates(k0s_host):
    base = dict(k0s_params(k0s_host), runtime="containerd")
    with pytest.raises(KubegpuError, match="generated by k0s at every start.*use runtime=k0s"):
        engine.run(dict(base, config_path=k0s.GENERATED))
    with pytest.raises(KubegpuError, match="written by k0s at every start.*use runtime=k0s"):
        engine.run(dict(base, config_path=k0s.MAIN))
    # once the user took it over, it is theirs: runtime=containerd edits it
    (k0s_host / "etc" / "containerd.toml").write_text("version = 3\n")
    assert engine.run(dict(base, config_path=k0s.MAIN))["changed"]


# --- microk8s ------------------------------------------------------------------------------------------------------

def microk8s_params(path, **over):
    base = dict(runtime="microk8s", config_path=str(path), drop_in_path=None, runtime_name="nvidia",
                runtime_path=BIN, set_as_default=True, cdi=False, config_version="auto", state="present",
                backup=False, validate=None)
    base.update(over)
    return base


def test_microk8s_template_in_place_placeholders_kept_and_given_back(tmp_path):
    original = open(os.path.join(FIXTURES, "microk8s-containerd-template.toml")).read()
    path = tmp_path / "containerd-template.toml"
    path.write_text(original)
    no_containerd = engine.Host(get_bin_path=lambda name: None)
    first = engine.run(microk8s_params(path), host=no_containerd)
    text = path.read_text()
    cri = tomllib.loads(text)["plugins"]["io.containerd.grpc.v1.cri"]
    assert first["changed"] and cri["containerd"]["default_runtime_name"] == "nvidia"
    assert cri["containerd"]["runtimes"]["nvidia"]["options"] == {"BinaryName": BIN, "SystemdCgroup": False}
    assert cri["containerd"]["snapshotter"] == "${SNAPSHOTTER}" and cri["cni"]["bin_dir"] == "${SNAP_DATA}/opt/cni/bin"
    assert json.loads((tmp_path / "containerd-template.toml.kubegpu.json").read_text())["previous_default"] == "${RUNTIME}"
    assert engine.run(microk8s_params(path), host=no_containerd)["changed"] is False
    engine.run(microk8s_params(path, state="absent"), host=no_containerd)
    assert path.read_text() == original
    assert not (tmp_path / "containerd-template.toml.kubegpu.json").exists()


def test_microk8s_rendered_file_and_drop_in_are_refused(tmp_path):
    with pytest.raises(KubegpuError, match="written again by microk8s.*use runtime=microk8s"):
        engine.run(dict(microk8s_params("/var/snap/microk8s/current/args/containerd.toml"), runtime="containerd"))
    with pytest.raises(KubegpuError, match="leave drop_in_path unset"):
        engine.run(microk8s_params(tmp_path / "t.toml", drop_in_path=str(tmp_path / "d.toml")))
