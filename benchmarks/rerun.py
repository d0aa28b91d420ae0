# SPDX-License-Identifier: GPL-3.0-or-later
"""Benchmark (not a test): the bring-up's first run against its rerun on the sandbox fleet.

For each fleet size (``--sizes 7,14,28``; 7 is sandbox/fleet.yml, larger fleets repeat its nodes with a suffix), the
runner

1. replaces the sandbox node containers with a fresh fleet of that size (sandbox/images/nodes.yml, as
   ``make nodes-fresh`` does, with a fleet file and inventory of its own) and starts a control plane of its own
   (sandbox/k8s, in a temporary directory, with one kwok node per node container);
2. runs the demo's own command, ``ansible-playbook sandbox/demo.yml`` (what ``make demo`` runs: it serves the
   stand-in NVIDIA apt repository on the nodes, imports the bring-up playbook ``kubegpu.cluster.site`` with the demo's
   variables, and writes the report per node), with ``ANSIBLE_CALLBACKS_ENABLED=ansible.posix.profile_tasks``, three
   times: ``first`` on the fresh fleet, ``rerun`` with nothing changed, and ``changed``, where the T4 node is given a
   plugin config of its own (``device_plugin_configs``, host variable ``kubegpu_device_plugin_config``), so the run has
   something to prove again there and nowhere else;
3. lets the machine settle before each run (CPUs busy less than 0.3 cores over 2 s, waiting 60 s at most; the wait
   is recorded), then records per run the bring-up playbook's time (from the start of its first task to the start of
   the demo's report play, by profile_tasks' clock), the whole command's wall-clock time, the PLAY RECAP of the
   bring-up per host, the per-task profile, the CPU time the whole machine spent meanwhile (/proc/stat), the load average, and which nodes
   the GPU proof ran on (the proof annotation ``kubegpu.cluster/last-proof`` of each node, read before and after);
4. takes the fleet and the control plane down.

Prints a table and writes the figures to a JSON file (benchmarks/results/ by default, ignored by git).

Usage: ``.venv/bin/python benchmarks/rerun.py [--sizes 7] [--reruns 3] [--keep-workdir]`` (``make benchmark`` runs it).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COLLECTIONS = ROOT / ".build" / "collections"  # `make venv` links the checkout there as kubegpu.cluster
sys.path[:0] = [str(ROOT), str(COLLECTIONS)]

import yaml  # noqa: E402

from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import proof  # noqa: E402
from sandbox.k8s import cluster, nodes as sandbox_nodes, paths  # noqa: E402
from labels_rollout import communicate, host_facts  # noqa: E402  (this folder is the script's, first on sys.path)

HERE = Path(__file__).resolve().parent
NODES_PLAYBOOK = ROOT / "sandbox" / "images" / "nodes.yml"
DEMO_PLAYBOOK = ROOT / "sandbox" / "demo.yml"
BRINGUP = "kubegpu.cluster.site"
CHANGED_CONFIG = "bench-shared"  # the plugin config the `changed` run gives one node
# ansible.posix.profile_tasks summary lines: "<task name> ----- 1.23s", and the clock line under each task banner:
# "Wednesday 25 November 2026  04:49:17 +0000 (0:00:00.881)       0:00:20.881 ****" (the last: since the start)
PROFILE_LINE = re.compile(r"^(?P<name>.*?) -+ +(?P<seconds>\d+\.\d+)s$")
CLOCK_LINE = re.compile(r"\(\d+:\d+:\d+\.\d+\)\s+(?P<h>\d+):(?P<m>\d+):(?P<s>\d+\.\d+) \*+$")


# inotify instances one node container takes (systemd, journald, its path units, dockerd, containerd): measured here,
# where 17 containers boot and the 20th exits at once under the kernel's default fs.inotify.max_user_instances of 128
INOTIFY_PER_CONTAINER = 7


def inotify_room(size: int) -> str:
    """Why this machine cannot boot ``size`` node containers (an empty string when it can): each systemd in a
    container takes inotify instances out of the user's fs.inotify.max_user_instances."""
    limit = int(Path("/proc/sys/fs/inotify/max_user_instances").read_text().strip())
    in_use = 0
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            for fd in os.listdir("/proc/%s/fd" % pid):
                try:
                    in_use += os.readlink("/proc/%s/fd/%s" % (pid, fd)) == "anon_inode:inotify"
                except OSError:
                    pass
        except OSError:
            pass
    if in_use + size * INOTIFY_PER_CONTAINER <= limit:
        return ""
    return ("%d node containers need about %d inotify instances, and fs.inotify.max_user_instances is %d with %d in use: "
            "systemd would not boot in the last ones (raise it with sysctl -w fs.inotify.max_user_instances=%d)"
            % (size, size * INOTIFY_PER_CONTAINER, limit, in_use, in_use + size * INOTIFY_PER_CONTAINER + 64))


