# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""Pure functions that turn raw NVML values into the names NVIDIA's tools use (family, product slug, MIG profile).

Nothing here talks to NVML, the kernel or the network, so every function is unit-tested directly.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# GPU feature discovery's family names by CUDA compute capability (major, minor) (k8s-device-plugin internal/lm).
_FAMILY_BY_MAJOR = {
    1: "tesla",
    2: "fermi",
    3: "kepler",
    5: "maxwell",
    6: "pascal",
    9: "hopper",
    10: "blackwell",
    12: "blackwell",
}

# NVML's nvmlDeviceArchitecture_t values, used when the compute capability is not available.
_FAMILY_BY_NVML_ARCH = {
    2: "kepler",
    3: "maxwell",
    4: "pascal",
    5: "volta",
    6: "turing",
    7: "ampere",
    8: "ada-lovelace",
    9: "hopper",
    10: "blackwell",
    13: "rubin",
}

_LABEL_VALUE_MAX = 63


def architecture_family(compute_capability=None, nvml_architecture=None):
    """Return the GPU family name (volta, ampere, hopper, ...) or ``None`` when unknown.

    ``compute_capability`` is a ``(major, minor)`` pair; it wins because GPU feature discovery names
    families from it. ``nvml_architecture`` is NVML's architecture enum, the fallback.
    """
    if compute_capability is not None:
        major, minor = compute_capability
        if major == 7:
            return "volta" if minor < 5 else "turing"
        if major == 8:
            return "ada-lovelace" if minor >= 9 else "ampere"
        family = _FAMILY_BY_MAJOR.get(major)
        if family:
            return family
    if nvml_architecture is not None:
        return _FAMILY_BY_NVML_ARCH.get(nvml_architecture)
    return None


def product_slug(name):
    """Turn an NVML product name into a label-safe slug: ``Tesla V100-PCIE-16GB`` -> ``nvidia-tesla-v100-pcie-16gb``.

    The result is a valid Kubernetes label value: at most 63 characters of ``[a-z0-9-]``, starting and ending
    with an alphanumeric character.
    """
    slug = re.sub(r"[^a-z0-9]+", "-", (name or "").lower()).strip("-")
    if not slug:
        return "nvidia-unknown"
    if not slug.startswith("nvidia-"):
        slug = "nvidia-" + slug
    return slug[:_LABEL_VALUE_MAX].rstrip("-")


def cuda_version_string(value):
    """NVML reports the CUDA driver version as an integer (12040); return ``"12.4"``."""
    if value is None:
        return None
    value = int(value)
    return "%d.%d" % (value // 1000, (value % 1000) // 10)


def mig_profile_name(gpu_instance_slices, compute_instance_slices, memory_mib, total_memory_mib):
    """Name a MIG device the way nvidia-smi and the device plugin do: ``1g.10gb``, or ``1c.2g.20gb``.

    The memory part is not the slice's own memory rounded: NVIDIA takes the slice's share of the whole GPU's memory,
    rounds it up to eighths, and multiplies by the GPU's memory in whole GiB (rounded up). An A100-80GB (81920 MiB)
    has 9856 MiB in a 1g slice (share 0.12 -> 1/8 -> ``10gb``) and 80896 MiB in a 7g slice (-> 8/8 -> ``80gb``).
    """
    total_gib = (int(total_memory_mib) + 1023) // 1024
    eighths = -(-int(memory_mib) * 8 // int(total_memory_mib))  # ceiling division
    gib = int(round(eighths * total_gib / 8.0))
    if compute_instance_slices and compute_instance_slices != gpu_instance_slices:
        return "%dc.%dg.%dgb" % (compute_instance_slices, gpu_instance_slices, gib)
    return "%dg.%dgb" % (gpu_instance_slices, gib)


def parse_version(text):
    """Split a driver version such as ``510.47.03`` into a tuple of integers for comparison.

    Raises ``ValueError`` with the offending text when it is not dotted numbers.
    """
    text = str(text).strip()
    if not re.match(r"^\d+(\.\d+)*$", text):
        raise ValueError("%r is not a version made of dotted numbers such as 470.82.01" % (text,))
    return tuple(int(part) for part in text.split("."))
