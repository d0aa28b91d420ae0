# SPDX-License-Identifier: GPL-3.0-or-later
"""nvidia_runtime_config end to end: `ansible localhost -m kubegpu.cluster.nvidia_runtime_config` on config files in
temporary directories, seeded like real ones, and containerd's own `config dump` as the judge of what containerd
will load."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import shutil
import subprocess

import pytest
import tomlkit

from ansible_cli import run_module
from setup_steps import missing_setup

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "runtime")
MODULE = "kubegpu.cluster.nvidia_runtime_config"
BIN = "/usr/bin/nvidia-container-runtime"
CRI = "io.containerd.grpc.v1.cri"
CONTAINERD = shutil.which("containerd") or next((p for p in ("/usr/sbin/containerd", "/usr/bin/containerd") if os.path.exists(p)), None)
needs_containerd = pytest.mark.skipif(CONTAINERD is None, reason="no containerd binary on this host: its own parser is the judge here")


# A containerd 2.x binary (2.4: config version 4, and it reads 3), when one is at hand: CONTAINERD2=/path/to/containerd
CONTAINERD2 = os.environ.get("CONTAINERD2")
needs_containerd2 = pytest.mark.usefixtures("containerd2_binary")


@pytest.fixture
def containerd2_binary():
    """Skips by hand (fails under make test, which builds it) when no containerd 2.x binary is at hand."""
    if not CONTAINERD2 or not os.access(CONTAINERD2, os.X_OK):
        missing_setup("set CONTAINERD2 to a containerd 2.x binary to check version 3 with containerd itself "
                      "(make containerd2 builds one)")


def module(args, check=False, diff=False, path_first=None):
    """Run the module once; returns (rc, the host's result). ``path_first``: a directory put first on PATH."""
    env = {"PATH": path_first + os.pathsep + os.environ.get("PATH", "")} if path_first else None
    return run_module(MODULE, args, check=check, diff=diff, env=env, timeout=300)


def seed(directory, fixture, name=None, mode=0o644, owner=None):
    path = directory / (name or fixture)
    shutil.copyfile(os.path.join(FIXTURES, fixture), str(path))
    os.chmod(str(path), mode)
    if owner is not None:
        os.chown(str(path), *owner)
    return path


def snapshot(directory):
    """Every file under ``directory``: bytes, mode, owner, inode and mtime."""
    out = {}
    for base, _dirs, files in os.walk(str(directory)):
        for name in files:
            path = os.path.join(base, name)
            st = os.stat(path)
            with open(path, "rb") as handle:
                out[path] = (handle.read(), st.st_mode, st.st_uid, st.st_gid, st.st_ino, st.st_mtime_ns)
    return out


def dump(main, binary=None):
    """What containerd itself makes of a config: `containerd --config MAIN config dump`, parsed."""
    proc = subprocess.run([binary or CONTAINERD, "--config", str(main), "config", "dump"], capture_output=True, text=True,
                          check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return tomlkit.parse(proc.stdout).unwrap()


def root_owner():
    return (1234, 4321) if os.geteuid() == 0 else None


# --- docker --------------------------------------------------------------------------------------------------------

def test_docker_check_real_idempotent_with_diff_backup_and_ownership(tmp_path):
    owner = root_owner()
    path = seed(tmp_path, "daemon.json", mode=0o640, owner=owner)
    original = path.read_bytes()
    args = {"runtime": "docker", "config_path": str(path), "backup": True, "cdi": True,
            "backup_dir": str(tmp_path / "backups")}

    before = snapshot(tmp_path)
    rc, check = module(args, check=True, diff=True)
    assert rc == 0 and check["changed"] is True and check["restart_required"] is True
    assert snapshot(tmp_path) == before  # check mode wrote nothing, not even a backup
    assert check["diff"][0]["before"] == original.decode() and '"default-runtime": "nvidia"' in check["diff"][0]["after"]

    rc, real = module(args, diff=True)
    assert rc == 0 and real["changed"] is True and real["diff"] == check["diff"]
    data = json.loads(path.read_text())
    assert data["runtimes"] == {"nvidia": {"path": BIN, "args": []}} and data["default-runtime"] == "nvidia"
    assert data["features"] == {"cdi": True}
    for key, value in json.loads(original).items():
        assert data[key] == value  # registry-mirrors, exec-opts, log-opts, storage-opts ... all kept
    st = os.stat(str(path))
    assert oct(st.st_mode & 0o777) == "0o640"
    if owner:
        assert (st.st_uid, st.st_gid) == owner
    assert open(real["backup_file"], "rb").read() == original and real["backup_files"] == {str(path): real["backup_file"]}

    after = snapshot(tmp_path)
    rc, again = module(args, diff=True)
    assert rc == 0 and again["changed"] is False and again["restart_required"] is False
    assert again["diff"][0]["before"] == again["diff"][0]["after"]
    assert snapshot(tmp_path) == after  # same bytes, same inode, same mtime, no new backup

    rc, gone = module(dict(args, state="absent", backup=False))
    assert rc == 0 and gone["changed"] is True and path.read_bytes() == original  # same serializer: byte for byte


@pytest.mark.parametrize("users_own", [
    "",  # an empty daemon.json
    '{\n  "runtimes": {\n    "nvidia": {\n      "path": "nvidia-container-runtime",\n      "runtimeArgs": []\n    }\n  }\n}\n',
])
def test_docker_a_users_file_survives_present_then_absent(tmp_path, users_own):
    """Issue 26: a daemon.json holding only the user's own nvidia runtime, or nothing, was deleted by present then
    absent."""
    path = tmp_path / "daemon.json"
    path.write_text(users_own)
    args = {"runtime": "docker", "config_path": str(path)}
    rc, present = module(args)
    assert rc == 0 and present["changed"] is True and json.loads(path.read_text())["default-runtime"] == "nvidia"
    rc, absent = module(dict(args, state="absent"))
    assert rc == 0 and absent["changed"] is True
    assert path.read_text() == users_own and sorted(os.listdir(str(tmp_path))) == ["daemon.json"]
    rc, again = module(dict(args, state="absent"))
    assert rc == 0 and again["changed"] is False and path.read_text() == users_own


def test_docker_malformed_json_is_one_error_and_the_file_stays(tmp_path):
    path = tmp_path / "daemon.json"
    path.write_text('{\n    "log-driver": "json-file",\n    "log-opts": {"max-size": "10m",}\n}\n')
    before = snapshot(tmp_path)
    rc, result = module({"runtime": "docker", "config_path": str(path)})
    assert rc != 0 and result["failed"] is True
    assert result["msg"] == "%s: line 3, column 36: invalid JSON: Expecting property name enclosed in double quotes" % path
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("runtime, make, kind", [
    ("docker", os.mkfifo, "a FIFO (named pipe)"),
    ("containerd", lambda path: os.symlink("/dev/zero", path), "a character device"),
])
def test_a_config_that_is_not_a_regular_file_is_refused_at_once(tmp_path, runtime, make, kind):
    """A FIFO used to hang the module and /dev/zero to end it with a MemoryError traceback."""
    path = tmp_path / "config"
    make(str(path))
    rc, result = run_module(MODULE, {"runtime": runtime, "config_path": str(path)}, timeout=60)
    assert rc != 0 and result["failed"] is True
    # named as the module reads it, links resolved (the link's target, /dev/zero)
    assert result["msg"].startswith("%s: is %s, not a regular file" % (os.path.realpath(str(path)), kind)), result["msg"]


def test_a_relative_config_path_is_refused_before_anything_is_read(tmp_path):
    rc, result = run_module(MODULE, {"runtime": "docker", "config_path": "etc/docker/daemon.json"}, timeout=60)
    assert rc != 0 and result["msg"] == (
        "config_path: must be an absolute path (or start with ~), not 'etc/docker/daemon.json': the module runs on the "
        "managed host, in a working directory nobody chose")


def test_docker_keeps_the_files_extended_attributes(tmp_path):
    path = seed(tmp_path, "daemon.json")
    try:
        os.setxattr(str(path), "user.kubegpu.test", b"kept")
    except OSError as exc:
        pytest.skip("the filesystem of %s refuses user.* extended attributes (%s)" % (tmp_path, exc.strerror))
    rc, result = module({"runtime": "docker", "config_path": str(path)})
    assert rc == 0 and result["changed"] is True
    assert os.getxattr(str(path), "user.kubegpu.test") == b"kept"


def test_docker_wrong_types_name_the_field(tmp_path):
    path = tmp_path / "daemon.json"
    path.write_text('{"runtimes": ["nvidia"]}\n')
    rc, result = module({"runtime": "docker", "config_path": str(path)})
    assert rc != 0 and result["msg"] == "%s: field 'runtimes': must be a JSON object, not array" % path


def test_docker_validate_failure_leaves_the_live_file_untouched(tmp_path):
    path = seed(tmp_path, "daemon.json")
    before = snapshot(tmp_path)
    rc, result = module({"runtime": "docker", "config_path": str(path), "validate": "python3 -c 'import sys; sys.exit(\"refused \" + sys.argv[1])' %s"})
    assert rc != 0 and "validation failed" in result["msg"] and str(path) in result["msg"]
    assert snapshot(tmp_path) == before


def test_docker_refuses_a_drop_in(tmp_path):
    rc, result = module({"runtime": "docker", "config_path": str(tmp_path / "daemon.json"), "drop_in_path": str(tmp_path / "x.json")})
    assert rc != 0 and "docker has no drop-in" in result["msg"] and os.listdir(str(tmp_path)) == []


# --- containerd 1.x, config version 2 -----------------------------------------------------------------------------

def _assert_containerd_loads_ours_and_the_users(main, cdi=False):
    cri = dump(main)["plugins"][CRI]
    runtime = cri["containerd"]["runtimes"]["nvidia"]
    assert runtime["runtime_type"] == "io.containerd.runc.v2"
    assert runtime["options"]["BinaryName"] == BIN
    assert runtime["options"]["SystemdCgroup"] is True  # inherited from runc
    assert cri["containerd"]["default_runtime_name"] == "nvidia"
    assert cri["sandbox_image"] == "registry.k8s.io/pause:3.9"  # the user's, not containerd's default 3.6
    assert cri["registry"]["mirrors"]["docker.io"]["endpoint"] == ["https://mirror.example.internal", "https://registry-1.docker.io"]
    assert cri["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is True
    assert cri.get("enable_cdi", False) is False or cdi  # containerd 1.6 does not know enable_cdi: it drops it


@needs_containerd
def test_containerd_v2_in_place_validated_by_containerd(tmp_path):
    owner = root_owner()
    main = seed(tmp_path, "containerd-1.6-kubeadm.toml", "config.toml", mode=0o600, owner=owner)
    args = {"runtime": "containerd", "config_path": str(main), "backup": True, "backup_dir": str(tmp_path / "backups")}
    before = snapshot(tmp_path)
    rc, check = module(args, check=True, diff=True)
    assert rc == 0 and check["changed"] and snapshot(tmp_path) == before
    rc, real = module(args, diff=True)
    assert rc == 0 and real["changed"] and real["config_version"] == 2 and real["config_path"] == str(main)
    assert real["diff"] == check["diff"] and "warnings" not in real
    _assert_containerd_loads_ours_and_the_users(main)
    text = main.read_text()
    assert "# pull through the site cache first" in text and "# kubeadm 1.29" in text  # comments kept
    st = os.stat(str(main))
    assert oct(st.st_mode & 0o777) == "0o600" and (not owner or (st.st_uid, st.st_gid) == owner)
    after = snapshot(tmp_path)
    rc, again = module(args)
    assert rc == 0 and not again["changed"] and snapshot(tmp_path) == after


@needs_containerd
def test_containerd_v2_drop_in_validated_by_containerd(tmp_path):
    main = seed(tmp_path, "containerd-1.6-kubeadm.toml", "config.toml")
    drop = tmp_path / "conf.d" / "99-nvidia.toml"
    args = {"runtime": "containerd", "config_path": str(main), "drop_in_path": str(drop), "backup": True,
            "backup_dir": str(tmp_path / "backups")}

    before = snapshot(tmp_path)
    rc, check = module(args, check=True, diff=True)
    assert rc == 0 and check["changed"] and snapshot(tmp_path) == before and not (tmp_path / "conf.d").exists()

    rc, real = module(args, diff=True)
    assert rc == 0 and real["changed"] and real["config_path"] == str(drop) and "warnings" not in real
    assert real["changed_files"] == [str(drop), str(main)] and real["diff"] == check["diff"]
    assert list(real["backup_files"]) == [str(main)]
    assert oct(os.stat(str(tmp_path / "conf.d")).st_mode & 0o777) == "0o755" and oct(os.stat(str(drop)).st_mode & 0o777) == "0o644"
    # the main file gained exactly one imports entry
    removed = [line for line in check["diff"][1]["before"].splitlines() if line not in check["diff"][1]["after"].splitlines()]
    added = [line for line in check["diff"][1]["after"].splitlines() if line not in check["diff"][1]["before"].splitlines()]
    assert removed == ["imports = []"] and added == ['imports = ["%s"]' % drop]
    _assert_containerd_loads_ours_and_the_users(main)
    drop_data = tomlkit.parse(drop.read_text()).unwrap()
    assert sorted(drop_data) == ["plugins", "version"] and list(drop_data["plugins"]) == [CRI]

    after = snapshot(tmp_path)
    rc, again = module(args)
    assert rc == 0 and not again["changed"] and snapshot(tmp_path) == after

    rc, gone = module(dict(args, backup=False, state="absent"))
    assert rc == 0 and gone["changed_files"] == [str(main), str(drop)] and not drop.exists()
    assert main.read_text() == open(os.path.join(FIXTURES, "containerd-1.6-kubeadm.toml")).read()
    rc, gone_again = module(dict(args, backup=False, state="absent"))
    assert rc == 0 and not gone_again["changed"]


@needs_containerd
def test_a_drop_in_with_only_our_runtime_would_lose_the_users_settings(tmp_path):
    """The control that shows the drop-in test above can fail: containerd 1.x replaces the whole CRI table."""
    main = seed(tmp_path, "containerd-1.6-kubeadm.toml", "config.toml")
    naive = tmp_path / "naive.toml"
    naive.write_text('version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\ndefault_runtime_name = "nvidia"\n'
                     '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\nruntime_type = "io.containerd.runc.v2"\n'
                     '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
                     'BinaryName = "%s"\nSystemdCgroup = true\n' % BIN)
    main.write_text(main.read_text().replace("imports = []", 'imports = ["%s"]' % naive))
    with pytest.raises(AssertionError) as info:
        _assert_containerd_loads_ours_and_the_users(main)
    assert "pause:3.6" in str(info.value)  # containerd's default came back: the user's 3.9 was lost
    assert dump(main)["plugins"][CRI]["sandbox_image"] == "registry.k8s.io/pause:3.6"


@needs_containerd
def test_containerd_drop_in_carries_what_an_earlier_import_set(tmp_path):
    """config.toml imports conf.d/10-registry.toml, a whole CRI table with a docker.io mirror (containerd 1.6 loads
    that table instead of the main file's). The drop-in is built from what containerd loads, so the mirror stays."""
    main = seed(tmp_path, "containerd-1.6-kubeadm.toml", "config.toml")
    kubeadm = tomlkit.parse(main.read_text())
    (tmp_path / "conf.d").mkdir()
    registry = tmp_path / "conf.d" / "10-registry.toml"
    cri = kubeadm["plugins"][CRI].unwrap()
    cri["registry"]["mirrors"]["docker.io"]["endpoint"] = ["https://registry-mirror.site.internal"]
    registry.write_text(tomlkit.dumps({"version": 2, "plugins": {CRI: cri}}))
    main.write_text(main.read_text().replace("imports = []", 'imports = ["conf.d/10-registry.toml"]'))
    assert dump(main)["plugins"][CRI]["registry"]["mirrors"]["docker.io"]["endpoint"] == ["https://registry-mirror.site.internal"]
    drop = tmp_path / "conf.d" / "99-nvidia.toml"
    rc, result = module({"runtime": "containerd", "config_path": str(main), "drop_in_path": str(drop)})
    assert rc == 0 and "warnings" not in result, result
    loaded = dump(main)["plugins"][CRI]
    assert loaded["registry"]["mirrors"]["docker.io"]["endpoint"] == ["https://registry-mirror.site.internal"]
    assert loaded["containerd"]["default_runtime_name"] == "nvidia"
    assert loaded["containerd"]["runtimes"]["nvidia"]["options"]["BinaryName"] == BIN


@needs_containerd
def test_containerd_drop_in_with_cdi_into_an_existing_glob(tmp_path):
    main = seed(tmp_path, "containerd-1.6-kubeadm.toml", "config.toml")
    (tmp_path / "conf.d").mkdir()
    glob = str(tmp_path / "conf.d" / "*.toml")
    main.write_text(main.read_text().replace("imports = []", 'imports = ["%s"]' % glob))
    original = main.read_text()
    drop = tmp_path / "conf.d" / "99-nvidia.toml"
    rc, result = module({"runtime": "containerd", "config_path": str(main), "drop_in_path": str(drop), "cdi": True})
    assert rc == 0 and result["changed_files"] == [str(drop)] and main.read_text() == original  # the glob covers it
    _assert_containerd_loads_ours_and_the_users(main, cdi=True)
    assert tomlkit.parse(drop.read_text()).unwrap()["plugins"][CRI]["enable_cdi"] is True
    if "enable_cdi" not in dump(main)["plugins"][CRI]:
        assert any("containerd 1.7 or later" in w for w in result["warnings"])


@needs_containerd
def test_containerd_validation_failure_leaves_the_live_files_untouched(tmp_path):
    main = seed(tmp_path, "containerd-1.6-kubeadm.toml", "config.toml")
    main.write_text(main.read_text().replace("imports = []", 'imports = ["%s"]' % (tmp_path / "missing.toml")))
    before = snapshot(tmp_path)
    rc, result = module({"runtime": "containerd", "config_path": str(main), "drop_in_path": str(tmp_path / "conf.d" / "99-nvidia.toml")})
    assert rc != 0 and "validation failed" in result["msg"] and "missing.toml" in result["msg"]
    assert snapshot(tmp_path) == before and not (tmp_path / "conf.d").exists()


@needs_containerd
def test_containerd_a_later_import_replacing_the_cri_table_is_refused(tmp_path):
    main = seed(tmp_path, "containerd-1.6-kubeadm.toml", "config.toml")
    late = tmp_path / "zz-late.toml"
    late.write_text('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\nsandbox_image = "registry.k8s.io/pause:3.9"\n')
    main.write_text(main.read_text().replace("imports = []", 'imports = ["%s"]' % late))
    before = snapshot(tmp_path)
    rc, result = module({"runtime": "containerd", "config_path": str(main)})
    assert rc != 0 and "runtime 'nvidia' is missing" in result["msg"] and snapshot(tmp_path) == before


def test_containerd_malformed_toml_is_one_error_and_the_file_stays(tmp_path):
    main = tmp_path / "config.toml"
    main.write_text('version = 2\n\n[plugins."io.containerd.grpc.v1.cri"\n  sandbox_image = "registry.k8s.io/pause:3.9"\n')
    before = snapshot(tmp_path)
    rc, result = module({"runtime": "containerd", "config_path": str(main)})
    assert rc != 0 and result["msg"].startswith("%s: line 3, column 37: invalid TOML: Unexpected character" % main)
    assert "\n" not in result["msg"] and snapshot(tmp_path) == before


def test_containerd_version_1_is_refused(tmp_path):
    main = tmp_path / "config.toml"
    main.write_text('[plugins.cri]\n  sandbox_image = "registry.k8s.io/pause:3.9"\n')
    rc, result = module({"runtime": "containerd", "config_path": str(main)})
    assert rc != 0 and "field 'version'" in result["msg"] and "containerd config migrate" in result["msg"]


# --- containerd 2.x, config version 3 -----------------------------------------------------------------------------

def test_containerd_v3_in_place_and_drop_in(tmp_path):
    main = seed(tmp_path, "containerd-2.x-v3.toml", "config.toml")
    rc, result = module({"runtime": "containerd", "config_path": str(main), "cdi": True})
    assert rc == 0 and result["changed"] and result["config_version"] == 3
    if CONTAINERD is not None:  # containerd 1.x here: it cannot read version 3, so it is not asked
        assert any("cannot read config version 3" in w for w in result.get("warnings", []))
    cri = tomlkit.parse(main.read_text()).unwrap()["plugins"]["io.containerd.cri.v1.runtime"]
    assert cri["containerd"]["runtimes"]["nvidia"]["options"] == dict(cri["containerd"]["runtimes"]["runc"]["options"], BinaryName=BIN)
    assert cri["containerd"]["default_runtime_name"] == "nvidia" and cri["enable_cdi"] is True
    assert "io.containerd.grpc.v1.cri" not in tomlkit.parse(main.read_text()).unwrap()["plugins"] or \
        "containerd" not in tomlkit.parse(main.read_text()).unwrap()["plugins"]["io.containerd.grpc.v1.cri"]

    fresh = seed(tmp_path, "containerd-2.x-v3.toml", "fresh.toml")
    drop = tmp_path / "conf.d" / "99-nvidia.toml"
    rc, result = module({"runtime": "containerd", "config_path": str(fresh), "drop_in_path": str(drop), "config_version": "3", "validate": ""})
    assert rc == 0 and result["config_version"] == 3 and "warnings" not in result
    data = tomlkit.parse(drop.read_text()).unwrap()
    assert data["version"] == 3 and list(data["plugins"]) == ["io.containerd.cri.v1.runtime"]
    assert data["plugins"]["io.containerd.cri.v1.runtime"]["cdi_spec_dirs"] == ["/etc/cdi", "/var/run/cdi"]
    rc, mismatch = module({"runtime": "containerd", "config_path": str(fresh), "config_version": "2"})
    assert rc != 0 and "has version = 3 but config_version=2" in mismatch["msg"]


@needs_containerd
def test_containerd_new_file_takes_the_installed_version(tmp_path):
    main = tmp_path / "etc" / "containerd" / "config.toml"
    rc, result = module({"runtime": "containerd", "config_path": str(main)})
    assert rc == 0 and result["config_version"] == 2  # containerd 1.6 on this host
    assert main.read_text().startswith("version = 2\n") and oct(os.stat(str(main)).st_mode & 0o777) == "0o644"
    assert dump(main)["plugins"][CRI]["containerd"]["runtimes"]["nvidia"]["options"]["BinaryName"] == BIN


@needs_containerd2
@pytest.mark.parametrize("drop_in", [False, True])
def test_containerd_v3_validated_by_containerd_2(tmp_path, drop_in):
    main = seed(tmp_path, "containerd-2.x-v3.toml", "config.toml")
    args = {"runtime": "containerd", "config_path": str(main), "cdi": True}
    if drop_in:
        args["drop_in_path"] = str(tmp_path / "conf.d" / "99-nvidia.toml")
    rc, result = module(args, path_first=os.path.dirname(CONTAINERD2))
    assert rc == 0 and result["changed"] and result["config_version"] == 3 and "warnings" not in result  # validated, dump checked
    plugins = dump(main, CONTAINERD2)["plugins"]
    cri = plugins["io.containerd.cri.v1.runtime"]
    runtime = cri["containerd"]["runtimes"]["nvidia"]
    assert runtime["options"]["BinaryName"] == BIN and runtime["options"]["SystemdCgroup"] is True
    assert runtime["sandboxer"] == "podsandbox" and cri["containerd"]["default_runtime_name"] == "nvidia"
    assert cri.get("enable_cdi", True) is True  # containerd 2.2 and later have no such option: CDI is always on
    assert cri["cni"]["bin_dirs"] == ["/opt/cni/bin"]  # the user's CRI settings are still loaded
    assert plugins["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"] == "registry.k8s.io/pause:3.10"
    rc, again = module(args, path_first=os.path.dirname(CONTAINERD2))
    assert rc == 0 and not again["changed"]


# --- containerd 2.3 and later, config version 4 ------------------------------------------------------------------

@needs_containerd2
@pytest.mark.parametrize("drop_in", [False, True])
def test_containerd_v4_default_config_validated_by_containerd_2_4(tmp_path, drop_in):
    """containerd 2.4's own `config default` (version 4): the runtime goes into the CRI runtime plugin, the version
    stays 4, containerd itself reads the result, and a second run changes nothing."""
    main = seed(tmp_path, "containerd-2.4-default-v4.toml", "config.toml")
    args = {"runtime": "containerd", "config_path": str(main)}
    if drop_in:
        args["drop_in_path"] = str(tmp_path / "conf.d" / "99-nvidia.toml")
    rc, result = module(args, path_first=os.path.dirname(CONTAINERD2))
    assert rc == 0 and result["changed"] and result["config_version"] == 4 and "warnings" not in result, result
    assert tomlkit.parse(main.read_text()).unwrap()["version"] == 4
    if drop_in:
        assert tomlkit.parse((tmp_path / "conf.d" / "99-nvidia.toml").read_text()).unwrap()["version"] == 4
    cri = dump(main, CONTAINERD2)["plugins"]["io.containerd.cri.v1.runtime"]
    runtime = cri["containerd"]["runtimes"]["nvidia"]
    assert runtime["options"]["BinaryName"] == BIN and runtime["runtime_type"] == "io.containerd.runc.v2"
    assert runtime["options"]["SystemdCgroup"] is False  # copied from runc, as containerd's default has it
    assert cri["containerd"]["default_runtime_name"] == "nvidia"
    rc, again = module(args, path_first=os.path.dirname(CONTAINERD2))
    assert rc == 0 and not again["changed"]


@needs_containerd2
def test_containerd_new_file_takes_version_4_from_containerd_2_4(tmp_path):
    main = tmp_path / "etc" / "containerd" / "config.toml"
    rc, result = module({"runtime": "containerd", "config_path": str(main)}, path_first=os.path.dirname(CONTAINERD2))
    assert rc == 0 and result["config_version"] == 4 and "warnings" not in result  # 2.4 writes 4, and validated it
    assert main.read_text().startswith("version = 4\n")
    assert dump(main, CONTAINERD2)["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["default_runtime_name"] == "nvidia"


@needs_containerd
def test_containerd_1_x_does_not_judge_version_4(tmp_path):
    main = seed(tmp_path, "containerd-2.4-default-v4.toml", "config.toml")
    rc, result = module({"runtime": "containerd", "config_path": str(main)})
    assert rc == 0 and result["changed"] and result["config_version"] == 4
    assert any("cannot read config version 4" in w for w in result.get("warnings", [])), result


# --- CRI-O -------------------------------------------------------------------------------------------------------

def test_crio_in_place_and_drop_in(tmp_path):
    conf = seed(tmp_path, "crio.conf")
    original = conf.read_text()
    rc, result = module({"runtime": "crio", "config_path": str(conf), "cdi": True}, diff=True)
    assert rc == 0 and result["changed"] and any("cdi is ignored for crio" in w for w in result["warnings"])
    runtime = tomlkit.parse(conf.read_text()).unwrap()["crio"]["runtime"]
    assert runtime["runtimes"]["nvidia"] == dict(runtime["runtimes"]["crun"], runtime_path=BIN)  # crun's settings
    assert runtime["default_runtime"] == "nvidia"
    rc, gone = module({"runtime": "crio", "config_path": str(conf), "set_as_default": False, "state": "absent"})
    assert rc == 0 and conf.read_text() == original  # crun is the default again, from the marker of the first run
    assert not (tmp_path / "crio.conf.kubegpu.json").exists()

    conf.write_text(original)
    drop = tmp_path / "crio.conf.d" / "99-nvidia.toml"
    args = {"runtime": "crio", "config_path": str(conf), "drop_in_path": str(drop)}
    rc, result = module(args)
    assert rc == 0 and result["changed_files"] == [str(drop)] and conf.read_text() == original
    dropped = tomlkit.parse(drop.read_text()).unwrap()
    crun = tomlkit.parse(original).unwrap()["crio"]["runtime"]["runtimes"]["crun"]
    assert dropped == {"crio": {"runtime": {"default_runtime": "nvidia", "runtimes": {"nvidia": dict(crun, runtime_path=BIN)}}}}
    rc, again = module(args)
    assert rc == 0 and not again["changed"]
    rc, gone = module(dict(args, state="absent"))
    assert rc == 0 and not drop.exists() and conf.read_text() == original


def test_crio_present_and_absent_leave_crio_conf_d_exactly_as_it_was(tmp_path):
    """Issue 26: CRI-O reads every file under crio.conf.d (cri-o pkg/config/config.go, UpdateFromPath walks it), so a
    backup of the drop-in beside it was loaded after it, old settings and all, even after state=absent. Here the
    directory holds a packaged 10-crio.conf; present, a changed present (a backup of the drop-in is taken) and absent
    (another) must leave it byte for byte, inode for inode, with nothing added; the backups are in backup_dir."""
    etc = tmp_path / "etc" / "crio"
    conf_d = etc / "crio.conf.d"
    conf_d.mkdir(parents=True)
    (conf_d / "10-crio.conf").write_text('[crio.runtime]\ndefault_runtime = "crun"\n\n'
                                         '[crio.runtime.runtimes.crun]\nruntime_path = "/usr/bin/crun"\n')
    conf = seed(etc, "crio.conf")
    backups = tmp_path / "backups"
    before = snapshot(conf_d)
    drop = conf_d / "99-nvidia.toml"
    args = {"runtime": "crio", "config_path": str(conf), "drop_in_path": str(drop), "backup": True,
            "backup_dir": str(backups)}

    rc, check = module(args, check=True)
    assert rc == 0 and check["changed"] and snapshot(conf_d) == before and not backups.exists()
    rc, first = module(args)
    assert rc == 0 and first["changed_files"] == [str(drop)] and first["backup_files"] == {}
    assert sorted(os.listdir(str(conf_d))) == ["10-crio.conf", "99-nvidia.toml"]
    rc, changed = module(dict(args, runtime_path="/usr/local/bin/nvidia-container-runtime"))
    assert rc == 0 and changed["changed"] and sorted(os.listdir(str(conf_d))) == ["10-crio.conf", "99-nvidia.toml"]
    backup = changed["backup_files"][str(drop)]
    assert backup.startswith(str(backups / str(drop).lstrip("/"))) and "runtime_path = \"%s\"" % BIN in open(backup).read()
    rc, gone = module(dict(args, state="absent"))
    assert rc == 0 and gone["changed"] and str(drop) in gone["backup_files"]
    assert snapshot(conf_d) == before  # nothing added, nothing touched
    assert [p.name for p in etc.iterdir() if p.name.startswith(".")] == []  # no candidate left behind either
    assert oct(os.stat(str(backups)).st_mode & 0o777) == "0o700"


def test_crio_refuses_a_backup_dir_it_reads(tmp_path):
    conf_d = tmp_path / "crio.conf.d"
    conf_d.mkdir()
    drop = conf_d / "99-nvidia.toml"
    drop.write_text("[crio.runtime]\n")
    before = snapshot(tmp_path)
    rc, result = module({"runtime": "crio", "config_path": str(tmp_path / "crio.conf"), "drop_in_path": str(drop),
                         "backup": True, "backup_dir": str(conf_d / "old")})
    assert rc != 0 and "where CRI-O reads every file" in result["msg"] and "backup_dir" in result["msg"]
    assert snapshot(tmp_path) == before
