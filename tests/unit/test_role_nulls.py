# SPDX-License-Identifier: GPL-3.0-or-later
"""Null in the roles, on every ansible-core the collection claims (2.17, 2.18, 2.19).

ansible-core 2.17 and 2.18 template a value that is null as a whole (``"{{ x or none }}"``, ``"{{ x | default(none)
}}"``, ``"{{ facts['reports'] }}"`` where that is null) to ``""``; 2.19 keeps it null. A null inside a dict or list
that one expression returns stays null on every version. So a role must neither rely on a whole value being null (an
``is none`` test of a variable set from a template: it is false on 2.17 and 2.18, and the next subscript fails), nor
hand such a value to something that tells null from ``""``. Seen: gpu_validation skipped its proof (issue 26); the
containerd verification failed on a host without crictl; the audit reported an unread host's GPUs as zero GPUs.

This reads every role and playbook and names each place that does either, unless :data:`ALLOWED` says why the
consumer takes ``""`` as it takes null."""

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
# a string that is one template and nothing else
WHOLE = re.compile(r"^\s*\{\{(?:(?!\}\}).)*\}\}\s*$", re.S)
# ... whose value, as a whole, can be null
NULL_AT_THE_END = re.compile(r"(\bor none|default\(none(, *true)?\)|\belse none|\{\{\s*none)\s*\}\}\s*$", re.S)
# an `is none` / `is not none` test of a bare variable (not of an item of it, nor of a call's result)
NONE_TEST = re.compile(r"(?<![\w.\]'\")])([A-Za-z_]\w*)\s+is\s+(?:not\s+)?none\b")
# Where a whole value may be null because its consumer takes "" as it takes null, and why
ALLOWED = {
    "roles/gpu_validation/vars/main.yml: _gpu_validation_decides.command": "proof_settled takes \"\" as left out",
    "roles/gpu_validation/vars/main.yml: _gpu_validation_decides.args": "proof_settled takes \"\" as left out",
    "roles/gpu_validation/vars/main.yml: _gpu_validation_decides.resource": "proof_settled takes \"\" as left out",
    "roles/gpu_validation/vars/main.yml: _gpu_validation_decides.runtime_class": "proof_settled takes \"\" as left out",
}


def leaves(value, path=()):
    """``(path, string)`` of every string in a YAML document."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from leaves(item, path + (str(key),))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from leaves(item, path + (str(index),))
    elif isinstance(value, str):
        yield path, value


def tasks_of(document):
    """Every task of a task file, those of blocks too."""
    for task in document if isinstance(document, list) else []:
        if not isinstance(task, dict):
            continue
        yield task
        for key in ("block", "rescue", "always"):
            yield from tasks_of(task.get(key))


def files(root):
    """``(path relative to root, document)`` of the roles' task, vars, defaults and handler files and the playbooks."""
    paths = sorted(root.glob("roles/*/*/*.yml")) + sorted(root.glob("playbooks/*.yml"))
    for path in paths:
        if path.parent.name in ("tasks", "vars", "defaults", "handlers") or path.parent.name == "playbooks":
            yield path.relative_to(root).as_posix(), yaml.safe_load(path.read_text(encoding="utf-8"))


def templated_variables(root):
    """``{name: where}`` of the variables a role sets from one template (role vars and defaults, task vars, set_fact):
    those an ``is none`` test must not be asked of."""
    found = {}
    for where, document in files(root):
        if where.split("/")[-2] in ("vars", "defaults") and isinstance(document, dict):
            found.update((k, where) for k, v in document.items() if isinstance(v, str) and WHOLE.match(v))
        for task in tasks_of(document):
            for mapping in (task.get("vars"), task.get("ansible.builtin.set_fact"), task.get("set_fact")):
                if isinstance(mapping, dict):
                    found.update((k, where) for k, v in mapping.items() if isinstance(v, str) and WHOLE.match(v))
    return found


