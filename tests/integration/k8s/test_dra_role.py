# SPDX-License-Identifier: GPL-3.0-or-later
"""The dra role's `main` entry point against the sandbox's kube-apiserver: it deploys under the kubelet root dir the
GPU hosts' preparation found, and refuses hosts that disagree before any write.

The GPU hosts here are inventory entries the play adds, each with the ``dra_host`` result the `host` entry point
(kubegpu.cluster.dra_host_prep) would have registered there: THE HOST PREPARATION IS NOT RUN (it would write a systemd
unit on this machine); tests/integration/test_dra_host_prep.py runs the module itself.
"""

import uuid

from ansible_cli import run_module, run_playbook

PLAY = """
- name: DRA on the sandbox
  hosts: localhost
  gather_facts: false
  tasks:
    - name: A GPU host prepared on k0s
      ansible.builtin.add_host:
        name: gpu-a
        dra_host: {kubelet_root_dir: /var/lib/k0s/kubelet}
    - name: Another GPU host
      ansible.builtin.add_host:
        name: gpu-b
        dra_host: {kubelet_root_dir: "{{ second_root }}"}
    - name: DRA
      ansible.builtin.include_role:
        name: kubegpu.cluster.dra
      vars:
        dra_gpu_hosts: [gpu-a, gpu-b]
"""


def test_role_deploys_under_the_hosts_root_dir_and_refuses_disagreeing_hosts(tmp_path, sandbox):
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAY)
    ns = "dra-role-" + uuid.uuid4().hex[:6]
    base = {"dra_kubeconfig": sandbox.kubeconfig, "dra_namespace": ns, "dra_wait": False}
    try:
        code, tasks = run_playbook(playbook, dict(base, second_root="/var/lib/kubelet"))
        assert code != 0, tasks
        failed = [r for _name, r in tasks if r.get("failed")]
        assert "different root dirs (/var/lib/k0s/kubelet, /var/lib/kubelet)" in failed[0]["msg"], failed
        assert not sandbox.apps.list_namespaced_daemon_set(ns).items, "written before the refusal"

        code, tasks = run_playbook(playbook, dict(base, second_root="/var/lib/k0s/kubelet/"))  # the same dir
        assert code == 0, tasks
        ds = sandbox.apps.read_namespaced_daemon_set("dra-driver-nvidia-gpu-kubelet-plugin", ns)
        paths = dict((v.name, v.host_path.path) for v in ds.spec.template.spec.volumes if v.host_path)
        assert paths["plugins-registry"] == "/var/lib/k0s/kubelet/plugins_registry"
        assert paths["plugins"] == "/var/lib/k0s/kubelet/plugins"
    finally:
        rc, gone = run_module("kubegpu.cluster.dra_driver_deploy", dict(kubeconfig=sandbox.kubeconfig, namespace=ns,
                                                                        state="absent", wait_timeout=60))
        assert rc == 0, gone
