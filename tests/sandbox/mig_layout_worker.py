# SPDX-License-Identifier: GPL-3.0-or-later
"""Run the mig_layout module's work (plugins/modules/mig_layout.py ``work``: read, plan, check, apply, read back) many
times in one process, on the fake NVML, for tests that would need hundreds of ``ansible`` runs otherwise.

Reads one JSON job on stdin: ``{"profile": path, "state": path, "pci": folder or null, "steps": [...]}``, each step
``{"config": document, "name": layout, "check": bool}`` (one module run), ``{"reset": true}`` (the GPU reset a node's
boot plays, sandbox/fakenvml/mig_state.py) or ``{"clear": true}`` (the state file removed: the profile's own layout
again). Writes one JSON list, a result per step: ``{"rc": 0, "result": ...}`` or ``{"rc": 1, "msg": ...}``, as the
module would end.

Run with LD_LIBRARY_PATH at the fake libnvidia-ml.so.1, FAKE_NVML_PROFILE and FAKE_NVML_MIG_STATE set to the job's
profile and state, and the repository root and .build/collections on PYTHONPATH. ``pci``: a folder laid out as
/sys/bus/pci/devices, which the module reads the GPUs' PCI ids from (mig-parted's device filters); the module itself
cannot be pointed elsewhere, so the worker hands the folder to gather_gpu_facts.
"""

import functools
import json
import os
import sys

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import KubegpuError
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import nvml as nvml_facts
from ansible_collections.kubegpu.cluster.plugins.modules import mig_layout
from sandbox.fakenvml import mig_state


def main():
    job = json.load(sys.stdin)
    mig_layout.gather_gpu_facts = functools.partial(nvml_facts.gather_gpu_facts,
                                                    pci_devices_path=job.get("pci") or "/nonexistent",
                                                    proc_modules="/nonexistent")
    with open(job["profile"], encoding="utf-8") as handle:
        profile = json.load(handle)
    results = []
    for step in job["steps"]:
        if step.get("reset"):
            results.append({"rc": 0, "result": {"reset": mig_state.reset(profile, job["state"])}})
            continue
        if step.get("clear"):
            if os.path.exists(job["state"]):
                os.remove(job["state"])
            results.append({"rc": 0, "result": {}})
            continue
        params = {"config": step["config"], "config_file": None, "name": step["name"]}
        try:
            results.append({"rc": 0, "result": mig_layout.work(params, step.get("check", False), True)})
        except KubegpuError as exc:
            results.append({"rc": 1, "msg": str(exc)})
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
