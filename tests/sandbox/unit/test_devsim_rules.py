# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests of sandbox.k8s.devsim.rules: profile + plugin config -> advertised resources."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandbox.k8s.devsim.rules import PluginError, advertised_resources, parse_cli_args, parse_config, resource_name
from sandbox_gpu_profiles import H100, V100, gpu, plain, profile

TS5 = """
version: v1
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 5
"""


def adv(prof, text=None, env=None, cli=None):
    return advertised_resources(prof, parse_config(text, env, cli))


# ---------------------------------------------------------------- defaults and plain GPUs

def test_no_config_advertises_every_gpu():
    assert adv(plain(4)) == {"nvidia.com/gpu": 4}


def test_node_without_profile_advertises_nothing():
    assert adv(None) == {}
    assert adv(profile()) == {}


def test_time_slicing_multiplies():
    assert adv(plain(4), TS5) == {"nvidia.com/gpu": 20}


def test_rename_by_default_moves_replicas_to_shared():
    text = TS5.replace("timeSlicing:", "timeSlicing:\n    renameByDefault: true")
    assert adv(plain(4), text) == {"nvidia.com/gpu.shared": 20}


def test_short_resource_name_gets_prefix():
    assert adv(plain(2), TS5.replace("nvidia.com/gpu", "gpu")) == {"nvidia.com/gpu": 10}


def test_fail_requests_greater_than_one_does_not_change_counts():
    text = TS5.replace("timeSlicing:", "timeSlicing:\n    failRequestsGreaterThanOne: true")
    config = parse_config(text)
    assert config.sharing.fail_requests_greater_than_one is True
    assert advertised_resources(plain(4), config) == {"nvidia.com/gpu": 20}


def test_custom_rename_is_ignored_like_the_plugin_does():
    text = TS5.replace("replicas: 5", "replicas: 5\n      rename: my-gpu")
    config = parse_config(text)
    assert advertised_resources(plain(4), config) == {"nvidia.com/gpu": 20}
    assert any("'rename' field" in w for w in config.warnings)


def test_custom_rename_with_rename_by_default_still_uses_shared():
    text = TS5.replace("replicas: 5", "replicas: 5\n      rename: my-gpu").replace("timeSlicing:", "timeSlicing:\n    renameByDefault: true")
    assert adv(plain(4), text) == {"nvidia.com/gpu.shared": 20}


@pytest.mark.parametrize("devices", ["2", "[0, 1]", '["0", "GPU-8b1f9d0e-4b5e-4c58-9d0c-3a7d8c0e2a11"]'])
def test_device_subsets_are_ignored_like_the_plugin_does(devices):
    config = parse_config(TS5.replace("replicas: 5", "replicas: 5\n      devices: %s" % devices))
    assert advertised_resources(plain(4), config) == {"nvidia.com/gpu": 20}
    assert any("'devices' field" in w for w in config.warnings)


def test_duplicate_entries_for_one_resource_keep_the_largest_replica_set():
    text = TS5 + "    - name: nvidia.com/gpu\n      replicas: 3\n"
    assert adv(plain(2), text) == {"nvidia.com/gpu": 10}


def test_resource_not_present_is_skipped():
    text = TS5.replace("nvidia.com/gpu", "nvidia.com/mig-1g.10gb")
    assert adv(plain(3), text) == {"nvidia.com/gpu": 3}


# ---------------------------------------------------------------- MPS

MPS3 = """
version: v1
flags:
  mpsRoot: /run/nvidia/mps
sharing:
  mps:
    resources:
    - name: nvidia.com/gpu
      replicas: 3
"""


def test_mps_multiplies_and_forces_fail_requests_greater_than_one():
    config = parse_config(MPS3)
    assert config.sharing.strategy == "mps"
    assert config.sharing.fail_requests_greater_than_one is True
    assert advertised_resources(plain(4), config) == {"nvidia.com/gpu": 12}


def test_mps_root_from_env():
    assert adv(plain(1), MPS3.replace("  mpsRoot: /run/nvidia/mps\n", ""), env={"MPS_ROOT": "/run/nvidia/mps"}) == {"nvidia.com/gpu": 3}


def test_mps_without_root_is_refused():
    with pytest.raises(PluginError, match="MPS root"):
        parse_config(MPS3.replace("  mpsRoot: /run/nvidia/mps\n", ""))


