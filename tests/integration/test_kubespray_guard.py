# SPDX-License-Identifier: GPL-3.0-or-later
"""The container_toolkit role on a node Kubespray manages: it refuses (or, when asked, warns about) editing the
containerd config.toml that Kubespray renders again, naming the Kubespray inventory variables that give the same
result, and writes nothing where the config Kubespray rendered already has the runtime as asked. Judged by the real
``containerd config dump`` of this machine's containerd (make docker-engine installs it)."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import sys

import pytest

from ansible_cli import run_playbook
from setup_steps import missing_setup

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
KUBESPRAY = os.path.join(ROOT, "tests", "fixtures", "runtime", "corpus", "containerd-kubespray-v2.toml")
PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: kubegpu.cluster.container_toolkit
        tasks_from: kubespray_containerd
"""
# What Kubespray renders for the variables the role names (its template writes each runtime's type, engine, root and
# options under the CRI plugin's runtimes, and containerd_default_runtime as default_runtime_name).
NVIDIA = """
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
          runtime_type = "io.containerd.runc.v2"
          runtime_engine = ""
          runtime_root = ""

          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
            BinaryName = "/usr/bin/nvidia-container-runtime"
            SystemdCgroup = true
"""


@pytest.fixture
def containerd():
    if shutil.which("containerd") is None:
        missing_setup("no containerd on this machine: make docker-engine installs Debian's")


def run(tmp_path, config_text, **extra):
    config = tmp_path / "config.toml"
    config.write_text(config_text)
    play = tmp_path / "play.yml"
    play.write_text(PLAYBOOK)
    variables = dict({"ansible_python_interpreter": sys.executable, "container_toolkit_containerd_config": str(config)},
                     **extra)
    code, tasks = run_playbook(play, variables)
    assert config.read_text() == config_text  # never written here
    return code, dict(tasks)


def gives(results):
    return next(r["ansible_facts"]["_container_toolkit_kubespray_gives"] for r in results.values()
                if "_container_toolkit_kubespray_gives" in r.get("ansible_facts", {}))


def test_a_kubespray_config_without_the_runtime_fails_with_the_inventory_variables(tmp_path, containerd):
    rc, results = run(tmp_path, open(KUBESPRAY).read(), container_toolkit_cdi=True)
    failed = results["Refuse to edit a containerd config that Kubespray renders again"]
    assert rc != 0 and failed["failed"] and gives(results) is False
    message = failed["msg"]
    assert "containerd:\n\n  containerd_additional_runtimes:\n    - name: nvidia\n" in message  # a block to paste
    for words in ("Kubespray manages this node", "Nothing was written", "containerd_additional_runtimes:",
                  "- name: nvidia", "type: io.containerd.runc.v2", "BinaryName: /usr/bin/nvidia-container-runtime",
                  'SystemdCgroup: "true"',  # as Kubespray's runc has it (the config's runc options)
                  "containerd_default_runtime: nvidia", "enable_cdi: true"):
        assert words in message, words


def test_warn_says_the_same_and_goes_on(tmp_path, containerd):
    rc, results = run(tmp_path, open(KUBESPRAY).read(), container_toolkit_kubespray="warn", container_toolkit_set_as_default=False)
    warned = results["Say that Kubespray will undo the edit"]["msg"]
    assert rc == 0 and "containerd_additional_runtimes:" in warned and "containerd_default_runtime" not in warned


def test_the_config_kubespray_renders_from_those_variables_needs_nothing(tmp_path, containerd):
    text = open(KUBESPRAY).read().replace('default_runtime_name = "runc"', 'default_runtime_name = "nvidia"')
    text = text.replace('    [plugins."io.containerd.grpc.v1.cri".registry]', NVIDIA.strip("\n") + "\n"
                        + '    [plugins."io.containerd.grpc.v1.cri".registry]')
    rc, results = run(tmp_path, text)
    assert rc == 0 and gives(results) is True
    assert results["Refuse to edit a containerd config that Kubespray renders again"].get("skipped")
    # the same file with another default: the role's default asks for nvidia as the default, so it refuses
    rc, results = run(tmp_path, text.replace('default_runtime_name = "nvidia"', 'default_runtime_name = "runc"'))
    assert rc != 0 and gives(results) is False
