# SPDX-License-Identifier: GPL-3.0-or-later
"""Benchmark (not a test): GPU node labels plus device plugin rollout wait on N kwok nodes.

Starts its own sandbox control plane (sandbox/k8s: etcd, kube-apiserver, controller-manager, scheduler, kwok, devsim)
in a temporary directory with N scale nodes of one GPU profile (default 500 x v100x4), then times, with one clock in
the same run, two playbooks that do the same job from the same starting state:

- ours  (benchmarks/playbooks/ours.yml): one kubegpu.cluster.gpu_node_labels task for every node, then one
  kubegpu.cluster.device_plugin_deploy task with ``expected`` for every node;
- naive (benchmarks/playbooks/naive.yml): one kubernetes.core.k8s task per node (merge patch of the same labels), the
  same device plugin objects applied with kubernetes.core.k8s ``wait: true``, then one kubernetes.core.k8s_info
  until/retries/delay loop per node on its allocatable.

Between runs the deployment and the labels are removed and the runner waits until no node advertises nvidia.com/*
resources or carries any of the labels. Each ``--repeat`` runs both, alternating which goes first. Prints a table and
writes the figures, with the host's facts and versions, to a JSON file (benchmarks/results/ by default, not committed).

Usage: ``make benchmark`` or ``.venv/bin/python benchmarks/labels_rollout.py [--nodes 500] [--repeat 1]``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COLLECTIONS = ROOT / ".build" / "collections"  # `make venv` links the checkout there as kubegpu.cluster
sys.path[:0] = [str(ROOT), str(COLLECTIONS)]

import yaml  # noqa: E402
from kubernetes import client as k8s_client  # noqa: E402
from kubernetes import config as k8s_config  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402

from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import constants, labels, manifests, naming  # noqa: E402
from sandbox.k8s import cluster, paths  # noqa: E402

HERE = Path(__file__).resolve().parent
PLAYBOOKS = {"ours": HERE / "playbooks" / "ours.yml", "naive": HERE / "playbooks" / "naive.yml"}
NAMESPACE = constants.DEVICE_PLUGIN_NAMESPACE
RESOURCE = "nvidia.com/gpu"


# ----------------------------------------------------------------------------------------------- inputs

def gpu_fact(profile: dict, node: str) -> dict:
    """The ``gpu`` fact kubegpu.cluster.gpu_facts returns on a node with this sandbox profile (healthy GPUs, no MIG)."""
    devices = [{
        "index": index,
        "uuid": "GPU-%s" % uuid.uuid5(uuid.NAMESPACE_URL, "%s/%d" % (node, index)),  # unique per node, as on real ones
        "name": dev["name"],
        "product_slug": naming.product_slug(dev["name"]),
        "memory_total_mib": dev["memory_total_mib"],
        "pci_bus_id": dev["pci_bus_id"],
        "compute_capability": dev["compute_capability"],
        "architecture": dev["architecture"],
        "persistence_mode": dev["persistence_mode"],
        "mig": {"capable": False, "current": False, "pending": False, "devices": []},
        "healthy": True,
        "errors": {},
    } for index, dev in enumerate(profile["devices"])]
    pci = [{"address": dev["pci_bus_id"][4:].lower(), "device_id": dev["pci_device_id"][:6].lower(),
            "subsystem_id": dev["pci_subsystem_id"].lower(), "class": "0x030200", "driver": "nvidia"}
           for dev in profile["devices"]]
    return {
        "present": True,
        "nvml": {"status": "ok", "message": ""},
        "driver_version": profile["driver_version"],
        "cuda_driver_version": naming.cuda_version_string(profile["cuda_driver_version"]),
        "nvml_version": profile["nvml_version"],
        "count": len(devices),
        "devices": devices,
        "pci": pci,
        "kernel_modules": {"nvidia": True, "nouveau": False},
    }


def write_inputs(workdir: Path, node_names: list, profile: dict) -> dict:
    """Write the inventory (every node with its gpu fact, the labels it should get and the counts to wait for) and
    the device plugin manifest the naive playbook applies; return what the checks need."""
    hosts = {}
    for name in node_names:
        fact = gpu_fact(profile, name)
        hosts[name] = {"gpu": fact, "gpu_labels": labels.labels_for_facts(fact),
                       "gpu_expected": {RESOURCE: fact["count"]}}
    inventory = workdir / "inventory.json"  # JSON is YAML: read by the yaml inventory plugin
    inventory.write_text(json.dumps({"all": {"children": {"gpu_nodes": {"hosts": hosts}}}}), encoding="utf-8")
    # The objects device_plugin_deploy applies with its defaults, plus a plain namespace.
    objects = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}] + manifests.render({})
    manifest = workdir / "device-plugin.yml"
    manifest.write_text(yaml.safe_dump_all(objects, sort_keys=False), encoding="utf-8")
    first = hosts[node_names[0]]
    return {"inventory": inventory, "manifest": manifest, "labels": first["gpu_labels"], "expected": first["gpu_expected"],
            "fact": first["gpu"]}


# ----------------------------------------------------------------------------------------------- cluster state

def core_api(kubeconfig: Path):
    configuration = k8s_client.Configuration()
    k8s_config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    configuration.connection_pool_maxsize = 16
    return k8s_client.CoreV1Api(k8s_client.ApiClient(configuration))


def node_state(api, names: list, labels: dict, expected: dict) -> dict:
    """How many of ``names`` carry ``labels``, advertise ``expected``, carry any of the labels, advertise anything."""
    nodes = dict((n.metadata.name, n) for n in api.list_node().items)
    out = {"labelled": 0, "advertising": 0, "any_label": 0, "any_resource": 0}
    for name in names:
        node = nodes.get(name)
        have = (node.metadata.labels or {}) if node else {}
        alloc = ((node.status.allocatable or {}) if node and node.status else {})
        out["labelled"] += all(have.get(k) == v for k, v in labels.items())
        out["advertising"] += all(str(alloc.get(k)) == str(v) for k, v in expected.items())
        out["any_label"] += any(k in have for k in labels)
        out["any_resource"] += any(k.startswith("nvidia.com/") for k in alloc)
    return out


def poll(what: str, check, timeout: float, interval: float = 1.0):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise SystemExit("benchmark: timed out after %ss waiting for %s" % (timeout, what))
        time.sleep(interval)


def ignore_missing(call, *args, **kwargs):
    try:
        call(*args, **kwargs)
    except ApiException as exc:
        if exc.status != 404:
            raise


def reset(api, names: list, labels: dict, expected: dict, timeout: float) -> float:
    """Remove the device plugin (its namespace) and the labels; wait until nothing of either is left. Returns seconds."""
    started = time.monotonic()
    apps = k8s_client.AppsV1Api(api.api_client)
    # kwok removes a deleted pod at a random time within its grace period (30 s by default): orphan the plugin pods
    # and delete them with no grace, so a reset takes seconds; then the namespace and what is left in it.
    ignore_missing(apps.delete_namespaced_daemon_set, constants.PLUGIN_NAME, NAMESPACE, propagation_policy="Orphan")
    ignore_missing(api.delete_collection_namespaced_pod, NAMESPACE, grace_period_seconds=0)
    ignore_missing(api.delete_namespace, NAMESPACE)

    def namespace_gone():
        try:
            api.read_namespace(NAMESPACE)
            return False
        except ApiException as exc:
            if exc.status == 404:
                return True
            raise

    poll("namespace %s to go" % NAMESPACE, namespace_gone, timeout)
    nulls = {"metadata": {"labels": dict((key, None) for key in labels)}}
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda name: api.patch_node(name, nulls), names))
    poll("labels and nvidia.com resources to go", lambda: not any(
        node_state(api, names, labels, expected)[k] for k in ("any_label", "any_resource")), timeout)
    return time.monotonic() - started


# ----------------------------------------------------------------------------------------------- one timed run

def task_span(task: dict) -> tuple:
    """A task's start and end (aware datetimes, from the ansible.posix.json callback)."""
    duration = task["task"].get("duration") or {}
    return tuple(datetime.datetime.fromisoformat(duration[k].replace("Z", "+00:00")) for k in ("start", "end"))


