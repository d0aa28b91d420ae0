# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""What an argument spec cannot say about an option, said beside it, and checked before any work.

Two rules, written into a module's spec next to ``type``: ``minimum`` (the least value of a number: a timeout is 0 or
more) and ``absolute`` (a path that must be absolute, ``~`` allowed: a module runs on the managed host in a working
directory nobody chose, so a relative path there means nothing anyone intended). Neither AnsibleModule nor
ansible-test's validate-modules knows them, so :func:`split` takes them out of the spec before AnsibleModule sees it
(validate-modules then refuses a spec that still holds one), and ``run_module(..., rules=...)`` checks them with
:func:`check`. Roles cannot say them in ``meta/argument_specs.yml`` either (ansible-lint's schema allows no other keys);
a role keeps the same rules for its variables in ``vars/main.yml`` and checks them first, through the ``option_errors``
filter, which is :func:`errors`. Pure: no import beyond the standard library and the error type.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import KubegpuError

RULE_KEYS = ("minimum", "absolute")
WHY_ABSOLUTE = "the module runs on the managed host, in a working directory nobody chose"


def split(spec):
    """``(spec, rules)``: the argument spec without the rule keys (a copy; suboptions too), and ``{option: {rule:
    value}}`` (``{"options": {...}}`` for the rules of suboptions)."""
    clean, rules = {}, {}
    for name, option in spec.items():
        option = dict(option)
        rule = dict((key, option.pop(key)) for key in RULE_KEYS if key in option)
        if option.get("options"):
            option["options"], inner = split(option["options"])
            if inner:
                rule["options"] = inner
        clean[name] = option
        if rule:
            rules[name] = rule
    return clean, rules


def _items(value):
    return value if isinstance(value, (list, tuple)) else [value]


def errors(values, rules, prefix=""):
    """One message per value of ``values`` (option or variable name to value) that breaks its rule of ``rules``,
    naming it: ``wait_timeout: must be 0 or more, not -5``. A value left out, None or empty is not checked (the
    option's default or "not set" applies)."""
    found = []
    for name in sorted(rules):
        rule = rules[name]
        value = values.get(name)
        label = prefix + name
        if value is None or value == "":
            continue
        if "minimum" in rule:
            try:
                number = float(value) if not isinstance(value, bool) else None
            except (TypeError, ValueError):
                number = None
            if number is None:
                found.append("%s: must be a number, %s or more, not %r" % (label, rule["minimum"], value))
            elif number < rule["minimum"]:
                found.append("%s: must be %s or more, not %s" % (label, rule["minimum"], value))
        if rule.get("absolute"):
            for path in _items(value):
                if path not in (None, "") and not os.path.isabs(os.path.expanduser(str(path))):
                    found.append("%s: must be an absolute path (or start with ~), not %r: %s" % (label, path, WHY_ABSOLUTE))
        if "options" in rule:
            many = isinstance(value, (list, tuple))
            for index, item in enumerate(_items(value)):
                if isinstance(item, dict):
                    found += errors(item, rule["options"], "%s[%d]." % (label, index) if many else label + ".")
    return found


def check(params, rules):
    """Raise one :class:`KubegpuError` naming every option of ``params`` that breaks its rule; nothing has run yet."""
    found = errors(params, rules or {})
    if found:
        raise KubegpuError("; ".join(found), options=sorted(set(m.split(":", 1)[0] for m in found)))


def module(module_class, argument_spec, **kwargs):
    """``(module, rules)``: ``module_class`` (AnsibleModule, passed in so that this file stays pure) made with
    ``argument_spec`` less its rules, and the rules, for ``run_module(..., rules=rules)``."""
    spec, rules = split(argument_spec)
    return module_class(argument_spec=spec, **kwargs), rules
