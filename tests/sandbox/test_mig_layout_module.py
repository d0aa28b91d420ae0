# SPDX-License-Identifier: GPL-3.0-or-later
"""The mig_layout module on the fake NVML (built from sandbox/fakenvml, loaded by the real pynvml): MIG layouts in
mig-parted's format applied, reapplied with no change, changed, switched off, refused before any change, and a MIG
mode switch that waits for a GPU reset; what the node's device plugin advertises (devsim's rules on the profile with
the state applied, sandbox/fakenvml/mig_state.py) follows the layout."""

import json
import os
import shutil

import pytest

import fake_pci_bus
from ansible_cli import run_module
from sandbox.fakenvml import mig_state
from sandbox.k8s.devsim import rules
from sandbox.k8s.devsim.watcher import read_node_profile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROFILES = os.path.join(ROOT, "sandbox", "profiles")
GPU_OPERATOR = os.path.join(ROOT, "tests", "fixtures", "mig", "gpu-operator-v26.7.0-default-mig-config.yaml")
WRITE_UP = {"1g.10gb": 2, "2g.20gb": 2}  # the custom layout of the write-up this project grew from
CONFIG = {"version": "v1", "mig-configs": {
    "write-up": [{"devices": [0], "mig-enabled": True, "mig-devices": WRITE_UP},
                 {"devices": [1], "mig-enabled": False}],
    "all-1g.10gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}],
    "all-3g.40gb-and-1g": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2, "1g.10gb": 1}}],
    "all-disabled": [{"devices": "all", "mig-enabled": False}],
    "h100-write-up": [{"devices": "all", "mig-enabled": True, "mig-devices": WRITE_UP}],
    # mig-parted reads the device ids from the PCI bus (internal/util GetGPUDeviceIDs, nvpci); this host has none
    "h100-by-filter": [{"devices": "all", "device-filter": "0x233010DE", "mig-enabled": True, "mig-devices": WRITE_UP}],
}}


@pytest.fixture
def node(fake_nvml_dir, tmp_path):
    """``run(name, profile=..., check=False, diff=False)``: the module on a node of its own (profile copy, state
    file in a writable directory); ``node.state`` is the state file's path, ``node.profile`` the profile's."""
    state_dir = tmp_path / "fake-nvml"
    state_dir.mkdir()

    class Node:
        state = str(state_dir / "mig-state.json")
        profile = None
        bus = ()  # the command prefix that shows the module the profile's GPUs on the PCI bus (on_bus)

        def use(self, profile_name):
            self.profile = str(tmp_path / (profile_name + ".json"))
            shutil.copy(os.path.join(PROFILES, profile_name + ".json"), self.profile)
            return self

        def on_bus(self):
            """Show the module the profile's GPUs on the PCI bus, where mig-parted's device filters are matched."""
            why = fake_pci_bus.why_not()
            if why:
                pytest.skip("the layouts under test match GPUs by PCI id, and %s" % why)
            with open(self.profile, encoding="utf-8") as handle:
                self.bus = fake_pci_bus.prefix(fake_pci_bus.write(json.load(handle), str(tmp_path / "pci")))
            return self

        def env(self):
            return {"LD_LIBRARY_PATH": str(fake_nvml_dir), "FAKE_NVML_PROFILE": self.profile,
                    "FAKE_NVML_MIG_STATE": self.state}

        def run(self, name, check=False, diff=False, expect_rc=0, config=None, config_file=None):
            source = {"config_file": config_file} if config_file else {"config": config or CONFIG}
            rc, result = run_module("kubegpu.cluster.mig_layout", dict(source, name=name), check=check, diff=diff,
                                    env=self.env(), prefix=self.bus)
            assert rc == expect_rc, result.get("msg", result)
            return result

        def facts(self):
            rc, result = run_module("kubegpu.cluster.gpu_facts", {}, env=self.env())
            assert rc == 0, result
            return result["ansible_facts"]["gpu"]

        def advertised(self, strategy="mixed"):
            """What devsim's plugin rules advertise for the node: the profile with the MIG state applied."""
            profile = read_node_profile("node", {"sandbox.kubegpu.io/profile-path": self.profile,
                                                 "sandbox.kubegpu.io/mig-state-path": self.state}, PROFILES)
            config = rules.parse_config(json.dumps({"version": "v1", "flags": {"migStrategy": strategy}}))
            return rules.advertised_resources(profile, config)

    return Node().use("a100x2-mig-capable")


