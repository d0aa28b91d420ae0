# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The proof workload: Jobs that each ask for one NVIDIA GPU, watched until they finish, their logs checked, and always
removed again. The object rendering and the verdicts are pure functions; :class:`Proof` makes the API calls."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import re

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import K8sError, OptionError, WaitTimeout
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import client as k8s_client, objects as k8s_objects
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.objects import LABEL_MANAGED_BY, MANAGER
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.allocatable import advertised
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.constants import (
    MIG_RESOURCE_PREFIX, PROOF_IMAGE, PROOF_NAMESPACE, PROOF_RESOURCE_PREFERENCE, PROOF_TIMEOUT, PROOF_TOLERATIONS,
    resource as qualified,
)

FIELD_MANAGER = MANAGER + "/gpu-proof"
LABEL_PROOF = "kubegpu.cluster/gpu-proof"
LABEL_PROOF_JOB = "kubegpu.cluster/gpu-proof-job"
CREATED_BY = "gpu_proof"  # the created-by annotation of a namespace the proof made

# What a pod that cannot start says, and what to do about it.
_HINTS = (
    ("Insufficient nvidia.com", "no node has a free GPU of that resource: check that the device plugin runs on the GPU "
                                "nodes and that they advertise it (kubectl describe node, Allocatable)"),
    ("untolerated taint", "the GPU nodes are tainted: add a matching toleration (gpu_validation_tolerations)"),
    ("didn't match Pod's node affinity/selector", "no node matches the proof's node selector"),
    ("could not load NVML", "the pod did not run under the NVIDIA runtime: make nvidia the default runtime "
                            "(kubegpu.cluster.container_toolkit) or set a runtime class"),
    ("ErrImagePull", "the image cannot be pulled: mirror it and set gpu_validation_image"),
    ("ImagePullBackOff", "the image cannot be pulled: mirror it and set gpu_validation_image"),
    ("UnexpectedAdmissionError", "the kubelet refused the pod at admission (shared GPUs: ask for one device only)"),
)


def pick_resource(resources):
    """The resource a proof on a node with ``resources`` (``{name: count}``) asks for, or None."""
    have = dict((k, v) for k, v in resources.items() if v > 0)
    for name in PROOF_RESOURCE_PREFERENCE:
        if name in have:
            return name
    mig = sorted(k for k in have if k.startswith(MIG_RESOURCE_PREFIX))
    return mig[0] if mig else (sorted(have)[0] if have else None)


def job_name(node):
    """A stable, valid Job name per node (``None``: the cluster-wide proof)."""
    if node is None:
        return "gpu-proof"
    slug = re.sub(r"[^a-z0-9-]+", "-", node.lower()).strip("-")[:40].strip("-")
    return "gpu-proof-%s-%s" % (slug, hashlib.sha256(node.encode("utf-8")).hexdigest()[:6])


def render_job(params, namespace, node, resource):
    """The Job for one proof: one container asking for one ``resource``, no retries, pinned to ``node`` if given."""
    container = {
        "name": "gpu-proof",
        "image": params.get("image") or PROOF_IMAGE,
        "resources": {"limits": {resource: 1}},
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    if params.get("command"):
        container["command"] = list(params["command"])
    if params.get("args"):
        container["args"] = list(params["args"])
    spec = {
        "restartPolicy": "Never",
        "tolerations": params.get("tolerations") if params.get("tolerations") is not None else PROOF_TOLERATIONS,
        "containers": [container],
    }
    if node is not None:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    if params.get("runtime_class"):
        spec["runtimeClassName"] = params["runtime_class"]
    if params.get("image_pull_secrets"):
        spec["imagePullSecrets"] = [{"name": n} for n in params["image_pull_secrets"]]
    labels = {LABEL_MANAGED_BY: MANAGER, LABEL_PROOF: "true"}
    name = job_name(node)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "backoffLimit": 0,
            # a safety net past the module's own wait, so that a pod that is still Pending when the wait ends is
            # there to say why; the module deletes the Job itself
            "activeDeadlineSeconds": max(int(params.get("timeout") or PROOF_TIMEOUT), 1) + 300,
            "ttlSecondsAfterFinished": 600,
            "template": {"metadata": {"labels": dict(labels, **{LABEL_PROOF_JOB: name})}, "spec": spec},
        },
    }


