# SPDX-License-Identifier: GPL-3.0-or-later
"""container_toolkit_state absent removes exactly what tasks/install_<family>.yml adds: the same repository (apt line
and sources file, yum/zypper repository name) and the same apt keyring, from the same variables; and every family the
role installs on has its removal tasks. Fails naming the family and the option that drifted."""

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT / "roles" / "container_toolkit" / "tasks"
FAMILIES = sorted(p.stem.split("_", 1)[1] for p in TASKS.glob("install_*.yml"))


def module_args(path, module):
    return [t[module] for t in yaml.safe_load(path.read_text()) if module in t]


def test_every_family_the_role_installs_on_has_its_removal():
    assert FAMILIES == ["Debian", "RedHat", "Suse"]
    for family in FAMILIES:
        assert (TASKS / ("remove_repository_%s.yml" % family)).exists(), family
        assert (TASKS / ("remove_packages_%s.yml" % family)).exists(), family


@pytest.mark.parametrize("family, module, options", [
    ("Debian", "ansible.builtin.apt_repository", ["repo", "filename"]),
    ("RedHat", "ansible.builtin.yum_repository", ["name"]),
    ("Suse", "community.general.zypper_repository", ["name"]),
])
def test_the_repository_removed_is_the_one_added(family, module, options):
    (added,) = module_args(TASKS / ("install_%s.yml" % family), module)
    (removed,) = module_args(TASKS / ("remove_repository_%s.yml" % family), module)
    assert added["state"] == "present" and removed["state"] == "absent"
    for option in options:
        assert removed[option] == added[option], (family, option)


def test_the_keyring_removed_is_the_one_downloaded():
    (downloaded,) = module_args(TASKS / "install_Debian.yml", "ansible.builtin.get_url")
    (removed,) = module_args(TASKS / "remove_repository_Debian.yml", "ansible.builtin.file")
    assert removed["path"] == downloaded["dest"] and removed["state"] == "absent"


@pytest.mark.parametrize("family", ["Debian", "RedHat", "Suse"])
def test_only_the_toolkits_installed_packages_are_removed(family):
    tasks = yaml.safe_load((TASKS / ("remove_packages_%s.yml" % family)).read_text())
    assert len(tasks) == 1
    args = next(v for k, v in tasks[0].items() if k.startswith(("ansible.builtin.", "community.general.")))
    assert args["name"] == "{{ _container_toolkit_packages_left }}" and args["state"] == "absent"
    defaults = yaml.safe_load((ROOT / "roles" / "container_toolkit" / "defaults" / "main.yml").read_text())
    assert defaults["container_toolkit_remove_packages"] is False  # opt-in on a fleet
