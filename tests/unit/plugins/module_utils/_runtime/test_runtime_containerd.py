# SPDX-License-Identifier: GPL-3.0-or-later
"""containerd config.toml edits (versions 2, 3 and 4, in place and drop-in), version detection, imports and globs."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import difflib
import os

import pytest
import tomlkit
from hypothesis import given, settings as hsettings, strategies as st

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import FileError
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.constants import RUNTIME_NAME, RUNTIME_PATH
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime import base
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime import containerd
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.common import plain, without_empty_tables


def RuntimeSettings(name=RUNTIME_NAME, path=RUNTIME_PATH, **kwargs):  # pylint: disable=invalid-name
    """What the module asks for by default (the NVIDIA runtime), with ``kwargs`` changed."""
    return base.RuntimeSettings(name, path, **kwargs)


FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "fixtures", "runtime")
PATH = "/etc/containerd/config.toml"
V2 = ["plugins", "io.containerd.grpc.v1.cri"]
V3 = ["plugins", "io.containerd.cri.v1.runtime"]
BIN = "/usr/bin/nvidia-container-runtime"


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


def data(text):
    return plain(tomlkit.parse(text))


def at(tree, keys):
    for key in keys:
        tree = tree[key]
    return tree


def changed_lines(before, after):
    """(removed, added) lines of a unified diff."""
    diff = list(difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0))
    removed = [line[1:] for line in diff if line.startswith("-") and not line.startswith("---")]
    added = [line[1:] for line in diff if line.startswith("+") and not line.startswith("+++")]
    return removed, added


# --- In place, version 2 (containerd 1.x) ------------------------------------------------------------------------

def test_v2_present_on_the_kubeadm_config():
    text = fixture("containerd-1.6-kubeadm.toml")
    out = containerd.configure(text, PATH, RuntimeSettings(), 2)
    cri = at(data(out), V2)
    ours = cri["containerd"]["runtimes"]["nvidia"]
    runc = cri["containerd"]["runtimes"]["runc"]
    assert ours["runtime_type"] == "io.containerd.runc.v2"
    assert ours["options"]["BinaryName"] == BIN
    assert ours["options"]["SystemdCgroup"] is True  # inherited from runc
    assert dict(ours["options"], BinaryName="") == runc["options"]
    assert dict((k, v) for k, v in ours.items() if k != "options") == dict((k, v) for k, v in runc.items() if k != "options")
    assert cri["containerd"]["default_runtime_name"] == "nvidia"
    assert "enable_cdi" not in cri
    # the rest is untouched, comments included: one line changed, the runtime's lines added
    removed, added = changed_lines(text, out)
    assert removed == ['      default_runtime_name = "runc"']
    assert added[0] == '      default_runtime_name = "nvidia"'
    assert '        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]' in added
    assert '            BinaryName = "/usr/bin/nvidia-container-runtime"' in added
    assert '            SystemdCgroup = true' in added
    for kept in ("# pull through the site cache first", '"registry.k8s.io/pause:3.9"  # kubeadm 1.29', "# Written by 'containerd config default'"):
        assert kept in out


def test_v2_present_is_a_no_op_the_second_time():
    once = containerd.configure(fixture("containerd-1.6-default.toml"), PATH, RuntimeSettings(cdi=True), 2)
    assert containerd.configure(once, PATH, RuntimeSettings(cdi=True), 2) == once


def test_v2_cdi_sets_enable_cdi_on_the_cri_plugin():
    out = containerd.configure(fixture("containerd-1.6-default.toml"), PATH, RuntimeSettings(cdi=True), 2)
    assert at(data(out), V2)["enable_cdi"] is True
    assert '\n    enable_cdi = true\n' in out  # lined up with its neighbours


def test_set_as_default_false_keeps_runc_the_default():
    out = containerd.configure(fixture("containerd-1.6-default.toml"), PATH, RuntimeSettings(set_as_default=False), 2)
    cri = at(data(out), V2)
    assert cri["containerd"]["default_runtime_name"] == "runc"
    assert "nvidia" in cri["containerd"]["runtimes"]


# --- Version 3 (containerd 2.x) ------------------------------------------------------------------------------------

def test_v3_present_uses_the_cri_runtime_plugin():
    text = fixture("containerd-2.x-v3.toml")
    out = containerd.configure(text, PATH, RuntimeSettings(cdi=True, name="nvidia-cdi"), 3)
    tree = data(out)
    cri = at(tree, V3)
    ours = cri["containerd"]["runtimes"]["nvidia-cdi"]
    assert ours["options"]["BinaryName"] == BIN and ours["options"]["SystemdCgroup"] is True
    assert ours["sandboxer"] == "podsandbox"
    assert cri["containerd"]["default_runtime_name"] == "nvidia-cdi"
    assert cri["enable_cdi"] is True
    assert "io.containerd.grpc.v1.cri" not in tree["plugins"] or "containerd" not in tree["plugins"]["io.containerd.grpc.v1.cri"]
    assert tree["plugins"]["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"] == "registry.k8s.io/pause:3.10"
    assert containerd.configure(out, PATH, RuntimeSettings(cdi=True, name="nvidia-cdi"), 3) == out


@pytest.mark.parametrize("version, plugin", [(2, "io.containerd.grpc.v1.cri"), (3, "io.containerd.cri.v1.runtime"),
                                             (4, "io.containerd.cri.v1.runtime")])
def test_a_new_file_gets_version_on_top(version, plugin):
    out = containerd.configure(None, PATH, RuntimeSettings(), version)
    assert out.startswith("version = %d\n" % version)
    assert data(out) == {"version": version, "plugins": {plugin: {"containerd": {
        "default_runtime_name": "nvidia",
        "runtimes": {"nvidia": {"runtime_type": "io.containerd.runc.v2", "options": {"BinaryName": BIN}}}}}}}


def test_a_file_of_comments_keeps_them_after_the_version():
    out = containerd.configure("# managed by hand\n", PATH, RuntimeSettings(), 2)
    assert out.startswith("version = 2\n\n# managed by hand\n")


# --- Where the runtime's settings come from -----------------------------------------------------------------------

RUNTIMES = """version = 2
[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "%s"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = false
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun.options]
  BinaryName = "/usr/bin/crun"
  SystemdCgroup = true
  Root = "/run/crun"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kata]
  runtime_type = "io.containerd.kata.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kata.options]
  ConfigPath = "/etc/kata/configuration.toml"
