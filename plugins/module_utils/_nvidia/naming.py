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

import math
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


# MIG profile naming, as go-nvlib names a MIG device for the device plugin and GPU feature discovery (go-nvlib
# pkg/nvlib/device/mig_profile.go NewMigProfile and String, mig_device.go GetProfile; v0.13.0, read from the Go
# module). NVML's profile constants (nvml.h, as go-nvml pkg/nvml/const.go and pynvml spell them) map to slices and
# attributes; "1c.2g.20gb" when the compute instance is smaller than its GPU instance.
GPU_INSTANCE_PROFILE_COUNT = 18
COMPUTE_INSTANCE_PROFILE_COUNT = 9
COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT = 1
# NVML_GPU_INSTANCE_PROFILE_* -> (slices, attributes, negative attributes); constants go-nvlib does not know are absent
_GPU_INSTANCE_PROFILES = {
    0: (1, (), ()), 1: (2, (), ()), 2: (3, (), ()), 3: (4, (), ()), 4: (7, (), ()), 5: (8, (), ()), 6: (6, (), ()),
    7: (1, ("me",), ()),        # 1_SLICE_REV1: 1g.10gb+me
    8: (2, ("me",), ()),        # 2_SLICE_REV1
    9: (1, (), ()),             # 1_SLICE_REV2: 1g.20gb
    10: (1, ("gfx",), ()), 11: (2, ("gfx",), ()), 12: (4, ("gfx",), ()),
    13: (1, (), ("me",)), 14: (2, (), ("me",)),            # *_NO_ME: 1g.24gb-me
    15: (1, ("me.all",), ()), 16: (2, ("me.all",), ()),    # *_ALL_ME
}
# NVML_COMPUTE_INSTANCE_PROFILE_* -> slices
_COMPUTE_INSTANCE_PROFILES = {0: 1, 1: 2, 2: 3, 3: 4, 4: 7, 5: 8, 6: 6, 7: 1, 8: 7}


def gpu_instance_slices(gpu_instance_profile):
    """Slices of an NVML GPU instance profile constant, or ``None`` for one go-nvlib does not know."""
    entry = _GPU_INSTANCE_PROFILES.get(gpu_instance_profile)
    return entry[0] if entry else None


def mig_memory_gb(memory_mib, total_memory_bytes):
    """The ``<n>gb`` of a MIG profile: the instance's share of the GPU's memory rounded up to eighths, times the
    GPU's memory in whole GiB rounded up, rounded half away from zero (go-nvlib getMigMemorySizeGB)."""
    total_gib = (int(total_memory_bytes) + (1 << 30) - 1) >> 30
    share = math.ceil(int(memory_mib) * (1 << 20) / float(total_memory_bytes) * 8) / 8.0
    return int(math.floor(share * total_gib + 0.5))


def mig_profile_name(gpu_instance_profile, compute_instance_profile, memory_mib, total_memory_bytes):
    """Name a MIG device the way go-nvlib does (``1g.10gb``, ``1g.10gb+me``, ``1c.2g.20gb``, ``1g.24gb-me``) from its
    GPU and compute instance profile constants, its memory (``memorySizeMB`` of its attributes) and the whole GPU's
    memory in bytes. Raises ValueError for a constant go-nvlib refuses ("invalid GPU Instance Profile ID")."""
    if gpu_instance_profile not in _GPU_INSTANCE_PROFILES:
        raise ValueError("invalid GPU Instance Profile ID: %s" % gpu_instance_profile)
    if compute_instance_profile not in _COMPUTE_INSTANCE_PROFILES:
        raise ValueError("invalid Compute Instance Profile ID: %s" % compute_instance_profile)
    g, attributes, negative = _GPU_INSTANCE_PROFILES[gpu_instance_profile]
    c = _COMPUTE_INSTANCE_PROFILES[compute_instance_profile]
    suffix = ""
    if attributes:
        suffix = "+" + ",".join(attributes)
    if negative:
        suffix = "-" + ",".join(negative)
    gb = mig_memory_gb(memory_mib, total_memory_bytes)
    if c == g:
        return "%dg.%dgb%s" % (g, gb, suffix)
    return "%dc.%dg.%dgb%s" % (c, g, gb, suffix)


_PROFILE = re.compile(r"^(?:(?P<c>[0-9]+)c\.)?(?P<g>[0-9]+)g\.(?P<gb>[0-9]+)gb(?P<attrs>[+-].+)?$")


def mig_profile_parts(profile):
    """``(c, g, gb, attributes)`` of a profile name (``c`` equals ``g`` when the name has no ``<c>c.`` part), or
    ``None`` for text that is not a profile name."""
    match = _PROFILE.match(profile or "")
    if not match:
        return None
    g = int(match.group("g"))
    c = int(match.group("c")) if match.group("c") else g
    return c, g, int(match.group("gb")), match.group("attrs") or ""


def parse_version(text):
    """Split a driver version such as ``510.47.03`` into a tuple of integers for comparison.

    Raises ``ValueError`` with the offending text when it is not dotted numbers.
    """
    text = str(text).strip()
    if not re.match(r"^\d+(\.\d+)*$", text):
        raise ValueError("%r is not a version made of dotted numbers such as 470.82.01" % (text,))
    return tuple(int(part) for part in text.split("."))
