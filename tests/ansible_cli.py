# SPDX-License-Identifier: GPL-3.0-or-later
"""Run one module of the collection through the real `ansible` command line, as a user would, and return the host's
result as the JSON callback reports it. Shared by the end-to-end tests."""

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
ANSIBLE = os.path.join(os.path.dirname(sys.executable), "ansible")


def modules_extending(fragment):
    """The collection's modules whose DOCUMENTATION extends ``fragment`` (``kubegpu.cluster.k8s_auth``), sorted by
    name: read from the files, nothing imported."""
    found = []
    for path in sorted((Path(ROOT) / "plugins" / "modules").glob("*.py")):
        doc = yaml.safe_load(re.search(r'DOCUMENTATION = r"""(.*?)"""', path.read_text(encoding="utf-8"), re.S).group(1))
        if fragment in (doc.get("extends_documentation_fragment") or []):
            found.append(path.stem)
    return found


def fragment_options(fragment):
    """The options a doc fragment of the collection gives a module that extends it: ``kubegpu.cluster.<file>`` (its
    ``DOCUMENTATION``) or ``kubegpu.cluster.<file>.<var>`` (its ``<VAR>``, such as ``nvidia_runtime_options.plans``),
    read as Ansible reads them: from the class, whose attributes may be made from one another."""
    import importlib  # pylint: disable=import-outside-toplevel
    parts = fragment.split(".")[2:]
    holder = importlib.import_module("ansible_collections.kubegpu.cluster.plugins.doc_fragments." + parts[0])
    text = getattr(holder.ModuleDocFragment, parts[1].upper() if len(parts) > 1 else "DOCUMENTATION")
    return yaml.safe_load(text).get("options") or {}


def documented_options(module):
    """A module's documented options, with those of the collection's doc fragments it extends (ansible-test's
    validate-modules keeps them equal to its argument spec)."""
    path = Path(ROOT) / "plugins" / "modules" / (module + ".py")
    doc = yaml.safe_load(re.search(r'DOCUMENTATION = r"""(.*?)"""', path.read_text(encoding="utf-8"), re.S).group(1))
    options = {}
    for fragment in doc.get("extends_documentation_fragment") or []:
        if fragment.startswith("kubegpu.cluster."):
            options.update(fragment_options(fragment))
    options.update(doc.get("options") or {})
    return options


def _environment(env=None):
    """This process's environment without the fake NVML's variables, with the collection on Ansible's path, the JSON
    callback, plus ``env``."""
    environ = dict((k, v) for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "FAKE_NVML_PROFILE"))
    environ.update(ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
                   ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".build", "collections"),
                   ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    environ.update(env or {})
    return environ


def run_playbook(playbook, extra_vars=None, env=None, timeout=600):
    """``ansible-playbook playbook -e extra_vars`` on localhost (same environment as :func:`run_module`); returns
    (exit code, [(task name, localhost's result)] in order). A role's task is named as written, without the
    ``<role> : `` prefix."""
    command = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), str(playbook)]
    command += ["-e", json.dumps(extra_vars)] if extra_vars else []
    proc = subprocess.run(command, env=_environment(env), capture_output=True, text=True, check=False, cwd=ROOT,
                          timeout=timeout)
    try:
        tasks = json.loads(proc.stdout)["plays"][0]["tasks"]
    except (ValueError, KeyError, IndexError) as exc:
        raise AssertionError("no JSON result from ansible-playbook (rc %s):\n%s\n%s"
                             % (proc.returncode, proc.stdout, proc.stderr)) from exc
    return proc.returncode, [(t["task"]["name"].split(" : ")[-1], t["hosts"]["localhost"])
                             for t in tasks if "localhost" in t["hosts"]]


def _command(name, args=None, check=False, diff=False, env=None):
    """The command line and environment of ``ansible localhost -m name -a args``.

    The environment is this process's, without the fake NVML's variables (a test passes them in ``env`` when it wants
    the fake library), plus ``env``.
    """
    environ = _environment(env)
    command = [ANSIBLE, "localhost", "-m", name, "-e", "ansible_python_interpreter=" + sys.executable]
    command += ["-a", json.dumps(args)] if args else []
    command += ["--check"] if check else []
    command += ["--diff"] if diff else []
    return command, environ


def _host_result(returncode, stdout, stderr):
    try:
        return json.loads(stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    except (ValueError, KeyError, IndexError) as exc:
        raise AssertionError("no JSON result from ansible (rc %s):\n%s\n%s" % (returncode, stdout, stderr)) from exc


def run_module(name, args=None, check=False, diff=False, env=None, timeout=600, prefix=()):
    """``ansible localhost -m name -a args``; returns (exit code, the host's result).

    The environment is this process's, without the fake NVML's variables (a test passes them in ``env`` when it wants
    the fake library), plus ``env``. ``prefix``: a command that runs the ``ansible`` command line (fake_pci_bus.prefix).
    """
    command, environ = _command(name, args, check, diff, env)
    proc = subprocess.run(list(prefix) + command, env=environ, capture_output=True, text=True, check=False, cwd=ROOT, timeout=timeout)
    return proc.returncode, _host_result(proc.returncode, proc.stdout, proc.stderr)


class BackgroundModule:
    """``ansible localhost -m name -a args`` started in the background (same command and environment as
    :func:`run_module`), in a process group of its own; :meth:`result` waits for it. Use it as a context manager:
    leaving the block kills it (ansible and the module process it started) if it is still running."""

    def __init__(self, name, args=None, check=False, diff=False, env=None):
        command, environ = _command(name, args, check, diff, env)
        self.proc = subprocess.Popen(  # pylint: disable=consider-using-with
            command, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
            start_new_session=True)
        self.pid = self.proc.pid

    def running(self):
        """Whether ansible has not exited yet."""
        return self.proc.poll() is None

    def result(self, timeout):
        """Wait at most ``timeout`` seconds for ansible to exit; returns (exit code, the host's result).
        Raises ``subprocess.TimeoutExpired`` (ansible left running) when it does not."""
        stdout, stderr = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, _host_result(self.proc.returncode, stdout, stderr)

    def kill(self):
        """Kill ansible and the module it runs (its process group) if ansible still runs, and reap ansible."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.communicate()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.kill()
        return False
