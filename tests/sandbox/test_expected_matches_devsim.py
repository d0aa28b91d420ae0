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
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import health as health_rules
from sandbox.k8s.devsim import gfd as sim_gfd
from sandbox.k8s.devsim.rules import PluginError, advertised_resources, parse_config, unhealthy_devices

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


def both(facts, prof, params, health=None):
    """(ours, the simulator's): a dict of allocatable counts, ("exit", reason), or ("no MPS daemon", ...) where the
    plugin waits for an MPS control daemon that cannot run on the node.

    The simulator's side is the sandbox's machinery put together: the plugin's counts less its unhealthy devices (the
    environment the collection gives the plugin, read by the simulator), and, for MPS, whether the daemon could run,
    which it does only where GFD (the simulator's reading) labels nvidia.com/mps.capable=true (the daemon's node
    selector)."""
    config = plugin_config.build_config(params)
    try:
        ours = allocatable.expected_from_fact(config, facts, "n", health)
    except allocatable.NoMpsDaemon:
        ours = ("no MPS daemon",)
    except allocatable.PluginExit as exc:
        ours = ("exit", exc.reason)
    env = dict((e["name"], e["value"]) for e in health_rules.env(health))
    try:
        sim_config = parse_config(plugin_config.config_yaml(config), env)
        counts = advertised_resources(prof, sim_config)
        bad = unhealthy_devices(prof, sim_config)
        theirs = dict((k, v - bad.get(k, 0)) for k, v in counts.items())
        if counts and sim_config.sharing is not None and sim_config.sharing.strategy == "mps":
            try:
                daemon_runs = sim_gfd.labels(prof, sim_config).get("nvidia.com/mps.capable") == "true"
            except sim_gfd.GFDFailure:
                daemon_runs = False
            if not daemon_runs:
                theirs = ("no MPS daemon",)
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


# --------------------------------------------------------------------------- MPS where no control daemon can run

MPS = {"sharing": {"strategy": "mps", "replicas": 4}}
NO_DAEMON = {
    # MIG on under migStrategy none: the plugin takes the whole GPUs, but GFD refuses MPS there, so nvidia.com/mps.capable
    # is never true and the daemon (which selects on it) never runs: the plugin waits and advertises nothing
    "mig-on-under-none": profile(gpu(0, ["1g.10gb"] * 2), gpu(1, model=V100)),
    "mig-on-and-empty-under-none": profile(gpu(0, [])),
    # GFD exits on the CUDA driver version: no label at all, so no daemon either
    "cuda-driver-version-not-supported": profile(gpu(0, model=V100),
                                                 errors={"nvmlSystemGetCudaDriverVersion": "NOT_SUPPORTED"}),
}


@pytest.mark.parametrize("name", sorted(NO_DAEMON))
def test_the_preview_agrees_with_the_plugin_where_no_mps_daemon_can_run(worker, name):
    prof = NO_DAEMON[name]
    facts = worker.facts_of(prof)
    ours, theirs = both(facts, prof, MPS)
    assert ours == theirs == ("no MPS daemon",)
    with pytest.raises(allocatable.NoMpsDaemon) as caught:
        allocatable.expected_from_facts(dict(MPS, facts={"gpu-7": facts}), {"gpu-7": facts})
    assert "node gpu-7" in caught.value.message and "nvidia.com/mps.capable=true" in caught.value.message
    # the same node under time-slicing advertises its replicas: the refusal is MPS's
    ours, theirs = both(facts, prof, {"sharing": {"strategy": "time-slicing", "replicas": 4}})
    assert ours == theirs and isinstance(ours, dict) and ours


# --------------------------------------------------------------------------- XID health


def xids(*events):
    return [dict(e) if isinstance(e, dict) else {"xid": e} for e in events]


def with_xids(device, *events, **extra):
    device = dict(device, xid_events=xids(*events))
    device.update(extra)
    return device


