# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The proof workload, for any vendor: Jobs that each ask for one GPU, watched until they finish, their logs checked,
and always removed again. What a vendor's proof runs and looks at (its resources, image, command, success pattern,
tolerations, the resource it prefers, the hints its failures get) is a :class:`Workload`, made from the vendor's entry
of the vendor registry (``_vendors.py``); this file knows no vendor. The object rendering and the verdicts are pure
functions; :class:`Proof` makes the API calls.

Proof only when something could have changed: with ``proven_under`` (per node: its device plugin config, driver
version and container runtime), a passed proof is recorded on its node in the annotation
:data:`ANNOTATION_LAST_PROOF`, with what it ran under; with ``reprove: changed`` a later run proves a node again only
where one of those (or the proof itself: image, command, success pattern) changed, the node no longer advertises the
resource it was proved on, or there is no passed proof on record, and reports the last proof for the others."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import hashlib
import json
import re

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import K8sError, OptionError, WaitTimeout
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import objects as k8s_objects, taints
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.objects import LABEL_MANAGED_BY, MANAGER
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.taints import READINESS_TAINT, READINESS_TOLERATION

FIELD_MANAGER = MANAGER + "/gpu-proof"
NAMESPACE = "gpu-validation"  # gpu_proof's namespace option, by default
TIMEOUT = 300  # gpu_proof's timeout option, by default: seconds to wait for the Jobs
NAMESPACE_GONE_TIMEOUT = 120  # seconds to wait for a namespace being deleted before the proof creates it again
LABEL_PROOF = "kubegpu.cluster/gpu-proof"
LABEL_PROOF_JOB = "kubegpu.cluster/gpu-proof-job"
CREATED_BY = "gpu_proof"  # the created-by annotation of a namespace the proof made
DEFAULT_CONFIG_NAME = "default"  # a node's device plugin config in proven_under when it names none
# The node annotation of the last passed proof (JSON, see :func:`record`): the one place its key is written.
ANNOTATION_LAST_PROOF = "kubegpu.cluster/last-proof"
# What a proof runs under, per node (``proven_under``), besides the proof itself
UNDER_KEYS = ("config_hash", "driver_version", "runtime")
REPROVE = ("changed", "always")
# A proof through Dynamic Resource Allocation (the ``device_class`` option): its "resource" is CLAIM_PREFIX + the
# DeviceClass; its pod's container claims CLAIM_NAME, made from the ResourceClaimTemplate CLAIM_TEMPLATE.
CLAIM_PREFIX = "claim/"
CLAIM_NAME = "gpu"
CLAIM_TEMPLATE = "gpu-proof-claim"
# resource.k8s.io and its versions, newest first: the proof's ResourceClaimTemplate uses the newest the server serves.
# (_k8s knows no vendor: these are Kubernetes' own names, as _nvidia/constants.py DRA_API_GROUP/VERSIONS has them for
# NVIDIA's driver; tests/unit/test_one_place.py holds the two equal.)
RESOURCE_API_GROUP = "resource.k8s.io"
RESOURCE_API_VERSIONS = ("v1", "v1beta2", "v1beta1")
# What the workload options of a proof are, where a vendor's Workload fills in those the caller leaves out (None)
WORKLOAD_OPTIONS = ("image", "command", "success_pattern", "tolerations")

# What a pod that cannot start says, and what to do about it, whatever the vendor (a vendor's own hints, its
# Workload's, are looked for first).
HINTS = (
    # first: a pinned proof's pod always has other nodes that do not match its selector
    ("cannot allocate all claims", "no free device of the DeviceClass on the node: see its ResourceSlices "
     "(kubectl get resourceslices --field-selector spec.nodeName=<node>) and the DRA kubelet plugin's pod"),
    ("untolerated taint", "the GPU nodes are tainted: add a matching toleration (gpu_validation_tolerations)"),
    ("didn't match Pod's node affinity/selector", "no node matches the proof's node selector"),
    ("ErrImagePull", "the image cannot be pulled: mirror it and set gpu_validation_image"),
    ("ImagePullBackOff", "the image cannot be pulled: mirror it and set gpu_validation_image"),
    ("UnexpectedAdmissionError", "the kubelet refused the pod at admission (shared GPUs: ask for one device only)"),
    ("resourceclaim not found", "the proof's ResourceClaimTemplate is missing: is the resource.k8s.io API served?"),
)