def fleet_of(size: int) -> list:
    """``size`` nodes: sandbox/fleet.yml's, then the same again with ``-2``, ``-3``... on their names."""
    base = sandbox_nodes.load_fleet(paths.FLEET_FILE)
    out = []
    for index in range(size):
        node = dict(base[index % len(base)])
        copy = index // len(base)
        if copy:
            node["name"] = "%s-%d" % (node["name"], copy + 1)
        out.append(node)
    return out


def demo_layout() -> dict:
    """sandbox/demo.yml: the variables its bring-up gives kubegpu.cluster.site (one place: the demo), and how many of
    its plays come before and after the bring-up's."""
    plays = yaml.safe_load(DEMO_PLAYBOOK.read_text(encoding="utf-8"))
    for index, play in enumerate(plays):
        if play.get("ansible.builtin.import_playbook") == BRINGUP:
            return {"vars": dict(play.get("vars") or {}), "before": index, "after": len(plays) - index - 1}
    raise SystemExit("benchmark: %s imports no %s" % (DEMO_PLAYBOOK, BRINGUP))


def ansible_env(extra: dict | None = None) -> dict:
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS), ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
               ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INVENTORY_UNPARSED_WARNING="false", ANSIBLE_NOCOLOR="1",
               ANSIBLE_FORCE_COLOR="0")
    env.update(extra or {})
    return env


def playbook(args: list, log: Path, env: dict | None = None, check: bool = True) -> tuple:
    """Run ansible-playbook; returns ``(rc, seconds, output)`` and writes the output to ``log``."""
    command = [str(Path(sys.executable).parent / "ansible-playbook")] + args
    started = time.monotonic()
    proc = subprocess.Popen(command, env=env or ansible_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=ROOT)
    output = communicate(proc)[0]
    seconds = time.monotonic() - started
    log.write_text(output, encoding="utf-8")
    if check and proc.returncode != 0:
        raise SystemExit("benchmark: ansible-playbook %s failed (rc %d), output in %s:\n%s"
                         % (" ".join(args[-3:]), proc.returncode, log, output[-4000:]))
    return proc.returncode, seconds, output


def fleet(state: str, fleet_file: Path, sandbox_dir: Path, log: Path) -> float:
    _rc, seconds, _out = playbook([str(NODES_PLAYBOOK), "-e", "nodes_root=%s" % ROOT, "-e", "nodes_state=%s" % state,
                                   "-e", "nodes_fleet_file=%s" % fleet_file, "-e", "nodes_sandbox_dir=%s" % sandbox_dir],
                                  log)
    return seconds


