# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""microk8s: the snap's containerd reads ``$SNAP_DATA/args/containerd.toml``, which the snap's wrapper writes again
at every start from ``args/containerd-template.toml`` by replacing ``${SNAP}``, ``${SNAP_DATA}`` and ``${RUNTIME}``
(canonical/microk8s microk8s-resources/wrappers/run-containerd-with-args). The template is the file that lasts (a
snap refresh keeps ``$SNAP_DATA``), and it is a containerd config in all but those placeholders, which sit inside
strings. So this adapter is containerd's, editing the template in place (a placeholder such as
``default_runtime_name = "${RUNTIME}"`` is a value like any other: it comes back on removal), never the rendered file;
the snap's own containerd reads and validates it. NVIDIA's GPU operator takes the same file on microk8s (its
CONTAINERD_CONFIG for microk8s' gpu addon).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import KubegpuError
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.containerd import Containerd, generated_report

SNAP_DATA = "/var/snap/microk8s/current"
SNAP_CONTAINERD = "/snap/microk8s/current/bin/containerd"
_RENDERED = re.compile(r"^/var/snap/microk8s/[^/]+/args/containerd\.toml$")


class Microk8s(Containerd):
    """microk8s: args/containerd-template.toml in place; the snap.microk8s.daemon-containerd service restarts it."""

    name = "microk8s"
    binary = "/snap/bin/microk8s"  # the snap's command, not always on a non-login PATH
    version_args = ("version",)
    service = "snap.microk8s.daemon-containerd"
    services = ("snap.microk8s.daemon-containerd",)
    config_path = SNAP_DATA + "/args/containerd-template.toml"
    drop_in_path = None
    generated = SNAP_DATA + "/args/containerd.toml"  # what the snap renders at every start (the role reads it)

    def report(self, binary, params, host, read, answer):
        """The containerd config it generated at its last start."""
        return generated_report(self.generated, read)

    def owns(self, path):
        if _RENDERED.match(path):
            return "is written again by microk8s from args/containerd-template.toml at every start of its containerd"
        return None

    def check(self, params):
        if params.get("drop_in_path") is not None:
            raise KubegpuError("microk8s: its containerd template is edited in place (the snap renders it with sed at "
                               "every start); leave drop_in_path unset")

    def containerd(self, host):
        return SNAP_CONTAINERD if os.path.exists(SNAP_CONTAINERD) else host.get_bin_path("containerd")