class Workload(object):
    """A vendor's proof: ``resource_prefixes``, the resources it looks at (``amd.com``); ``image``, ``command``,
    ``success_pattern`` and ``tolerations``, what runs where the options leave them out (None: nothing to fill in);
    ``preference``, the resources it asks for first, in order, then the first of those starting with
    ``then_prefix`` (NVIDIA: a whole GPU, a shared one, then a MIG slice), else the first by name; ``hints``,
    ``(text in a failure, what to do)`` pairs looked for before :data:`HINTS`. Built from a vendor's ``proof`` entry
    in the vendor registry: ``Workload(**vendor.proof)``."""

    def __init__(self, resource_prefixes, image, success_pattern, command=None, tolerations=None, preference=(),
                 then_prefix=None, hints=()):
        self.resource_prefixes = tuple(resource_prefixes)
        self.image = image
        self.command = command
        self.success_pattern = success_pattern
        self.tolerations = tolerations
        self.preference = tuple(preference)
        self.then_prefix = then_prefix
        self.hints = tuple(hints)

    def fill(self, params):
        """The options with the workload's own where they are left out (None); what the caller gives wins."""
        out = dict(params)
        for key in WORKLOAD_OPTIONS:
            value = getattr(self, key)
            if out.get(key) is None and value is not None:
                out[key] = list(value) if isinstance(value, (list, tuple)) else value
        return out


def config_hash(config):
    """A node's device plugin config as device_plugin_deploy hashes it (the SHA-256 of its JSON text, sorted keys, two
    spaces, a final newline; tests/unit keep the two equal), whatever the vendor."""
    return hashlib.sha256((json.dumps(config, indent=2, sort_keys=True) + "\n").encode("utf-8")).hexdigest()


def qualified(name, workload):
    """``name`` as a fully qualified resource name: a name without a prefix gets the workload's first
    (``gpu`` -> ``nvidia.com/gpu``); a qualified name stays as it is."""
    return name if "/" in name else workload.resource_prefixes[0] + "/" + name


def advertised(node, workload):
    """What a node advertises of the proof's vendor: its allocatable counts under the workload's resource prefixes."""
    found = {}
    for prefix in workload.resource_prefixes:
        found.update(k8s_objects.allocatable(node, prefix))
    return found


def _none_advertised(workload, node=None):
    what = " or ".join(workload.resource_prefixes)
    return ("node %s advertises no %s resource" % (node, what) if node
            else "no node advertises a%s %s resource" % ("n" if what[0] in "aeino" else "", what))


def pick_resource(resources, workload):
    """The resource a proof on a node with ``resources`` (``{name: count}``) asks for, or None: the first of the
    workload's ``preference`` the node has, else the first by name of those starting with its ``then_prefix``, else
    the first by name."""
    have = dict((k, v) for k, v in resources.items() if v > 0)
    for name in workload.preference:
        if name in have:
            return name
    then = sorted(k for k in have if workload.then_prefix and k.startswith(workload.then_prefix))
    return then[0] if then else (sorted(have)[0] if have else None)


def job_name(node):
    """A stable, valid Job name per node (``None``: the cluster-wide proof)."""
    if node is None:
        return "gpu-proof"
    slug = re.sub(r"[^a-z0-9-]+", "-", node.lower()).strip("-")[:40].strip("-")
    return "gpu-proof-%s-%s" % (slug, hashlib.sha256(node.encode("utf-8")).hexdigest()[:6])