def test_mps_wins_over_time_slicing():
    text = MPS3 + "  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 10\n"
    assert adv(plain(2), text) == {"nvidia.com/gpu": 6}


def test_mps_with_mixed_is_refused():
    with pytest.raises(PluginError, match="mixed is not supported with MPS"):
        parse_config(MPS3, env={"MIG_STRATEGY": "mixed"})


def test_mps_on_mig_devices_is_refused():
    prof = profile(gpu(0, ["1g.10gb"] * 7))
    with pytest.raises(PluginError, match="MPS is not supported for MIG devices"):
        adv(prof, MPS3, env={"MIG_STRATEGY": "single"})


# ---------------------------------------------------------------- MIG

MIXED = profile(
    gpu(0, ["1g.10gb"] * 7),
    gpu(1, ["3g.40gb", "2g.20gb", "1g.10gb"]),
    gpu(2, ["1g.10gb+me", "2g.20gb"]),
    gpu(3, [], mig_current=False),
    gpu(4),
)


def test_mig_none_counts_full_gpus_even_in_mig_mode():
    assert adv(MIXED) == {"nvidia.com/gpu": 5}


def test_mig_mixed_counts_per_profile():
    assert adv(MIXED, env={"MIG_STRATEGY": "mixed"}) == {
        "nvidia.com/gpu": 2,
        "nvidia.com/mig-1g.10gb": 8,
        "nvidia.com/mig-2g.20gb": 2,
        "nvidia.com/mig-3g.40gb": 1,
        "nvidia.com/mig-1g.10gb.me": 1,
    }


def test_mig_mixed_all_gpus_in_mig_mode_has_no_plain_gpu_resource():
    prof = profile(gpu(0, ["3g.40gb", "3g.40gb"]), gpu(1, ["7g.80gb"]))
    assert adv(prof, "flags: {migStrategy: mixed}") == {"nvidia.com/mig-3g.40gb": 2, "nvidia.com/mig-7g.80gb": 1}


def test_mig_single_counts_mig_devices_as_gpus():
    prof = profile(gpu(0, ["1g.10gb"] * 7), gpu(1, ["1g.10gb"] * 7))
    assert adv(prof, "flags: {migStrategy: single}") == {"nvidia.com/gpu": 14}


def test_mig_single_without_mig_mode_counts_gpus():
    assert adv(plain(2), "flags: {migStrategy: single}") == {"nvidia.com/gpu": 2}


def test_mig_single_with_time_slicing():
    prof = profile(gpu(0, ["2g.20gb"] * 3))
    assert adv(prof, "flags: {migStrategy: single}\n" + TS5.replace("replicas: 5", "replicas: 2")) == {"nvidia.com/gpu": 6}


def test_mig_single_refuses_mixed_profiles():
    with pytest.raises(PluginError, match="more than one MIG device type"):
        adv(profile(gpu(0, ["1g.10gb", "2g.20gb"])), env={"MIG_STRATEGY": "single"})


def test_mig_single_refuses_mig_and_non_mig_gpus():
    with pytest.raises(PluginError, match="same migEnabled value"):
        adv(profile(gpu(0, ["1g.10gb"]), gpu(1)), env={"MIG_STRATEGY": "single"})


def test_mig_mode_without_mig_devices_is_refused_by_single():
    with pytest.raises(PluginError, match="device 0 has no MIG devices configured"):
        adv(profile(gpu(0, [])), env={"MIG_STRATEGY": "single"})


def test_mig_mode_without_mig_devices_is_a_warning_under_mixed():
    # k8s-device-plugin PR #806: a warning; the empty GPU advertises nothing, the others what they have
    prof = profile(gpu(0, []), gpu(1, ["2g.20gb"]), gpu(2))
    assert adv(prof, env={"MIG_STRATEGY": "mixed"}) == {"nvidia.com/gpu": 1, "nvidia.com/mig-2g.20gb": 1}


def test_mig_single_compares_attributes_not_names():
    # same name, different GPU models: the H100's 1g.10gb has other SMs and memory than the A100's
    prof = profile(gpu(0, ["1g.10gb"]), gpu(1, ["1g.10gb"], model=H100))
    with pytest.raises(PluginError, match="more than one MIG device type present on node"):
        adv(prof, env={"MIG_STRATEGY": "single"})
    assert adv(prof, env={"MIG_STRATEGY": "mixed"}) == {"nvidia.com/mig-1g.10gb": 2}