def layout(gpu):
    counts = {}
    for device in (gpu.get("mig") or {}).get("devices") or []:
        counts[device["profile"]] = counts.get(device["profile"], 0) + 1
    return counts


def test_the_write_up_layout_is_applied_then_left_alone(node):
    preview = node.run("write-up", check=True, diff=True)
    assert preview["changed"] is True
    assert [p["action"] for p in preview["plan"]] == ["enable", "none"]
    assert preview["reset_required"] == []  # this A100 switches at once (bare metal), as the run then says
    assert preview["diff"] == {"before": "GPU 0: MIG off\n", "after": "GPU 0: MIG on: 1g.10gb x2, 2g.20gb x2\n"}
    assert not os.path.exists(node.state)  # check mode changed nothing
    assert layout(preview["predicted"]["devices"][0]) == WRITE_UP

    applied = node.run("write-up")
    assert applied["changed"] is True and applied["reset_required"] == []
    gpu = applied["ansible_facts"]["gpu"]["devices"]
    assert gpu[0]["mig"]["current"] is True and layout(gpu[0]) == WRITE_UP
    assert gpu[1]["mig"]["current"] is False
    assert layout(node.facts()["devices"][0]) == WRITE_UP  # a new process reads the same layout
    assert node.advertised() == {"nvidia.com/mig-1g.10gb": 2, "nvidia.com/mig-2g.20gb": 2, "nvidia.com/gpu": 1}

    again = node.run("write-up")
    assert again["changed"] is False and [p["action"] for p in again["plan"]] == ["none", "none"]


def test_a_layout_is_changed_and_switched_off_again(node):
    node.run("write-up")
    changed = node.run("all-1g.10gb")
    assert [p["action"] for p in changed["plan"]] == ["reconfigure", "enable"]
    assert [layout(g) for g in changed["ansible_facts"]["gpu"]["devices"]] == [{"1g.10gb": 7}, {"1g.10gb": 7}]
    assert node.advertised() == {"nvidia.com/mig-1g.10gb": 14}

    off = node.run("all-disabled")
    assert [p["action"] for p in off["plan"]] == ["disable", "disable"]
    assert [g["mig"]["current"] for g in off["ansible_facts"]["gpu"]["devices"]] == [False, False]
    assert node.advertised() == {"nvidia.com/gpu": 2}
    assert node.run("all-disabled")["changed"] is False


