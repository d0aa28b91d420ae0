# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The fleet audit's report: one entry per GPU host, from what the host read said (``read``: its ``gpu`` fact, the
driver verdict, what each container runtime reports and what the container_toolkit role decided from it) and what the
API server says of its node (the node object, the labels plan of the device plugin stage in check mode, the last
proof), and a table a person reads at a glance. Pure functions: the cluster reads are :mod:`.fleet`'s.

Drift is never judged here: it is what the bring-up's own decisions said (``runtime_decisions``' ``to_configure`` and
``nvidia_runtime_config``'s plans from ``container_runtime_facts``, the toolkit's install decision, the labels
:func:`.._k8s.node_labels.run` would set in check mode, the virtualenv's unmet requirements); this module only words
it, with the file or label each one names."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.cluster.plugins.module_utils import _host, _vendors
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.constants import (
    DEPLOY_LABEL_ON, LABEL_DEPLOY_DEVICE_PLUGIN, LABEL_DEVICE_PLUGIN_CONFIG, LABEL_MIG_CONFIG_STATE, LABEL_MPS_CAPABLE,
    RESOURCE_PREFIX, RUNTIME_NAME, RUNTIME_PATH,
)
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.constants import VENDOR as NVIDIA_VENDOR

SCHEMA_VERSION = 1
# A node's state, worst first: the table and the summary count them in this order.
STATES = ("unreachable", "error", "problem", "drift", "ok")
LABEL_PREFIXES = (RESOURCE_PREFIX + "/", "kubegpu.cluster/", "sandbox.kubegpu.io/")
COLUMNS = ("NODE", "STATE", "GPUS", "DRIVER", "KERNEL", "NOUVEAU", "DEFAULT RUNTIME", "ADVERTISED", "ALLOCATION",
           "MIG", "PROOF", "DRIFT")
CELL_WIDTH = 48  # the longest cell; the JSON has the whole value
# The GPU resources a node's ADVERTISED shows: every vendor's of the registry
GPU_RESOURCE_PREFIXES = tuple(vendor.resource_prefix + "/" for vendor in _vendors.VENDORS)
OTHER_VENDORS = tuple(v.fact_key for v in _vendors.WITH_PART)  # the parts of the gpu fact (gpu.amd, gpu.intel) from sysfs


def _mib_text(mib):
    if not isinstance(mib, int) or mib <= 0:
        return "?"
    return "%d GiB" % round(mib / 1024.0) if mib >= 1024 else "%d MiB" % mib


def gpus(fact):
    """The GPUs of a ``gpu`` fact: count, each model with its count and memory, and the devices in short."""
    fact = fact or {}
    devices = []
    models = {}
    for device in fact.get("devices") or []:
        name = device.get("name") or "unreadable GPU"
        memory = device.get("memory_total_mib")
        mig = device.get("mig") or {}
        devices.append({"index": device.get("index"), "name": name, "memory_total_mib": memory,
                        "healthy": device.get("healthy"), "mig": {
                            "capable": bool(mig.get("capable")), "current": bool(mig.get("current")),
                            "pending": bool(mig.get("pending")), "devices": sorted(
                                (d.get("profile") for d in mig.get("devices") or [] if d.get("profile")))}})
        entry = models.setdefault(name, {"name": name, "count": 0, "memory_total_mib": memory})
        entry["count"] += 1
    # AMD's and Intel's GPUs (gpu.amd, gpu.intel, from sysfs): their models beside NVIDIA's
    for vendor in OTHER_VENDORS:
        for device in (fact.get(vendor) or {}).get("devices") or []:
            name = device.get("name") or "%s GPU %s" % (vendor.upper(), device.get("device_id") or "?")
            entry = models.setdefault(name, {"name": name, "count": 0, "memory_total_mib": device.get("memory_total_mib")})
            entry["count"] += 1
    return {"count": fact.get("count", len(devices)), "models": [models[n] for n in sorted(models)],
            "devices": devices, "on_pci_bus": len(_host.pci_of(fact, NVIDIA_VENDOR, untagged=True)),
            "vendors": list(fact.get("vendors") or [])}


