# SPDX-License-Identifier: GPL-3.0-or-later
"""python_env's one check, run by the role on this machine against a virtualenv of the test's own: exact pins are
judged from their dist-info directories without reading package metadata, anything else by pip's rules; a pin the
virtualenv does not meet sends the role to its install tasks (run here in check mode, so nothing is installed)."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import subprocess
import sys

import pytest

from ansible_cli import ROOT, _environment

PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: kubegpu.cluster.python_env
"""


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    path = tmp_path_factory.mktemp("venv") / "kubegpu"
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    site = next(path.glob("lib/python3*/site-packages"))
    # an installed distribution, as pip lays it out (its metadata is what importlib.metadata reads)
    info = site / "kubegpu_probe_pkg-1.2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: kubegpu-probe-pkg\nVersion: 1.2.3\n")
    return path


def check(tmp_path, venv, packages):
    play = tmp_path / "play.yml"
    play.write_text(PLAYBOOK)
    # python_env also makes sure of the collection's own packages; pin them to what this venv lacks on purpose only
    # through python_env_packages, so the collection's pins are left out by naming them prepared already
    variables = {"ansible_python_interpreter": sys.executable, "python_env_venv": str(venv),
                 "python_env_packages": packages,
                 "python_env_prepared": {str(venv): ["nvidia-ml-py==0", "tomlkit==0"]}}
    # --check: the install tasks only say what they would do; the check itself always runs
    command = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "--check", str(play), "-e", json.dumps(variables)]
    proc = subprocess.run(command, env=_environment(), capture_output=True, text=True, check=False, cwd=ROOT, timeout=300)
    tasks = json.loads(proc.stdout)["plays"][0]["tasks"]
    return proc.returncode, dict((t["task"]["name"].split(" : ")[-1], t["hosts"]["localhost"]) for t in tasks)


@pytest.mark.parametrize("packages, unmet", [
    (["kubegpu-probe-pkg==1.2.3"], []),          # the exact pin: its dist-info directory is there
    (["kubegpu_probe_pkg>=1.0,<2"], []),          # pip's rules
    (["kubegpu-probe-pkg==1.2.4"], ["kubegpu-probe-pkg==1.2.4"]),
    (["kubegpu-probe-pkg<1"], ["kubegpu-probe-pkg<1"]),
])
def test_the_check_says_what_the_virtualenv_does_not_meet(tmp_path, venv, packages, unmet):
    code, results = check(tmp_path, venv, packages)
    assert code == 0, results
    found = results["Check the virtualenv's packages (one command)"]
    assert json.loads(found["stdout"].strip()) == unmet, found
    install = results["Install what the virtualenv lacks"]
    assert install.get("skipped", False) is (not unmet), install
    # nothing is installed in check mode: the role says the virtualenv is not ready yet
    ready = results["Tell the calling role whether the virtualenv is ready"]["ansible_facts"]
    assert (packages[0] in ready["python_env_prepared"][str(venv)]) is (not unmet)
    assert ready["python_env_pending"] is bool(unmet)