def test_a_layout_that_does_not_fit_is_refused_before_any_change(node):
    node.run("write-up")
    before = json.loads(open(node.state, encoding="utf-8").read())
    refused = node.run("all-3g.40gb-and-1g", expect_rc=2)
    assert "do not fit together" in refused["msg"] and "GPU 0" in refused["msg"], refused["msg"]
    assert json.loads(open(node.state, encoding="utf-8").read()) == before  # GPU 0 untouched
    # check mode reads the same profile table and placements, so it refuses too
    assert "do not fit together" in node.run("all-3g.40gb-and-1g", check=True, expect_rc=2)["msg"]
    # GPU 1's layout is impossible (one +me per GPU): refused before GPU 0, whose layout fits, is changed
    config = dict(CONFIG, **{"mig-configs": {"split": [
        {"devices": [0], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
        {"devices": [1], "mig-enabled": True, "mig-devices": {"1g.10gb+me": 2}}]}})
    refused = node.run("split", config=config, expect_rc=2)
    assert "GPU 1" in refused["msg"] and "room for 1" in refused["msg"], refused["msg"]
    assert json.loads(open(node.state, encoding="utf-8").read()) == before


def test_a_gpu_that_is_not_mig_capable_is_skipped_under_devices_all_and_refused_by_index(node):
    node.use("t4")
    skipped = node.run("all-1g.10gb")
    assert skipped["changed"] is False and skipped["plan"][0]["action"] == "none"
    assert skipped["plan"][0]["why"] == ("Tesla T4 is not MIG capable: skipped, as mig-parted skips such a GPU under "
                                         "devices: all")
    refused = node.run("write-up", expect_rc=2)
    assert "nothing was changed" in refused["msg"] and "Tesla T4 is not MIG capable" in refused["msg"], refused["msg"]


def test_a_mode_switch_that_waits_for_a_reset_is_reported_and_finished_after_it(node):
    node.use("h100-mig-reset")
    assert node.run("h100-write-up", check=True)["reset_required"] == [0]  # passed through to a VM: said before
    first = node.run("h100-write-up")
    assert first["changed"] is True and first["reset_required"] == [0]
    assert first["ansible_facts"]["gpu"]["devices"][0]["mig"]["pending"] is True
    assert first["ansible_facts"]["gpu"]["devices"][0]["mig"]["current"] is False

    waiting = node.run("h100-write-up")  # nothing more can happen before the reset
    assert waiting["reset_required"] == [0]

    with open(node.profile, encoding="utf-8") as handle:
        assert mig_state.reset(json.load(handle), node.state)  # what the node's boot does after a reboot
    after = node.run("h100-write-up")
    assert after["changed"] is True and after["reset_required"] == []
    assert layout(after["ansible_facts"]["gpu"]["devices"][0]) == WRITE_UP
    assert node.run("h100-write-up")["changed"] is False


def test_a_device_filter_matches_gpus_by_their_pci_ids_as_mig_parted_reads_them(node):
    """mig-parted matches a device-filter against the ids of the GPUs on the PCI bus (sysfs), so a GPU NVML reports
    but the bus does not show (as on this test's host) matches no entry and is left alone."""
    node.use("h100-mig-reset")
    result = node.run("h100-by-filter")
    assert result["changed"] is False
    assert result["plan"][0]["action"] == "none" and "no entry of the config matches" in result["plan"][0]["why"]


def test_a_bad_config_names_the_field(node):
    bad = {"version": "v1", "mig-configs": {"x": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": -1}}]}}
    failed = node.run("x", config=bad, expect_rc=2)
    assert 'config: mig-configs.x[0].mig-devices."1g.10gb"' in failed["msg"], failed["msg"]


def test_nvidias_layouts_on_a_mixed_node_skip_the_gpu_without_mig_and_a_rerun_changes_nothing(node):
    """The GPU Operator's default config file, as the MIG manager reads it: all-balanced (device filters per GPU model)
    and all-enabled (devices: all) on an A100 + H100 + V100 node. The V100 is left alone, as mig-parted skips it; the
    others get the layout; check mode said so first; the rerun changes nothing (mig-parted would clear and recreate
    every MIG GPU, since its assert never passes on the V100)."""
    node.use("a100-h100-v100-mig-capable").on_bus()
    balanced = {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    for name, want, v100_why in (("all-balanced", balanced, "no entry of the config matches"),
                                 ("all-enabled", {}, "Tesla V100-PCIE-16GB is not MIG capable: skipped")):
        preview = node.run(name, check=True, config_file=GPU_OPERATOR)
        applied = node.run(name, config_file=GPU_OPERATOR)
        assert [p["action"] for p in preview["plan"]] == [p["action"] for p in applied["plan"]]
        assert [p["action"] for p in applied["plan"]] == ["enable" if name == "all-balanced" else "reconfigure"] * 2 + [
            "none"]
        assert preview["reset_required"] == applied["reset_required"] == []
        assert v100_why in applied["plan"][2]["why"], applied["plan"][2]
        gpus = applied["ansible_facts"]["gpu"]["devices"]
        assert [(g["mig"]["current"], layout(g)) for g in gpus] == [(True, want), (True, want), (False, {})]
        again = node.run(name, config_file=GPU_OPERATOR)
        assert again["changed"] is False and [p["action"] for p in again["plan"]] == ["none"] * 3
        if name == "all-balanced":
            assert node.advertised() == {"nvidia.com/mig-1g.10gb": 4, "nvidia.com/mig-2g.20gb": 2,
                                         "nvidia.com/mig-3g.40gb": 2, "nvidia.com/gpu": 1}
    # named by its index, the V100 is refused, before anything changes
    config = {"version": "v1", "mig-configs": {"v100": [{"devices": [2], "mig-enabled": True, "mig-devices": {}}]}}
    refused = node.run("v100", config=config, expect_rc=2)
    assert "GPU 2: Tesla V100-PCIE-16GB is not MIG capable (the config names it by its index" in refused["msg"]


def test_a_config_file_error_names_the_file_and_the_field(node, tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("version: v1\nmig-configs:\n  x:\n    - devices: all\n      mig-enabled: true\n"
                    "      mig-devices: {\"1g.10gb\": 0}\n", encoding="utf-8")
    failed = node.run("x", config_file=str(path), expect_rc=2)
    assert failed["msg"] == ("config_file %s: mig-configs.x[0].mig-devices: all counts are 0 (mig-parted: \"all counts "
                             "for all MigProfiles are 0\"); write {} for MIG on and no instances" % path)
