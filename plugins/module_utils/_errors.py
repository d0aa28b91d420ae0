# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The collection's one error type and the one way an error becomes ``fail_json``.

Everything under ``module_utils`` raises :class:`KubegpuError` (or a subclass) for anything a user can act on: its
message is meant to be read as it is, and its ``details`` go into the module's result. Every module ends through
:func:`run_module`, so an expected error is one clear message and anything else is reported as a bug, with its
traceback.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import traceback


class KubegpuError(Exception):
    """An error a user can act on: ``message`` in one line, ``details`` for the module's result."""

    def __init__(self, message, **details):
        self.message = message
        self.details = details
        super(KubegpuError, self).__init__(message)

    def __str__(self):
        return self.message


class OptionError(KubegpuError):
    """An option value that cannot work (one the argument spec cannot check); names the option."""

    def __init__(self, option, message, **details):
        self.option = option
        super(OptionError, self).__init__("%s: %s" % (option, message), option=option, **details)


class FileError(KubegpuError):
    """A file that cannot be read, written, validated or used as it is: where (file, line and column, field) and why,
    in one line."""

    def __init__(self, message, path=None, field=None, line=None, column=None, **details):
        self.path = path
        self.field = field
        self.line = line
        self.column = column
        where = [str(path)] if path else []
        if line is not None:
            where.append("line %s, column %s" % (line, column))
        if field:
            where.append("field '%s'" % field)
        text = " ".join(message.split())  # one line, whatever a parser said
        super(FileError, self).__init__("%s: %s" % (": ".join(where), text) if where else text, **details)


class ValidationError(FileError):
    """A validation command refused a candidate file; the live file was not touched."""


class K8sError(KubegpuError):
    """An API call or wait that did not work out. ``last``: the last state a wait saw (not part of the result)."""

    def __init__(self, message, last=None, **details):
        self.last = last
        super(K8sError, self).__init__(message, **details)


class WaitTimeout(K8sError):
    """A wait that ran out of time; ``last`` is the last state seen."""


def fail_args(exc):
    """``fail_json`` arguments for any exception: the message and details of ours, a traceback for anything else."""
    if isinstance(exc, KubegpuError):
        return dict(exc.details, msg=str(exc))
    return dict(msg="unexpected error: %s: %s" % (type(exc).__name__, exc), exception=traceback.format_exc())


def run_module(module, work, requires=(), rules=None):
    """Run ``work()`` (which returns the result dict) for ``module`` and end the module with its result.

    ``requires``: ``(library, import error traceback or None[, url])`` tuples; a library that did not import ends the
    module with Ansible's own missing-library message before any work. ``rules``: what the argument spec cannot say
    (:func:`._options.split` took them out of it), checked on ``module.params`` before any work. A ``warnings`` list in
    the result becomes module
    warnings; a ``failed_msg`` key ends the module as failed with that message and the rest of the result (work that
    ran but did not pass, such as a proof).
    """
    # imported here, not at the top: filter plugins (which run in every worker of the controller) use this file's
    # error classes, and ansible.module_utils.basic costs them 0.2 s to import; a module has it already
    from ansible.module_utils.basic import missing_required_lib  # pylint: disable=import-outside-toplevel

    for required in requires:
        library, import_error = required[0], required[1]
        if import_error:
            module.fail_json(msg=missing_required_lib(library, url=required[2] if len(required) > 2 else None),
                             exception=import_error)
            return
    try:
        if rules:
            # imported here: _options raises this file's errors
            from ansible_collections.kubegpu.cluster.plugins.module_utils import _options  # pylint: disable=import-outside-toplevel
            _options.check(module.params, rules)
        result = work()
    except Exception as exc:  # pylint: disable=broad-except  # ours become one message, bugs keep their traceback
        module.fail_json(**fail_args(exc))
        return
    for warning in result.pop("warnings", None) or []:
        module.warn(warning)
    failed_msg = result.pop("failed_msg", None)
    if failed_msg:
        module.fail_json(msg=failed_msg, **result)
        return
    module.exit_json(**result)
