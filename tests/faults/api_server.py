# SPDX-License-Identifier: GPL-3.0-or-later
"""The API server gone mid-rollout: kube-apiserver of a control plane of the suite's own (sandbox/k8s, under
.sandbox/faults-k8s) is stopped for a seeded 5 to 60 s while ``gpu_node_labels`` labels ``NODES`` kwok nodes and
``device_plugin_deploy`` rolls the plugin out to them and waits until they advertise their GPUs, one play, as the
device_plugin role runs them. Each trial changes what both do (another accelerator label key, another XID the plugin
ignores), so both have work on every node.

The faulted run must end on its own: finished (the server came back within the modules' retries), or failed within
the modules' bound (their retries: about 12 s of errors in a row, plus one request's timeout) with a one-line
message. The rerun must then complete: every node labelled as a clean run labels it, the user's own label on each
node still there, the plugin's DaemonSet as asked, rolled out, every node advertising its GPUs.
"""

import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

from ansible_cli import _environment, run_module

ROOT = Path(__file__).resolve().parents[2]
NODES = 500
SMOKE_NODES = 20
OUTAGE = (5.0, 60.0)  # seconds the API server is gone
SMOKE_OUTAGE = (5.0, 6.0)
BOUND_S = 40.0  # a failed module must end this long at most after the server went: its retries, one request's timeout
PROFILE = "t4"
USER_LABEL = ("example.com/team", "ml-platform")
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  vars_files: [facts.json]
  tasks:
    - name: labels
      kubegpu.cluster.gpu_node_labels:
        kubeconfig: "{{ kubeconfig }}"
        nodes: "{{ facts }}"
        accelerator_label: "{{ accelerator_label }}"
      ignore_errors: true
      register: labels
    - name: plugin
      kubegpu.cluster.device_plugin_deploy:
        kubeconfig: "{{ kubeconfig }}"
        facts: "{{ facts }}"
        health_checks: {ignore_xids: "{{ ignore_xids }}"}
        wait_timeout: 300
      when: labels is succeeded
