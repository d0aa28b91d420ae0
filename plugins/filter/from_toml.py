# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: from_toml
short_description: Parse TOML text, such as the output of C(containerd config dump)
version_added: 0.1.0
author:
  - kubegpu.cluster contributors (@kubegpu)
description:
  - Turns TOML text into data, with Python's C(tomllib) on the controller.
  - The container_toolkit role reads what containerd itself loaded with it.
options:
  _input:
    description: TOML text.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Read what containerd loaded
  ansible.builtin.command: containerd config dump
  register: dump
  changed_when: false

- name: Show the runtimes containerd knows
  ansible.builtin.debug:
    msg: "{{ (dump.stdout | kubegpu.cluster.from_toml)['plugins']['io.containerd.grpc.v1.cri']['containerd']['runtimes'] | list }}"
"""

RETURN = r"""
_value:
  description: The parsed document.
  type: dict
"""

from ansible.errors import AnsibleFilterError

try:
    import tomllib
except ImportError:  # Python < 3.11 on the controller
    tomllib = None


def from_toml(text):
    if tomllib is None:
        raise AnsibleFilterError("from_toml needs Python 3.11 or newer on the controller (tomllib)")
    try:
        return tomllib.loads(str(text))
    except tomllib.TOMLDecodeError as exc:
        raise AnsibleFilterError("from_toml: not valid TOML: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"from_toml": from_toml}