def mig(fact, labels):
    """The MIG layout per GPU (mode now and pending, instances by profile) and the node's ``mig.config.state``."""
    layout = []
    for device in gpus(fact)["devices"]:
        if not device["mig"]["capable"]:
            continue
        counts = {}
        for profile in device["mig"]["devices"]:
            counts[profile] = counts.get(profile, 0) + 1
        layout.append({"index": device["index"], "enabled": device["mig"]["current"],
                       "pending": device["mig"]["pending"], "devices": counts})
    return {"gpus": layout, "config_state": (labels or {}).get(LABEL_MIG_CONFIG_STATE)}


def runtimes(toolkit):
    """Per runtime the host runs: its version, its default runtime and its runtimes, as its daemon reports them."""
    out = {}
    for name, found in sorted(((toolkit or {}).get("runtimes") or {}).items()):
        report = found.get("reports") or {}
        out[name] = {"version": found.get("version"), "default_runtime": report.get("default_runtime"),
                     "runtimes": sorted(report.get("runtimes") or {}), "error": report.get("error")}
    return out


def _runtime_reasons(runtime, plan, check, report, toolkit):
    """Why the container_toolkit role would configure ``runtime`` (it is in ``to_configure``)."""
    reasons = []
    name = toolkit.get("runtime_name") or RUNTIME_NAME
    path = toolkit.get("runtime_path") or RUNTIME_PATH
    if plan is None:
        reasons.append("nothing says whether nvidia_runtime_config would change its configuration")
    elif plan.get("changed") is None:
        what = plan.get("config_path") or "its configuration"
        reasons.append("cannot tell whether %s would change (%s)" % (what, plan.get("error") or "no plan"))
    elif plan.get("changed"):
        reasons.append("would change %s" % ", ".join(plan.get("files") or [plan.get("config_path") or "a file"]))
    if check is not None and not check.get("as_asked"):
        if report.get("error") or not report.get("ok", True):
            reasons.append("its daemon could not be read (%s)" % (report.get("error") or "no report"))
        else:
            ours = (report.get("runtimes") or {}).get(name)
            if not ours:
                reasons.append("its daemon does not report the %s runtime" % name)
            elif ours.get("path") != path:
                reasons.append("its daemon runs %s with %s, not %s" % (name, ours.get("path"), path))
            if toolkit.get("set_as_default", True) and report.get("default_runtime") != name:
                reasons.append("its daemon's default runtime is %s, not %s" % (report.get("default_runtime"), name))
    return reasons


def toolkit_drift(toolkit):
    """``[{stage, subject, reason}]``: what a rerun of the container_toolkit role would change on the host, from its own
    decisions (``decided`` is ``runtime_decisions``' result, ``plans`` container_runtime_facts'); none where the stage
    does not apply (``applies`` false: the bring-up skips a host whose facts show no NVIDIA GPU)."""
    toolkit = toolkit or {}
    if toolkit.get("applies") is False:  # the bring-up leaves a host without an NVIDIA GPU alone
        return []
    decided = toolkit.get("decided") or {}
    plans = toolkit.get("plans") or {}
    found = toolkit.get("runtimes") or {}
    drift = []
    install = toolkit.get("install") or {}
    if install.get("needed"):
        parts = []
        if install.get("missing"):
            parts.append("install %s" % ", ".join(install["missing"]))
        if not install.get("repository_ok", True):
            parts.append("write the NVIDIA repository and its key")
        drift.append({"stage": "container_toolkit", "subject": "packages",
                      "reason": "would %s" % (" and ".join(parts) or "install the toolkit")})
    for runtime in decided.get("to_configure") or []:
        report = (found.get(runtime) or {}).get("reports") or {}
        reasons = _runtime_reasons(runtime, plans.get(runtime), (decided.get("checks") or {}).get(runtime), report,
                                   toolkit)
        drift.append({"stage": "container_toolkit", "subject": runtime,
                      "reason": "; ".join(reasons) or "would configure %s" % runtime})
    for runtime in decided.get("unverified") or []:
        if runtime not in (decided.get("to_configure") or []):
            drift.append({"stage": "container_toolkit", "subject": runtime,
                          "reason": "its daemon does not report the NVIDIA runtime as the role verifies it: a rerun "
                                    "would fail there"})
    return drift