def test_a_lost_gpu_takes_the_node_down():
    prof = profile(gpu(0, model=V100), gpu(1, model=V100, errors={"nvmlDeviceGetHandleByIndex": "GPU_IS_LOST"}))
    with pytest.raises(PluginError, match="error getting device handle for index '1': GPU_IS_LOST"):
        adv(prof)


def test_compute_capability_not_supported_ends_the_plugin():
    prof = profile(gpu(0, model=V100, errors={"nvmlDeviceGetCudaComputeCapability": "NOT_SUPPORTED"}))
    with pytest.raises(PluginError, match="error getting device compute capability: NOT_SUPPORTED"):
        adv(prof)


@pytest.mark.parametrize("strategy, refused", [("none", False), ("single", False), ("mixed", True)])
def test_memory_not_supported_matters_only_to_mixed_on_mig_capable_gpus(strategy, refused):
    prof = profile(gpu(0, errors={"nvmlDeviceGetMemoryInfo": "NOT_SUPPORTED"}))
    if refused:
        with pytest.raises(PluginError, match="error getting device memory info: NOT_SUPPORTED"):
            adv(prof, env={"MIG_STRATEGY": strategy})
    else:
        assert adv(prof, env={"MIG_STRATEGY": strategy}) == {"nvidia.com/gpu": 1}


def test_media_extension_profile_is_its_own_resource():
    prof = profile(gpu(0, ["1g.10gb+me", "1g.10gb"]))
    assert adv(prof, env={"MIG_STRATEGY": "mixed"}) == {"nvidia.com/mig-1g.10gb": 1, "nvidia.com/mig-1g.10gb.me": 1}


def test_mig_mixed_time_slicing_of_one_mig_resource_with_rename_by_default():
    text = """
flags: {migStrategy: mixed}
sharing:
  timeSlicing:
    renameByDefault: true
    resources:
    - name: nvidia.com/mig-1g.10gb
      replicas: 2
"""
    assert adv(MIXED, text) == {
        "nvidia.com/gpu": 2,
        "nvidia.com/mig-1g.10gb.shared": 16,
        "nvidia.com/mig-2g.20gb": 2,
        "nvidia.com/mig-3g.40gb": 1,
        "nvidia.com/mig-1g.10gb.me": 1,
    }


def test_compute_instance_profile_matches_no_resource_in_mixed():
    with pytest.raises(PluginError, match="does not match any resource patterns"):
        adv(profile(gpu(0, ["1c.2g.20gb"])), env={"MIG_STRATEGY": "mixed"})


# ---------------------------------------------------------------- precedence

def test_env_overrides_file_and_cli_overrides_env():
    text = "flags:\n  migStrategy: none\n"
    assert parse_config(text).mig_strategy == "none"
    assert parse_config(text, env={"MIG_STRATEGY": "mixed"}).mig_strategy == "mixed"
    assert parse_config(text, env={"MIG_STRATEGY": "mixed"}, cli={"mig-strategy": "single"}).mig_strategy == "single"


def test_parse_cli_args_forms():
    argv = ["--mig-strategy=mixed", "--config-file", "/c/config.yaml", "-fail-on-init-error", "--unknown", "x", "positional"]
    assert parse_cli_args(argv) == {"mig-strategy": "mixed", "config-file": "/c/config.yaml", "fail-on-init-error": "true"}


def test_device_list_strategy_from_env_is_a_comma_list():
    assert parse_config(None, env={"DEVICE_LIST_STRATEGY": "envvar,cdi-annotations"}).device_list_strategy == ("envvar", "cdi-annotations")


# ---------------------------------------------------------------- refusals

