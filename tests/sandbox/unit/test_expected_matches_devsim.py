# SPDX-License-Identifier: GPL-3.0-or-later
"""Two readings of the device plugin's rules must agree: the collection's ``expected_from_fact`` (which the roles use
to know what each node will advertise) and the sandbox simulator's ``advertised_resources`` (which plays the plugin).
They were written separately; a disagreement means one of them misreads the plugin."""

import glob
import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import OptionError
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import allocatable, plugin_config
from sandbox.k8s.devsim.rules import PluginError, advertised_resources, parse_config
from sandbox_gpu_profiles import gpu, profile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
PROFILES = sorted(p for p in glob.glob(os.path.join(ROOT, "sandbox", "profiles", "*.json"))
                  if not os.path.basename(p).startswith("failure-"))


def as_fact(prof):
    """The ``gpu`` fact gpu_facts reports for a profile (the fields expected_from_fact reads)."""
    devices = prof.get("devices") or []
    return {"present": bool(devices), "count": len(devices), "devices": devices}


def both(prof, params):
    """(ours, the simulator's); each is a dict or the string 'refused'."""
    try:
        ours = allocatable.expected_from_fact(plugin_config.build_config(params), as_fact(prof))
    except OptionError:
        ours = "refused"
    try:
        theirs = advertised_resources(prof, parse_config(plugin_config.config_yaml(plugin_config.build_config(params))))
    except PluginError:
        theirs = "refused"
    return ours, theirs


OPTIONS = [
    {},
    {"mig_strategy": "single"},
    {"mig_strategy": "mixed"},
    {"sharing": {"strategy": "time-slicing", "replicas": 4}},
    {"sharing": {"strategy": "time-slicing", "replicas": 4, "rename_by_default": True}},
    {"mig_strategy": "mixed", "sharing": {"strategy": "time-slicing", "replicas": 3}},
    {"mig_strategy": "mixed", "sharing": {"strategy": "time-slicing", "replicas": 2,
                                          "resources": [{"name": "mig-1g.10gb"}, {"name": "gpu", "replicas": 5}]}},
    {"sharing": {"strategy": "mps", "replicas": 2}},
    {"mig_strategy": "single", "sharing": {"strategy": "mps", "replicas": 2}},
]


@pytest.mark.parametrize("path", PROFILES, ids=os.path.basename)
@pytest.mark.parametrize("params", OPTIONS, ids=json.dumps)
def test_fleet_profiles(path, params):
    with open(path) as handle:
        prof = json.load(handle)
    ours, theirs = both(prof, params)
    assert ours == theirs


@settings(max_examples=200, deadline=None)
@given(layout=st.lists(st.one_of(st.none(), st.lists(st.sampled_from(["1g.10gb", "2g.20gb", "3g.40gb"]), max_size=3)),
                       min_size=1, max_size=4),
       mig=st.sampled_from(["none", "single", "mixed"]),
       sharing=st.sampled_from([None, "time-slicing", "mps"]),
       replicas=st.integers(min_value=2, max_value=6),
       rename=st.booleans())
def test_random_layouts(layout, mig, sharing, replicas, rename):
    prof = profile(*[gpu(i, mig_profiles=m) for i, m in enumerate(layout)])
    params = {"mig_strategy": mig}
    if sharing:
        if sharing == "mps" and mig == "mixed":
            return  # refused by build_config before any node is looked at (tested in test_nvidia_device_plugin)
        params["sharing"] = {"strategy": sharing, "replicas": replicas, "rename_by_default": rename}
    ours, theirs = both(prof, params)
    assert ours == theirs
