# SPDX-License-Identifier: GPL-3.0-or-later
"""What an argument spec cannot say (a timeout's minimum, a path that must be absolute): split out of the spec, checked
before any work, and documented where each module documents the option."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib
import os
import re

import pytest
import yaml

from ansible_collections.kubegpu.cluster.plugins.module_utils import _errors, _options

MODULES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "plugins", "modules")


def test_split_takes_the_rules_out_of_the_spec_and_its_suboptions():
    spec = dict(a=dict(type="int", default=3, minimum=0), p=dict(type="path", absolute=True), s=dict(type="str"),
                plans=dict(type="list", elements="dict", options=dict(c=dict(type="path", absolute=True), d=dict())))
    clean, rules = _options.split(spec)
    assert clean == dict(a=dict(type="int", default=3), p=dict(type="path"), s=dict(type="str"),
                         plans=dict(type="list", elements="dict", options=dict(c=dict(type="path"), d=dict())))
    assert rules == {"a": {"minimum": 0}, "p": {"absolute": True}, "plans": {"options": {"c": {"absolute": True}}}}
    assert spec["a"]["minimum"] == 0  # the shared spec itself is left as it was


@pytest.mark.parametrize("values, wanted", [
    ({"wait_timeout": -5}, ["wait_timeout: must be 0 or more, not -5"]),
    ({"wait_timeout": "-1"}, ["wait_timeout: must be 0 or more, not -1"]),  # a role variable from -e is a string
    ({"wait_timeout": "soon"}, ["wait_timeout: must be a number, 0 or more, not 'soon'"]),
    ({"wait_timeout": 0, "request_timeout": 1}, []),
    ({"request_timeout": 0}, ["request_timeout: must be 1 or more, not 0"]),
    ({"kubeconfig": "kube/config"}, ["kubeconfig: must be an absolute path (or start with ~), not 'kube/config': the "
                                     "module runs on the managed host, in a working directory nobody chose"]),
    ({"kubeconfig": "~/.kube/config"}, []),
    ({"kubeconfig": ""}, []),  # not set: the in-cluster config
    ({"kubeconfig": None, "wait_timeout": None}, []),
    ({"files": ["/etc/a", "b"]}, ["files: must be an absolute path (or start with ~), not 'b': the module runs on the "
                                  "managed host, in a working directory nobody chose"]),
    ({"plans": [{"c": "/x"}, {"c": "y"}]}, ["plans[1].c: must be an absolute path (or start with ~), not 'y': the "
                                            "module runs on the managed host, in a working directory nobody chose"]),
])
def test_errors_name_the_option_and_the_value(values, wanted):
    rules = {"wait_timeout": {"minimum": 0}, "request_timeout": {"minimum": 1}, "kubeconfig": {"absolute": True},
             "files": {"absolute": True}, "plans": {"options": {"c": {"absolute": True}}}}
    assert _options.errors(values, rules) == wanted


class _Exit(Exception):
    pass


class FakeModule(object):
    def __init__(self, params):
        self.params = params
        self.failed = None
        self.worked = False

    def fail_json(self, **kwargs):
        self.failed = kwargs
        raise _Exit()

    def exit_json(self, **kwargs):
        raise _Exit()


def test_run_module_checks_the_rules_before_any_work():
    module = FakeModule({"wait_timeout": -1, "kubeconfig": "k"})

    def work():
        module.worked = True
        return {}
    with pytest.raises(_Exit):
        _errors.run_module(module, work, rules={"wait_timeout": {"minimum": 0}, "kubeconfig": {"absolute": True}})
    assert not module.worked
    assert module.failed["msg"].startswith("kubeconfig: must be an absolute path (or start with ~), not 'k'")
    assert "; wait_timeout: must be 0 or more, not -1" in module.failed["msg"]
    assert module.failed["options"] == ["kubeconfig", "wait_timeout"]


# --- Every module's rules, as its main() builds its spec, against its documentation -------------------------------

def _module_names():
    return sorted(n[:-3] for n in os.listdir(MODULES) if n.endswith(".py") and not n.startswith("_"))


def _fragment_options(fragment):
    """``kubegpu.cluster.<file>`` (its DOCUMENTATION) or ``kubegpu.cluster.<file>.<var>`` (its <VAR>), read as Ansible
    reads it: from the class."""
    parts = fragment.split(".")[2:]
    holder = importlib.import_module("ansible_collections.kubegpu.cluster.plugins.doc_fragments." + parts[0])
    text = getattr(holder.ModuleDocFragment, parts[1].upper() if len(parts) > 1 else "DOCUMENTATION")
    return yaml.safe_load(text).get("options") or {}


def _documented(name):
    text = open(os.path.join(MODULES, name + ".py")).read()
    doc = yaml.safe_load(re.search(r'DOCUMENTATION = r"""(.*?)"""', text, re.S).group(1))
    options = {}
    for fragment in doc.get("extends_documentation_fragment") or []:
        if fragment.startswith("kubegpu.cluster."):
            options.update(_fragment_options(fragment))
    options.update(doc.get("options") or {})
    return options


def _spec_of(name, monkeypatch):
    """The argument spec a module's main() builds, rules included, and whether it went through _options.module."""
    module = importlib.import_module("ansible_collections.kubegpu.cluster.plugins.modules." + name)
    seen = {}

    def capture(module_class=None, argument_spec=None, **kwargs):
        seen["spec"] = argument_spec
        raise _Exit()
    monkeypatch.setattr(_options, "module", capture)
    monkeypatch.setattr(module, "AnsibleModule", capture, raising=False)
    with pytest.raises(_Exit):
        module.main()
    return seen["spec"]


