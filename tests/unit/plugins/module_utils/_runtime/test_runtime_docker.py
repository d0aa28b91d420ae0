# SPDX-License-Identifier: GPL-3.0-or-later
"""daemon.json edits: what is added, what is kept, what absent removes, and how bad input is reported."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

import pytest
from hypothesis import assume, given, settings as hsettings, strategies as st

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import FileError
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.constants import RUNTIME_NAME, RUNTIME_PATH
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime import base
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime import docker


def RuntimeSettings(name=RUNTIME_NAME, path=RUNTIME_PATH, **kwargs):  # pylint: disable=invalid-name
    """What the module asks for by default (the NVIDIA runtime), with ``kwargs`` changed."""
    return base.RuntimeSettings(name, path, **kwargs)


FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "fixtures", "runtime")
PATH = "/etc/docker/daemon.json"
NVIDIA = {"path": "/usr/bin/nvidia-container-runtime", "args": []}


def fixture():
    with open(os.path.join(FIXTURES, "daemon.json")) as handle:
        return handle.read()


def test_present_adds_runtime_and_default_and_keeps_every_key_in_order():
    text = fixture()
    out = docker.configure(text, PATH, RuntimeSettings())
    before, after = json.loads(text), json.loads(out)
    assert list(after)[:len(before)] == list(before)
    for key, value in before.items():
        assert after[key] == value
    assert after["runtimes"] == {"nvidia": NVIDIA}
    assert after["default-runtime"] == "nvidia"
    assert "features" not in after
    assert out.endswith("}\n") and '\n    "runtimes": {' in out


def test_present_is_a_no_op_the_second_time():
    once = docker.configure(fixture(), PATH, RuntimeSettings(cdi=True))
    assert docker.configure(once, PATH, RuntimeSettings(cdi=True)) is once


def test_set_as_default_false_leaves_the_default_alone():
    text = json.dumps({"default-runtime": "runc", "runtimes": {"runsc": {"path": "/usr/bin/runsc"}}})
    after = json.loads(docker.configure(text, PATH, RuntimeSettings(set_as_default=False, name="gpu", path="/opt/nvct")))
    assert after["default-runtime"] == "runc"
    assert after["runtimes"] == {"runsc": {"path": "/usr/bin/runsc"}, "gpu": {"path": "/opt/nvct", "args": []}}


def test_cdi_sets_features_cdi_and_keeps_other_features():
    text = json.dumps({"features": {"buildkit": True}})
    after = json.loads(docker.configure(text, PATH, RuntimeSettings(cdi=True)))
    assert after["features"] == {"buildkit": True, "cdi": True}


def test_a_number_is_not_taken_for_true():
    text = '{"features": {"cdi": 1}}'
    assert docker.configure(text, PATH, RuntimeSettings(cdi=True, set_as_default=False)).count('"cdi": true') == 1


def test_an_existing_entry_of_ours_keeps_the_users_runtime_args():
    """docker's field for a runtime's arguments is runtimeArgs (an entry of a new runtime has nvidia-ctk's "args")."""
    text = json.dumps({"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "runtimeArgs": ["--debug"]}}})
    out = docker.configure(text, PATH, RuntimeSettings())
    assert json.loads(out)["runtimes"]["nvidia"] == {"path": NVIDIA["path"], "runtimeArgs": ["--debug"]}
    assert docker.configure(out, PATH, RuntimeSettings()) == out


@pytest.mark.parametrize("text", [None, "", "  \n"])
def test_missing_or_blank_file_gets_a_fresh_object(text):
    out = docker.configure(text, PATH, RuntimeSettings())
    assert json.loads(out) == {"runtimes": {"nvidia": NVIDIA}, "default-runtime": "nvidia"}
    assert out == json.dumps(json.loads(out), indent=4) + "\n"


def test_the_files_own_indentation_is_kept():
    text = '{\n\t"log-driver": "journald"\n}\n'
    assert docker.configure(text, PATH, RuntimeSettings()).startswith('{\n\t"log-driver": "journald",\n\t"runtimes": {\n\t\t"nvidia"')
    text = '{\n  "log-driver": "journald"\n}\n'
    assert '\n  "runtimes": {\n    "nvidia": {' in docker.configure(text, PATH, RuntimeSettings())


def test_non_ascii_is_kept_as_written():
    out = docker.configure('{"labels": ["café"]}', PATH, RuntimeSettings())
    assert '"café"' in out


def test_absent_removes_only_ours():
    text = json.dumps({"runtimes": {"nvidia": NVIDIA, "runsc": {"path": "runsc"}}, "default-runtime": "nvidia",
                       "features": {"cdi": True, "buildkit": True}, "debug": True})
    after = json.loads(docker.unconfigure(text, PATH, RuntimeSettings(cdi=True, cdi_added=True)))
    assert after == {"runtimes": {"runsc": {"path": "runsc"}}, "features": {"buildkit": True}, "debug": True}


def test_absent_drops_emptied_runtimes_and_features_but_not_a_foreign_default():
    text = json.dumps({"runtimes": {"nvidia": NVIDIA}, "default-runtime": "runsc", "features": {"cdi": True}})
    assert json.loads(docker.unconfigure(text, PATH, RuntimeSettings(cdi_added=True))) == {"default-runtime": "runsc"}


def test_absent_keeps_features_cdi_unless_it_was_ours():
    text = json.dumps({"features": {"cdi": True}})
    assert docker.unconfigure(text, PATH, RuntimeSettings()) is text
    assert docker.unconfigure(text, PATH, RuntimeSettings(cdi=True)) is text


def test_absent_keeps_a_runtimes_object_that_was_already_empty():
    text = json.dumps({"runtimes": {}})
    assert docker.unconfigure(text, PATH, RuntimeSettings()) is text


def test_absent_on_a_missing_file_changes_nothing():
    assert docker.unconfigure(None, PATH, RuntimeSettings()) is None


def test_absent_deletes_a_file_left_with_nothing_but_an_empty_object_already_there_stays():
    made = docker.configure(None, PATH, RuntimeSettings(cdi=True))
    assert docker.unconfigure(made, PATH, RuntimeSettings(cdi=True, cdi_added=True)) is None  # no daemon.json before
    assert docker.unconfigure("{}\n", PATH, RuntimeSettings()) == "{}\n"  # nothing of ours: left as it is


@pytest.mark.parametrize("users_own", [None, "", " \n", "{}", "{}\n"])
def test_a_file_that_held_nothing_comes_back_as_it_was(users_own):
    ask = RuntimeSettings(cdi=True)
    ask.found = docker.found_of(users_own, PATH, ask)  # what the engine's marker remembers
    assert ask.found == {"runtime_before": None, "file_before": users_own}
    ask.cdi_added = True
    assert docker.unconfigure(docker.configure(users_own, PATH, ask), PATH, ask) == users_own  # None: it goes


@pytest.mark.parametrize("entry", [
    {"path": "nvidia-container-runtime", "runtimeArgs": []},  # docker's documentation
    {"args": [], "path": "/usr/bin/nvidia-container-runtime"},  # what nvidia-ctk writes
    {"path": "/opt/nvidia/bin/nvidia-container-runtime", "runtimeArgs": ["--debug"]},
])
@pytest.mark.parametrize("users_default", [False, True])
def test_the_users_own_entry_and_default_come_back(entry, users_default):
    data = {"runtimes": {"nvidia": entry}}
    if users_default:
        data["default-runtime"] = "nvidia"
    text = docker.dumps(data)
    ask = RuntimeSettings(cdi=True)
    ask.found = docker.found_of(text, PATH, ask)
    assert ask.found == dict({"runtime_before": entry, "text_before": text},
                             **({"default_before": "nvidia"} if users_default else {}))
    ask.cdi_added = True
    done = docker.configure(text, PATH, ask)
    assert json.loads(done)["runtimes"]["nvidia"]["path"] == RUNTIME_PATH
    assert docker.unconfigure(done, PATH, ask) == text


def test_without_a_record_absent_takes_the_runtime_out():
    """unconfigure itself, with nothing remembered (the docker adapter does not call it then: see the engine tests)."""
    text = docker.dumps({"runtimes": {"nvidia": {"path": "x"}}, "default-runtime": "nvidia"})
    assert docker.unconfigure(text, PATH, RuntimeSettings()) is None


def test_present_then_absent_gives_back_the_fixture_byte_for_byte():
    text = fixture()
    for cdi in (False, True):
        done = docker.configure(text, PATH, RuntimeSettings(cdi=cdi))
        assert docker.unconfigure(done, PATH, RuntimeSettings(cdi=cdi, cdi_added=cdi)) == text


@pytest.mark.parametrize("text, line, column", [
    ('{\n    "log-driver": "json-file",\n    "log-opts": {"max-size": "10m",}\n}\n', 3, 36),
    ('{\n    "a": 1\n    "b": 2\n}', 3, 5),
    ('{"a": ', 1, 7),
])
def test_malformed_json_names_file_line_and_column(text, line, column):
    with pytest.raises(FileError) as info:
        docker.configure(text, PATH, RuntimeSettings())
    assert (info.value.path, info.value.line, info.value.column) == (PATH, line, column)
    message = str(info.value)
    assert message.startswith("%s: line %d, column %d: invalid JSON" % (PATH, line, column))
    assert "\n" not in message


@pytest.mark.parametrize("text, field, words", [
    ('["a"]', None, "top level must be a JSON object, not array"),
    ('"x"', None, "not string"),
    ('{"runtimes": ["nvidia"]}', "runtimes", "must be a JSON object, not array"),
    ('{"runtimes": "nvidia"}', "runtimes", "not string"),
])
def test_wrong_types_name_the_field(text, field, words):
    with pytest.raises(FileError) as info:
        docker.configure(text, PATH, RuntimeSettings())
    assert info.value.field == field and words in str(info.value) and PATH in str(info.value)


def test_features_not_an_object_is_refused_only_when_cdi_needs_it():
    text = '{"features": true}'
    assert json.loads(docker.configure(text, PATH, RuntimeSettings()))["features"] is True
    with pytest.raises(FileError, match="field 'features'"):
        docker.configure(text, PATH, RuntimeSettings(cdi=True))


# --- Properties over generated daemon.json files -------------------------------------------------------------------

_scalars = st.one_of(st.none(), st.booleans(), st.integers(-10 ** 6, 10 ** 6), st.text(max_size=8))
_json = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=6), inner, max_size=3)), max_leaves=8)
_user_keys = st.sampled_from(["registry-mirrors", "exec-opts", "log-driver", "log-opts", "storage-driver",
                              "storage-opts", "live-restore", "data-root", "debug"]) | \
    st.text(min_size=1, max_size=10).filter(lambda key: key not in ("runtimes", "features", "default-runtime"))
