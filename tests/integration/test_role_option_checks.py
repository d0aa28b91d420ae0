# SPDX-License-Identifier: GPL-3.0-or-later
"""Each role's first task refuses a negative timeout or a relative path among its variables, naming them all, and
lets its defaults through: ansible-playbook on localhost, each role's tasks/options.yml (the task every entry point
imports first)."""

from pathlib import Path

import pytest
import yaml

from ansible_cli import ROOT, run_playbook

ROLES = ["audit", "container_toolkit", "device_plugin", "gpu_driver", "gpu_validation", "mig", "nano_gpu", "python_env"]


def rules(role):
    return yaml.safe_load((Path(ROOT) / "roles" / role / "vars" / "main.yml").read_text())["_%s_option_rules" % role]


@pytest.fixture
def playbook(tmp_path):
    path = tmp_path / "options.yml"
    path.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "Check %s" % role, "ansible.builtin.include_role": {
            "name": "kubegpu.cluster." + role, "tasks_from": "options.yml", "apply": {"ignore_errors": True}}}
        for role in ROLES]}]))
    return path


def test_the_defaults_pass(playbook):
    rc, tasks = run_playbook(playbook, timeout=300)
    checks = [result for name, result in tasks if name == "Refuse a negative timeout or a relative path"]
    assert rc == 0 and len(checks) == len(ROLES) and not [r for r in checks if r.get("failed")], tasks


def test_bad_values_are_refused_naming_each_variable(playbook):
    bad = {}
    for role in ROLES:
        for name, rule in rules(role).items():
            bad[name] = -1 if "minimum" in rule else "relative/path"
    rc, tasks = run_playbook(playbook, extra_vars=bad, timeout=300)
    messages = [result["msg"] for name, result in tasks if name == "Refuse a negative timeout or a relative path"]
    assert len(messages) == len(ROLES), tasks
    for role, message in zip(ROLES, messages):
        assert message.startswith("%s on localhost: " % role), message
        for name, rule in rules(role).items():
            wanted = ("%s: must be 0 or more, not -1" % name if "minimum" in rule else
                      "%s: must be an absolute path (or start with ~), not 'relative/path'" % name)
            assert wanted in message, (role, name, message)
