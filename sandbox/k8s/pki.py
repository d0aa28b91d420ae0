# SPDX-License-Identifier: GPL-3.0-or-later
"""The sandbox's own PKI, made with the openssl command line tool.

One CA signs everything except the front-proxy client certificate, which has its own CA (as
kubeadm does) so that only it can assert X-Remote-User headers to the API server. Keys are ECDSA P-256 (fast to make); the service-account signing key is
RSA 2048. Everything is for 127.0.0.1 only. Files are made once and reused while they exist.
"""

from __future__ import annotations

import secrets
import subprocess
import tempfile
from pathlib import Path

DAYS = "3650"

# name -> (subject, extended key usage, subject alt names)
LEAVES = {
    "kube-apiserver": ("/CN=kube-apiserver", "serverAuth", [
        "IP:127.0.0.1", "DNS:localhost", "DNS:kubernetes", "DNS:kubernetes.default", "DNS:kubernetes.default.svc",
        "DNS:kubernetes.default.svc.cluster.local", "IP:10.96.0.1"]),
    "loopback-serving": ("/CN=kubegpu-sandbox-loopback", "serverAuth", ["IP:127.0.0.1", "DNS:localhost"]),
    "admin": ("/O=system:masters/CN=kubegpu-sandbox-admin", "clientAuth", []),
    "kube-controller-manager": ("/CN=system:kube-controller-manager", "clientAuth", []),
    "kube-scheduler": ("/CN=system:kube-scheduler", "clientAuth", []),
    "kwok": ("/O=system:masters/CN=kwok-controller", "clientAuth", []),
    "devsim": ("/O=system:masters/CN=kubegpu-device-manager-simulator", "clientAuth", []),
    "front-proxy-client": ("/CN=front-proxy-client", "clientAuth", []),
    # the API server towards kubelets (logs, exec, node proxy), in system:masters as kubeadm's apiserver-kubelet-client
    "apiserver-kubelet-client": ("/O=system:masters/CN=kube-apiserver-kubelet-client", "clientAuth", []),
}
FRONT_PROXY_LEAVES = ("front-proxy-client",)


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, text=True)


def _ec_key_args() -> list:
    return ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def ensure_pki(pki: Path) -> dict:
    """Create the CA, leaf certificates and service-account keys under ``pki`` if missing.

    Returns ``{name: (cert path, key path)}`` plus ``ca`` and ``sa`` (key, public key).
    """
    pki.mkdir(parents=True, exist_ok=True)
    out = {}
    for ca_name in ("ca", "front-proxy-ca"):
        ca_crt, ca_key = pki / (ca_name + ".crt"), pki / (ca_name + ".key")
        if not (ca_crt.exists() and ca_key.exists()):
            # A new CA invalidates every leaf signed by the old one.
            for old in pki.glob("*.crt"):
                if old.name not in ("ca.crt", "front-proxy-ca.crt"):
                    old.unlink()
            _openssl("req", "-x509", "-new", *_ec_key_args(), "-keyout", str(ca_key), "-out", str(ca_crt), "-days", DAYS,
                     "-subj", "/CN=kubegpu-sandbox-" + ca_name,
                     "-addext", "basicConstraints=critical,CA:TRUE",
                     "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature")
        out[ca_name] = (ca_crt, ca_key)
    for name, (subject, usage, sans) in LEAVES.items():
        out[name] = issue(pki, name, subject, usage, sans, out["front-proxy-ca" if name in FRONT_PROXY_LEAVES else "ca"])
    sa_key, sa_pub = pki / "sa.key", pki / "sa.pub"
    if not (sa_key.exists() and sa_pub.exists()):
        _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(sa_key))
        _openssl("pkey", "-in", str(sa_key), "-pubout", "-out", str(sa_pub))
    out["sa"] = (sa_key, sa_pub)
    for path in pki.glob("*.key"):
        path.chmod(0o600)
    return out


def issue(pki: Path, name: str, subject: str, usage: str, sans=(), ca=None) -> tuple:
    """Make ``<pki>/<name>.crt`` and ``.key`` (ECDSA P-256, signed by ``ca``, the (cert, key) of a CA, by default the
    sandbox CA of ``pki``) unless both exist; return (cert path, key path). Also for identities made after
    ``ensure_pki``, such as a kubelet node's (sandbox/kubelet)."""
    ca_crt, ca_key = ca or (pki / "ca.crt", pki / "ca.key")
    crt, key = pki / (name + ".crt"), pki / (name + ".key")
    if crt.exists() and key.exists():
        return crt, key
    with tempfile.TemporaryDirectory() as tmp:
        csr = Path(tmp) / "req.csr"
        ext = Path(tmp) / "ext.cnf"
        lines = ["basicConstraints=critical,CA:FALSE", "keyUsage=critical,digitalSignature,keyEncipherment", "extendedKeyUsage=" + usage]
        if sans:
            lines.append("subjectAltName=" + ",".join(sans))
        ext.write_text("\n".join(lines) + "\n", encoding="utf-8")
        _openssl("req", "-new", *_ec_key_args(), "-keyout", str(key), "-out", str(csr), "-subj", subject)
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca_crt), "-CAkey", str(ca_key),
                 "-set_serial", "0x" + secrets.token_hex(16), "-days", DAYS, "-extfile", str(ext), "-out", str(crt))
    key.chmod(0o600)
    return crt, key
