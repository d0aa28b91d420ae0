# SPDX-License-Identifier: GPL-3.0-or-later
"""Sandbox stand-in for NVIDIA's MPS control daemon (``mps-control-daemon``, k8s-device-plugin v0.20.0
cmd/mps-control-daemon). Not NVIDIA's software.

* ``mps-control-daemon mount-shm`` (the DaemonSet's init container, mount/mount-shm.go): the real one mounts a tmpfs at
  ``/mps/shm``; the stand-in makes the directory and exits 0 (the workloads' /dev/shm is then a plain directory of the
  node: no NVIDIA program reads its size here).
* ``mps-control-daemon``: loads the config and the devices as the plugin does (config.py); with no MPS resource it logs
  "No devices are configured for MPS sharing; Waiting indefinitely." Otherwise, per MPS resource, what Daemon.Start
  leaves for the plugin and the workloads: ``/mps/<resource>/pipe`` and ``/mps/<resource>/log``, then the
  ``/mps/<resource>/.started`` file the plugin stand-in waits for (root.go startedFile). It starts no
  ``nvidia-cuda-mps-control`` (there is none: no CUDA here) and sets no compute mode through NVML. On SIGTERM it
  removes ``.started`` and the log directory (Daemon.Stop).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import sys
import threading

from . import config as shared

LOG = logging.getLogger("mps-control-daemon")


def main(argv):
    shared.setup_logging()
    root = shared.MPS_CONTAINER_ROOT
    if argv[:1] == ["mount-shm"]:
        os.makedirs(os.path.join(root, "shm"), exist_ok=True)
        LOG.info("kubegpu sandbox stand-in, not NVIDIA's software: %s/shm made (no tmpfs mounted)", root)
        return 0
    LOG.info("Starting mps-control-daemon (kubegpu sandbox stand-in, not NVIDIA's software)")
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        cfg, _cli = shared.load(argv)
        _profile, by_resource = shared.devices(cfg)
    except shared.StartError as exc:
        LOG.error("%s", exc)
        if exc.code is not None:
            return exc.code
        stop.wait()
        return 0
    LOG.info("Retrieving MPS daemons.")
    if cfg.sharing is None or cfg.sharing.strategy != "mps" or not by_resource:
        LOG.info("No devices are configured for MPS sharing; Waiting indefinitely.")
        stop.wait()
        return 0
    started = []
    for resource in sorted(by_resource):
        base = os.path.join(root, resource)
        LOG.info("Staring MPS daemon resource=%s", resource)  # sic: NVIDIA's log line
        for sub in ("pipe", "log"):
            os.makedirs(os.path.join(base, sub), exist_ok=True)
        with open(os.path.join(base, ".started"), "w", encoding="utf-8"):
            pass
        started.append(base)
    stop.wait()
    LOG.info("Stopping MPS daemons.")
    for base in started:
        try:
            os.unlink(os.path.join(base, ".started"))
        except FileNotFoundError:
            pass
        shutil.rmtree(os.path.join(base, "log"), ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