DEVSIM_PATCH = "patching status"


def simulator_share(devsim_log: Path, span) -> dict | None:
    """Where the rollout wait went: from the start of the rollout task to the simulator's first and last node status
    patch (devsim plays the kubelet: a node advertises its GPUs once devsim patched it), and how many it made."""
    if not span or not devsim_log.is_file():
        return None
    start, end = span
    stamps = []
    for line in devsim_log.read_text(encoding="utf-8", errors="replace").splitlines():
        if DEVSIM_PATCH not in line:
            continue
        try:  # devsim logs local time, "2026-11-25 05:46:15,347"
            when = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").astimezone()
        except ValueError:
            continue
        if start <= when <= end:
            stamps.append(when)
    if not stamps:
        return None
    return {"patches": len(stamps), "first_patch_s": round((stamps[0] - start).total_seconds(), 2),
            "last_patch_s": round((stamps[-1] - start).total_seconds(), 2),
            "after_last_patch_s": round((end - stamps[-1]).total_seconds(), 2)}


def communicate(proc: subprocess.Popen) -> tuple:
    """``proc.communicate()`` for an ansible-playbook; when this runner is stopped (SIGTERM, Ctrl-C) meanwhile, SIGINT
    makes ansible-playbook stop its workers, which run in their own sessions and would outlive a killed one."""
    try:
        return proc.communicate()
    except BaseException:
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        raise