def parse(output: str, before: int, after: int) -> dict:
    """What one run of the demo's command printed: the profile_tasks summary, the bring-up's time (from the clock at
    the first task of the first play after the demo's ``before`` plays to the clock at the first task of its last
    ``after`` plays) and the tasks that changed something in those plays, per host (``changed: [host]``)."""
    profile, in_tasks = [], False
    plays, starts, pending, task = 0, [], False, None
    changes = []  # (play number, task, host)
    for line in output.splitlines():
        if line.startswith("PLAY [") and not line.startswith("PLAY RECAP"):
            plays += 1
            pending = True
            continue
        if line.startswith("TASK [") or line.startswith("RUNNING HANDLER ["):
            task = line.split("[", 1)[1].rsplit("]", 1)[0]
            continue
        clock = CLOCK_LINE.search(line.strip())
        if clock and pending and not in_tasks:
            starts.append(int(clock.group("h")) * 3600 + int(clock.group("m")) * 60 + float(clock.group("s")))
            pending = False
            continue
        if line.startswith("changed: ["):
            host = line[len("changed: ["):].split("]", 1)[0]
            if (plays, task, host) not in changes:
                changes.append((plays, task, host))
            continue
        if line.startswith("TASKS RECAP"):
            in_tasks = True
            continue
        if in_tasks:
            match = PROFILE_LINE.match(line.strip())
            if match:
                profile.append({"task": match.group("name"), "seconds": float(match.group("seconds"))})
    bringup = None
    if after and len(starts) == plays and plays > before + after:
        bringup = starts[plays - after] - starts[before]
    in_bringup = [(t, h) for p, t, h in changes if before < p <= plays - after]
    return {"profile": profile, "bringup_s": bringup, "changed": in_bringup}


def proof_annotations(kubeconfig: Path) -> dict:
    """``{node: annotation value}`` of the proof annotation on every node that has one."""
    from kubernetes import client, config  # pylint: disable=import-outside-toplevel
    api = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
    out = {}
    for node in api.list_node().items:
        value = (node.metadata.annotations or {}).get(proof.ANNOTATION_LAST_PROOF)
        if value:
            out[node.metadata.name] = value
    return out


