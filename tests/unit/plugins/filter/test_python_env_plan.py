# SPDX-License-Identifier: GPL-3.0-or-later
"""python_env's plan: the requirements a call makes sure of, and the one command that checks them, run here with a
real shell against a virtualenv-shaped directory."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import subprocess
import sys

from ansible_collections.kubegpu.cluster.plugins.filter.python_env_plan import python_env_plan

REQUIREMENTS = ["# pinned", "", "nvidia-ml-py==13.615.71", "tomlkit==0.15.2", "kubernetes==37.0.2"]
SCRIPT = "import json, sys; print(json.dumps(sys.argv[1:]))"  # a stand-in: reports every requirement as unmet
COLLECTION = ["nvidia-ml-py", "tomlkit"]


def plan(packages, prepared=(), venv="/opt/kubegpu/venv"):
    return python_env_plan(packages, REQUIREMENTS, venv, SCRIPT, collection_packages=COLLECTION, prepared=prepared)


def test_bare_names_get_their_pins_and_the_collections_packages_come_along():
    assert plan(["NVIDIA-ML-PY"])["wanted"] == ["nvidia-ml-py==13.615.71", "tomlkit==0.15.2"]


def test_a_callers_own_requirement_wins_and_unknown_names_stay_bare():
    assert plan(["nvidia-ml-py>=12", "foo"])["wanted"] == ["nvidia-ml-py>=12", "foo", "tomlkit==0.15.2"]


def test_what_an_earlier_call_prepared_is_not_asked_again():
    assert plan(["tomlkit"], prepared=["nvidia-ml-py==13.615.71"])["wanted"] == ["tomlkit==0.15.2"]


def run(command):
    return subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, check=False)


def fake_venv(tmp_path, dist_infos):
    """A directory shaped like a virtualenv: bin/python (this interpreter) and site-packages with the given dist-infos."""
    (tmp_path / "bin").mkdir()
    os.symlink(sys.executable, str(tmp_path / "bin" / "python"))
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    for name in dist_infos:
        (site / name).mkdir()
    return str(tmp_path)


def test_exact_pins_are_checked_by_their_dist_info_directories(tmp_path):
    venv = fake_venv(tmp_path, ["nvidia_ml_py-13.615.71.dist-info", "tomlkit-0.15.2.dist-info"])
    out = run(plan(["nvidia-ml-py"], venv=venv)["command"])
    assert (out.returncode, json.loads(out.stdout)) == (0, [])


def test_a_missing_pin_falls_back_on_the_script(tmp_path):
    venv = fake_venv(tmp_path, ["nvidia_ml_py-13.615.71.dist-info"])
    out = run(plan(["nvidia-ml-py"], venv=venv)["command"])
    assert json.loads(out.stdout) == ["nvidia-ml-py==13.615.71", "tomlkit==0.15.2"]


def test_a_range_always_asks_the_script(tmp_path):
    venv = fake_venv(tmp_path, ["nvidia_ml_py-13.615.71.dist-info", "tomlkit-0.15.2.dist-info"])
    out = run(plan(["nvidia-ml-py>=12"], venv=venv)["command"])
    assert json.loads(out.stdout) == ["nvidia-ml-py>=12", "tomlkit==0.15.2"]


def test_no_virtualenv_fails_the_command(tmp_path):
    out = run(plan(["nvidia-ml-py"], venv=str(tmp_path / "missing"))["command"])
    assert out.returncode != 0


def test_paths_and_requirements_are_quoted(tmp_path):
    odd = tmp_path / "with space; and"
    odd.mkdir()
    venv = fake_venv(odd, ["nvidia_ml_py-13.615.71.dist-info", "tomlkit-0.15.2.dist-info"])
    out = run(plan(["nvidia-ml-py"], venv=venv)["command"])
    assert (out.returncode, json.loads(out.stdout)) == (0, [])


def test_without_a_virtualenv_the_plan_is_only_the_pins():
    assert python_env_plan(["tomlkit"], REQUIREMENTS) == {"wanted": ["tomlkit==0.15.2"]}
