# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""One request (or a few) per node, on a few threads, that stop starting new ones once the API server is gone.

Found by the fault suite (tests/faults, api-server-gone): with kube-apiserver stopped for 50 s during the labels of
500 nodes, each of 16 threads spent its retries (about 12 s) on one node, failed it, and went on to the next, so the
module failed only when the server came back, 58 s after it went, where a module must fail within its retries. Once
one node's request fails with an error that says the server itself did not answer (no HTTP status, or a retriable
server-side status after its retries), the nodes not started yet are left alone: every one of them would fail the
same way, after as long again."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import threading

from concurrent.futures import ThreadPoolExecutor

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import K8sError
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import retry

_NOT_STARTED = object()


def server_gone(exc):
    """Whether a failed request says the API server did not answer (rather than something about the node): a
    connection error (no HTTP status) or a server-side or throttled status, which the retries already waited out."""
    status = getattr(exc, "status", None)
    return retry.retriable(exc) and status != 409


def each_node(names, work, workers):
    """Call ``work(name)`` for each of ``names`` on at most ``workers`` threads. Returns ``(results, errors,
    not_started)``: ``{name: what work returned}``, the :class:`K8sError` raised (in the order of ``names``), and the
    names left alone once a call failed with :func:`server_gone`."""
    stop = threading.Event()

    def one(name):
        if stop.is_set():
            return _NOT_STARTED
        try:
            return work(name)
        except K8sError as exc:
            if server_gone(exc):
                stop.set()
            raise

    results, errors, not_started = {}, [], []
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(names)))) as pool:
        futures = [(name, pool.submit(one, name)) for name in names]
        for name, future in futures:
            try:
                value = future.result()
            except K8sError as exc:
                errors.append(exc)
                continue
            if value is _NOT_STARTED:
                not_started.append(name)
            else:
                results[name] = value
    return results, errors, not_started
