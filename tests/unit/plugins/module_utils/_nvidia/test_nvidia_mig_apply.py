# SPDX-License-Identifier: GPL-3.0-or-later
"""The pure part of applying a MIG layout: which GPU instances give the asked MIG devices, and where they go.
The NVML part runs against the fake NVML in tests/sandbox/test_mig_layout_module.py."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.mig_apply import MigError, choose_placements, pack

# An A100/H100 80 GB as NVML describes it: profile name -> GPU instance profile constant and id, compute instance
# constant, slices (nvidia-smi mig -lgip numbering; the placements of nvidia-smi mig -lgipp).
TABLE = {
    "1g.10gb": {"gi": 0, "gi_id": 19, "g": 1, "ci": 0, "c": 1},
    "1g.10gb+me": {"gi": 7, "gi_id": 20, "g": 1, "ci": 0, "c": 1},
    "1g.20gb": {"gi": 9, "gi_id": 15, "g": 1, "ci": 0, "c": 1},
    "2g.20gb": {"gi": 1, "gi_id": 14, "g": 2, "ci": 1, "c": 2},
    "1c.2g.20gb": {"gi": 1, "gi_id": 14, "g": 2, "ci": 0, "c": 1},
    "3g.40gb": {"gi": 2, "gi_id": 9, "g": 3, "ci": 2, "c": 3},
    "4g.40gb": {"gi": 3, "gi_id": 5, "g": 4, "ci": 3, "c": 4},
    "7g.80gb": {"gi": 4, "gi_id": 0, "g": 7, "ci": 4, "c": 7},
}
PLACEMENTS = {
    0: [(i, 1) for i in range(7)], 7: [(i, 1) for i in range(7)], 9: [(0, 2), (2, 2), (4, 2), (6, 2)],
    1: [(0, 2), (2, 2), (4, 2)], 2: [(0, 4), (4, 4)], 3: [(0, 4)], 4: [(0, 8)],
}


def sizes(instances):
    return [gi["g"] for gi in instances]


def test_the_write_up_layout_is_four_gpu_instances_larger_first_each_with_one_compute_instance():
    instances = pack({"1g.10gb": 2, "2g.20gb": 2}, TABLE)
    assert sizes(instances) == [2, 2, 1, 1]
    assert [gi["gi_id"] for gi in instances] == [14, 14, 19, 19]
    assert all(len(gi["cis"]) == 1 and gi["cis"][0][1] == gi["g"] for gi in instances)


def test_smaller_compute_instances_share_a_gpu_instance_while_its_slices_last():
    instances = pack({"1c.2g.20gb": 3}, TABLE)
    assert [[c for _ci, c in gi["cis"]] for gi in instances] == [[1, 1], [1]]
    assert {gi["gi_id"] for gi in instances} == {14}


def test_a_count_of_zero_asks_for_nothing():
    assert pack({"1g.10gb": 0}, TABLE) == []


def test_a_profile_the_gpu_does_not_offer_names_what_it_offers():
    with pytest.raises(MigError, match=r"no MIG profile 1g\.5gb on this GPU \(it offers 1c\.2g\.20gb, 1g\.10gb"):
        pack({"1g.5gb": 1}, TABLE)


@pytest.mark.parametrize("layout, expected", [
    ({"1g.10gb": 2, "2g.20gb": 2}, [(0, 2), (2, 2), (4, 1), (5, 1)]),
    ({"3g.40gb": 2}, [(0, 4), (4, 4)]),
    ({"4g.40gb": 1, "3g.40gb": 1}, [(0, 4), (4, 4)]),
    ({"1g.10gb": 7}, [(i, 1) for i in range(7)]),
    ({"7g.80gb": 1}, [(0, 8)]),
    # largest first puts the 3g at 0, where the two 2g no longer fit: the search moves it to 4
    ({"3g.40gb": 1, "2g.20gb": 2}, [(4, 4), (0, 2), (2, 2)]),
])
def test_placements_that_fit_are_found(layout, expected):
    assert choose_placements(pack(layout, TABLE), PLACEMENTS) == expected


@pytest.mark.parametrize("layout", [{"4g.40gb": 2}, {"1g.10gb": 8}, {"7g.80gb": 1, "1g.10gb": 1},
                                    {"3g.40gb": 2, "1g.10gb": 1}])
def test_a_layout_that_cannot_fit_has_no_placement(layout):
    assert choose_placements(pack(layout, TABLE), PLACEMENTS) is None
