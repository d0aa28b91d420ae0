# SPDX-License-Identifier: GPL-3.0-or-later
"""Print, as one JSON document, what the real NVML says of each GPU's MIG geometry, through read-only calls only.

Run on a machine with a real NVIDIA GPU (tests/realgpu/record.sh). Nothing here changes the GPU: no MIG mode switch,
no instance created or destroyed. Recorded per GPU:
- ``mig_mode``: current and pending, or the NVML error;
- ``virtualization_mode``: ``nvmlDeviceGetVirtualizationMode`` (1: passed through to a VM, where a MIG mode switch
  waits for a reboot; 0: bare metal), or the NVML error;
- ``gpu_instance_profiles``: for every GPU instance profile constant, NVML's version-1 info (what go-nvlib and our
  reader call) and the versioned info's ``name`` (NVML's own name for the profile, ``MIG 1g.18gb``), or the error;
- ``possible_placements``: per profile id, what ``nvmlDeviceGetGpuInstancePossiblePlacements`` offers;
- ``profile_table``: the collection's own table (``mig_apply.profile_table``), which names what a config may ask for.
"""

import json
import sys

import pynvml

from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import mig_apply, naming

INFO_FIELDS = ("id", "isP2pSupported", "sliceCount", "instanceCount", "multiprocessorCount", "copyEngineCount",
               "decoderCount", "encoderCount", "jpegCount", "ofaCount", "memorySizeMB")


def error(exc):
    return {"error": type(exc).__name__}


def plain(value):
    return value.decode() if isinstance(value, bytes) else value


def gpu(index):
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    out = {"index": index, "name": plain(pynvml.nvmlDeviceGetName(handle))}
    total = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
    out["memory_total_bytes"] = total
    try:
        out["virtualization_mode"] = int(pynvml.nvmlDeviceGetVirtualizationMode(handle))
    except pynvml.NVMLError as exc:
        out["virtualization_mode"] = error(exc)
    try:
        out["mig_mode"] = list(pynvml.nvmlDeviceGetMigMode(handle))
    except pynvml.NVMLError as exc:
        out["mig_mode"] = error(exc)
        return out
    profiles = {}
    for constant in range(naming.GPU_INSTANCE_PROFILE_COUNT):
        entry = {}
        try:
            info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, constant, 1)
            entry["v1"] = {name: int(getattr(info, name)) for name in INFO_FIELDS}
        except pynvml.NVMLError as exc:
            entry["v1"] = error(exc)
        try:
            info = pynvml.nvmlDeviceGetGpuInstanceProfileInfoV(handle, constant)
            entry["name"] = plain(info.name)
        except (pynvml.NVMLError, AttributeError) as exc:
            entry["name"] = {"error": type(exc).__name__}
        profiles[str(constant)] = entry
    out["gpu_instance_profiles"] = profiles
    placements = {}
    for constant, entry in profiles.items():
        if "error" in entry["v1"]:
            continue
        gi_id = entry["v1"]["id"]
        try:
            found = mig_apply._possible_placements(pynvml, handle, gi_id)  # pylint: disable=protected-access
        except pynvml.NVMLError as exc:
            found = error(exc)
        placements[str(gi_id)] = found
    out["possible_placements"] = placements
    try:
        out["profile_table"] = mig_apply.profile_table(pynvml, handle, total)
    except pynvml.NVMLError as exc:
        out["profile_table"] = error(exc)
    return out


def main():
    pynvml.nvmlInit()
    try:
        report = {"driver_version": plain(pynvml.nvmlSystemGetDriverVersion()),
                  "gpus": [gpu(i) for i in range(pynvml.nvmlDeviceGetCount())]}
    finally:
        pynvml.nvmlShutdown()
    json.dump(report, sys.stdout, sort_keys=True, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