def render_job(params, namespace, node, resource, workload):
    """The Job for one proof: one container asking for one ``resource``, no retries, pinned to ``node`` if given;
    the workload's image and tolerations where ``params`` have none."""
    claim = resource.startswith(CLAIM_PREFIX)
    container = {
        "name": "gpu-proof",
        "image": params.get("image") or workload.image,
        "resources": {"claims": [{"name": CLAIM_NAME}]} if claim else {"limits": {resource: 1}},
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        # a program that fails says why in its pod's status too, where the log cannot be read (a kubelet out of reach)
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if params.get("command"):
        container["command"] = list(params["command"])
    if params.get("args"):
        container["args"] = list(params["args"])
    tolerations = list(params.get("tolerations") if params.get("tolerations") is not None else workload.tolerations or [])
    if params.get("readiness_taint"):  # the proof is what clears the gate: it must run on a gated node
        tolerations.append(dict(READINESS_TOLERATION))
    spec = {
        "restartPolicy": "Never",
        "tolerations": tolerations,
        "containers": [container],
    }
    if node is not None:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    if claim:
        spec["resourceClaims"] = [{"name": CLAIM_NAME, "resourceClaimTemplateName": CLAIM_TEMPLATE}]
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
            "activeDeadlineSeconds": max(int(params.get("timeout") or TIMEOUT), 1) + 300,
            "ttlSecondsAfterFinished": 600,
            "template": {"metadata": {"labels": dict(labels, **{LABEL_PROOF_JOB: name})}, "spec": spec},
        },
    }


def render_claim_template(api_version, namespace, device_class):
    """The ResourceClaimTemplate a DRA proof's pods claim from: one device of ``device_class``. ``v1`` and ``v1beta2``
    name the class under ``exactly``; ``v1beta1`` on the request itself (k8s.io/api resource/*/types.go
    DeviceRequest)."""
    if api_version.endswith("/v1beta1"):
        request = {"name": CLAIM_NAME, "deviceClassName": device_class}
    else:
        request = {"name": CLAIM_NAME, "exactly": {"deviceClassName": device_class}}
    return {"apiVersion": api_version, "kind": "ResourceClaimTemplate",
            "metadata": {"name": CLAIM_TEMPLATE, "namespace": namespace,
                         "labels": {LABEL_MANAGED_BY: MANAGER, LABEL_PROOF: "true"}},
            "spec": {"spec": {"devices": {"requests": [request]}}}}


def slice_counts(slices):
    """``{node: devices its ResourceSlices publish}``."""
    out = {}
    for item in slices:
        spec = item.get("spec") or {}
        if spec.get("nodeName"):
            out[spec["nodeName"]] = out.get(spec["nodeName"], 0) + len(spec.get("devices") or [])
    return out


