# SPDX-License-Identifier: GPL-3.0-or-later
"""MIG layouts in mig-parted's format: read as mig-parted v0.15.0 reads them (api/spec/v1/spec.go, pkg/types, go-nvlib's
profile grammar), and the plan from a host's gpu facts to the layout asked for (cmd/nvidia-mig-parted/assert, apply)."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

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
                                    "mig_devices": {"1g.10gb": 2, "2g.20gb": 2}, "problems": []}  # 0: no instance
    assert configs["all-balanced"][0]["device_filter"] == [(0x20B0, 0x10DE, None), (0x20B2, 0x10DE, None)]


# go-nvlib's parseMigProfile (pkg/nvlib/device/mig_profile.go), which mig-parted reads files with: any whole numbers,
# any attribute words after + or - (Blackwell's gfx, me.all and -me are in NVIDIA's default config files)
@pytest.mark.parametrize("name", ["1g.10gb", "1c.2g.20gb", "7g.80gb", "1g.10gb+me", "8g.141gb", "6c.7g.80gb",
                                  "5g.40gb", "1g.10gb+mx", "1g.24gb+gfx", "1g.24gb+me.all", "1g.24gb-me",
                                  "2g.48gb+gfx,me", "07g.80gb", "0g.0gb", "2c.1g.10gb"])
def test_profile_names_mig_parted_reads(name):
    assert mig_config.profile_problem(name) is None


@pytest.mark.parametrize("name, words", [
    ("", "not empty"),
    (None, "not empty"),
    (7, "not empty"),
    ("1g", "is not [<c>c.]<g>g.<gb>gb"),
    ("1x.10gb", "'1x' does not end in 'g'"),
    ("1g.10gb+me,me", "the attribute 'me' twice"),
    (" 1g.10gb", "spaces around"),
    ("1g.10gb\n", "spaces around"),
    ("1c.2g.20gb.x", "'20gb.x' does not end in 'gb'"),
    ("1c.2g.20.5gb", "not a whole number"),
    ("1g.10gb+me-x", "both + and -"),
    ("1g.10gb-", "an empty attribute"),
    ("1g.10gb+.me", "starts with a digit or a dot"),
    ("1g.10gb+me.", "ends with a dot"),
    ("1g.10gb+1me", "starts with a digit"),
    ("1g.10gb+m_e", "other than letters, digits and dots"),
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
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": True, "mig-devices": {"9x.10gb": 1}}]}},
     'mig-configs.a[0].mig-devices."9x.10gb": \'9x.10gb\' is not [<c>c.]<g>g.<gb>gb'),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": -1}}]}},
     "the count is -1"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": False, "device-filter": 0x20B010DE}]}},
     "mig-configs.a[0].device-filter: a PCI device id such as 0x20B510DE"),
    # what mig-parted's reader (YAML read into JSON, then Go's types) refuses
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 2.5}}]}},
     "the count is 2.5"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": "2"}}]}},
     "the count is '2'"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": True}}]}},
     "the count is True"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": [0.5], "mig-enabled": False}]}}, "write all or a list"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": [True], "mig-enabled": False}]}}, "write all or a list"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": True, "mig-devices": []}]}},
     "profile names to counts"),
    # pkg/types/mig_config.go AssertValidFormat: listed profiles, all counted 0
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 0}}]}},
     'mig-configs.a[0].mig-devices: all counts are 0 (mig-parted: "all counts for all MigProfiles are 0")'),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": False, "mig-devices": {"1g.10gb": 0}}]}},
     "all counts are 0"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": False,
                                              "mig-devices": {"1g.10gb": 0, "2g.20gb": 1}}]}},
     "MIG devices are listed while mig-enabled is false"),
    # a profile of the wrong format in a config other than the one asked for: mig-parted reads every config
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": False}],
                                       "b": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb+": 1}}]}},
     'mig-configs.b[0].mig-devices."1g.10gb+"'),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": False, "gpus": 1}]}},
     "mig-configs.a[0].gpus: unexpected field"),
])
def test_bad_configs_name_the_field(document, words):
    with pytest.raises(OptionError) as info:
        mig_config.load(document)
    assert str(info.value).startswith("mig_configs: ")
    assert words in str(info.value)


def one(entry, **more):
    """A document of one config ``a`` with ``entry``, and further configs."""
    configs = {"a": [entry]}
    configs.update(more)
    return {"version": "v1", "mig-configs": configs}


FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "fixtures", "mig")
SHIPPED = sorted(name for name in os.listdir(FIXTURES) if name.endswith(".yaml"))


@pytest.mark.parametrize("name", SHIPPED)
def test_every_named_config_of_nvidias_default_files_loads(name):
    """NVIDIA's GPU Operator and mig-parted default configs (restated in tests/fixtures/mig) load whole, and each of
    their layouts can be selected; they hold Blackwell's names, for which the reader once refused the whole file."""
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as handle:
        document = yaml.safe_load(handle)
    configs = mig_config.load(document, option="config_file " + name)
    assert sorted(configs) == sorted(document["mig-configs"]) and len(configs) > 80
    for layout in configs:
        assert mig_config.select(configs, layout) is configs[layout]
    profiles = set(p for entries in document["mig-configs"].values() for e in entries for p in e.get("mig-devices") or {})
    assert set(["1g.24gb+gfx", "1g.24gb+me.all", "1g.24gb-me", "1g.10gb+me", "7g.80gb"]) <= profiles
    balanced = configs["all-balanced"]
    assert all(entry["device_filter"] and None not in entry["device_filter"] for entry in balanced)


