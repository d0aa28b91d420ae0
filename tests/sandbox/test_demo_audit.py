# SPDX-License-Identifier: GPL-3.0-or-later
"""`make demo` ends with the fleet audit (sandbox/demo_audit.yml), which must judge drift against the variables the
demo's bring-up ran with (sandbox/demo.yml): the copies are kept equal here, naming what differs."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def plays(name):
    return yaml.safe_load((ROOT / "sandbox" / name).read_text(encoding="utf-8"))


def imported(name, playbook):
    found = [p for p in plays(name) if p.get("ansible.builtin.import_playbook") == playbook]
    assert len(found) == 1, "sandbox/%s imports %s %d times" % (name, playbook, len(found))
    return found[0]


def set_facts(name):
    """The set_fact tasks of the plays on gpu_nodes (per-node variables the bring-up reads)."""
    return [t for p in plays(name) if p.get("hosts") == "gpu_nodes" for t in p.get("tasks", [])
            if "ansible.builtin.set_fact" in t]


def test_the_audit_gets_the_variables_the_bring_up_ran_with():
    bringup = imported("demo.yml", "kubegpu.cluster.site")["vars"]
    audit = imported("demo_audit.yml", "kubegpu.cluster.audit")["vars"]
    assert audit == bringup, "sandbox/demo_audit.yml's audit vars differ from demo.yml's bring-up vars"


def test_the_audit_sets_the_per_node_variables_the_demo_sets():
    assert set_facts("demo_audit.yml") == set_facts("demo.yml") != []


def test_make_demo_ends_with_the_audit_table():
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = text.split("\ndemo:", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    assert any("sandbox/demo_audit.yml" in line for line in recipe), recipe
    assert "audit.txt" in recipe[-1] or "audit.txt" in recipe[-2], recipe[-2:]