def labels_drift(plan):
    """``[{stage, subject, reason}]`` from a node's entry of the labels run in check mode (``status``,
    ``labels_set``, ``labels_removed``)."""
    if not plan or plan.get("status") != "changed":
        return []
    parts = ["set %s" % ", ".join("%s=%s" % item for item in sorted((plan.get("labels_set") or {}).items()))] \
        if plan.get("labels_set") else []
    if plan.get("labels_removed"):
        parts.append("remove %s" % ", ".join(plan["labels_removed"]))
    return [{"stage": "device_plugin", "subject": "node labels", "reason": "would " + " and ".join(parts)}]


def proof(record, fact):
    """The last passed proof recorded on the node (``record`` as :func:`.._k8s.proof.read_record` returns it), and
    whether the driver it ran under is the one the host has now."""
    if not record:
        return None
    under = record.get("under") or {}
    driver = (fact or {}).get("driver_version")
    stale = None
    if under.get("driver_version") and driver and under["driver_version"] != driver:
        stale = "proved under driver %s, the host has %s now" % (under["driver_version"], driver)
    return {"passed_at": record.get("passed_at"), "job": record.get("job"), "resource": record.get("resource"),
            "detail": record.get("detail"), "under": under, "stale": stale}


def _gpu_resources(resources):
    return dict((k, v) for k, v in sorted((resources or {}).items()) if k.startswith(GPU_RESOURCE_PREFIXES))


def _other_driver(fact):
    """An AMD or Intel host's kernel driver and its version (``amdgpu 6.8.5``), from its vendor's part of the fact; None
    for a host with NVIDIA GPUs or none."""
    if not fact or fact.get("count"):
        return None
    for vendor in OTHER_VENDORS:
        part = fact.get(vendor) or {}
        if part.get("count"):
            driver = part.get("driver") or {}
            return " ".join(str(x) for x in (driver.get("module"), driver.get("version")) if x) or None
    return None


# Labels that describe the device plugin's sharing of a node's GPUs (GPU feature discovery's, from the plugin's config,
# and the plugin's per-node config label): on a node moved to DRA they describe nothing any more. And the device
# plugin's deploy label set to true there would bring the plugin back beside the DRA kubelet plugin.
DEVICE_PLUGIN_ONLY_LABELS = (RESOURCE_PREFIX + "/gpu.replicas", RESOURCE_PREFIX + "/gpu.sharing-strategy",
                             LABEL_MPS_CAPABLE, LABEL_DEVICE_PLUGIN_CONFIG)


def allocation(node, slice_devices, fact):
    """How the node's GPUs are handed out: ``kind`` (``device_plugin``: it advertises ``nvidia.com/*``; ``dra``: the
    ResourceSlices of NVIDIA's DRA driver list devices for it; ``both``, which NVIDIA's DRA chart forbids; ``none``),
    ``slice_devices`` (None where the cluster serves no DRA API), ``nvml_gpus`` (the GPUs the host's NVML counts), and
    ``stale_labels`` (device-plugin labels left on a DRA node)."""
    allocatable = dict((k, v) for k, v in _gpu_resources(((node or {}).get("status") or {}).get("allocatable")).items()
                       if k.startswith(RESOURCE_PREFIX + "/"))
    plugin = any(int(v) > 0 for v in allocatable.values())
    dra = bool(slice_devices)
    kind = "both" if plugin and dra else ("device_plugin" if plugin else ("dra" if dra else "none"))
    labels = ((node or {}).get("metadata") or {}).get("labels") or {}
    stale = []
    if kind == "dra":
        stale = ["%s=%s" % (k, labels[k]) for k in DEVICE_PLUGIN_ONLY_LABELS if k in labels]
        if labels.get(LABEL_DEPLOY_DEVICE_PLUGIN) == DEPLOY_LABEL_ON:
            stale.insert(0, "%s=%s" % (LABEL_DEPLOY_DEVICE_PLUGIN, DEPLOY_LABEL_ON))
    return {"kind": kind, "slice_devices": None if slice_devices is None else len(slice_devices),
            "nvml_gpus": (fact or {}).get("count") if fact is not None else None, "stale_labels": stale}


