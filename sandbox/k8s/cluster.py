# SPDX-License-Identifier: GPL-3.0-or-later
"""Bring the sandbox control plane up and down.

``up`` starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok, the
device-manager simulator and nano-gpu's extender stand-in (``nanogpu``), all bound to 127.0.0.1 on free ports, with state and logs under
``.sandbox/k8s/`` and the admin kubeconfig at ``.sandbox/kubeconfig``. Every cluster starts
from an empty etcd. ``down`` stops exactly the processes ``up`` recorded in
``.sandbox/k8s/state.json``. ``stop_component`` and ``start_component`` stop one component of a
running sandbox and start it again with the same command line and ports (an API server outage,
for tests). Every wait has a deadline.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import shutil
import socket
import ssl
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from . import nodes as nodes_mod
from . import paths, pki, procs

COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "devsim", "nanogpu")
SERVICE_CIDR = "10.96.0.0/16"
STOP_ORDER = (("devsim", "kwok", "kube-scheduler", "nanogpu", "kube-controller-manager"), ("kube-apiserver",), ("etcd",))


class SandboxError(RuntimeError):
    """The sandbox could not be brought up (or down)."""


class Layout:
    """Paths of one sandbox instance."""

    def __init__(self, state_dir: Path = paths.STATE_DIR, kubeconfig: Path = paths.KUBECONFIG):
        self.state_dir = Path(state_dir)
        self.kubeconfig = Path(kubeconfig)
        self.pki = self.state_dir / "pki"
        self.logs = self.state_dir / "logs"
        self.etcd_data = self.state_dir / "etcd-data"
        self.kubeconfigs = self.state_dir / "kubeconfigs"
        self.state_file = self.state_dir / "state.json"

    def log(self, name: str) -> Path:
        """Return the log file of a component."""
        return self.logs / (name + ".log")


# ----------------------------------------------------------------------------- state


def load_state(layout: Layout):
    """Return the recorded state, or None."""
    try:
        return json.loads(layout.state_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def save_state(layout: Layout, state: dict) -> None:
    """Write the state file atomically."""
    layout.state_dir.mkdir(parents=True, exist_ok=True)
    tmp = layout.state_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(layout.state_file)


@contextlib.contextmanager
def locked(layout: Layout, timeout: float = 180.0):
    """Hold the sandbox lock (one up/down at a time per state directory), waiting at most ``timeout``."""
    layout.state_dir.mkdir(parents=True, exist_ok=True)
    with open(layout.state_dir / ".lock", "w", encoding="utf-8") as handle:
        poll_until("the sandbox lock (another sandbox-up/down is running)", lambda: _try_lock(handle), time.monotonic() + timeout, interval=0.2)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _try_lock(handle) -> bool:
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def free_ports(count: int) -> list:
    """Return ``count`` distinct free TCP ports on 127.0.0.1."""
    socks = []
    try:
        while len(socks) < count:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            socks.append(sock)
        return [s.getsockname()[1] for s in socks]
    finally:
        for sock in socks:
            sock.close()


def write_kubeconfig(path: Path, server: str, ca: Path, cert: Path, key: Path, user: str) -> None:
    """Write a kubeconfig with absolute paths to the CA and client certificate."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kubegpu-sandbox", "cluster": {"server": server, "certificate-authority": str(ca.resolve())}}],
        "users": [{"name": user, "user": {"client-certificate": str(cert.resolve()), "client-key": str(key.resolve())}}],
        "contexts": [{"name": "kubegpu-sandbox", "context": {"cluster": "kubegpu-sandbox", "user": user}}],
        "current-context": "kubegpu-sandbox",
        "preferences": {},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(config, default_flow_style=False), encoding="utf-8")
    tmp.chmod(0o600)
    tmp.replace(path)


# ----------------------------------------------------------------------------- waiting


