# SPDX-License-Identifier: GPL-3.0-or-later
"""The gpu_driver role run by ansible-playbook on localhost, with the real pynvml loading the fake NVML library.

The molecule scenario proves the same role on systemd node containers; this covers every profile and bad input fast.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import sys

import pytest

from ansible_cli import run_playbook

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROFILES = os.path.join(ROOT, "sandbox", "profiles")
PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: kubegpu.cluster.gpu_driver
"""


@pytest.fixture(scope="module")
def playbook(tmp_path_factory, fake_nvml_dir):
    path = tmp_path_factory.mktemp("play") / "play.yml"
    path.write_text(PLAYBOOK)
    return str(path), str(fake_nvml_dir)


def run_role(playbook_and_lib, profile, **extra_vars):
    playbook, lib_dir = playbook_and_lib
    env = {}
    if profile:
        env.update(LD_LIBRARY_PATH=lib_dir, FAKE_NVML_PROFILE=os.path.join(PROFILES, profile + ".json"))
    extra = dict({"gpu_driver_python_manage": False, "ansible_python_interpreter": sys.executable}, **extra_vars)
    code, tasks = run_playbook(playbook, extra, env=env)
    return code, [result for _name, result in tasks]


def verdict_of(results):
    facts = [r["ansible_facts"]["gpu_driver_verdict"] for r in results if "gpu_driver_verdict" in r.get("ansible_facts", {})]
    assert len(facts) == 1
    return facts[0]


@pytest.mark.parametrize("profile, status, words", [
    ("v100x4", "ok", None),
    ("a100x8-mig-mixed", "ok", None),
    ("h100", "ok", None),
    ("t4", "ok", None),
    ("gtx1060", "failed", "NVIDIA driver 390.30 is older than the required 418.81.07"),
    ("failure-device-lost", "failed", "GPU 1 does not answer NVML (handle: GPU is lost)"),
    ("failure-no-permission", "failed", "become: true"),
])
def test_verdict_per_profile_with_default_minimum(playbook, profile, status, words):
    code, results = run_role(playbook, profile, gpu_driver_fail_on_problem=False)
    assert code == 0
    verdict = verdict_of(results)
    assert verdict["status"] == status, verdict
    if words:
        assert words in " ".join(verdict["problems"])


def test_failure_names_host_found_and_fix(playbook):
    code, results = run_role(playbook, "t4", gpu_driver_min_version="470")
    assert code == 2
    failed = [r for r in results if r.get("failed")]
    assert len(failed) == 1
    assert failed[0]["msg"] == ("gpu_driver on localhost (1 x Tesla T4, driver 450.102.04): NVIDIA driver 450.102.04 is older than "
                                "the required 470 (gpu_driver_min_version); install driver 470 or newer")


def test_host_without_gpu_is_skipped_with_a_message(playbook):
    code, results = run_role(playbook, None)
    assert code == 0
    assert verdict_of(results)["status"] == "skipped"
    assert any("driver checks skipped" in str(r.get("msg", "")) for r in results)


def test_host_without_gpu_fails_when_a_gpu_is_required(playbook):
    code, results = run_role(playbook, None, gpu_driver_require_gpu=True)
    assert code == 2
    assert any("no GPU was found (PCI bus: no NVIDIA, AMD or Intel display or 3D controller" in str(r.get("msg", ""))
               for r in results if r.get("failed"))


def test_invalid_min_version_is_one_clear_error(playbook):
    code, results = run_role(playbook, "v100x4", gpu_driver_min_version="latest")
    assert code == 2
    failed = [r for r in results if r.get("failed")]
    assert len(failed) == 1 and "gpu_driver_min_version: 'latest' is not a version" in failed[0]["msg"]


def test_invalid_option_type_is_refused_by_the_argument_spec(playbook):
    code, results = run_role(playbook, "v100x4", gpu_driver_require_gpu="perhaps")
    assert code == 2
    failed = [r for r in results if r.get("failed")]
    assert len(failed) == 1 and "gpu_driver_require_gpu" in failed[0]["msg"]


def test_check_mode_on_a_fresh_host_reads_the_pci_bus_with_the_hosts_own_python(tmp_path):
    """Issue 26: in check mode on a fresh host (no virtualenv, no nvidia-ml-py) the role used to read nothing, so the
    later stages planned the toolkit on every host, GPU or not. Now the host's own Python reads the PCI bus (gpu_facts
    needs no nvidia-ml-py for that), and the role says what it cannot know yet. This machine has no NVIDIA GPU: the
    fact says so, and the stages that key on it plan nothing here."""
    import json  # pylint: disable=import-outside-toplevel
    import shutil  # pylint: disable=import-outside-toplevel
    import subprocess  # pylint: disable=import-outside-toplevel
    from ansible_cli import ROOT as CLI_ROOT, _environment  # pylint: disable=import-outside-toplevel
    plain = shutil.which("python3", path="/usr/bin:/bin")
    probe = subprocess.run([plain, "-c", "import pynvml"], capture_output=True, check=False) if plain else None
    if plain is None or probe.returncode == 0:
        pytest.skip("needs a system python3 without nvidia-ml-py (found: %s)" % plain)
    play = tmp_path / "play.yml"
    play.write_text(PLAYBOOK)
    venv = tmp_path / "not-there-yet"
    command = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "--check", str(play), "-e",
               json.dumps({"ansible_python_interpreter": plain, "python_env_venv": str(venv)})]
    proc = subprocess.run(command, env=_environment(), capture_output=True, text=True, check=False, cwd=CLI_ROOT,
                          timeout=600)
    tasks = json.loads(proc.stdout)["plays"][0]["tasks"]
    results = [(t["task"]["name"].split(" : ")[-1], t["hosts"]["localhost"]) for t in tasks if "localhost" in t["hosts"]]
    assert proc.returncode == 0, results
    reads = [r for name, r in results if name.startswith("Read the GPUs again") and "ansible_facts" in r]
    assert reads, results
    gpu = reads[-1]["ansible_facts"]["gpu"]
    assert gpu["nvml"]["status"] == "bindings_missing" and gpu["present"] is False
    said = [r["msg"] for name, r in results if name == "Explain what check mode cannot know yet"]
    assert said and "the driver cannot be asked in check mode yet" in said[0] and "plan nothing for this node" in said[0]
    assert not venv.exists()  # check mode: nothing made
