# SPDX-License-Identifier: GPL-3.0-or-later
"""meta/runtime.yml's ``k8s`` action group is every module that takes the shared Kubernetes auth options, derived from
the modules themselves (their DOCUMENTATION extends the ``k8s_auth`` doc fragment), so that ``module_defaults:
group/kubegpu.cluster.k8s`` reaches them all and a new Kubernetes module cannot be left out."""

from pathlib import Path

import yaml

from ansible_cli import modules_extending

ROOT = Path(__file__).resolve().parents[2]
FRAGMENT = "kubegpu.cluster.k8s_auth"


def action_groups():
    return yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text(encoding="utf-8"))["action_groups"]


def test_the_k8s_group_is_every_module_that_takes_the_auth_options():
    modules = modules_extending(FRAGMENT)
    assert len(modules) >= 9  # the derivation found the modules (a broken pattern would find none)
    group = action_groups()["k8s"]
    assert sorted(group) == group, "keep meta/runtime.yml's k8s group sorted"
    missing = sorted(set(modules) - set(group))
    extra = sorted(set(group) - set(modules))
    assert (missing, extra) == ([], []), (
        "meta/runtime.yml action_groups.k8s: add %s (they extend %s); drop %s (they do not)" % (missing, FRAGMENT, extra))


def test_every_module_of_a_group_exists():
    modules = set(path.stem for path in (ROOT / "plugins" / "modules").glob("*.py"))
    for name, members in action_groups().items():
        assert sorted(set(members) - modules) == [], "action group %s names modules that do not exist" % name
