# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet audit's drift is the container_toolkit role's own decision (the runtime_decisions filter's to_configure)
worded with container_runtime_facts' plans and the checks' reasons: fed from the real filter here (the module_utils
tests run without the controller's filter plugins)."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.cluster.plugins.filter.runtime_decisions import runtime_decisions
from ansible_collections.kubegpu.cluster.plugins.module_utils._audit.report import toolkit_drift

NVIDIA = {"path": "/usr/bin/nvidia-container-runtime", "type": "io.containerd.runc.v2"}
DAEMON_JSON = "/etc/docker/daemon.json"


def facts(docker_default, docker_changed):
    def report(default):
        return {"ok": True, "default_runtime": default, "runtimes": {"nvidia": NVIDIA, "runc": {"path": "runc"}}}
    return {"runtimes": {"docker": {"reports": report(docker_default)}, "containerd": {"reports": report("nvidia")}},
            "plans": {"docker": {"changed": docker_changed, "files": [DAEMON_JSON] if docker_changed else [],
                                 "config_path": DAEMON_JSON, "error": None},
                      "containerd": {"changed": False, "files": [], "config_path": "/etc/containerd/config.toml",
                                     "error": None}}}


def drift(found):
    decided = runtime_decisions(found, ["docker", "containerd"])
    return toolkit_drift({"runtimes": found["runtimes"], "plans": found["plans"], "decided": decided})


def test_a_hand_edited_and_restarted_docker_is_drift_naming_the_file_and_the_default():
    assert drift(facts("runc", True)) == [{
        "stage": "container_toolkit", "subject": "docker",
        "reason": "would change %s; its daemon's default runtime is runc, not nvidia" % DAEMON_JSON}]


def test_a_file_edited_but_not_yet_read_by_the_daemon_is_drift_too():
    assert drift(facts("nvidia", True)) == [{"stage": "container_toolkit", "subject": "docker",
                                             "reason": "would change %s" % DAEMON_JSON}]


def test_as_the_bring_up_left_it_is_no_drift():
    assert drift(facts("nvidia", False)) == []