"""


@pytest.mark.parametrize("default, options", [
    ("crun", {"BinaryName": BIN, "SystemdCgroup": True, "Root": "/run/crun"}),  # the default runtime first
    ("runc", {"BinaryName": BIN, "SystemdCgroup": False}),
    ("kata", {"BinaryName": BIN, "SystemdCgroup": False}),  # not a runc shim: runc instead
    ("nvidia", {"BinaryName": BIN, "SystemdCgroup": False}),  # ours is no template: runc
    ("missing", {"BinaryName": BIN, "SystemdCgroup": False}),
])
def test_options_come_from_the_default_runtime_then_runc_then_crun(default, options):
    out = containerd.configure(RUNTIMES % default, PATH, RuntimeSettings(set_as_default=False), 2)
    assert at(data(out), V2 + ["containerd", "runtimes", "nvidia", "options"]) == options


def test_crun_is_the_template_when_there_is_no_runc():
    text = "\n".join(line for line in (RUNTIMES % "").splitlines() if ".runc" not in line and "SystemdCgroup = false" not in line)
    text = text.replace('  runtime_type = "io.containerd.runc.v2"\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun]',
                        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun]')
    out = containerd.configure(text, PATH, RuntimeSettings(set_as_default=False), 2)
    assert at(data(out), V2 + ["containerd", "runtimes", "nvidia", "options"])["SystemdCgroup"] is True


def test_an_existing_runtime_of_ours_is_refreshed_from_the_template():
    """A stale setting of ours follows the template again (runc has SystemdCgroup = false here); a key only our
    table has stays; the shim and the binary are enforced."""
    text = RUNTIMES % "runc" + """[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v1"
  privileged_without_host_devices = true
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
  BinaryName = "/old/nvidia-container-runtime"
  SystemdCgroup = true
"""
    out = containerd.configure(text, PATH, RuntimeSettings(set_as_default=False), 2)
    ours = at(data(out), V2 + ["containerd", "runtimes", "nvidia"])
    assert ours == {"runtime_type": "io.containerd.runc.v2", "privileged_without_host_devices": True,
                    "options": {"BinaryName": BIN, "SystemdCgroup": False}}
    removed, added = changed_lines(text, out)
    assert len(removed) == len(added) == 3
    assert containerd.configure(out, PATH, RuntimeSettings(set_as_default=False), 2) == out


def test_another_nvidia_runtime_is_never_the_template():
    text = RUNTIMES % "nvidia-legacy" + """[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia-legacy]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia-legacy.options]
  BinaryName = "/usr/bin/nvidia-container-runtime.legacy"
  SystemdCgroup = true
"""
    ours = at(data(containerd.configure(text, PATH, RuntimeSettings(), 2)), V2 + ["containerd", "runtimes", "nvidia"])
    assert ours["options"] == {"BinaryName": BIN, "SystemdCgroup": False}  # runc's, not nvidia-legacy's


# --- Layouts tomlkit finds hard ------------------------------------------------------------------------------------

def test_a_dotted_key_layout_is_edited_correctly():
    text = """version = 2
