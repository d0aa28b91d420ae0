# SPDX-License-Identifier: GPL-3.0-or-later
"""Which shipped GPU profiles are the fake NVML's: a profile with a ``vendor`` (AMD, Intel: sandbox/profiles/
mi210x2.json...) says what a node's sysfs shows and no NVML reads it (sandbox/images/vendor_profiles.py). Tests that
feed every profile to the fake NVML take theirs through :func:`params`, which leaves the others out: they are not an
input of those tests (a skip would count them as missing setup), and tests/sandbox/test_amd_intel_nodes.py,
tests/sandbox/unit/test_fake_sysfs_vendors.py and the _amd/_intel unit tests are theirs."""

import json

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
    """``values`` whose profile is an NVML one, for ``pytest.mark.parametrize`` (never none: an empty list would let
    the test pass on nothing)."""
    out = [pytest.param(value, id=ids(value) if ids else None) for value in values if is_nvml_profile(str(path_of(value)))]
    assert out, "no NVML profile among %d values" % len(values)
    return out
