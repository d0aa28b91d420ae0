# SPDX-License-Identifier: GPL-3.0-or-later
"""Turn a running node container into a kubelet node of a sandbox control plane, and back.

``provision`` copies in what the node lacks (the kubelet binary, the CNI plugins, the image tars of the loader
directory) and writes its settings in one tar stream: units, the KubeletConfiguration, a kubeconfig with a client
certificate of the sandbox CA (CN system:node:<name>, O system:nodes), the CNI network, and three keys of containerd's
config. Then it (re)starts containerd when its config changed, loads the images and restarts the kubelet. Every step
is a ``docker`` command against the local engine, each bounded in time.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import subprocess
import tarfile
import time
from pathlib import Path

import yaml

from sandbox.k8s import pki

from . import config


# the node-side Python programs (node/*.py), run by the node's own interpreters
LOAD_IMAGES = "/usr/local/lib/kubegpu-kubelet/load_images.py"
CONTAINERD_CRI = "/usr/local/lib/kubegpu-kubelet/containerd_cri.py"


class KubeletNodeError(RuntimeError):
    """A kubelet node could not be provisioned."""


def docker(*args, stdin=None, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    """Run the docker CLI; raise KubeletNodeError with its output when it fails and ``check``."""
    try:
        done = subprocess.run(["docker", *map(str, args)], stdin=stdin, capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise KubeletNodeError("docker %s: no answer in %d s" % (" ".join(map(str, args[:3])), timeout)) from exc
    if check and done.returncode:
        said = (done.stderr or done.stdout).decode(errors="replace").strip()[-800:]
        raise KubeletNodeError("docker %s failed (%d): %s" % (" ".join(map(str, args[:4])), done.returncode, said))
    return done


def inspect(name: str) -> dict:
    """The container's id, whether it runs, its address and its bridge's gateway."""
    done = docker("inspect", "--type", "container", name, check=False, timeout=30)
    if done.returncode:
        raise KubeletNodeError("no node container %s (make nodes-up first)" % name)
    info = json.loads(done.stdout)[0]
    net = info["NetworkSettings"]
    networks = net.get("Networks") or {}
    first = next(iter(networks.values()), {}) if networks else {}
    return {"id": info["Id"], "running": bool(info["State"]["Running"]),
            "ip": net.get("IPAddress") or first.get("IPAddress") or "",
            "gateway": net.get("Gateway") or first.get("Gateway") or ""}


def issue_identity(pki_dir: Path, name: str) -> tuple:
    """The kubelet's client certificate and key: CN system:node:<name>, O system:nodes (what the Node authorizer and
    NodeRestriction know a kubelet by)."""
    return pki.issue(pki_dir, "kubelet-" + name, "/O=system:nodes/CN=system:node:" + name, "clientAuth")


def kubeconfig(server: str, ca_pem: bytes, cert_pem: bytes, key_pem: bytes, name: str) -> str:
    """A kubeconfig with everything inline. tls-server-name: the kubelet dials the gateway address, which is not in
    the API server's certificate; ``kubernetes`` is."""
    def b64(data):
        return base64.b64encode(data).decode()
    user = "system:node:" + name
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "kubegpu-sandbox", "cluster": {
            "server": server, "certificate-authority-data": b64(ca_pem), "tls-server-name": "kubernetes"}}],
        "users": [{"name": user, "user": {"client-certificate-data": b64(cert_pem), "client-key-data": b64(key_pem)}}],
        "contexts": [{"name": "kubegpu-sandbox", "context": {"cluster": "kubegpu-sandbox", "user": user}}],
        "current-context": "kubegpu-sandbox",
    }, default_flow_style=False)


