# SPDX-License-Identifier: GPL-3.0-or-later
"""MIG layouts in mig-parted's format: read as mig-parted reads them (api/spec/v1/spec.go, pkg/types), and the plan
from a host's gpu facts to the layout asked for (cmd/nvidia-mig-parted/assert)."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest
import yaml

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import OptionError
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import allocatable, mig_config, plugin_config

# The write-up's custom layout, and two of the GPU Operator's defaults, as mig-parted's config file has them.
CONFIG = yaml.safe_load("""
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-balanced:
    - device-filter: ["0x20B010DE", "0x20B210DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 2
        "2g.20gb": 1
        "3g.40gb": 1
  custom:
    - devices: all
      mig-enabled: false
    - devices: [1]
      mig-enabled: true
      mig-devices: {"1g.10gb": 2, "2g.20gb": 2, "3g.40gb": 0}
""")


def gpu(index, mig_current=False, instances=(), capable=True, name="NVIDIA A100-SXM4-80GB", pending=None,
        bus="00000000:07:00.0"):
    return {"index": index, "name": name, "pci_bus_id": bus,
            "mig": {"capable": capable, "current": mig_current,
                    "pending": mig_current if pending is None else pending,
                    "profiles": ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]
                    if capable else [],
                    "devices": [{"profile": p} for p in instances]}}


def facts(*gpus, pci=()):
    return {"devices": list(gpus), "pci": list(pci)}


A100_PCI = {"address": "0000:07:00.0", "device_id": "0x20b2", "subsystem_id": "0x147f10de"}


def test_the_example_configs_load():
    configs = mig_config.load(CONFIG)
    assert sorted(configs) == ["all-balanced", "all-disabled", "custom"]
    assert configs["custom"][1] == {"devices": [1], "device_filter": [], "mig_enabled": True,
                                    "mig_devices": {"1g.10gb": 2, "2g.20gb": 2}}  # a count of 0 is no instance
    assert configs["all-balanced"][0]["device_filter"] == [(0x20B0, 0x10DE, None), (0x20B2, 0x10DE, None)]


@pytest.mark.parametrize("name", ["1g.10gb", "1c.2g.20gb", "7g.80gb", "1g.10gb+me", "8g.141gb", "6c.7g.80gb"])
def test_profile_names_mig_parted_reads(name):
    assert mig_config.profile_problem(name) is None


@pytest.mark.parametrize("name, words", [
    ("", "non-empty"),
    ("1g", "is not"),
    ("1x.10gb", "should be a number and 'g'"),
    ("5g.40gb", "5 slices"),
    ("1g.10gb+mx", "the only one is me"),
    ("1g.10gb+me,me", "the only one is me"),
    (" 1g.10gb", "should be a number"),
    ("1c.2g.20gb.x", "is not"),
])
def test_profile_names_mig_parted_refuses(name, words):
    assert words in mig_config.profile_problem(name)


@pytest.mark.parametrize("document, words", [
    ([], "a mapping with version: v1"),
    ({"version": "v2", "mig-configs": {"a": [{"devices": "all", "mig-enabled": False}]}}, "version: 'v2'; mig-parted reads version: v1"),
    ({"version": "v1"}, "mig-configs: at least one named config"),
    ({"version": "v1", "mig-configs": {}, "extra": 1}, "extra: unexpected field"),
    ({"version": "v1", "mig-configs": {"a": []}}, "mig-configs.a: a config is a list of at least one entry"),
    ({"version": "v1", "mig-configs": {"a": [{"mig-enabled": False}]}}, "mig-configs.a[0]: missing required field devices"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "some", "mig-enabled": False}]}},
     "mig-configs.a[0].devices: 'some'; write all or a list of GPU indexes"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": "yes"}]}},
     "mig-configs.a[0].mig-enabled: 'yes'; write true or false"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": True}]}},
     "mig-devices is required when mig-enabled is true"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": False, "mig-devices": {"1g.10gb": 1}}]}},
     "MIG devices are listed while mig-enabled is false"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": True, "mig-devices": {"9g.10gb": 1}}]}},
     'mig-configs.a[0].mig-devices."9g.10gb": \'9g.10gb\' asks for 9 slices'),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": -1}}]}},
     "the count is -1"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": False, "device-filter": "A100"}]}},
     "mig-configs.a[0].device-filter: 'A100' is not a PCI device id"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": False, "gpus": 1}]}},
     "mig-configs.a[0].gpus: unexpected field"),
])
def test_bad_configs_name_the_field(document, words):
    with pytest.raises(OptionError) as info:
        mig_config.load(document)
    assert str(info.value).startswith("mig_configs: ")
    assert words in str(info.value)


def test_device_ids_as_mig_parted_writes_them():
    assert mig_config.parse_device_id("0x20B210DE") == (0x20B2, 0x10DE, None)
    assert mig_config.parse_device_id("0x20B210DE:0x147F10DE") == (0x20B2, 0x10DE, (0x147F, 0x10DE))
    with pytest.raises(ValueError):
        mig_config.parse_device_id("0x1:0x2:0x3")


def test_a_config_is_chosen_by_name_unless_there_is_one():
    configs = mig_config.load(CONFIG)
    assert mig_config.select(configs, "custom") is configs["custom"]
    with pytest.raises(OptionError, match="name the one to apply"):
        mig_config.select(configs, "")
    with pytest.raises(OptionError, match="'nope' is not one of the configs"):
        mig_config.select(configs, "nope")
    one = {"only": configs["custom"]}
    assert mig_config.select(one, None) is configs["custom"]


def plan(name, host):
    return mig_config.plan(mig_config.select(mig_config.load(CONFIG), name), host)


def test_the_later_entry_wins_for_the_gpu_it_names():
    host = facts(gpu(0), gpu(1), gpu(2, mig_current=True, instances=["7g.80gb"]))
    actions = [(s["index"], s["action"]) for s in plan("custom", host)]
    assert actions == [(0, "none"), (1, "enable"), (2, "disable")]
    assert plan("custom", host)[1]["mode_change"] is True


def test_a_layout_already_there_changes_nothing():
    host = facts(gpu(0), gpu(1, mig_current=True, instances=["2g.20gb", "1g.10gb", "2g.20gb", "1g.10gb"]))
    assert [s["action"] for s in plan("custom", host)] == ["none", "none"]


def test_other_instances_are_a_reconfiguration_without_a_mode_change():
    host = facts(gpu(0), gpu(1, mig_current=True, instances=["3g.40gb", "3g.40gb"]))
    step = plan("custom", host)[1]
    assert (step["action"], step["mode_change"]) == ("reconfigure", False)
    assert step["current"]["mig_devices"] == {"3g.40gb": 2} and step["wanted"]["mig_devices"] == {"1g.10gb": 2, "2g.20gb": 2}


def test_the_device_filter_reads_the_pci_bus():
    a100 = gpu(0, bus="00000000:07:00.0")
    other = gpu(1, name="NVIDIA H100 80GB HBM3", bus="00000000:08:00.0")
    h100_pci = {"address": "0000:08:00.0", "device_id": "0x2330", "subsystem_id": "0x16c110de"}
    steps = plan("all-balanced", facts(a100, other, pci=[A100_PCI, h100_pci]))
    assert [(s["action"], s["wanted"] is None) for s in steps] == [("enable", False), ("none", True)]
    assert "no entry of the config matches" in steps[1]["why"]


def test_a_gpu_without_mig_takes_mig_disabled_and_refuses_mig():
    t4 = gpu(0, capable=False, name="Tesla T4")
    assert plan("all-disabled", facts(t4))[0]["action"] == "none"
    refused = mig_config.plan([{"devices": "all", "device_filter": [], "mig_enabled": True, "mig_devices": {}}],
                              facts(t4))[0]
    assert (refused["action"], refused["why"]) == ("refuse", "Tesla T4 is not MIG capable")


def test_a_profile_the_gpu_does_not_offer_is_refused_before_anything_changes():
    entries = [{"devices": "all", "device_filter": [], "mig_enabled": True, "mig_devices": {"1g.12gb": 7}}]
    step = mig_config.plan(entries, facts(gpu(0)))[0]
    assert step["action"] == "refuse" and "has no MIG profile 1g.12gb" in step["why"]


def test_a_switch_waiting_for_a_reset_is_reported_and_cancelled_without_one():
    waiting_on = gpu(0, mig_current=False, pending=True)  # MIG on after the next reset, but the config says off
    step = plan("custom", facts(waiting_on, gpu(1)))[0]
    assert (step["pending"], step["action"], step["set_mode"], step["mode_change"]) == (True, "disable", True, False)
    waiting_off = gpu(1, mig_current=True, pending=False, instances=["1g.10gb", "1g.10gb", "2g.20gb", "2g.20gb"])
    step = plan("custom", facts(gpu(0), waiting_off))[1]
    assert (step["pending"], step["action"], step["set_mode"], step["mode_change"]) == (True, "reconfigure", True, False)


def test_mode_on_with_the_wrong_instances_needs_no_mode_change():
    step = plan("custom", facts(gpu(0), gpu(1, mig_current=True, instances=["7g.80gb"])))[1]
    assert (step["action"], step["set_mode"], step["mode_change"]) == ("reconfigure", False, False)


def test_the_new_layout_feeds_what_the_device_plugin_stage_expects():
    host = facts(gpu(0), gpu(1, mig_current=True, instances=["7g.80gb"]), gpu(2, mig_current=True, instances=["7g.80gb"]))
    host.update(present=True, count=3)
    steps = plan("custom", host)
    assert [s["action"] for s in steps] == ["none", "reconfigure", "disable"]
    after = mig_config.facts_after(steps, host)
    assert host["devices"][2]["mig"]["current"] is True  # the facts given are left as they were
    config = plugin_config.build_config({"mig_strategy": "mixed"})
    assert allocatable.expected_from_fact(config, after) == {
        "nvidia.com/gpu": 2, "nvidia.com/mig-1g.10gb": 2, "nvidia.com/mig-2g.20gb": 2}
