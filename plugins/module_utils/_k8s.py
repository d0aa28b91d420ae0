# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""Generic Kubernetes API helpers: connect, server-side apply with change detection, delete, and wait with watches.

Nothing here knows about GPUs; modules pass plain dicts in and get plain dicts out.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import time
import traceback

try:
    from kubernetes import client as _client, config as _config, watch as _watch
    from kubernetes.client.rest import ApiException
    from kubernetes.dynamic import DynamicClient
    from kubernetes.dynamic.exceptions import DynamicApiError, NotFoundError, ResourceNotFoundError
    from urllib3.exceptions import HTTPError as _Urllib3Error
    from yaml import YAMLError as _YAMLError
    KUBERNETES_IMPORT_ERROR = None
except ImportError:
    KUBERNETES_IMPORT_ERROR = traceback.format_exc()
    _client = _config = _watch = DynamicClient = None

    class ApiException(Exception):  # stand-ins so that except clauses work without the library
        status = None

    class DynamicApiError(Exception):
        status = None

    class NotFoundError(DynamicApiError):
        pass

    class ResourceNotFoundError(Exception):
        pass

    class _Urllib3Error(Exception):
        pass

    class _YAMLError(Exception):
        pass

IGNORED_METADATA = ("resourceVersion", "generation", "managedFields", "creationTimestamp", "uid", "selfLink",
                    "deletionTimestamp", "deletionGracePeriodSeconds")
_TRANSIENT = (ApiException, DynamicApiError, _Urllib3Error, OSError)
RETRY_PAUSE_FIRST = 0.5  # seconds before the first retry of a wait; doubled for each further error in a row
RETRY_PAUSE_CAP = 4.0


class K8sError(Exception):
    """An API call or wait that did not work out; ``details`` go into the module's result."""

    def __init__(self, message, **details):
        self.message = message
        self.details = details
        super(K8sError, self).__init__(message)


class WaitTimeout(K8sError):
    """A wait that ran out of time; ``last`` is the last state seen."""


def api_error_text(exc):
    """The API server's own message for an error, in one line (never request headers or credentials)."""
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None)
    body = getattr(exc, "body", None)
    summary = getattr(exc, "summary", None)
    text = None
    if callable(summary):
        try:
            text = summary()
        except Exception:  # pylint: disable=broad-except
            text = None
    if not text and body:
        try:
            import json
            text = json.loads(body).get("message")
        except Exception:  # pylint: disable=broad-except
            text = None
    if not status:
        return str(text or reason or str(exc).splitlines()[0])
    head = "HTTP %s %s" % (status, reason) if reason else "HTTP %s" % status
    return "%s: %s" % (head, text) if text else head


def connect(kubeconfig=None, context=None, pool_size=None):
    """An ApiClient: from ``kubeconfig``/``context`` when either is given, else the in-cluster service account
    (falling back to the default kubeconfig outside a cluster). ``pool_size``: HTTP connections kept per host, for
    callers that send requests in parallel. Errors never quote the file's contents."""
    if KUBERNETES_IMPORT_ERROR:
        raise K8sError("the kubernetes Python library is required", exception=KUBERNETES_IMPORT_ERROR)
    configuration = _client.Configuration()
    try:
        if kubeconfig or context:
            _config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration,
                                     persist_config=False)
        else:
            try:
                _config.load_incluster_config(client_configuration=configuration)
            except _config.ConfigException:
                _config.load_kube_config(client_configuration=configuration, persist_config=False)
    except (_config.ConfigException, OSError, ValueError, TypeError, _YAMLError) as exc:
        where = "kubeconfig %s" % kubeconfig if kubeconfig else "the default kubeconfig / in-cluster config"
        if isinstance(exc, _YAMLError):
            # only the position: a parser's message can quote the file, and a kubeconfig holds credentials
            mark = getattr(exc, "problem_mark", None)
            reason = "not valid YAML" + (" (line %d, column %d)" % (mark.line + 1, mark.column + 1) if mark else "")
        elif isinstance(exc, _config.ConfigException):
            reason = str(exc).splitlines()[0]
        else:
            reason = type(exc).__name__
        raise K8sError("cannot load %s%s: %s" % (where, " (context %s)" % context if context else "", reason))
    if pool_size:
        configuration.connection_pool_maxsize = max(int(pool_size), 1)
    return _client.ApiClient(configuration)