def poll_until(what: str, check, deadline: float, watch: list = (), interval: float = 0.1, layout: Layout | None = None):
    """Call ``check()`` until it returns a truthy value or ``deadline`` (monotonic) passes.

    Fails early if one of the ``watch`` process records dies.
    """
    pause = threading.Event()
    last_error = None
    while True:
        try:
            result = check()
            if result:
                return result
        except (OSError, ValueError, ssl.SSLError, urllib.error.URLError) as exc:
            last_error = exc
        for record in watch:
            if not procs.is_alive(record):
                raise SandboxError("%s exited while waiting for %s%s" % (record["name"], what, _log_hint(layout, record["name"])))
        if time.monotonic() >= deadline:
            raise SandboxError("timed out waiting for %s (last error: %r)" % (what, last_error))
        pause.wait(interval)


def _log_hint(layout, name):
    if layout is None:
        return ""
    return "; see %s:\n%s" % (layout.log(name), tail(layout.log(name)))


def tail(path: Path, lines: int = 15) -> str:
    """Return the last lines of a file (for error messages)."""
    try:
        data = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join("    " + line for line in data[-lines:])


def http_get(url: str, context=None, timeout: float = 2.0):
    """Return (status, body) of a GET, with HTTP errors returned rather than raised."""
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as resp:  # nosec - loopback only
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")


def client_context(layout: Layout, user: str = "admin") -> ssl.SSLContext:
    """Return an SSL context trusting the sandbox CA and presenting a client certificate."""
    context = ssl.create_default_context(cafile=str(layout.pki / "ca.crt"))
    context.load_cert_chain(str(layout.pki / (user + ".crt")), str(layout.pki / (user + ".key")))
    return context


# ----------------------------------------------------------------------------- command lines


def _argv(layout: Layout, bins: Path, ports: dict, profiles_dir: Path, apf: bool = False) -> dict:
    """Every component's command line. ``apf``: kube-apiserver with API Priority and Fairness on (sandbox/k8s/apf.py;
    off by default, as the sandbox has always run)."""
    pk = layout.pki
    kc = layout.kubeconfigs
    serving = ["--tls-cert-file=%s" % (pk / "loopback-serving.crt"), "--tls-private-key-file=%s" % (pk / "loopback-serving.key")]
    etcd_client = "http://127.0.0.1:%d" % ports["etcd"]
    etcd_peer = "http://127.0.0.1:%d" % ports["etcd-peer"]
    return {
        "etcd": [
            bins / "etcd", "--name=sandbox", "--data-dir=%s" % layout.etcd_data,
            "--listen-client-urls=" + etcd_client, "--advertise-client-urls=" + etcd_client,
            "--listen-peer-urls=" + etcd_peer, "--initial-advertise-peer-urls=" + etcd_peer,
            "--initial-cluster=sandbox=" + etcd_peer, "--initial-cluster-state=new",
            "--unsafe-no-fsync=true", "--quota-backend-bytes=2147483648", "--log-level=warn",
        ],
        "kube-apiserver": [
            bins / "kube-apiserver",
            "--advertise-address=127.0.0.1", "--bind-address=127.0.0.1", "--secure-port=%d" % ports["kube-apiserver"],
            "--etcd-servers=" + etcd_client,
            "--service-cluster-ip-range=" + SERVICE_CIDR,
            "--tls-cert-file=%s" % (pk / "kube-apiserver.crt"), "--tls-private-key-file=%s" % (pk / "kube-apiserver.key"),
            "--client-ca-file=%s" % (pk / "ca.crt"),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--service-account-key-file=%s" % (pk / "sa.pub"), "--service-account-signing-key-file=%s" % (pk / "sa.key"),
            "--requestheader-client-ca-file=%s" % (pk / "front-proxy-ca.crt"), "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            "--proxy-client-cert-file=%s" % (pk / "front-proxy-client.crt"), "--proxy-client-key-file=%s" % (pk / "front-proxy-client.key"),
            "--authorization-mode=Node,RBAC", "--allow-privileged=true",
            # kubelet nodes (sandbox/kubelet): NodeRestriction limits each kubelet to its own Node and pods (it is not
            # on by default: k8s.io/kubernetes pkg/kubeapiserver/options/plugins.go DefaultOffAdmissionPlugins); the
            # API server reaches a kubelet at its node container's address (no DNS for node names here) as a client
            # the kubelet's webhook authorizer lets in
            "--enable-admission-plugins=NodeRestriction", "--kubelet-preferred-address-types=InternalIP,Hostname",
            "--kubelet-client-certificate=%s" % (pk / "apiserver-kubelet-client.crt"),
            "--kubelet-client-key=%s" % (pk / "apiserver-kubelet-client.key"),
            "--endpoint-reconciler-type=none", "--enable-priority-and-fairness=%s" % ("true" if apf else "false"),
            "--profiling=false",
        ],
        "kube-controller-manager": [
            bins / "kube-controller-manager",
            "--kubeconfig=%s" % (kc / "kube-controller-manager.kubeconfig"),
            "--authentication-kubeconfig=%s" % (kc / "kube-controller-manager.kubeconfig"),
            "--authorization-kubeconfig=%s" % (kc / "kube-controller-manager.kubeconfig"),
            "--bind-address=127.0.0.1", "--secure-port=%d" % ports["kube-controller-manager"], *serving,
            "--leader-elect=false", "--use-service-account-credentials=true", "--kube-api-qps=200", "--kube-api-burst=400",
            "--service-account-private-key-file=%s" % (pk / "sa.key"), "--root-ca-file=%s" % (pk / "ca.crt"),
            "--cluster-signing-cert-file=%s" % (pk / "ca.crt"), "--cluster-signing-key-file=%s" % (pk / "ca.key"),
            "--profiling=false",
        ],
        # Its kubeconfig, API rates, leader election and profiling are in --config (scheduler_config_path), with the
        # nano-gpu extender (sandbox/nanogpu): kube-scheduler ignores those flags once --config is given.
        "kube-scheduler": [
            bins / "kube-scheduler", "--config=%s" % scheduler_config_path(layout),
            "--authentication-kubeconfig=%s" % (kc / "kube-scheduler.kubeconfig"),
            "--authorization-kubeconfig=%s" % (kc / "kube-scheduler.kubeconfig"),
            "--bind-address=127.0.0.1", "--secure-port=%d" % ports["kube-scheduler"], *serving,
        ],
        "kwok": [
            bins / "kwok", "--kubeconfig=%s" % (kc / "kwok.kubeconfig"),
            "--config=%s" % (layout.state_dir / "kwok.yaml"),
            "--manage-nodes-with-annotation-selector=%s=fake" % nodes_mod.KWOK_ANNOTATION,
            "--server-address=127.0.0.1:%d" % ports["kwok"], "--node-ip=127.0.0.1",
        ],
        "devsim": [
            sys.executable, "-m", "sandbox.k8s.devsim", "--kubeconfig=%s" % (kc / "devsim.kubeconfig"),
            "--profiles-dir=%s" % profiles_dir,
        ],
        # nano-gpu's scheduler extender, a stand-in (sandbox/nanogpu), acting as the admin impersonating the extender's
        # ServiceAccount
        "nanogpu": [sys.executable, "-m", "sandbox.nanogpu", "--kubeconfig=%s" % layout.kubeconfig,
                    "--port=%d" % ports["nanogpu"]],
    }


