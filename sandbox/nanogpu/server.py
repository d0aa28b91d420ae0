# SPDX-License-Identifier: GPL-3.0-or-later
"""The stand-in extender's HTTP side: nano-gpu-scheduler's routes (pkg/routes/routes.go) on loopback.

* ``POST /scheduler/filter``: ``ExtenderArgs`` (``Pod``, ``NodeNames`` - the kube-scheduler sends names only, the
  entry is ``nodeCacheCapable``) -> ``ExtenderFilterResult`` (``NodeNames``, ``FailedNodes``, ``Error``).
* ``POST /scheduler/priorities``: ``ExtenderArgs`` -> ``HostPriorityList`` (``[{"Host", "Score"}]``).
* ``POST /scheduler/bind``: ``ExtenderBindingArgs`` (``PodName``, ``PodNamespace``, ``PodUID``, ``Node``) ->
  ``ExtenderBindingResult`` (``Error``), HTTP 500 when it failed.
* ``GET /version``: ``0.1.0``.

The field names are those of k8s.io/kube-scheduler/extender/v1, which has no JSON tags; Go's decoder matches them
without regard to case, and so does this one.

Whose extender: it answers only while a pod of the real extender's image runs in the cluster (the Deployment
``kubegpu.cluster.nano_gpu_deploy`` makes, which kwok only pretends to run), takes that pod's ``--priority``, and
talks to the API server *as that pod's ServiceAccount* (impersonation), so that the RBAC the module grants is what
the binding is allowed to do - least privilege, checked by use. Without such a pod every call answers an error, as a
kube-scheduler whose extender is not deployed would see.
"""

from __future__ import annotations

import json
import logging
import posixpath
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from kubernetes import client
from kubernetes.client.rest import ApiException

from . import C, dealer

LOG = logging.getLogger("nanogpu")
VERSION = "0.1.0"  # pkg/routes/routes.go
NOT_DEPLOYED = ("no nano-gpu scheduler extender is running: no Running pod of %s (deploy it with "
                "kubegpu.cluster.nano_gpu_deploy)" % C.SCHEDULER_IMAGE_REPOSITORY)


def field(obj, name, default=None):
    """``obj[name]`` matched without regard to case, as Go's encoding/json does."""
    if not isinstance(obj, dict):
        return default
    if name in obj:
        return obj[name]
    lower = name.lower()
    for key, value in obj.items():
        if key.lower() == lower:
            return value
    return default


