# SPDX-License-Identifier: GPL-3.0-or-later
"""Whether a runtime can start a DRA pod's CDI devices, by runtime and version, and the CDI spec version it reads."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import KubegpuError
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime import cdi


@pytest.mark.parametrize("endpoint, name", [
    ("unix:///run/containerd/containerd.sock", "containerd"),
    ("unix:///var/run/crio/crio.sock", "crio"),
    ("unix:///run/cri-dockerd.sock", "docker"),
    ("unix:///run/k3s/containerd/containerd.sock", "k3s"),
    ("unix:///run/k0s/containerd.sock", "k0s"),
    ("unix:///var/snap/microk8s/common/run/containerd.sock", "microk8s"),
    ("unix:///run/other.sock", None),
    (None, None),
])
def test_runtime_of_endpoint(endpoint, name):
    assert cdi.runtime_of_endpoint(endpoint) == name


@pytest.mark.parametrize("runtime, version, setting, state, enable, spec", [
    ("containerd", "1.7.15", None, "off", True, "0.6.0"),  # off by default in 1.7
    ("containerd", "1.7.16", False, "off", True, "0.7.0"),
    ("containerd", "1.7.24", True, "on", False, "0.7.0"),
    ("containerd", "2.0.0", None, "on", False, "0.7.0"),  # on by default in 2.0 and 2.1
    ("containerd", "2.1.4", False, "off", True, "0.7.0"),  # ... unless turned off
    ("containerd", "2.4.2+unknown", None, "on", False, "0.7.0"),  # no switch from 2.2
    ("crio", "1.29.3", None, "on", False, "0.6.0"),
    ("crio", "1.30.0", None, "on", False, "0.7.0"),
    ("k3s", None, False, "off", True, None),  # a distribution's containerd version unknown: its config decides
])
def test_verdicts(runtime, version, setting, state, enable, spec):
    got = cdi.verdict(runtime, version, setting)
    assert (got["cdi"], got["enable"], got["max_spec_version"]) == (state, enable, spec)


@pytest.mark.parametrize("runtime, version, words", [
    ("docker", "27.3.1", "cri-dockerd"),
    ("containerd", "1.6.20~ds1", "containerd 1.6.20 cannot start a DRA pod's devices"),
])
def test_refusals_say_why(runtime, version, words):
    with pytest.raises(KubegpuError) as err:
        cdi.verdict(runtime, version)
    assert words in str(err.value) and "CDIDevices" in str(err.value)


def test_spec_version_newer_than_the_runtime_reads_is_refused_naming_the_one_to_generate():
    cdi.check_spec_version("containerd", "1.7.16", "0.7.0", "0.7.0")
    cdi.check_spec_version("containerd", "1.7.15", None, "0.6.0")
    with pytest.raises(KubegpuError, match="reads CDI specs up to 0.6.0, not 0.7.0: generate the spec as 0.6.0"):
        cdi.check_spec_version("containerd", "1.7.15", "0.7.0", "0.6.0")
