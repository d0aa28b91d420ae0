# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The options of one runtime's configuration with a container runtime of a vendor's registered in it: what
nvidia_runtime_config takes as its options and container_runtime_facts in each entry of its ``plans``. One argument
spec, paired with plugins/doc_fragments/nvidia_runtime_options.py (its ``DOCUMENTATION`` for the former, ``PLANS`` for
the latter): change both together. The registered runtime's name and binary are the caller's (a vendor's constants:
``_nvidia/constants.py``)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime import registry
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.containerd import SUPPORTED_VERSIONS

CONFIG_VERSIONS = ["auto"] + [str(version) for version in SUPPORTED_VERSIONS]
# The options whose defaults depend on the vendor (options_spec's arguments), and the one without a default
VENDOR_OPTIONS = ("runtime_name", "runtime_path")


def options_spec(runtime_name, runtime_path):
    """A fresh argument spec of the runtime options (``_options.module`` rules included: ``absolute``), with the
    registered runtime's name and binary as the defaults of ``runtime_name`` and ``runtime_path``."""
    return dict(
        runtime=dict(type="str", required=True, choices=list(registry.NAMES)),
        config_path=dict(type="path", absolute=True),
        drop_in_path=dict(type="path", absolute=True),
        runtime_name=dict(type="str", default=runtime_name),
        runtime_path=dict(type="str", default=runtime_path),
        set_as_default=dict(type="bool", default=True),
        cdi=dict(type="bool", default=False),
        config_version=dict(type="str", default="auto", choices=list(CONFIG_VERSIONS)),
        state=dict(type="str", default="present", choices=["present", "absent"]),
    )


def defaults():
    """The defaults of the options that do not depend on the vendor (``runtime`` has none: it is required)."""
    return dict((name, spec.get("default")) for name, spec in options_spec(None, None).items()
                if name != "runtime" and name not in VENDOR_OPTIONS)