def problems(root):
    """One line per place that relies on a whole value being null, or may hand one on."""
    found = []
    variables = templated_variables(root)
    for where, document in files(root):
        for path, text in leaves(document):
            place = "%s: %s" % (where, ".".join(path))
            if WHOLE.match(text) and NULL_AT_THE_END.search(text) and place not in ALLOWED:
                found.append("%s is null as a whole on ansible-core 2.19 and \"\" on 2.17 and 2.18: return it inside "
                             "one expression's dict, or a value that is not null" % place)
            for name in NONE_TEST.findall(text):
                if name in variables:
                    found.append("%s tests %s is none, which %s sets from a template (\"\" on ansible-core 2.17 and "
                                 "2.18): test its truth, or give it a value that is not null" % (place, name, variables[name]))
    return found


def test_no_role_relies_on_a_whole_value_being_null():
    found = problems(ROOT)
    assert found == [], "\n".join(found)


def test_every_allowed_place_is_still_there():
    places = set("%s: %s" % (where, ".".join(path)) for where, document in files(ROOT) for path, _text in leaves(document))
    assert sorted(set(ALLOWED) - places) == []


@pytest.mark.parametrize("files_, words", [
    # verify_containerd.yml before the fix: crictl's report, null where crictl is not installed
    ({"roles/r/tasks/main.yml": [{"ansible.builtin.assert": {"that": ["_cri is none or _cri['ok']"]},
                                  "vars": {"_cri": "{{ facts['crictl']['reports'] }}"}}]},
     "roles/r/tasks/main.yml: 0.ansible.builtin.assert.that.0 tests _cri is none"),
    # the audit's read before the fix
    ({"roles/r/tasks/main.yml": [{"ansible.builtin.set_fact": {"read": {"gpu": "{{ r.gpu | default(none) }}"}}}]},
     "roles/r/tasks/main.yml: 0.ansible.builtin.set_fact.read.gpu is null as a whole"),
    ({"roles/r/vars/main.yml": {"_r_nfd": {"image": "{{ r_image or none }}"}}},
     "roles/r/vars/main.yml: _r_nfd.image is null as a whole"),
])
def test_the_guard_finds_each_kind(tmp_path, files_, words):
    for name, document in files_.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(yaml.safe_dump(document))
    found = problems(tmp_path)
    assert any(line.startswith(words) for line in found), found


def test_what_is_fine_on_every_version_passes(tmp_path):
    (tmp_path / "roles/r/tasks").mkdir(parents=True)
    (tmp_path / "roles/r/tasks/main.yml").write_text(yaml.safe_dump([
        {"ansible.builtin.set_fact": {"read": "{{ {'gpu': r.gpu | default(none)} }}"}},  # null inside a dict
        {"ansible.builtin.assert": {"that": ["not _cri or _cri['ok']", "_dump['cdi'] is none",
                                             "(r | default({})).get('x') is not none"]},
         "vars": {"_cri": "{{ facts['crictl']['reports'] or {} }}", "_dump": "{{ facts['dump'] }}"}},
    ]))
    assert problems(tmp_path) == []


def test_an_empty_nfd_image_is_the_releases():
    """device_plugin hands node feature discovery an empty image where none is set (as every version templates it)."""
    from ansible_collections.kubegpu.cluster.plugins.module_utils._nfd import args, manifests  # pylint: disable=import-outside-toplevel
    assert load_var("device_plugin", "_device_plugin_nfd")["image"] == "{{ device_plugin_nfd_image }}"
    images = [set(c["image"] for o in manifests.render(args.validated(dict(image=image)))
                  for c in ((o.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers", []))
              for image in ("", None)]
    assert images[0] == images[1] and len(images[0]) == 1 and next(iter(images[0])).endswith(":" + args.nfd.NFD_VERSION)


def load_var(role, name):
    return yaml.safe_load((ROOT / "roles" / role / "vars" / "main.yml").read_text(encoding="utf-8"))[name]
