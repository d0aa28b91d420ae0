# SPDX-License-Identifier: GPL-3.0-or-later
"""gpu_facts end to end: `ansible localhost -m kubegpu.cluster.gpu_facts` with the real pynvml loading the fake
NVML library, once per shipped GPU profile, compared field by field with the profile file."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

import pytest

import nvml_profiles
from ansible_cli import run_module

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROFILES = os.path.join(ROOT, "sandbox", "profiles")


def gpu_facts(env_extra):
    code, result = run_module("kubegpu.cluster.gpu_facts", env=env_extra)
    assert code == 0, result
    return result["ansible_facts"]["gpu"]


def _profiles():
    return sorted(name[:-5] for name in os.listdir(PROFILES) if name.endswith(".json"))


def _load(name):
    with open(os.path.join(PROFILES, name + ".json")) as handle:
        return json.load(handle)


@pytest.mark.parametrize("name", nvml_profiles.params(
    [n for n in _profiles() if "nvmlInit" not in _load(n).get("errors", {})], lambda n: os.path.join(PROFILES, n + ".json")))
def test_every_profile_is_reported_as_written(fake_nvml_dir, name):
    profile = _load(name)
    gpu = gpu_facts({"LD_LIBRARY_PATH": str(fake_nvml_dir), "FAKE_NVML_PROFILE": os.path.join(PROFILES, name + ".json")})
    assert gpu["nvml"]["status"] == "ok"
    assert gpu["present"] is True
    assert gpu["driver_version"] == profile["driver_version"]
    assert gpu["nvml_version"] == profile["nvml_version"]
    cuda = profile["cuda_driver_version"]
    if "cuda" not in json.dumps(profile.get("errors", {})).lower():
        assert gpu["cuda_driver_version"] == "%d.%d" % (cuda // 1000, (cuda % 1000) // 10)
    assert gpu["count"] == len(profile["devices"])
    for got, want in zip(gpu["devices"], profile["devices"]):
        broken = set(want.get("errors", {}))
        if "nvmlDeviceGetHandleByIndex" in broken:
            assert got["healthy"] is False and "handle" in got["errors"]
            assert got["nvml_returns"] == {"nvmlDeviceGetHandleByIndex": want["errors"]["nvmlDeviceGetHandleByIndex"]}
            continue
        assert got["healthy"] is True
        assert (got["name"], got["uuid"]) == (want["name"], want["uuid"])
        # the name without a version affects every version; gpu_facts reads version 1 (go-nvml's GetMemoryInfo too)
        memory_broken = [c for c in broken if c == "nvmlDeviceGetMemoryInfo"]
        if memory_broken:
            # every NVML call that did not answer is reported by name, with its code, for the plugin's rules
            assert got["memory_total_mib"] is None
            assert got["nvml_returns"]["nvmlDeviceGetMemoryInfo"] == want["errors"][memory_broken[0]]
        else:
            assert got["memory_total_mib"] == want["memory_total_mib"]
        if "nvmlDeviceGetCudaComputeCapability" in broken:
            assert got["nvml_returns"]["nvmlDeviceGetCudaComputeCapability"] == \
                want["errors"]["nvmlDeviceGetCudaComputeCapability"]
        assert got["pci_bus_id"] == want["pci_bus_id"]
        if "nvmlDeviceGetCudaComputeCapability" not in broken:
            assert got["compute_capability"] == want["compute_capability"]
        if "nvmlDeviceGetPersistenceMode" in broken:
            assert got["persistence_mode"] is None
        else:
            assert got["persistence_mode"] == want["persistence_mode"]
        mig = want.get("mig")
        if mig and "nvmlDeviceGetMigMode" not in broken:
            assert got["mig"]["capable"] is True
            assert (got["mig"]["current"], got["mig"]["pending"]) == (mig["current"], mig["pending"])
            wanted = mig.get("devices", []) if mig["current"] else []
            assert [(m["uuid"], m["profile"], m["memory_mib"]) for m in got["mig"]["devices"]] == \
                [(m["uuid"], m["profile"], m["memory_mib"]) for m in wanted]
        else:
            assert got["mig"] == {"capable": False, "current": False, "pending": False, "profiles": [], "devices": []}


def test_v100_slug_and_architecture(fake_nvml_dir):
    gpu = gpu_facts({"LD_LIBRARY_PATH": str(fake_nvml_dir), "FAKE_NVML_PROFILE": os.path.join(PROFILES, "v100x4.json")})
    assert {d["product_slug"] for d in gpu["devices"]} == {"nvidia-tesla-v100-pcie-16gb"}
    assert {d["architecture"] for d in gpu["devices"]} == {"volta"}
    assert gpu["cuda_driver_version"] == "11.6"


@pytest.mark.parametrize("profile, status", [
    ("failure-no-permission", "no_permission"),
    ("failure-driver-not-loaded", "driver_not_loaded"),
])
def test_init_failures_are_reported_not_raised(fake_nvml_dir, profile, status):
    gpu = gpu_facts({"LD_LIBRARY_PATH": str(fake_nvml_dir), "FAKE_NVML_PROFILE": os.path.join(PROFILES, profile + ".json")})
    assert gpu["nvml"]["status"] == status
    assert gpu["count"] == 0 and gpu["devices"] == []


def test_malformed_profile_is_one_clear_error(fake_nvml_dir):
    bad = os.path.join(ROOT, "tests", "fixtures", "profiles", "malformed.json")
    gpu = gpu_facts({"LD_LIBRARY_PATH": str(fake_nvml_dir), "FAKE_NVML_PROFILE": bad})
    assert gpu["nvml"]["status"] == "error"
    assert bad in gpu["nvml"]["message"] and "\n" not in gpu["nvml"]["message"]


def test_no_library_means_library_not_found():
    gpu = gpu_facts({})
    assert gpu["nvml"]["status"] == "library_not_found"
    assert gpu["present"] is False
