# SPDX-License-Identifier: GPL-3.0-or-later
"""Fixtures shared by every test folder."""

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FAKENVML_DIR = ROOT / 'sandbox' / 'fakenvml'


@pytest.fixture(scope='session')
def fake_nvml_dir(tmp_path_factory):
    """Build libnvidia-ml.so.1 once per session with the area's own Makefile."""
    wanted = os.environ.get('FAKENVML_BUILD_DIR')
    build_dir = Path(wanted) if wanted else tmp_path_factory.mktemp('fakenvml')
    proc = subprocess.run(['make', '-s', '-C', str(FAKENVML_DIR), 'BUILD_DIR=%s' % build_dir], capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, 'building the fake NVML library failed:\n%s%s' % (proc.stdout, proc.stderr)
    assert (build_dir / 'libnvidia-ml.so.1').is_file()
    return build_dir
