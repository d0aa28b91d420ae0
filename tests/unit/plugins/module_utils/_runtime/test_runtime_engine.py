# SPDX-License-Identifier: GPL-3.0-or-later
"""The module's work end to end on real files, with a stand-in containerd that merges imports like 1.6 does."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import shlex

import pytest
import tomlkit

from ansible.module_utils.testing import patch_module_args

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import FileError, KubegpuError, ValidationError, fail_args
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime import containerd, engine as runner
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.common import plain, without_empty_tables
from ansible_collections.kubegpu.cluster.plugins.modules import nvidia_runtime_config

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "fixtures", "runtime")
CRI = "io.containerd.grpc.v1.cri"


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


def params(**kwargs):
    base = dict(runtime="docker", config_path=None, drop_in_path=None, runtime_name="nvidia",
                runtime_path="/usr/bin/nvidia-container-runtime", set_as_default=True, cdi=False, config_version="auto",
                state="present", backup=False, validate=None)
    base.update(kwargs)
    return base


class FakeContainerd(runner.Host):
    """``containerd``: ``--version`` and ``--config FILE config dump``, merging imports as containerd 1.6 does
    (a plugin table from an import replaces the whole table); ``fail`` makes the dump exit 1."""

    def __init__(self, version="1.6.20", binary="/usr/bin/containerd", fail=False):
        super(FakeContainerd, self).__init__(run_command=self._run, get_bin_path=lambda name: binary if name == "containerd" else None)
        self.version = version
        self.fail = fail
        self.calls = []

    def _run(self, argv):
        self.calls.append(list(argv))
        if argv[1:] == ["--version"]:
            return 0, "containerd github.com/containerd/containerd %s %s-1\n" % (self.version, self.version), ""
        if self.fail:
            return 1, "", "containerd: failed to load TOML: %s: (3, 2): bad\n" % argv[2]
        assert argv[1] == "--config" and argv[3:] == ["config", "dump"], argv
        main = argv[2]
        merged = {}
        pending = [main]
        loaded = set()
        while pending:
            path = pending.pop(0)
            if path in loaded:
                continue
            with open(path) as handle:
                data = plain(tomlkit.parse(handle.read()))
            for key, value in data.items():
                if key == "plugins":
                    merged.setdefault("plugins", {}).update(value)
                elif key != "imports":
                    merged[key] = value
            for entry in data.get("imports", []):
                if "*" in entry:
                    pending.extend(containerd.go_glob(entry))
                else:
                    pending.append(entry if os.path.isabs(entry) else os.path.join(os.path.dirname(path), entry))
            loaded.add(path)
        return 0, tomlkit.dumps(merged), ""


# --- docker ----------------------------------------------------------------------------------------------------------

def test_docker_check_mode_then_real_then_idempotent(tmp_path):
    path = tmp_path / "daemon.json"
    path.write_text(fixture("daemon.json"))
    before = os.stat(str(path))
    args = params(config_path=str(path))
    check = runner.run(args, check_mode=True, want_diff=True)
    assert check["changed"] and check["restart_required"] and path.read_text() == fixture("daemon.json")
    assert os.stat(str(path)).st_mtime_ns == before.st_mtime_ns and os.listdir(str(tmp_path)) == ["daemon.json"]
    real = runner.run(args, want_diff=True)
    assert real == check  # check mode predicts the real run exactly
    assert real["diff"][0]["before"] == fixture("daemon.json") and '"default-runtime": "nvidia"' in real["diff"][0]["after"]
    assert json.loads(path.read_text())["runtimes"]["nvidia"]["path"] == "/usr/bin/nvidia-container-runtime"
    after = os.stat(str(path)).st_mtime_ns
    again = runner.run(args, want_diff=True)
    assert not again["changed"] and not again["restart_required"] and again["changed_files"] == []
    assert again["diff"][0]["before"] == again["diff"][0]["after"]
    assert os.stat(str(path)).st_mtime_ns == after


def test_docker_backup_and_return_shape(tmp_path):
    path = tmp_path / "daemon.json"
    path.write_text("{}\n")
    result = runner.run(params(config_path=str(path), backup=True))
    assert set(result["backup_files"]) == {str(path)} and result["backup_file"] == result["backup_files"][str(path)]
    assert open(result["backup_file"]).read() == "{}\n"
    assert result["config_version"] is None and result["config_path"] == str(path)


def test_docker_new_file_and_directory(tmp_path):
    path = tmp_path / "etc" / "docker" / "daemon.json"
    result = runner.run(params(config_path=str(path), backup=True))
    assert result["changed"] and result["backup_files"] == {} and "backup_file" not in result
    assert oct(os.stat(str(path)).st_mode & 0o777) == "0o644" and oct(os.stat(str(path.parent)).st_mode & 0o777) == "0o755"


def test_docker_validate_failure_leaves_the_file(tmp_path):
    path = tmp_path / "daemon.json"
    path.write_text("{}\n")
    with pytest.raises(ValidationError) as info:
        runner.run(params(config_path=str(path), validate="false %s"))
    assert path.read_text() == "{}\n" and os.listdir(str(tmp_path)) == ["daemon.json"]
    assert str(path) in str(info.value) and info.value.details["rc"] == 1


def test_symlinks_are_followed(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("{}\n")
    link = tmp_path / "daemon.json"
    link.symlink_to(real)
    runner.run(params(config_path=str(link)))
    assert link.is_symlink() and "nvidia" in real.read_text()


@pytest.mark.parametrize("args, words", [
    (dict(drop_in_path="/etc/docker/x.json"), "docker has no drop-in"),
    (dict(runtime="containerd", drop_in_path="conf.d/99-nvidia.toml"), "must be an absolute path"),
    (dict(config_version="3"), "docker takes only auto"),
    (dict(runtime="crio", runtime_path="nvidia-container-runtime"), "runtime_path must be an absolute path for crio"),
    (dict(runtime_name=" "), "runtime_name must be a non-empty name"),
    (dict(runtime="crio", drop_in_path="/etc/crio/crio.conf", config_path="/etc/crio/../crio/crio.conf"), "another file than config_path"),
    (dict(validate="dockerd --validate"), "must contain %s"),
])
def test_bad_options(args, words, tmp_path):
    with pytest.raises(KubegpuError) as info:
        runner.run(params(**dict(dict(config_path=str(tmp_path / "x")), **args)))
    assert words in str(info.value)


def test_missing_tomlkit_is_reported_for_toml_runtimes_only(monkeypatch, tmp_path):
    monkeypatch.setattr(runner, "TOMLKIT_IMPORT_ERROR", "Traceback: no tomlkit")
    with pytest.raises(KubegpuError) as info:
        runner.run(params(runtime="crio", config_path=str(tmp_path / "crio.conf")))
    assert "tomlkit" in str(info.value) and fail_args(info.value)["exception"] == "Traceback: no tomlkit"
    assert runner.run(params(config_path=str(tmp_path / "daemon.json")))["changed"]


def test_failure_turns_errors_into_fail_json_arguments():
    assert fail_args(FileError("bad", path="/x", line=1, column=2)) == {"msg": "/x: line 1, column 2: bad"}
    unexpected = fail_args(KeyError("boom"))
    assert unexpected["msg"] == "unexpected error: KeyError: 'boom'" and "exception" in unexpected


# --- The user's default runtime comes back ------------------------------------------------------------------------

KATA_CONTAINERD = """version = 2
[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "kata"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kata]
  runtime_type = "io.containerd.kata.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
