# SPDX-License-Identifier: GPL-3.0-or-later
"""Run one of the collection's modules (argv[1], e.g. mig_layout) with its JSON arguments (argv[2]) on a real GPU, with
every NVML call that changes a GPU replaced by one that fails the run: a check on a lent machine must leave the
GPU's settings, MIG included, as they are, whatever the module does."""

import runpy
import sys

import pynvml

# An event set (nvmlEventSetCreate, nvmlDeviceRegisterEvents, nvmlEventSetWait/Free: the reader's health check, as the
# device plugin's health check does it) only subscribes this process to the GPU's events: it changes no setting.
EVENT_SET = ("nvmlEventSet", "nvmlDeviceRegisterEvents")
WRITES = [name for name in dir(pynvml) if name.startswith("nvml") and not name.startswith(EVENT_SET) and any(
    word in name for word in ("Set", "Create", "Destroy", "Reset", "Clear", "Register"))]


def refuse(name):
    def call(*_args, **_kwargs):
        raise SystemExit("read-only check: %s was called" % name)
    return call


for _name in WRITES:
    setattr(pynvml, _name, refuse(_name))
MODULE = sys.argv[1]
sys.argv = [MODULE, sys.argv[2]]
runpy.run_module("ansible_collections.kubegpu.cluster.plugins.modules." + MODULE, run_name="__main__")