"""
DS_NAMESPACE = "nvidia-device-plugin"
DS_NAME = "nvidia-device-plugin-daemonset"


def _seconds(span):
    """A task's seconds from the JSON callback's ``duration`` (ISO times), or None."""
    from datetime import datetime  # pylint: disable=import-outside-toplevel
    try:
        return round((datetime.fromisoformat(span["end"].rstrip("Z")) - datetime.fromisoformat(span["start"].rstrip("Z")))
                     .total_seconds(), 1)
    except (KeyError, TypeError, ValueError):
        return None


def _fake_nvml():
    build = ROOT / ".build" / "faults" / "fakenvml"
    subprocess.run(["make", "-s", "-C", str(ROOT / "sandbox" / "fakenvml"), "BUILD_DIR=%s" % build], check=True,
                   capture_output=True, timeout=600)
    return build


class Trials:
    """Seeded API-server trials on one control plane of ``nodes`` kwok nodes; ``trial(k)`` returns a result dict."""

    def __init__(self, seed, workdir, log, nodes, outage=None, component="kube-apiserver"):
        from sandbox.k8s import cluster  # pylint: disable=import-outside-toplevel
        self.cluster = cluster
        self.component = component  # what is stopped: kube-apiserver, or etcd under a kube-apiserver that stays up
        self.fault = "api-server-gone" if component == "kube-apiserver" else component + "-gone"
        self.seed, self.workdir, self.log, self.nodes = seed, workdir, log, nodes
        self.outage = outage or (OUTAGE if nodes >= NODES else SMOKE_OUTAGE)
        state = Path(os.environ.get("FAULTS_STATE_DIR") or ROOT / ".sandbox" / "faults-k8s")
        if component != "kube-apiserver":
            state = state.with_name(state.name + "-" + component)
        self.layout = cluster.Layout(state, state / "kubeconfig")
        self.names = ["kg-scale-%s-%04d" % (PROFILE, i) for i in range(nodes)]
        self.core = None

    def __enter__(self):
        self.cluster.down(self.layout, quiet=True)
        started = time.monotonic()
        self.cluster.up(self.layout, timeout=300, fleet=False, extra_nodes=self.nodes, extra_profile=PROFILE)
        self.log("%s: control plane with %d kwok nodes up in %.1f s" % (self.fault, self.nodes, time.monotonic() - started))
        from kubernetes import client, config  # pylint: disable=import-outside-toplevel
        api = config.new_client_from_config(config_file=str(self.layout.kubeconfig))
        self.core, self.apps = client.CoreV1Api(api), client.AppsV1Api(api)
        return self

    def __exit__(self, *exc):
        self.cluster.down(self.layout, quiet=True)
        return False

    def _play(self, number):
        """argv and environment of the play for trial ``number`` (its facts in a vars file: 500 facts are too long
        for a command line)."""
        work = Path(self.workdir) / "api"
        work.mkdir(exist_ok=True)
        (work / "play.yml").write_text(PLAY)
        (work / "facts.json").write_text(json.dumps({
            "facts": dict((n, self.gpu) for n in self.names), "kubeconfig": str(self.layout.kubeconfig),
            "accelerator_label": "kubegpu.test/accel-%d" % number, "ignore_xids": [1000 + number]}))
        return [ANSIBLE_PLAYBOOK, "-i", "localhost,", "-e", "ansible_python_interpreter=%s" % sys.executable,
                str(work / "play.yml")], _environment()

    def play(self, number, timeout=900):
        argv, env = self._play(number)
        return subprocess.run(argv, env=env, cwd=str(ROOT), capture_output=True, text=True, timeout=timeout, check=False)

    @staticmethod
    def results(done):
        """{task name: this host's result} from the JSON callback's output."""
        try:
            plays = json.loads(done.stdout)["plays"]
        except (ValueError, KeyError):
            return {"play": {"failed": True, "msg": (done.stdout + done.stderr)[-1500:]}}
        out = {}
        for play in plays:
            for task in play["tasks"]:
                result = dict(task["hosts"].get("localhost", {}))
                span = task["task"].get("duration") or {}
                result["_seconds"] = _seconds(span)
                out[task["task"]["name"]] = result
        return out

    def baseline(self):
        rc, result = run_module("kubegpu.cluster.gpu_facts", env={
            "LD_LIBRARY_PATH": str(_fake_nvml()), "FAKE_NVML_PROFILE": str(ROOT / "sandbox" / "profiles" / (PROFILE + ".json"))})
        assert rc == 0, result
        self.gpu = result["ansible_facts"]["gpu"]
        for name in self.names:  # the user's own label, which nothing may take away
            self.core.patch_node(name, {"metadata": {"labels": {USER_LABEL[0]: USER_LABEL[1]}}})
        started = time.monotonic()
        done = self.play(-1)
        results = self.results(done)
        assert done.returncode == 0 and not any(r.get("failed") for r in results.values()), dict(
            (name, r.get("msg")) for name, r in results.items() if r.get("failed"))
        self.clean_seconds = time.monotonic() - started
        self.clean_results = results
        self.reference = self._labels(-1)
        self.log("%s: clean run %.1f s (labels %d nodes, plugin rolled out and advertised)"
                 % (self.fault, self.clean_seconds, self.nodes))

    def _labels(self, number, taints=False):
        """Each node's labels (with ``taints``: ``(labels, taints)``), from one list, the trial's accelerator key
        spelled the same for every trial."""
        key = "kubegpu.test/accel-%d" % number
        out = {}
        for node in self.core.list_node(label_selector="sandbox.kubegpu.io/role=scale").items:
            labels = dict(node.metadata.labels or {})
            if key in labels:
                labels["kubegpu.test/accel"] = labels.pop(key)
            out[node.metadata.name] = (labels, sorted((t.key, t.value, t.effect) for t in node.spec.taints or [])) \
                if taints else labels
        return out

    def nodes_problem(self, found, reference, otherwise):
        """``(lost, problem)``: whether a node of the trial's is not as ``reference`` has it (``found`` and
        ``reference``: name to state), and the line that says so (None when every node is)."""
        differ = sorted(n for n in self.names if found.get(n) != reference.get(n))
        if not differ:
            return False, None
        return True, "%d of %d node(s) %s, e.g. %s: %s != %s" % (
            len(differ), self.nodes, otherwise, differ[0], found.get(differ[0]), reference.get(differ[0]))

    def daemonset(self):
        """The plugin's DaemonSet, None when there is none."""
        from kubernetes.client.rest import ApiException  # pylint: disable=import-outside-toplevel
        try:
            return self.apps.read_namespaced_daemon_set(DS_NAME, DS_NAMESPACE)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    @staticmethod
    def asked_for(ds, number):
        """Whether the DaemonSet is trial ``number``'s: it ignores the XID that trial asked for."""
        return ds is not None and str(1000 + number) in json.dumps([c.to_dict() for c in ds.spec.template.spec.containers])

    def plugin_problem(self, number):
        """What is wrong with the plugin after trial ``number``'s run (None: there, as asked, rolled out)."""
        ds = self.daemonset()
        if ds is None:
            return "no DaemonSet %s/%s" % (DS_NAMESPACE, DS_NAME)
        if not self.asked_for(ds, number):
            return "the DaemonSet does not ignore XID %d as asked" % (1000 + number)
        if (ds.status.number_available or 0) != self.nodes or (ds.status.updated_number_scheduled or 0) != self.nodes:
            return "the plugin is not rolled out: %s" % ds.status.to_dict()
        return None

    def trial(self, number):
        rng = random.Random("%s/%d" % (self.seed, number))
        outage, after = round(rng.uniform(*self.outage), 1), round(rng.uniform(0.5, 6.0), 1)
        where = "%s stopped %.1f s (+ its start), from %.1f s into the play (%d nodes)" % (self.component, outage, after, self.nodes)
        problems, lost = [], False
        box = {}
        argv, env = self._play(number)

        def faulted():
            box["done"] = subprocess.run(argv, env=env, cwd=str(ROOT), capture_output=True, text=True, timeout=900,
                                         check=False)
            box["ended"] = time.monotonic()  # the play's own end, which may come while the server is still gone
        thread = threading.Thread(target=faulted)
        thread.start()
        time.sleep(after)  # the fault's seeded moment and (below) its length: the injection itself, not a wait
        gone = time.monotonic()
        self.cluster.stop_component(self.layout, self.component, timeout=5)
        time.sleep(outage)
        self.cluster.start_component(self.layout, self.component, timeout=120)
        back = time.monotonic()  # it answers its health check again
        thread.join(900)
        ended = box["ended"]
        results = self.results(box["done"])
        spans = ", ".join("%s %ss" % (n, r.get("_seconds")) for n, r in results.items())
        failed = dict((name, r) for name, r in results.items() if r.get("failed"))
        if failed:
            messages = dict((name, str(r.get("msg", ""))) for name, r in failed.items())
            for name, msg in messages.items():
                if not msg or "\n" in msg or "Traceback" in msg:
                    problems.append("%s failed without a one-line message: %r" % (name, msg[:800]))
            outcome = "failed %.1f s after the server went (%s; %s)" % (
                ended - gone, spans, "; ".join("%s: %s" % (n, m[:300]) for n, m in messages.items()))
        else:
            outcome = "finished %.1f s after the server answered again (%s)" % (ended - back, spans)
        if ended < back and not failed:
            outcome = "finished %.1f s after the server went, before it was back (%s)" % (ended - gone, spans)
        if failed and ended - gone > BOUND_S:
            problems.append("the failure came %.1f s after the server went (bound %.0f s)" % (ended - gone, BOUND_S))
        rerun_started = time.monotonic()
        done = self.play(number)
        rerun_s = time.monotonic() - rerun_started
        results = self.results(done)
        if done.returncode != 0 or any(r.get("failed") for r in results.values()):
            problems.append("the rerun failed: %s" % dict((n, r.get("msg")) for n, r in results.items() if r.get("failed")))
        lost, problem = self.nodes_problem(self._labels(number), self.reference, "labelled otherwise than a clean run labels them")
        problems += [p for p in (problem, self.plugin_problem(number)) if p]
        # converged: from the server answering again to the end of the run that completed the rollout
        converge_s = max(0.0, ended - back) if not failed else (time.monotonic() - back)
        return {"trial": number, "where": where + " (gone %.1f s in all)" % (back - gone), "outcome": outcome,
                "survived": not problems, "lost": lost, "problems": problems, "converge_s": round(converge_s, 1),
                "rerun_s": round(rerun_s, 1)}