"""
CRUN_CRIO = """[crio.runtime]
default_runtime = "crun"

[crio.runtime.runtimes.crun]
runtime_path = "/usr/bin/crun"
"""


@pytest.mark.parametrize("runtime, name, text", [
    # laid out as the module writes JSON (docker's file is rewritten whole when it changes)
    ("docker", "daemon.json", json.dumps({"default-runtime": "crun", "runtimes": {"crun": {"path": "/usr/bin/crun"}}}, indent=4) + "\n"),
    ("containerd", "config.toml", KATA_CONTAINERD),
    ("crio", "crio.conf", CRUN_CRIO),
])
def test_absent_gives_back_the_users_default_runtime(tmp_path, runtime, name, text):
    path = tmp_path / name
    path.write_text(text)
    marker = tmp_path / (name + ".kubegpu.json")
    args = params(runtime=runtime, config_path=str(path), validate="")
    check = runner.run(dict(args), check_mode=True)
    assert check["changed"] and not marker.exists() and path.read_text() == text
    present = runner.run(dict(args))
    assert present["changed_files"][0] == str(marker)  # the marker is written before the config
    previous = json.loads(marker.read_text())["previous_default"]
    assert previous in ("crun", "kata") and previous in text
    assert runner.run(dict(args))["changed"] is False  # a second run keeps the marker as it is
    gone = runner.run(dict(args, state="absent"))
    assert gone["changed_files"][-1] == str(marker) and gone["restart_required"]
    assert path.read_text() == text and not marker.exists()  # exactly what the user had


def test_set_as_default_false_gives_the_default_back_and_keeps_the_runtime(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(KATA_CONTAINERD)
    runner.run(params(runtime="containerd", config_path=str(path), validate=""))
    result = runner.run(params(runtime="containerd", config_path=str(path), validate="", set_as_default=False))
    cri = plain(tomlkit.parse(path.read_text()))["plugins"][CRI]
    assert result["changed"] and cri["containerd"]["default_runtime_name"] == "kata"
    assert "nvidia" in cri["containerd"]["runtimes"] and not (tmp_path / "config.toml.kubegpu.json").exists()


def test_no_marker_where_there_was_no_default_or_with_a_drop_in(tmp_path):
    main = tmp_path / "config.toml"
    main.write_text("version = 2\n")
    runner.run(params(runtime="containerd", config_path=str(main), validate="", set_as_default=False))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.toml"]
    main.write_text(KATA_CONTAINERD)
    drop = tmp_path / "conf.d" / "99-nvidia.toml"
    runner.run(params(runtime="containerd", config_path=str(main), drop_in_path=str(drop), validate=""))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conf.d", "config.toml"]
    assert runner.run(params(runtime="containerd", config_path=str(main), drop_in_path=str(drop), validate="",
                             state="absent"))["changed"]
    assert "kata" in main.read_text() and not drop.exists()  # the drop-in took its default with it


# What the user had comes back after present then absent, with the user's content (issue 26): an empty daemon.json,
# a blank one, "{}", and one holding only the user's own entry for the runtime. A missing one is gone again.
@pytest.mark.parametrize("users_own", [
    "",
    "  \n",
    "{}\n",
    '{\n    "runtimes": {\n        "nvidia": {\n            "path": "nvidia-container-runtime",\n            "runtimeArgs": []\n'
    '        }\n    }\n}\n',
    '{\n    "runtimes": {\n        "nvidia": {\n            "args": [],\n            "path": "/usr/bin/nvidia-container-runtime"\n'
    '        }\n    },\n    "default-runtime": "nvidia"\n}\n',  # nvidia-ctk's, with cdi asked: the file changes
])
def test_docker_present_then_absent_gives_the_users_file_back(tmp_path, users_own):
    path = tmp_path / "daemon.json"
    path.write_text(users_own)
    args = params(config_path=str(path), cdi=True)
    assert runner.run(dict(args))["changed"]
    data = json.loads(path.read_text())
    assert data["runtimes"]["nvidia"]["path"] == "/usr/bin/nvidia-container-runtime" and data["default-runtime"] == "nvidia"
    assert runner.run(dict(args))["changed"] is False  # idempotent: the marker is not written again
    assert runner.run(dict(args, state="absent"))["changed"]
    assert path.read_text() == users_own
    assert sorted(p.name for p in tmp_path.iterdir()) == ["daemon.json"]
    assert runner.run(dict(args, state="absent"))["changed"] is False


def test_docker_absent_keeps_what_the_user_added_after_present_and_a_file_present_made_goes(tmp_path):
    path = tmp_path / "daemon.json"
    path.write_text('{"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}}\n')
    runner.run(params(config_path=str(path)))
    data = json.loads(path.read_text())
    data["debug"] = True
    path.write_text(json.dumps(data))
    runner.run(params(config_path=str(path), state="absent"))
    assert json.loads(path.read_text()) == {"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}, "debug": True}
    missing = tmp_path / "new" / "daemon.json"
    runner.run(params(config_path=str(missing)))
    assert json.loads((tmp_path / "new" / "daemon.json.kubegpu.json").read_text()) == {
        "runtime": "nvidia", "runtime_before": None, "file_before": None}
    runner.run(params(config_path=str(missing), state="absent"))
    assert not missing.exists() and os.listdir(str(tmp_path / "new")) == []


def test_docker_absent_changes_only_what_the_marker_says_was_put_in(tmp_path):
    """A present run that changes nothing writes nothing (no change, no restart, no marker); absent without a marker
    of the runtime leaves the file to the user, whoever wrote the runtime into it."""
    path = tmp_path / "daemon.json"
    users_own = ('{"runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime", "args": []}}, '
                 '"default-runtime": "nvidia", "debug": true}\n')
    path.write_text(users_own)
    assert runner.run(params(config_path=str(path)))["changed"] is False
    assert sorted(p.name for p in tmp_path.iterdir()) == ["daemon.json"]
    assert runner.run(params(config_path=str(path), state="absent"))["changed"] is False
    assert path.read_text() == users_own
    path.write_text("{")
    with pytest.raises(FileError, match="invalid JSON"):  # a broken file is reported all the same
        runner.run(params(config_path=str(path), state="absent"))


def test_a_marker_that_is_not_ours_is_one_clear_error(tmp_path):
    daemon = tmp_path / "daemon.json"
    daemon.write_text('{"default-runtime": "crun"}\n')
    (tmp_path / "daemon.json.kubegpu.json").write_text("[1, 2]\n")
    with pytest.raises(KubegpuError, match="daemon.json.kubegpu.json is not the marker this module writes"):
        runner.run(params(config_path=str(daemon)))
    assert daemon.read_text() == '{"default-runtime": "crun"}\n'


# --- containerd ------------------------------------------------------------------------------------------------------

def test_containerd_in_place_is_validated_on_the_candidate_beside_the_live_file(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(fixture("containerd-1.6-kubeadm.toml"))
    host = FakeContainerd()
    result = runner.run(params(runtime="containerd", config_path=str(path)), host=host)
    assert result["changed"] and result["config_version"] == 2
    dumps = [c for c in host.calls if c[-1] == "dump"]
    assert len(dumps) == 1 and os.path.dirname(dumps[0][2]) == str(tmp_path) and dumps[0][2] != str(path)
    # no candidate left behind; our marker remembers the default runtime the file named before ours
    assert sorted(os.listdir(str(tmp_path))) == ["config.toml", "config.toml.kubegpu.json"]
    assert json.loads((tmp_path / "config.toml.kubegpu.json").read_text()) == {"runtime": "nvidia", "previous_default": "runc"}
    assert plain(tomlkit.parse(path.read_text()))["plugins"][CRI]["containerd"]["default_runtime_name"] == "nvidia"


def test_containerd_drop_in_present_then_absent(tmp_path):
    main = tmp_path / "config.toml"
    main.write_text(fixture("containerd-1.6-kubeadm.toml"))
    drop = tmp_path / "conf.d" / "99-nvidia.toml"
    args = params(runtime="containerd", config_path=str(main), drop_in_path=str(drop), backup=True, cdi=True)
    host = FakeContainerd()
    result = runner.run(args, want_diff=True, host=host)
    assert result["changed_files"] == [str(drop), str(main)]  # the drop-in exists before anything imports it
    assert result["config_path"] == str(drop) and list(result["backup_files"]) == [str(main)] and "backup_file" not in result
    assert [d["before_header"] for d in result["diff"]] == ["%s (absent)" % drop, str(main)]
    assert plain(tomlkit.parse(main.read_text()))["imports"] == [str(drop)]
    view = next(c for c in host.calls if c[-1] == "dump")[2]
    assert os.path.dirname(view) == str(tmp_path) and view.endswith(".validate") and not os.path.exists(view)
    assert host.warnings == []  # the CRI settings containerd loads are the same, but ours
    merged = plain(tomlkit.parse(FakeContainerd()._run(["containerd", "--config", str(main), "config", "dump"])[1]))
    cri = merged["plugins"][CRI]
    assert cri["sandbox_image"] == "registry.k8s.io/pause:3.9" and cri["enable_cdi"] is True
    assert cri["registry"]["mirrors"]["docker.io"]["endpoint"][0] == "https://mirror.example.internal"
    assert cri["containerd"]["runtimes"]["nvidia"]["options"]["SystemdCgroup"] is True
    assert not runner.run(args, host=FakeContainerd())["changed"]

    gone = runner.run(dict(args, state="absent"), host=FakeContainerd())
    assert gone["changed_files"] == [str(main), str(drop)] and not drop.exists()
    assert main.read_text() == fixture("containerd-1.6-kubeadm.toml")  # imports = [] again
    assert set(gone["backup_files"]) == {str(main), str(drop)}
    assert not runner.run(dict(args, state="absent"), host=FakeContainerd())["changed"]


def test_containerd_drop_in_already_covered_by_a_glob(tmp_path):
    main = tmp_path / "config.toml"
    glob = str(tmp_path / "conf.d" / "*.toml")
    main.write_text('version = 2\nimports = ["%s"]\n' % glob)
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "10-site.toml").write_text('version = 2\n[plugins."io.containerd.gc.v1.scheduler"]\npause_threshold = 0.5\n')
    drop = tmp_path / "conf.d" / "99-nvidia.toml"
    host = FakeContainerd()
    result = runner.run(params(runtime="containerd", config_path=str(main), drop_in_path=str(drop)), host=host)
    assert result["changed_files"] == [str(drop)] and main.read_text() == 'version = 2\nimports = ["%s"]\n' % glob
    assert host.warnings == []  # the site file holds no CRI table: nothing the drop-in shadows
    seen = []

    def cat(argv):
        with open(argv[-1]) as handle:
            seen.append(plain(tomlkit.parse(handle.read()))["imports"])
        return 0, "", ""

    drop.unlink()
    runner.run(params(runtime="containerd", config_path=str(main), drop_in_path=str(drop), validate="cat %s"),
               host=runner.Host(run_command=cat))
    site, candidate = seen[0]
    assert site == str(tmp_path / "conf.d" / "10-site.toml")  # the glob, expanded in containerd's order
    assert os.path.basename(candidate).startswith(".99-nvidia.toml.") and os.path.dirname(candidate) == str(tmp_path / "conf.d")


def test_containerd_a_later_import_that_replaces_the_cri_table_is_caught(tmp_path):
    main = tmp_path / "config.toml"
    main.write_text('version = 2\nimports = ["%s"]\n' % (tmp_path / "conf.d" / "*.toml"))
    (tmp_path / "conf.d").mkdir()
    late = tmp_path / "conf.d" / "zz-late.toml"
    late.write_text('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\nsandbox_image = "x"\n')
    drop = tmp_path / "conf.d" / "99-nvidia.toml"
    with pytest.raises(ValidationError) as info:
        runner.run(params(runtime="containerd", config_path=str(main), drop_in_path=str(drop)), host=FakeContainerd())
    assert "runtime 'nvidia' is missing" in str(info.value) and "replace the CRI" in str(info.value)
    assert not drop.exists() and sorted(os.listdir(str(tmp_path / "conf.d"))) == ["zz-late.toml"]


def test_containerd_an_earlier_import_s_cri_settings_are_carried_into_the_drop_in(tmp_path):
    """containerd before 2.1 replaces the CRI table with the last imported one: the drop-in carries what an earlier
    import set (its mirror, here its sandbox image), so importing it changes nothing but the runtime."""
    main = tmp_path / "config.toml"
    main.write_text('version = 2\nimports = ["%s"]\n[plugins."io.containerd.grpc.v1.cri"]\nmax_concurrent_downloads = 3\n'
                    % (tmp_path / "conf.d" / "*.toml"))
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "10-site.toml").write_text('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\nsandbox_image = "site"\n')
    host = FakeContainerd()
    runner.run(params(runtime="containerd", config_path=str(main), drop_in_path=str(tmp_path / "conf.d" / "99-nvidia.toml")), host=host)
    assert host.warnings == []
    cri = plain(tomlkit.parse((tmp_path / "conf.d" / "99-nvidia.toml").read_text()))["plugins"]["io.containerd.grpc.v1.cri"]
    # 1.6 replaces: the site file's table is what containerd loads today, the main file's key is not
    assert cri["sandbox_image"] == "site" and "max_concurrent_downloads" not in cri and "nvidia" in cri["containerd"]["runtimes"]


def test_containerd_2_1_merges_the_imported_cri_tables_into_the_drop_in(tmp_path):
    main = tmp_path / "config.toml"
    main.write_text('version = 3\nimports = ["conf.d/10-site.toml"]\n[plugins."io.containerd.cri.v1.runtime"]\nmax_container_log_line_size = 3\n')
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "10-site.toml").write_text('version = 3\n[plugins."io.containerd.cri.v1.runtime"]\nenable_selinux = true\n')
    args = params(runtime="containerd", config_path=str(main), drop_in_path=str(tmp_path / "conf.d" / "99-nvidia.toml"))
    runner.run(args, host=FakeContainerd(version="2.1.4"))
    cri = plain(tomlkit.parse((tmp_path / "conf.d" / "99-nvidia.toml").read_text()))["plugins"]["io.containerd.cri.v1.runtime"]
    assert cri["max_container_log_line_size"] == 3 and cri["enable_selinux"] is True


def test_containerd_the_shadow_warning_counts_what_it_does_not_name(tmp_path, monkeypatch):
    main = tmp_path / "config.toml"
    main.write_text('version = 2\nimports = ["%s"]\n' % (tmp_path / "conf.d" / "*.toml"))
    monkeypatch.setattr(containerd, "changed_cri_settings", lambda before, after, settings: ["key_%02d" % i for i in range(13)])
    host = FakeContainerd()
    runner.run(params(runtime="containerd", config_path=str(main), drop_in_path=str(tmp_path / "conf.d" / "99-nvidia.toml")), host=host)
    assert "key_09" in host.warnings[0] and "key_10" not in host.warnings[0] and " and 3 more;" in host.warnings[0]


def test_containerd_validation_failure_leaves_everything_as_it_was(tmp_path):
    main = tmp_path / "config.toml"
    main.write_text(fixture("containerd-1.6-default.toml"))
    drop = tmp_path / "conf.d" / "99-nvidia.toml"
    with pytest.raises(ValidationError) as info:
        runner.run(params(runtime="containerd", config_path=str(main), drop_in_path=str(drop)), host=FakeContainerd(fail=True))
    assert "failed to load TOML" in str(info.value) and str(main) in str(info.value)
    assert main.read_text() == fixture("containerd-1.6-default.toml")
    assert sorted(os.listdir(str(tmp_path))) == ["config.toml"]  # no conf.d left behind, no temporary files


def test_containerd_check_mode_runs_nothing(tmp_path):
    main = tmp_path / "config.toml"
    main.write_text(fixture("containerd-1.6-default.toml"))
    host = FakeContainerd()
    result = runner.run(params(runtime="containerd", config_path=str(main), drop_in_path=str(tmp_path / "d" / "x.toml")),
                        check_mode=True, host=host)
    assert result["changed"] and os.listdir(str(tmp_path)) == ["config.toml"]
    assert [c for c in host.calls if c[-1] == "dump"] == []


def test_containerd_version_3_with_a_1x_binary_is_not_validated(tmp_path):
    main = tmp_path / "config.toml"
    main.write_text(fixture("containerd-2.x-v3.toml"))
    host = FakeContainerd()
    result = runner.run(params(runtime="containerd", config_path=str(main)), host=host)
    assert result["changed"] and result["config_version"] == 3
    assert [c for c in host.calls if c[-1] == "dump"] == [] and "cannot read config version 3" in host.warnings[0]


@pytest.mark.parametrize("binary_version, expected", [("1.7.27", 2), ("2.1.4", 3), (None, 2)])
def test_containerd_version_of_a_new_file_follows_the_binary(tmp_path, binary_version, expected):
    host = FakeContainerd(version=binary_version or "", binary="/usr/bin/containerd" if binary_version else None)
    args = params(runtime="containerd", config_path=str(tmp_path / "config.toml"), validate="")
    result = runner.run(args, host=host)
    assert result["config_version"] == expected
    assert (tmp_path / "config.toml").read_text().startswith("version = %d\n" % expected)


def test_containerd_user_validate_gets_the_validation_copy(tmp_path):
    main = tmp_path / "config.toml"
    main.write_text("version = 2\n")
    seen = []

    def run(argv):
        seen.append(argv)
        with open(argv[-1]) as handle:
            seen.append(handle.read())
        return 0, "", ""

    drop = tmp_path / "conf.d" / "99-nvidia.toml"
    runner.run(params(runtime="containerd", config_path=str(main), drop_in_path=str(drop), validate="cat %s"),
               host=runner.Host(run_command=run, get_bin_path=lambda name: None))
    argv, text = seen
    assert argv[0] == "cat" and argv[1].endswith(".validate")
    imported = plain(tomlkit.parse(text))["imports"]
    assert len(imported) == 1 and os.path.dirname(imported[0]) == str(tmp_path / "conf.d") and imported[0] != str(drop)


def test_malformed_toml_is_one_error_and_the_file_stays(tmp_path):
    main = tmp_path / "config.toml"
    main.write_text('version = 2\n[plugins."io.containerd.grpc.v1.cri"\n')
    with pytest.raises(FileError) as info:
        runner.run(params(runtime="containerd", config_path=str(main)), host=FakeContainerd())
    assert str(info.value).startswith("%s: line 2, column 37: invalid TOML" % main)
    assert main.read_text() == 'version = 2\n[plugins."io.containerd.grpc.v1.cri"\n'


# --- CRI-O ------------------------------------------------------------------------------------------------------

def test_crio_drop_in_present_then_absent_deletes_it(tmp_path):
    main = tmp_path / "crio.conf"
    main.write_text(fixture("crio.conf"))
    drop = tmp_path / "crio.conf.d" / "99-nvidia.toml"
    host = runner.Host(get_bin_path=lambda name: None)
    args = params(runtime="crio", config_path=str(main), drop_in_path=str(drop), cdi=True)
    result = runner.run(args, host=host)
    assert result["changed_files"] == [str(drop)] and main.read_text() == fixture("crio.conf")
    assert "cdi is ignored for crio" in host.warnings[0]
    assert plain(tomlkit.parse(drop.read_text()))["crio"]["runtime"]["default_runtime"] == "nvidia"
    gone = runner.run(dict(args, state="absent"), host=host)
    assert gone["changed_files"] == [str(drop)] and not drop.exists()


def test_crio_validate_gets_the_candidate_drop_in(tmp_path):
    seen = []

    def run(argv):
        seen.append(shlex.split(" ".join(argv)))
        return 0, "", ""

    drop = tmp_path / "crio.conf.d" / "99-nvidia.toml"
    runner.run(params(runtime="crio", drop_in_path=str(drop), validate="crio-check %s"), host=runner.Host(run_command=run))
    # staged beside crio.conf.d, not in it: CRI-O reads every file there, a candidate left by a killed run included
    assert seen[0][0] == "crio-check" and os.path.dirname(seen[0][1]) == str(tmp_path) and seen[0][1] != str(drop)


# --- The module's main(): argument spec, check mode and diff wiring, one fail_json -----------------------------------
# (here rather than in tests/unit/plugins/modules/test_nvidia_runtime_config.py: that basename is taken by the
# integration test, and pytest's default import mode cannot collect two test modules of one name)


def run_main(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exit_info:
            nvidia_runtime_config.main()
    return exit_info.value.code, json.loads(capsys.readouterr().out)


def test_check_mode_and_diff_are_passed_through(capsys, tmp_path):
    path = tmp_path / "daemon.json"
    path.write_text("{}\n")
    code, result = run_main(capsys, {"runtime": "docker", "config_path": str(path), "_ansible_check_mode": True,
                                     "_ansible_diff": True})
    assert code == 0 and result["changed"] is True and path.read_text() == "{}\n"
    assert result["diff"][0]["before"] == "{}\n" and "nvidia" in result["diff"][0]["after"]


def test_a_real_run_writes_and_reports(capsys, tmp_path):
    path = tmp_path / "daemon.json"
    code, result = run_main(capsys, {"runtime": "docker", "config_path": str(path)})
    assert code == 0 and result["changed"] and result["restart_required"] and "diff" not in result
    assert json.loads(path.read_text())["default-runtime"] == "nvidia"


def test_errors_become_one_failure_message(capsys, tmp_path):
    path = tmp_path / "daemon.json"
    path.write_text('{"a": }')
    code, result = run_main(capsys, {"runtime": "docker", "config_path": str(path)})
    assert code == 1 and result["failed"] and result["msg"] == "%s: line 1, column 7: invalid JSON: Expecting value" % path
    assert "exception" not in result and path.read_text() == '{"a": }'


@pytest.mark.parametrize("args, words", [
    ({"runtime": "podman"}, "value of runtime must be one of"),
    ({"runtime": "containerd", "config_version": "1"}, "value of config_version must be one of"),
    ({"runtime": "docker", "bogus": 1}, "bogus"),
    ({}, "missing required arguments: runtime"),
])
def test_the_argument_spec_refuses(capsys, args, words):
    code, result = run_main(capsys, args)
    assert code == 1 and words in result["msg"]


def test_config_version_accepts_an_integer(capsys, tmp_path):
    code, result = run_main(capsys, {"runtime": "containerd", "config_path": str(tmp_path / "c.toml"), "config_version": 3,
                                     "validate": ""})
    assert code == 0 and result["config_version"] == 3


def test_an_unexpected_error_is_reported_with_its_traceback(capsys, monkeypatch):
    def boom(*_args, **_kwargs):
        raise KeyError("boom")

    monkeypatch.setattr(nvidia_runtime_config, "run", boom)
    code, result = run_main(capsys, {"runtime": "docker"})
    assert code == 1 and result["msg"] == "unexpected error: KeyError: 'boom'"  # the traceback: with ANSIBLE_DISPLAY_TRACEBACK


def test_containerd_a_main_config_the_drop_in_made_goes_again(tmp_path):
    main = tmp_path / "config.toml"
    drop = tmp_path / "conf.d" / "99-nvidia.toml"
    args = params(runtime="containerd", config_path=str(main), drop_in_path=str(drop), validate="")
    made = runner.run(dict(args))
    assert made["changed_files"] == [str(drop), str(main)] and main.exists()
    gone = runner.run(dict(args, state="absent"))
    assert gone["changed_files"] == [str(main), str(drop)] and not main.exists() and not drop.exists()


def test_containerd_an_equal_drop_in_is_not_rewritten(tmp_path):
    """A drop-in with our settings in another layout (nvidia-ctk's, say) means the same: no write, no restart."""
    main = tmp_path / "config.toml"
    main.write_text(fixture("containerd-1.6-kubeadm.toml"))
    drop = tmp_path / "conf.d" / "99-nvidia.toml"
    args = params(runtime="containerd", config_path=str(main), drop_in_path=str(drop), validate="")
    runner.run(dict(args))
    relaid = "# written by another tool\n" + drop.read_text().replace("\n[", "\n  [")  # same data, another layout
    assert plain(tomlkit.parse(relaid)) == plain(tomlkit.parse(drop.read_text()))
    drop.write_text(relaid)
    again = runner.run(dict(args))
    assert again["changed"] is False and drop.read_text() == relaid


@pytest.mark.parametrize("runtime, name, users_own, plain_text", [
    ("docker", "daemon.json", '{\n    "features": {\n        "cdi": true\n    }\n}\n', '{\n    "debug": true\n}\n'),
    ("containerd", "config.toml", 'version = 2\n\n[plugins."io.containerd.grpc.v1.cri"]\n  enable_cdi = true\n', "version = 2\n"),
])
def test_absent_turns_cdi_off_only_where_it_was_ours(tmp_path, runtime, name, users_own, plain_text):
    path = tmp_path / name
    args = params(runtime=runtime, config_path=str(path), validate="", cdi=True, set_as_default=False)
    path.write_text(users_own)  # CDI on already (EKS's stock containerd config has enable_cdi = true)
    # docker's marker also remembers that daemon.json had no entry of the user's for the runtime, and the user's text
    found = {"runtime_before": None, "text_before": users_own} if runtime == "docker" else {}
    runner.run(dict(args))
    marker = tmp_path / (name + ".kubegpu.json")
    assert (json.loads(marker.read_text()) if marker.exists() else {}) == (dict(found, runtime="nvidia") if found else {})
    runner.run(dict(args, state="absent"))
    assert path.read_text() == users_own and not marker.exists()
    path.write_text(plain_text)  # CDI was ours to turn on
    runner.run(dict(args))
    if found:
        found["text_before"] = plain_text
    assert json.loads(marker.read_text()) == dict(found, runtime="nvidia", cdi_before=None)
    runner.run(dict(args, state="absent"))
    # the same settings again (containerd keeps a table header it emptied, as it keeps every headed table)
    settings = json.loads if runtime == "docker" else (lambda text: without_empty_tables(plain(tomlkit.parse(text))))
    assert settings(path.read_text()) == settings(plain_text) and not (tmp_path / (name + ".kubegpu.json")).exists()


@pytest.mark.parametrize("users_own", [
    # Debian's containerd package: no imports key; the drop-in remembers that the key was ours to add
    'version = 2\n\n[plugins]\n  [plugins."io.containerd.grpc.v1.cri"]\n    [plugins."io.containerd.grpc.v1.cri".cni]\n'
    '      bin_dir = "/usr/lib/cni"\n',
    # containerd config default: an empty imports list of the user's own, which stays
    'version = 2\nimports = []\noom_score = 0\n\n[plugins]\n  [plugins."io.containerd.grpc.v1.cri"]\n    sandbox_image = "x"\n',
    # an import of the user's own: only ours goes
    'version = 2\nimports = ["/etc/containerd/other.toml"]\n\n[plugins]\n  [plugins."io.containerd.grpc.v1.cri"]\n'
    '    sandbox_image = "x"\n',
])
def test_containerd_drop_in_absent_after_present_gives_config_toml_back_byte_for_byte(tmp_path, users_own):
    main = tmp_path / "config.toml"
    main.write_text(users_own)
    drop = tmp_path / "conf.d" / "99-nvidia.toml"
    args = params(runtime="containerd", config_path=str(main), drop_in_path=str(drop), validate="")
    runner.run(dict(args))
    assert str(drop) in tomlkit.parse(main.read_text())["imports"]
    assert runner.run(dict(args))["changed"] is False
    gone = runner.run(dict(args, state="absent"))
    assert gone["changed"] is True and main.read_text() == users_own and not drop.exists()
    assert runner.run(dict(args, state="absent"))["changed"] is False


def test_docker_way_back_is_byte_for_byte_and_the_marker_is_as_private_as_the_users_file(tmp_path):
    """Found by the fault suite (tests/faults): the way back re-serialized the user's daemon.json; the marker that now
    remembers their text is made with their file's mode, not 0644."""
    path = tmp_path / "daemon.json"
    users_own = '{\n  "log-opts": {"max-size": "10m"},   "debug": true\n}\n'
    path.write_text(users_own)
    os.chmod(str(path), 0o640)
    assert runner.run(params(config_path=str(path)))["changed"]
    marker = tmp_path / "daemon.json.kubegpu.json"
    assert json.loads(marker.read_text())["text_before"] == users_own
    assert oct(os.stat(str(marker)).st_mode & 0o777) == "0o640"
    assert runner.run(params(config_path=str(path), state="absent"))["changed"]
    assert path.read_text() == users_own and not marker.exists()
    assert oct(os.stat(str(path)).st_mode & 0o777) == "0o640"
