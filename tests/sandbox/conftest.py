# SPDX-License-Identifier: GPL-3.0-or-later
"""Fixtures for the fake NVML tests: build the library once, run pynvml against it in subprocesses."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROFILES_DIR = ROOT / 'sandbox' / 'profiles'
PROBE = Path(__file__).resolve().parent / 'nvml_probe.py'


class NvmlRunner:
    """Runs Python code in a child process that loads the fake libnvidia-ml.so.1 through the dynamic loader."""

    def __init__(self, lib_dir):
        self.lib_dir = lib_dir
        self.lib_path = lib_dir / 'libnvidia-ml.so.1'

    def env(self, profile):
        env = dict(os.environ)
        env['LD_LIBRARY_PATH'] = str(self.lib_dir)
        if profile is None:
            env.pop('FAKE_NVML_PROFILE', None)
        else:
            env['FAKE_NVML_PROFILE'] = str(profile)
        return env

    def run(self, profile, code, check=True):
        """Run code (a Python snippet) and return the CompletedProcess."""
        proc = subprocess.run([sys.executable, '-c', code], env=self.env(profile), capture_output=True, text=True,
                              timeout=60, check=False)
        if check:
            assert proc.returncode == 0, 'child failed (rc %d):\n%s%s' % (proc.returncode, proc.stdout, proc.stderr)
        return proc

    def json(self, profile, code):
        """Run code that prints one JSON document and return it parsed."""
        proc = self.run(profile, code)
        assert proc.stderr == '', proc.stderr
        return json.loads(proc.stdout)

    def probe(self, profile):
        """What pynvml sees for profile (see nvml_probe.py)."""
        proc = subprocess.run([sys.executable, str(PROBE)], env=self.env(profile), capture_output=True, text=True,
                              timeout=60, check=False)
        assert proc.returncode == 0 and proc.stderr == '', proc.stderr
        return json.loads(proc.stdout)


@pytest.fixture(scope='session')
def nvml(fake_nvml_dir):
    return NvmlRunner(fake_nvml_dir)


@pytest.fixture(scope='session')
def load_profile():
    def _load(name):
        with open(PROFILES_DIR / ('%s.json' % name), encoding='utf-8') as handle:
            return json.load(handle)
    return _load
