# SPDX-License-Identifier: GPL-3.0-or-later
"""Small GPU profiles (the fake NVML's JSON format, valid for its loader) built in code for tests.

MIG devices come from a catalog of real profiles (A100 80GB and H100 80GB values as `nvidia-smi mig -lgip` lists
them; the same numbers as sandbox/profiles/a100x8-mig-mixed.json): slices, memory, SMs and engines, and the NVML GPU
and compute instance profile constants where they are not the plain `<n>_SLICE` ones.
"""

# name of the catalog entry -> fields of a MIG device (gpu_instance_profile 7 is 1_SLICE_REV1, the +me profile)
A100_MIG = {
    "1g.10gb": dict(gpu_instance_slices=1, compute_instance_slices=1, memory_mib=9728, multiprocessor_count=14,
                    copy_engine_count=1),
    "1g.10gb+me": dict(gpu_instance_slices=1, compute_instance_slices=1, memory_mib=9728, multiprocessor_count=14,
                       copy_engine_count=1, decoder_count=1, jpeg_count=1, ofa_count=1, gpu_instance_profile=7),
    "2g.20gb": dict(gpu_instance_slices=2, compute_instance_slices=2, memory_mib=19968, multiprocessor_count=28,
                    copy_engine_count=2, decoder_count=1),
    "1c.2g.20gb": dict(gpu_instance_slices=2, compute_instance_slices=1, memory_mib=19968, multiprocessor_count=14,
                       copy_engine_count=2, decoder_count=1),
    "3g.40gb": dict(gpu_instance_slices=3, compute_instance_slices=3, memory_mib=40192, multiprocessor_count=42,
                    copy_engine_count=3, decoder_count=2),
    "7g.80gb": dict(gpu_instance_slices=7, compute_instance_slices=7, memory_mib=80896, multiprocessor_count=98,
                    copy_engine_count=7, decoder_count=5, jpeg_count=1, ofa_count=1),
}
A100 = dict(name="NVIDIA A100-SXM4-80GB", memory_total_mib=81920, compute_capability="8.0", architecture="ampere",
            pci_device_id="0x20B210DE", multiprocessor_count=108, mig_catalog=A100_MIG)
# H100 80GB HBM3 (81559 MiB): a 1g.10gb has 16 SMs and 9856 MiB, so it is another MIG device type than the A100's
H100_MIG = {
    "1g.10gb": dict(gpu_instance_slices=1, compute_instance_slices=1, memory_mib=9856, multiprocessor_count=16,
                    copy_engine_count=1, decoder_count=1, jpeg_count=1),
    "2g.20gb": dict(gpu_instance_slices=2, compute_instance_slices=2, memory_mib=20096, multiprocessor_count=32,
                    copy_engine_count=2, decoder_count=2, jpeg_count=2),
}
H100 = dict(name="NVIDIA H100 80GB HBM3", memory_total_mib=81559, compute_capability="9.0", architecture="hopper",
            pci_device_id="0x233010DE", multiprocessor_count=132, mig_catalog=H100_MIG)
V100 = dict(name="Tesla V100-PCIE-16GB", memory_total_mib=16160, compute_capability="7.0", architecture="volta",
            pci_device_id="0x1DB410DE", multiprocessor_count=80, mig_catalog=None)


def _uuid(prefix, a, b=0):
    return "%s-%08x-0000-4000-8000-%012x" % (prefix, a, b)


def gpu(index, mig_profiles=None, mig_current=True, model=None, errors=None):
    """One GPU of ``model``; ``mig_profiles`` (catalog names) lists its MIG devices when MIG mode is on, ``[]`` for
    MIG on and empty; ``None`` for MIG capable and off (or not capable, for a model without a catalog). ``model``:
    A100 when omitted."""
    model = model or A100
    device = {
        "name": model["name"], "uuid": _uuid("GPU", index), "pci_bus_id": "00000000:%02X:00.0" % (0x10 + index),
        "pci_device_id": model["pci_device_id"], "memory_total_mib": model["memory_total_mib"],
        "compute_capability": model["compute_capability"], "architecture": model["architecture"], "brand": "nvidia",
        "minor_number": index, "multiprocessor_count": model["multiprocessor_count"],
    }
    if errors:
        device["errors"] = dict(errors)
    if model["mig_catalog"] is not None:
        current = mig_profiles is not None and mig_current
        device["mig"] = {"capable": True, "current": current, "pending": current, "devices": []}
        for slot, name in enumerate(mig_profiles or [] if current else []):
            entry = {"uuid": _uuid("MIG", index, slot + 1), "profile": name,
                     "gpu_instance_id": slot + 1, "compute_instance_id": 0}
            entry.update(model["mig_catalog"][name])
            device["mig"]["devices"].append(entry)
    return device


def profile(*devices, **top):
    """Return a profile holding ``devices`` (``errors`` and the like as keywords)."""
    out = {"driver_version": "550.54.15", "cuda_driver_version": 12040, "devices": list(devices)}
    out.update(top)
    return out


def plain(count, model=None):
    """Return a profile of ``count`` GPUs without MIG."""
    return profile(*[gpu(i, model=model or V100) for i in range(count)])
