# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The one way from module options to the API server, and the verbs modules need over it.

:func:`connect` turns ``kubeconfig``/``context`` into an ApiClient; :class:`Client` gets, lists, applies (server-side),
deletes, reads pod logs and waits with watches, retrying with the one policy of :mod:`.retry`. This is the only file
of the collection that imports the ``kubernetes`` library; nothing here knows about GPUs.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import time
import traceback
from urllib.parse import quote

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import K8sError, WaitTimeout
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import retry
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.objects import MANAGER, compare, key

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

# What `run_module(..., requires=REQUIRES)` checks before a Kubernetes module does any work.
REQUIRES = (("kubernetes", KUBERNETES_IMPORT_ERROR),)
# Errors of a request that reached (or tried to reach) the API server; retry.retriable says which are worth a retry.
TRANSIENT = (ApiException, DynamicApiError, _Urllib3Error, OSError)


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


def from_params(params, field_manager=MANAGER, pool_size=None, **kwargs):
    """The :class:`Client` of a module, from its ``kubeconfig`` and ``context`` options (:data:`.args.AUTH_ARG_SPEC`)."""
    return Client(connect(params.get("kubeconfig"), params.get("context"), pool_size=pool_size),
                  field_manager=field_manager, **kwargs)


class CoreRequests(object):
    """The core/v1 calls the collection makes outside the dynamic client (list, read and patch a node; list the pods
    of a node; evict a pod; read a pod's log), with the names and keyword arguments of ``CoreV1Api``'s, sent through the ApiClient's own request path
    (as ``DynamicClient.request`` sends them) and answered as raw responses (``.data``, bytes).

    Why not ``CoreV1Api``: kubernetes 37's typed API checks its arguments with pydantic, and importing it builds the
    models of every core type it names. That costs about 0.6 s of CPU in every module run: ``python -c "from
    kubernetes.client import CoreV1Api"`` took 0.97 s where ``import kubernetes.client`` took 0.38 s (this repository's
    virtualenv, benchmarks in docs/benchmarks.md) - more than all the rest of a labels run that changes nothing."""

    def __init__(self, api_client):
        self.api_client = api_client

    def _request(self, method, path, query=None, body=None, content_type=None, timeout=None):
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        elif body is not None:
            headers["Content-Type"] = "application/json"
        request = self.api_client.param_serialize(method, path, query_params=[q for q in (query or []) if q[1] is not None],
                                                  header_params=headers, body=body, auth_settings=["BearerToken"])
        response = self.api_client.call_api(*request, _request_timeout=timeout)
        response.read()
        if not 200 <= response.status <= 299:
            self.api_client.response_deserialize(response, {})  # raises ApiException: the server's status and message
        return response

    @staticmethod
    def _node_path(name=None):
        return "/api/v1/nodes" + ("/" + quote(name, safe="") if name else "")

    def list_node(self, limit=None, _continue=None, label_selector=None, _request_timeout=None, **_ignored):
        return self._request("GET", self._node_path(), query=[("limit", limit), ("continue", _continue),
                                                              ("labelSelector", label_selector)],
                             timeout=_request_timeout)

    def read_node(self, name, _request_timeout=None, **_ignored):
        return self._request("GET", self._node_path(name), timeout=_request_timeout)

    def patch_node(self, name, body, field_manager=None, force=None, dry_run=None, _content_type=None,
                   _request_timeout=None, **_ignored):
        query = [("fieldManager", field_manager), ("force", None if force is None else str(bool(force)).lower()),
                 ("dryRun", dry_run)]
        return self._request("PATCH", self._node_path(name), query=query, body=body,
                             content_type=_content_type or "application/merge-patch+json", timeout=_request_timeout)

    def list_pod_for_all_namespaces(self, field_selector=None, label_selector=None, _request_timeout=None, **_ignored):
        query = [("fieldSelector", field_selector), ("labelSelector", label_selector)]
        return self._request("GET", "/api/v1/pods", query=query, timeout=_request_timeout)

    def create_namespaced_pod_eviction(self, name, namespace, body, dry_run=None, _request_timeout=None, **_ignored):
        """POST a policy/v1 Eviction: the API server refuses with 429 while a PodDisruptionBudget forbids it."""
        path = "/api/v1/namespaces/%s/pods/%s/eviction" % (quote(namespace, safe=""), quote(name, safe=""))
        return self._request("POST", path, query=[("dryRun", dry_run)], body=body, timeout=_request_timeout)

    def read_namespaced_pod_log(self, name, namespace, container=None, _request_timeout=None, **_ignored):
        """The log as text."""
        path = "/api/v1/namespaces/%s/pods/%s/log" % (quote(namespace, safe=""), quote(name, safe=""))
        response = self._request("GET", path, query=[("container", container)], timeout=_request_timeout)
        return (response.data or b"").decode("utf-8", "replace")