def _allocation_problems(alloc, plugin_resources):
    problems = []
    if alloc["kind"] == "both":
        problems.append("both the device plugin (%s) and NVIDIA's DRA driver (%d devices in ResourceSlices) hand out its "
                        "GPUs, which the DRA driver's chart forbids: move it one way with kubegpu.cluster.dra_migration"
                        % (", ".join("%s=%s" % kv for kv in sorted(plugin_resources.items())), alloc["slice_devices"]))
    if alloc["kind"] in ("dra", "both") and alloc["nvml_gpus"] is not None \
            and alloc["slice_devices"] != alloc["nvml_gpus"]:
        problems.append("its ResourceSlices list %d GPUs, NVML counts %d: see the DRA kubelet plugin's pod and log"
                        % (alloc["slice_devices"], alloc["nvml_gpus"]))
    return problems


def node_report(host, read, node=None, labels_plan=None, record=None, node_name=None, accelerator_label=None,
                slice_devices=None):
    """One host's entry of the audit.

    ``read``: what the host play gathered (``reachable``, ``errors``, ``gpu``, ``driver_verdict``, ``toolkit``,
    ``python_unmet``); ``node``: its node object (plain API JSON), None when the cluster has none of that name;
    ``labels_plan``: the node's entry of the labels run in check mode; ``record``: its last proof record.
    """
    read = read or {}
    name = node_name or host
    errors = list(read.get("errors") or [])
    fact = read.get("gpu")
    meta = (node or {}).get("metadata") or {}
    status = (node or {}).get("status") or {}
    all_labels = meta.get("labels") or {}
    labels = dict((k, v) for k, v in sorted(all_labels.items())
                  if k.startswith(LABEL_PREFIXES) or (accelerator_label and k == accelerator_label))
    verdict = read.get("driver_verdict") or {}
    drift = toolkit_drift(read.get("toolkit")) + labels_drift(labels_plan)
    if read.get("python_unmet"):
        drift.append({"stage": "python_env", "subject": "virtualenv",
                      "reason": "would install %s" % ", ".join(read["python_unmet"])})
    problems = list(verdict.get("problems") or [])
    nvml = (fact or {}).get("nvml") or {}
    # NVML's state is a problem only where NVIDIA GPUs are (an AMD or Intel host has no NVML to load)
    nvidia_here = bool(fact) and (bool(fact.get("count")) or bool(_host.pci_of(fact, NVIDIA_VENDOR, untagged=True))
                                  or not any((fact.get(v) or {}).get("count") for v in OTHER_VENDORS))
    if nvidia_here and nvml.get("status") not in (None, "ok") and verdict.get("status") != "skipped":
        text = "NVML %s%s" % (nvml.get("status"), ": %s" % nvml["message"] if nvml.get("message") else "")
        if not any(text in p for p in problems):
            problems.append(text)
    if node is None and read.get("reachable", True):
        hint = " (map the host with kubegpu_node_name)" if name == host else ""
        problems.append("no node %s in the cluster%s" % (name, hint))
    alloc = allocation(node, slice_devices, fact)
    problems.extend(_allocation_problems(alloc, _gpu_resources(status.get("allocatable"))))
    notes = []
    for label in alloc["stale_labels"]:
        if label.startswith(LABEL_DEPLOY_DEVICE_PLUGIN + "="):  # the device plugin would come back beside DRA
            problems.append("%s on a node moved to DRA: the device plugin would run beside the DRA kubelet plugin; "
                            "move the node with kubegpu.cluster.dra_migration" % label)
        else:  # GFD's view of the device plugin's sharing, which no rerun of ours changes: a note, not drift
            notes.append("%s describes the device plugin's sharing on a node moved to DRA (GPU feature discovery "
                         "writes it from the plugin's config)" % label)
    last = proof(record, fact)
    if last and last["stale"]:
        problems.append("last proof " + last["stale"])
    if not read.get("reachable", True):
        state = "unreachable"
    elif errors:
        state = "error"
    elif problems or verdict.get("status") == "failed":
        state = "problem"
    elif drift:
        state = "drift"
    else:
        state = "ok"
    modules = (fact or {}).get("kernel_modules") or {}
    return {
        "host": host,
        "node": name,
        "state": state,
        "reachable": bool(read.get("reachable", True)),
        "errors": errors,
        "problems": problems,
        "in_cluster": node is not None,
        "schedulable": not ((node or {}).get("spec") or {}).get("unschedulable", False) if node else None,
        "gpus": gpus(fact) if fact is not None else None,
        "nvml": {"status": nvml.get("status"), "message": nvml.get("message")} if fact is not None else None,
        "driver": {"version": (fact or {}).get("driver_version") or _other_driver(fact),
                   "cuda": (fact or {}).get("cuda_driver_version"),
                   "verdict": verdict.get("status"), "summary": verdict.get("summary")},
        "kernel": ((status.get("nodeInfo") or {}).get("kernelVersion")) or None,
        "nouveau": modules.get("nouveau") if fact is not None else None,
        "runtimes": runtimes(read.get("toolkit")),
        "drift": drift,
        "advertised": {"capacity": _gpu_resources(status.get("capacity")),
                       "allocatable": _gpu_resources(status.get("allocatable"))},
        "mig": mig(fact, all_labels),
        "allocation": alloc,
        "notes": notes,
        "labels": labels,
        "proof": last,
    }


