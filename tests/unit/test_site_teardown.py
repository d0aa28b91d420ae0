# SPDX-License-Identifier: GPL-3.0-or-later
"""playbooks/site.yml with kubegpu_state=absent (docs/way-back.md): the stages run in the reverse order of the
bring-up - the device plugin (with NFD and the labels) before the runtimes - the driver and the proof not at all, and
each stage that runs on the way back gets its own state variable as absent. Evaluates the imports' conditions as
Ansible would for both states, so a reordering or a lost condition fails here, naming the stage."""

from pathlib import Path

import jinja2
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SITE = yaml.safe_load((ROOT / "playbooks" / "site.yml").read_text())


def render(template, state):
    return jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(template).render(kubegpu_state=state)


def stages(state):
    """The imported playbooks that run with kubegpu_state=state, in order, each with its vars rendered."""
    out = []
    for entry in SITE:
        name = entry.get("ansible.builtin.import_playbook")
        if name is None:
            continue
        when = entry.get("when")
        if when is not None and render("{{ %s }}" % when, state) != "True":
            continue
        out.append((name.rsplit(".", 1)[-1], dict((k, render(str(v), state)) for k, v in (entry.get("vars") or {}).items())))
    return out


def test_the_bring_up_runs_every_stage_in_order_with_state_present():
    assert [stage[0] for stage in stages("present")] == ["gpu_driver", "container_toolkit", "device_plugin", "gpu_validation"]
    assert dict(stages("present"))["container_toolkit"] == {"container_toolkit_state": "present"}


def test_the_teardown_runs_the_device_plugin_then_the_runtimes_and_neither_driver_nor_proof():
    assert stages("absent") == [("device_plugin", {"device_plugin_state": "absent"}),
                                ("container_toolkit", {"container_toolkit_state": "absent"})]


@pytest.mark.parametrize("role", ["container_toolkit", "device_plugin"])
def test_the_state_variables_site_sets_are_the_roles_own(role):
    specs = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())
    option = specs["argument_specs"]["main"]["options"]["%s_state" % role]
    assert option["choices"] == ["present", "absent"] and option["default"] == "present"
