# SPDX-License-Identifier: GPL-3.0-or-later
"""Two readings of GPU feature discovery's label rules must agree: the collection's ``_nvidia/gfd.py`` (the values
gpu_node_labels writes when GFD does not run) and the sandbox simulator's ``devsim/gfd.py`` (which plays GFD). They
were written separately from GFD's source (k8s-device-plugin internal/lm); a disagreement means one misreads it.

The collection's side reads the ``gpu`` fact gpu_facts gets through the real pynvml from the fake NVML serving the
profile; the simulator reads the profile file. Labels only GFD can write (``gpu.machine``, ``gpu.mode`` from sysfs,
``gfd.timestamp``) are left out of the comparison. Where GFD itself fails on a node, the collection either fails too
(MPS on a GPU in MIG mode) or, where NVML did not answer a call, labels what the fact tells without the labels that
call feeds: both are checked."""

import glob
import json
import os

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
# An NVML call GFD makes that did not answer: the labels it feeds, which the collection then leaves out.
UNANSWERED = {
    "nvmlDeviceGetCudaComputeCapability": ("nvidia.com/gpu.family", "nvidia.com/gpu.compute.major"),
    "nvmlDeviceGetMemoryInfo": ("nvidia.com/gpu.memory",),
    "nvmlSystemGetCudaDriverVersion": ("nvidia.com/cuda.runtime-version.full",),
    "nvmlDeviceGetHandleByIndex": (),  # a lost GPU: not counted under any model
    "nvmlDeviceGetName": (),
    "nvmlInit": (),  # NVML does not start: the fact counts no GPU
}

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
            call = next((c for c in UNANSWERED if c in theirs[1]), None)
            assert call is not None, where  # GFD fails only where NVML does not answer
            if facts["nvml"]["status"] != "ok":
                assert ours == {}, where  # no count, no labels (and no GFD pod: no gpu.present)
            else:
                assert isinstance(ours, dict) and not set(UNANSWERED[call]) & set(ours), where
        else:
            assert ours == theirs, where
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
