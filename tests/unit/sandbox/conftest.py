# SPDX-License-Identifier: GPL-3.0-or-later
"""Make the repository root importable so tests can import ``sandbox.k8s``."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
