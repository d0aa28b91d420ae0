# SPDX-License-Identifier: GPL-3.0-or-later
"""The one judgement of a container runtime's report, for every runtime (docker info, containerd config dump, ...)."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.kubegpu.cluster.plugins.filter.runtime_report_check import runtime_report_check

NVIDIA = {"path": "/usr/bin/nvidia-container-runtime", "type": "io.containerd.runc.v2"}


def report(default="nvidia", ok=True, **runtimes):
    return {"ok": ok, "default_runtime": default, "runtimes": runtimes or {"nvidia": NVIDIA, "runc": {"path": "runc"}}}


def test_a_report_as_asked():
    assert runtime_report_check(report(), "docker") == {"ours": NVIDIA, "as_asked": True, "ok": True}


@pytest.mark.parametrize("bad", [
    report(default="runc"),  # not the default
    report(ok=False),  # the daemon could not be asked
    report(nvidia={"path": "/usr/local/bin/nvidia-container-runtime"}),  # another binary
    report(runc={"path": "runc"}),  # no nvidia runtime at all
    {},  # no report
])
def test_what_is_not_as_asked(bad):
    assert runtime_report_check(bad, "docker")["as_asked"] is False


def test_not_the_default_is_fine_when_not_asked():
    assert runtime_report_check(report(default="runc"), "crio", set_as_default=False)["ok"] is True


def test_containerd_also_needs_the_runc_shim_and_what_crictl_says():
    assert runtime_report_check(report(), "containerd")["ok"] is True  # no crictl installed
    assert runtime_report_check(report(), "containerd", crictl={"ok": True, "runtimes": {"nvidia": {}}})["ok"] is True
    assert runtime_report_check(report(), "containerd", crictl={"ok": True, "runtimes": {"runc": {}}})["ok"] is False
    assert runtime_report_check(report(), "containerd", crictl={"ok": False, "runtimes": {}})["ok"] is False
    v1 = report(nvidia={"path": NVIDIA["path"], "type": "io.containerd.runtime.v1.linux"})
    assert runtime_report_check(v1, "containerd") == {"ours": v1["runtimes"]["nvidia"], "as_asked": True, "ok": False}
    assert runtime_report_check(v1, "docker")["ok"] is True  # the shim is containerd's matter only