def scheduler_config_path(layout: Layout) -> Path:
    """The kube-scheduler's KubeSchedulerConfiguration file."""
    return layout.state_dir / "kube-scheduler.yaml"


def write_scheduler_config(layout: Layout, ports: dict) -> None:
    """Write the kube-scheduler's --config: its connection, and the nano-gpu extender entry on the stand-in's port."""
    from sandbox.nanogpu import schedconf  # pylint: disable=import-outside-toplevel  # needs the collection link
    schedconf.write(scheduler_config_path(layout), layout.kubeconfigs / "kube-scheduler.kubeconfig", ports["nanogpu"])


def _component_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(paths.ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def _launch(layout: Layout, state: dict, name: str, argv: list, env: dict, pass_fds=()) -> dict:
    """Start one component, record it in ``state`` and save the state file; return its record."""
    record = procs.start(name, argv, layout.log(name), layout.state_dir if name != "devsim" else paths.ROOT, env=env, pass_fds=pass_fds)
    state["processes"][name] = record
    save_state(layout, state)
    return record


def _health(layout: Layout, state: dict, name: str):
    """Return ``(what, check)``: a description and a no-argument function that is true once ``name`` answers its
    health endpoint (devsim has none: it reports its first sync through a pipe)."""
    ports = state["ports"]
    if name == "etcd":
        return "etcd health", lambda: http_get("http://127.0.0.1:%d/health" % ports["etcd"])[1].find('"health":"true"') >= 0
    if name == "kube-apiserver":
        admin = client_context(layout)
        return "kube-apiserver /readyz", lambda: http_get(state["server"] + "/readyz", admin)[0] == 200
    if name in ("kube-controller-manager", "kube-scheduler"):
        serving = ssl.create_default_context(cafile=str(layout.pki / "ca.crt"))
        return name + " /healthz", lambda: http_get("https://127.0.0.1:%d/healthz" % ports[name], serving)[0] == 200
    if name == "kwok":
        return "kwok /healthz", lambda: http_get("http://127.0.0.1:%d/healthz" % ports["kwok"])[0] == 200
    if name == "nanogpu":
        return "nano-gpu extender /version", lambda: http_get("http://127.0.0.1:%d/version" % ports["nanogpu"])[0] == 200
    raise SandboxError("no health endpoint for %s" % name)


# ----------------------------------------------------------------------------- up / down


def running(layout: Layout):
    """Return the recorded state if every component is alive, else None."""
    state = load_state(layout)
    if not state:
        return None
    records = state.get("processes") or {}
    if set(records) >= set(COMPONENTS) and all(procs.is_alive(r) for r in records.values()):
        return state
    return None


def down(layout: Layout, quiet: bool = False) -> int:
    """Stop every process the last ``up`` started; return 0 when none is left."""
    with locked(layout):
        return _down(layout, quiet)


def _down(layout: Layout, quiet: bool) -> int:
    state = load_state(layout)
    if not state:
        if not quiet:
            print("sandbox: nothing recorded in %s; nothing to stop" % layout.state_file)
        return 0
    if state.get("kubelet_nodes"):
        from sandbox.kubelet import cluster as kubelets  # pylint: disable=import-outside-toplevel
        kubelets.stop(state)
    records = list((state.get("processes") or {}).values())
    records.reverse()
    # Clients first, then the API server while etcd still answers (it would hang on shutdown
    # without it), then etcd.
    left = []
    for phase in (STOP_ORDER[0], STOP_ORDER[1], STOP_ORDER[2]):
        left += procs.stop([r for r in records if r["name"] in phase])
    left += procs.stop([r for r in records if not any(r["name"] in phase for phase in STOP_ORDER)])
    if left:
        print("sandbox: could not stop %s" % ", ".join("%s (pid %d)" % (r["name"], r["pid"]) for r in left), file=sys.stderr)
        return 1
    layout.state_file.unlink(missing_ok=True)
    if not quiet:
        names = sorted((r["name"] for r in records), key=lambda n: COMPONENTS.index(n) if n in COMPONENTS else len(COMPONENTS))
        print("sandbox: stopped %s" % ", ".join(names) if names else "sandbox: nothing was running")
    return 0


def _rotate_logs(layout: Layout) -> None:
    layout.logs.mkdir(parents=True, exist_ok=True)
    for name in COMPONENTS:
        log = layout.log(name)
        if log.exists():
            log.replace(log.with_suffix(".log.prev"))


def write_kwok_config(path: Path) -> None:
    """Write kwok's multi-document --config file from the single-document sandbox/k8s/kwok/kwok.yaml."""
    with open(paths.HERE / "kwok" / "kwok.yaml", encoding="utf-8") as handle:
        source = yaml.safe_load(handle)
    docs = [source["configuration"]] + list(source["stages"])
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False, width=1000), encoding="utf-8")


