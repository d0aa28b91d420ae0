# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""Every container runtime the collection configures, by name: the one list. A new runtime is a new adapter file
(a :class:`.base.Runtime`) and one line here; the module's choices, its defaults and the role's tables follow (the
role's copies are checked against this list by tests/unit/test_one_place.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import OptionError
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.containerd import Containerd
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.crio import Crio
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.docker import Docker
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.k0s import K0s
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.microk8s import Microk8s
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.rancher import K3s, Rke2

RUNTIMES = dict((adapter.name, adapter) for adapter in (
    Docker(),
    Containerd(),
    Crio(),
    K3s(),
    Rke2(),
    K0s(),
    Microk8s(),
))
NAMES = sorted(RUNTIMES)


def get(name):
    """The adapter of runtime ``name``."""
    try:
        return RUNTIMES[name]
    except KeyError:
        raise OptionError("runtime", "unknown runtime %r (one of: %s)" % (name, ", ".join(NAMES)))