def _walk(rules, options, prefix=""):
    for name, rule in sorted(rules.items()):
        doc = options.get(name) or {}
        yield prefix + name, rule, doc
        if "options" in rule:
            yield from _walk(rule["options"], doc.get("suboptions") or {}, prefix + name + ".")


@pytest.mark.parametrize("name", _module_names())
def test_every_rule_is_documented(name, monkeypatch):
    _clean, rules = _options.split(_spec_of(name, monkeypatch))
    options = _documented(name)
    missing = []
    for option, rule, doc in _walk(rules, options):
        text = " ".join(doc.get("description") if isinstance(doc.get("description"), list) else [doc.get("description") or ""])
        if "minimum" in rule and ("%s or more" % rule["minimum"]) not in text:
            missing.append("%s: say '%s or more'" % (option, rule["minimum"]))
        if rule.get("absolute") and "absolute path" not in text:
            missing.append("%s: say 'absolute path'" % option)
    assert missing == [], "%s's DOCUMENTATION (or its doc fragment) does not say: %s" % (name, missing)


def test_the_timeouts_of_the_kubernetes_modules_have_their_minimum(monkeypatch):
    """Every option named like a timeout or a count of retries has a minimum (the issue: negative timeouts were
    accepted)."""
    without = []
    for name in _module_names():
        if name == "scheduler_extender":  # its options are checked by the module itself (another part of issue 26)
            continue
        _clean, rules = _options.split(_spec_of(name, monkeypatch))
        for option, spec in _options.split(_spec_of(name, monkeypatch))[0].items():
            if spec.get("type") == "int" and re.search(r"(timeout|retries|concurrency)$", option):
                if "minimum" not in rules.get(option, {}):
                    without.append("%s.%s" % (name, option))
    assert without == []


def test_device_plugin_deploys_nfd_option_is_checked_by_the_same_rules():
    from ansible_collections.kubegpu.cluster.plugins.module_utils._nfd import args as nfd_args
    with pytest.raises(_errors.OptionError, match=r"^nfd: wait_timeout: must be 0 or more, not -1$"):
        nfd_args.validated({"wait_timeout": -1})
    assert nfd_args.validated({"wait_timeout": 0})["wait_timeout"] == 0
