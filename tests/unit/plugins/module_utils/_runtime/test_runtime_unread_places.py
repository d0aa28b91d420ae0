# SPDX-License-Identifier: GPL-3.0-or-later
"""Issue 26: our own files (backups, the marker, staged candidates) never go where a daemon reads its configuration.

Each adapter's ``reads`` encodes its daemon's include rules, read in the daemon's source:
  - CRI-O walks its config dir: every file at any depth, whatever its name (cri-o pkg/config/config.go, UpdateFromPath);
  - containerd loads its ``imports``: a path, or a glob (cmd/containerd/server/config/config.go, resolveImports);
  - k3s/RKE2 read ``config.yaml`` and ``config.yaml.d/*.yaml|*.yml`` (k3s pkg/configfilearg/parser.go, dotDFiles);
  - k0s globs ``containerd.d/*.toml`` (pkg/component/worker/containerd/configurer.go, handleImports);
  - dockerd reads its ``--config-file`` only.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest

from ansible_collections.kubegpu.cluster.plugins.module_utils import _files
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import KubegpuError
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime import engine, registry
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.base import Plan, RuntimeSettings

BIN = "/usr/bin/nvidia-container-runtime"
FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "fixtures", "runtime")
CRIO_DEFAULT = '[crio.runtime]\ndefault_runtime = "crun"\n\n[crio.runtime.runtimes.crun]\nruntime_path = "/usr/bin/crun"\n'


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


def params(**kwargs):
    base = dict(runtime="docker", config_path=None, drop_in_path=None, runtime_name="nvidia", runtime_path=BIN,
                set_as_default=True, cdi=False, config_version="auto", state="present", backup=True, validate=None)
    base.update(kwargs)
    return base


def snapshot(directory):
    """Every entry under ``directory``: bytes, mode, inode and mtime of files, and the directories."""
    out = {}
    for base, dirs, files in os.walk(str(directory)):
        for name in dirs:
            out[os.path.join(base, name)] = "dir"
        for name in files:
            path = os.path.join(base, name)
            st = os.stat(path)
            with open(path, "rb") as handle:
                out[path] = (handle.read(), st.st_mode, st.st_ino, st.st_mtime_ns)
    return out


def plan_of(runtime, main, drop_in=None):
    return Plan(params(runtime=runtime), RuntimeSettings("nvidia", BIN), drop_in or main, main_path=main,
                drop_in_path=drop_in, drop_in_entry=drop_in)


# --- the daemons' include rules ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("path, read", [
    ("/etc/crio/crio.conf.d/99-nvidia.toml", True),
    ("/etc/crio/crio.conf.d/99-nvidia.toml.1234.2026-11-22@07:49:12~", True),  # ansible's backup name: read
    ("/etc/crio/crio.conf.d/.99-nvidia.toml.abc.tmp", True),  # hidden: read too
    ("/etc/crio/crio.conf.d/backups/99-nvidia.toml", True),  # a subdirectory: read too (filepath.Walk)
    ("/etc/crio/crio.conf", True),
    ("/etc/crio/crio.conf.kubegpu.json", False),
    ("/etc/crio/crio.conf.d_10-crio.conf.kubegpu.json", False),
    ("/var/backups/kubegpu/etc/crio/crio.conf.d/99-nvidia.toml.1.x~", False),
])
def test_crio_reads_every_file_under_its_config_dir(path, read):
    the_plan = plan_of("crio", "/etc/crio/crio.conf", "/etc/crio/crio.conf.d/99-nvidia.toml")
    assert bool(registry.get("crio").reads(path, the_plan)) is read


@pytest.mark.parametrize("imports, path, read", [
    (["/etc/containerd/conf.d/*.toml"], "/etc/containerd/conf.d/10-mirrors.toml", True),
    (["/etc/containerd/conf.d/*.toml"], "/etc/containerd/conf.d/99-nvidia.toml.1.2026-11-22@07:49:12~", False),
    (["/etc/containerd/conf.d/*"], "/etc/containerd/conf.d/99-nvidia.toml.1.2026-11-22@07:49:12~", True),
    (["conf.d/*"], "/etc/containerd/conf.d/x~", True),  # relative to the importing file (containerd 1.7+)
    (["etc/containerd/conf.d/*"], "/etc/containerd/conf.d/x~", True),  # relative to / (cwd; containerd 1.6)
    (["/etc/containerd/extra.toml"], "/etc/containerd/extra.toml", True),
    ([], "/etc/containerd/config.toml.kubegpu.json", False),
])
def test_containerd_reads_what_its_imports_name(tmp_path, monkeypatch, imports, path, read):
    texts = {"/etc/containerd/config.toml": "version = 2\nimports = %s\n" % str(imports).replace("'", '"')}
    monkeypatch.setattr(_files, "read_text", texts.get)
    the_plan = plan_of("containerd", "/etc/containerd/config.toml")
    assert bool(registry.get("containerd").reads(path, the_plan)) is read


@pytest.mark.parametrize("runtime, main, path, read", [
    ("k3s", "/etc/rancher/k3s/config.yaml.d/99-nvidia.yaml", "/etc/rancher/k3s/config.yaml.d/10-x.YML", True),
    ("k3s", "/etc/rancher/k3s/config.yaml.d/99-nvidia.yaml", "/etc/rancher/k3s/config.yaml", True),
    ("k3s", "/etc/rancher/k3s/config.yaml.d/99-nvidia.yaml", "/etc/rancher/k3s/config.yaml.d/99-nvidia.yaml.1.x~", False),
    ("rke2", "/etc/rancher/rke2/config.yaml.d/99-nvidia.yaml", "/etc/rancher/rke2/config.yaml.d/sub/a.yaml", False),
    ("k0s", "/etc/k0s/containerd.d/nvidia.toml", "/etc/k0s/containerd.d/other.toml", True),
    ("k0s", "/etc/k0s/containerd.d/nvidia.toml", "/etc/k0s/containerd.d/nvidia.toml.1.x~", False),
    ("docker", "/etc/docker/daemon.json", "/etc/docker/daemon.json", True),
    ("docker", "/etc/docker/daemon.json", "/etc/docker/daemon.json.kubegpu.json", False),
])
def test_the_other_daemons_include_rules(runtime, main, path, read):
    assert bool(registry.get(runtime).reads(path, plan_of(runtime, main))) is read


# --- where the engine puts its files -----------------------------------------------------------------------------------

def crio_layout(tmp_path):
    conf_d = tmp_path / "etc" / "crio" / "crio.conf.d"
    conf_d.mkdir(parents=True)
    (conf_d / "10-crio.conf").write_text(CRIO_DEFAULT)
    main = tmp_path / "etc" / "crio" / "crio.conf"
    main.write_text(fixture("crio.conf"))
    return main, conf_d


def test_crio_present_changed_and_absent_leave_crio_conf_d_as_it_was(tmp_path, backup_dir):
    """The bug: a backup of 99-nvidia.toml beside it is a drop-in of its own, which CRI-O loads after ours, with the
    old settings, even once ours is gone."""
    main, conf_d = crio_layout(tmp_path)
    before = snapshot(conf_d)
    args = params(runtime="crio", config_path=str(main), drop_in_path=str(conf_d / "99-nvidia.toml"))
    host = engine.Host(get_bin_path=lambda name: None)
    first = engine.run(args, host=host)
    assert first["changed_files"] == [str(conf_d / "99-nvidia.toml")] and first["backup_files"] == {}
    assert sorted(os.listdir(str(conf_d))) == ["10-crio.conf", "99-nvidia.toml"]
    # a change to an existing drop-in: its backup goes to backup_dir, at its own path below it
    second = engine.run(dict(args, runtime_path="/usr/local/bin/nvidia-container-runtime"), host=host)
    backup = second["backup_files"][str(conf_d / "99-nvidia.toml")]
    assert backup.startswith(os.path.join(backup_dir, str(conf_d).lstrip("/"), "99-nvidia.toml."))
    assert sorted(os.listdir(str(conf_d))) == ["10-crio.conf", "99-nvidia.toml"]
    gone = engine.run(dict(args, state="absent"), host=host)
    assert gone["changed"] and str(conf_d / "99-nvidia.toml") in gone["backup_files"]
    assert snapshot(conf_d) == before  # exactly as it was: no file added, none touched
    assert main.read_text() == fixture("crio.conf")
    # the directories the backup made below backup_dir are 0700 (a config can hold registry credentials)
    assert stat_mode(os.path.join(backup_dir, str(tmp_path).lstrip("/").split("/", maxsplit=1)[0])) == 0o700


def stat_mode(path):
    return os.stat(path).st_mode & 0o777


def test_crio_a_packaged_drop_in_edited_in_place_keeps_its_marker_outside_crio_conf_d(tmp_path):
    """CRI-O 1.28+ packages ship crio.conf.d/10-crio.conf and no crio.conf; the marker (JSON) beside it would be read
    as TOML and stop CRI-O."""
    _main, conf_d = crio_layout(tmp_path)
    before = snapshot(conf_d)
    target = conf_d / "10-crio.conf"
    args = params(runtime="crio", config_path=str(target))
    host = engine.Host(get_bin_path=lambda name: None)
    result = engine.run(args, host=host)
    marker = str(tmp_path / "etc" / "crio" / "crio.conf.d_10-crio.conf.kubegpu.json")
    assert result["changed_files"] == [marker, str(target)] and os.path.exists(marker)
    assert sorted(os.listdir(str(conf_d))) == ["10-crio.conf"]
    assert engine.run(args, host=host)["changed"] is False
    gone = engine.run(dict(args, state="absent"), host=host)
    assert gone["changed"] and not os.path.exists(marker)
    assert target.read_text() == CRIO_DEFAULT  # crun is the default again: the marker was found where it was put
    assert sorted(os.listdir(str(conf_d))) == ["10-crio.conf"] and set(snapshot(conf_d)) == set(before)


def test_crio_candidates_are_staged_outside_crio_conf_d(tmp_path, monkeypatch):
    main, conf_d = crio_layout(tmp_path)
    seen = []
    real_staged = _files.Staged

    def staged(path, text, suffix=".tmp", directory=None, like=None):
        item = real_staged(path, text, suffix=suffix, directory=directory, like=like)
        seen.append(item.tmp_path)
        return item

    monkeypatch.setattr(_files, "Staged", staged)
    engine.run(params(runtime="crio", config_path=str(main), drop_in_path=str(conf_d / "99-nvidia.toml")),
               host=engine.Host(get_bin_path=lambda name: None))
    assert seen and all(os.path.dirname(p) == str(conf_d.parent) for p in seen)


def test_a_backup_dir_the_daemon_reads_is_refused_before_anything_is_written(tmp_path):
    main, conf_d = crio_layout(tmp_path)
    drop = conf_d / "99-nvidia.toml"
    drop.write_text("[crio.runtime]\n")
    before = snapshot(tmp_path)
    args = params(runtime="crio", config_path=str(main), drop_in_path=str(drop), backup_dir=str(conf_d / "old"))
    with pytest.raises(KubegpuError, match="backup_dir .*crio.conf.d/old.* where CRI-O reads every file"):
        engine.run(args, host=engine.Host(get_bin_path=lambda name: None))
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("runtime", registry.NAMES)
def test_no_adapter_reads_a_backup_in_the_default_backup_dir(runtime):
    """Whatever the runtime, its default files' backups land where it does not read."""
    adapter = registry.get(runtime)
    main = adapter.config_path
    drop_in = adapter.drop_in_path
    the_plan = plan_of(runtime, main, drop_in)
    for path in (main, drop_in):
        if path:
            target = _files.backup_name(path, directory="/var/backups/kubegpu")
            assert adapter.reads(target, the_plan) is None, (runtime, target)
