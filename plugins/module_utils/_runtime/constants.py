# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""Facts about the container runtimes that code outside their adapters needs too (the filter plugins, which run in
every worker of the controller and should import nothing heavy), written once."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# containerd's runc shim v2, the runtime_type of the runtimes containerd's CRI runs (and of the NVIDIA runtime entry)
RUNC_V2 = "io.containerd.runc.v2"
