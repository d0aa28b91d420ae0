# SPDX-License-Identifier: GPL-3.0-or-later
"""Answer gpu_facts' ``gpu`` fact for GPU profiles, one JSON line per profile path read on stdin.

Run with LD_LIBRARY_PATH at the fake libnvidia-ml.so.1: the real pynvml loads it once, and the fake reads
FAKE_NVML_PROFILE again at every first nvmlInit, so one process serves any number of profiles. The facts come
from the collection's own reader (module_utils/_nvidia/nvml.py), exactly what the gpu_facts module returns.
"""

import json
import os
import sys

import pynvml

from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.nvml import gather_gpu_facts


def main():
    for line in sys.stdin:
        os.environ["FAKE_NVML_PROFILE"] = line.strip()
        facts = gather_gpu_facts(pynvml, pci_devices_path="/nonexistent", proc_modules="/nonexistent")
        sys.stdout.write(json.dumps(facts, sort_keys=True) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
