# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """The NVIDIA runtime as the filters that judge a runtime's report take it (runtime_report_check,
    runtime_decisions): the defaults are RUNTIME_NAME and RUNTIME_PATH of _nvidia/constants.py."""

    DOCUMENTATION = r"""
options:
  name:
    description: The NVIDIA runtime's name in the daemons' configuration.
    type: str
    default: nvidia
  path:
    description: The NVIDIA runtime's binary.
    type: str
    default: /usr/bin/nvidia-container-runtime
  set_as_default:
    description: Whether the NVIDIA runtime must be the daemons' default.
    type: bool
    default: true
"""
