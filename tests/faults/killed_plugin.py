# SPDX-License-Identifier: GPL-3.0-or-later
"""The killed play in the device plugin stage: ``ansible-playbook`` (its whole process group: the controller and the
modules it runs on localhost) SIGKILLed at a seeded moment while ``gpu_node_labels`` labels ``NODES`` kwok nodes and
``device_plugin_deploy`` rolls the plugin out to them and waits until they advertise their GPUs (the play of the
API-server trials, api_server.py, on a control plane of the suite's own). Each trial changes what both do (another
accelerator label key, another XID the plugin ignores), so both have work on every node.

Then rerun without the kill, and check: every node labelled as a clean run labels it, the user's own label on each
node still there, the taints as a clean run leaves them, the plugin's DaemonSet as asked, rolled out, every node
advertising its GPUs, and exactly the objects a clean run has (nothing half made left beside them). Then the way back
(both modules with ``state=absent``) must give each node back its labels and taints from before the first run and
leave none of the collection's objects; the next trial starts from there.
"""

import os
import random
import signal
import subprocess
import sys
import time

import api_server
from api_server import ROOT

if str(ROOT / ".build" / "collections") not in sys.path:  # make's ANSIBLE_COLLECTIONS_PATH, for the plain python run
    sys.path.insert(0, str(ROOT / ".build" / "collections"))
# pylint: disable=wrong-import-position
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.objects import LABEL_MANAGED_BY, MANAGER  # noqa: E402
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.manifests import MANAGED_KINDS  # noqa: E402

NODES = 100
SMOKE_NODES = 20
ABSENT_PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  vars_files: [facts.json]
  tasks:
    - name: plugin
      kubegpu.cluster.device_plugin_deploy:
        kubeconfig: "{{ kubeconfig }}"
        state: absent
    - name: labels
      kubegpu.cluster.gpu_node_labels:
        kubeconfig: "{{ kubeconfig }}"
        nodes: "{{ facts }}"
        accelerator_label: "{{ accelerator_label }}"
        state: absent
"""


class Trials(api_server.Trials):
    """Seeded kills of the labels-and-plugin play on one control plane of ``nodes`` kwok nodes."""

    def __init__(self, seed, workdir, log, nodes):
        super().__init__(seed, workdir, log, nodes, component="kube-apiserver")
        self.fault = "killed-play-plugin"
        state = self.layout.state_dir.with_name(self.layout.state_dir.name + "-killed")
        self.layout = self.cluster.Layout(state, state / "kubeconfig")

    def _ours(self):
        """The collection's objects: (kind, namespace, name) of every kind the plugin's deployment may make
        (manifests.MANAGED_KINDS) and its namespace, found by the label every one of them carries; those being
        deleted left out (the way back does not wait for its namespace to go: the next deploy does)."""
        from kubernetes import dynamic  # pylint: disable=import-outside-toplevel
        found = set()
        client = dynamic.DynamicClient(self.core.api_client)
        for api_version, kind, _namespaced in MANAGED_KINDS + (("v1", "Namespace", False),):
            for item in client.resources.get(api_version=api_version, kind=kind).get(
                    label_selector="%s=%s" % (LABEL_MANAGED_BY, MANAGER)).items:
                if not item.metadata.deletionTimestamp:
                    found.add((kind, item.metadata.namespace, item.metadata.name))
        return found

    def baseline(self):
        super().baseline()  # the user's label on every node, one clean run: its labels are the reference
        self.labels_seconds = self.clean_results["labels"]["_seconds"] or 0.0
        modules = self.labels_seconds + (self.clean_results["plugin"]["_seconds"] or 0.0)
        # the kills land while the modules run: after ansible-playbook's own start, before the clean run's end
        self.span = (max(0.0, self.clean_seconds - modules), self.clean_seconds - 0.05 * modules)
        self.reference = self._labels(-1, taints=True)
        self.objects = self._ours()
        self.before = self._way_back(-1)
        self.log("%s: %d objects of ours after a clean run; the way back gave every node back" % (
            self.fault, len(self.objects)))

    def _way_back(self, number):
        """Both modules with state=absent; returns each node's labels and taints after it."""
        argv, env = self._play(number)
        work = os.path.dirname(argv[-1])
        with open(os.path.join(work, "absent.yml"), "w", encoding="utf-8") as handle:
            handle.write(ABSENT_PLAY)
        done = subprocess.run(argv[:-1] + [os.path.join(work, "absent.yml")], env=env, cwd=str(ROOT),
                              capture_output=True, text=True, timeout=600, check=False)
        results = self.results(done)
        failed = dict((n, r.get("msg")) for n, r in results.items() if r.get("failed"))
        assert done.returncode == 0 and not failed, "the way back failed: %s" % (failed or done.stderr[-1500:])
        return self._labels(number, taints=True)

    def trial(self, number):
        rng = random.Random("%s/%d" % (self.seed, number))
        at = round(rng.uniform(*self.span), 2)
        problems = []
        argv, env = self._play(number)
        proc = subprocess.Popen(argv, env=env, cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
        time.sleep(at)  # the seeded kill point: the injection itself (as killed_play's), not a wait for a condition
        ended_first = proc.poll() is not None
        if not ended_first:
            os.killpg(proc.pid, signal.SIGKILL)
        out = proc.communicate(timeout=60)[0]
        # which module the kill came in: the trial's DaemonSet (its XID) is applied only by device_plugin_deploy
        where = "%.2f s into the play (%d nodes; a clean run: modules from %.1f s, labels %.1f s, %.1f s in all), %s" % (
            at, self.nodes, self.span[0], self.labels_seconds, self.clean_seconds,
            "in device_plugin_deploy, its DaemonSet applied" if self.asked_for(self.daemonset(), number)
            else "before device_plugin_deploy applied its DaemonSet (gpu_node_labels, or the plugin's first objects)")
        if ended_first:
            problems.append("the play ended before the kill point: %s" % out[-300:].replace("\n", " | "))
        started = time.monotonic()
        done = self.play(number)
        converge_s = time.monotonic() - started
        results = self.results(done)
        if done.returncode != 0 or any(r.get("failed") for r in results.values()):
            problems.append("the rerun failed: %s" % dict((n, r.get("msg")) for n, r in results.items() if r.get("failed")))
        lost, problem = self.nodes_problem(self._labels(number, taints=True), self.reference,
                                           "labelled or tainted otherwise than a clean run leaves them")
        problems += [p for p in (problem, self.plugin_problem(number)) if p]
        ours = self._ours()
        if ours != self.objects:
            problems.append("the collection's objects differ from a clean run's: more %s, fewer %s"
                            % (sorted(ours - self.objects), sorted(self.objects - ours)))
        lost_back, problem = self.nodes_problem(self._way_back(number), self.before,
                                                "left by the way back otherwise than before the first run")
        left = self._ours()
        problems += [p for p in (problem, "the way back left objects of ours: %s" % sorted(left) if left else None) if p]
        return {"trial": number, "where": where, "survived": not problems, "lost": lost or lost_back,
                "problems": problems, "converge_s": round(converge_s, 1)}