def job_finished(job):
    """``(done, succeeded)`` from a Job's conditions."""
    for cond in ((job or {}).get("status") or {}).get("conditions") or []:
        if cond.get("status") != "True":
            continue
        if cond.get("type") == "Complete":
            return True, True
        if cond.get("type") == "Failed":
            return True, False
    return False, False


def hint(text):
    """The action for a known failure message, or an empty string."""
    for needle, action in _HINTS:
        if needle in (text or ""):
            return action
    return ""


def plan(params, nodes):
    """``[(node, resource)]``: the proofs to run. ``nodes`` maps every node name to its advertised resources."""
    resource = params.get("resource")
    if resource:
        resource = qualified(resource)
    wanted = params.get("nodes")
    if not wanted and params.get("per_node"):
        wanted = sorted(n for n, res in nodes.items() if any(c > 0 for c in res.values()))
        if not wanted:
            raise K8sError("no node advertises an nvidia.com resource, so no GPU workload can run: check that "
                           "the device plugin runs on the GPU nodes (kubegpu.cluster.device_plugin)",
                           allocatable=nodes)
    if not wanted:
        if resource:
            return [(None, resource)]
        cluster = {}
        for resources in nodes.values():
            for name, count in resources.items():
                cluster[name] = cluster.get(name, 0) + count
        picked = pick_resource(cluster)
        if picked is None:
            raise K8sError("no node advertises an nvidia.com resource, so no GPU workload can run: check that "
                           "the device plugin runs on the GPU nodes (kubegpu.cluster.device_plugin)",
                           allocatable=nodes)
        return [(None, picked)]
    out = []
    for node in wanted:
        if node not in nodes:
            raise OptionError("nodes", "node '%s' is not in the cluster" % node)
        picked = resource or pick_resource(nodes[node])
        if picked is None:
            raise K8sError("node %s advertises no nvidia.com resource, so no GPU workload can run there: check "
                           "its device plugin pod (kubectl -n <namespace> get pods -o wide)" % node,
                           allocatable=nodes)
        out.append((node, picked))
    return out