_daemon = st.fixed_dictionaries({}, optional={
    "runtimes": st.dictionaries(st.sampled_from(["runsc", "crun", "kata", "youki"]),
                                st.fixed_dictionaries({"path": st.text(min_size=1, max_size=12)}), max_size=2),
    "features": st.dictionaries(st.sampled_from(["buildkit", "containerd-snapshotter"]), st.booleans(), max_size=2),
    "default-runtime": st.sampled_from(["runc", "runsc"]),
}).flatmap(lambda ours: st.dictionaries(_user_keys, _json, max_size=6).map(
    lambda user: dict(list((k, v) for k, v in user.items() if k not in ours) + list(ours.items()))))
_settings = st.builds(RuntimeSettings, name=st.sampled_from(["nvidia", "nvidia-cdi"]),
                      path=st.sampled_from(["/usr/bin/nvidia-container-runtime", "nvidia-container-runtime"]),
                      set_as_default=st.booleans(), cdi=st.booleans())


@hsettings(max_examples=150, deadline=None)
@given(_daemon, _settings, st.sampled_from([2, 4, "\t"]))
def test_property_user_keys_survive_ours_are_there_and_a_second_run_is_a_no_op(data, ask, indent):
    text = json.dumps(data, indent=indent)
    out = docker.configure(text, PATH, ask)
    after = json.loads(out)
    for key, value in data.items():
        if key == "default-runtime" and ask.set_as_default:
            continue
        if key in ("runtimes", "features"):
            for sub, item in value.items():
                assert after[key][sub] == item
            continue
        assert after[key] == value
    assert after["runtimes"][ask.name] == {"path": ask.path, "args": []}
    assert (after.get("default-runtime") == ask.name) == (ask.set_as_default or data.get("default-runtime") == ask.name)
    assert not ask.cdi or after["features"]["cdi"] is True
    assert docker.configure(out, PATH, ask) is out


