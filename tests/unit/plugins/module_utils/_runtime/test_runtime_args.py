# SPDX-License-Identifier: GPL-3.0-or-later
"""The runtime options, written once: nvidia_runtime_config's options and each entry of container_runtime_facts'
``plans`` are one argument spec (_runtime/args.py), documented by one doc fragment (nvidia_runtime_options: its
DOCUMENTATION and the PLANS made from it). A change to one side alone is named here."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import difflib
import importlib
import re

import pytest
import yaml

from ansible_collections.kubegpu.cluster.plugins.doc_fragments.nvidia_runtime_options import ModuleDocFragment
from ansible_collections.kubegpu.cluster.plugins.module_utils import _options
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.constants import RUNTIME_NAME, RUNTIME_PATH
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime import args, facts

SPEC = args.options_spec(RUNTIME_NAME, RUNTIME_PATH)
DOCUMENTED = yaml.safe_load(ModuleDocFragment.DOCUMENTATION)["options"]
PLANS = yaml.safe_load(ModuleDocFragment.PLANS)["options"]["plans"]


def drift(spec, documented):
    """One line per option where the argument spec and its documentation disagree."""
    lines = []
    for name in sorted(set(spec) | set(documented)):
        if name not in documented:
            lines.append("%s: in the argument spec (plugins/module_utils/_runtime/args.py), not in the doc fragment "
                         "(plugins/doc_fragments/nvidia_runtime_options.py)" % name)
            continue
        if name not in spec:
            lines.append("%s: in the doc fragment, not in the argument spec" % name)
            continue
        have, doc = spec[name], documented[name]
        for key, empty in (("type", "str"), ("required", False), ("default", None), ("choices", None)):
            want, said = have.get(key, empty), doc.get(key, empty)
            if key == "choices" and want is not None and said is not None:
                want, said = sorted(map(str, want)), sorted(map(str, said))
            if want != said:
                lines.append("%s: %s is %r in the argument spec, %r in the doc fragment" % (name, key, want, said))
    return lines


def test_the_spec_and_the_fragment_agree():
    assert drift(SPEC, DOCUMENTED) == []
    assert drift(SPEC, PLANS["suboptions"]) == []
    assert (PLANS["type"], PLANS["elements"], PLANS["default"]) == ("list", "dict", [])


@pytest.mark.parametrize("change, words", [
    (lambda spec: spec.update(backup_limit=dict(type="int")), "backup_limit: in the argument spec"),
    (lambda spec: spec.pop("cdi"), "cdi: in the doc fragment, not in the argument spec"),
    (lambda spec: spec["state"].update(default="absent"), "state: default is 'absent' in the argument spec"),
    (lambda spec: spec["config_version"]["choices"].append("5"), "config_version: choices"),
])
def test_a_change_on_one_side_alone_is_named(change, words):
    spec = args.options_spec(RUNTIME_NAME, RUNTIME_PATH)
    change(spec)
    assert any(words in line for line in drift(spec, DOCUMENTED)), drift(spec, DOCUMENTED)


def as_plans(documentation):
    """container_runtime_facts' ``plans`` made from nvidia_runtime_config's options: the same options one level down,
    their references to one another (``O(state=absent)``) the entry's (``O(plans[].state=absent)``), to that module's
    results its own (``RV(kubegpu.cluster.nvidia_runtime_config#module:changed_files)``)."""
    options = documentation.split("options:\n", 1)[1]
    options = re.sub(r"O\((%s)([=)])" % "|".join(SPEC), r"O(plans[].\1\2", options)
    options = re.sub(r"RV\(([a-z_]+)\)", r"RV(kubegpu.cluster.nvidia_runtime_config#module:\1)", options)
    head = ModuleDocFragment.PLANS.split("    suboptions:\n", 1)[0] + "    suboptions:\n"
    return head + "".join(("    " + line if line.strip() else line) for line in options.splitlines(True))


def test_the_plans_are_the_options_one_level_down():
    """PLANS is written out (ansible-test reads a fragment's strings as literals); it must say exactly what
    DOCUMENTATION says, one level down, with the entry's own references."""
    wanted = as_plans(ModuleDocFragment.DOCUMENTATION)
    diff = list(difflib.unified_diff(wanted.splitlines(), ModuleDocFragment.PLANS.splitlines(), "made from DOCUMENTATION",
                                     "PLANS", lineterm="", n=1))
    assert diff == [], "plugins/doc_fragments/nvidia_runtime_options.py: PLANS differs from its options:\n" + "\n".join(diff)


def test_the_plans_refer_to_their_own_options():
    """In the plans the options' references are the entry's (O(plans[].state)), and the writer's results are named as
    that module's: a reference left as it is in the writer's text would name an option the facts module lacks."""
    text = ModuleDocFragment.PLANS
    for name in SPEC:
        assert "O(%s)" % name not in text and "O(%s=" % name not in text, name
    assert "O(plans[].runtime_name)" in text and "RV(kubegpu.cluster.nvidia_runtime_config#module:changed_files)" in text


class _Exit(Exception):
    pass


def spec_of(name, monkeypatch):
    """The argument spec a module's main() builds."""
    module = importlib.import_module("ansible_collections.kubegpu.cluster.plugins.modules." + name)
    seen = {}

    def capture(module_class=None, argument_spec=None, **kwargs):
        seen["spec"] = argument_spec
        raise _Exit()
    monkeypatch.setattr(_options, "module", capture)
    with pytest.raises(_Exit):
        module.main()
    return seen["spec"]


def test_both_modules_take_the_one_spec(monkeypatch):
    writer = spec_of("nvidia_runtime_config", monkeypatch)
    assert dict((k, writer[k]) for k in SPEC) == SPEC
    assert sorted(set(writer) - set(SPEC)) == ["backup", "backup_dir", "validate"]  # the writer's own
    assert spec_of("container_runtime_facts", monkeypatch)["plans"]["options"] == SPEC
    # what a plan takes besides the options given: the same defaults
    assert dict((k, facts.PLAN_DEFAULTS[k]) for k in args.defaults()) == dict(
        (k, SPEC[k].get("default")) for k in args.defaults())
