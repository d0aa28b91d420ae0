# SPDX-License-Identifier: GPL-3.0-or-later
"""Run one module of the collection through the real `ansible` command line, as a user would, and return the host's
result as the JSON callback reports it. Shared by the end-to-end tests."""

import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
ANSIBLE = os.path.join(os.path.dirname(sys.executable), "ansible")


def run_module(name, args=None, check=False, diff=False, env=None, timeout=600):
    """``ansible localhost -m name -a args``; returns (exit code, the host's result).

    The environment is this process's, without the fake NVML's variables (a test passes them in ``env`` when it wants
    the fake library), plus ``env``.
    """
    environ = dict((k, v) for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "FAKE_NVML_PROFILE"))
    environ.update(ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
                   ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".build", "collections"),
                   ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    environ.update(env or {})
    command = [ANSIBLE, "localhost", "-m", name, "-e", "ansible_python_interpreter=" + sys.executable]
    command += ["-a", json.dumps(args)] if args else []
    command += ["--check"] if check else []
    command += ["--diff"] if diff else []
    proc = subprocess.run(command, env=environ, capture_output=True, text=True, check=False, cwd=ROOT, timeout=timeout)
    try:
        result = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    except (ValueError, KeyError, IndexError) as exc:
        raise AssertionError("no JSON result from ansible (rc %s):\n%s\n%s" % (proc.returncode, proc.stdout, proc.stderr)) from exc
    return proc.returncode, result