def telling_line(text, needles=()):
    """The line of a failed program's output that says why: the last one holding a known failure message (``needles``),
    else the last line. A log's order of stdout and stderr lines is not always the order they were written in: vectorAdd
    prints its first line to stdout, which is buffered when it is not a terminal and flushed at exit, after the error it
    wrote to stderr (seen on a kubelet node: the log ended with "[Vector addition of 50000 elements]")."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    for line in reversed(lines):
        if any(needle in line for needle in needles):
            return line
    return lines[-1] if lines else ""


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


def hint(text, workload):
    """The action for a known failure message (the workload's hints first), or an empty string."""
    for needle, action in workload.hints + HINTS:
        if needle in (text or ""):
            return action
    return ""


def plan(params, nodes, workload):
    """``[(node, resource)]``: the proofs to run. ``nodes`` maps every node name to its advertised resources."""
    resource = params.get("resource")
    if resource:
        resource = qualified(resource, workload)
    wanted = params.get("nodes")
    if not wanted and params.get("per_node"):
        wanted = sorted(n for n, res in nodes.items() if any(c > 0 for c in res.values()))
        if not wanted:
            raise K8sError(_none_advertised(workload) + ", so no GPU workload can run: check that "
                           "the device plugin runs on the GPU nodes (kubegpu.cluster.device_plugin)",
                           allocatable=nodes)
    if not wanted:
        if resource:
            return [(None, resource)]
        cluster = {}
        for resources in nodes.values():
            for name, count in resources.items():
                cluster[name] = cluster.get(name, 0) + count
        picked = pick_resource(cluster, workload)
        if picked is None:
            raise K8sError(_none_advertised(workload) + ", so no GPU workload can run: check that "
                           "the device plugin runs on the GPU nodes (kubegpu.cluster.device_plugin)",
                           allocatable=nodes)
        return [(None, picked)]
    out = []
    for node in wanted:
        if node not in nodes:
            raise OptionError("nodes", "node '%s' is not in the cluster" % node)
        picked = resource or pick_resource(nodes[node], workload)
        if picked is None:
            raise K8sError(_none_advertised(workload, node) + ", so no GPU workload can run "
                           "there: check its device plugin pod (kubectl -n <namespace> get pods -o wide)",
                           allocatable=nodes)
        out.append((node, picked))
    return out


def proof_hash(params, workload):
    """What of the proof itself a passed proof stays valid for: its image, command, arguments, RuntimeClass and
    success pattern (a change to any of them proves again)."""
    spec = dict((k, params.get(k)) for k in ("image", "command", "args", "runtime_class", "success_pattern"))
    spec["image"] = spec["image"] or workload.image
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode("utf-8")).hexdigest()[:16]


def under_by_node(params, workload):
    """``{node: {config_hash, driver_version, runtime, proof}}``: what a proof on each node of ``proven_under`` runs
    under. A node's ``config`` names its device plugin config in ``plugin_configs`` (``default`` when not given), which is
    hashed as device_plugin_deploy hashes it. Raises :class:`OptionError` naming the field."""
    configs = params.get("plugin_configs") or {}
    proof = proof_hash(params, workload)
    out = {}
    for node, given in sorted((params.get("proven_under") or {}).items()):
        where = "proven_under.%s" % node
        if not isinstance(given, dict):
            raise OptionError(where, "must be a dict with config, driver_version and runtime")
        unknown = sorted(set(given) - set(("config", "driver_version", "runtime")))
        if unknown:
            raise OptionError(where, "unknown key(s) %s (known: config, driver_version, runtime)" % ", ".join(unknown))
        name = given.get("config") or DEFAULT_CONFIG_NAME
        if configs and name not in configs:
            raise OptionError(where + ".config", "'%s' is not one of plugin_configs (%s): pass the device plugin's "
                              "configs (device_plugin_deploy's configs result)" % (name, ", ".join(sorted(configs))))
        out[node] = {
            "config_hash": config_hash(configs[name]) if name in configs else None,
            "driver_version": str(given["driver_version"]) if given.get("driver_version") else None,
            "runtime": str(given["runtime"]) if given.get("runtime") else None,
            "proof": proof,
        }
    return out


