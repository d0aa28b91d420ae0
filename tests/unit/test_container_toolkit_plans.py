# SPDX-License-Identifier: GPL-3.0-or-later
"""The container_toolkit role asks container_runtime_facts whether nvidia_runtime_config would change a file, with
the options of _container_toolkit_plans (roles/container_toolkit/vars/main.yml), and calls nvidia_runtime_config only
where it would: so each plan must pass the options its configure_<runtime>.yml task passes, from the same variables.
This fails when the two drift apart, naming the runtime and the option."""

import re
from pathlib import Path

import pytest
import yaml

from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime import registry

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "container_toolkit"
VARIABLE = re.compile(r"\bcontainer_toolkit_\w+")
# nvidia_runtime_config options a configure task passes that change how it writes, not what it plans
NOT_PLANNED = {"backup"}


def plans():
    entries = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["_container_toolkit_plans"]
    return dict((e["runtime"], e) for e in entries)


def configure_task(runtime):
    """The nvidia_runtime_config task that configures ``runtime``, its options with the role's variables."""
    name = "rancher" if runtime in ("k3s", "rke2") else runtime
    for task in yaml.safe_load((ROLE / "tasks" / ("configure_%s.yml" % name)).read_text()):
        args = task.get("kubegpu.cluster.nvidia_runtime_config")
        if args is not None:
            # configure_rancher.yml serves both: its runtime and config are the included file's variable
            return dict((option, str(value).replace("{{ _container_toolkit_rancher }}", runtime).replace(
                "lookup('ansible.builtin.vars', 'container_toolkit_' ~ _container_toolkit_rancher ~ '_config')",
                "container_toolkit_%s_config" % runtime)) for option, value in args.items())
    raise AssertionError("no nvidia_runtime_config task in configure_%s.yml" % name)


def test_every_runtime_has_a_plan():
    assert sorted(plans()) == registry.NAMES


@pytest.mark.parametrize("runtime", registry.NAMES)
def test_a_plan_passes_what_the_configure_task_passes(runtime):
    plan, task = plans()[runtime], configure_task(runtime)
    assert str(task["runtime"]) == runtime
    assert sorted(set(task) - NOT_PLANNED) == sorted(plan), runtime
    for option, value in plan.items():
        if option == "runtime":
            continue
        wanted = set(VARIABLE.findall(str(task[option])))
        # docker's daemon.json path follows --config-file in the task (_container_toolkit_docker_config, from the
        # facts); the plan leaves it empty for the module to follow the same flag
        if runtime == "docker" and option == "config_path":
            wanted = {"container_toolkit_docker_config"}
        assert set(VARIABLE.findall(str(value))) == wanted, (runtime, option, value, task[option])
