# SPDX-License-Identifier: GPL-3.0-or-later
"""Which shipped GPU profiles are the fake NVML's: a profile with a ``vendor`` (AMD, Intel: sandbox/profiles/
mi210x2.json...) says what a node's sysfs shows and no NVML reads it (sandbox/images/vendor_profiles.py). Tests that
feed every profile to the fake NVML take theirs through :func:`params`, which skips the others with the reason."""

import json
import os

import pytest


def vendor(path):
    """The ``vendor`` of the profile file at ``path``; ``nvidia`` without one (or when it cannot be read: the NVML
    checks then report that)."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return "nvidia"
    return data.get("vendor", "nvidia") if isinstance(data, dict) else "nvidia"


def is_nvml_profile(path):
    """Whether the fake NVML reads the profile at ``path``."""
    return vendor(path) == "nvidia"


def params(values, path_of=lambda value: value, ids=None):
    """``values`` for ``pytest.mark.parametrize``, those whose profile is not an NVML one skipped with the reason."""
    out = []
    for value in values:
        path = str(path_of(value))
        marks = () if is_nvml_profile(path) else pytest.mark.skip(
            reason="%s has vendor %s: a sysfs-only profile, which no NVML reads (tests/sandbox/test_amd_intel_nodes.py "
                   "and the _amd/_intel unit tests cover it)" % (os.path.basename(path), vendor(path)))
        out.append(pytest.param(value, marks=marks, id=ids(value) if ids else None))
    return out
