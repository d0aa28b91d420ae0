# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """The facts modules that run first on a host say whether their interpreter has what the roles need."""

    DOCUMENTATION = r"""
options:
  python_requirements:
    description:
      - Python requirements (as pip writes them, C(nvidia-ml-py==13.615.71)) to look for in the interpreter the module
        runs with; the result's RV(python_unmet) lists those it does not have.
      - The roles read the host with this first and run the R(kubegpu.cluster.python_env,ansible_collections.kubegpu.cluster.python_env_role)
        role only where something is unmet (or where the module could not run at all), so a host whose virtualenv is
        ready costs no round trip beyond the read itself.
      - An exact pin is compared with the installed version; any other requirement needs C(packaging) (or pip's copy
        of it) and counts as unmet without it.
    type: list
    elements: str
    default: []
"""
