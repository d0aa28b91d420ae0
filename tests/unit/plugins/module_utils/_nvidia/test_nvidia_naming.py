# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

import pytest
from hypothesis import given, strategies as st

from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import naming as _gpu_model


@pytest.mark.parametrize("name, slug", [
    ("Tesla V100-PCIE-16GB", "nvidia-tesla-v100-pcie-16gb"),
    ("Tesla T4", "nvidia-tesla-t4"),
    ("NVIDIA A100-SXM4-80GB", "nvidia-a100-sxm4-80gb"),
    ("NVIDIA H100 80GB HBM3", "nvidia-h100-80gb-hbm3"),
    ("GeForce GTX 1060 3GB", "nvidia-geforce-gtx-1060-3gb"),
    ("  ", "nvidia-unknown"),
    (None, "nvidia-unknown"),
])
def test_product_slug(name, slug):
    assert _gpu_model.product_slug(name) == slug


@given(st.text())
def test_product_slug_is_always_a_valid_label_value(name):
    slug = _gpu_model.product_slug(name)
    assert len(slug) <= 63
    assert re.match(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$", slug)


@pytest.mark.parametrize("capability, arch, family", [
    ((7, 0), None, "volta"),
    ((7, 5), None, "turing"),
    ((8, 0), None, "ampere"),
    ((8, 6), None, "ampere"),
    ((8, 9), None, "ada-lovelace"),
    ((9, 0), None, "hopper"),
    ((6, 1), None, "pascal"),
    ((10, 0), None, "blackwell"),
    (None, 5, "volta"),
    (None, 8, "ada-lovelace"),
    ((42, 0), 9, "hopper"),
    (None, None, None),
    (None, 0xFFFFFFFF, None),
])
def test_architecture_family(capability, arch, family):
    assert _gpu_model.architecture_family(capability, arch) == family


@pytest.mark.parametrize("value, text", [(11060, "11.6"), (12040, "12.4"), (9010, "9.1"), (11000, "11.0"), (None, None)])
def test_cuda_version_string(value, text):
    assert _gpu_model.cuda_version_string(value) == text


@pytest.mark.parametrize("gi, ci, memory, total_mib, name", [
    (0, 0, 9728, 81920, "1g.10gb"),     # A100-SXM4-80GB (nvidia-smi mig -lgip)
    (1, 1, 19968, 81920, "2g.20gb"),
    (2, 2, 40192, 81920, "3g.40gb"),
    (3, 3, 40192, 81920, "4g.40gb"),
    (4, 4, 80896, 81920, "7g.80gb"),
    (0, 0, 4864, 40960, "1g.5gb"),      # A100-SXM4-40GB
    (4, 4, 40192, 40960, "7g.40gb"),
    (1, 0, 19968, 81920, "1c.2g.20gb"),  # a 1-slice compute instance in a 2-slice GPU instance
    (2, 1, 40192, 81920, "2c.3g.40gb"),
    (7, 0, 9728, 81920, "1g.10gb+me"),   # 1_SLICE_REV1: media extensions
    (9, 0, 19968, 81920, "1g.20gb"),     # 1_SLICE_REV2
    (13, 0, 23808, 97887, "1g.24gb-me"),  # 1_SLICE_NO_ME (RTX PRO 6000 Blackwell)
    (15, 0, 23808, 97887, "1g.24gb+me.all"),
    (0, 0, 9856, 81559, "1g.10gb"),     # H100 80GB HBM3
])
def test_mig_profile_name_follows_go_nvlib(gi, ci, memory, total_mib, name):
    assert _gpu_model.mig_profile_name(gi, ci, memory, total_mib * 1024 * 1024) == name
    c, g, _gb, _attrs = _gpu_model.mig_profile_parts(name)
    assert (g, c) == (_gpu_model.gpu_instance_slices(gi), {0: 1, 1: 2, 2: 3, 3: 4, 4: 7}[ci])


@pytest.mark.parametrize("gi, ci", [(17, 0), (18, 0), (0, 9)])
def test_mig_profile_name_refuses_constants_go_nvlib_does_not_know(gi, ci):
    with pytest.raises(ValueError, match="invalid"):
        _gpu_model.mig_profile_name(gi, ci, 9728, 81920 * 1024 * 1024)


def test_mig_memory_rounds_half_away_from_zero_like_go():
    # share 3/8 of an 84 GiB GPU is 31.5 GiB: Go's math.Round gives 32 (Python's round would give 32 too, but 2.5
    # -> 3 against round's 2 is the case that differs)
    assert _gpu_model.mig_memory_gb(1, 20 * 1024 ** 3) == 3  # 1 MiB -> 1/8 of 20 GiB = 2.5 -> 3


def test_parse_version_compares_as_numbers_not_strings():
    assert _gpu_model.parse_version("510.47.03") > _gpu_model.parse_version("470.82.01")
    assert _gpu_model.parse_version("1000.1") > _gpu_model.parse_version("999.99.99")
    assert _gpu_model.parse_version("470") < _gpu_model.parse_version("470.0.1")


@pytest.mark.parametrize("text", ["", "abc", "470.x", "4..7", "-1"])
def test_parse_version_rejects_garbage_with_the_text(text):
    with pytest.raises(ValueError, match="is not a version"):
        _gpu_model.parse_version(text)