[plugins."io.containerd.grpc.v1.cri"]
  containerd.default_runtime_name = "runc"
  containerd.runtimes.runc = { runtime_type = "io.containerd.runc.v2", options = { SystemdCgroup = true } }
"""
    out = containerd.configure(text, PATH, RuntimeSettings(), 2)
    cri = at(data(out), V2)
    assert "containerd" not in data(out)  # tomlkit alone would put the table at the top level
    assert cri["containerd"]["runtimes"]["nvidia"]["options"] == {"BinaryName": BIN, "SystemdCgroup": True}
    assert cri["containerd"]["default_runtime_name"] == "nvidia"
    assert containerd.configure(out, PATH, RuntimeSettings(), 2) == out


def test_an_inline_runtimes_table_is_edited_correctly():
    text = 'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\n  runtimes = { runc = { runtime_type = "io.containerd.runc.v2" } }\n'
    out = containerd.configure(text, PATH, RuntimeSettings(), 2)
    assert at(data(out), V2 + ["containerd", "runtimes", "nvidia", "options", "BinaryName"]) == BIN


def test_out_of_order_tables_are_edited_correctly():
    text = """version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "pause"
[plugins."io.containerd.gc.v1.scheduler"]
  pause_threshold = 0.02
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = true
"""
    out = containerd.configure(text, PATH, RuntimeSettings(cdi=True), 2)
    cri = at(data(out), V2)
    assert cri["sandbox_image"] == "pause" and cri["enable_cdi"] is True
    assert cri["containerd"]["runtimes"]["nvidia"]["options"] == {"BinaryName": BIN, "SystemdCgroup": True}


# --- Absent ------------------------------------------------------------------------------------------------------

def test_absent_after_present_gives_back_the_default_config_but_the_default_runtime():
    text = fixture("containerd-1.6-default.toml")
    back = containerd.unconfigure(containerd.configure(text, PATH, RuntimeSettings(cdi=True), 2), PATH,
                                  RuntimeSettings(cdi=True, cdi_added=True), 2)  # the engine's marker knows it was ours
    removed, added = changed_lines(text, back)
    assert removed == ['      default_runtime_name = "runc"'] and added == []  # nothing restored: containerd's default is runc


def test_absent_after_present_without_default_is_byte_identical():
    text = fixture("containerd-1.6-kubeadm.toml")
    ask = RuntimeSettings(set_as_default=False)
    assert containerd.unconfigure(containerd.configure(text, PATH, ask, 2), PATH, ask, 2) == text


def test_absent_keeps_a_foreign_default_and_enable_cdi_unless_it_was_ours():
    text = RUNTIMES % "crun" + '[plugins."io.containerd.grpc.v1.cri"]\n  enable_cdi = true\n'
    out = containerd.unconfigure(text, PATH, RuntimeSettings(), 2)
    assert out == text
    assert containerd.unconfigure(text, PATH, RuntimeSettings(cdi=True), 2) == text  # the user's own (EKS ships it)
    out = containerd.unconfigure(text, PATH, RuntimeSettings(cdi=True, cdi_added=True), 2)
    assert "enable_cdi" not in at(data(out), V2)


def test_absent_prunes_tables_it_left_empty_without_a_header_but_not_headed_ones():
    new = containerd.configure(None, PATH, RuntimeSettings(set_as_default=False), 3)
    assert containerd.unconfigure(new, PATH, RuntimeSettings(), 3) == "version = 3\n"
    headed = 'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes]\n'
    out = containerd.configure(headed, PATH, RuntimeSettings(set_as_default=False), 2)
    assert containerd.unconfigure(out, PATH, RuntimeSettings(), 2) == headed


def test_absent_on_missing_or_empty_files_changes_nothing():
    assert containerd.unconfigure(None, PATH, RuntimeSettings(), 2) is None
    assert containerd.unconfigure("", PATH, RuntimeSettings(), 2) == ""


# --- Bad input ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, line, column", [
    ('version = 2\n[plugins."io.containerd.grpc.v1.cri"\n  sandbox_image = "x"\n', 2, 37),
    ('version = 2\nroot = "/var/lib/containerd\n', 2, 28),
    ('version = 2\n[plugins]\na = \n', 3, 5),
])
def test_malformed_toml_names_file_line_and_column(text, line, column):
    with pytest.raises(FileError) as info:
        containerd.configure(text, PATH, RuntimeSettings(), 2)
    assert (info.value.path, info.value.line, info.value.column) == (PATH, line, column)
    assert str(info.value).startswith("%s: line %d, column %d: invalid TOML: " % (PATH, line, column))
    assert "\n" not in str(info.value) and " at line " not in str(info.value)


@pytest.mark.parametrize("text, field", [
    ('version = 2\nplugins = "none"\n', "plugins"),
    ('version = 2\n[plugins]\n"io.containerd.grpc.v1.cri" = 3\n', 'plugins."io.containerd.grpc.v1.cri"'),
    ('version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\nruntimes = ["runc"]\n',
     'plugins."io.containerd.grpc.v1.cri".containerd.runtimes'),
    ('version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes]\nnvidia = "x"\n',
     'plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia'),
])
def test_wrong_types_name_the_field(text, field):
    with pytest.raises(FileError) as info:
        containerd.configure(text, PATH, RuntimeSettings(), 2)
    assert info.value.field == field and "must be a table" in str(info.value) and PATH in str(info.value)


# --- Versions ----------------------------------------------------------------------------------------------------

def _never():
    raise AssertionError("containerd --version must not be asked")


@pytest.mark.parametrize("requested, text, binary, expected", [
    ("auto", "version = 2\n", _never, 2),
    ("auto", "version = 3\n", _never, 3),
    ("auto", None, lambda: None, 2),  # no file, no binary: what nvidia-ctk assumes
    ("auto", None, lambda: 1, 2),
    ("auto", "", lambda: 2, 3),
    ("auto", "# only a comment\n\n", lambda: 2, 3),
    ("auto", None, lambda: (1, 7), 2),
    ("auto", None, lambda: (2, 2), 3),  # 2.2 is the newest that writes version 3
    ("auto", None, lambda: (2, 3), 4),
    ("auto", "", lambda: (2, 4), 4),
    ("auto", "version = 4\n", _never, 4),
    ("4", None, _never, 4),
    ("2", None, _never, 2),
    ("3", "", _never, 3),
    ("3", "version = 3\n", _never, 3),
    (None, "version = 2\n", _never, 2),
])
def test_resolve_version(requested, text, binary, expected):
    assert containerd.resolve_version(requested, text, PATH, binary) == expected


@pytest.mark.parametrize("requested, text, words", [
    ("auto", 'root = "/var/lib/containerd"\n', "version 1"),
    ("2", '[plugins.cri]\nsandbox_image = "x"\n', "containerd config migrate"),
    ("auto", "version = 1\n", "'version = 1'"),
    ("auto", "version = 5\n", "unsupported config version 5"),
    ("4", "version = 3\n", "has version = 3 but config_version=4"),
    ("auto", 'version = "2"\n', "must be an integer"),
    ("auto", "version = true\n", "must be an integer"),
    ("3", "version = 2\n", "has version = 2 but config_version=3"),
])
def test_resolve_version_refuses(requested, text, words):
    with pytest.raises(FileError) as info:
        containerd.resolve_version(requested, text, PATH, lambda: 2)
    assert words in str(info.value) and info.value.field == "version" and PATH in str(info.value)


@pytest.mark.parametrize("output, major", [
    ("containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3", 1),
    ("containerd containerd.io 1.7.27 05044ec0a9a75232cad458027ca83437aae3f4da", 1),
    ("containerd github.com/containerd/containerd/v2 v2.1.4 75cb2b7193e4e490e9fbdc236c0e811ccaba3376", 2),
    ("", None),
    ("containerd: command not found", None),
])
def test_binary_major(output, major):
    assert containerd.binary_major(output) == major


@pytest.mark.parametrize("output, version, config", [
    ("containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3", (1, 6), 2),
    ("containerd github.com/containerd/containerd/v2 v2.2.9 0123abcd", (2, 2), 3),
    ("containerd github.com/containerd/containerd/v2 2.4.2+unknown ", (2, 4), 4),
    ("containerd github.com/containerd/containerd/v2 v2.3.0-rc.1 0123abcd", (2, 3), 4),
])
def test_binary_version_and_the_config_version_it_writes(output, version, config):
    assert containerd.binary_version(output) == version
    assert containerd.readable_version(version) == config


# --- Drop-in -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, version, keys", [
    ("containerd-1.6-kubeadm.toml", 2, V2),
    ("containerd-2.x-v3.toml", 3, V3),
])
def test_drop_in_carries_the_whole_cri_table_and_nothing_else(name, version, keys):
    main = fixture(name)
    text = containerd.drop_in(main, PATH, RuntimeSettings(cdi=True), version)
    tree = data(text)
    assert sorted(tree) == ["plugins", "version"] and tree["version"] == version
    assert list(tree["plugins"]) == [keys[1]]
    expected = at(data(main), keys)
    got = at(tree, keys)
    ours = got["containerd"]["runtimes"].pop("nvidia")
    assert got["containerd"].pop("default_runtime_name") == "nvidia"
    assert got.pop("enable_cdi") is True
    expected["containerd"].pop("default_runtime_name")
    expected.pop("enable_cdi", None)
    assert got == expected
    assert ours["options"]["BinaryName"] == BIN and ours["options"]["SystemdCgroup"] is True
    assert containerd.drop_in(main, PATH, RuntimeSettings(cdi=True), version) == text  # deterministic


def test_drop_in_without_a_main_config():
    text = containerd.drop_in(None, PATH, RuntimeSettings(), 3)
    assert data(text) == {"version": 3, "plugins": {"io.containerd.cri.v1.runtime": {"containerd": {
        "default_runtime_name": "nvidia",
        "runtimes": {"nvidia": {"runtime_type": "io.containerd.runc.v2", "options": {"BinaryName": BIN}}}}}}}


DROP = "/etc/containerd/conf.d/99-nvidia.toml"


@pytest.mark.parametrize("main, expected", [
    ("version = 2\nimports = []\n", 'version = 2\nimports = ["%s"]\n' % DROP),
    ('version = 2\nimports = ["/etc/containerd/site.toml"]  # site\n', 'version = 2\nimports = ["/etc/containerd/site.toml", "%s"]  # site\n' % DROP),
    ('version = 2\n\n[plugins.x]\na = 1\n', 'version = 2\nimports = ["%s"]\n\n[plugins.x]\na = 1\n' % DROP),
    (None, 'version = 2\nimports = ["%s"]\n' % DROP),
    ('version = 2\nimports = ["conf.d/*.toml"]\n', 'version = 2\nimports = ["conf.d/*.toml", "%s"]\n' % DROP),  # relative glob: cwd-relative
])
def test_add_import(main, expected):
    assert containerd.add_import(main, PATH, DROP, 2) == expected


@pytest.mark.parametrize("imports", [
    '["/etc/containerd/conf.d/99-nvidia.toml"]',
    '["/etc/containerd/conf.d/*.toml"]',
    '["/etc/containerd/conf.d/9?-*"]',
    '["/etc/containerd/*/99-nvidia.toml"]',
    '["conf.d/99-nvidia.toml"]',  # relative to the main config
    '["/etc/containerd/conf.d/../conf.d/99-nvidia.toml"]',
])
def test_add_import_leaves_imports_that_already_load_the_drop_in(imports):
    main = "version = 2\nimports = %s\n" % imports
    assert containerd.add_import(main, PATH, DROP, 2) is main


def test_remove_import_removes_only_the_exact_entry():
    main = 'version = 2\nimports = ["/etc/containerd/site.toml", "%s"]\n' % DROP
    assert containerd.remove_import(main, PATH, DROP) == 'version = 2\nimports = ["/etc/containerd/site.toml"]\n'
    # a stub of version and our import alone is what adding the import made: it goes, as nvidia-ctk deletes it
    assert containerd.remove_import('version = 2\nimports = ["%s"]\n' % DROP, PATH, DROP) is None
    commented = '# kept by hand\nversion = 2\nimports = ["%s"]\n' % DROP
    assert containerd.remove_import(commented, PATH, DROP) == "# kept by hand\nversion = 2\nimports = []\n"
    globbed = 'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n'
    assert containerd.remove_import(globbed, PATH, DROP) is globbed


def test_imports_must_be_a_list_of_strings():
    with pytest.raises(FileError, match="field 'imports'"):
        containerd.add_import('version = 2\nimports = "/x.toml"\n', PATH, DROP, 2)


@pytest.mark.parametrize("pattern, name, matches", [
    ("/etc/containerd/conf.d/*.toml", "/etc/containerd/conf.d/99-nvidia.toml", True),
    ("/etc/containerd/conf.d/*.toml", "/etc/containerd/conf.d/sub/99-nvidia.toml", False),  # * stops at /
    ("/etc/containerd/conf.d/*", "/etc/containerd/conf.d/.hidden", True),  # unlike a shell, Go matches dot files
    ("/etc/*/conf.d/9[0-9]-*.toml", "/etc/containerd/conf.d/99-nvidia.toml", True),
    ("/etc/containerd/conf.d/[^0-8]*", "/etc/containerd/conf.d/99-nvidia.toml", True),
    ("/etc/containerd/conf.d/[^9]*", "/etc/containerd/conf.d/99-nvidia.toml", False),
    ("/etc/containerd/conf.d/?9-nvidia.toml", "/etc/containerd/conf.d/99-nvidia.toml", True),
    ("/etc/containerd/conf.d/\\*.toml", "/etc/containerd/conf.d/*.toml", True),
    ("/etc/containerd/conf.d/[", "/etc/containerd/conf.d/[", False),  # malformed: no match
])
def test_go_match(pattern, name, matches):
    assert containerd.go_match(pattern, name) is matches


def test_go_glob_lists_in_gos_order_with_an_extra_path(tmp_path):
    conf = tmp_path / "conf.d"
    conf.mkdir()
    for name in ("50-site.toml", "10-base.toml", "notes.txt", "z.toml"):
        (conf / name).write_text("")
    pattern = str(conf / "*.toml")
    assert containerd.go_glob(pattern) == [str(conf / n) for n in ("10-base.toml", "50-site.toml", "z.toml")]
    extra = str(conf / "99-nvidia.toml")
    assert containerd.go_glob(pattern, extra=extra, exclude={str(conf / "z.toml")}) == \
        [str(conf / n) for n in ("10-base.toml", "50-site.toml", "99-nvidia.toml")]
    assert containerd.go_glob(str(tmp_path / "*" / "1*.toml")) == [str(conf / "10-base.toml")]
    assert containerd.go_glob(str(tmp_path / "missing" / "*.toml"), extra=str(tmp_path / "missing" / "a.toml")) == \
        [str(tmp_path / "missing" / "a.toml")]


def test_validation_imports_point_at_the_candidate(tmp_path):
    conf = tmp_path / "conf.d"
    conf.mkdir()
    for name in ("10-base.toml", "99-nvidia.toml", "zz-late.toml"):
        (conf / name).write_text("")
    drop, cand = str(conf / "99-nvidia.toml"), str(conf / ".99-nvidia.toml.x.tmp")
    main = str(tmp_path / "config.toml")
    globbed = ["/etc/other.toml", str(conf / "*.toml")]
    assert containerd.validation_imports(globbed, main, drop, cand) == \
        ["/etc/other.toml", str(conf / "10-base.toml"), cand, str(conf / "zz-late.toml")]
    assert containerd.validation_imports(globbed, main, drop, None) == \
        ["/etc/other.toml", str(conf / "10-base.toml"), str(conf / "zz-late.toml")]
    assert containerd.validation_imports(["conf.d/99-nvidia.toml", "site.toml"], main, drop, cand) == [cand, "site.toml"]
    assert containerd.validation_imports(["conf.d/*.toml"], main, drop, cand) == ["conf.d/*.toml"]  # cwd-relative: kept


# --- What containerd's dump says -------------------------------------------------------------------------------------

DUMP = """version = 2
[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "registry.k8s.io/pause:3.9"
    enable_cdi = true
    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "nvidia"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
        BinaryName = "/usr/bin/nvidia-container-runtime"
"""


def test_dump_problems():
    cri = containerd.dumped_cri(DUMP, 1)
    assert containerd.dumped_runtime_problems(cri, RuntimeSettings(cdi=True)) == ([], [])
    assert containerd.dumped_runtime_problems(cri, RuntimeSettings(name="gpu")) == (["runtime 'gpu' is missing", "default_runtime_name is 'nvidia'"], [])
    assert containerd.dumped_runtime_problems(cri, RuntimeSettings(path="/opt/x")) == \
        (["runtime 'nvidia' has BinaryName '/usr/bin/nvidia-container-runtime'"], [])
    no_cdi = containerd.dumped_cri(DUMP.replace("enable_cdi = true", ""), 1)  # containerd 1.6 drops the key
    problems, notes = containerd.dumped_runtime_problems(no_cdi, RuntimeSettings(cdi=True))
    assert problems == [] and "containerd 1.7 or later" in notes[0]
    assert containerd.dumped_runtime_problems(containerd.dumped_cri(DUMP.replace("enable_cdi = true", "enable_cdi = false"), 1),
                                              RuntimeSettings(cdi=True)) == (["enable_cdi is False"], [])
    assert containerd.dumped_cri(DUMP, 2) is None  # containerd 2.x dumps the v3 layout
    assert containerd.dumped_cri("not [toml", 1) is None
    assert containerd.dumped_runtime_problems(None, RuntimeSettings()) == (["the dump has no CRI runtime plugin table"], [])


def test_changed_cri_settings_ignores_ours():
    before = containerd.dumped_cri(DUMP.replace('"nvidia"', '"runc"').replace("enable_cdi = true", "enable_cdi = false"), 1)
    after = containerd.dumped_cri(DUMP.replace("pause:3.9", "pause:3.6"), 1)
    assert containerd.changed_cri_settings(before, after, RuntimeSettings()) == ["sandbox_image"]
    assert containerd.changed_cri_settings(None, after, RuntimeSettings()) == []


# --- Properties over generated config.toml files -------------------------------------------------------------------

_names = st.sampled_from(["runc", "crun", "kata", "runsc", "nvidia-legacy"])
_key = st.from_regex(r"\A[a-z][a-z_]{0,10}\Z")
_scalar = st.one_of(st.booleans(), st.integers(-1000, 10 ** 6), st.text(st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), max_size=10),
                    st.lists(st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=6), max_size=3))
_options = st.dictionaries(st.sampled_from(["SystemdCgroup", "BinaryName", "Root", "NoPivotRoot", "IoUid", "ShimCgroup"]),
                           _scalar, max_size=4)
_runtime = st.fixed_dictionaries({"runtime_type": st.sampled_from(["io.containerd.runc.v2", "io.containerd.kata.v2"])},
                                 optional={"options": _options, "privileged_without_host_devices": st.booleans(),
                                           "runtime_path": st.just("")})
_containerd = st.fixed_dictionaries({}, optional={
    "default_runtime_name": _names,
    "snapshotter": st.sampled_from(["overlayfs", "native"]),
    "runtimes": st.dictionaries(_names, _runtime, max_size=3),
})
_cri = st.fixed_dictionaries({}, optional={
    "sandbox_image": st.just("registry.k8s.io/pause:3.9"),
    "enable_cdi": st.booleans(),
    "containerd": _containerd,
    "registry": st.fixed_dictionaries({"mirrors": st.dictionaries(
        st.sampled_from(["docker.io", "quay.io"]),
        st.fixed_dictionaries({"endpoint": st.lists(st.just("https://m.example"), max_size=2)}),
        max_size=2)}),
}).flatmap(lambda known: st.dictionaries(_key, _scalar, max_size=3).map(lambda extra: dict(extra, **known)))


@st.composite
def _config(draw):
    version = draw(st.sampled_from([2, 3, 4]))
    plugin = containerd.CRI_PLUGIN[version]
    tree = {"version": version}
    tree.update(draw(st.dictionaries(st.sampled_from(["root", "state", "oom_score", "temp"]), _scalar, max_size=3)))
    plugins = {}
    if draw(st.booleans()):
        plugins[plugin] = draw(_cri)
    if draw(st.booleans()):
        plugins["io.containerd.gc.v1.scheduler"] = {"pause_threshold": 0.02, "schedule_delay": "0s"}
    if plugins:
        tree["plugins"] = plugins
    style = draw(st.sampled_from(["headers", "headers", "inline-options", "dotted-containerd"]))
    return version, tree, draw(st.integers(0, 2)), draw(st.booleans()), style


def _render(tree, step, comments, style="headers"):
    """TOML text for plain data the way people write containerd configs: [headers], indented or not, comments;
    some write a runtime's options as an inline table, or the CRI plugin's containerd table with dotted keys."""
    lines = []

    def inline(path, value):
        return style == "inline-options" and path[-1:] == ("options",) or \
            style == "dotted-containerd" and len(path) > 2 and path[2] == "containerd"

    def emit(table, path, depth):
        scalars = [(k, v) for k, v in table.items() if not isinstance(v, dict) or inline(path + [k], v)]
        tables = [(k, v) for k, v in table.items() if isinstance(v, dict) and not inline(path + [k], v)]
        pad = " " * (step * depth)
        if path and (scalars or not tables):
            lines.append("")
            lines.append("%s[%s]" % (pad, containerd.dotted(path)))
        for key, value in scalars:
            if comments:
                lines.append("%s# about %s" % (pad + " " * step, key))
            if isinstance(value, dict) and style == "dotted-containerd" and not path[2:]:
                for sub, item in (_flat(value, (key,)) or {(key,): {}}).items():
                    lines.append("%s%s = %s" % (pad + " " * step, containerd.dotted(list(sub)), _toml(item)))
                continue
            lines.append("%s%s = %s" % (pad + " " * step if path else "", containerd.dotted([key]), _toml(value)))
        for key, value in tables:
            emit(value, path + [key], depth + 1 if path else depth)

    emit(tree, [], 0)
    return "\n".join(lines) + "\n"


def _toml(value):
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{ %s }" % ", ".join("%s = %s" % (containerd.dotted([k]), _toml(v)) for k, v in value.items())
    return tomlkit.item(value).as_string()


def _flat(tree, prefix=()):
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out.update(_flat(value, prefix + (key,)))
        else:
            out[prefix + (key,)] = value
    return out


_asks = st.builds(RuntimeSettings, name=st.sampled_from(["nvidia", "nvidia-cdi"]), path=st.just(BIN),
                  set_as_default=st.booleans(), cdi=st.booleans())


def _flat_keys_last(tree, prefix):
    """The keys directly under the CRI table ``prefix`` of ``tree``."""
    table = tree
    for part in prefix:
        table = table.get(part, {}) if isinstance(table, dict) else {}
    return set(table) if isinstance(table, dict) else set()


@hsettings(max_examples=200, deadline=None)
@given(_config(), _asks)
def test_property_user_settings_survive_ours_are_there_and_a_second_run_is_a_no_op(config, ask):
    version, tree, step, comments, style = config
    text = _render(tree, step, comments, style)
    assert data(text) == tree  # the generator writes what it means
    out = containerd.configure(text, PATH, ask, version)
    after = data(out)
    prefix = tuple(V2 if version == 2 else V3)
    for key, value in _flat(tree).items():
        if key == prefix + ("containerd", "default_runtime_name") and ask.set_as_default:
            continue
        if key == prefix + ("enable_cdi",) and ask.cdi:
            continue
        if key[:len(prefix) + 3] == prefix + ("containerd", "runtimes", ask.name):
            continue
        assert _flat(after).get(key, {}) == value or at(after, key) == value, key
    ours = at(after, list(prefix) + ["containerd", "runtimes", ask.name])
    assert ours["runtime_type"] == "io.containerd.runc.v2" and ours["options"]["BinaryName"] == BIN
    runtimes = at(tree, list(prefix) + ["containerd", "runtimes"]) if "runtimes" in tree.get("plugins", {}).get(prefix[1], {}).get("containerd", {}) else {}
    default = tree.get("plugins", {}).get(prefix[1], {}).get("containerd", {}).get("default_runtime_name")
    template = next((runtimes[n] for n in [default, "runc", "crun"]  # as nvidia-ctk picks it: never an nvidia* one
                     if n in runtimes and not n.startswith("nvidia") and runtimes[n]["runtime_type"] == "io.containerd.runc.v2"), None)
    if template is not None and ask.name not in runtimes:
        assert dict(ours["options"], BinaryName=None) == dict(template.get("options", {}), BinaryName=None)
    if ask.set_as_default:
        assert at(after, list(prefix) + ["containerd", "default_runtime_name"]) == ask.name
    if ask.cdi and (version == 2 or "enable_cdi" in _flat_keys_last(tree, prefix)):
        assert at(after, list(prefix) + ["enable_cdi"]) is True
    elif ask.cdi:  # containerd 2.x has CDI on by default: a version 3 file without the key is left without it
        assert "enable_cdi" not in _flat_keys_last(after, prefix)
    if comments:  # every comment is still there, in its order
        kept = [line.strip() for line in out.splitlines() if line.strip().startswith("#")]
        assert kept == [line.strip() for line in text.splitlines() if line.strip().startswith("#")]
    # the rerun gets what the engine's marker remembers (engine._remember): the default ours replaced
    again = copy.copy(ask)
    if ask.set_as_default and default not in (None, ask.name):
        again.previous_default = default
    assert containerd.configure(out, PATH, again, version) == out


@hsettings(max_examples=200, deadline=None)
@given(_config(), _asks)
def test_property_absent_after_present_gives_back_the_original(config, ask):
    version, tree, step, comments, style = config
    cri = tree.get("plugins", {}).get(containerd.CRI_PLUGIN[version], {})
    ask.previous_default = cri.get("containerd", {}).get("default_runtime_name")  # what the engine's marker remembers
    text = _render(tree, step, comments, style)
    done = containerd.configure(text, PATH, ask, version)
    cdi_after = data(done).get("plugins", {}).get(containerd.CRI_PLUGIN[version], {}).get("enable_cdi")
    ask.cdi_added = cdi_after is True and cri.get("enable_cdi") is not True
    ask.cdi_before = cri.get("enable_cdi")
    back = containerd.unconfigure(done, PATH, ask, version)
    assert without_empty_tables(data(back)) == without_empty_tables(tree)
    removed, added = changed_lines(text, back)
    if style == "dotted-containerd":
        return  # an inline table we added to (containerd = {}) is written anew, its data the same
    assert removed == []  # not a line of the user's lost, comments included
    assert all(not line.strip() or line.strip().startswith("[") for line in added)  # at most an emptied table's header


@hsettings(max_examples=100, deadline=None)
@given(_config(), _asks)
def test_property_drop_in_is_the_cri_table_plus_ours(config, ask):
    version, tree, step, comments, style = config
    text = _render(tree, step, comments, style)
    drop = data(containerd.drop_in(text, PATH, ask, version))
    plugin = containerd.CRI_PLUGIN[version]
    assert set(drop) == {"version", "plugins"} and set(drop["plugins"]) == {plugin}
    alone = {"version": version, "plugins": {plugin: tree.get("plugins", {}).get(plugin, {})}}
    assert drop == data(containerd.configure(_render(alone, 0, False), PATH, ask, version))


def test_a_byte_order_mark_and_crlf_line_ends_are_kept():
    """containerd 1.6 reads a config that starts with a UTF-8 BOM; a Windows-edited file has CRLF line ends: both are
    read, and the lines added end like the file's own."""
    text = "\ufeff" + (RUNTIMES % "runc").replace("\n", "\r\n")
    out = containerd.configure(text, PATH, RuntimeSettings(), 2)
    assert out.startswith("\ufeff") and "\r\n" in out and "\n" not in out.replace("\r\n", "")
    assert at(data(out.lstrip("\ufeff")), V2 + ["containerd", "default_runtime_name"]) == "nvidia"
    assert containerd.configure(out, PATH, RuntimeSettings(), 2) == out
    assert containerd.unconfigure(out, PATH, RuntimeSettings(), 2).startswith("\ufeff")
    assert containerd.file_version(text, PATH) == 2