def key(obj):
    """``Kind/namespace/name`` (``Kind/name`` for cluster-scoped objects)."""
    meta = obj.get("metadata", {})
    parts = [obj.get("kind"), meta.get("namespace"), meta.get("name")]
    return "/".join(p for p in parts if p)


def normalize(obj):
    """``obj`` without what the server changes on its own (status, versions, managed fields, timestamps)."""
    if obj is None:
        return None
    out = copy.deepcopy(obj)
    out.pop("status", None)
    meta = out.get("metadata", {})
    for field in IGNORED_METADATA:
        meta.pop(field, None)
    annotations = meta.get("annotations") or {}
    annotations.pop("kubectl.kubernetes.io/last-applied-configuration", None)
    if not annotations:
        meta.pop("annotations", None)
    return out


def compare(before, after):
    """``created``, ``updated`` or ``unchanged`` from an object before and after a write."""
    if before is None:
        return "created" if after is not None else "unchanged"
    return "unchanged" if normalize(before) == normalize(after) else "updated"


def retry_pause(attempt, first=RETRY_PAUSE_FIRST, cap=RETRY_PAUSE_CAP):
    """Seconds to pause before retry number ``attempt`` (1, 2, ...): ``first``, doubling each time, at most ``cap``."""
    return min(cap, first * 2 ** min(max(attempt, 1) - 1, 16))