def summary(reports):
    """How many nodes are in each state, and the hosts that drifted."""
    out = dict((state, 0) for state in STATES)
    for entry in reports:
        out[entry["state"]] += 1
    out["total"] = len(reports)
    out["drifted"] = sorted(e["host"] for e in reports if e["drift"])
    return out


def build(hosts, nodes, labels_plans, records, node_names=None, accelerator_label=None, generated_at=None,
          slices=None):
    """The whole report (JSON-ready): one entry per host of ``hosts`` (host -> read), sorted by host. ``slices``: the
    ResourceSlices of NVIDIA's DRA driver (None where the cluster serves no DRA API)."""
    node_names = node_names or {}
    reports = []
    for host in sorted(hosts):
        name = node_names.get(host) or host
        devices = None
        if slices is not None:
            devices = [d.get("name") for item in slices if (item.get("spec") or {}).get("nodeName") == name
                       for d in (item.get("spec") or {}).get("devices") or []]
        reports.append(node_report(host, hosts[host], (nodes or {}).get(name), (labels_plans or {}).get(name),
                                   (records or {}).get(name), name, accelerator_label, devices))
    return {"schema": SCHEMA_VERSION, "generated_at": generated_at, "summary": summary(reports), "nodes": reports}


# --- The table ------------------------------------------------------------------------------------------------------

def _short(text, width=CELL_WIDTH):
    text = str(text)
    return text if len(text) <= width else text[:width - 3] + "..."