def task_seconds(task: dict) -> float:
    duration = task["task"].get("duration") or {}
    start, end = (datetime.datetime.fromisoformat(duration[k].replace("Z", "+00:00")) for k in ("start", "end"))
    return (end - start).total_seconds()


def run_playbook(approach: str, inputs: dict, kubeconfig: Path, workdir: Path, run: int, wait_timeout: int) -> dict:
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS), ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
               ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_LOCALHOST_WARNING="0")
    command = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inputs["inventory"]),
               str(PLAYBOOKS[approach]), "-e", "ansible_python_interpreter=%s" % sys.executable,
               "-e", json.dumps({"kubeconfig": str(kubeconfig), "manifest": str(inputs["manifest"]),
                                 "wait_timeout": wait_timeout})]
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    stdout, stderr = communicate(proc)
    total = time.monotonic() - started
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    (workdir / ("run%d-%s.json" % (run, approach))).write_text(stdout, encoding="utf-8")
    try:
        tasks = json.loads(stdout)["plays"][0]["tasks"]
    except (ValueError, KeyError, IndexError):
        tasks = []
    if proc.returncode != 0 or not tasks:
        failed = [t["task"]["name"] + ": " + str(h.get("msg"))[:2000] for t in tasks for h in t["hosts"].values() if h.get("failed")]
        raise SystemExit("benchmark: %s playbook failed (rc %d): %s\n%s"
                         % (approach, proc.returncode, "; ".join(failed), stderr[-3000:]))
    steps = [(t["task"]["name"], task_seconds(t)) for t in tasks]
    spans = [task_span(t) for t in tasks]
    # GETs of the naive until/retries loop (each item result of a task with `until` has its `attempts`)
    polls = sum(r.get("attempts", 0) for t in tasks for h in t["hosts"].values() for r in h.get("results", []))
    return {
        "approach": approach,
        "total_s": round(total, 2),
        "labels_s": round(steps[0][1], 2),
        "rollout_wait_s": round(sum(seconds for name, seconds in steps[1:]), 2),
        "other_s": round(total - sum(seconds for name, seconds in steps), 2),  # start-up, inventory, writing the result
        "cpu_s": round(cpu_after.ru_utime + cpu_after.ru_stime - cpu_before.ru_utime - cpu_before.ru_stime, 1),
        "tasks": [{"name": n, "seconds": round(s, 2)} for n, s in steps],
        "_rollout_span": (spans[1][0], spans[-1][1]) if len(spans) > 1 else None,
        "node_polls": polls or None,
        "load_average_after": [round(x, 2) for x in os.getloadavg()],  # 1, 5, 15 min: how busy the shared host was
    }


# ----------------------------------------------------------------------------------------------- host facts

def _first(path: str, prefix: str, split: str) -> str | None:
    try:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            if line.startswith(prefix):
                return line.split(split, 1)[1].strip().strip('"')
    except OSError:
        pass
    return None


def _version(dist: str) -> str | None:
    from importlib import metadata
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def host_facts() -> dict:
    from ansible import release
    k8s_core = next((json.loads(p.read_text())["collection_info"]["version"] for base in sys.path
                     for p in [Path(base) / "ansible_collections" / "kubernetes" / "core" / "MANIFEST.json"] if p.is_file()), None)
    versions = paths.read_versions()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True, check=False).stdout.strip()
    mem_kib = _first("/proc/meminfo", "MemTotal:", ":")
    return {
        "cpus": os.cpu_count(),
        "cpu_model": _first("/proc/cpuinfo", "model name", ":"),
        "memory_gib": round(int(mem_kib.split()[0]) / 1048576, 1) if mem_kib else None,
        "os": _first("/etc/os-release", "PRETTY_NAME=", "="),
        "kernel": platform.release(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "ansible": _version("ansible"),
        "ansible_core": release.__version__,
        "kubernetes_core": k8s_core,
        "kubernetes_python_client": _version("kubernetes"),
        "kubernetes": versions.get("KUBE_VERSION"),
        "etcd": versions.get("ETCD_VERSION"),
        "kwok": versions.get("KWOK_VERSION"),
        "kubegpu_cluster": yaml.safe_load((ROOT / "galaxy.yml").read_text(encoding="utf-8"))["version"],
        "git_commit": commit + ("-dirty" if dirty else ""),
    }


# ----------------------------------------------------------------------------------------------- main

def print_table(runs: list) -> None:
    head = ("run", "approach", "total s", "labels s", "rollout+wait s", "simulator patches s", "other s", "CPU s", "nodes ok",
            "load 5m")
    rows = [(str(r["run"]), r["approach"], "%.1f" % r["total_s"], "%.1f" % r["labels_s"], "%.1f" % r["rollout_wait_s"],
             ("%.1f-%.1f" % (r["simulator"]["first_patch_s"], r["simulator"]["last_patch_s"])) if r.get("simulator") else "-",
             "%.1f" % r["other_s"], "%.1f" % r["cpu_s"], "%d/%d" % (r["nodes_ok"], r["nodes"]),
             "%.1f" % r["load_average_after"][1]) for r in runs]
    widths = [max(len(c) for c in col) for col in zip(head, *rows)]
    for row in [head] + rows:
        print("  ".join(c.rjust(w) if i > 1 else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))))


