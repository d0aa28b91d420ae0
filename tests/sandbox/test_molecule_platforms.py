# SPDX-License-Identifier: GPL-3.0-or-later
"""The molecule scenarios' platforms are the fleet's nodes (sandbox/fleet.yml), started the way the fleet starts them
(sandbox/images/nodes.yml): a platform that mounts a fleet node's fake PCI bus runs that node's image variant and GPU
profile, and every platform gets the same systemd settings. The scenarios restate them in YAML (molecule reads no
other file); this keeps the copies from drifting, naming the scenario, the platform and the field."""

import re
from pathlib import Path

import pytest
import yaml

from node_container import fleet_container

ROOT = Path(__file__).resolve().parents[2]
FLEET = dict((n["name"], n) for n in yaml.safe_load((ROOT / "sandbox" / "fleet.yml").read_text())["nodes"])
SCENARIOS = sorted(p.parent.name for p in (ROOT / "molecule").glob("*/molecule.yml"))
PCI_MOUNT = re.compile(r"^\$\{MOLECULE_PROJECT_DIRECTORY\}/\.sandbox/pci/([^/]+)/(devices|drivers):/sys/bus/pci/\2:ro$")
PROFILE_MOUNT = re.compile(r"^\$\{MOLECULE_PROJECT_DIRECTORY\}/sandbox/profiles/([^/]+)\.json:/etc/fake-nvml/profile\.json:ro$")


def platforms(scenario):
    return yaml.safe_load((ROOT / "molecule" / scenario / "molecule.yml").read_text())["platforms"]


def test_every_scenario_is_read():
    assert SCENARIOS and all(platforms(s) for s in SCENARIOS)
    assert any(PCI_MOUNT.match(v) for s in SCENARIOS for p in platforms(s) for v in p.get("volumes", []))


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_platforms_start_like_the_fleet(scenario):
    wanted = fleet_container()
    drift = []
    for platform in platforms(scenario):
        for field, value in wanted.items():
            if platform.get(field) != value:
                drift.append("%s: %s is %r, the fleet's containers have %r" % (platform["name"], field, platform.get(field), value))
        if platform.get("command") != "/lib/systemd/systemd" or "/sys/fs/cgroup:/sys/fs/cgroup:rw" not in platform.get("volumes", []):
            drift.append("%s: not started as a systemd node (command, /sys/fs/cgroup)" % platform["name"])
    assert drift == [], "molecule/%s/molecule.yml" % scenario


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_platform_on_a_fleet_nodes_bus_is_that_node(scenario):
    drift = []
    for platform in platforms(scenario):
        volumes = platform.get("volumes", [])
        nodes = set(m.group(1) for m in map(PCI_MOUNT.match, volumes) if m)
        profiles = [m.group(1) for m in map(PROFILE_MOUNT.match, volumes) if m]
        if not nodes:
            continue  # not a copy of a fleet node (a runtime-only scenario): no PCI bus, no profile
        if len(nodes) > 1 or nodes - set(FLEET):
            drift.append("%s: mounts the PCI bus of %s, not one node of sandbox/fleet.yml" % (platform["name"], sorted(nodes)))
            continue
        node = FLEET[nodes.pop()]
        if platform.get("image") != "kubegpu/node:%s" % node["variant"]:
            drift.append("%s: image %s, but %s is variant %s" % (platform["name"], platform.get("image"), node["name"], node["variant"]))
        if profiles != ([node["profile"]] if node.get("profile") else []):
            drift.append("%s: GPU profile %s, but %s has %s" % (platform["name"], profiles, node["name"], node.get("profile")))
    assert drift == [], "molecule/%s/molecule.yml" % scenario