def _api(layout: Layout):
    # Imported late: the kubernetes client takes a moment to import and `down` does not need it.
    from kubernetes import client, config  # pylint: disable=import-outside-toplevel
    return client, config.new_client_from_config(config_file=str(layout.kubeconfig))


def create_nodes(layout: Layout, manifests: list) -> None:
    """Create (or replace) Node objects."""
    client, api_client = _api(layout)
    core = client.CoreV1Api(api_client)
    for manifest in manifests:
        try:
            core.create_node(manifest)
        except client.ApiException as exc:
            if exc.status != 409:
                raise
            core.delete_node(manifest["metadata"]["name"])
            core.create_node(manifest)


def wait_nodes_ready(layout: Layout, names: set, deadline: float) -> None:
    """Watch nodes until every named node has condition Ready=True."""
    client, api_client = _api(layout)
    from kubernetes import watch  # pylint: disable=import-outside-toplevel
    core = client.CoreV1Api(api_client)

    def ready(node):
        return any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or []))

    listing = core.list_node()
    pending = set(names) - {n.metadata.name for n in listing.items if ready(n)}
    version = listing.metadata.resource_version
    while pending:
        remaining = int(deadline - time.monotonic())
        if remaining <= 0:
            raise SandboxError("timed out waiting for nodes to become Ready: %s" % ", ".join(sorted(pending)))
        stream = watch.Watch()
        for event in stream.stream(core.list_node, resource_version=version, timeout_seconds=max(1, remaining)):
            node = event["object"]
            version = node.metadata.resource_version
            if node.metadata.name in pending and ready(node):
                pending.discard(node.metadata.name)
            if not pending:
                stream.stop()
                break