class Client(object):
    """The verbs a module needs, over ``kubernetes.dynamic.DynamicClient`` (and the typed core API for what the
    dynamic client does not serve: pod logs, raw node patches). ``api_client`` is passed in, so tests can hand a stub
    in place of the dynamic client (``dynamic=``), and ``clock``/``sleep`` in place of the real ones (``wait`` pauses
    between retries with ``sleep``)."""

    def __init__(self, api_client=None, field_manager=MANAGER, dynamic=None, retries=5, clock=time.monotonic,
                 sleep=time.sleep, policy=None):
        self.api_client = api_client
        self.field_manager = field_manager
        self.policy = policy or retry.RetryPolicy(retries)
        self.clock = clock
        self.sleep = sleep
        self._dynamic = dynamic
        self._resources = {}
        self._core = None

    @property
    def dynamic(self):
        """The dynamic client, made on first use (it asks the API server what it serves)."""
        if self._dynamic is None:
            try:
                self._dynamic = DynamicClient(self.api_client)
            except TRANSIENT as exc:  # pylint: disable=catching-non-exception
                raise K8sError("cannot reach the Kubernetes API server: %s" % api_error_text(exc))
        return self._dynamic

    @property
    def core(self):
        """The core/v1 calls outside the dynamic client (:class:`CoreRequests`, on the same connection, with no
        discovery: for raw, paged or parallel requests)."""
        if self._core is None:
            self._core = CoreRequests(self.api_client)
        return self._core

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
        except TRANSIENT as exc:  # pylint: disable=catching-non-exception
            raise K8sError("cannot read %s %s: %s" % (kind, name, api_error_text(exc)))

    def list(self, api_version, kind, namespace=None, label_selector=None, field_selector=None):
        res = self.resource(api_version, kind)
        try:
            found = res.get(namespace=namespace if res.namespaced else None, label_selector=label_selector,
                            field_selector=field_selector)
        except NotFoundError:
            return []
        except TRANSIENT as exc:  # pylint: disable=catching-non-exception
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
        except TRANSIENT as exc:  # pylint: disable=catching-non-exception
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
        except TRANSIENT as exc:  # pylint: disable=catching-non-exception
            raise K8sError("cannot delete %s %s: %s" % (kind, name, api_error_text(exc)))
        return True

    def pod_log(self, name, namespace, container=None, timeout=30):
        """``(text, None)``, or ``(None, why)`` when the log cannot be read (a kubelet the API server cannot reach)."""
        try:
            text = self.core.read_namespaced_pod_log(name, namespace, container=container, _request_timeout=timeout)
        except TRANSIENT as exc:  # pylint: disable=catching-non-exception
            return None, api_error_text(exc)
        return text or "", None

    def wait(self, api_version, kind, done, timeout, namespace=None, label_selector=None, field_selector=None):
        """Watch objects until ``done(objects)`` is true, where ``objects`` maps name to dict (list, then watch
        from that list's resourceVersion; relist on 410 Gone). Disconnects and retriable API errors are retried with the
        client's :class:`.retry.RetryPolicy` (at most ``retries`` in a row, each after a pause: ``Retry-After``, else
        0.5 s doubling to at most 4 s, never past the deadline) and a fresh list; then :class:`K8sError` saying the
        API server was lost. Any other API error ends the wait at once. Returns the
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
            except TRANSIENT as exc:  # pylint: disable=catching-non-exception
                if getattr(exc, "status", None) == 410:
                    if self.clock() >= deadline:  # relist at once, but never past the deadline
                        raise WaitTimeout("timed out", last=objects)
                    continue
                if not retry.retriable(exc):
                    raise K8sError("waiting for %s failed: %s" % (kind, api_error_text(exc)), last=objects)
                errors += 1
                now = self.clock()
                if errors == 1:
                    first_error = now
                remaining = deadline - now
                if not self.policy.should_retry(errors, exc) or remaining <= 0:
                    raise K8sError("lost the Kubernetes API server while waiting for %s: %d errors in a row over %.1fs, "
                                   "the last: %s. What was applied stays; run it again once the API server answers: "
                                   "the module is idempotent and resumes from there"
                                   % (kind, errors, now - first_error, api_error_text(exc)), last=objects)
                self.sleep(min(self.policy.pause(errors, exc), remaining))
