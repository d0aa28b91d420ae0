# SPDX-License-Identifier: GPL-3.0-or-later
"""Run the device-manager simulator: ``python -m sandbox.k8s.devsim --kubeconfig ... --profiles-dir ...``."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys

from kubernetes import client, config

from .dra import DraSimulator
from .nanogpu import NanoGpuSimulator
from .nfd import NfdSimulator
from .vendors import VendorSimulator
from .watcher import Simulator


def main(argv=None) -> int:
    """Parse arguments, connect, and run the simulator until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(prog="devsim", description=__doc__)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--profiles-dir", required=True, help="directory holding <profile>.json GPU profiles")
    parser.add_argument("--ready-fd", type=int, default=-1, help="file descriptor to write 'ready' to once the first sync is done")
    args = parser.parse_args(argv)

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    api_client = config.new_client_from_config(config_file=args.kubeconfig)
    simulator = Simulator(client.CoreV1Api(api_client), os.path.abspath(args.profiles_dir))
    NfdSimulator.attach(simulator)  # NFD and GPU feature discovery, where their pods run
    VendorSimulator.attach(simulator)  # AMD's ROCm plugin and node labeller, Intel's GPU plugin, where their pods run
    NanoGpuSimulator.attach(simulator)  # nano-gpu's agent: nano-gpu/gpu-percent where its pods run
    DraSimulator.attach(simulator)  # NVIDIA's DRA kubelet plugin: ResourceSlices where its pods run

    def _stop(signum, _frame):
        logging.getLogger("devsim").info("signal %d: stopping", signum)
        simulator.stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)

    if args.ready_fd >= 0:
        def _ready():
            logging.getLogger("devsim").info("initial sync done; ready")
            try:
                os.write(args.ready_fd, b"ready\n")
            finally:
                os.close(args.ready_fd)
        simulator.ready_callbacks.append(_ready)
    else:
        simulator.ready_callbacks.append(lambda: logging.getLogger("devsim").info("initial sync done; ready"))
    return simulator.run()


if __name__ == "__main__":
    sys.exit(main())
