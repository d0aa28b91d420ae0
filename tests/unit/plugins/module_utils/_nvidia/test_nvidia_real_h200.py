# SPDX-License-Identifier: GPL-3.0-or-later
"""The collection's MIG logic on what a real GPU reported: an NVIDIA H200 (141 GB, driver 580.159.04), recorded
read-only by tests/realgpu/record.sh into tests/fixtures/realgpu/h200-580.159.04.json.

The fake NVML models the A100/H100 geometry only (1g.10gb ... 7g.80gb); these tests hold the pure logic to a GPU it
does not model: NVML's own profile names, go-nvlib's list, nvidia-smi's placements."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
from types import SimpleNamespace

import pytest

from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import mig_apply, naming
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.nvml import _supported_profiles

RECORD = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "fixtures", "realgpu", "h200-580.159.04.json")


@pytest.fixture(scope="module")
def record():
    with open(RECORD) as handle:
        return json.load(handle)


@pytest.fixture(scope="module")
def gpu(record):
    return record["mig_read"]["gpus"][0]


def offered(gpu):
    """``{GPU instance profile constant: version-1 info}`` of the profiles NVML answered for."""
    return {int(k): v["v1"] for k, v in gpu["gpu_instance_profiles"].items() if "error" not in v["v1"]}


class RecordedNvml(object):
    """Answers ``nvmlDeviceGetGpuInstanceProfileInfo`` from the record, and refuses the rest as NVML did."""

    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_INVALID_ARGUMENT = 2
    NVML_ERROR_FUNCTION_NOT_FOUND = 13

    class NVMLError(Exception):
        def __init__(self, value):
            super(RecordedNvml.NVMLError, self).__init__(value)
            self.value = value

    def __init__(self, gpu):
        self.profiles = gpu["gpu_instance_profiles"]

    def nvmlDeviceGetGpuInstanceProfileInfo(self, _handle, constant, _version):
        entry = self.profiles[str(constant)]["v1"]
        if "error" in entry:
            raise self.NVMLError(self.NVML_ERROR_INVALID_ARGUMENT if entry["error"].endswith("InvalidArgument")
                                 else self.NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(**entry)


def test_the_record_is_an_h200_with_mig_off(record, gpu):
    facts = record["gpu_facts"]["devices"][0]
    assert (facts["name"], facts["memory_total_mib"], facts["mig"]["capable"], facts["mig"]["current"]) == \
        ("NVIDIA H200", 143771, True, False)
    assert gpu["mig_mode"] == [0, 0]


def test_our_name_of_each_gpu_instance_profile_is_nvmls(gpu):
    """NVML names each profile itself (``MIG 1g.18gb``); naming.mig_profile_name, go-nvlib's rule, gives the same
    from the profile's memory and the GPU's, although the memory is not an eighth per slice (1g: 16384 of 143771 MiB)."""
    full_ci = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}  # compute instance constant of all the slices
    for constant, info in offered(gpu).items():
        g = naming.gpu_instance_slices(constant)
        ours = naming.mig_profile_name(constant, full_ci[g], info["memorySizeMB"], gpu["memory_total_bytes"])
        assert "MIG " + ours == gpu["gpu_instance_profiles"][str(constant)]["name"], constant


def test_the_profiles_we_list_are_go_nvlibs_and_nvidia_smis(record, gpu):
    infos = {c: SimpleNamespace(**info) for c, info in offered(gpu).items()}
    ours = _supported_profiles(infos, gpu["memory_total_bytes"])
    assert ours == record["gpu_facts"]["devices"][0]["mig"]["profiles"]
    assert ours == list(dict.fromkeys(record["nvlibprobe"]["devices"][0]["mig_profiles"]))
    smi = {line.split()[3] for line in record["nvidia_smi_mig_lgip"] if "MIG " in line}
    assert smi == {n for n in ours if "c." not in n} == {
        "1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"}


def test_the_profile_table_from_the_recorded_answers_is_the_one_read_on_the_gpu(gpu):
    table = mig_apply.profile_table(RecordedNvml(gpu), None, gpu["memory_total_bytes"])
    # "count" (NVML's instanceCount) joined the table after the recording, which was made before it
    assert {n: dict(e, count=None) for n, e in table.items()} == \
        {n: dict(e, count=None) for n, e in gpu["profile_table"].items()}
    assert table["1g.18gb+me"]["count"] == 1 and table["1g.18gb"]["count"] == 7


def table_of(gpu):
    return mig_apply.profile_table(RecordedNvml(gpu), None, gpu["memory_total_bytes"])


def test_nvml_placements_are_nvidia_smis(record, gpu):
    """nvmlDeviceGetGpuInstancePossiblePlacements as our reader calls it, against nvidia-smi mig -lgipp."""
    for line in record["nvidia_smi_mig_lgipp"]:
        words = line.replace(":", " ").split()
        profile_id = words[words.index("ID") + 1]
        starts = [int(s) for s in line.split("{")[1].split("}")[0].split(",")]
        size = int(line.rsplit(":", 1)[1])
        assert gpu["possible_placements"][profile_id] == [[s, size] for s in starts], line


def placements(gpu):
    ids = {info["id"]: c for c, info in offered(gpu).items()}
    return {ids[int(i)]: [tuple(p) for p in found] for i, found in gpu["possible_placements"].items()}


@pytest.mark.parametrize("layout", [
    {"1g.18gb": 2, "2g.35gb": 2},          # the write-up's layout, in this GPU's sizes
    {"1g.18gb": 7},
    {"3g.71gb": 2},
    {"4g.71gb": 1, "3g.71gb": 1},
    {"1g.35gb": 4},
    {"1c.7g.141gb": 7},
    {"1g.18gb+me": 1, "1g.18gb": 6},
])
def test_layouts_that_fit_an_h200_get_placements(gpu, layout):
    instances = mig_apply.pack(layout, table_of(gpu))
    chosen = mig_apply.choose_placements(instances, placements(gpu))
    assert chosen is not None and len(chosen) == len(instances)


@pytest.mark.parametrize("layout", [
    {"3g.71gb": 2, "1g.18gb": 1},           # the two 3g take all eight memory slices
    {"1g.35gb": 4, "1g.18gb": 1},
])
def test_layouts_that_do_not_fit_an_h200_have_no_placement(gpu, layout):
    instances = mig_apply.pack(layout, table_of(gpu))
    assert mig_apply.choose_placements(instances, placements(gpu)) is None


@pytest.mark.parametrize("layout, message", [
    ({"1g.18gb+me": 2}, r"2 GPU instances of profile 1g\.18gb\+me asked for; this GPU has room for 1"),
    ({"1g.18gb": 8}, r"8 GPU instances of profile 1g\.18gb asked for; this GPU has room for 7"),
])
def test_more_instances_of_a_profile_than_nvml_counts_are_refused_before_placing(gpu, layout, message):
    """Two "+me" instances have placements (seven are offered), but NVML counts one per GPU (nvidia-smi: 1/1)."""
    with pytest.raises(mig_apply.MigError, match=message):
        mig_apply.pack(layout, table_of(gpu))


def test_the_a100_names_are_refused_on_an_h200_with_what_it_offers(gpu):
    with pytest.raises(mig_apply.MigError, match=r"no MIG profile 1g\.10gb on this GPU \(it offers 1c\.2g\.35gb"):
        mig_apply.pack({"1g.10gb": 1}, table_of(gpu))