def _gpu_cell(entry):
    if entry["gpus"] is None:
        return "?"
    if not entry["gpus"]["models"]:
        return "none" if not entry["gpus"]["on_pci_bus"] else "%d on the PCI bus, unread" % entry["gpus"]["on_pci_bus"]
    return ", ".join("%dx %s %s" % (m["count"], m["name"].replace("NVIDIA ", ""), _mib_text(m["memory_total_mib"]))
                     for m in entry["gpus"]["models"])


def _advertised_cell(entry):
    allocatable = entry["advertised"]["allocatable"]
    if not allocatable:
        return "-"
    return " ".join("%s:%s" % (k[len(RESOURCE_PREFIX) + 1:] if k.startswith(RESOURCE_PREFIX + "/") else k, v)
                    for k, v in sorted(allocatable.items()))


def _alloc_cell(entry):
    alloc = entry.get("allocation") or {}
    kind = {"device_plugin": "plugin", "dra": "DRA", "both": "BOTH", "none": "-"}.get(alloc.get("kind"), "?")
    if alloc.get("kind") in ("dra", "both"):
        kind += " (%d)" % alloc["slice_devices"]
    return kind


def _mig_cell(entry):
    layout = entry["mig"]["gpus"]
    state = entry["mig"]["config_state"]
    if not layout:
        return "-" if not state else "- (%s)" % state
    on = sum(1 for g in layout if g["enabled"])
    pending = sum(1 for g in layout if g["pending"] != g["enabled"])
    text = "%d/%d on" % (on, len(layout))
    if pending:
        text += ", %d pending" % pending
    return text + (" (%s)" % state if state else "")


def _proof_cell(entry):
    last = entry["proof"]
    if not last:
        return "none"
    return "%s%s" % (last.get("passed_at") or "passed", " (stale)" if last.get("stale") else "")


def _runtime_cell(entry):
    return " ".join("%s=%s" % (name, r["default_runtime"] or "?") for name, r in entry["runtimes"].items()) or "?"


def _driver_cell(entry):
    version = entry["driver"]["version"] or "-"
    verdict = entry["driver"]["verdict"]
    return version if verdict in (None, "ok") else "%s (%s)" % (version, verdict)


def _nouveau_cell(entry):
    return {True: "LOADED", False: "no", None: "?"}[entry["nouveau"]]


def row(entry):
    """The table's cells of one entry."""
    if entry["state"] == "unreachable":
        cells = [entry["host"], "unreachable"] + ["?"] * (len(COLUMNS) - 3) + ["?"]
    else:
        cells = [entry["host"] if entry["host"] == entry["node"] else "%s (%s)" % (entry["host"], entry["node"]),
                 entry["state"], _gpu_cell(entry), _driver_cell(entry), entry["kernel"] or "?", _nouveau_cell(entry),
                 _runtime_cell(entry), _advertised_cell(entry), _alloc_cell(entry), _mig_cell(entry), _proof_cell(entry),
                 "yes (%d)" % len(entry["drift"]) if entry["drift"] else "no"]
    return [_short(c) for c in cells]


def table(report):
    """The report as text: a fixed-width table, then one line per drift, problem and error, then the counts."""
    rows = [list(COLUMNS)] + [row(e) for e in report["nodes"]]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(r)).rstrip() for r in rows]
    details = []
    for entry in report["nodes"]:
        for item in entry["drift"]:
            details.append("%s: drift: %s/%s: %s" % (entry["host"], item["stage"], item["subject"], item["reason"]))
        for text in entry["problems"]:
            details.append("%s: problem: %s" % (entry["host"], text))
        for text in entry.get("notes") or []:
            details.append("%s: note: %s" % (entry["host"], text))
        for text in entry["errors"]:
            details.append("%s: %s: %s" % (entry["host"], entry["state"], text))
    counts = report["summary"]
    lines.append("")
    lines.extend(details)
    states = ", ".join("%d %s" % (counts[state], state) for state in reversed(STATES) if counts[state])
    lines.append("%d node(s): %s" % (counts["total"], states) if counts["total"] else "no GPU host in the inventory")
    return "\n".join(lines) + "\n"