@hsettings(max_examples=150, deadline=None)
@given(_daemon, _settings, st.one_of(st.none(), st.fixed_dictionaries({"path": st.text(min_size=1, max_size=12)})))
def test_property_absent_after_present_gives_back_the_original(data, ask, users_entry):
    if users_entry is not None:  # the user's own entry for the runtime, there before present
        data = dict(data, runtimes=dict(data.get("runtimes") or {}, **{ask.name: users_entry}))
    # what the engine's marker remembers
    ask.previous_default = data.get("default-runtime") if data.get("default-runtime") != ask.name else None
    ask.cdi_added = ask.cdi and (data.get("features") or {}).get("cdi") is not True
    ask.cdi_before = (data.get("features") or {}).get("cdi")
    ask.found = docker.found_of(docker.dumps(data), PATH, ask)
    assume(data.get("runtimes") != {})  # an emptied runtimes object goes: one that was empty before looks the same
    assume(not (ask.cdi and data.get("features") == {}))
    text = docker.dumps(data)
    back = docker.unconfigure(docker.configure(text, PATH, ask), PATH, ask)
    assert json.loads(back) == data
    assert back == text  # same serializer: byte for byte


# Found by the fault suite (tests/faults, killed-play): the way back gave a user's daemon.json back re-serialized
# (docker's layout, 4 spaces), not the bytes they wrote, though every setting was theirs again.
USERS_LAYOUT = ('{\n    "log-driver": "json-file",\n    "log-opts": {"max-size": "10m", "max-file": "3"},\n'
                '    "registry-mirrors": ["https://mirror.example.internal"]\n}\n')


@pytest.mark.parametrize("cdi", [False, True])
def test_the_way_back_gives_the_users_own_bytes_back(cdi):
    ask = RuntimeSettings(cdi=cdi)
    ask.found = docker.found_of(USERS_LAYOUT, PATH, ask)
    assert ask.found == {"runtime_before": None, "text_before": USERS_LAYOUT}
    ask.cdi_added = cdi
    made = docker.configure(USERS_LAYOUT, PATH, ask)
    assert json.loads(made)["default-runtime"] == RUNTIME_NAME
    assert docker.unconfigure(made, PATH, ask) == USERS_LAYOUT


def test_a_file_the_user_changed_since_is_rendered_not_replaced_by_their_old_text():
    ask = RuntimeSettings()
    ask.found = docker.found_of(USERS_LAYOUT, PATH, ask)
    made = json.loads(docker.configure(USERS_LAYOUT, PATH, ask))
    made["debug"] = True  # their edit after the bring-up stays
    out = docker.unconfigure(json.dumps(made, indent=2), PATH, ask)
    assert out != USERS_LAYOUT and json.loads(out) == dict(json.loads(USERS_LAYOUT), debug=True)