class Proof(object):
    """One run: create the Jobs, wait, read the logs, always delete."""

    def __init__(self, params, client):
        self.params = params
        self.client = client
        self.namespace = params.get("namespace") or PROOF_NAMESPACE
        self.created_namespace = False

    def nodes(self):
        return dict((n["metadata"]["name"], advertised(n)) for n in self.client.list("v1", "Node"))

    def _ensure_namespace(self, dry_run):
        """Create the namespace when missing; returns whether it exists (before a dry run: whether it did)."""
        if self.client.get("v1", "Namespace", self.namespace) is not None:
            return True
        self.client.apply(k8s_objects.namespace_object(self.namespace, created_by=CREATED_BY), dry_run=dry_run)
        self.created_namespace = not dry_run
        return not dry_run

    def _pods(self, job):
        return self.client.list("v1", "Pod", namespace=self.namespace,
                                label_selector="%s=%s" % (LABEL_PROOF_JOB, job))

    def _events(self, name):
        return k8s_objects.last_events(self.client.list("v1", "Event", namespace=self.namespace,
                                                        field_selector="involvedObject.name=%s" % name))

    def _verdict(self, node, resource, job):
        name = job["metadata"]["name"]
        done, succeeded = job_finished(job)
        pods = self._pods(name)
        pod = pods[-1] if pods else None
        pod_name = pod["metadata"]["name"] if pod else None
        status = (pod or {}).get("status") or {}
        result = {"node": node if node is not None else (pod or {}).get("spec", {}).get("nodeName"),
                  "resource": resource, "job": name, "pod": pod_name, "phase": status.get("phase"),
                  "succeeded": bool(done and succeeded), "log_checked": False, "passed": False}
        events = self._events(pod_name) if pod_name else ["Job: " + e for e in self._events(name)]
        if not done:
            waiting = [c.get("state", {}).get("waiting", {}) for c in status.get("containerStatuses") or []]
            why = "; ".join("%s: %s" % (w.get("reason"), w.get("message")) for w in waiting if w.get("reason"))
            conditions = [c.get("message") for c in status.get("conditions") or [] if c.get("message")]
            text = "; ".join(x for x in [why] + conditions + events if x) or "no events"
            where = "pod %s is %s" % (pod_name, status.get("phase")) if pod_name else "the Job created no pod"
            result["detail"] = "did not finish in %ss: %s (%s)" % (self.params.get("timeout"), where, text)
        elif not succeeded:
            text = "; ".join([status.get("reason") or "", status.get("message") or ""] + events).strip("; ")
            result["detail"] = "failed: pod %s is %s (%s)" % (pod_name, status.get("phase"), text or "no reason given")
        if result.get("detail"):
            action = hint(result["detail"])
            if action:
                result["detail"] += "; " + action
            return result
        log, why = self.client.pod_log(pod_name, self.namespace, container="gpu-proof") if pod_name else (None, "no pod")
        pattern = self.params.get("success_pattern")
        if log is not None and pattern:
            result["log_checked"] = True
            result["passed"] = pattern in log
            result["log_tail"] = log[-2000:]
            result["detail"] = ("succeeded, log shows '%s'" % pattern if result["passed"]
                                else "succeeded, but '%s' is not in its log" % pattern)
        elif log is None and self.params.get("require_log"):
            result["detail"] = "succeeded, but its log cannot be read (%s) and require_log is set" % why
        else:
            result["passed"] = True
            result["detail"] = "succeeded (log not checked: %s)" % (why if log is None else "no success_pattern")
        return result

    def _cleanup(self, names):
        for name in names:
            self.client.delete("batch/v1", "Job", name, self.namespace)
        if self.created_namespace:
            self.client.delete("v1", "Namespace", self.namespace)

    def run(self, check_mode=False):
        nodes = self.nodes()
        proofs = plan(self.params, nodes)
        jobs = [render_job(self.params, self.namespace, node, res) for node, res in proofs]
        result = {"allocatable": nodes, "namespace": self.namespace, "results": [], "passed": None}
        if check_mode:
            if self._ensure_namespace(dry_run=True):  # a dry run cannot place a Job in a namespace not there yet
                for job in jobs:
                    self.client.apply(job, dry_run=True)  # the API server validates the Job
            result["results"] = [{"node": n, "resource": r, "job": j["metadata"]["name"], "passed": None,
                                  "detail": "check mode: not run"} for (n, r), j in zip(proofs, jobs)]
            return result
        names = [j["metadata"]["name"] for j in jobs]
        try:
            self._ensure_namespace(dry_run=False)
            for name in names:  # a Job left by an interrupted run would otherwise be reused
                self.client.delete("batch/v1", "Job", name, self.namespace)
            self.client.wait("batch/v1", "Job", lambda found: not (set(names) & set(found)), 60,
                             namespace=self.namespace, label_selector=LABEL_PROOF + "=true")
            for job in jobs:
                self.client.apply(job)
            try:
                final = self.client.wait("batch/v1", "Job",
                                         lambda found: all(job_finished(found.get(n))[0] for n in names),
                                         int(self.params.get("timeout") or PROOF_TIMEOUT), namespace=self.namespace,
                                         label_selector=LABEL_PROOF + "=true")
            except WaitTimeout as exc:
                final = exc.last or {}
            for (node, res), name in zip(proofs, names):
                result["results"].append(self._verdict(node, res, final.get(name) or {"metadata": {"name": name}}))
        finally:
            self._cleanup(names)
        result["passed"] = all(r["passed"] for r in result["results"])
        return result


def run(params, check_mode=False, client=None):
    """The module's work: the proofs' result; one that did not pass sets ``failed_msg`` (see ``_errors.run_module``)."""
    if client is None:
        client = k8s_client.from_params(params, field_manager=FIELD_MANAGER)
    result = Proof(params, client).run(check_mode=check_mode)
    result["changed"] = False
    if result["passed"] is False:
        failed = [r for r in result["results"] if not r["passed"]]
        result["failed_msg"] = "GPU proof failed: %s" % " | ".join(
            "%s (%s on %s): %s" % (r["job"], r["resource"], r["node"] or "any node", r["detail"]) for r in failed)
    return result
