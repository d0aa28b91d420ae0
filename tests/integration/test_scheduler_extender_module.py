# SPDX-License-Identifier: GPL-3.0-or-later
"""kubegpu.cluster.scheduler_extender through the real `ansible` command line, on a kubeadm-like control plane laid out
in a temporary directory (no kube-scheduler runs here, so wait is off): check mode with its diff writes nothing, the
run writes both files, the second run is unchanged, absent gives the originals back, and the argument spec refuses
state=present without url_prefix."""

import json
import os
import sys

from ansible_cli import run_module, run_playbook
from ansible_collections.kubegpu.cluster.plugins.module_utils._nanogpu.scheduler import extender_entry

URL = "http://10.96.0.50:39999/scheduler"
MANIFEST = """apiVersion: v1
kind: Pod
metadata:
  name: kube-scheduler
  namespace: kube-system
spec:
  containers:
  - command:
    - kube-scheduler
    - --bind-address=127.0.0.1
    - --kubeconfig=/etc/kubernetes/scheduler.conf
    - --leader-elect=true
    image: registry.k8s.io/kube-scheduler:v1.30.2
    name: kube-scheduler
  hostNetwork: true
status: {}
"""


def test_check_run_rerun_and_absent(tmp_path):
    manifest = tmp_path / "manifests" / "kube-scheduler.yaml"
    manifest.parent.mkdir()
    manifest.write_text(MANIFEST)
    args = {"url_prefix": URL, "manifest": str(manifest), "config_path": str(tmp_path / "kube-scheduler-config.yaml"),
            "state_dir": str(tmp_path / "state"), "wait": False}
    code, result = run_module("kubegpu.cluster.scheduler_extender", args, check=True, diff=True)
    assert code == 0 and result["changed"], result
    assert manifest.read_text() == MANIFEST and not (tmp_path / "kube-scheduler-config.yaml").exists()
    assert "--config=%s" % args["config_path"] in result["diff"][1]["after"]
    code, result = run_module("kubegpu.cluster.scheduler_extender", args)
    assert code == 0 and result["changed"] and result["extender"]["urlPrefix"] == URL, result
    code, result = run_module("kubegpu.cluster.scheduler_extender", args)
    assert code == 0 and not result["changed"], result
    absent = dict(args, state="absent")
    del absent["url_prefix"]
    code, result = run_module("kubegpu.cluster.scheduler_extender", absent)
    assert code == 0 and result["changed"] and sorted(result["restored"]) == ["config", "manifest"], result
    assert manifest.read_text() == MANIFEST and os.listdir(tmp_path) == ["manifests"]


def test_present_needs_the_url(tmp_path):
    code, result = run_module("kubegpu.cluster.scheduler_extender", {"manifest": str(tmp_path / "m.yaml"), "wait": False})
    assert code == 2 and "state is present but all of the following are missing: url_prefix" in result["msg"], result


# --- The role's scheduler part on a Kubespray control plane: it changes nothing on the node, it checks the inventory
PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: kubegpu.cluster.nano_gpu
        tasks_from: scheduler
"""


def run_scheduler_part(tmp_path, **extra):
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAY)
    extra = dict({"nano_gpu_scheduler_method": "kubespray", "nano_gpu_extender_url": URL,
                  "ansible_python_interpreter": sys.executable}, **extra)
    code, tasks = run_playbook(playbook, extra)
    (result,) = [r for name, r in tasks if name.startswith("On a Kubespray control plane")]
    return code, result


def test_kubespray_without_the_entry_fails_with_the_value_to_set(tmp_path):
    other = {"urlPrefix": "http://127.0.0.1:9001/tas", "filterVerb": "filter", "weight": 2}
    code, result = run_scheduler_part(tmp_path, kube_scheduler_extenders=[other])
    assert code == 2 and result.get("failed"), result
    wanted = json.dumps([other, extender_entry(URL)])
    assert "Set in the Kubespray inventory (group_vars/k8s_cluster) kube_scheduler_extenders: %s" % wanted in result["msg"]


def test_kubespray_with_the_entry_passes_and_absent_wants_it_gone(tmp_path):
    value = [extender_entry(URL)]
    code, result = run_scheduler_part(tmp_path, kube_scheduler_extenders=value)
    assert code == 0 and "carries nano-gpu's entry as asked" in result["msg"], result
    code, result = run_scheduler_part(tmp_path, kube_scheduler_extenders=value, nano_gpu_state="absent")
    assert code == 2 and "Take the item that manages nano-gpu/gpu-percent out" in result["msg"], result
    code, result = run_scheduler_part(tmp_path, kube_scheduler_extenders=[], nano_gpu_state="absent")
    assert code == 0 and "has no nano-gpu entry" in result["msg"], result