def cpu_busy() -> float:
    """Seconds the whole machine's CPUs have been busy (/proc/stat: all but idle and iowait)."""
    fields = [float(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


# Before each run the machine is let settle (the control plane, the simulated kubelets and the node containers finish
# what the run before started): until its CPUs are busy less than SETTLE_CORES over SETTLE_WINDOW_S, for at most
# SETTLE_MAX_S. Without it the reruns right after a first run on a fresh fleet took about a quarter longer than later
# ones on the same fleet.
SETTLE_CORES = 0.3
SETTLE_WINDOW_S = 2.0
SETTLE_MAX_S = 60.0


def settle() -> dict:
    """Wait (bounded) until the machine is quiet; returns how long it took and how busy it was in the last window."""
    started = time.monotonic()
    while True:
        busy = cpu_busy()
        time.sleep(SETTLE_WINDOW_S)
        cores = (cpu_busy() - busy) / SETTLE_WINDOW_S
        waited = time.monotonic() - started
        if cores < SETTLE_CORES or waited >= SETTLE_MAX_S:
            return {"settle_s": round(waited, 1), "busy_cores_before": round(cores, 2)}


def bringup(name: str, inventories: list, extra_vars: list, kubeconfig: Path, workdir: Path, layout: dict) -> dict:
    """One timed run of the demo's command (sandbox/demo.yml), on a settled machine."""
    quiet = settle()
    before = proof_annotations(kubeconfig)
    args = []
    for inventory in inventories:
        args += ["-i", str(inventory)]
    for extra in extra_vars:
        args += ["-e", "@%s" % extra]
    args += ["-e", "demo_report_dir=%s" % workdir]  # the demo's report, in the benchmark's directory (not .sandbox)
    env = ansible_env({"ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.profile_tasks", "PROFILE_TASKS_TASK_OUTPUT_LIMIT": "all"})
    load_before, cpu_before = os.getloadavg(), cpu_busy()
    rc, seconds, output = playbook(args + [str(DEMO_PLAYBOOK)], workdir / ("%s.log" % name), env=env, check=False)
    load_after, cpu_after = os.getloadavg(), cpu_busy()
    after = proof_annotations(kubeconfig)
    parsed = parse(output, layout["before"], layout["after"])
    if rc != 0 or parsed["bringup_s"] is None:
        raise SystemExit("benchmark: the %s run failed (rc %d); output in %s:\n%s"
                         % (name, rc, workdir / ("%s.log" % name), output[-4000:]))
    return {
        "run": name,
        "bringup_s": round(parsed["bringup_s"], 1),
        "command_s": round(seconds, 1),
        # tasks that changed something in the bring-up's plays, per host (the demo's own plays left out)
        "changed": len(parsed["changed"]),
        "changed_tasks": ["%s: %s" % (host, task) for task, host in parsed["changed"]],
        "proved": sorted(n for n, v in after.items() if before.get(n) != v),
        "proof_records": len(after),
        "machine_cpu_s": round(cpu_after - cpu_before, 1),
        "settle_s": quiet["settle_s"],
        "busy_cores_before": quiet["busy_cores_before"],
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in load_after],
        "profile": parsed["profile"],
    }


def one_size(size: int, workdir: Path, keep: bool, reruns: int = 3) -> dict:
    """Fresh fleet and control plane of ``size`` nodes, then the first run, ``reruns`` reruns and the changed run."""
    here = workdir / ("fleet-%d" % size)
    sandbox_dir = here / "sandbox"
    sandbox_dir.mkdir(parents=True)
    nodes = fleet_of(size)
    fleet_file = here / "fleet.yml"
    fleet_file.write_text(yaml.safe_dump({"nodes": nodes}, sort_keys=False), encoding="utf-8")
    layout = cluster.Layout(here / "k8s", here / "kubeconfig")
    result = {"size": size, "nodes": [n["name"] for n in nodes], "runs": []}
    try:
        print("benchmark: %d node containers: replacing the sandbox fleet ..." % size, flush=True)
        fleet("absent", fleet_file, sandbox_dir, here / "fleet-down.log")
        result["fleet_up_s"] = round(fleet("started", fleet_file, sandbox_dir, here / "fleet-up.log"), 1)
        versions = paths.read_versions()
        state = cluster.up(layout, timeout=300, fleet=False)
        cluster.create_nodes(layout, sandbox_nodes.fleet_manifests(versions["KUBE_VERSION"], fleet_path=fleet_file))
        cluster.wait_nodes_ready(layout, {n["name"] for n in nodes}, time.monotonic() + 300)
        result["control_plane_up_s"] = state.get("up_seconds")
        inventory = sandbox_dir / "inventory" / "nodes.yml"
        api_inventory = here / "k8s_api.yml"
        api_inventory.write_text(yaml.safe_dump({"k8s_api": {"hosts": {"localhost": {
            "ansible_connection": "local", "ansible_python_interpreter": sys.executable}},
            "vars": {"kubegpu_kubeconfig": str(layout.kubeconfig)}}}), encoding="utf-8")
        layout_of_demo = demo_layout()
        inventories = [inventory, api_inventory]
        for name in ["first"] + ["rerun"] * reruns:
            print("benchmark: %d node containers: %s run ..." % (size, name), flush=True)
            result["runs"].append(bringup(name, inventories, [], layout.kubeconfig, here, layout_of_demo))
            run = result["runs"][-1]
            print("benchmark: %d node containers: %s run: bring-up %.1f s (command %.1f s), changed=%d"
                  % (size, name, run["bringup_s"], run["command_s"], run["changed"]), flush=True)
        # The T4 node gets a plugin config of its own: the device plugin changes, and its proof must run again.
        target = next(n["name"] for n in nodes if n.get("profile") == "t4")
        change_inventory = here / "changed.yml"
        change_inventory.write_text(yaml.safe_dump({"gpu_nodes": {"hosts": {target: {
            "kubegpu_device_plugin_config": CHANGED_CONFIG}}}}), encoding="utf-8")
        change_vars = here / "changed-vars.json"
        configs = dict(layout_of_demo["vars"].get("device_plugin_configs") or {})
        configs[CHANGED_CONFIG] = {"sharing": {"strategy": "time-slicing", "replicas": 2}}
        change_vars.write_text(json.dumps({"device_plugin_configs": configs}), encoding="utf-8")
        print("benchmark: %d node containers: changed run (%s gets plugin config %s) ..." % (size, target, CHANGED_CONFIG),
              flush=True)
        changed = bringup("changed", inventories + [change_inventory], [change_vars], layout.kubeconfig, here, layout_of_demo)
        changed["changed_node"] = target
        result["runs"].append(changed)
        print("benchmark: %d node containers: changed run: bring-up %.1f s, changed=%d, proved again: %s"
              % (size, changed["bringup_s"], changed["changed"], ", ".join(changed["proved"]) or "none"), flush=True)
    finally:
        cluster.down(layout, quiet=True)
        if not keep:
            fleet("absent", fleet_file, sandbox_dir, here / "fleet-down.log")
    first = result["runs"][0]
    # the reruns vary with what the machine still does after the run before (one 7-node series gave 13.8, 12.0 and
    # 10.6 s), so the figure is their median, and every rerun is kept in the results
    reruns_s = sorted(r["bringup_s"] for r in result["runs"] if r["run"] == "rerun")
    result["rerun_median_s"] = reruns_s[len(reruns_s) // 2]
    result["rerun_over_first"] = round(result["rerun_median_s"] / first["bringup_s"], 3)
    return result


def print_table(sizes: list) -> None:
    head = ("nodes", "run", "settled s", "bring-up s", "command s", "machine CPU s", "changed", "proved again",
            "load 1m before/after")
    rows = []
    for size in sizes:
        for run in size["runs"]:
            rows.append((str(size["size"]), run["run"], "%.1f" % run.get("settle_s", 0), "%.1f" % run["bringup_s"],
                         "%.1f" % run["command_s"],
                         "%.1f" % run["machine_cpu_s"], str(run["changed"]),
                         ", ".join(run["proved"]) if len(run["proved"]) < 4 else "%d nodes" % len(run["proved"]),
                         "%.1f/%.1f" % (run["load_before"][0], run["load_after"][0])))
    widths = [max(len(c) for c in col) for col in zip(head, *rows)]
    for row in [head] + rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--sizes", default="7", help="fleet sizes, comma-separated (default 7; the issue's: 7,14,28)")
    parser.add_argument("--out", type=Path, help="JSON results file (default benchmarks/results/rerun-<UTC time>.json)")
    parser.add_argument("--reruns", type=int, default=3,
                        help="reruns per fleet size; the ratio takes their median (default 3)")
    parser.add_argument("--keep-workdir", action="store_true",
                        help="keep the work directory (logs, inventories) and the last fleet's node containers")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or HERE / "results" / ("rerun-%s.json" % stamp)
    workdir = Path(tempfile.mkdtemp(prefix="kubegpu-rerun-"))
    print("benchmark: fleet sizes %s, work dir %s" % (", ".join(map(str, sizes)), workdir), flush=True)
    facts = host_facts()
    results, skipped = [], []
    try:
        for index, size in enumerate(sizes):
            why = inotify_room(size)
            if why:
                print("benchmark: %d node containers: skipped: %s" % (size, why), flush=True)
                skipped.append({"size": size, "skipped": why})
                continue
            try:
                results.append(one_size(size, workdir, keep=args.keep_workdir and index == len(sizes) - 1,
                                        reruns=max(args.reruns, 1)))
            except SystemExit as exc:  # a failed size is reported, and the sizes measured before it are kept
                if not isinstance(exc.code, str):
                    raise
                print(exc.code, file=sys.stderr, flush=True)
                skipped.append({"size": size, "failed": exc.code[:2000]})
    finally:
        if not args.keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    report = {
        "benchmark": "bring-up (kubegpu.cluster.site, run by sandbox/demo.yml): first run, rerun, one change",
        "command": "benchmarks/rerun.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "started_utc": stamp,
        "host": facts,
        "sizes": results,
        "skipped_sizes": skipped,
        "summary": dict(("rerun_over_first_%d" % r["size"], r["rerun_over_first"]) for r in results),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print()
    print_table(results)
    print()
    print(json.dumps(report["summary"]))
    print("benchmark: results in %s" % out)
    return 1 if any("failed" in s for s in skipped) else 0


if __name__ == "__main__":
    sys.exit(main())
