# SPDX-License-Identifier: GPL-3.0-or-later
"""The nano_gpu role and the container_toolkit role's guard for it.

- The record nano_gpu_host writes is the file container_toolkit watches, and the Kubespray mark is the same file for
  both roles and the constants (one place).
- container_toolkit's decisions, rendered with Ansible's templar from its own vars and defaults over a host's facts:
  with nano-gpu's record on the host, a pinned version that differs from the installed one neither reinstalls nor
  holds the packages (the upgrade would put NVIDIA's hook back over nano-gpu's), a missing package is still
  installed; without the record the role decides as before.
- playbooks/nano_gpu.yml runs the parts in the order of the bring-up and the reverse for the way back.
"""

from pathlib import Path

import pytest
import yaml

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar
from ansible_collections.kubegpu.cluster.plugins.module_utils._nanogpu import constants as C

try:
    from ansible.template import trust_as_template
except ImportError:  # ansible-core before 2.19 templates every string
    def trust_as_template(value):
        return value

ROOT = Path(__file__).resolve().parents[2]
TOOLKIT = ROOT / "roles" / "container_toolkit"
RECORD = "%s/%s" % (C.HOST_STATE_DIR, C.HOST_STATE_FILE)
INSTALLED = {"nvidia-container-toolkit": "1.17.8-1", "nvidia-container-toolkit-base": "1.17.8-1",
             "libnvidia-container-tools": "1.17.8-1", "libnvidia-container1": "1.17.8-1", "nvidia-docker2": None}


def load(path):
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def test_the_record_container_toolkit_watches_is_the_one_nano_gpu_host_writes():
    toolkit_vars = load(TOOLKIT / "vars" / "main.yml")
    assert toolkit_vars["_container_toolkit_nano_gpu_marker"] == RECORD
    assert "_container_toolkit_nano_gpu_marker" in toolkit_vars["_container_toolkit_watched_files"]
    source = (ROOT / "plugins" / "modules" / "nano_gpu_host.py").read_text()
    assert "default: %s\n" % C.HOST_STATE_DIR in source and "default=C.HOST_STATE_DIR" in source


def test_the_kubespray_mark_is_one_file():
    assert load(ROOT / "roles" / "nano_gpu" / "vars" / "main.yml")["_nano_gpu_kubespray_marker"] == C.KUBESPRAY_MARKER
    assert load(TOOLKIT / "vars" / "main.yml")["_container_toolkit_kubespray_marker"] == C.KUBESPRAY_MARKER


def trusted(value):
    """The role's own YAML, as Ansible trusts it: every string may be a template."""
    if isinstance(value, dict):
        return dict((k, trusted(v)) for k, v in value.items())
    if isinstance(value, list):
        return [trusted(v) for v in value]
    return trust_as_template(value) if isinstance(value, str) else value


def decide(expression, record, packages=None, version="1.19.0-1", repo=False, **extra):
    variables = dict(load(TOOLKIT / "defaults" / "main.yml"))
    variables.update(load(TOOLKIT / "vars" / "main.yml"))
    variables = trusted(variables)
    files = {RECORD: {"exists": record}, "/etc/apt/keyrings/nvidia-container-toolkit.asc": {"exists": repo}}
    content = ("deb [signed-by=/etc/apt/keyrings/nvidia-container-toolkit.asc] "
               "https://nvidia.github.io/libnvidia-container/stable/deb/amd64 /\n") if repo else None
    files["/etc/apt/sources.list.d/nvidia-container-toolkit.list"] = {"exists": repo, "content": content}
    variables.update(ansible_facts={"os_family": "Debian", "container_runtimes": {
        "architecture": "x86_64", "package_manager": "apt", "runtimes": {}, "held": [], "plans": {},
        "packages": dict(INSTALLED if packages is None else packages), "files": files}},
        container_toolkit_version=version, container_toolkit_found={}, **extra)
    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template("{{ %s }}" % expression))


def test_with_nanogpus_record_a_different_pin_neither_reinstalls_nor_holds():
    assert decide("_container_toolkit_nano_gpu", True) is True
    assert decide("_container_toolkit_install_needed", True) is False
    assert decide("_container_toolkit_to_hold", True) == []


def test_with_nanogpus_record_a_missing_package_is_still_installed():
    assert decide("_container_toolkit_install_needed", True, packages=dict(INSTALLED, **{"libnvidia-container1": None})) is True


@pytest.mark.parametrize("expression, expected", [
    ("_container_toolkit_nano_gpu", False),
    ("_container_toolkit_install_needed", True),  # the pin differs, and the repository is not there
    ("_container_toolkit_to_hold", ["nvidia-container-toolkit", "nvidia-container-toolkit-base",
                                    "libnvidia-container-tools", "libnvidia-container1"]),
])
def test_without_the_record_the_role_decides_as_before(expression, expected):
    decided = decide(expression, False)
    assert (sorted(decided) if isinstance(decided, list) else decided) == (sorted(expected) if isinstance(expected, list) else expected)


def test_without_the_record_an_installed_pin_with_its_repository_needs_nothing():
    assert decide("_container_toolkit_install_needed", False, version="1.17.8-1", repo=True) is False


def test_the_guard_task_refuses_the_way_back_and_a_non_default_runtime():
    tasks = load(TOOLKIT / "tasks" / "main.yml")
    (guard,) = [t for t in tasks if "_container_toolkit_nano_gpu" in str(t.get("when"))]
    assert guard["ansible.builtin.assert"]["that"] == ["container_toolkit_state == 'present'",
                                                       "container_toolkit_set_as_default | bool"]
    names = [t["name"] for t in tasks]
    assert names.index(guard["name"]) < names.index("Find the container runtimes")  # before anything is decided on


def test_the_playbook_runs_the_parts_in_order_and_back():
    plays = load(ROOT / "playbooks" / "nano_gpu.yml")
    parts = []
    for play in plays:
        for task in play.get("tasks") or []:
            role = task.get("ansible.builtin.include_role") or {}
            if role.get("name") == "kubegpu.cluster.nano_gpu":
                when = str(task.get("when", ""))
                parts.append((role["tasks_from"], "absent" if "'absent'" in when else "present" if "'present'" in when else "both"))
    present = [p for p, s in parts if s in ("present", "both")]
    absent = [p for p, s in parts if s in ("absent", "both")]
    assert present == ["host", "cluster", "scheduler"]
    assert absent == ["scheduler", "cluster", "host"]
