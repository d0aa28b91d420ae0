# SPDX-License-Identifier: GPL-3.0-or-later
"""Two readings of GPU feature discovery's label rules must agree: the collection's ``_nvidia/gfd.py`` (the values
gpu_node_labels writes when GFD does not run) and the sandbox simulator's ``devsim/gfd.py`` (which plays GFD). They
were written separately from GFD's source (k8s-device-plugin internal/lm); a disagreement means one misreads it.

The collection's side reads the ``gpu`` fact gpu_facts gets through the real pynvml from the fake NVML serving the
profile; the simulator reads the profile file. Labels only GFD can write (``gpu.machine``, ``gpu.mode`` from sysfs,
``gfd.timestamp``) are left out of the comparison. Where GFD itself fails on a node, the collection either fails too
(MPS on a GPU in MIG mode: a config error) or writes no GFD label at all, as GFD writes none (a lost GPU, a compute
capability or CUDA driver version NVML does not give, ...): both are checked, and so is that the two readings find GFD
failing on the same nodes."""

import glob
import json
import os
import sys

import pytest

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import OptionError
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import gfd, plugin_config
from sandbox.k8s.devsim import gfd as sim_gfd
from sandbox.k8s.devsim.rules import parse_config

import nvml_profiles
from test_expected_matches_devsim import FactsWorker  # pylint: disable=wrong-import-order

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROFILES = sorted(glob.glob(os.path.join(ROOT, "sandbox", "profiles", "*.json")))
GFD_ONLY = ("nvidia.com/gpu.machine", "nvidia.com/gpu.mode", "nvidia.com/gfd.timestamp")

OPTIONS = [
    {},
    {"sharing": {"strategy": "time-slicing", "replicas": 4}},
    {"sharing": {"strategy": "time-slicing", "replicas": 4, "rename_by_default": True}},
    {"sharing": {"strategy": "mps", "replicas": 4}},
    {"mig_strategy": "single"},
    {"mig_strategy": "single", "sharing": {"strategy": "time-slicing", "replicas": 2}},
    {"mig_strategy": "mixed"},
    {"mig_strategy": "mixed", "sharing": {"strategy": "time-slicing", "replicas": 3,
                                          "resources": [{"name": "mig-1g.10gb"}]}},
    {"mig_strategy": "mixed", "sharing": {"strategy": "time-slicing", "replicas": 2, "rename_by_default": True,
                                          "resources": [{"name": "mig-1g.10gb"}, {"name": "gpu", "replicas": 5}]}},
]


@pytest.fixture(scope="module")
def worker(fake_nvml_dir, tmp_path_factory):
    proc = FactsWorker(fake_nvml_dir, tmp_path_factory.mktemp("gfd-profiles"))
    yield proc
    proc.close()


def both(facts, prof, params):
    """(ours, the simulator's): labels, or ("fails", reason)."""
    config = plugin_config.build_config(params)
    try:
        ours = gfd.labels(facts, config)
    except OptionError as exc:
        ours = ("fails", exc.message)
    try:
        theirs = sim_gfd.labels(prof, parse_config(plugin_config.config_yaml(config)))
        theirs = dict((k, v) for k, v in theirs.items() if k not in GFD_ONLY)
    except sim_gfd.GFDFailure as exc:
        theirs = ("fails", str(exc))
    return ours, theirs


@pytest.mark.parametrize("path", nvml_profiles.params(PROFILES, ids=os.path.basename))
def test_every_shipped_profile_under_every_option(worker, path):
    with open(path) as handle:
        prof = json.load(handle)
    facts = worker.facts(path)
    compared = 0
    for params in OPTIONS:
        ours, theirs = both(facts, prof, params)
        where = "%s %s: ours %s, the simulator's %s" % (os.path.basename(path), json.dumps(params), ours, theirs)
        if isinstance(theirs, tuple) and "MPS" in theirs[1]:
            assert isinstance(ours, tuple) and "MPS sharing is not supported for MIG devices" in ours[1], where
        elif isinstance(theirs, tuple):
            assert ours == {}, where  # GFD labels nothing there, and neither do we (NVML down: no count either)
            assert facts["nvml"]["status"] != "ok" or gfd.exit_reason(facts, plugin_config.build_config(params)), where
        else:
            assert ours == theirs, where
            assert gfd.exit_reason(facts, plugin_config.build_config(params)) is None, where
            compared += 1
    assert compared or facts["nvml"]["status"] != "ok" or "failure" in path or "not-supported" in path


