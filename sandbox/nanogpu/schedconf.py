# SPDX-License-Identifier: GPL-3.0-or-later
"""The sandbox kube-scheduler's ``--config``: a KubeSchedulerConfiguration (v1) with what its command line used to
say (its kubeconfig, API rates, no leader election, no profiling - kube-scheduler ignores those deprecated flags once
``--config`` is given) and one ``extenders`` entry, the collection's own (``_nanogpu/scheduler.py``
``extender_entry``), pointing at the stand-in extender on loopback."""

from __future__ import annotations

from pathlib import Path

import yaml

from . import C, extender_entry


def url_prefix(port: int) -> str:
    return "http://127.0.0.1:%d%s" % (port, C.URL_PATH)


def scheduler_config(kubeconfig, extender_port: int, qps: int = 200, burst: int = 400) -> dict:
    return {
        "apiVersion": C.SCHEDULER_CONFIG_API_VERSION,
        "kind": C.SCHEDULER_CONFIG_KIND,
        "clientConnection": {"kubeconfig": str(kubeconfig), "qps": qps, "burst": burst},
        "leaderElection": {"leaderElect": False},
        "enableProfiling": False,
        "extenders": [extender_entry(url_prefix(extender_port), http_timeout="10s")],
    }


def write(path: Path, kubeconfig, extender_port: int) -> Path:
    path = Path(path)
    path.write_text(yaml.safe_dump(scheduler_config(kubeconfig, extender_port), sort_keys=False), encoding="utf-8")
    return path
