# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The one retry policy of the collection's API calls: which errors are worth another try, and how long to pause."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import random

PAUSE_FIRST = 0.5  # seconds before the first retry; doubled for each further error in a row
PAUSE_CAP = 4.0
RETRY_AFTER_CAP = 10.0  # a server's Retry-After is honoured up to this many seconds
# Conflict, throttled, and the server-side errors a busy or restarting API server answers with.
RETRY_STATUSES = frozenset((409, 429, 500, 502, 503, 504))
# A server that throttles (429 with Retry-After: API Priority and Fairness turning away what its priority level cannot
# seat, k8s.io/apiserver v0.36.3 pkg/server/filters/priority-and-fairness.go) answers, and asks to be asked again: it
# is not gone. Such answers in a row are retried up to this many times whatever the caller's own budget (client-go
# retries them 10 times, k8s.io/client-go v0.36.3 rest/request.go maxRetries and with_retry.go checkWait; a level of
# a few seats shared by dozens of parallel PATCHes turns one request away more often than that: tests/faults, throttled).
THROTTLED_RETRIES = 30


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


def throttled(exc):
    """Whether an API error is a throttled answer: 429 with a ``Retry-After`` header."""
    return getattr(exc, "status", None) == 429 and retry_after(exc) is not None


def retriable(exc):
    """Whether another try may succeed: a connection error (no HTTP status) or one of :data:`RETRY_STATUSES`."""
    status = getattr(exc, "status", None)
    return not status or status in RETRY_STATUSES


class RetryPolicy(object):
    """How many errors in a row are retried, and the pause before each retry (``Retry-After`` first). A throttled
    answer (:func:`throttled`) is retried up to ``throttled_retries`` times in a row (or ``retries``, if more), after
    its ``Retry-After`` stretched by up to as much again (``jitter()``, 0 to 1): API Priority and Fairness gives every
    request it turns away in one second the same ``Retry-After``, and requests sent back all at once meet the same full
    priority level again."""

    def __init__(self, retries=5, first=PAUSE_FIRST, cap=PAUSE_CAP, throttled_retries=THROTTLED_RETRIES, jitter=None):
        self.retries = retries
        self.first = first
        self.cap = cap
        self.throttled_retries = throttled_retries
        self.jitter = jitter or random.random

    def pause(self, attempt, exc=None):
        wanted = retry_after(exc) if exc is not None else None
        if wanted is None:
            return pause(attempt, self.first, self.cap)
        return wanted * (1 + self.jitter()) if throttled(exc) else wanted

    def should_retry(self, attempt, exc):
        """Whether to try again after error number ``attempt`` in a row, ``exc``."""
        if throttled(exc):
            return attempt <= max(self.retries, self.throttled_retries)
        return attempt <= self.retries and retriable(exc)