def extender_container(pod: dict):
    """The container of ``pod`` that runs nano-gpu-scheduler, or None."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        image = container.get("image") or ""
        command = container.get("command") or []
        if C.SCHEDULER_IMAGE_REPOSITORY in image and (
                not command or posixpath.basename(str(command[0])) == posixpath.basename(C.SCHEDULER_COMMAND)):
            return container
    return None


def priority_of(container: dict) -> str:
    """The ``--priority`` flag of the container (Go's flag syntax: ``--priority x``, ``-priority=x``)."""
    argv = [str(a) for a in (container.get("command") or [])[1:] + (container.get("args") or [])]
    value = C.DEFAULT_PRIORITY
    for i, item in enumerate(argv):
        key, sep, rest = item.lstrip("-").partition("=")
        if item.startswith("-") and key == "priority":
            value = rest if sep else (argv[i + 1] if i + 1 < len(argv) else value)
    return value


class Extender:
    """The extender's state: the admin API (to find the extender pod), a client per ServiceAccount it acts as, and a
    lock (upstream's dealer serialises Assume, Score and Bind the same way)."""

    def __init__(self, api_client):
        self.admin = api_client
        self.core = client.CoreV1Api(api_client)
        self.lock = threading.Lock()
        self.clients = {}

    def _json(self, fn, *args, **kwargs):
        return json.loads(fn(*args, _preload_content=False, _request_timeout=(5, 20), **kwargs).data)

    def deployed(self):
        """``(user, priority)`` of the newest Running extender pod, or None."""
        pods = self._json(self.core.list_pod_for_all_namespaces, field_selector="status.phase=Running")["items"]
        found = [p for p in pods if extender_container(p) is not None and not p["metadata"].get("deletionTimestamp")]
        if not found:
            return None
        pod = max(found, key=lambda p: (p["metadata"].get("creationTimestamp") or "", p["metadata"]["name"]))
        user = "system:serviceaccount:%s:%s" % (pod["metadata"]["namespace"],
                                                pod["spec"].get("serviceAccountName") or "default")
        return user, priority_of(extender_container(pod))

    def api(self, user):
        """A CoreV1Api that acts as ``user``."""
        if user not in self.clients:
            api_client = client.ApiClient(self.admin.configuration)
            api_client.set_default_header("Impersonate-User", user)
            self.clients[user] = client.CoreV1Api(api_client)
        return self.clients[user]

    def _view(self, core, node_names):
        """The nodes (by name) and the assumed pods on them, as the extender's informers would have them."""
        nodes = {}
        for name in node_names:
            try:
                nodes[name] = self._json(core.read_node, name)
            except ApiException as exc:
                if exc.status != 404:
                    raise
        selector = "%s=true" % C.ASSUME_KEY
        pods = self._json(core.list_pod_for_all_namespaces, label_selector=selector)["items"]
        return nodes, pods

    def filter(self, args):
        pod, names = field(args, "Pod") or {}, list(field(args, "NodeNames") or [])
        with self.lock:
            who = self.deployed()
            if who is None:
                return {"NodeNames": None, "FailedNodes": None, "Error": NOT_DEPLOYED}
            nodes, pods = self._view(self.api(who[0]), names)
            result = dealer.filter_nodes(pod, names, nodes, pods, who[1])
        LOG.info("filter %s/%s on %s: fits %s, failed %s", (pod.get("metadata") or {}).get("namespace"),
                 (pod.get("metadata") or {}).get("name"), names, result["NodeNames"], result["FailedNodes"])
        return result

    def priorities(self, args):
        pod, names = field(args, "Pod") or {}, list(field(args, "NodeNames") or [])
        with self.lock:
            who = self.deployed()
            if who is None:
                raise RuntimeError(NOT_DEPLOYED)
            nodes, pods = self._view(self.api(who[0]), names)
            return dealer.prioritize(pod, names, nodes, pods, who[1])

    def bind(self, args):
        name, namespace = field(args, "PodName"), field(args, "PodNamespace")
        uid, node = field(args, "PodUID"), field(args, "Node")
        with self.lock:
            who = self.deployed()
            if who is None:
                return NOT_DEPLOYED
            core = self.api(who[0])
            try:
                pod = self._json(core.read_namespaced_pod, name, namespace)
                if pod["metadata"].get("uid") != uid:  # pkg/scheduler/bind.go getPod
                    return "The pod %s in ns %s's uid is %s, and it's not equal with expected %s" % (
                        name, namespace, pod["metadata"].get("uid"), uid)
                nodes, pods = self._view(core, [node])
                if node not in nodes:
                    return "nano gpu scheduler get node failed: node \"%s\" not found" % node
                shares = dealer.demand(pod)
                gpus = dealer.free_percent(nodes[node], pods)
                try:
                    indexes = dealer.choose(gpus, shares, who[1])
                except dealer.NoFit:
                    return "assume %s on %s failed" % ("".join("(%d)" % s for s in shares),
                                                       "".join("(%d)" % g for g in gpus))
                updated = self._json(core.replace_namespaced_pod, name, namespace, dealer.bound_pod(pod, indexes))
                core.create_namespaced_pod_binding(name, namespace, {
                    "apiVersion": "v1", "kind": "Binding",
                    "metadata": {"name": name, "namespace": namespace, "uid": updated["metadata"]["uid"]},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": node}}, _preload_content=False)
            except ApiException as exc:
                return "%s %s: %s" % (exc.status, exc.reason, (exc.body or "")[:300])
        LOG.info("bound %s/%s to %s, GPUs %s", namespace, name, node, indexes)
        return ""


def handler_for(extender: Extender):
    """The request handler class of one server."""

    class Handler(BaseHTTPRequestHandler):
        server_version = "nano-gpu-scheduler-standin"

        def log_message(self, fmt, *args):  # pylint: disable=arguments-differ
            LOG.debug("%s " + fmt, self.address_string(), *args)

        def _send(self, code, body):
            data = body if isinstance(body, bytes) else json.dumps(body).encode("utf-8")
            self.send_response(code)
            self.send_header("Content-Type", "application/json" if not isinstance(body, bytes) else "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # noqa: N802
            if self.path == C.VERSION_PATH:
                self._send(200, VERSION.encode("utf-8"))
            else:
                self._send(404, b"404 page not found")

        def do_POST(self):  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            try:
                args = json.loads(self.rfile.read(length) or b"null")
            except ValueError as exc:
                args, bad = None, str(exc)
            else:
                bad = None
            verb = self.path[len(C.URL_PATH) + 1:] if self.path.startswith(C.URL_PATH + "/") else None
            try:
                if verb == C.FILTER_VERB:
                    self._send(200, {"NodeNames": None, "FailedNodes": None, "Error": bad} if bad
                               else extender.filter(args))
                elif verb == C.PRIORITIZE_VERB:
                    self._send(200, extender.priorities(args)) if not bad else self._send(500, {"error": bad})
                elif verb == C.BIND_VERB:
                    error = bad or extender.bind(args)
                    self._send(500 if error else 200, {"Error": error})
                else:
                    self._send(404, b"404 page not found")
            except Exception as exc:  # pylint: disable=broad-except  # a panic answers 500, as Go's http server does
                LOG.exception("%s failed", self.path)
                self._send(500, {"error": str(exc)})

    return Handler


def serve(api_client, port: int, host: str = "127.0.0.1", ready=None, stop=None):
    """Serve until ``stop`` (a threading.Event) is set; call ``ready()`` once listening."""
    httpd = ThreadingHTTPServer((host, port), handler_for(Extender(api_client)))
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    thread.start()
    LOG.info("nano-gpu extender stand-in listening on http://%s:%d%s", host, port, C.URL_PATH)
    if ready:
        ready()
    stop = stop or threading.Event()
    try:
        while not stop.wait(0.5):
            pass
    finally:
        httpd.shutdown()
        httpd.server_close()
    return 0