def kubelet_configuration(gpu_taint: bool = False) -> dict:
    """The KubeletConfiguration of every kubelet node (k8s.io/kubelet config/v1beta1 types.go for the fields)."""
    conf = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # The host has cgroup v1 only (README.md): kubelet 1.36 refuses to start there unless told otherwise
        # (pkg/kubelet/apis/config/validation/validation_linux.go) and warns once started.
        "failCgroupV1": False,
        # The node's systemd owns the cgroup tree; containerd 1.6 cannot report its driver (no RuntimeConfig RPC), so
        # the kubelet uses this one (cmd/kubelet/app/server.go getCgroupDriverFromCRI) and containerd's runc is set to
        # SystemdCgroup = true (node/containerd_cri.py)
        "cgroupDriver": "systemd",
        "containerRuntimeEndpoint": "unix:///run/containerd/containerd.sock",
        # the host may have swap; pods get none
        "failSwapOn": False,
        "memorySwap": {"swapBehavior": "NoSwap"},
        # CPUs and memory handed out statically: Guaranteed pods with whole CPUs get CPUs of their own, as on GPU
        # nodes that align CPUs with their GPUs. The policies need a reservation: 100m of CPU for the kubelet (the
        # static policy keeps ceil(100m) = one whole CPU, CPU 0, out of exclusive use: pkg/kubelet/cm/cpumanager
        # cpu_manager.go NewManager), and the eviction threshold's memory on NUMA node 0 (reservedMemory must
        # add up to it). Allocatable CPU is then 1.9 on this 2-core host, not 1 (as with reservedSystemCPUs "0"): a
        # Guaranteed pod of one whole CPU (nano-gpu's agent, as upstream deploys it) fits beside the pods that ask
        # a little CPU (NFD's worker, 5m)
        "cpuManagerPolicy": "static",
        "kubeReserved": {"cpu": "100m"},
        "memoryManagerPolicy": "Static",
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                         "nodefs.inodesFree": "1%"},
        "reservedMemory": [{"numaNode": 0, "limits": {"memory": "100Mi"}}],
        # the API server's client certificate (system:masters) and SubjectAccessReviews decide who may use the
        # kubelet's API (logs, exec, node proxy); nobody anonymously
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": "/etc/kubernetes/pki/ca.crt"}},
        "authorization": {"mode": "Webhook"},
        "clusterDomain": "cluster.local",
        # nothing can be pulled here: the images a node has are all it will ever have, so none is collected
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "rotateCertificates": False,
        "protectKernelDefaults": False,
    }
    if gpu_taint:
        conf["registerWithTaints"] = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    return conf