def wait_default_serviceaccount(layout: Layout, deadline: float) -> None:
    """Watch until the ServiceAccount ``default`` exists in the ``default`` namespace (pods need it)."""
    client, api_client = _api(layout)
    from kubernetes import watch  # pylint: disable=import-outside-toplevel
    core = client.CoreV1Api(api_client)
    listing = core.list_namespaced_service_account("default", field_selector="metadata.name=default")
    if listing.items:
        return
    remaining = int(deadline - time.monotonic())
    if remaining > 0:
        stream = watch.Watch()
        events = stream.stream(core.list_namespaced_service_account, "default", field_selector="metadata.name=default",
                               resource_version=listing.metadata.resource_version, timeout_seconds=remaining)
        for _event in events:
            stream.stop()
            return
    raise SandboxError("timed out waiting for the default ServiceAccount (is kube-controller-manager working?)")


def up(layout: Layout, timeout: float = 120.0, extra_nodes: int = 0, extra_profile: str | None = None,
       gpu_taint: bool = False, profiles_dir: Path = paths.PROFILES_DIR, fleet: bool = True,
       mig_state_dir: Path | None = None, kubelet_nodes: list | None = None, apf: bool = False) -> dict:
    """Start the sandbox (or return the state of the one already running).

    ``apf``: kube-apiserver with API Priority and Fairness on, and an identity it does not exempt (the operator of
    sandbox/k8s/apf.py: a client certificate outside system:masters, RBAC for what the collection's modules need, its
    kubeconfig in the state directory, ``operator.kubeconfig``). Off by default: nothing else changes.

    ``kubelet_nodes``: node containers that get a real kubelet instead of a kwok node (sandbox/kubelet), dicts with
    name, variant and index (their pod subnet); None: none, every fleet node is a kwok node. The fleet's own choice
    (``kubelet: true`` in fleet.yml, or ``--kubelet-nodes``) is the command line's (``make sandbox-up``: __main__.py
    passes it): a test's control plane of its own (tests/conftest.py) never provisions the fleet's node containers,
    which another stage may be using or which may not run at all."""
    with locked(layout, 2 * timeout + 60):
        return _up(layout, timeout, extra_nodes, extra_profile, gpu_taint, profiles_dir, fleet, mig_state_dir, kubelet_nodes,
                   apf)