def test_what_mig_parted_reads_loads_the_same():
    """sigs.k8s.io/yaml turns the YAML into JSON before Go's types read it: a whole number written 2.0 is 2 (a count
    or an index), an empty count is 0, an empty mig-enabled is false; {} is MIG on without instances."""
    entry = mig_config.load(one({"devices": [1.0, 2], "mig-enabled": True,
                                 "mig-devices": {"1g.10gb": 2.0, "2g.20gb": None}}))["a"][0]
    assert (entry["devices"], entry["mig_devices"]) == ([1, 2], {"1g.10gb": 2})
    assert mig_config.load(one({"devices": "all", "mig-enabled": True, "mig-devices": {}}))["a"][0]["mig_devices"] == {}
    assert mig_config.load(one({"devices": "all", "mig-enabled": False, "mig-devices": {}}))["a"][0]["mig_enabled"] is False
    assert mig_config.load(one({"devices": [], "mig-enabled": False}))["a"][0]["devices"] == []


def test_names_of_other_gpu_families_load_and_only_the_selected_config_matters():
    """NVIDIA's default files hold Blackwell's names; they are checked against a GPU only when planned for it."""
    document = one({"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
                   blackwell=[{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.24gb+gfx": 4}}],
                   me_off=[{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.24gb-me": 4}}])
    configs = mig_config.load(document)
    assert plan_of(configs, "a", facts(gpu(0)))[0]["action"] == "enable"
    refused = plan_of(configs, "blackwell", facts(gpu(0)))[0]
    assert refused["action"] == "refuse"
    assert refused["why"] == ("NVIDIA A100-SXM4-80GB has no MIG profile 1g.24gb+gfx (it has 1g.10gb, 1g.10gb+me, "
                              "1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb)")


@pytest.mark.parametrize("entry, field, words", [
    ({"devices": "all", "mig-enabled": False, "device-filter": "A100"}, "device-filter",
     "'A100' is not a PCI device id such as 0x20B510DE: mig-parted reads it and matches no GPU with it"),
    ({"devices": "all", "mig-enabled": False, "device-filter": ["0x20B210DE", "0x120B210DE"]}, "device-filter",
     "'0x120B210DE' is more than 32 bits"),
    ({"devices": "all", "mig-enabled": False, "device-filter": "0x20B210DE:0x1:0x2"}, "device-filter",
     "is not <device><vendor> or <device><vendor>:<subdevice><subvendor>"),
    ({"devices": [0, -1], "mig-enabled": False}, "devices", "-1 is not a GPU index (0 or more)"),
    ({"devices": "all", "mig-enabled": None}, "mig-enabled", "mig-parted reads that as false"),
])
def test_an_entry_that_can_never_do_what_it_says_loads_but_is_refused_when_selected(entry, field, words):
    """mig-parted reads these and an entry never matches (or, for an empty mig-enabled, turns MIG off): the file
    loads, as it does for mig-parted, and the config is refused when it is the one asked for."""
    good = [{"devices": "all", "mig-enabled": False}]
    configs = mig_config.load(one(entry, good=good), option="config_file /etc/mig.yaml")
    assert mig_config.select(configs, "good") == configs["good"]
    with pytest.raises(OptionError) as info:
        mig_config.select(configs, "a", option="name", source="config_file /etc/mig.yaml")
    assert str(info.value).startswith("config_file /etc/mig.yaml: mig-configs.a[0].%s: " % field), str(info.value)
    assert words in str(info.value)


def test_an_unreadable_filter_matches_no_gpu_as_in_mig_parted():
    entry = mig_config.load(one({"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7},
                                 "device-filter": ["junk", "0x20B210DE"]}))["a"][0]
    assert entry["device_filter"] == [None, (0x20B2, 0x10DE, None)]
    step = mig_config.plan([entry], facts(gpu(0), pci=[A100_PCI]))[0]
    assert step["action"] == "enable"  # the readable filter still matches


def test_device_ids_as_mig_parted_writes_them():
    assert mig_config.parse_device_id("0x20B210DE") == (0x20B2, 0x10DE, None)
    assert mig_config.parse_device_id("0x20B210DE:0x147F10DE") == (0x20B2, 0x10DE, (0x147F, 0x10DE))
    # strconv.ParseUint(text, 0, 32): decimal and the other bases too, but no sign and no spaces
    assert mig_config.parse_device_id(str(0x20B210DE)) == (0x20B2, 0x10DE, None)
    assert mig_config.parse_device_id("0o4054410336") == (0x20B2, 0x10DE, None)
    for text in ("0x1:0x2:0x3", " 0x20B210DE", "+0x20B210DE", "0x", "08", "0x100000000", ""):
        with pytest.raises(ValueError):
            mig_config.parse_device_id(text)


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


def plan_of(configs, name, host):
    return mig_config.plan(mig_config.select(configs, name), host)


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


def test_a_gpu_without_mig_takes_mig_disabled_and_is_skipped_under_devices_all():
    t4 = gpu(0, capable=False, name="Tesla T4")
    assert plan("all-disabled", facts(t4))[0]["action"] == "none"
    assert plan("all-disabled", facts(t4))[0]["why"] is None
    on = {"devices": "all", "device_filter": [], "mig_enabled": True, "mig_devices": {}}
    skipped = mig_config.plan([on], facts(t4))[0]
    assert (skipped["action"], skipped["set_mode"]) == ("none", False)
    assert skipped["why"] == ("Tesla T4 is not MIG capable: skipped, as mig-parted skips such a GPU under devices: "
                              "all")


def test_a_gpu_without_mig_named_by_its_index_with_mig_is_refused():
    """mig-parted apply walks the entries in order and stops at an entry that names such a GPU with MIG on, even
    when a later entry would skip it."""
    t4 = gpu(1, capable=False, name="Tesla T4")
    named = {"devices": [1], "device_filter": [], "mig_enabled": True, "mig_devices": {}}
    everything = {"devices": "all", "device_filter": [], "mig_enabled": True, "mig_devices": {}}
    for entries in ([named], [named, everything]):
        refused = mig_config.plan(entries, facts(gpu(0), t4))[1]
        assert (refused["action"], refused["why"]) == (
            "refuse", "Tesla T4 is not MIG capable (the config names it by its index with MIG enabled)")
    off = dict(named, mig_enabled=False)
    assert mig_config.plan([off], facts(gpu(0), t4))[1]["action"] == "none"


def test_a_mixed_node_gets_its_mig_gpus_configured_and_the_others_skipped():
    v100 = gpu(2, capable=False, name="Tesla V100-PCIE-16GB", bus="00000000:3B:00.0")
    everything = {"devices": "all", "device_filter": [], "mig_enabled": True, "mig_devices": {"1g.10gb": 7}}
    host = facts(gpu(0), gpu(1, mig_current=True, instances=["1g.10gb"] * 7), v100)
    steps = mig_config.plan([everything], host)
    assert [s["action"] for s in steps] == ["enable", "none", "none"]
    assert steps[1]["why"] is None and "not MIG capable: skipped" in steps[2]["why"]
    after = mig_config.facts_after(steps, host)
    assert [mig_config.current_layout(g) for g in after["devices"]] == [
        {"mig_enabled": True, "mig_devices": {"1g.10gb": 7}}] * 2 + [{"mig_enabled": False, "mig_devices": {}}]
    again = mig_config.plan([everything], after)
    assert [s["action"] for s in again] == ["none", "none", "none"]  # the rerun changes nothing


def test_a_name_is_the_gpu_profile_it_matches():
    """go-nvlib's Matches: 1c.1g.10gb is 1g.10gb, attributes in any order; mig-parted resolves a name so on the GPU
    (resolveMigProfileOnDevice). The plan names the GPU's profile, so a layout already there changes nothing."""
    entry = {"devices": "all", "device_filter": [], "mig_enabled": True,
             "mig_devices": {"1c.1g.10gb": 2, "1g.10gb": 1, "2g.20gb": 1}}
    step = mig_config.plan([entry], facts(gpu(0)))[0]
    assert step["wanted"]["mig_devices"] == {"1g.10gb": 3, "2g.20gb": 1}
    there = gpu(0, mig_current=True, instances=["1g.10gb", "1g.10gb", "1g.10gb", "2g.20gb"])
    assert mig_config.plan([entry], facts(there))[0]["action"] == "none"


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
