# SPDX-License-Identifier: GPL-3.0-or-later
"""The device plugin's XID health checks: the health_checks option, the environment it gives the plugin, and which
devices the plugin marks unhealthy (k8s-device-plugin v0.20.0 internal/rm/health.go)."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import OptionError
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import allocatable, health, plugin_config


@pytest.mark.parametrize("option, env", [
    (None, []),
    ({}, []),
    ({"enabled": False}, [{"name": "DP_DISABLE_HEALTHCHECKS", "value": "all"}]),
    ({"ignore_xids": [79, 48, 48]}, [{"name": "DP_DISABLE_HEALTHCHECKS", "value": "48,79"}]),
    ({"check_xids": [43]}, [{"name": "DP_ENABLE_HEALTHCHECKS", "value": "43"}]),
])
def test_the_option_becomes_the_plugins_environment(option, env):
    assert health.env(option) == env


@pytest.mark.parametrize("option, field, words", [
    ({"ignore_xids": [0]}, "health_checks.ignore_xids", "every XID"),
    ({"check_xids": [-3]}, "health_checks.check_xids", "not an XID"),
    ({"enabled": False, "check_xids": [79]}, "health_checks.check_xids", "checks no XID at all"),
    ({"ignore_xids": [79], "check_xids": [79]}, "health_checks", "both"),
])
def test_what_the_plugin_would_not_do_as_written_is_refused(option, field, words):
    with pytest.raises(OptionError) as caught:
        health.settings(option)
    assert caught.value.option == field and words in caught.value.message
    with pytest.raises(OptionError):
        plugin_config.validate({"health_checks": option})  # before any API call


def t4(index, *xids, **returns):
    return {"index": index, "name": "Tesla T4", "uuid": "GPU-%d" % index, "compute_capability": "7.5",
            "mig": {"capable": False, "current": False, "devices": []}, "nvml_returns": dict(returns),
            "xid_events": [{"xid": x, "gpu_instance_id": None, "compute_instance_id": None} for x in xids]}


def fact(*devices, **returns):
    return {"present": True, "count": len(devices), "devices": list(devices), "nvml_returns": dict(returns)}


@pytest.mark.parametrize("node, option, want", [
    (fact(t4(0), t4(1, 79)), None, {"nvidia.com/gpu": 1}),
    (fact(t4(0, 13), t4(1, 31, 43, 45, 68, 109)), None, {"nvidia.com/gpu": 2}),  # application errors
    (fact(t4(0), t4(1, 79)), {"enabled": False}, {"nvidia.com/gpu": 2}),
    (fact(t4(0), t4(1, 79)), {"ignore_xids": [79]}, {"nvidia.com/gpu": 2}),
    (fact(t4(0, 43), t4(1)), {"check_xids": [43]}, {"nvidia.com/gpu": 1}),
    (fact(t4(0, nvmlDeviceRegisterEvents="UNKNOWN"), t4(1)), None, {"nvidia.com/gpu": 1}),
    (fact(t4(0, nvmlDeviceGetSupportedEventTypes="UNKNOWN"), t4(1)), None, {"nvidia.com/gpu": 1}),
    (fact(t4(0), t4(1), nvmlEventSetWait="UNKNOWN"), None, {"nvidia.com/gpu": 0}),  # every device
    (fact(t4(0), t4(1, 79), nvmlEventSetCreate="UNKNOWN"), None, {"nvidia.com/gpu": 2}),  # no check at all
])
def test_unhealthy_devices_leave_allocatable(node, option, want):
    assert allocatable.expected_from_fact(plugin_config.build_config({}), node, "n", option) == want


def test_one_replica_of_a_gpu_goes_per_xid_as_in_v0_20_0():
    """parentToDeviceMap keeps one device per GPU UUID, so replicas overwrite each other (issue #1929)."""
    config = plugin_config.build_config({"sharing": {"strategy": "time-slicing", "replicas": 4}})
    assert allocatable.expected_from_fact(config, fact(t4(0), t4(1, 79, 48)), "n") == {"nvidia.com/gpu": 7}
    renamed = plugin_config.build_config({"sharing": {"strategy": "time-slicing", "replicas": 4,
                                                      "rename_by_default": True}})
    assert allocatable.expected_from_fact(renamed, fact(t4(0, 79)), "n") == {"nvidia.com/gpu.shared": 3}
