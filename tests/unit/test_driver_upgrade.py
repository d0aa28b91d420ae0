# SPDX-License-Identifier: GPL-3.0-or-later
"""The rolling driver upgrade's YAML (playbooks/driver_upgrade.yml, roles/gpu_driver tasks_from upgrade): every public
variable its task files read is documented in the role's ``upgrade`` entry point (the README is generated from it)
with the default ``defaults/main.yml`` gives it, the play runs one node at a time and stops at the first failure by
default, and the states it writes on the node are those of NVIDIA's driver upgrade controller."""

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "gpu_driver"
# the task files the upgrade entry point runs (check.yml: the driver checks; install_*: the packages)
UPGRADE_TASKS = ("upgrade.yml", "upgrade_node.yml", "upgrade_reboot.yml", "hold.yml", "hold_Debian.yml",
                 "hold_RedHat.yml", "install_Debian.yml", "install_RedHat.yml", "check.yml")
PUBLIC = re.compile(r"\bgpu_driver_[a-z_]+\b")
# k8s-operator-libs pkg/upgrade consts.go: the values of nvidia.com/gpu-driver-upgrade-state this role writes
UPGRADE_STATES = {"pod-restart-required", "validation-required", "upgrade-done", "upgrade-failed"}


def load(path):
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def upgrade_spec():
    return load(ROLE / "meta" / "argument_specs.yml")["argument_specs"]["upgrade"]["options"]


def test_every_variable_the_upgrade_reads_is_documented_in_its_entry_point():
    read = set()
    for name in UPGRADE_TASKS:
        read |= set(PUBLIC.findall((ROLE / "tasks" / name).read_text(encoding="utf-8")))
    # the derived values of vars/main.yml the tasks use read these
    internal = load(ROLE / "vars" / "main.yml")
    used_internal = set()
    for name in UPGRADE_TASKS:
        used_internal |= set(re.findall(r"\b(_gpu_driver_[a-z_]+)\b", (ROLE / "tasks" / name).read_text(encoding="utf-8")))
    for name in used_internal & set(internal):
        read |= set(PUBLIC.findall(yaml.safe_dump(internal[name])))
    assert read, "no variable found: the task file names are wrong"
    # gpu_driver_verdict is a result (set_fact), not an input; the upgrade sets gpu_driver_fail_on_problem itself
    assert "gpu_driver_fail_on_problem: true" in (ROLE / "tasks" / "upgrade_node.yml").read_text(encoding="utf-8")
    missing = sorted(read - set(upgrade_spec()) - {"gpu_driver_verdict", "gpu_driver_fail_on_problem"})
    assert missing == [], "read by the upgrade but not in meta/argument_specs.yml (upgrade): %s" % missing


def test_the_upgrade_entry_point_documents_the_defaults_the_role_has():
    defaults = load(ROLE / "defaults" / "main.yml")
    drift = {name: (spec.get("default"), defaults.get(name)) for name, spec in upgrade_spec().items()
             if "default" in spec and spec["default"] != defaults.get(name)}
    assert drift == {}


def test_the_play_goes_one_node_at_a_time_and_stops_at_the_first_failure():
    play = load(ROOT / "playbooks" / "driver_upgrade.yml")[0]
    assert play["serial"] == "{{ kubegpu_driver_upgrade_serial | default(1) }}"
    assert play["max_fail_percentage"] == "{{ kubegpu_driver_upgrade_max_fail_percentage | default(0) }}"
    assert play["become"] is True
    task = play["tasks"][0]["ansible.builtin.include_role"]
    assert task == {"name": "kubegpu.cluster.gpu_driver", "tasks_from": "upgrade"}


def test_the_states_written_on_the_node_are_nvidias():
    text = (ROLE / "tasks" / "upgrade_node.yml").read_text(encoding="utf-8")
    written = set(re.findall(r"_gpu_driver_state_label: '([a-z-]+)'", text))
    assert written == UPGRADE_STATES
    assert load(ROLE / "vars" / "main.yml")["_gpu_driver_state_label"] == "nvidia.com/gpu-driver-upgrade-state"


def test_a_failure_keeps_the_node_cordoned_without_giving_it_back():
    block = load(ROLE / "tasks" / "upgrade_node.yml")[0]
    rescue = [task for task in block["rescue"] if "kubegpu.cluster.gpu_node_maintenance" in task]
    assert len(rescue) == 1
    args = rescue[0]["kubegpu.cluster.gpu_node_maintenance"]
    assert args.get("state", "drained") == "drained" and args.get("cordon", True) is True
    assert "upgrade-failed" in args["labels"]
    assert "ansible.builtin.fail" in block["rescue"][-1]
