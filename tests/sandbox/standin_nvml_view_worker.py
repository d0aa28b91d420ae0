# SPDX-License-Identifier: GPL-3.0-or-later
"""Print what the stand-in device plugin reads through NVML (sandbox/standins nvml_view.read) as JSON, or the init
error. Run with LD_LIBRARY_PATH at the fake libnvidia-ml.so.1 and FAKE_NVML_PROFILE at a profile."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sandbox" / "standins"))

from kubegpu_standins import nvml_view  # noqa: E402  pylint: disable=wrong-import-position

try:
    VIEW = nvml_view.read()
except nvml_view.NvmlInitError as exc:
    print(json.dumps({"init_error": exc.code}))
else:
    for device in VIEW["devices"]:
        device.pop("_handle", None)
    print(json.dumps(VIEW))
