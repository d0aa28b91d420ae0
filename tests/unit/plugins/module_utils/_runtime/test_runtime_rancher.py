# SPDX-License-Identifier: GPL-3.0-or-later
"""k3s and RKE2: a config.yaml.d drop-in with the default runtime, never their generated containerd config."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import KubegpuError
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime import engine, rancher

BIN = "/usr/bin/nvidia-container-runtime"


def params(tmp_path, runtime="k3s", **over):
    base = dict(runtime=runtime, config_path=str(tmp_path / "config.yaml.d" / "99-nvidia.yaml"), drop_in_path=None,
                runtime_name="nvidia", runtime_path=BIN, set_as_default=True, cdi=False, config_version="auto",
                state="present", backup=False, validate=None)
    base.update(over)
    return base


def host(found=BIN):
    return engine.Host(get_bin_path=lambda name: found if name == "nvidia-container-runtime" else None)


@pytest.mark.parametrize("runtime", ["k3s", "rke2"])
def test_present_then_again_then_absent(tmp_path, runtime):
    args = params(tmp_path, runtime)
    first = engine.run(dict(args), host=host())
    path = tmp_path / "config.yaml.d" / "99-nvidia.yaml"
    assert first["changed"] and first["changed_files"] == [str(path)] and first["restart_required"]
    assert path.read_text() == rancher.HEADER % runtime + "default-runtime: nvidia\n"
    assert rancher.default_of(path.read_text()) == "nvidia"
    assert engine.run(dict(args), host=host())["changed"] is False
    gone = engine.run(dict(args, state="absent"), host=host())
    assert gone["changed"] and not path.exists() and sorted(p.name for p in (tmp_path / "config.yaml.d").iterdir()) == []


def test_not_the_default_means_no_drop_in_the_distribution_registers_the_runtime(tmp_path):
    result = engine.run(params(tmp_path, set_as_default=False), host=host())
    assert result["changed"] is False and not (tmp_path / "config.yaml.d").exists()


def test_a_runtime_the_distribution_would_not_find_is_refused_before_writing(tmp_path):
    with pytest.raises(KubegpuError, match="by the name nvidia-container-runtime"):
        engine.run(params(tmp_path, runtime_path="/opt/nvidia/bin/nvidia-runtime"), host=host())
    with pytest.raises(KubegpuError, match="is not what it finds"):
        engine.run(params(tmp_path, runtime_path="/opt/nvidia/bin/nvidia-container-runtime"), host=host())
    assert not (tmp_path / "config.yaml.d").exists()
    operator = "/usr/local/nvidia/toolkit/nvidia-container-runtime"  # where the GPU operator puts it: found too
    assert engine.run(params(tmp_path, runtime_path=operator), host=host(found=None))["changed"]


def test_not_installed_yet_is_a_warning(tmp_path):
    """Check mode on a fresh host, before the toolkit's install: the binary is not there yet."""
    not_yet = host(found=None)
    result = engine.run(params(tmp_path), check_mode=True, host=not_yet)
    assert result["changed"] and any("is not installed yet" in w for w in not_yet.warnings)


def test_the_generated_containerd_config_is_never_edited(tmp_path):
    with pytest.raises(KubegpuError, match="generated again by k3s.*use runtime=k3s"):
        engine.run(dict(params(tmp_path, "containerd"), config_path="/var/lib/rancher/k3s/agent/etc/containerd/config.toml"))


@pytest.mark.parametrize("text, value", [
    ("default-runtime: crun\n", "crun"),
    ('write-kubeconfig-mode: "0644"\ndefault-runtime: "nvidia"\n', "nvidia"),
    ("node-label:\n  - gpu=true\n", None),
    ("", None),
])
def test_default_of(text, value):
    assert rancher.default_of(text) == value