class Client(object):
    """The verbs a module needs, over ``kubernetes.dynamic.DynamicClient``. ``api_client`` is passed in, so tests
    can hand a stub in place of the dynamic client (``dynamic=``), and ``clock``/``sleep`` in place of the real
    ones (``wait`` pauses between retries with ``sleep``)."""

    def __init__(self, api_client=None, field_manager="kubegpu.cluster", dynamic=None, retries=5, clock=time.monotonic,
                 sleep=time.sleep):
        self.field_manager = field_manager
        self.retries = retries
        self.clock = clock
        self.sleep = sleep
        try:
            self.dynamic = dynamic if dynamic is not None else DynamicClient(api_client)
        except _TRANSIENT as exc:  # pylint: disable=catching-non-exception
            raise K8sError("cannot reach the Kubernetes API server: %s" % api_error_text(exc))
        self._resources = {}

    def resource(self, api_version, kind):
        cache_key = (api_version, kind)
        if cache_key not in self._resources:
            try:
                self._resources[cache_key] = self.dynamic.resources.get(api_version=api_version, kind=kind)
            except ResourceNotFoundError:
                raise K8sError("the API server does not serve %s %s" % (api_version, kind))
        return self._resources[cache_key]

    def get(self, api_version, kind, name, namespace=None):
        """The live object as a dict, or None."""
        res = self.resource(api_version, kind)
        try:
            return res.get(name=name, namespace=namespace if res.namespaced else None).to_dict()
        except NotFoundError:
            return None
        except _TRANSIENT as exc:  # pylint: disable=catching-non-exception
            raise K8sError("cannot read %s %s: %s" % (kind, name, api_error_text(exc)))

    def list(self, api_version, kind, namespace=None, label_selector=None, field_selector=None):
        res = self.resource(api_version, kind)
        try:
            found = res.get(namespace=namespace if res.namespaced else None, label_selector=label_selector,
                            field_selector=field_selector)
        except NotFoundError:
            return []
        except _TRANSIENT as exc:  # pylint: disable=catching-non-exception
            raise K8sError("cannot list %s: %s" % (kind, api_error_text(exc)))
        return [item.to_dict() if hasattr(item, "to_dict") else item for item in found.to_dict().get("items", [])]

    def apply(self, obj, dry_run=False):
        """Server-side apply ``obj`` (force, our field manager). Returns ``(action, before, after)``."""
        meta = obj["metadata"]
        before = self.get(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))
        res = self.resource(obj["apiVersion"], obj["kind"])
        kwargs = dict(body=obj, name=meta["name"], namespace=meta.get("namespace") if res.namespaced else None,
                      force_conflicts=True, field_manager=self.field_manager)
        if dry_run:
            kwargs["dry_run"] = "All"
        try:
            after = self.dynamic.server_side_apply(res, **kwargs).to_dict()
        except _TRANSIENT as exc:  # pylint: disable=catching-non-exception
            raise K8sError("cannot apply %s: %s" % (key(obj), api_error_text(exc)), object=key(obj))
        return compare(before, after), before, after

    def delete(self, api_version, kind, name, namespace=None, dry_run=False):
        """Delete an object (background propagation). Returns True when there was one."""
        res = self.resource(api_version, kind)
        kwargs = {"propagation_policy": "Background"}
        if dry_run:
            kwargs["dry_run"] = "All"
        try:
            res.delete(name=name, namespace=namespace if res.namespaced else None, **kwargs)
        except NotFoundError:
            return False
        except _TRANSIENT as exc:  # pylint: disable=catching-non-exception
            raise K8sError("cannot delete %s %s: %s" % (kind, name, api_error_text(exc)))
        return True

    def wait(self, api_version, kind, done, timeout, namespace=None, label_selector=None, field_selector=None):
        """Watch objects until ``done(objects)`` is true, where ``objects`` maps name to dict (list, then watch
        from that list's resourceVersion; relist on 410 Gone). At most :attr:`retries` API errors or disconnects
        in a row are retried, each after a pause (:func:`retry_pause`: 0.5 s, doubling, at most 4 s, never past the
        deadline) and with a fresh list; then :class:`K8sError` saying the API server was lost. Returns the
        objects; raises :class:`WaitTimeout` (with ``last``) when ``timeout`` seconds pass first."""
        res = self.resource(api_version, kind)
        ns = namespace if res.namespaced else None
        deadline = self.clock() + timeout
        errors = 0
        first_error = None
        objects = {}
        while True:
            try:
                listed = res.get(namespace=ns, label_selector=label_selector, field_selector=field_selector).to_dict()
                objects = dict((o["metadata"]["name"], o) for o in listed.get("items", []))
                if done(objects):
                    return objects
                remaining = deadline - self.clock()
                if remaining <= 0:
                    raise WaitTimeout("timed out", last=objects)
                watcher = _watch.Watch()
                for event in watcher.stream(res.get, namespace=ns, label_selector=label_selector,
                                            field_selector=field_selector, serialize=False,
                                            resource_version=listed["metadata"].get("resourceVersion"),
                                            timeout_seconds=max(1, int(remaining)),
                                            _request_timeout=remaining + 10):
                    errors = 0
                    item = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        if item.get("code") == 410:
                            break  # too old: relist
                        raise K8sError("watching %s failed: %s" % (kind, item.get("message")))
                    name = (item.get("metadata") or {}).get("name")
                    if event.get("type") == "DELETED":
                        objects.pop(name, None)
                    elif name and event.get("type") in ("ADDED", "MODIFIED"):
                        objects[name] = item
                    if done(objects):
                        watcher.stop()
                        return objects
                    if self.clock() >= deadline:
                        watcher.stop()
                        break
                if self.clock() >= deadline:
                    if done(objects):
                        return objects
                    raise WaitTimeout("timed out", last=objects)
            except WaitTimeout:
                raise
            except K8sError:
                raise
            except _TRANSIENT as exc:  # pylint: disable=catching-non-exception
                if getattr(exc, "status", None) == 410:
                    if self.clock() >= deadline:  # relist at once, but never past the deadline
                        raise WaitTimeout("timed out", last=objects)
                    continue
                errors += 1
                now = self.clock()
                if errors == 1:
                    first_error = now
                remaining = deadline - now
                if errors > self.retries or remaining <= 0:
                    raise K8sError("lost the Kubernetes API server while waiting for %s: %d errors in a row over %.1fs, "
                                   "the last: %s. What was applied stays; run it again once the API server answers: "
                                   "the module is idempotent and resumes from there"
                                   % (kind, errors, now - first_error, api_error_text(exc)), last=objects)
                self.sleep(min(retry_pause(errors), remaining))