@pytest.mark.parametrize("text, message", [
    ("version: v2", "unknown version"),
    ("flags: {migStrategy: half}", "unknown MIG strategy"),
    ("flags: {plugin: {deviceListStrategy: carrier-pigeon}}", "device-list-strategy"),
    ("flags: {plugin: {deviceIDStrategy: serial}}", "device-id-strategy"),
    ("sharing: {timeSlicing: {}}", "no resources specified"),
    ("sharing: {timeSlicing: {resources: []}}", "no resources specified"),
    ("sharing: {timeSlicing: null}", "no resources specified"),
    ("sharing: {timeSlicing: {resources: [{replicas: 2}]}}", "no resource name"),
    ("sharing: {timeSlicing: {resources: [{name: gpu}]}}", "no replicas"),
    ("sharing: {timeSlicing: {resources: [{name: gpu, replicas: 1}]}}", "replicas must be >= 2"),
    ("sharing: {timeSlicing: {resources: [{name: gpu, replicas: 0}]}}", "replicas must be >= 2"),
    ("sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2.5}]}}", "integer"),
    ("sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2, devices: some}]}}", "only valid string input is 'all'"),
    ("sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2, devices: 0}]}}", "must be > 0"),
    ("sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2, devices: [GPU-nope]}]}}", "unsupported type"),
    ("sharing: {timeSlicing: {resources: [{name: Bad_Name, replicas: 2}]}}", "incorrect format"),
    ("sharing: {timeSlicing: {resources: [{name: %s, replicas: 2}]}}" % ("x" * 60), "63 characters"),
    ("sharing: {mps: {resources: [{name: gpu, replicas: 1}]}}", "replicas must be >= 2"),
    ("[not, a, mapping]", "unmarshal error"),
    ("key: [unclosed", "unmarshal error"),
])
def test_invalid_configs_are_refused(text, message):
    with pytest.raises(PluginError, match=message):
        parse_config(text)


def test_mps_null_means_absent():
    assert parse_config("sharing: {mps: null}").sharing is None


def test_empty_file_is_the_default_config():
    assert parse_config("") == parse_config(None)


def test_resource_name_rules():
    assert resource_name("gpu") == "nvidia.com/gpu"
    assert resource_name("nvidia.com/mig-1g.10gb") == "nvidia.com/mig-1g.10gb"
    with pytest.raises(PluginError):
        resource_name("-gpu")


# ---------------------------------------------------------------- properties

@given(gpus=st.integers(min_value=0, max_value=16), replicas=st.integers(min_value=2, max_value=64), rename=st.booleans())
def test_time_slicing_total_is_gpus_times_replicas(gpus, replicas, rename):
    text = "sharing:\n  timeSlicing:\n    renameByDefault: %s\n    resources:\n    - name: nvidia.com/gpu\n      replicas: %d\n" % (
        str(rename).lower(), replicas)
    expected = {("nvidia.com/gpu.shared" if rename else "nvidia.com/gpu"): gpus * replicas} if gpus else {}
    assert adv(plain(gpus), text) == expected


@given(layout=st.lists(st.lists(st.sampled_from(["1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"]), min_size=1, max_size=7), min_size=1, max_size=8),
       plain_gpus=st.integers(min_value=0, max_value=4))
def test_mixed_counts_add_up_to_every_device(layout, plain_gpus):
    devices = [gpu(i, profiles) for i, profiles in enumerate(layout)] + [gpu(len(layout) + i) for i in range(plain_gpus)]
    result = adv(profile(*devices), env={"MIG_STRATEGY": "mixed"})
    assert sum(result.values()) == sum(len(p) for p in layout) + plain_gpus
    assert result.get("nvidia.com/gpu", 0) == plain_gpus


# ---------------------------------------------------------------- injected NVML errors (fake NVML profiles)

def with_errors(prof, errors, device=None, mig=None):
    target = prof if device is None else prof["devices"][device]
    if mig is not None:
        target = target["mig"]["devices"][mig]
    target["errors"] = errors
    return prof


@pytest.mark.parametrize("call, message", [("nvmlInit", "failed to initialize NVML"),
                                           ("nvmlInit_v2", "failed to initialize NVML"),
                                           ("nvmlInitWithFlags", "failed to initialize NVML"),
                                           ("nvmlDeviceGetCount_v2", "error getting device count")])
def test_nvml_init_failure_advertises_nothing(call, message):
    with pytest.raises(PluginError, match=message):
        adv(with_errors(plain(1), {call: "DRIVER_NOT_LOADED"}))


