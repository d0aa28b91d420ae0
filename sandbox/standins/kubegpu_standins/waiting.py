# SPDX-License-Identifier: GPL-3.0-or-later
"""A vendor program the stand-in images do not implement yet: it says so in its log and waits for SIGTERM, so its pod
runs (as kwok's pods did) while the device-manager simulator (sandbox/k8s/devsim: gfd.py, nfd.py, vendors.py) keeps
doing that program's part for the node."""

from __future__ import annotations

import signal
import sys
import threading


def main(name, args):
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    sys.stderr.write("kubegpu sandbox stand-in for %s %s: not implemented in the stand-in image yet (not the vendor's "
                     "software); the sandbox's device-manager simulator does its part. Waiting.\n" % (name, args))
    sys.stderr.flush()
    stop.wait()
    return 0
