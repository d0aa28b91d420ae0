# SPDX-License-Identifier: GPL-3.0-or-later
"""What a role's meta/argument_specs.yml cannot say (a timeout's minimum, a path that must be absolute) is kept in the
role's vars/main.yml (``_<role>_option_rules``) and checked by tasks/options.yml as the first task of every entry
point. The rules are derived here from the argument specs, so that a new timeout or path variable cannot be left out:

- every ``int`` option named ``*_timeout`` is 0 or more;
- every option of type ``path``, or named ``*_kubeconfig``, ``*_drop_in`` or ``*_file``, is an absolute path (empty:
  not set), but for the exceptions below, each with its reason.
"""

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "meta" / "argument_specs.yml").is_file())
EXCEPTIONS = {
    # the runtime's binary: docker takes a name it finds on its PATH (nvidia_runtime_config refuses a relative one for
    # the runtimes that need an absolute path, naming the runtime)
    "container_toolkit_runtime_path": "a binary name is allowed",
}


def load(path):
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def spec_options(role):
    """{entry point: {option: spec}}."""
    specs = load(ROOT / "roles" / role / "meta" / "argument_specs.yml")["argument_specs"]
    return dict((entry, body.get("options") or {}) for entry, body in specs.items())


def derived(role):
    rules = {}
    for options in spec_options(role).values():
        for name, spec in options.items():
            kind = spec.get("type", "str")
            if kind == "int" and name.endswith("_timeout"):
                rules[name] = {"minimum": 0}
            elif (kind == "path" or re.search(r"(_kubeconfig|_drop_in|_file)$", name)) and name not in EXCEPTIONS:
                rules[name] = {"absolute": True}
    return rules


def kept(role):
    return load(ROOT / "roles" / role / "vars" / "main.yml").get("_%s_option_rules" % role) or {}


@pytest.mark.parametrize("role", ROLES)
def test_the_rules_a_role_keeps_are_the_ones_its_argument_spec_implies(role):
    assert kept(role) == derived(role), (
        "roles/%s/vars/main.yml _%s_option_rules: keep exactly the timeouts (minimum 0) and absolute paths of its "
        "meta/argument_specs.yml" % (role, role))


def test_every_role_with_a_timeout_or_a_path_has_rules():
    assert sorted(role for role in ROLES if derived(role)) == [
        "audit", "container_toolkit", "device_plugin", "dra", "gpu_driver", "gpu_validation", "mig", "nano_gpu", "python_env"]


@pytest.mark.parametrize("role", [r for r in ROLES if derived(r)])
def test_every_entry_point_checks_them_first(role):
    template = (ROOT / "roles" / "device_plugin" / "tasks" / "options.yml").read_text(encoding="utf-8")
    options = (ROOT / "roles" / role / "tasks" / "options.yml").read_text(encoding="utf-8")
    assert options == template.replace("device_plugin", role)  # one text, with the role's name
    for entry, entry_options in spec_options(role).items():
        if not set(entry_options) & set(kept(role)):
            continue  # an entry point without such a variable (audit's node)
        first = load(ROOT / "roles" / role / "tasks" / (entry + ".yml"))[0]
        assert first.get("ansible.builtin.import_tasks") == "options.yml", (
            "roles/%s/tasks/%s.yml: import options.yml as the first task" % (role, entry))


def test_the_exceptions_name_options_that_exist():
    every = set(name for role in ROLES for options in spec_options(role).values() for name in options)
    assert set(EXCEPTIONS) <= every


@pytest.mark.parametrize("role", [r for r in ROLES if derived(r)])
def test_every_rule_is_documented_in_the_argument_spec(role):
    missing = []
    for entry, options in spec_options(role).items():
        for name, rule in kept(role).items():
            if name not in options:
                continue
            text = options[name].get("description")
            text = " ".join(text) if isinstance(text, list) else text
            wanted = "%s or more" % rule["minimum"] if "minimum" in rule else "absolute path"
            if wanted not in text:
                missing.append("%s (%s): say '%s'" % (name, entry, wanted))
    assert missing == []
