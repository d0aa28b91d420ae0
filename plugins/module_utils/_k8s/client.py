# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The one way from module options to the API server, and the verbs modules need over it.

:func:`connect` turns ``kubeconfig``/``context``/``request_timeout`` into an ApiClient (:class:`BoundedApiClient`) on
which every request is bounded, API discovery included; :class:`Client` gets, lists, applies (server-side), deletes,
reads pod logs and waits with watches, retrying with the one policy of :mod:`.retry`. This is the only file of the
collection that imports the ``kubernetes`` library; nothing here knows about GPUs.

Why the bound is set here and not per call: the library's requests have no timeout unless the caller passes
``_request_timeout`` (``kubernetes/client/rest.py``: ``timeout = None`` unless ``_request_timeout`` is set, and
urllib3 then waits for ever), and the dynamic client's discovery (``kubernetes/dynamic/discovery.py``:
``self.client.request('get', '/version', ...)``, ``GET /apis``, ``GET /apis/<group>/<version>``) passes none
(kubernetes-client/python#1961; client-go bounds its discovery itself, kubernetes/kubernetes#62733). urllib3's own
default of 3 retries would also ask an unanswering server again three times on every GET.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import logging
import os
import re
import stat
import threading
import time
import traceback
from urllib.parse import parse_qsl, quote, urlsplit

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import K8sError, WaitTimeout
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import retry
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.args import DEFAULT_REQUEST_TIMEOUT
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.objects import MANAGER, compare, key

try:
    from kubernetes import client as _client, config as _config, watch as _watch
    from kubernetes.client.rest import ApiException
    from kubernetes.dynamic import DynamicClient, LazyDiscoverer as _LazyDiscoverer
    from kubernetes.dynamic.exceptions import DynamicApiError, NotFoundError, ResourceNotFoundError
    from urllib3.exceptions import HTTPError as _Urllib3Error, MaxRetryError as _MaxRetryError
    from urllib3.exceptions import NewConnectionError as _NewConnectionError, TimeoutError as _Urllib3Timeout
    from urllib3.util.retry import Retry as _Retry
    from yaml import YAMLError as _YAMLError
    _ApiClientBase = _client.ApiClient
    KUBERNETES_IMPORT_ERROR = None
except ImportError:
    KUBERNETES_IMPORT_ERROR = traceback.format_exc()
    _client = _config = _watch = DynamicClient = None
    _ApiClientBase = _Retry = _LazyDiscoverer = object  # the classes below are then defined but never used

    class _MaxRetryError(Exception):
        reason = None

    class _Urllib3Timeout(Exception):
        pass

    class _NewConnectionError(_Urllib3Timeout):
        pass

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
# The API discovery requests (the dynamic client's, before it can name a resource's path).
_DISCOVERY = re.compile(r"^/(version|api(/v1)?|apis(/[^/]+){0,2})/?$")
WRITES_SHOWN = 10  # how many of the run's changes an unanswered-request message names


class NoAnswer(K8sError):
    """The API server did not answer a request in time (connect or read timeout): the module's run ends there."""


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


class _ExecPluginErrors(logging.Handler):
    """The errors the kubeconfig loader logs instead of raising while it loads credentials.

    ``kubernetes/config/kube_config.py`` runs a user's ``exec`` credential plugin inside ``_load_from_exec_plugin``,
    catches whatever goes wrong (a missing command is ``FileNotFoundError``) and only calls ``logging.error(str(e))``;
    the client then goes on without credentials, and the API server answers ``403 ... system:anonymous``. Those three
    ``logging.error`` calls are the only logging of that file, so every record it logs while a kubeconfig loads is an
    exec plugin's failure. Used as a context manager around the load (on the root logger, where the library logs)."""

    def __init__(self):
        super(_ExecPluginErrors, self).__init__(logging.ERROR)
        self.messages = []

    def emit(self, record):
        if os.path.basename(record.pathname or "") == "kube_config.py":
            self.messages.append(record.getMessage())

    def __enter__(self):
        logging.getLogger().addHandler(self)
        return self

    def __exit__(self, *exc_info):
        logging.getLogger().removeHandler(self)
        return False


def exec_plugin_reason(message):
    """What an exec credential plugin's failure means, from the loader's logged message, in one line."""
    missing = re.search(r"\[Errno 2\] No such file or directory: '([^']+)'", message)
    if missing:
        return ("its exec credential plugin %r is not installed on the host that runs the module (not found on its "
                "PATH); install it there, or use a kubeconfig whose user has a token or a client certificate"
                % missing.group(1))
    denied = re.search(r"\[Errno 13\] Permission denied: '([^']+)'", message)
    if denied:
        return "its exec credential plugin %r cannot be run (permission denied)" % denied.group(1)
    first = (message.strip().splitlines() or ["no message"])[0]
    return "its exec credential plugin failed, so there are no credentials: %s" % first[:300]


class _Retries(_Retry):
    """urllib3's own retries (its default: 3 in all, at once) for a refused or reset connection, but none after a
    timeout: a server that did not answer within the request's timeout is not asked again (urllib3 would ask it three
    times more on every GET, four timeouts in all)."""

    def increment(self, method=None, url=None, response=None, error=None, _pool=None, _stacktrace=None):
        if _is_timeout(error):
            raise _MaxRetryError(_pool, url, error)
        return super(_Retries, self).increment(method=method, url=url, response=response, error=error, _pool=_pool,
                                               _stacktrace=_stacktrace)


def _is_timeout(error):
    """Whether a urllib3 error is a connect or read timeout. Not a refused connection: urllib3's NewConnectionError
    is a subclass of its ConnectTimeoutError (for history's sake), and a refused connection is an API server that is
    away (restarting), which the waits retry."""
    return isinstance(error, _Urllib3Timeout) and not isinstance(error, _NewConnectionError)


def _timed_out(exc):
    return _is_timeout(exc) or (isinstance(exc, _MaxRetryError) and _is_timeout(getattr(exc, "reason", None)))


def _streams(url):
    """Whether a request's answer is read as a stream by its caller (a watch), not at once."""
    return any(k in ("watch", "follow") and str(v).lower() == "true" for k, v in parse_qsl(urlsplit(url).query))


def describe(method, url):
    """``GET /apis/apps/v1`` (API discovery), ``PATCH /api/v1/nodes/a``: a request as messages name it (the path
    only: a query holds selectors, never credentials, but is noise)."""
    path = urlsplit(url).path or "/"
    return "%s %s%s" % (method.upper(), path, " (API discovery)" if _DISCOVERY.match(path) else "")


class BoundedApiClient(_ApiClientBase):
    """An ApiClient whose every request is bounded, and which remembers what the run did, for the message that ends
    it when the API server stops answering.

    A request that passes no ``_request_timeout`` (the dynamic client's discovery and verbs, :class:`CoreRequests`)
    gets ``(timeout, timeout)``: at most ``timeout`` seconds to connect, then at most ``timeout`` seconds of silence
    while the answer is read, body included (read here, within the timeout, unless the request is a watch). A request
    that times out is not retried (:class:`_Retries`) and raises :class:`NoAnswer`, naming the server, the request and
    what the run had done; after one that used the default, every later request of the run fails the same way at once
    (a cleanup after the failure then does not wait out a timeout per request). A caller that passes its own
    ``_request_timeout`` (a watch; a pod log, which the API server fetches from a kubelet) gets :class:`NoAnswer` too,
    but the server is not written off."""

    def __init__(self, configuration=None, timeout=DEFAULT_REQUEST_TIMEOUT):
        super(BoundedApiClient, self).__init__(configuration)
        self.request_timeout = timeout
        self.answered = 0
        self.changes = []  # the writes the server accepted, as describe() names them (dry runs are not changes)
        self.unanswered = None  # the message of the request that ended the run
        self._lock = threading.Lock()

    @property
    def server(self):
        return self.configuration.host

    def call_api(self, method, url, header_params=None, body=None, post_params=None, _request_timeout=None):
        if self.unanswered is not None:
            raise NoAnswer(self.unanswered, server=self.server)
        timeout = (self.request_timeout, self.request_timeout) if _request_timeout is None else _request_timeout
        try:
            response = super(BoundedApiClient, self).call_api(method, url, header_params=header_params, body=body,
                                                              post_params=post_params, _request_timeout=timeout)
            if not _streams(url):
                response.read()
        except _Urllib3Error as exc:  # pylint: disable=catching-non-exception
            if not _timed_out(exc):
                raise
            message = self.no_answer(method, url, timeout, _request_timeout is None)
            if _request_timeout is None:
                self.unanswered = message
            raise NoAnswer(message, server=self.server)
        with self._lock:
            self.answered += 1
            query = dict(parse_qsl(urlsplit(url).query))
            if method.upper() not in ("GET", "HEAD") and 200 <= response.status <= 299 and not query.get("dryRun"):
                self.changes.append(describe(method, url))
        return response

    def no_answer(self, method, url, timeout, default):
        """The message of a request that timed out: the server, the request, the bound, what the run had done."""
        seconds = timeout[1] if isinstance(timeout, tuple) else timeout
        bound = "%gs%s" % (seconds, " (request_timeout)" if default else "")
        with self._lock:
            answered, changes = self.answered, list(self.changes)
        if not answered:
            done = "it had answered no request of this run, so nothing was changed"
        elif not changes:
            done = "before that it answered %d request(s) of this run, none of them a change" % answered
        else:
            shown = ", ".join(changes[:WRITES_SHOWN])
            more = " and %d more" % (len(changes) - WRITES_SHOWN) if len(changes) > WRITES_SHOWN else ""
            done = ("before that it answered %d request(s) of this run and accepted %d change(s), which stay: %s%s"
                    % (answered, len(changes), shown, more))
        return ("the Kubernetes API server %s did not answer %s within %s; %s. Check that it is up and reachable "
                "from this host, then run again (the module is idempotent); raise request_timeout only if it is just "
                "slow" % (self.server, describe(method, url), bound, done))


def _private_dir(path):
    """``path``, a directory of this user's alone (made with mode 0700 when missing), or None where it cannot be:
    another owner, a link, or group or other access that cannot be taken away."""
    try:
        os.makedirs(path, 0o700)
    except OSError:
        pass
    try:
        found = os.lstat(path)
        if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.geteuid():
            return None
        if stat.S_IMODE(found.st_mode) & 0o077:
            os.chmod(path, 0o700)
    except OSError:
        return None
    return path


def discovery_cache_file(host, environ=None):
    """Where the dynamic client keeps what it discovered of the API server ``host``: a file in the user's own cache
    directory (``$XDG_CACHE_HOME``, else ``~/.cache``, then ``kubegpu/discovery``, mode 0700), as kubectl keeps its
    discovery under ``~/.kube/cache/discovery``; or None when there is no such private place (nothing is then kept on
    disk).

    Never the library's default, ``<tmp>/osrcp-<md5 of the host>.json``: any local user can create that name first,
    and the client would read the resource paths it serves from a file someone else wrote."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_CACHE_HOME") or ""
    if not os.path.isabs(base):
        home = os.path.expanduser("~")
        if not os.path.isabs(home):
            return None
        base = os.path.join(home, ".cache")
    directory = _private_dir(os.path.join(base, "kubegpu", "discovery"))
    if directory is None:
        return None
    return os.path.join(directory, hashlib.sha256(host.encode("utf-8")).hexdigest()[:32] + ".json")


class _InMemoryDiscoverer(_LazyDiscoverer):
    """The dynamic client's lazy discovery, kept in memory only (no private cache directory to be had)."""

    def __init__(self, client, cache_file):
        # a file that cannot exist (a path under /dev/null): the library neither reads one nor, below, writes one
        super(_InMemoryDiscoverer, self).__init__(client, os.path.join(os.devnull, "kubegpu-discovery.json"))

    def _write_cache(self):
        pass


def connect(kubeconfig=None, context=None, pool_size=None, timeout=DEFAULT_REQUEST_TIMEOUT):
    """A :class:`BoundedApiClient`: from ``kubeconfig``/``context`` when either is given, else the in-cluster service
    account (falling back to the default kubeconfig outside a cluster). ``pool_size``: HTTP connections kept per host,
    for callers that send requests in parallel; ``timeout``: the bound of every request (connect, then read). Errors
    never quote the file's contents."""
    if KUBERNETES_IMPORT_ERROR:
        raise K8sError("the kubernetes Python library is required", exception=KUBERNETES_IMPORT_ERROR)
    configuration = _client.Configuration()
    where = "kubeconfig %s" % kubeconfig if kubeconfig else "the default kubeconfig / in-cluster config"
    where += " (context %s)" % context if context else ""
    try:
        with _ExecPluginErrors() as exec_errors:
            if kubeconfig or context:
                _config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration,
                                         persist_config=False)
            else:
                try:
                    _config.load_incluster_config(client_configuration=configuration)
                except _config.ConfigException:
                    _config.load_kube_config(client_configuration=configuration, persist_config=False)
    except (_config.ConfigException, OSError, ValueError, TypeError, _YAMLError) as exc:
        if isinstance(exc, _YAMLError):
            # only the position: a parser's message can quote the file, and a kubeconfig holds credentials
            mark = getattr(exc, "problem_mark", None)
            reason = "not valid YAML" + (" (line %d, column %d)" % (mark.line + 1, mark.column + 1) if mark else "")
        elif isinstance(exc, _config.ConfigException):
            reason = str(exc).splitlines()[0]
        else:
            reason = type(exc).__name__
        raise K8sError("cannot load %s: %s" % (where, reason))
    if exec_errors.messages:
        raise K8sError("cannot load %s: %s" % (where, exec_plugin_reason(exec_errors.messages[0])))
    if pool_size:
        configuration.connection_pool_maxsize = max(int(pool_size), 1)
    configuration.retries = _Retries(total=3)
    return BoundedApiClient(configuration, timeout=timeout or DEFAULT_REQUEST_TIMEOUT)


