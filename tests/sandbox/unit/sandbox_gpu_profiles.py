# SPDX-License-Identifier: GPL-3.0-or-later
"""Small GPU profiles (the fake NVML's JSON format) built in code for unit tests."""


def gpu(index, mig_profiles=None, mig_current=True, name="NVIDIA A100-SXM4-80GB"):
    """Return one device; ``mig_profiles`` lists the MIG devices when MIG mode is on."""
    device = {"name": name, "uuid": "GPU-00000000-0000-0000-0000-%012d" % index, "memory_total_mib": 81920, "compute_capability": "8.0"}
    if mig_profiles is not None:
        device["mig"] = {
            "capable": True,
            "current": mig_current,
            "pending": mig_current,
            "devices": [{"uuid": "MIG-%08d-0000-0000-0000-%012d" % (index, j), "profile": p, "memory_mib": 9856}
                        for j, p in enumerate(mig_profiles)],
        }
    return device


def profile(*devices):
    """Return a profile holding ``devices``."""
    return {"driver_version": "550.54.15", "cuda_driver_version": 12040, "devices": list(devices)}


def plain(count, name="Tesla V100-PCIE-16GB"):
    """Return a profile of ``count`` GPUs without MIG."""
    return profile(*[gpu(i, name=name) for i in range(count)])