def summarize(runs: list) -> dict:
    out = {}
    for approach in ("ours", "naive"):
        totals = [r["total_s"] for r in runs if r["approach"] == approach]
        if totals:
            out[approach] = {"runs": len(totals), "median_total_s": round(statistics.median(totals), 2),
                             "min_total_s": min(totals), "max_total_s": max(totals)}
    if len(out) == 2:
        out["naive_over_ours"] = round(out["naive"]["median_total_s"] / out["ours"]["median_total_s"], 1)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--nodes", type=int, default=500, help="kwok scale nodes (default 500)")
    parser.add_argument("--profile", default="v100x4", help="sandbox GPU profile of the nodes (default v100x4)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of both approaches, alternating the order (default 1)")
    parser.add_argument("--only", choices=("ours", "naive"), help="time one approach only")
    parser.add_argument("--wait-timeout", type=int, default=900, help="seconds each playbook may wait for the rollout")
    parser.add_argument("--out", type=Path, help="JSON results file (default benchmarks/results/labels-rollout-<UTC time>.json)")
    parser.add_argument("--keep-workdir", action="store_true", help="keep the sandbox state, inventory and playbook output")
    args = parser.parse_args(argv)
    # SIGTERM (a killed `make benchmark`) raises SystemExit, so that the finally below takes the sandbox down.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    approaches = [args.only] if args.only else ["ours", "naive"]
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or HERE / "results" / ("labels-rollout-%s.json" % stamp)
    profile = json.loads((paths.PROFILES_DIR / ("%s.json" % args.profile)).read_text(encoding="utf-8"))

    facts = host_facts()
    workdir = Path(tempfile.mkdtemp(prefix="kubegpu-benchmark-"))
    layout = cluster.Layout(workdir / "k8s", workdir / "kubeconfig")
    print("benchmark: %d x %s kwok nodes, work dir %s" % (args.nodes, args.profile, workdir), flush=True)
    runs = []
    try:
        state = cluster.up(layout, timeout=300, extra_nodes=args.nodes, extra_profile=args.profile, fleet=False)
        api = core_api(layout.kubeconfig)
        names = sorted(n.metadata.name for n in api.list_node().items)
        inputs = write_inputs(workdir, names, profile)
        for index in range(args.repeat):
            order = approaches if index % 2 == 0 else approaches[::-1]
            for approach in order:
                reset_s = reset(api, names, inputs["labels"], inputs["expected"], args.wait_timeout)
                print("benchmark: run %d, %s (reset took %.1f s) ..." % (index + 1, approach, reset_s), flush=True)
                result = run_playbook(approach, inputs, layout.kubeconfig, workdir, index + 1, args.wait_timeout)
                result["simulator"] = simulator_share(layout.log("devsim"), result.pop("_rollout_span"))
                after = node_state(api, names, inputs["labels"], inputs["expected"])
                result.update(run=index + 1, nodes=len(names), nodes_ok=min(after["labelled"], after["advertising"]))
                print("benchmark: run %d, %s: %.1f s" % (index + 1, approach, result["total_s"]), flush=True)
                runs.append(result)
    finally:
        cluster.down(layout, quiet=True)
        if not args.keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)

    report = {
        "benchmark": "labels + device plugin rollout wait, kubegpu.cluster vs a per-node kubernetes.core loop",
        "command": "benchmarks/labels_rollout.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "started_utc": stamp,
        "nodes": args.nodes,
        "profile": args.profile,
        "labels_per_node": inputs["labels"],
        "expected_per_node": inputs["expected"],
        "sandbox_up_s": state.get("up_seconds"),
        "host": facts,
        "runs": runs,
        "summary": summarize(runs),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print()
    print_table(runs)
    print()
    print(json.dumps(report["summary"]))
    print("benchmark: results in %s" % out)
    return 0 if all(r["nodes_ok"] == r["nodes"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