def _up(layout, timeout, extra_nodes, extra_profile, gpu_taint, profiles_dir, fleet, mig_state_dir=None, kubelet_nodes=None,
        apf=False):
    state = running(layout)
    if state:
        print("sandbox: already up (kubeconfig %s, API %s)" % (state["kubeconfig"], state["server"]))
        return state
    if load_state(layout):
        _down(layout, quiet=True)
    started = time.monotonic()
    deadline = started + timeout
    versions = paths.read_versions()
    bins = paths.bin_dir(versions)
    missing = [b for b in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok") if not (bins / b).exists()]
    if missing:
        raise SandboxError("missing binaries in %s: %s (run `make k8s-binaries`)" % (bins, ", ".join(missing)))

    layout.state_dir.mkdir(parents=True, exist_ok=True)
    pki.ensure_pki(layout.pki)
    names = ("etcd", "etcd-peer", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "nanogpu")
    ports = dict(zip(names, free_ports(len(names))))
    server = "https://127.0.0.1:%d" % ports["kube-apiserver"]
    ca = layout.pki / "ca.crt"
    write_kubeconfig(layout.kubeconfig, server, ca, layout.pki / "admin.crt", layout.pki / "admin.key", "kubegpu-sandbox-admin")
    for user in ("kube-controller-manager", "kube-scheduler", "kwok", "devsim"):
        write_kubeconfig(layout.kubeconfigs / (user + ".kubeconfig"), server, ca, layout.pki / (user + ".crt"), layout.pki / (user + ".key"), user)
    if layout.etcd_data.exists():
        shutil.rmtree(layout.etcd_data)
    _rotate_logs(layout)
    write_kwok_config(layout.state_dir / "kwok.yaml")
    write_scheduler_config(layout, ports)
    argv = _argv(layout, bins, ports, Path(profiles_dir).resolve(), apf)
    state = {"versions": versions, "bin_dir": str(bins), "ports": ports, "server": server, "kubeconfig": str(layout.kubeconfig.resolve()),
             "state_dir": str(layout.state_dir.resolve()), "profiles_dir": str(Path(profiles_dir).resolve()), "processes": {},
             "apf": apf}
    env = _component_env()

    def launch(name, pass_fds=()):
        return _launch(layout, state, name, argv[name], env, pass_fds)

    try:
        etcd = launch("etcd")
        apiserver = launch("kube-apiserver")
        poll_until(*_health(layout, state, "etcd"), deadline, [etcd], layout=layout)
        poll_until(*_health(layout, state, "kube-apiserver"), deadline, [etcd, apiserver], layout=layout)
        if apf:
            from . import apf as apf_mod  # pylint: disable=import-outside-toplevel
            state["operator_kubeconfig"] = str(apf_mod.make_operator(layout, server).resolve())
        if kubelet_nodes is None:
            kubelet_nodes = []
        manifests = (nodes_mod.fleet_manifests(versions["KUBE_VERSION"], gpu_taint, mig_state_dir=mig_state_dir,
                                               skip={n["name"] for n in kubelet_nodes})
                     if fleet else [])
        if extra_nodes:
            manifests += nodes_mod.scale_manifests(extra_nodes, versions["KUBE_VERSION"], extra_profile, gpu_taint)
        create_nodes(layout, manifests)
        rfd, wfd = os.pipe()
        try:
            others = [launch("kube-controller-manager"), launch("nanogpu"), launch("kube-scheduler"), launch("kwok")]
            argv["devsim"].append("--ready-fd=%d" % wfd)
            devsim = launch("devsim", pass_fds=(wfd,))
            os.close(wfd)
            wfd = -1
            all_procs = [etcd, apiserver, *others, devsim]
            for name in ("kube-controller-manager", "nanogpu", "kube-scheduler", "kwok"):
                poll_until(*_health(layout, state, name), deadline, all_procs, layout=layout)
            wait_nodes_ready(layout, {m["metadata"]["name"] for m in manifests}, deadline)
            wait_default_serviceaccount(layout, deadline)
            _wait_ready_fd(rfd, deadline, devsim, layout)
        finally:
            os.close(rfd)
            if wfd >= 0:
                os.close(wfd)
        if kubelet_nodes:
            from sandbox.kubelet import cluster as kubelets  # pylint: disable=import-outside-toplevel
            state["kubelet"] = kubelets.start(layout, state, kubelet_nodes, timeout,
                                              lambda name, cmd: _launch(layout, state, name, cmd, env),
                                              gpu_taint=gpu_taint, fleet=fleet, mig_state_dir=mig_state_dir)
    except BaseException:
        _down(layout, quiet=True)
        raise
    state["up_seconds"] = round(time.monotonic() - started, 1)
    state["nodes"] = len(manifests) + len(kubelet_nodes)
    save_state(layout, state)
    print("sandbox: up in %.1f s: Kubernetes v%s, %d nodes (%d kubelet nodes), API %s, kubeconfig %s"
          % (state["up_seconds"], versions["KUBE_VERSION"], state["nodes"], len(kubelet_nodes), server, layout.kubeconfig))
    return state


def _wait_ready_fd(rfd: int, deadline: float, record: dict, layout: Layout) -> None:
    remaining = deadline - time.monotonic()
    readable = select.select([rfd], [], [], max(0.0, remaining))[0]
    data = os.read(rfd, 64) if readable else b""
    if not data.startswith(b"ready"):
        if not procs.is_alive(record) or readable:
            raise SandboxError("devsim exited before it was ready" + _log_hint(layout, "devsim"))
        raise SandboxError("timed out waiting for devsim to sync" + _log_hint(layout, "devsim"))


# ----------------------------------------------------------------------------- one component


def _recorded(layout: Layout, name: str) -> dict:
    if name not in COMPONENTS:
        raise SandboxError("unknown component %r (one of %s)" % (name, ", ".join(COMPONENTS)))
    state = load_state(layout)
    if not state:
        raise SandboxError("no sandbox recorded in %s" % layout.state_file)
    return state


def stop_component(layout: Layout, name: str, timeout: float = 15.0):
    """Stop one component of a sandbox (SIGTERM, SIGKILL after ``timeout``) and drop it from the state file, so that
    ``down`` leaves it alone and ``running`` says the sandbox is not whole. Returns its record, or None when it was
    not recorded (already stopped)."""
    with locked(layout):
        state = _recorded(layout, name)
        record = (state.get("processes") or {}).get(name)
        if record is None:
            return None
        if procs.stop([record], timeout):
            raise SandboxError("could not stop %s (pid %d)" % (name, record["pid"]))
        del state["processes"][name]
        save_state(layout, state)
        return record


def start_component(layout: Layout, name: str, timeout: float = 120.0) -> dict:
    """Start one component of a sandbox again, with the command line and ports ``up`` gave it (from the state file),
    and wait at most ``timeout`` seconds for it to be ready (its health endpoint; devsim: its first sync). Returns
    its record; a component that still runs is left alone. On failure the new process is stopped again."""
    with locked(layout, timeout + 60):
        state = _recorded(layout, name)
        state.setdefault("processes", {})
        record = state["processes"].get(name)
        if record and procs.is_alive(record):
            return record
        deadline = time.monotonic() + timeout
        argv = _argv(layout, Path(state["bin_dir"]), state["ports"], Path(state.get("profiles_dir") or paths.PROFILES_DIR),
                     bool(state.get("apf")))[name]
        env = _component_env()
        try:
            if name == "devsim":
                rfd, wfd = os.pipe()
                try:
                    record = _launch(layout, state, name, argv + ["--ready-fd=%d" % wfd], env, pass_fds=(wfd,))
                    os.close(wfd)
                    wfd = -1
                    _wait_ready_fd(rfd, deadline, record, layout)
                finally:
                    os.close(rfd)
                    if wfd >= 0:
                        os.close(wfd)
            else:
                record = _launch(layout, state, name, argv, env)
                poll_until(*_health(layout, state, name), deadline, [record], layout=layout)
        except BaseException:
            started = state["processes"].pop(name, None)
            if started:
                procs.stop([started])
            save_state(layout, state)
            raise
        return record


def status(layout: Layout) -> int:
    """Print what runs; return 0 when every component is alive, 3 otherwise."""
    state = load_state(layout)
    if not state:
        print("sandbox: down (no %s)" % layout.state_file)
        return 3
    ok = True
    for name in COMPONENTS:
        record = (state.get("processes") or {}).get(name)
        alive = bool(record) and procs.is_alive(record)
        ok = ok and alive
        port = (state.get("ports") or {}).get(name)
        print("  %-24s %-8s pid %-8s %s" % (name, "running" if alive else "DOWN", record["pid"] if record else "-",
                                            "127.0.0.1:%s" % port if port else ""))
    for name, server in sorted((state.get("kubelet_servers") or {}).items()):
        record = (state.get("processes") or {}).get("kubelet-gateway")
        print("  kubelet node %-11s via %s (relay %s)" % (name, server, "running" if record and procs.is_alive(record) else "DOWN"))
    print("  kubeconfig: %s\n  API server: %s\n  logs:       %s" % (state.get("kubeconfig"), state.get("server"), layout.logs))
    if ok:
        code, body = http_get(state["server"] + "/readyz", client_context(layout))
        print("  /readyz:    %s %s" % (code, body.strip()[:60]))
        ok = code == 200
    return 0 if ok else 3