def read_record(node):
    """The last passed proof recorded on a node object (dict), or None (none, or not ours to read)."""
    text = (((node or {}).get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_LAST_PROOF)
    try:
        data = json.loads(text) if text else None
    except ValueError:
        return None
    return data if isinstance(data, dict) and isinstance(data.get("under"), dict) else None


def record(result, under, now=None):
    """The annotation value for a passed proof ``result`` (one of ``results``) that ran under ``under``."""
    when = now or datetime.datetime.now(datetime.timezone.utc)
    return json.dumps({"passed_at": when.strftime("%Y-%m-%dT%H:%M:%SZ"), "job": result["job"],
                       "resource": result["resource"], "detail": result["detail"], "under": under},
                      sort_keys=True, separators=(",", ":"))


def still_valid(last, under, resources):
    """Why the last proof on a node (``last``, from :func:`read_record`) still stands for a proof under ``under``
    on a node that now advertises ``resources``: an empty string when it does not (prove again).

    The proof itself (``under["proof"]``) must be the same. Of the rest (:data:`UNDER_KEYS`), a value this run knows
    must equal the recorded one; a value it does not know (None: the role that reads it did not run in this play, so
    this play did not change it either) is taken as unchanged. A recorded None with a value known now proves again:
    that proof never ran under a known value."""
    if not last or not under:
        return ""
    recorded = last.get("under") or {}
    if under.get("proof") != recorded.get("proof") or not (resources or {}).get(last.get("resource")):
        return ""
    if any(under.get(k) is not None and under.get(k) != recorded.get(k) for k in UNDER_KEYS):
        return ""
    unknown = [k for k in UNDER_KEYS if under.get(k) is None]
    return ("unchanged since the proof passed at %s (config %s, driver %s, runtime %s)%s"
            % (last.get("passed_at"), (recorded.get("config_hash") or "unknown")[:12], recorded.get("driver_version"),
               recorded.get("runtime"),
               "; not read in this run, so taken as unchanged: %s" % ", ".join(unknown) if unknown else ""))


def merged_under(under, last):
    """What a proof that passed now ran under, for its record: ``under``, with each value this run did not know taken
    from the node's last record (``last``, or None), as :func:`still_valid` took it."""
    recorded = (last or {}).get("under") or {}
    return dict(under, **dict((k, recorded.get(k)) for k in UNDER_KEYS if under.get(k) is None))


def from_record(node, last, why):
    """A result entry (like one of a run's ``results``) for a node proved before and not again."""
    return {"node": node, "resource": last.get("resource"), "job": last.get("job"), "pod": None, "phase": None,
            "succeeded": True, "log_checked": False, "passed": True, "ran": False, "last_proof": last,
            "detail": "%s; %s" % (last.get("detail"), why)}


def records_of(found):
    """``{node: its last passed proof}`` of the node objects ``found`` that carry one."""
    return dict((n["metadata"]["name"], read_record(n)) for n in found if read_record(n))


def keep(params, proofs, nodes, under, records):
    """``(to run, kept)``: the planned proofs that must run, and result entries for those the last proof stands for
    (``reprove: changed``). The cluster-wide proof stands when the last proof on any node of ``proven_under`` does."""
    if params.get("reprove") == "always" or not under:
        return proofs, []
    run, kept = [], []
    for node, resource in proofs:
        candidates = [node] if node is not None else sorted(under)
        why = ""
        for name in candidates:
            last = records.get(name)
            why = still_valid(last, under.get(name), nodes.get(name))
            if why and (node is not None or last.get("resource") == resource):
                kept.append(from_record(name, last, why))
                break
            why = ""
        if not why:
            run.append((node, resource))
    return run, kept


# gpu_proof's defaults of the options that decide what runs (the module's argument spec has the same constants): what
# settled() fills in for options its caller leaves out or passes as null, as the module's argument spec would; the
# image and success pattern are the vendor's (its Workload's).
DECIDING_DEFAULTS = {"namespace": NAMESPACE, "nodes": [], "per_node": False, "reprove": "changed", "proven_under": {},
                     "plugin_configs": {}, "readiness_taint": False}


def settled(params, found, workload):
    """The module's result when, by the node objects ``found`` (every node of the cluster, plain API dicts, as a caller
    that just listed them has them), no proof has to run: every planned proof stands on its node's record. None
    when one must run, or when the module would fail (it then says why). ``params`` are the module's options; those
    left out or null take the module's defaults (:data:`DECIDING_DEFAULTS`, then the workload's)."""
    # None or "" is "left out" (ansible-core before 2.19 templates a role's `x or none` to "", not to None)
    params = workload.fill(dict(DECIDING_DEFAULTS, **dict((k, v) for k, v in params.items() if v not in (None, ""))))
    if params.get("readiness_taint") and any(taints.has(n, READINESS_TAINT) for n in found):
        return None  # a gated node: the module clears it, by a proof or by the record that stands for one
    try:
        under = under_by_node(params, workload)
        nodes = dict((n["metadata"]["name"], advertised(n, workload)) for n in found)
        records = records_of(found)
        proofs, kept = keep(params, plan(params, nodes, workload), nodes, under, records)
    except (K8sError, OptionError):
        return None
    if proofs or not kept:
        return None
    return {"allocatable": nodes, "namespace": params.get("namespace") or NAMESPACE, "results": kept,
            "passed": True, "recorded": [], "last_proofs": records, "changed": False}


class Proof(object):
    """One run of a vendor's proof (``workload``): create the Jobs, wait, read the logs, always delete."""

    def __init__(self, params, client, workload):
        self.params = workload.fill(params)
        self.device_class = params.get("device_class")
        if self.device_class:
            self.params["resource"] = CLAIM_PREFIX + self.device_class
        self.resource_api = None
        self.client = client
        self.workload = workload
        self.namespace = params.get("namespace") or NAMESPACE
        self.created_namespace = False
        self.records = {}  # node -> its last passed proof, as read before the run
        self.found = {}  # node -> the node object as listed

    def nodes(self):
        found = self.client.list("v1", "Node")
        self.records = records_of(found)
        self.found = dict((n["metadata"]["name"], n) for n in found)
        out = dict((n["metadata"]["name"], advertised(n, self.workload)) for n in found)
        if self.device_class:
            self.resource_api = self._resource_api()
            counts = slice_counts(self.client.list(self.resource_api, "ResourceSlice"))
            for name, resources in out.items():
                resources[self.params["resource"]] = counts.get(name, 0)
        return out

    def _resource_api(self):
        served = self.client.served_versions(RESOURCE_API_GROUP)
        for version in RESOURCE_API_VERSIONS:
            if version in served:
                return "%s/%s" % (RESOURCE_API_GROUP, version)
        raise K8sError("device_class is set, but the API server serves no %s version (%s): Dynamic Resource "
                       "Allocation needs Kubernetes 1.32 or later (on by default from 1.34)"
                       % (RESOURCE_API_GROUP, ", ".join(RESOURCE_API_VERSIONS)))

    def _claim_template(self, dry_run=False):
        if self.device_class:
            self.client.apply(render_claim_template(self.resource_api, self.namespace, self.device_class),
                              dry_run=dry_run)

    def _ungate(self, results, check_mode):
        """With ``readiness_taint``: the taint off each gated node a proof passed on (or whose record stands)."""
        if not self.params.get("readiness_taint"):
            return []
        passed = set(r["node"] for r in results if r.get("passed") and r.get("node"))
        gated = dict((name, node) for name, node in self.found.items()
                     if name in passed and taints.has(node, READINESS_TAINT))
        return taints.ensure(self.client.core, gated, READINESS_TAINT, False, check_mode=check_mode) if gated else []

    def _record(self, results, under, check_mode):
        """Write the record of each passed proof that ran on a node of ``proven_under``; returns the nodes written."""
        written = []
        for result in results:
            node = result.get("node")
            if not result.get("passed") or node not in under:
                continue
            value = record(result, merged_under(under[node], self.records.get(node)))
            if not check_mode:
                self.client.apply({"apiVersion": "v1", "kind": "Node",
                                   "metadata": {"name": node, "annotations": {ANNOTATION_LAST_PROOF: value}}})
            self.records[node] = json.loads(value)
            result["last_proof"] = self.records[node]
            written.append(node)
        return written

    def _ensure_namespace(self, dry_run):
        """Create the namespace when missing; returns whether it exists (before a dry run: whether it did). A namespace
        being deleted (an earlier proof's, which deletes the namespace it created) refuses new Jobs: wait (bounded) until
        it is gone, then create it again."""
        found = self.client.get("v1", "Namespace", self.namespace)
        if found is not None and not (found.get("metadata") or {}).get("deletionTimestamp"):
            return True
        if found is not None:
            if dry_run:
                return False
            try:
                self.client.wait("v1", "Namespace", lambda objects: self.namespace not in objects, NAMESPACE_GONE_TIMEOUT,
                                 field_selector="metadata.name=%s" % self.namespace)
            except WaitTimeout:
                raise K8sError("namespace %s is still being deleted after %d s, so no proof Job can be created in it: "
                               "see what holds it (kubectl get namespace %s -o yaml, its finalizers and conditions), or "
                               "pick another namespace" % (self.namespace, NAMESPACE_GONE_TIMEOUT, self.namespace))
        self.client.apply(k8s_objects.namespace_object(self.namespace, created_by=CREATED_BY), dry_run=dry_run)
        self.created_namespace = not dry_run
        return not dry_run

    def _pods(self, job):
        return self.client.list("v1", "Pod", namespace=self.namespace,
                                label_selector="%s=%s" % (LABEL_PROOF_JOB, job))

    def _events(self, name, warnings_only=False):
        events = self.client.list("v1", "Event", namespace=self.namespace, field_selector="involvedObject.name=%s" % name)
        return k8s_objects.last_events([e for e in events if not warnings_only or e.get("type") == "Warning"])

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
            said = self._last_words(pod_name, status)
            # a pod the kubelet ran whose program failed (no reason of the pod's own, such as an admission refusal or
            # an eviction): the program's words come first, and of the pod's events only the warnings (Scheduled,
            # Created, Started say nothing about a failure)
            own_words = bool(said and pod_name and not status.get("reason"))
            if own_words:
                events = self._events(pod_name, warnings_only=True)
            text = "; ".join([status.get("reason") or "", status.get("message") or ""] + events).strip("; ")
            words = telling_line(said, [needle for needle, _action in self.workload.hints + HINTS])
            if own_words:
                result["detail"] = "failed: its log says: %s (pod %s is %s%s)" % (
                    words, pod_name, status.get("phase"), ": " + text if text else "")
            else:
                result["detail"] = "failed: pod %s is %s (%s)" % (pod_name, status.get("phase"),
                                                                  text or "no reason given")
                if said:
                    result["detail"] += "; its log says: %s" % words
            if said:
                result["log_tail"] = said
        if result.get("detail"):
            action = hint(result["detail"], self.workload)
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

    def _last_words(self, pod_name, status):
        """What a failed proof's program said last: its log, or (when the log cannot be read) the termination message
        the kubelet keeps from it (the container's ``terminationMessagePolicy: FallbackToLogsOnError``)."""
        if pod_name:
            log, _why = self.client.pod_log(pod_name, self.namespace, container="gpu-proof")
            if log and log.strip():
                return log[-2000:]
        for container in status.get("containerStatuses") or []:
            message = ((container.get("state") or {}).get("terminated") or {}).get("message")
            if container.get("name") == "gpu-proof" and message and message.strip():
                return message[-2000:]
        return ""

    def _cleanup(self, names):
        for name in names:
            self.client.delete("batch/v1", "Job", name, self.namespace)
        if self.device_class and not self.created_namespace:
            self.client.delete(self.resource_api, "ResourceClaimTemplate", CLAIM_TEMPLATE, self.namespace)
        if self.created_namespace:
            self.client.delete("v1", "Namespace", self.namespace)

    def gated(self, planned, nodes):
        """``planned`` and, with ``readiness_taint``, a proof pinned to each gated node it does not pin yet (a node is
        cleared only by a proof that ran there), where the node advertises something to prove."""
        if not self.params.get("readiness_taint"):
            return planned
        pinned = set(node for node, _resource in planned)
        extra = []
        for name, node in sorted(self.found.items()):
            if name in pinned or not taints.has(node, READINESS_TAINT):
                continue
            picked = (qualified(self.params["resource"], self.workload) if self.params.get("resource")
                      else pick_resource(nodes.get(name) or {}, self.workload))
            if picked is not None and (nodes.get(name) or {}).get(picked):
                extra.append((name, picked))
        return planned + extra

    def run(self, check_mode=False):
        under = under_by_node(self.params, self.workload)
        nodes = self.nodes()
        proofs, kept = keep(self.params, self.gated(plan(self.params, nodes, self.workload), nodes), nodes, under,
                            self.records)
        jobs = [render_job(self.params, self.namespace, node, res, self.workload) for node, res in proofs]
        result = {"allocatable": nodes, "namespace": self.namespace, "results": list(kept), "passed": None,
                  "recorded": []}
        if check_mode:
            if jobs and self._ensure_namespace(dry_run=True):  # a dry run cannot place a Job in a namespace not there yet
                self._claim_template(dry_run=True)
                for job in jobs:
                    self.client.apply(job, dry_run=True)  # the API server validates the Job
            result["results"] += [{"node": n, "resource": r, "job": j["metadata"]["name"], "passed": None, "ran": False,
                                   "detail": "check mode: not run"} for (n, r), j in zip(proofs, jobs)]
            # a proof that would run on a node of proven_under records it when it passes
            result["recorded"] = sorted(n for n, _r in proofs if n in under) if under else []
            result["last_proofs"] = dict(self.records)
            if not jobs:
                result["passed"] = all(r["passed"] for r in result["results"])
            result["untainted"] = self._ungate(result["results"], check_mode)
            return result
        names = [j["metadata"]["name"] for j in jobs]
        if jobs:
            try:
                self._ensure_namespace(dry_run=False)
                for name in names:  # a Job left by an interrupted run would otherwise be reused
                    self.client.delete("batch/v1", "Job", name, self.namespace)
                self.client.wait("batch/v1", "Job", lambda found: not (set(names) & set(found)), 60,
                                 namespace=self.namespace, label_selector=LABEL_PROOF + "=true")
                self._claim_template()
                for job in jobs:
                    self.client.apply(job)
                try:
                    final = self.client.wait("batch/v1", "Job",
                                             lambda found: all(job_finished(found.get(n))[0] for n in names),
                                             int(self.params.get("timeout") or TIMEOUT), namespace=self.namespace,
                                             label_selector=LABEL_PROOF + "=true")
                except WaitTimeout as exc:
                    final = exc.last or {}
                ran = []
                for (node, res), name in zip(proofs, names):
                    verdict = self._verdict(node, res, final.get(name) or {"metadata": {"name": name}})
                    verdict["ran"] = True
                    ran.append(verdict)
                result["results"] += ran
            finally:
                self._cleanup(names)
            result["recorded"] = self._record(ran, under, check_mode)
        result["last_proofs"] = dict(self.records)
        result["passed"] = all(r["passed"] for r in result["results"])
        result["untainted"] = self._ungate(result["results"], check_mode)
        return result


def run(params, workload, check_mode=False, client=None):
    """The module's work, the proof of one vendor (``workload``): the proofs' result; one that did not pass sets
    ``failed_msg`` (see ``_errors.run_module``)."""
    if client is None:
        # imported here: the proof_settled filter uses this file's pure part and must not load the kubernetes client
        from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import client as k8s_client  # pylint: disable=import-outside-toplevel
        client = k8s_client.from_params(params, field_manager=FIELD_MANAGER)
    result = Proof(params, client, workload).run(check_mode=check_mode)
    # a record written on a node (only with proven_under), a readiness taint cleared
    result["changed"] = bool(result["recorded"] or result.get("untainted"))
    if result["passed"] is False:
        failed = [r for r in result["results"] if not r["passed"]]
        result["failed_msg"] = "GPU proof failed: %s" % " | ".join(
            "%s (%s on %s): %s" % (r["job"], r["resource"], r["node"] or "any node", r["detail"]) for r in failed)
    return result
