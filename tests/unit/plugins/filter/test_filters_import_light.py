# SPDX-License-Identifier: GPL-3.0-or-later
"""Each controller worker that templates one of our filters imports it: none may load the kubernetes client (0.4 s of
CPU per import, docs/benchmarks.md), which only modules that talk to the API server need."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import subprocess
import sys

import pytest

FILTERS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "plugins", "filter")
NAMES = sorted(f[:-3] for f in os.listdir(FILTERS) if f.endswith(".py") and not f.startswith("_"))


@pytest.mark.parametrize("name", NAMES)
def test_a_filter_plugin_does_not_load_the_kubernetes_client(name):
    script = ("import sys\n"
              "import ansible_collections.kubegpu.cluster.plugins.filter.%s\n"
              "print(sorted(m for m in sys.modules if m == 'kubernetes' or m.startswith('kubernetes.')))\n" % name)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                         env=dict(os.environ, PYTHONPATH=":".join(sys.path)))
    assert out.stdout.strip() == "[]", name
