# SPDX-License-Identifier: GPL-3.0-or-later
"""Two readings of NVIDIA's device plugin must agree: the collection's ``expected_from_fact`` (what the roles wait for
on each node) and the sandbox simulator's ``advertised_resources`` (which plays the plugin). They were written
separately from the plugin's source; a disagreement means one of them misreads it.

The collection's side gets what it gets for real: the ``gpu`` fact that gpu_facts reads through the real pynvml from
the fake NVML serving the profile, so MIG naming (``+me``, ``1c.``), lost GPUs and NOT_SUPPORTED answers come through
NVML, not through the profile file. Where the plugin would exit, both must say so with the same reason."""

import glob
import json
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import allocatable, plugin_config
from sandbox.k8s.devsim.rules import PluginError, advertised_resources, parse_config

import nvml_profiles

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "unit"))
from sandbox_gpu_profiles import A100, H100, V100, gpu, profile  # noqa: E402  pylint: disable=wrong-import-position

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROFILES = sorted(glob.glob(os.path.join(ROOT, "sandbox", "profiles", "*.json")))
WORKER = os.path.join(os.path.dirname(__file__), "gpu_facts_worker.py")


class FactsWorker:
    """One child process that answers gpu_facts' fact for a profile file, over the fake NVML."""

    def __init__(self, lib_dir, tmp_dir):
        env = dict(os.environ, LD_LIBRARY_PATH=str(lib_dir),
                   PYTHONPATH=os.pathsep.join([os.path.join(ROOT, ".build", "collections"), ROOT]))
        self.proc = subprocess.Popen([sys.executable, WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env=env, text=True)
        self.tmp_dir = tmp_dir
        self.count = 0

    def facts(self, path):
        self.proc.stdin.write(str(path) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "the gpu_facts worker died (rc %s)" % self.proc.poll()
        return json.loads(line)

    def facts_of(self, prof):
        self.count += 1
        path = os.path.join(str(self.tmp_dir), "p%d.json" % self.count)
        with open(path, "w") as handle:
            json.dump(prof, handle)
        return self.facts(path)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def worker(fake_nvml_dir, tmp_path_factory):
    proc = FactsWorker(fake_nvml_dir, tmp_path_factory.mktemp("profiles"))
    yield proc
    proc.close()


def both(facts, prof, params):
    """(ours, the simulator's): a dict of counts, or ("exit", reason)."""
    config = plugin_config.build_config(params)
    try:
        ours = allocatable.expected_from_fact(config, facts, "n")
    except allocatable.PluginExit as exc:
        ours = ("exit", exc.reason)
    try:
        theirs = advertised_resources(prof, parse_config(plugin_config.config_yaml(config)))
    except PluginError as exc:
        theirs = ("exit", str(exc))
    if ours == {} and facts["nvml"]["status"] != "ok" and theirs[0] == "exit":
        # NVML does not start: the plugin exits; we expect nothing, since the node gets no nvidia.com/gpu.present
        # label and so no plugin pod (the labels follow the same facts)
        theirs = {}
    return ours, theirs


# The configurations of the acceptance list: no sharing, time-slicing x4 with and without rename, MPS x4,
# MIG single, MIG mixed, time-slicing of a MIG resource (and of a MIG resource next to whole GPUs).
OPTIONS = [
    {},
    {"sharing": {"strategy": "time-slicing", "replicas": 4}},
    {"sharing": {"strategy": "time-slicing", "replicas": 4, "rename_by_default": True}},
    {"sharing": {"strategy": "mps", "replicas": 4}},
    {"mig_strategy": "single"},
    {"mig_strategy": "mixed"},
    {"mig_strategy": "mixed", "sharing": {"strategy": "time-slicing", "replicas": 3,
                                          "resources": [{"name": "mig-1g.10gb"}]}},
    {"mig_strategy": "mixed", "sharing": {"strategy": "time-slicing", "replicas": 2, "rename_by_default": True,
                                          "resources": [{"name": "mig-1g.10gb"}, {"name": "gpu", "replicas": 5}]}},
    {"mig_strategy": "single", "sharing": {"strategy": "mps", "replicas": 4}},
]


@pytest.mark.parametrize("path", nvml_profiles.params(PROFILES, ids=os.path.basename))
def test_every_shipped_profile_under_every_option(worker, path):
    with open(path) as handle:
        prof = json.load(handle)
    facts = worker.facts(path)
    for params in OPTIONS:
        ours, theirs = both(facts, prof, params)
        assert ours == theirs, json.dumps(params)


# The plugin's cases the issue lists (and their neighbours), each a node layout run under every option above.
LOST = {"nvmlDeviceGetHandleByIndex": "GPU_IS_LOST"}
CASES = {
    "lost-gpu": profile(gpu(0, model=V100), gpu(1, model=V100, errors=LOST)),
    "mig-on-empty-next-to-mig-devices": profile(gpu(0, []), gpu(1, ["1g.10gb", "2g.20gb"])),
    "mig-on-empty-next-to-full-gpu": profile(gpu(0, []), gpu(1)),
    "compute-instance-profile": profile(gpu(0, ["1c.2g.20gb", "1c.2g.20gb"])),
    "media-extensions": profile(gpu(0, ["1g.10gb+me", "1g.10gb", "1g.10gb"])),
    "two-models-same-mig-name": profile(gpu(0, ["1g.10gb"] * 2), gpu(1, ["1g.10gb"] * 2, model=H100)),
    "two-models-full-gpus": profile(gpu(0, model=H100), gpu(1, model=V100)),
    "cc-not-supported": profile(gpu(0, model=V100, errors={"nvmlDeviceGetCudaComputeCapability": "NOT_SUPPORTED"})),
    "memory-not-supported-mig-capable": profile(gpu(0, errors={"nvmlDeviceGetMemoryInfo": "NOT_SUPPORTED"})),
    "memory-not-supported-not-mig-capable": profile(gpu(0, model=V100,
                                                        errors={"nvmlDeviceGetMemoryInfo": "NOT_SUPPORTED"})),
    "mig-mode-unknown-error": profile(gpu(0, errors={"nvmlDeviceGetMigMode": "UNKNOWN"})),
    "single-uniform": profile(gpu(0, ["2g.20gb"] * 3), gpu(1, ["2g.20gb"] * 3)),
    "single-mig-and-full": profile(gpu(0, ["3g.40gb"] * 2), gpu(1)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_case_under_every_option(worker, name):
    prof = CASES[name]
    facts = worker.facts_of(prof)
    assert facts["nvml"]["status"] == "ok", facts["nvml"]
    outcomes = set()
    for params in OPTIONS:
        ours, theirs = both(facts, prof, params)
        assert ours == theirs, json.dumps(params)
        outcomes.add(json.dumps(ours, sort_keys=True))
    assert len(outcomes) > 1 or name in ("lost-gpu", "cc-not-supported", "mig-mode-unknown-error"), \
        "every option gives the same answer: the case does not exercise the options"


MIG_NAMES = sorted(set(A100["mig_catalog"]))


@settings(max_examples=300, deadline=None)
@given(layout=st.lists(st.tuples(st.sampled_from(["a100", "h100", "v100"]),
                                 st.one_of(st.none(), st.lists(st.sampled_from(MIG_NAMES), max_size=3)),
                                 st.sampled_from([None, "GPU_IS_LOST", "cc", "memory"])),
                       min_size=1, max_size=4),
       mig=st.sampled_from(["none", "single", "mixed"]),
       sharing=st.sampled_from([None, "time-slicing", "mps"]),
       replicas=st.integers(min_value=2, max_value=6),
       rename=st.booleans())
def test_random_layouts(worker, layout, mig, sharing, replicas, rename):
    devices = []
    for index, (model, migs, fault) in enumerate(layout):
        model = {"a100": A100, "h100": H100, "v100": V100}[model]
        if model is H100 and migs:
            migs = [m for m in migs if m in H100["mig_catalog"]]
        errors = {None: None, "GPU_IS_LOST": {"nvmlDeviceGetHandleByIndex": "GPU_IS_LOST"},
                  "cc": {"nvmlDeviceGetCudaComputeCapability": "NOT_SUPPORTED"},
                  "memory": {"nvmlDeviceGetMemoryInfo": "NOT_SUPPORTED"}}[fault]
        devices.append(gpu(index, migs if model is not V100 else None, model=model, errors=errors))
    prof = profile(*devices)
    params = {"mig_strategy": mig}
    if sharing:
        if sharing == "mps" and mig == "mixed":
            return  # refused by build_config before any node is looked at (test_nvidia_device_plugin)
        params["sharing"] = {"strategy": sharing, "replicas": replicas, "rename_by_default": rename}
    facts = worker.facts_of(prof)
    assert facts["nvml"]["status"] == "ok", facts["nvml"]  # a profile the fake refuses would prove nothing
    ours, theirs = both(facts, prof, params)
    assert ours == theirs
