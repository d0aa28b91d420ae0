# SPDX-License-Identifier: GPL-3.0-or-later
"""Throttling at scale: the play of ``api_server.py`` (``gpu_node_labels`` on every node, then
``device_plugin_deploy``, which rolls the plugin out and waits until every node advertises its GPUs) on ``NODES``
kwok nodes, run as an operator that API Priority and Fairness throttles (sandbox/k8s/apf.py): the control plane is
started with APF on (``cluster.up(apf=True)``), the operator is a client certificate outside system:masters with RBAC
for what the two modules need, and a FlowSchema sends it to a priority level of 3 seats that rejects what it cannot
seat (or queues a few and rejects the rest): the modules' parallel PATCHes get ``429 Too Many Requests`` with
``Retry-After``.

The baseline is one run before the throttle is set (its labels are the reference, its time the figure to compare).
Each trial draws how the level answers (reject at once; or one queue of 1 to 4 requests, the rest rejected) and the
modules' parallelism (``concurrency`` 8, 16 or 32), changes what both modules do (another accelerator label key,
another XID the plugin ignores: every node is patched, the DaemonSet rolls out on every node), and runs the play once.
It must complete on its own, no rerun: every node labelled as the clean run labels it (counted; a node missed is
data lost), the plugin rolled out and available on every node, and the level must have rejected requests during the
run (``apiserver_flowcontrol_rejected_requests_total``; none means the fault was not injected, and the trial fails
saying so). Time to converge: the throttled run's seconds.
"""

import json
import os
import random
import time
from pathlib import Path

import api_server

NODES = int(os.environ.get("FAULTS_THROTTLED_NODES") or 2000)  # fewer for a replay on a small machine
SMOKE_NODES = 50
CONCURRENCY = (8, 16, 32)
# How many nodes' plugin pods the rollout replaces at a time (device_plugin_deploy's max_unavailable), as an operator
# of 2,000 nodes sets it: with NVIDIA's chart's strategy (one node at a time) the first 2,000-node trial's rollout
# replaced 75 to 100 pods a minute and had not finished after 20 minutes, throttle or none (seed 2693436)
MAX_UNAVAILABLE = "10%"
# the API server fault's play, with the labels' parallelism drawn, the rollout's step, and a longer wait for the
# rollout: 2,000 kwok pods on two shared cores take minutes to run and advertise, throttled or not
PLAY = api_server.PLAY.replace(
    "        accelerator_label: \"{{ accelerator_label }}\"\n",
    "        accelerator_label: \"{{ accelerator_label }}\"\n        concurrency: \"{{ concurrency }}\"\n").replace(
    "        wait_timeout: 300\n", "        wait_timeout: 1200\n        max_unavailable: \"%s\"\n" % MAX_UNAVAILABLE)
assert "concurrency:" in PLAY and "wait_timeout: 1200" in PLAY and "max_unavailable:" in PLAY


class Trials(api_server.Trials):
    """Seeded throttled runs on one control plane with APF on and ``nodes`` kwok nodes."""

    def __init__(self, seed, workdir, log, nodes):
        super().__init__(seed, workdir, log, nodes)
        self.fault = "throttled"
        state = Path(os.environ.get("FAULTS_STATE_DIR") or api_server.ROOT / ".sandbox" / "faults-k8s")
        state = state.with_name(state.name + "-throttled")
        self.layout = self.cluster.Layout(state, state / "kubeconfig")
        self.concurrency = CONCURRENCY[0]
        from sandbox.k8s import apf  # pylint: disable=import-outside-toplevel
        self.apf = apf

    def __enter__(self):
        self.cluster.down(self.layout, quiet=True)
        started = time.monotonic()
        self.state = self.cluster.up(self.layout, timeout=600, fleet=False, extra_nodes=self.nodes,
                                     extra_profile=api_server.PROFILE, apf=True)
        self.log("%s: control plane (APF on) with %d kwok nodes up in %.1f s"
                 % (self.fault, self.nodes, time.monotonic() - started))
        from kubernetes import client, config  # pylint: disable=import-outside-toplevel
        api = config.new_client_from_config(config_file=str(self.layout.kubeconfig))
        self.core, self.apps = client.CoreV1Api(api), client.AppsV1Api(api)
        return self

    def _play(self, number):
        argv, env = super()._play(number)
        work = Path(self.workdir) / "api"
        (work / "play.yml").write_text(PLAY)
        facts = json.loads((work / "facts.json").read_text())
        # the operator, whom APF throttles; the admin kubeconfig (system:masters) is exempt
        facts.update(kubeconfig=self.state["operator_kubeconfig"], concurrency=self.concurrency)
        (work / "facts.json").write_text(json.dumps(facts))
        return argv, env

    def play(self, number, timeout=3600):
        return super().play(number, timeout)

    def rejected(self):
        return self.apf.rejected(self.layout, self.state["server"])

    def baseline(self):
        super().baseline()  # before the throttle: the reference labels and the clean run's time
        self.log("%s: the clean run, as the operator, before the throttle: %.1f s, %d request(s) rejected"
                 % (self.fault, self.clean_seconds, self.rejected()))

    def trial(self, number):
        rng = random.Random("%s/%d" % (self.seed, number))
        queue = rng.choice([0, 0, 1, 2, 4])  # 0: Reject at once; else one queue of that many, the rest rejected
        self.concurrency = rng.choice(CONCURRENCY)
        self.apf.throttle(self.layout, shares=1, queues=1 if queue else 0, queue_length=queue)
        where = "%s, %d parallel PATCHes (%d nodes)" % (
            "reject at once" if not queue else "a queue of %d, the rest rejected" % queue, self.concurrency, self.nodes)
        problems, lost = [], False
        before = self.rejected()
        started = time.monotonic()
        done = self.play(number)
        seconds = time.monotonic() - started
        rejected = self.rejected() - before
        results = self.results(done)
        spans = ", ".join("%s %ss" % (n, r.get("_seconds")) for n, r in results.items())
        failed = dict((n, str(r.get("msg", ""))[:600]) for n, r in results.items() if r.get("failed"))
        if done.returncode != 0 or failed:
            problems.append("the throttled run failed: %s" % (failed or (done.stdout + done.stderr)[-800:]))
        if rejected <= 0:
            problems.append("the priority level %s rejected no request during the run: the fault was not injected"
                            % self.apf.PRIORITY_LEVEL)
        labels = self._labels(number)
        lost, problem = self.nodes_problem(labels, self.reference, "labelled otherwise than the clean run labels them")
        problems += [p for p in (problem, self.plugin_problem(number)) if p]
        missing = [n for n in self.names if labels.get(n) != self.reference.get(n)]
        outcome = "%s in %.1f s (%d of %d nodes labelled as asked; %s); %d request(s) rejected with 429" % (
            "failed" if failed else "finished", seconds, self.nodes - len(missing), self.nodes, spans, rejected)
        return {"trial": number, "where": where, "outcome": outcome, "survived": not problems, "lost": lost,
                "problems": problems, "converge_s": round(seconds, 1), "rejected": rejected}
