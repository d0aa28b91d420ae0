# SPDX-License-Identifier: GPL-3.0-or-later
"""The dra role's `host` entry point on a node container like the fleet's (tests/node_container.py), over the docker
connection, with the node's own systemd:

- the node's containerd is Debian's 1.6: refused before anything changes (its config untouched, no boot unit);
- with a containerd 2.x binary put first on the node's PATH (CONTAINERD2, `make containerd2`) CDI is on: the role
  writes and enables the boot unit that creates NVIDIA's device nodes, and a rerun changes nothing. The device nodes
  are present as plain files made by this test: the node has no NVIDIA driver, so nvidia-ctk could not make them;
- with containerd 1.7 in place of 1.6 (CONTAINERD17, `make containerd17`), CDI is off: the role turns it on through
  the container_toolkit role (drop-in, restart, verification), and containerd's own dump says so.
"""

import os

import pytest

from node_container import NodeContainer
from setup_steps import missing_setup

PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: DRA host preparation
      ansible.builtin.include_role:
        name: kubegpu.cluster.dra
        tasks_from: host
"""
CONTAINERD2 = os.environ.get("CONTAINERD2")
CONTAINERD17 = os.environ.get("CONTAINERD17")
UNIT = "/etc/systemd/system/nvidia-device-nodes.service"
STATE = "sha256sum /etc/containerd/config.toml; test -e %s && echo unit-present || echo no-unit" % UNIT


def _failed(tasks):
    return [(name, result) for name, result in tasks if result.get("failed")]


def test_containerd_16_is_refused_before_any_change(tmp_path):
    with NodeContainer("dcl-dra-host16-%d" % os.getpid(), label="dcl_dra_host") as node:
        before = node.run(STATE)
        rc, tasks = node.play(PLAYBOOK, tmp_path, dra_runtime="containerd")
        assert rc != 0, tasks
        (name, result), = _failed(tasks)
        assert name == "Check the runtime, find the kubelet's root dir, create NVIDIA's missing device nodes"
        assert "containerd 1.6.20 cannot start a DRA pod's devices" in result["msg"], result
        assert node.run(STATE) == before and "no-unit" in before


def test_containerd_2_gets_the_boot_unit_and_a_rerun_changes_nothing(tmp_path):
    if not CONTAINERD2 or not os.access(CONTAINERD2, os.X_OK):
        missing_setup("set CONTAINERD2 to a containerd 2.x binary (make containerd2 builds one)")
    volumes = ["%s:/usr/local/bin/containerd:ro" % CONTAINERD2]
    with NodeContainer("dcl-dra-host2-%d" % os.getpid(), label="dcl_dra_host", volumes=volumes) as node:
        node.run("for d in nvidiactl nvidia-modeset nvidia-uvm nvidia-uvm-tools; do touch /dev/$d; done")
        rc, check = node.play(PLAYBOOK, tmp_path, check=True, dra_runtime="containerd")
        assert rc == 0 and not _failed(check), check
        assert "no-unit" in node.run(STATE)
        rc, tasks = node.play(PLAYBOOK, tmp_path, dra_runtime="containerd")
        assert rc == 0, _failed(tasks)
        prep = dict(tasks)["Check the runtime, find the kubelet's root dir, create NVIDIA's missing device nodes"]
        assert prep["runtime_version"].startswith("2.") and prep["cdi"]["cdi"] == "on", prep
        assert prep["kubelet_root_dir"] == "/var/lib/kubelet" and "no kubelet running" in prep["kubelet"]["source"]
        assert node.run("systemctl is-enabled nvidia-device-nodes.service").strip() == "enabled"
        assert "create-device-nodes --control-devices --load-kernel-modules" in node.run("cat %s" % UNIT)
        rc, again = node.play(PLAYBOOK, tmp_path, dra_runtime="containerd")
        assert rc == 0 and not [n for n, r in again if r.get("changed")], again


@pytest.fixture(autouse=True)
def _docker_or_skip():
    if os.system("docker info >/dev/null 2>&1") != 0:
        missing_setup("no docker engine here: the node containers need one (make docker-engine starts it)")


def test_containerd_17_gets_cdi_turned_on_through_the_container_toolkit_role(tmp_path):
    """containerd 1.7 (CONTAINERD17) in place of the node's 1.6, run by the node's own containerd.service: CDI is off,
    the role turns it on through the container_toolkit role (its drop-in, restart and verification; no packages: the
    node reaches no repository), and containerd's own config dump says it is on. The NVIDIA runtime binary the
    toolkit's configuration names is a stub this test writes: no container runs here."""
    if not CONTAINERD17 or not os.access(CONTAINERD17, os.X_OK):
        missing_setup("set CONTAINERD17 to a containerd 1.7 binary (make containerd17 builds one)")
    volumes = ["%s:/usr/bin/containerd:ro" % CONTAINERD17]
    with NodeContainer("dcl-dra-host17-%d" % os.getpid(), label="dcl_dra_host", volumes=volumes) as node:
        node.run("systemctl restart containerd; containerd --version | grep -q ' 1.7.'\n"
                 "for d in nvidiactl nvidia-modeset nvidia-uvm nvidia-uvm-tools; do touch /dev/$d; done\n"
                 "printf '#!/bin/sh\\nexit 1\\n' > /usr/bin/nvidia-container-runtime; chmod +x /usr/bin/nvidia-container-runtime")
        rc, tasks = node.play(PLAYBOOK, tmp_path, dra_runtime="containerd", container_toolkit_install=False)
        assert rc == 0, _failed(tasks)
        prep = dict(tasks)["Check the runtime, find the kubelet's root dir, create NVIDIA's missing device nodes"]
        assert prep["cdi"] == {"cdi": "off", "enable": True, "max_spec_version": "0.7.0"}, prep
        dump = node.run("containerd config dump")
        assert "enable_cdi = true" in dump, dump
        assert node.run("systemctl is-active containerd").strip() == "active"
        rc, again = node.play(PLAYBOOK, tmp_path, dra_runtime="containerd", container_toolkit_install=False)
        assert rc == 0 and not [n for n, r in again if r.get("changed")], again
        prep = dict(again)["Check the runtime, find the kubelet's root dir, create NVIDIA's missing device nodes"]
        assert prep["cdi"]["cdi"] == "on" and not prep["cdi"]["enable"], prep
