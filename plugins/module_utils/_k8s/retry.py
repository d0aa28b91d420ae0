# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The one retry policy of the collection's API calls: which errors are worth another try, and how long to pause."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

PAUSE_FIRST = 0.5  # seconds before the first retry; doubled for each further error in a row
PAUSE_CAP = 4.0
RETRY_AFTER_CAP = 10.0  # a server's Retry-After is honoured up to this many seconds
# Conflict, throttled, and the server-side errors a busy or restarting API server answers with.
RETRY_STATUSES = frozenset((409, 429, 500, 502, 503, 504))


def pause(attempt, first=PAUSE_FIRST, cap=PAUSE_CAP):
    """Seconds to pause before retry number ``attempt`` (1, 2, ...): ``first``, doubling each time, at most ``cap``."""
    return min(cap, first * 2 ** min(max(attempt, 1) - 1, 16))


def retry_after(exc):
    """The seconds an API error's ``Retry-After`` header asks for (at most :data:`RETRY_AFTER_CAP`), or None."""
    headers = getattr(exc, "headers", None) or {}
    try:
        return min(float(headers.get("Retry-After")), RETRY_AFTER_CAP)
    except (TypeError, ValueError):
        return None


def retriable(exc):
    """Whether another try may succeed: a connection error (no HTTP status) or one of :data:`RETRY_STATUSES`."""
    status = getattr(exc, "status", None)
    return not status or status in RETRY_STATUSES


class RetryPolicy(object):
    """How many errors in a row are retried, and the pause before each retry (``Retry-After`` first)."""

    def __init__(self, retries=5, first=PAUSE_FIRST, cap=PAUSE_CAP):
        self.retries = retries
        self.first = first
        self.cap = cap

    def pause(self, attempt, exc=None):
        wanted = retry_after(exc) if exc is not None else None
        return wanted if wanted is not None else pause(attempt, self.first, self.cap)

    def should_retry(self, attempt, exc):
        """Whether to try again after error number ``attempt`` in a row, ``exc``."""
        return attempt <= self.retries and retriable(exc)
