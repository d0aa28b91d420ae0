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


# A MIG profile name as go-nvlib reads one (pkg/nvlib/device/mig_profile.go, parseMigProfile, the reader mig-parted
# checks its config files with since v0.5.2, pkg/types/mig_profile.go AssertValidMigProfileFormat): "[<c>c.]<g>g.<gb>gb"
# then optionally "+" (attributes) or "-" (negative attributes) and a comma-separated list of attribute words. Any whole
# number is a slice count or size here; whether a GPU has the profile is the GPU's to say.
_DIGITS = re.compile(r"[0-9]+\Z")
_ATTRIBUTE_CHARACTERS = re.compile(r"[A-Za-z0-9.]+\Z")
_INT_MAX = (1 << 63) - 1  # strconv.Atoi on a 64-bit platform
_FIELD_UNITS = {3: ("c", "g", "gb"), 2: ("g", "gb")}


def _profile_field(text, unit):
    if text.strip() != text:
        raise ValueError("spaces around %r" % text)
    if not text.endswith(unit):
        raise ValueError("%r does not end in %r" % (text, unit))
    number = text[:-len(unit)]
    if not _DIGITS.match(number) or int(number) > _INT_MAX:
        raise ValueError("%r is not a whole number before %r" % (text, unit))
    return int(number)


def _profile_attributes(text):
    words = text.split(",")
    for word in words:
        if not word:
            raise ValueError("an empty attribute")
        if words.count(word) > 1:
            raise ValueError("the attribute %r twice" % word)
        if word.strip() != word:
            raise ValueError("spaces around the attribute %r" % word)
        if word[0] in "0123456789." or word[-1] == ".":
            raise ValueError("the attribute %r starts with a digit or a dot, or ends with a dot" % word)
        if not _ATTRIBUTE_CHARACTERS.match(word):
            raise ValueError("the attribute %r has a character other than letters, digits and dots" % word)
    return tuple(words)


def parse_mig_profile(name):
    """``(c, g, gb, attributes, negative attributes)`` of a MIG profile name read as go-nvlib reads it (``c`` is ``g``
    when the name has no ``<c>c.`` part; the attributes are a tuple of words, in the name's order). Raises ValueError
    saying what is wrong, for a name mig-parted refuses when it reads a config file."""
    if not isinstance(name, str) or not name:
        raise ValueError("a MIG profile name is not empty text")
    if "+" in name and "-" in name:
        raise ValueError("%r has both + and - attributes" % name)
    sign = "+" if "+" in name else "-" if "-" in name else ""
    base, _sep, attributes = name.partition(sign) if sign else (name, "", "")
    fields = base.split(".", 2)
    if len(fields) not in _FIELD_UNITS:
        raise ValueError("%r is not [<c>c.]<g>g.<gb>gb" % name)
    try:
        values = [_profile_field(text, unit) for text, unit in zip(fields, _FIELD_UNITS[len(fields)])]
        words = _profile_attributes(attributes) if sign else ()
    except ValueError as exc:
        raise ValueError("%r is not [<c>c.]<g>g.<gb>gb[+<attribute>,...|-<attribute>,...]: %s" % (name, exc))
    if len(values) == 2:
        values.insert(0, values[0])
    c, g, gb = values
    return (c, g, gb, words, ()) if sign != "-" else (c, g, gb, (), words)


def mig_profile_key(name):
    """What makes two MIG profile names the same profile for go-nvlib (MigProfileInfo.Matches): the slices, the size
    and the attributes in any order, so ``1c.1g.10gb`` is ``1g.10gb``; ``None`` for a name it cannot read."""
    try:
        c, g, gb, attributes, negative = parse_mig_profile(name)
    except ValueError:
        return None
    return c, g, gb, tuple(sorted(attributes)), tuple(sorted(negative))


def mig_profile_parts(profile):
    """``(c, g, gb, attributes)`` of a profile name (``c`` equals ``g`` when the name has no ``<c>c.`` part;
    ``attributes`` the name's ``+...`` or ``-...`` suffix, or ``""``), or ``None`` for text that is not a profile name
    (:func:`parse_mig_profile`)."""
    try:
        c, g, gb, attributes, negative = parse_mig_profile(profile)
    except ValueError:
        return None
    suffix = ("+" + ",".join(attributes)) if attributes else ("-" + ",".join(negative)) if negative else ""
    return c, g, gb, suffix


def parse_version(text):
    """Split a driver version such as ``510.47.03`` into a tuple of integers for comparison.

    Raises ``ValueError`` with the offending text when it is not dotted numbers.
    """
    text = str(text).strip()
    if not re.match(r"^\d+(\.\d+)*$", text):
        raise ValueError("%r is not a version made of dotted numbers such as 470.82.01" % (text,))
    return tuple(int(part) for part in text.split("."))
