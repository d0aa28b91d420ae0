# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: option_errors
short_description: What is wrong with role variables that a role argument spec cannot check
version_added: 0.1.0
author:
  - kubegpu.cluster contributors (@kubegpu)
description:
  - Checks values by the rules the collection's modules keep beside their options - C(minimum), the least value of a
    number (a timeout is 0 or more), and C(absolute), a path that must be absolute (C(~) allowed) - and returns one
    message per value that breaks its rule, naming it. Empty and null values are not checked (not set).
  - A role's C(meta/argument_specs.yml) cannot say either (its schema has no such keys), so each role of the collection
    keeps the rules of its variables in C(vars/main.yml) and checks them with this filter as the first task of every
    entry point (C(tasks/options.yml)).
options:
  _input:
    description: Name to value, for example the role's variables.
    type: dict
    required: true
  rules:
    description: Name to rule, a dict with C(minimum) (a number) or C(absolute) (V(true)).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Refuse a negative timeout or a relative path
  ansible.builtin.assert:
    that: _errors | length == 0
    fail_msg: "{{ _errors | join('; ') }}"
  vars:
    _rules:
      my_wait_timeout: {minimum: 0}
      my_kubeconfig: {absolute: true}
    _errors: "{{ dict(_rules | list | zip(query('ansible.builtin.vars', *(_rules | list)))) | kubegpu.cluster.option_errors(_rules) }}"
"""

RETURN = r"""
_value:
  description: One message per value that breaks its rule; empty when all are fine.
  type: list
  elements: str
  sample:
    - "device_plugin_wait_timeout: must be 0 or more, not -5"
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.kubegpu.cluster.plugins.module_utils import _options


def option_errors(values, rules):
    """See DOCUMENTATION."""
    if not isinstance(values, dict) or not isinstance(rules, dict):
        raise AnsibleFilterError("option_errors: takes a dict of values and a dict of rules")
    unknown = sorted(set(key for rule in rules.values() for key in (rule or {})) - set(_options.RULE_KEYS))
    if unknown:
        raise AnsibleFilterError("option_errors: unknown rule %s (known: %s)" % (", ".join(unknown), ", ".join(_options.RULE_KEYS)))
    return _options.errors(dict(values), dict((name, dict(rule or {})) for name, rule in rules.items()))


class FilterModule(object):
    def filters(self):
        return {"option_errors": option_errors}
