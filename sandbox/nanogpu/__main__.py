# SPDX-License-Identifier: GPL-3.0-or-later
"""Run the nano-gpu extender stand-in: ``python -m sandbox.nanogpu --kubeconfig ... --port N`` (loopback only)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from kubernetes import config

from .server import serve


def main(argv=None) -> int:
    """Parse arguments, connect, and serve until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(prog="nanogpu", description=__doc__)
    parser.add_argument("--kubeconfig", required=True, help="an identity allowed to impersonate ServiceAccounts")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    stop = threading.Event()

    def _stop(signum, _frame):
        logging.getLogger("nanogpu").info("signal %d: stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    return serve(config.new_client_from_config(config_file=args.kubeconfig), args.port, stop=stop)


if __name__ == "__main__":
    sys.exit(main())
