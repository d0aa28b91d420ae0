# SPDX-License-Identifier: GPL-3.0-or-later
"""Each runtime adapter reports its own daemon's facts (``Runtime.ask``, ``version_answered``, ``report``,
``config_file_flag``, ``restart_warnings``): container_runtime_facts asks every adapter the same questions and never
branches on a runtime's name, and a new adapter that does not say how its daemon is asked is named here."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ast
import inspect
import os

import pytest

from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime import facts, registry
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.base import Host, Runtime

FACTS = inspect.getsource(facts)


def named_branches(source, names):
    """``line: text`` of each place in ``source`` that tests a runtime by its name: a comparison with, or a dict key
    or subscript of, a string that is one of ``names``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        literals = []
        if isinstance(node, ast.Compare):
            literals = [node.left] + list(node.comparators)
        elif isinstance(node, ast.Dict):
            literals = [k for k in node.keys if k is not None]
        elif isinstance(node, ast.Subscript):
            literals = [node.slice]
        for literal in literals:
            if isinstance(literal, ast.Constant) and literal.value in names:
                found.append("line %d: %r in %s" % (literal.lineno, literal.value,
                                                    ast.get_source_segment(source, node).splitlines()[0]))
    return sorted(set(found))


def test_the_facts_never_branch_on_a_runtime_name():
    assert named_branches(FACTS, registry.NAMES) == [], "plugins/module_utils/_runtime/facts.py: move these into the adapters"


@pytest.mark.parametrize("branch", ['if name == "crio":\n    pass\n', 'REPORTERS = {"docker": 1}\n',
                                    'x = found["docker"]\n'])
def test_the_guard_finds_a_branch_on_a_name(branch):
    assert named_branches(FACTS + "\n\n" + branch, registry.NAMES) != []


def unreported(adapters):
    """The adapters that do not say what their daemon runs with (no ``report`` of their own)."""
    return sorted(a.name for a in adapters if type(a).report is Runtime.report)


def test_every_adapter_of_the_registry_reports_its_daemon():
    assert unreported(registry.RUNTIMES.values()) == []


def test_an_adapter_without_a_report_is_named():
    class Acme(Runtime):
        name = "acme"
        binary = "acmed"
        service = "acme"

    assert unreported(list(registry.RUNTIMES.values()) + [Acme()]) == ["acme"]


class _Host(Host):
    """Every binary on PATH; commands answered from a table by their first two words."""

    def __init__(self, answers):
        super(_Host, self).__init__(run_command=self._run, get_bin_path=lambda n: "/usr/bin/" + n)
        self.answers = answers
        self.ran = []

    def _run(self, argv):
        words = " ".join([os.path.basename(argv[0])] + list(argv[1:2]))
        self.ran.append(" ".join(argv))
        return self.answers.get(words, (1, "", "%s: no answer" % words))


GENERATED = ('version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\ndefault_runtime_name = "nvidia"\n'
             '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\nruntime_type = "io.containerd.runc.v2"\n')


@pytest.mark.parametrize("name, source, ran", [
    ("docker", "docker info", ["/usr/bin/docker info --format {{json .}}"]),
    ("containerd", "containerd config dump", ["/usr/bin/containerd --config /etc/containerd/config.toml config dump"]),
    ("crio", "crio config", ["crio config"]),
    ("k3s", "/var/lib/rancher/k3s/agent/etc/containerd/config.toml", []),
    ("rke2", "/var/lib/rancher/rke2/agent/etc/containerd/config.toml", []),
    ("k0s", "/run/k0s/containerd-cri.toml", []),
    ("microk8s", "/var/snap/microk8s/current/args/containerd.toml", []),
])
def test_each_adapter_asks_its_own_daemon(name, source, ran):
    """What each daemon is asked, as container_runtime_facts asked it before the adapters did (issue 26)."""
    adapter = registry.get(name)
    host = _Host({})
    answer = adapter.ask(host)
    got = adapter.report("/usr/bin/" + name, {}, host, lambda path: GENERATED if path == source else None, answer)
    assert got["source"] == source and host.ran == ran
    if not ran:  # a generated config, read
        assert got["ok"] and got["default_runtime"] == "nvidia"
    else:  # a daemon that did not answer says so
        assert not got["ok"] and "no answer" in got["error"]
    assert adapter.restart_warnings({"reports": got}, {"changed": True}) == []  # live-restore unknown: no guess
    assert (adapter.config_file_flag is not None) == (name == "docker")