XID_CASES = {
    "xid-79-on-one-of-two": profile(gpu(0, model=V100), with_xids(gpu(1, model=V100), 79)),
    "xid-13-ignored": profile(with_xids(gpu(0, model=V100), 13), gpu(1, model=V100)),
    "xid-43-and-48": profile(with_xids(gpu(0, model=V100), 43), with_xids(gpu(1, model=V100), 48)),
    "two-xids-one-gpu": profile(with_xids(gpu(0, model=V100), 79, 48)),
    # a whole-GPU XID on a GPU in MIG mode: one MIG device per resource of that GPU
    "xid-79-on-a-mig-gpu": profile(with_xids(gpu(0, ["1g.10gb", "1g.10gb", "2g.20gb"]), 79), gpu(1, ["3g.40gb"])),
    # an XID for one MIG instance (GPU instance 2, compute instance 0): that device only
    "xid-on-one-mig-instance": profile(with_xids(gpu(0, ["1g.10gb", "2g.20gb"]),
                                                 {"xid": 94, "gpu_instance_id": 2, "compute_instance_id": 0})),
    # a GPU that does not support XID events is never marked (registered for no XID)
    "xid-79-not-watched": profile(with_xids(gpu(0, model=V100), 79, event_types=["pstate"])),
    # a registration NVML refuses marks every device of the GPU at once
    "registration-fails": profile(gpu(0, model=V100, errors={"nvmlDeviceRegisterEvents": "UNKNOWN"}),
                                  gpu(1, model=V100)),
    "registration-not-supported": profile(gpu(0, model=V100, errors={"nvmlDeviceRegisterEvents": "NOT_SUPPORTED"}),
                                          with_xids(gpu(1, model=V100), 79)),
}
HEALTH = [None, {"enabled": False}, {"ignore_xids": [79]}, {"check_xids": [13, 43]}]


@pytest.mark.parametrize("name", sorted(XID_CASES))
def test_xid_health_under_every_option_and_health_setting(worker, name):
    prof = XID_CASES[name]
    facts = worker.facts_of(prof)
    assert facts["nvml"]["status"] == "ok", facts["nvml"]
    outcomes = set()
    for params in OPTIONS:
        for health in HEALTH:
            ours, theirs = both(facts, prof, params, health)
            assert ours == theirs, "%s %s" % (json.dumps(params), health)
            outcomes.add(json.dumps(ours, sort_keys=True))
    assert len(outcomes) > 1


def test_a_gpu_with_xid_79_gives_allocatable_0_for_that_gpu(worker):
    """The shipped profile failure-xid-79: two T4s, the second raises XID 79, the first XID 13 (ignored)."""
    path = os.path.join(ROOT, "sandbox", "profiles", "failure-xid-79.json")
    with open(path) as handle:
        prof = json.load(handle)
    facts = worker.facts(path)
    assert [d["xid_events"] for d in facts["devices"]] == [
        [{"xid": 13, "gpu_instance_id": None, "compute_instance_id": None}],
        [{"xid": 79, "gpu_instance_id": None, "compute_instance_id": None}]]
    expected = {
        None: {"nvidia.com/gpu": 1},  # capacity 2: the second GPU is unhealthy
        json.dumps({"enabled": False}): {"nvidia.com/gpu": 2},
        json.dumps({"ignore_xids": [79]}): {"nvidia.com/gpu": 2},
        json.dumps({"check_xids": [13]}): {"nvidia.com/gpu": 0},
    }
    for health, want in expected.items():
        health = json.loads(health) if health else None
        assert both(facts, prof, {}, health) == (want, want), health
    # time-slicing: v0.20.0 keeps one device per GPU UUID, so one replica of the GPU goes, not four (#1929)
    assert both(facts, prof, {"sharing": {"strategy": "time-slicing", "replicas": 4}}) == (
        {"nvidia.com/gpu": 7}, {"nvidia.com/gpu": 7})


def test_the_plugin_gets_the_health_check_environment_the_prediction_assumes():
    """What device_plugin_deploy writes into the plugin container is what the simulator reads the health rules from."""
    from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import manifests
    for health in HEALTH:
        objects = manifests.render({"health_checks": health})
        plugin = [o for o in objects if o["kind"] == "DaemonSet"][0]["spec"]["template"]["spec"]["containers"][0]
        env = dict((e["name"], e["value"]) for e in plugin["env"] if "value" in e)
        assert parse_config(None, env).health == parse_config(
            None, dict((e["name"], e["value"]) for e in health_rules.env(health))).health
        assert bool(set(env) & {"DP_DISABLE_HEALTHCHECKS", "DP_ENABLE_HEALTHCHECKS"}) == bool(health)
