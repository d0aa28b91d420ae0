# SPDX-License-Identifier: GPL-3.0-or-later
"""python_env prepares the collection's virtualenv once per host per run: its first call installs every package the
collection's modules need on a host, so the second role's call finds its own prepared. That list must be what the
roles ask for, and pinned in requirements.txt."""

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def load(path):
    return yaml.safe_load((ROOT / path).read_text(encoding="utf-8"))


def test_the_collections_host_packages_are_what_the_roles_ask_for():
    prepared = load("roles/python_env/vars/main.yml")["_python_env_collection_packages"]
    asked = (load("roles/gpu_driver/defaults/main.yml")["gpu_driver_python_packages"]
             + load("roles/container_toolkit/vars/main.yml")["_container_toolkit_python_packages"])
    assert sorted(prepared) == sorted(set(asked))
    pinned = set(re.match(r"[A-Za-z0-9._-]+", line).group(0).lower()
                 for line in (ROOT / "requirements.txt").read_text().splitlines() if line.strip() and not line.startswith("#"))
    assert set(prepared) <= pinned


def test_the_check_reads_requirements_as_pip_does(tmp_path):
    """The check script, run with this interpreter (which has pip), on requirements met and unmet."""
    import json
    import subprocess
    import sys
    script = load("roles/python_env/vars/main.yml")["_python_env_check_script"]
    from importlib import metadata
    have = metadata.version("PyYAML")
    out = subprocess.run([sys.executable, "-I", "-c", script, "PyYAML==%s" % have, "pyyaml>=1.0", "PyYAML<1.0",
                          "no-such-package-kubegpu==1.0"], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == ["PyYAML<1.0", "no-such-package-kubegpu==1.0"]
