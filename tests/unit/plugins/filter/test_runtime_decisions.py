# SPDX-License-Identifier: GPL-3.0-or-later
"""What the container_toolkit role does with each selected runtime, decided once per read of the host."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.kubegpu.cluster.plugins.filter.runtime_decisions import runtime_decisions

NVIDIA = {"path": "/usr/bin/nvidia-container-runtime", "type": "io.containerd.runc.v2"}


def report(default="nvidia", **runtimes):
    return {"ok": True, "default_runtime": default, "runtimes": runtimes or {"nvidia": NVIDIA, "runc": {"path": "runc"}}}


def facts(crictl=None, **runtimes):
    return {
        "runtimes": {name: {"reports": value[0]} for name, value in runtimes.items()},
        "plans": {name: {"changed": value[1]} for name, value in runtimes.items() if value[1] is not None},
        "crictl": {"reports": crictl},
    }


def test_a_host_as_asked_needs_nothing_and_records_what_the_daemons_said():
    decided = runtime_decisions(facts(docker=(report(), False), containerd=(report(), False)), ["containerd", "docker"])
    assert decided["to_configure"] == [] and decided["unverified"] == []
    assert decided["verified"] == {"containerd": {"default_runtime": "nvidia", "runtimes": ["nvidia", "runc"]},
                                   "docker": {"default_runtime": "nvidia", "runtimes": ["nvidia", "runc"]}}
    assert decided["checks"]["docker"] == {"ours": NVIDIA, "as_asked": True, "ok": True}


def test_a_file_to_change_or_an_unknown_plan_means_configure_even_when_the_daemon_looks_right():
    decided = runtime_decisions(facts(docker=(report(), True), containerd=(report(), None)), ["docker", "containerd"])
    assert decided["to_configure"] == ["docker", "containerd"]
    assert decided["unverified"] == []


def test_a_daemon_not_as_asked_is_configured_and_unverified_in_the_order_selected():
    decided = runtime_decisions(facts(docker=(report(default="runc"), False), crio=(None, False)), ["crio", "docker"])
    assert decided["to_configure"] == ["crio", "docker"]
    assert decided["unverified"] == ["crio", "docker"]
    assert list(decided["verified"]) == ["docker"]  # crio reported nothing


def test_containerd_needs_the_runtime_in_what_crictl_reports_where_crictl_is_installed():
    seen = facts(crictl={"ok": True, "runtimes": {"runc": {}}}, containerd=(report(), False))
    assert runtime_decisions(seen, ["containerd"])["unverified"] == ["containerd"]
    assert runtime_decisions(seen, ["containerd"])["to_configure"] == []  # as asked in the config: a restart, not a change


def test_not_being_the_default_is_fine_when_not_asked_for():
    decided = runtime_decisions(facts(docker=(report(default="runc"), False)), ["docker"], set_as_default=False)
    assert decided["to_configure"] == [] and decided["unverified"] == []


def test_a_runtime_not_read_is_an_error_naming_it():
    with pytest.raises(AnsibleFilterError, match="crio not among the runtimes read .docker."):
        runtime_decisions(facts(docker=(report(), False)), ["crio"])
