# SPDX-License-Identifier: GPL-3.0-or-later
"""The audit role judges drift as the bring-up decides it: where the bring-up's playbook runs a stage only on some hosts,
the audit's read says the same of each host (the condition is written in both; this keeps them equal)."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_the_toolkit_stage_applies_where_the_bring_up_runs_it():
    play = yaml.safe_load((ROOT / "playbooks" / "container_toolkit.yml").read_text(encoding="utf-8"))[0]
    role = next(r for r in play["roles"] if r["role"] == "kubegpu.cluster.container_toolkit")
    tasks = yaml.safe_load((ROOT / "roles" / "audit" / "tasks" / "node.yml").read_text(encoding="utf-8"))
    kept = next(t for t in tasks if "audit_read" in (t.get("ansible.builtin.set_fact") or {}))
    applies = kept["vars"]["_audit_toolkit"]["applies"]
    # the playbook's condition on ansible_facts['gpu'], read from the audit's own gpu_facts result
    assert applies == "{{ %s }}" % role["when"].replace("ansible_facts['gpu']", "_audit_gpu_read.ansible_facts['gpu']")
