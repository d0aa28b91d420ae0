# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet audit (playbooks/audit.yml) on hosts that are gone: one frozen (a paused container), one powered off (a
stopped container). Each is named in the report as not read, with why (the connection's own words), and nothing
else is said of it: its node is in the cluster under its kubegpu_node_name.

Found by the fault suite's lost node (tests/faults/lost_node.py, issue 28): over the docker connection with
pipelining a gone host's read fails as "Module result deserialization failed", its reason on the module's stderr
only, which the audit left out; and a host without GPU facts lost its kubegpu_node_name (the device plugin's facts
map only the hosts with facts), so the audit also said "no node <host> in the cluster" of a node that is there.
"""

import json
import os
import subprocess
import sys

import pytest

from ansible_cli import _environment
from node_container import ROOT, docker, ensure_image

IMAGE = "kubegpu/debian:bookworm"  # the node images' base; python3 is in it


@pytest.fixture
def gone_hosts():
    ensure_image(IMAGE)
    names = {"paused": "kubegpu-audit-paused-%d" % os.getpid(), "stopped": "kubegpu-audit-stopped-%d" % os.getpid()}
    for name in names.values():
        docker("rm", "-f", name)
    try:
        started = docker("run", "-d", "--name", names["paused"], "--network", "none", "--label",
                         "kubegpu.test=audit_lost", IMAGE, "sleep", "600")
        assert started.returncode == 0, started.stderr
        assert docker("pause", names["paused"]).returncode == 0
        made = docker("create", "--name", names["stopped"], "--network", "none", "--label", "kubegpu.test=audit_lost",
                      IMAGE, "sleep", "600")
        assert made.returncode == 0, made.stderr
        yield names
    finally:
        for name in names.values():
            docker("rm", "-f", name)


def test_the_audit_names_a_gone_host_and_why_and_nothing_else(sandbox, test_nodes, gone_hosts, tmp_path):
    node_names = dict(zip(gone_hosts.values(), test_nodes(2)))
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({
        "gpu_nodes": {"hosts": dict((host, {"ansible_connection": "community.docker.docker",
                                            "ansible_python_interpreter": "/usr/bin/python3",
                                            "kubegpu_node_name": node}) for host, node in node_names.items())},
        "k8s_api": {"hosts": {"localhost": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}},
                    "vars": {"kubegpu_kubeconfig": sandbox.kubeconfig}}}))
    report_dir = tmp_path / "audit"
    done = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inventory),
                           os.path.join(ROOT, "playbooks", "audit.yml"), "-e", "audit_report_dir=%s" % report_dir],
                          env=_environment({"ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default"}), cwd=ROOT,
                          capture_output=True, text=True, timeout=600, check=False)
    assert (report_dir / "audit.json").is_file(), done.stdout[-3000:] + done.stderr[-2000:]
    entries = dict((e["host"], e) for e in json.loads((report_dir / "audit.json").read_text())["nodes"])
    why = {"paused": "is paused", "stopped": "is not running"}
    for how, host in gone_hosts.items():
        entry = entries[host]
        assert entry["state"] in ("unreachable", "error"), entry
        assert entry["node"] == node_names[host] and entry["in_cluster"], entry
        assert entry["errors"] and all(why[how] in text for text in entry["errors"]), entry["errors"]
        assert entry["problems"] == [], entry["problems"]
    table = (report_dir / "audit.txt").read_text()
    assert all(host in table for host in gone_hosts.values()), table