def test_the_comparison_covers_mig_sharing_and_mig_attributes(worker):
    path = os.path.join(ROOT, "sandbox", "profiles", "a100x8-mig-mixed.json")
    with open(path) as handle:
        prof = json.load(handle)
    ours, theirs = both(worker.facts(path), prof, OPTIONS[-1])
    assert ours == theirs
    assert ours["nvidia.com/mig-1g.10gb.product"] == "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"  # renamed: no -SHARED
    assert ours["nvidia.com/mig-1g.10gb.replicas"] == "2"
    assert ours["nvidia.com/gpu.replicas"] == "0"  # every GPU has MIG on: labelled without sharing
    assert ours["nvidia.com/mig-3g.40gb.engines.copy"] == theirs["nvidia.com/mig-3g.40gb.engines.copy"]
    path = os.path.join(ROOT, "sandbox", "profiles", "h100-mig-me.json")
    with open(path) as handle:
        prof = json.load(handle)
    ours, theirs = both(worker.facts(path), prof, {"mig_strategy": "mixed"})
    assert ours == theirs and ours["nvidia.com/mig-1g.10gb.me.count"] == "1"  # "+" becomes "." in a MIG device's name


# Nodes where GPU feature discovery exits, and their neighbours where it labels, each under every option above: the
# fault is what the fake NVML can be told to answer (errors injected per call), read back through gpu_facts.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "unit"))
from sandbox_gpu_profiles import H100, V100, gpu, profile  # noqa: E402  pylint: disable=wrong-import-position

NOT_SUPPORTED = "NOT_SUPPORTED"
GFD_CASES = {
    # (profile, whether GFD exits on it)
    "lost-gpu": (profile(gpu(0, model=V100), gpu(1, model=V100, errors={"nvmlDeviceGetHandleByIndex": "GPU_IS_LOST"})),
                 True),
    "cuda-driver-version-not-supported": (profile(gpu(0, model=V100),
                                                  errors={"nvmlSystemGetCudaDriverVersion": NOT_SUPPORTED}), True),
    # GFD asks the first version only: a failing _v2 changes nothing for it
    "cuda-driver-version-v2-not-supported": (profile(gpu(0, model=V100),
                                                     errors={"nvmlSystemGetCudaDriverVersion_v2": NOT_SUPPORTED}),
                                             False),
    "driver-version-not-supported": (profile(gpu(0, model=V100),
                                             errors={"nvmlSystemGetDriverVersion": NOT_SUPPORTED}), True),
    "compute-capability-not-supported": (profile(gpu(0, model=V100, errors={
        "nvmlDeviceGetCudaComputeCapability": NOT_SUPPORTED})), True),
    # the model's labels are built from its last GPU: the first one's compute capability is never asked
    "compute-capability-not-supported-on-the-first-of-two": (profile(
        gpu(0, model=V100, errors={"nvmlDeviceGetCudaComputeCapability": NOT_SUPPORTED}), gpu(1, model=V100)), False),
    "compute-capability-not-supported-on-the-last-of-two": (profile(
        gpu(0, model=V100), gpu(1, model=V100, errors={"nvmlDeviceGetCudaComputeCapability": NOT_SUPPORTED})), True),
    # only a warning for a whole GPU: no memory label
    "memory-not-supported": (profile(gpu(0, model=V100, errors={"nvmlDeviceGetMemoryInfo": NOT_SUPPORTED})), False),
    "mig-mode-unknown": (profile(gpu(0, errors={"nvmlDeviceGetMigMode": "UNKNOWN"})), True),
    "two-models": (profile(gpu(0, model=H100), gpu(1, model=V100)), False),
    "single-invalid": (profile(gpu(0, ["1g.10gb", "2g.20gb"])), False),
}


@pytest.mark.parametrize("name", sorted(GFD_CASES))
def test_where_gfd_exits_no_gfd_label_is_written(worker, name):
    prof, exits = GFD_CASES[name]
    facts = worker.facts_of(prof)
    assert facts["nvml"]["status"] == "ok", facts["nvml"]
    for params in OPTIONS:
        ours, theirs = both(facts, prof, params)
        where = "%s %s: ours %s, the simulator's %s" % (name, json.dumps(params), ours, theirs)
        if isinstance(theirs, tuple) and "MPS" in theirs[1]:
            assert isinstance(ours, tuple), where
            continue
        assert isinstance(theirs, tuple) == exits, where
        assert bool(gfd.exit_reason(facts, plugin_config.build_config(params))) == exits, where
        assert ours == ({} if exits else theirs), where


def test_an_invalid_single_layout_writes_an_empty_sharing_strategy(worker):
    """lm/mig-strategy.go newInvalidMigStrategyLabeler sets gpu.sharing-strategy to "" (it is merged after the whole-GPU
    labels, so it replaces their none or time-slicing)."""
    prof = GFD_CASES["single-invalid"][0]
    facts = worker.facts_of(prof)
    for params in ({"mig_strategy": "single"},
                   {"mig_strategy": "single", "sharing": {"strategy": "time-slicing", "replicas": 2}}):
        ours, theirs = both(facts, prof, params)
        assert ours == theirs
        assert ours["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB-MIG-INVALID"
        assert ours["nvidia.com/gpu.sharing-strategy"] == ""
