# SPDX-License-Identifier: GPL-3.0-or-later
"""gpu_facts and the gpu_driver role end to end on the AMD and Intel node containers of the fleet (``make nodes-up``:
kg-mi210, variant amd, profile mi210x2; kg-flex, variant intel, profile intel-flex170), over Ansible's docker
connection as the demo reaches them.

The nodes run the base image (no NVIDIA software); their sysfs shows what amdgpu or i915 would add (fake_pci.py,
overlaid on /sys/class and /sys/module by sandbox/images/nodes.yml). The driver-not-loaded case runs the module
through an interpreter that first leaves the node's mount namespace for one of its own without those overlays: the
GPUs stay on the PCI bus, the driver's sysfs is gone, as on a host where the module did not load. Skipped, with the
reason, when the fleet is not up.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from setup_steps import missing_setup

ROOT = Path(__file__).resolve().parents[2]
PROFILES_DIR = ROOT / "sandbox" / "profiles"
with open(ROOT / "sandbox" / "fleet.yml", encoding="utf-8") as _fleet:
    FLEET = dict((node["name"], node) for node in yaml.safe_load(_fleet)["nodes"])
VENV_PYTHON = "/opt/kubegpu/venv/bin/python"
BIN = os.path.dirname(sys.executable)
AMD_NODE, INTEL_NODE = "kg-mi210", "kg-flex"
MIB = 1024 * 1024
# An interpreter that runs Python in a mount namespace of its own without the fake driver sysfs (the overlays on
# /sys/class and /sys/module) and with the PCI devices' driver links left out (a copy on a tmpfs): the GPUs on the
# bus, no driver loaded or bound. The node itself is untouched.
NO_DRIVER_PYTHON = "/usr/local/sbin/kubegpu-test-no-gpu-driver-python"
NO_DRIVER_WRAPPER = """#!/bin/sh
exec unshare --mount sh -c 'umount /sys/class && umount /sys/module && mount -t tmpfs nodriver /mnt \\
  && cp -a /sys/bus/pci/devices/. /mnt/ && rm -f /mnt/*/driver && mount --bind /mnt /sys/bus/pci/devices \\
  && exec %s "$@"' python "$@"
""" % VENV_PYTHON
ROLE_PLAY = """
- hosts: all
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: kubegpu.cluster.gpu_driver
"""


def _profile(node):
    with open(PROFILES_DIR / ("%s.json" % FLEET[node]["profile"]), encoding="utf-8") as handle:
        return json.load(handle)


def _environment():
    return dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
                ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"), ANSIBLE_HOST_KEY_CHECKING="0",
                ANSIBLE_INVENTORY_UNPARSED_WARNING="0")


def _common(hosts, python):
    return ["-i", ",".join(hosts) + ",", "-e", "ansible_connection=community.docker.docker",
            "-e", "ansible_python_interpreter=" + python]


def _results(proc):
    try:
        return json.loads(proc.stdout)["plays"][0]["tasks"]
    except (ValueError, KeyError, IndexError) as exc:
        raise AssertionError("no JSON result from ansible (rc %s):\n%s\n%s"
                             % (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:])) from exc


def gpu_facts(hosts, python=VENV_PYTHON):
    """``{host: gpu fact}`` from ``ansible <hosts> -m kubegpu.cluster.gpu_facts`` over the docker connection."""
    proc = subprocess.run([os.path.join(BIN, "ansible"), "all", "-m", "kubegpu.cluster.gpu_facts"]
                          + _common(hosts, python), env=_environment(), capture_output=True, text=True,
                          timeout=300, check=False)
    results = _results(proc)[0]["hosts"]
    for host in hosts:
        assert not results[host].get("failed"), results[host]
    return dict((host, results[host]["ansible_facts"]["gpu"]) for host in hosts)


def run_role(tmp_path, hosts, python=VENV_PYTHON, **extra_vars):
    """The gpu_driver role on ``hosts``; returns (exit code, {host: (verdict or None, the failed result or None)})."""
    play = tmp_path / "play.yml"
    play.write_text(ROLE_PLAY)
    extra = dict({"gpu_driver_python_manage": False}, **extra_vars)
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), str(play), "-e", json.dumps(extra)]
                          + _common(hosts, python), env=_environment(), capture_output=True, text=True,
                          timeout=600, check=False)
    found = dict((host, [None, None]) for host in hosts)
    for task in _results(proc):
        for host, result in task["hosts"].items():
            verdict = (result.get("ansible_facts") or {}).get("gpu_driver_verdict")
            if verdict is not None:
                found[host][0] = verdict
            if result.get("failed"):
                found[host][1] = result
    return proc.returncode, dict((host, tuple(value)) for host, value in found.items())


@pytest.fixture(scope="module")
def nodes():
    """The AMD and Intel node containers, running; skips the module when the fleet is not up."""
    if shutil.which("docker") is None:
        missing_setup("fleet not up: no docker client (make nodes-up)")
    proc = subprocess.run(["docker", "ps", "--filter", "label=kubegpu.sandbox=1", "--format", "{{.Names}}"],
                          capture_output=True, text=True, timeout=30, check=False)
    if proc.returncode != 0:
        missing_setup("fleet not up: docker engine not answering (%s); run make nodes-up" % proc.stderr.strip())
    running = set(proc.stdout.split())
    for name in (AMD_NODE, INTEL_NODE):
        if name not in running:
            missing_setup("fleet not up: node %s of sandbox/fleet.yml is not running (make nodes-up)" % name)
    return (AMD_NODE, INTEL_NODE)


@pytest.fixture(scope="module")
def no_driver_python(nodes):
    """The interpreter of :data:`NO_DRIVER_WRAPPER`, installed on both nodes."""
    for name in nodes:
        proc = subprocess.run(["docker", "exec", "-i", name, "sh", "-c", "cat > %s && chmod 755 %s"
                               % (NO_DRIVER_PYTHON, NO_DRIVER_PYTHON)], input=NO_DRIVER_WRAPPER, text=True,
                              capture_output=True, timeout=30, check=False)
        assert proc.returncode == 0, proc.stderr
    return NO_DRIVER_PYTHON


def _bdf(bus_id):
    domain, bus, devfn = bus_id.lower().split(":")
    return "%04x:%s:%s" % (int(domain, 16), bus, devfn)


def test_amd_node_facts_match_its_profile(nodes):
    gpu = gpu_facts([AMD_NODE])[AMD_NODE]
    profile = _profile(AMD_NODE)
    wanted = profile["devices"]
    # NVIDIA's keys: nothing NVIDIA there, and present stays NVIDIA-only (the container toolkit stage keys on it)
    assert (gpu["present"], gpu["count"], gpu["devices"], gpu["nvml"]["status"]) == (False, 0, [], "library_not_found")
    assert gpu["vendors"] == ["amd"]
    assert [(p["address"], p["vendor"], p["vendor_id"], p["device_id"], p["class"], p["driver"]) for p in gpu["pci"]] \
        == [(_bdf(d["pci_bus_id"]), "amd", "0x1002", "0x%04x" % (int(d["pci_device_id"], 16) >> 16), d["pci_class"],
             "amdgpu") for d in wanted]
    amd = gpu["amd"]
    assert (amd["count"], amd["status"]) == (2, "ok")
    assert amd["driver"] == {"module": "amdgpu", "loaded": True, "version": profile["driver_version"], "kfd": True}
    for index, (got, want) in enumerate(zip(amd["devices"], wanted)):
        assert got["address"] == _bdf(want["pci_bus_id"])
        assert (got["name"], got["memory_total_mib"], got["driver"]) == (want["name"], want["memory_total_mib"], "amdgpu")
        assert (got["card"], got["render"], got["kfd_node"]) == ("card%d" % index, "renderD%d" % (128 + index), index + 1)
        assert (got["gfx_target_version"], got["gfx_target"]) == (want["gfx_target_version"], "gfx90a")
        assert (got["simd_count"], got["cu_count"], got["num_xcc"]) == (want["simd_count"], want["cu_count"], 1)
    assert gpu["intel"]["count"] == 0 and gpu["intel"]["status"] == "no_gpu"


def test_intel_node_facts_match_its_profile(nodes):
    gpu = gpu_facts([INTEL_NODE])[INTEL_NODE]
    want = _profile(INTEL_NODE)["devices"][0]
    assert (gpu["present"], gpu["count"], gpu["vendors"]) == (False, 0, ["intel"])
    intel = gpu["intel"]
    assert (intel["count"], intel["status"], intel["modules"]) == (1, "ok", {"i915": True, "xe": False})
    assert intel["driver"] == {"module": "i915", "loaded": True, "version": None}
    got = intel["devices"][0]
    assert (got["address"], got["device_id"], got["name"]) == (_bdf(want["pci_bus_id"]), "0x56c0", want["name"])
    assert (got["driver"], got["memory_total_mib"], got["tiles"]) == ("i915", want["memory_total_mib"], 1)
    assert (got["card"], got["render"]) == ("card0", "renderD128")
    assert gpu["amd"]["count"] == 0 and gpu["amd"]["status"] == "no_gpu"


def test_gpu_driver_role_passes_healthy_amd_and_intel_hosts_without_an_nvidia_driver(nodes, tmp_path):
    # gpu_driver_install: true must not try to install NVIDIA's driver on a host with only AMD or Intel GPUs
    code, hosts = run_role(tmp_path, list(nodes), gpu_driver_install=True)
    assert code == 0, hosts
    assert hosts[AMD_NODE] == ({"status": "ok", "problems": [], "summary": "2 x AMD Instinct MI210, amdgpu 6.8.5"}, None)
    assert hosts[INTEL_NODE] == ({"status": "ok", "problems": [],
                                  "summary": "1 x Intel Data Center GPU Flex 170, i915"}, None)


def test_driver_not_loaded_is_reported_with_what_to_do(nodes, no_driver_python):
    facts = gpu_facts(list(nodes), python=no_driver_python)
    amd, intel = facts[AMD_NODE]["amd"], facts[INTEL_NODE]["intel"]
    # the GPUs are still on the PCI bus; the driver's sysfs is gone
    assert (amd["count"], amd["status"], amd["driver"]["loaded"], amd["driver"]["kfd"]) == (2, "driver_not_loaded", False, False)
    assert [(d["driver"], d["card"], d["kfd_node"]) for d in amd["devices"]] == [(None, None, None)] * 2
    assert (intel["count"], intel["status"], intel["modules"]) == (1, "driver_not_loaded", {"i915": False, "xe": False})
    assert [(d["driver"], d["card"], d["memory_total_mib"]) for d in intel["devices"]] == [(None, None, None)]


def test_gpu_driver_role_fails_a_host_whose_driver_is_not_loaded(nodes, no_driver_python, tmp_path):
    code, hosts = run_role(tmp_path, list(nodes), python=no_driver_python, gpu_driver_install=True)
    assert code != 0
    verdict, failed = hosts[AMD_NODE]
    assert verdict["status"] == "failed" and failed is not None, hosts
    assert failed["msg"].startswith("gpu_driver on %s (2 x AMD Instinct MI210): " % AMD_NODE), failed["msg"]
    assert "2 AMD GPU(s) on the PCI bus but the amdgpu kernel module is not loaded" in failed["msg"]
    assert "'modprobe amdgpu'" in failed["msg"] and "this collection does not install AMD drivers" in failed["msg"]
    verdict, failed = hosts[INTEL_NODE]
    assert verdict["status"] == "failed" and failed is not None, hosts
    assert failed["msg"].startswith("gpu_driver on %s (1 x Intel Data Center GPU Flex 170): " % INTEL_NODE), failed["msg"]
    assert "1 Intel GPU(s) on the PCI bus (device id 0x56c0) but neither the i915 nor the xe kernel module is loaded" \
        in failed["msg"]
    assert "this collection does not install Intel drivers" in failed["msg"]
    # only reported with gpu_driver_fail_on_problem false
    code, hosts = run_role(tmp_path, list(nodes), python=no_driver_python, gpu_driver_fail_on_problem=False)
    assert code == 0, hosts
    for name in nodes:
        verdict, failed = hosts[name]
        assert failed is None and verdict["status"] == "failed" and len(verdict["problems"]) == 1, hosts


@pytest.mark.parametrize("name, driver", [(AMD_NODE, "amdgpu"), (INTEL_NODE, "i915")])
def test_the_fake_driver_sysfs_lies_over_the_real_one(nodes, name, driver):
    """The overlays add the driver's entries and keep the node's own (its network devices, the kernel's modules)."""
    probe = ("import json, os; print(json.dumps({'net': sorted(os.listdir('/sys/class/net')), "
             "'drm': sorted(os.listdir('/sys/class/drm')), 'modules': len(os.listdir('/sys/module')), "
             "'driver': os.path.isdir('/sys/module/%s/drivers/pci:%s'), 'kfd': os.path.isdir('/sys/class/kfd/kfd')}))"
             % (driver, driver))
    proc = subprocess.run(["docker", "exec", name, "python3", "-c", probe], capture_output=True, text=True, timeout=30,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert {"lo", "eth0"} <= set(seen["net"]) and seen["modules"] > 1 and seen["driver"] is True
    cards = len(_profile(name)["devices"])
    assert seen["drm"] == sorted(["card%d" % i for i in range(cards)] + ["renderD%d" % (128 + i) for i in range(cards)])
    assert seen["kfd"] is (driver == "amdgpu")