def test_lost_gpu_fails_the_whole_plugin():
    prof = with_errors(plain(2), {"nvmlDeviceGetHandleByIndex": "GPU_IS_LOST"}, device=1)
    with pytest.raises(PluginError, match="error getting device handle for index '1': GPU_IS_LOST"):
        adv(prof)


def test_top_level_device_error_applies_to_every_device():
    with pytest.raises(PluginError, match="device 0"):
        adv(with_errors(plain(2), {"nvmlDeviceGetUUID": "UNKNOWN"}))


@pytest.mark.parametrize("call", ["nvmlDeviceGetPersistenceMode", "nvmlDeviceGetSerial", "nvmlDeviceGetMemoryInfo_v2",
                                  "nvmlDeviceGetArchitecture", "nvmlDeviceGetAttributes"])
def test_calls_the_plugin_does_not_make_change_nothing(call):
    assert adv(with_errors(plain(1), {call: "NOT_SUPPORTED"}, device=0)) == {"nvidia.com/gpu": 1}


def test_system_calls_the_plugin_does_not_make_change_nothing():
    assert adv(with_errors(plain(1), {"nvmlSystemGetCudaDriverVersion_v2": "NOT_SUPPORTED"})) == {"nvidia.com/gpu": 1}


def test_mig_mode_not_supported_means_mig_off():
    prof = with_errors(profile(gpu(0, ["1g.10gb"] * 7)), {"nvmlDeviceGetMigMode": "NOT_SUPPORTED"}, device=0)
    assert adv(prof, env={"MIG_STRATEGY": "mixed"}) == {"nvidia.com/gpu": 1}


def test_mig_mode_other_error_fails():
    with pytest.raises(PluginError, match="error getting MIG mode: UNKNOWN"):
        adv(with_errors(plain(1), {"nvmlDeviceGetMigMode": "UNKNOWN"}, device=0))


def test_mig_device_error_matters_only_when_mig_devices_are_used():
    prof = with_errors(profile(gpu(0, ["1g.10gb", "1g.10gb"])), {"nvmlDeviceGetAttributes_v2": "UNKNOWN"}, device=0, mig=1)
    assert adv(prof) == {"nvidia.com/gpu": 1}
    with pytest.raises(PluginError, match=r"MIG device at index '\(0, 1\)': UNKNOWN"):
        adv(prof, env={"MIG_STRATEGY": "mixed"})


@pytest.mark.parametrize("disable, enable, all_off, off, on", [
    ("", "", False, [13, 31, 43, 45, 68, 109], [48, 79, 94]),
    ("all", "", True, [79, 48, 13], []),
    ("xids", "", True, [79], []),
    ("0", "", True, [79], []),  # XID 0 is the plugin's "all"
    ("48, 63,not-a-number,", "", False, [48, 63, 13], [79]),
    ("48", "48,43", False, [13], [48, 43, 79]),  # enabled wins over disabled, and over the built-in list
    # v0.20.0: IsAllDisabled looks at "all" only, so the check does not run at all, though IsDisabled(79) says no
    ("all", "79", True, [48], [79]),
    ("", "all", False, [], [13, 43, 79]),  # DP_ENABLE_HEALTHCHECKS=all: nothing ignored
])
def test_health_check_xids_are_read_as_the_plugin_reads_its_environment(disable, enable, all_off, off, on):
    from sandbox.k8s.devsim.rules import health_checks
    health = health_checks({"DP_DISABLE_HEALTHCHECKS": disable, "DP_ENABLE_HEALTHCHECKS": enable})
    assert health.all_disabled() is all_off
    assert [x for x in off if not health.disabled(x)] == []
    assert [x for x in on if health.disabled(x)] == []


def test_no_health_check_runs_when_every_xid_is_disabled_even_with_enabled_ones():
    from sandbox.k8s.devsim.rules import unhealthy_devices
    prof = plain(2)
    prof["devices"][1]["xid_events"] = [{"xid": 79}]
    assert unhealthy_devices(prof, parse_config(None)) == {"nvidia.com/gpu": 1}
    assert unhealthy_devices(prof, parse_config(None, {"DP_DISABLE_HEALTHCHECKS": "all",
                                                       "DP_ENABLE_HEALTHCHECKS": "79"})) == {}
    assert unhealthy_devices(prof, parse_config(None, {"DP_DISABLE_HEALTHCHECKS": "79"})) == {}
