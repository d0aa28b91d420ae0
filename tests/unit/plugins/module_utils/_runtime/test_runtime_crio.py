# SPDX-License-Identifier: GPL-3.0-or-later
"""CRI-O crio.conf and drop-in edits."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import difflib
import os

import pytest
import tomlkit
from hypothesis import assume, given, settings as hsettings, strategies as st

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import FileError
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.constants import RUNTIME_NAME, RUNTIME_PATH
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime import base
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime import crio
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.common import plain, without_empty_tables


def RuntimeSettings(name=RUNTIME_NAME, path=RUNTIME_PATH, **kwargs):  # pylint: disable=invalid-name
    """What the module asks for by default (the NVIDIA runtime), with ``kwargs`` changed."""
    return base.RuntimeSettings(name, path, **kwargs)


FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "fixtures", "runtime")
PATH = "/etc/crio/crio.conf"
DROP = "/etc/crio/crio.conf.d/99-nvidia.toml"
BIN = "/usr/bin/nvidia-container-runtime"


def fixture():
    with open(os.path.join(FIXTURES, "crio.conf")) as handle:
        return handle.read()


def data(text):
    return plain(tomlkit.parse(text))


def test_present_in_crio_conf():
    """Ours copies the default runtime's table (crun here: runtime_root, monitor_path, allowed_annotations), as
    nvidia-ctk does, with our binary and the OCI type; the rest of the file stays as it was."""
    text = fixture()
    out = crio.configure(text, PATH, RuntimeSettings())
    runtime = data(out)["crio"]["runtime"]
    assert runtime["runtimes"]["nvidia"] == {"runtime_path": BIN, "runtime_type": "oci", "runtime_root": "/run/crun",
                                             "monitor_path": "/usr/libexec/crio/conmon",
                                             "allowed_annotations": ["io.containers.trace-syscall"]}
    assert runtime["default_runtime"] == "nvidia"
    assert runtime["runtimes"]["crun"]["runtime_root"] == "/run/crun"
    diff = [line for line in difflib.unified_diff(text.splitlines(), out.splitlines(), lineterm="", n=0)
            if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert diff[:3] == ['-default_runtime = "crun"', '+default_runtime = "nvidia"', "+[crio.runtime.runtimes.nvidia]"]
    assert all(line.startswith("+") for line in diff[1:])
    assert "# default_runtime is the _name_ of the OCI runtime to be used as the default." in out
    assert crio.configure(out, PATH, RuntimeSettings(previous_default="crun")) == out  # the engine passes the marker's


def test_a_drop_in_copies_the_main_configs_default_runtime():
    base = data(fixture())
    out = crio.configure(None, DROP, RuntimeSettings(), base)
    assert data(out)["crio"]["runtime"]["runtimes"]["nvidia"]["monitor_path"] == "/usr/libexec/crio/conmon"
    assert data(out)["crio"]["runtime"]["runtimes"]["nvidia"]["runtime_root"] == "/run/crun"
    assert crio.configure(out, DROP, RuntimeSettings(), base) == out


def test_set_as_default_false():
    out = crio.configure(fixture(), PATH, RuntimeSettings(set_as_default=False))
    assert data(out)["crio"]["runtime"]["default_runtime"] == "crun"


def test_cdi_changes_nothing_for_crio():
    assert crio.configure(fixture(), PATH, RuntimeSettings(cdi=True)) == crio.configure(fixture(), PATH, RuntimeSettings())


def test_an_existing_runtime_of_ours_is_corrected_in_place():
    text = '[crio.runtime.runtimes.nvidia]\nruntime_path = "/old"\nruntime_root = "/run/nvidia"\n'
    out = crio.configure(text, PATH, RuntimeSettings(set_as_default=False))
    assert data(out) == {"crio": {"runtime": {"runtimes": {"nvidia": {"runtime_path": BIN, "runtime_root": "/run/nvidia", "runtime_type": "oci"}}}}}


def test_a_new_drop_in_holds_only_our_tables():
    out = crio.configure(None, DROP, RuntimeSettings())
    assert out == ('[crio.runtime]\ndefault_runtime = "nvidia"\n\n[crio.runtime.runtimes.nvidia]\n'
                   'runtime_path = "/usr/bin/nvidia-container-runtime"\nruntime_type = "oci"\n')
    assert crio.configure(out, DROP, RuntimeSettings()) == out


def test_absent_removes_ours_and_leaves_the_rest():
    text = fixture()
    back = crio.unconfigure(crio.configure(text, PATH, RuntimeSettings()), PATH, RuntimeSettings())
    # the function alone does not know the previous default (the engine's marker does: restore_previous below)
    assert back == text.replace('default_runtime = "crun"\n', "")
    ask = RuntimeSettings(set_as_default=False)
    assert crio.unconfigure(crio.configure(text, PATH, ask), PATH, ask) == text


def test_absent_empties_a_drop_in():
    out = crio.unconfigure(crio.configure(None, DROP, RuntimeSettings()), DROP, RuntimeSettings())
    assert crio.is_empty(out, DROP)
    assert crio.unconfigure(None, DROP, RuntimeSettings()) is None
    assert not crio.is_empty(fixture(), PATH)


def test_absent_keeps_a_foreign_default():
    text = '[crio.runtime]\ndefault_runtime = "crun"\n'
    assert crio.unconfigure(text, PATH, RuntimeSettings()) == text


def test_malformed_and_wrong_types():
    with pytest.raises(FileError) as info:
        crio.configure('[crio.runtime]\ndefault_runtime = crun\n', PATH, RuntimeSettings())
    assert (info.value.line, info.value.column) == (2, 19) and PATH in str(info.value)
    with pytest.raises(FileError, match="field 'crio.runtime.runtimes'"):
        crio.configure('[crio.runtime]\nruntimes = "runc"\n', PATH, RuntimeSettings())
    with pytest.raises(FileError, match="field 'crio.runtime'"):
        crio.configure('[crio]\nruntime = 1\n', PATH, RuntimeSettings())


_conf = st.fixed_dictionaries({
    "crio": st.fixed_dictionaries({}, optional={
        "root": st.just("/var/lib/containers/storage"),
        "runtime": st.fixed_dictionaries({}, optional={
            "default_runtime": st.sampled_from(["crun", "runc"]),
            "cgroup_manager": st.sampled_from(["systemd", "cgroupfs"]),
            "runtimes": st.dictionaries(st.sampled_from(["crun", "runc", "kata"]),
                                        st.fixed_dictionaries({"runtime_path": st.sampled_from(["", "/usr/bin/crun"]),
                                                               "runtime_type": st.sampled_from(["oci", "vm"])}), max_size=3),
        }),
        "image": st.fixed_dictionaries({"pause_image": st.just("registry.k8s.io/pause:3.9")}),
    }),
})


def _render(tree):
    lines = []

    def emit(table, path):
        scalars = [(k, v) for k, v in table.items() if not isinstance(v, dict)]
        if path and (scalars or not any(isinstance(v, dict) for v in table.values())):
            lines.extend(["", "[%s]" % ".".join(path), "# %s" % path[-1]])
        lines.extend("%s = %s" % (k, tomlkit.item(v).as_string()) for k, v in scalars)
        for key, value in table.items():
            if isinstance(value, dict):
                emit(value, path + [key])

    emit(tree, [])
    return "\n".join(lines).lstrip("\n") + "\n"


@hsettings(max_examples=200, deadline=None)
@given(_conf, st.booleans())
def test_property_present_keeps_everything_and_absent_gives_it_back(tree, as_default):
    ask = RuntimeSettings(set_as_default=as_default)
    text = _render(tree)
    assert data(text) == tree
    out = crio.configure(text, PATH, ask)
    assert crio.configure(out, PATH, ask) == out
    after = data(out)
    assert after["crio"]["runtime"]["runtimes"]["nvidia"] == {"runtime_path": BIN, "runtime_type": "oci"}
    for name, runtime in tree["crio"].get("runtime", {}).get("runtimes", {}).items():
        assert after["crio"]["runtime"]["runtimes"][name] == runtime
    assume(not (as_default and "default_runtime" in tree["crio"].get("runtime", {})))
    back = crio.unconfigure(out, PATH, ask)
    assert without_empty_tables(data(back)) == without_empty_tables(tree)
    assert [line for line in back.splitlines() if line.startswith("#")] == [line for line in text.splitlines() if line.startswith("#")]


def test_restore_previous():
    text = fixture()
    ours = crio.configure(text, PATH, RuntimeSettings())
    assert crio.unconfigure(ours, PATH, RuntimeSettings(previous_default="crun")) == text
    assert crio.configure(ours, PATH, RuntimeSettings(set_as_default=False, previous_default="crun")) == \
        crio.configure(text, PATH, RuntimeSettings(set_as_default=False))