def cni_conflist(index: int, subnet_prefix: str) -> str:
    """The node's pod network: a bridge with host-local addresses from <prefix>.<index>.0/24, masqueraded outwards."""
    return json.dumps({
        "cniVersion": "1.0.0",
        "name": config.CNI_NETWORK,
        "plugins": [
            {"type": "bridge", "bridge": "kubegpu0", "isGateway": True, "ipMasq": True, "hairpinMode": True,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": "%s.%d.0/24" % (subnet_prefix, index)}]],
                      "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }, indent=2) + "\n"


def _tar(files: dict) -> bytes:
    """An uncompressed tar of ``{absolute path: (bytes, mode)}``, owned by root."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path, (data, mode) in sorted(files.items()):
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size = len(data)
            info.mode = mode
            info.mtime = int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _exec(name: str, *argv, stdin=None, timeout: float = 120) -> str:
    return docker("exec", "-i" if stdin is not None else "-t=false", name, *argv, stdin=stdin,
                  timeout=timeout).stdout.decode(errors="replace")


def copy_binaries(name: str, kubelet: Path) -> list:
    """Copy the kubelet and the CNI plugins into the node where missing or different; return what was copied."""
    copied = []
    have = _exec(name, "sh", "-c", "sha256sum /usr/local/bin/kubelet 2>/dev/null; ls %s 2>/dev/null; true"
                 % " ".join("/usr/lib/cni/" + p for p in config.CNI_PLUGINS)).split()
    if _sha256(kubelet) not in have:
        docker("cp", kubelet, "%s:/usr/local/bin/kubelet" % name, timeout=180)
        copied.append("kubelet")
    missing = [p for p in config.CNI_PLUGINS if "/usr/lib/cni/" + p not in have]
    if missing:
        absent = [p for p in missing if not (config.HOST_CNI_DIR / p).exists()]
        if absent:
            raise KubeletNodeError("CNI plugins %s are not in %s (make kubelet-cni: Debian's containernetworking-plugins)"
                                   % (", ".join(absent), config.HOST_CNI_DIR))
        blob = _tar({"/usr/lib/cni/" + p: ((config.HOST_CNI_DIR / p).read_bytes(), 0o755) for p in missing})
        docker("exec", "-i", name, "tar", "-x", "-C", "/", stdin=_bytes_stdin(blob), timeout=120)
        copied += ["cni/" + p for p in missing]
    return copied


# containerd 2.x in place of Debian's 1.6 (config.CONTAINERD_KEY): its programs under /usr/local/bin (before /usr/bin
# in systemd's and docker exec's PATH, so the daemon finds its shim and the loader and the reset their ctr), and a
# drop-in that starts it instead of /usr/bin/containerd. Debian's package stays installed.
CONTAINERD2_DROPIN = "/etc/systemd/system/containerd.service.d/kubegpu-containerd2.conf"
CONTAINERD2_UNIT = ("# written by sandbox/kubelet/node.py: containerd 2.x (sandbox/kubelet/README.md)\n"
                    "[Service]\nExecStart=\nExecStart=/usr/local/bin/containerd\n")


def install_containerd(name: str, containerd2: bool) -> list:
    """Put containerd 2.x in (``containerd2``) or take it out again; return what changed (then containerd restarts)."""
    changed = []
    have = _exec(name, "sh", "-c", "sha256sum /usr/local/bin/containerd /usr/local/bin/containerd-shim-runc-v2 "
                 "/usr/local/bin/ctr %s 2>/dev/null; true" % CONTAINERD2_DROPIN).split()
    if not containerd2:
        if CONTAINERD2_DROPIN in have or "/usr/local/bin/containerd" in have:
            _exec(name, "sh", "-c", "rm -f %s /usr/local/bin/containerd /usr/local/bin/containerd-shim-runc-v2 "
                  "/usr/local/bin/ctr && if [ -f /etc/containerd/config.toml.v2 ]; then mv /etc/containerd/config.toml.v2 "
                  "/etc/containerd/config.toml; fi && systemctl daemon-reload" % CONTAINERD2_DROPIN)
            changed.append("containerd 2.x removed")
        return changed
    binaries = config.containerd2_binaries()
    absent = [str(p) for p in binaries.values() if not p.exists()]
    if absent:
        raise KubeletNodeError("containerd 2.x wanted on %s but %s missing (make kubelet-containerd2)"
                               % (name, ", ".join(absent)))
    for program, path in binaries.items():
        if _sha256(path) not in have:
            docker("cp", path, "%s:/usr/local/bin/%s" % (name, program), timeout=180)
            changed.append(program)
    if CONTAINERD2_DROPIN not in have:
        blob = _tar({CONTAINERD2_DROPIN: (CONTAINERD2_UNIT.encode(), 0o644)})
        docker("exec", "-i", name, "tar", "-x", "--no-same-owner", "-C", "/", stdin=_bytes_stdin(blob), timeout=60)
        _exec(name, "systemctl", "daemon-reload")
        changed.append("containerd.service drop-in")
    return changed


def _bytes_stdin(data: bytes):
    """A readable file for subprocess stdin holding ``data``."""
    import tempfile  # pylint: disable=import-outside-toplevel
    handle = tempfile.TemporaryFile()
    handle.write(data)
    handle.seek(0)
    return handle


def copy_images(name: str, image_dir: Path | None) -> list:
    """Copy each *.tar of ``image_dir`` into the node's image directory unless the same file is there."""
    if not image_dir or not image_dir.is_dir():
        return []
    tars = sorted(image_dir.glob("*.tar"))
    have = set(_exec(name, "sh", "-c", "cat %s/*.sha256 2>/dev/null; true" % config.NODE_IMAGE_DIR).split())
    copied = []
    _exec(name, "mkdir", "-p", config.NODE_IMAGE_DIR)
    for tar in tars:
        digest = _sha256(tar)
        if digest in have:
            continue
        docker("cp", tar, "%s:%s/%s" % (name, config.NODE_IMAGE_DIR, tar.name), timeout=300)
        _exec(name, "sh", "-c", "echo %s > %s/%s.sha256" % (digest, config.NODE_IMAGE_DIR, tar.name))
        copied.append(tar.name)
    return copied


def load_images(name: str) -> dict:
    """Run the node's loader (node/load_images.py); return its report, with the seconds it took."""
    start = time.monotonic()
    done = docker("exec", name, "/usr/bin/python3", LOAD_IMAGES, check=False, timeout=600)
    out = done.stdout.decode(errors="replace").strip().splitlines()
    try:
        report = json.loads(out[-1]) if out else {}
    except ValueError:
        report = {}
    report["seconds"] = round(time.monotonic() - start, 1)
    if done.returncode:
        raise KubeletNodeError("%s: loading images failed: %s %s" % (name, json.dumps(report), done.stderr.decode(errors="replace")[-400:]))
    return report


def provision(name: str, *, index: int, server: str, pki_dir: Path, labels: dict, gpu_taint: bool = False,
              image_dir: Path | None = None, kubelet: Path | None = None, node_name: str | None = None,
              containerd2: bool = False) -> dict:
    """Make the running node container ``name`` a kubelet node of the API server at ``server`` (as the node sees it)
    and start its kubelet; return what was done (copied files, image report, timings). ``node_name``: the Kubernetes
    node it registers as (the kubelet's --hostname-override and its credentials), the container's name by default.
    ``containerd2``: run containerd 2.x (config version 3, CDI) instead of the node's Debian 1.6."""
    node_name = node_name or name
    env = config.read_env()
    kubelet = kubelet or config.kubelet_binary()
    if not kubelet.exists():
        raise KubeletNodeError("no kubelet at %s (make kubelet)" % kubelet)
    info = inspect(name)
    if not info["running"]:
        raise KubeletNodeError("node container %s is not running" % name)
    started = time.monotonic()
    report = {"node": node_name, "copied": copy_binaries(name, kubelet)}
    cert, key = issue_identity(pki_dir, node_name)
    node_files = config.NODE_FILES
    label_arg = ",".join("%s=%s" % kv for kv in sorted(labels.items()))
    files = {
        "/usr/local/sbin/kubegpu-kubelet-prep": ((node_files / "kubegpu-kubelet-prep").read_bytes(), 0o755),
        LOAD_IMAGES: ((node_files / "load_images.py").read_bytes(), 0o644),
        CONTAINERD_CRI: ((node_files / "containerd_cri.py").read_bytes(), 0o644),
        "/usr/local/sbin/kubegpu-kubelet-reset": ((node_files / "kubegpu-kubelet-reset").read_bytes(), 0o755),
        "/etc/systemd/system/kubegpu-kubelet-prep.service": ((node_files / "kubegpu-kubelet-prep.service").read_bytes(), 0o644),
        "/etc/systemd/system/kubegpu-image-load.service": ((node_files / "kubegpu-image-load.service").read_bytes(), 0o644),
        "/etc/systemd/system/kubelet.service": ((node_files / "kubelet.service").read_bytes(), 0o644),
        "/etc/default/kubelet": (("# written by sandbox/kubelet/node.py\nKUBELET_ARGS=--hostname-override=%s --node-labels=%s\n"
                                  % (node_name, label_arg)).encode(), 0o644),
        "/var/lib/kubelet/config.yaml": (yaml.safe_dump(kubelet_configuration(gpu_taint), default_flow_style=False).encode(), 0o644),
        "/etc/kubernetes/kubelet.conf": (kubeconfig(server, (pki_dir / "ca.crt").read_bytes(), cert.read_bytes(),
                                                    key.read_bytes(), node_name).encode(), 0o600),
        "/etc/kubernetes/pki/ca.crt": ((pki_dir / "ca.crt").read_bytes(), 0o644),
        "/etc/cni/net.d/10-%s.conflist" % config.CNI_NETWORK: (cni_conflist(index, env["POD_SUBNET_PREFIX"]).encode(), 0o644),
    }
    docker("exec", "-i", name, "tar", "-x", "--no-same-owner", "-C", "/", stdin=_bytes_stdin(_tar(files)), timeout=60)
    report["copied"] += copy_images(name, image_dir)
    swapped = install_containerd(name, containerd2)
    report["copied"] += swapped
    containerd = _exec(name, "/opt/kubegpu/venv/bin/python", CONTAINERD_CRI, env["PAUSE_IMAGE"],
                       *(["--v3"] if containerd2 else [])).strip()
    _exec(name, "sh", "-c", "systemctl daemon-reload && systemctl enable -q kubegpu-kubelet-prep.service "
          "kubegpu-image-load.service kubelet.service && systemctl start kubegpu-kubelet-prep.service", timeout=60)
    if containerd == "changed" or swapped or _exec(name, "systemctl", "is-active", "containerd.service").strip() != "active":
        _exec(name, "systemctl", "restart", "containerd.service", timeout=60)
    report["containerd_config"] = containerd
    report["images"] = load_images(name)
    # the loader unit ran above already when it is active; started here for the next boots' order
    _exec(name, "sh", "-c", "systemctl start kubegpu-image-load.service && systemctl stop kubelet.service && rm -f %s "
          "&& systemctl start kubelet.service" % " ".join(MANAGER_STATE_FILES), timeout=120)
    report["seconds"] = round(time.monotonic() - started, 1)
    return report


# The CPU and memory managers' checkpoints (pkg/kubelet/cm/{cpumanager,memorymanager}/state). A fresh control plane
# (sandbox-up) has no pods for the node, and the memory manager refuses to start when the machine's memory is not the
# one it checkpointed ("the expected machine state is different from the real one", seen: this VM's MemTotal changes
# between runs), so provisioning and the reset remove them, as `kubeadm reset` does.
MANAGER_STATE_FILES = ("/var/lib/kubelet/cpu_manager_state", "/var/lib/kubelet/memory_manager_state")


def reset(name: str) -> str:
    """Stop the node's kubelet and remove its pods' containers (node/kubegpu-kubelet-reset); '' when no container."""
    done = docker("exec", name, "/usr/local/sbin/kubegpu-kubelet-reset", check=False, timeout=90)
    return (done.stdout or done.stderr).decode(errors="replace").strip()