def from_params(params, field_manager=MANAGER, pool_size=None, **kwargs):
    """The :class:`Client` of a module, from its ``kubeconfig``, ``context`` and ``request_timeout`` options
    (:data:`.args.AUTH_ARG_SPEC`)."""
    return Client(connect(params.get("kubeconfig"), params.get("context"), pool_size=pool_size,
                          timeout=params.get("request_timeout") or DEFAULT_REQUEST_TIMEOUT),
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

    def get_code(self, _request_timeout=None, **_ignored):
        """``GET /version``: the API server's build (``gitVersion``, ``major``, ``minor``), as ``VersionApi.get_code``."""
        return self._request("GET", "/version", timeout=_request_timeout)

    def get_api_group(self, group, _request_timeout=None, **_ignored):
        """``GET /apis/<group>``: the group's served versions (an ``APIGroup``); 404 when the server serves none."""
        return self._request("GET", "/apis/" + quote(group, safe=""), timeout=_request_timeout)

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
            host = self.api_client.configuration.host
            cache_file = discovery_cache_file(host)

            def discover():
                if cache_file is None:
                    return DynamicClient(self.api_client, discoverer=_InMemoryDiscoverer)
                return DynamicClient(self.api_client, cache_file=cache_file)
            # a module that starts while the API server restarts waits it out as its other requests do
            self._dynamic = self._retried("cannot reach the Kubernetes API server %s" % host, discover)
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

    def _retried(self, what, call, **details):
        """``call()``, again after each retriable error (a refused or reset connection, 409, 429, 5xx) as the
        client's :class:`.retry.RetryPolicy` says (``Retry-After`` first): an API server that restarts or throttles
        is waited out for as long as ``wait`` waits it out. Then, or at once for any other API error,
        :class:`K8sError` ``<what>: <the server's error>``, with the errors in a row when there were several.
        Only for requests that may be sent twice: reads, server-side apply, delete."""
        errors = 0
        first_error = None
        while True:
            try:
                return call()
            except TRANSIENT as exc:  # pylint: disable=catching-non-exception
                if not retry.retriable(exc):
                    raise K8sError("%s: %s" % (what, api_error_text(exc)), **details)
                errors += 1
                now = self.clock()
                if errors == 1:
                    first_error = now
                if not self.policy.should_retry(errors, exc):
                    raise K8sError("%s: %s (%d errors in a row over %.1fs)"
                                   % (what, api_error_text(exc), errors, now - first_error), **details)
                self.sleep(self.policy.pause(errors, exc))

    def get(self, api_version, kind, name, namespace=None):
        """The live object as a dict, or None."""
        res = self.resource(api_version, kind)

        def call():
            try:
                return res.get(name=name, namespace=namespace if res.namespaced else None).to_dict()
            except NotFoundError:
                return None
        return self._retried("cannot read %s %s" % (kind, name), call)

    def list(self, api_version, kind, namespace=None, label_selector=None, field_selector=None, resource_version=None):
        """Every object of ``kind`` (in ``namespace``; every namespace when None), as dicts. ``resource_version``
        "0": served from the API server's watch cache, however old."""
        res = self.resource(api_version, kind)
        extra = {"resource_version": resource_version} if resource_version is not None else {}

        def call():
            try:
                return res.get(namespace=namespace if res.namespaced else None, label_selector=label_selector,
                               field_selector=field_selector, **extra)
            except NotFoundError:
                return None
        found = self._retried("cannot list %s" % kind, call)
        if found is None:
            return []
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
        # server-side apply with our field manager is idempotent: sending it again after a lost answer is safe
        after = self._retried("cannot apply %s" % key(obj), lambda: self.dynamic.server_side_apply(res, **kwargs).to_dict(),
                              object=key(obj))
        return compare(before, after), before, after

    def delete(self, api_version, kind, name, namespace=None, dry_run=False):
        """Delete an object (background propagation). Returns True when there was one."""
        res = self.resource(api_version, kind)
        kwargs = {"propagation_policy": "Background"}
        if dry_run:
            kwargs["dry_run"] = "All"

        def call():
            try:
                res.delete(name=name, namespace=namespace if res.namespaced else None, **kwargs)
            except NotFoundError:
                return False
            return True
        return self._retried("cannot delete %s %s" % (kind, name), call)

    def server_version(self):
        """The API server's ``/version`` answer as a dict (``gitVersion``, ``major``, ``minor``)."""
        response = self._retried("cannot read the API server's version", self.core.get_code)
        return json.loads(response.data or b"{}")

    def served_versions(self, group):
        """The versions of API ``group`` the server serves (``["v1", "v1beta2"]``; empty when none), from discovery,
        as Helm's ``.Capabilities.APIVersions`` sees them."""
        def call():
            try:
                return json.loads(self.core.get_api_group(group).data or b"{}")
            except TRANSIENT as exc:  # pylint: disable=catching-non-exception
                if getattr(exc, "status", None) == 404:
                    return {}
                raise
        answer = self._retried("cannot read which versions of %s the API server serves" % group, call)
        return [v.get("version") for v in answer.get("versions") or [] if v.get("version")]

    def pod_log(self, name, namespace, container=None, timeout=30):
        """``(text, None)``, or ``(None, why)`` when the log cannot be read (a kubelet the API server cannot reach)."""
        try:
            text = self.core.read_namespaced_pod_log(name, namespace, container=container, _request_timeout=timeout)
        except NoAnswer as exc:  # its own timeout: the API server asks the node's kubelet, which may be the slow one
            return None, str(exc)
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
