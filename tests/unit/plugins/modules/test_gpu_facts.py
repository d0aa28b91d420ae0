# SPDX-License-Identifier: GPL-3.0-or-later
"""main() of gpu_facts on this machine, which has no NVIDIA library: it must report, not fail."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

import pytest

from ansible.module_utils.testing import patch_module_args
from ansible_collections.kubegpu.cluster.plugins.modules import gpu_facts


def run_main(capsys, args=None):
    with patch_module_args(args or {}):
        with pytest.raises(SystemExit) as exit_info:
            gpu_facts.main()
    return exit_info.value.code, json.loads(capsys.readouterr().out)


def test_reports_missing_library_without_failing(capsys, monkeypatch):
    monkeypatch.setenv("LD_LIBRARY_PATH", "/nonexistent")
    code, result = run_main(capsys)
    gpu = result["ansible_facts"]["gpu"]
    assert code == 0 and result["changed"] is False
    if gpu["nvml"]["status"] == "ok":
        pytest.skip("this machine has a working NVML, so the no-library path cannot be seen here")
    assert gpu["nvml"]["status"] == "library_not_found"
    assert gpu["present"] is False and gpu["count"] == 0 and gpu["devices"] == []


def test_rejects_unknown_options(capsys):
    code, result = run_main(capsys, {"bogus": 1})
    assert code == 1 and "bogus" in result["msg"]


def test_missing_bindings_report_the_pci_bus_and_say_what_to_install(capsys, monkeypatch):
    """Issue 26: the README's first example failed on a plain host without nvidia-ml-py."""
    monkeypatch.setattr(gpu_facts, "pynvml", None)
    monkeypatch.setattr(gpu_facts, "PYNVML_IMPORT_ERROR", "Traceback: No module named pynvml")
    code, result = run_main(capsys)
    gpu = result["ansible_facts"]["gpu"]
    assert code == 0 and result["changed"] is False
    assert gpu["nvml"]["status"] == "bindings_missing" and "pip install nvidia-ml-py" in gpu["nvml"]["message"]
    assert gpu["present"] is bool(gpu["pci"]) and gpu["count"] == 0 and isinstance(gpu["pci"], list)
    assert "amd" in gpu and "intel" in gpu and "vendors" in gpu
