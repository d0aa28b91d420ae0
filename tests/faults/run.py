# SPDX-License-Identifier: GPL-3.0-or-later
"""``make faults``: inject each fault of tests/faults/README.md into the sandbox, check that nothing is lost, print a
table (fault, how injected, trials, survived, data lost, time to converge) and, with ``--report``, write it into
docs/reliability.md between its markers.

    python tests/faults/run.py [--seed S] [--fault NAME ...] [--trials N] [--only K] [--report docs/reliability.md]

Every trial draws from ``random.Random("<seed>/<trial>")``: ``--seed S --fault NAME --only K`` replays trial K alone
(``make faults SEED=S FAULT=NAME ONLY=K``). The seed is printed first, and with every failed trial.
"""

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
for path in (str(HERE), str(HERE.parent), str(ROOT)):
    if path not in sys.path:
        sys.path.insert(0, path)

import api_server  # noqa: E402  pylint: disable=wrong-import-position
import killed_play  # noqa: E402  pylint: disable=wrong-import-position
import killed_plugin  # noqa: E402  pylint: disable=wrong-import-position
import lost_node  # noqa: E402  pylint: disable=wrong-import-position
import throttled  # noqa: E402  pylint: disable=wrong-import-position

BEGIN = "<!-- faults table: written by make faults (tests/faults/run.py) -->"
END = "<!-- end of the faults table -->"


def log(line):
    print(line, flush=True)


class Fault:
    """One fault of the suite: its name, how it is injected (for the table), its default trial count, and a
    maker ``make(seed, workdir, smoke)`` of a context manager that runs a trial (``trial(k)``, a result dict:
    survived, lost, problems, converge_s)."""

    def __init__(self, name, injected, trials, smoke, make):
        self.name, self.injected, self.trials, self.smoke, self.make = name, injected, trials, smoke, make


FAULTS = [
    Fault("killed-play", "SIGKILL of ansible-playbook's process group (half the trials: and of its processes on the "
          "node) at a seeded point 0 to %.0f s into a task that writes or restarts a runtime's configuration; "
          "rerun, checks, way back" % killed_play.KILL_SPREAD, 20, 2,
          lambda seed, workdir, smoke: killed_play.Trials(seed, "kubegpu-faults-%d" % os.getpid(), workdir, log, smoke)),
    Fault("killed-play-plugin", "SIGKILL of ansible-playbook's process group (the controller and the modules it runs) "
          "at a seeded moment while gpu_node_labels and device_plugin_deploy run (labels, then the plugin's applies "
          "and its wait for the rollout and the GPUs) on %d kwok nodes; rerun, checks, way back" % killed_plugin.NODES, 6, 1,
          lambda seed, workdir, smoke: killed_plugin.Trials(seed, workdir, log,
                                                            killed_plugin.SMOKE_NODES if smoke else killed_plugin.NODES)),
    Fault("api-server-gone", "kube-apiserver stopped for a seeded 5 to 60 s while device_plugin_deploy and "
          "gpu_node_labels run on %d kwok nodes; rerun" % api_server.NODES, 5, 1,
          lambda seed, workdir, smoke: api_server.Trials(seed, workdir, log,
                                                         api_server.SMOKE_NODES if smoke else api_server.NODES)),
    Fault("etcd-gone", "etcd stopped (kube-apiserver left running) for a seeded 5 to 60 s while device_plugin_deploy "
          "and gpu_node_labels run on %d kwok nodes; rerun" % api_server.NODES, 3, 1,
          lambda seed, workdir, smoke: api_server.Trials(seed, workdir, log,
                                                         api_server.SMOKE_NODES if smoke else api_server.NODES,
                                                         component="etcd")),
    Fault("lost-node", "one of %d node containers paused or killed (seeded: which, how, and 0 to %.0f s into a task "
          "that reads, writes or restarts a runtime) while the container_toolkit role runs on all of them, a task "
          "timeout of %d s; audit while it is gone; rerun once it is back; way back"
          % (lost_node.NODES, lost_node.LOSS_SPREAD, lost_node.TASK_TIMEOUT_S), 6, 1,
          lambda seed, workdir, smoke: lost_node.Trials(seed, workdir, log)),
    Fault("throttled", "API Priority and Fairness on, the operator (not system:masters) sent to a priority level of 3 "
          "seats that rejects (seeded: at once, or after a queue of 1 to 4) while gpu_node_labels (seeded: 8, 16 or 32 "
          "parallel PATCHes) and device_plugin_deploy (max_unavailable %s) run on %d kwok nodes; one run, no rerun"
          % (throttled.MAX_UNAVAILABLE, throttled.NODES), 3, 1,
          lambda seed, workdir, smoke: throttled.Trials(seed, workdir, log,
                                                        throttled.SMOKE_NODES if smoke else throttled.NODES)),
]


def run(fault, seed, trials, only=None, smoke=False):
    """Every trial of one fault; returns the table row and the failed trials."""
    results = []
    with tempfile.TemporaryDirectory(prefix="faults-") as workdir:
        with fault.make(seed, workdir, smoke) as trial:
            trial.baseline()
            for number in ([only] if only is not None else range(trials)):
                started = time.monotonic()
                result = trial.trial(number)
                result["seconds"] = round(time.monotonic() - started, 1)
                results.append(result)
                log("%s trial %d (seed %s): %s%s: %s in %.1f s; time to converge %s s%s" % (
                    fault.name, number, seed, result["where"],
                    ", the faulted run " + result["outcome"] if result.get("outcome") else "",
                    "survived" if result["survived"] else "FAILED", result["seconds"], result["converge_s"],
                    "".join("\n    - " + p for p in result["problems"])))
    converge = sorted(r["converge_s"] for r in results)
    row = {"fault": fault.name, "injected": fault.injected, "trials": len(results), "seed": seed,
           "survived": sum(r["survived"] for r in results), "lost": sum(r["lost"] for r in results),
           "converge": "%.1f s median, %.1f s max" % (converge[len(converge) // 2], converge[-1]) if converge else "-",
           # the API server's 429s during the trials, where the fault counts them (throttled); "-" elsewhere
           "rejected": (str(sum(r["rejected"] for r in results)) if results and all("rejected" in r for r in results)
                        else "-")}
    return row, [r for r in results if not r["survived"]]


HEADER = ["| fault | how injected | trials | survived | data lost | time to converge | 429s seen | seed |",
          "| --- | --- | --- | --- | --- | --- | --- | --- |"]


def table(rows):
    return "\n".join(HEADER + ["| %(fault)s | %(injected)s | %(trials)d | %(survived)d | %(lost)d | %(converge)s | "
                               "%(rejected)s | %(seed)s |" % dict(r, rejected=r.get("rejected", "-")) for r in rows])


def write_report(path, rows):
    """Put ``rows`` into the page's table, each in place of the row of its fault (the others stay: a run of one
    fault updates its row), in the order of FAULTS."""
    page = Path(path).read_text(encoding="utf-8")
    start, end = page.index(BEGIN) + len(BEGIN), page.index(END)
    kept = {}
    for line in page[start:end].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and cells[0] in [f.name for f in FAULTS]:
            if len(cells) == len(HEADER[0].strip().strip("|").split("|")) - 1:  # a row from before the 429s column
                cells.insert(-1, "-")
                line = "| " + " | ".join(cells) + " |"
            kept[cells[0]] = line
    kept.update((r["fault"], table([r]).splitlines()[-1]) for r in rows)
    lines = HEADER + [kept[f.name] for f in FAULTS if f.name in kept]
    Path(path).write_text(page[:start] + "\n" + "\n".join(lines) + "\n" + page[end:], encoding="utf-8")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--seed", default=None, help="the run's seed (default: a new one, printed)")
    parser.add_argument("--fault", action="append", choices=[f.name for f in FAULTS], help="only these (repeatable)")
    parser.add_argument("--trials", type=int, default=None, help="trials per fault (default: each fault's own)")
    parser.add_argument("--only", type=int, default=None, help="replay this one trial number")
    parser.add_argument("--smoke", action="store_true", help="the smoke subset: each fault's smoke trial count")
    parser.add_argument("--report", default=None, help="write the rows into this page's table (between its markers)")
    args = parser.parse_args(argv)
    seed = args.seed or str(random.SystemRandom().randrange(10 ** 8))
    log("faults: seed %s (replay: make faults SEED=%s)" % (seed, seed))
    rows, failed = [], []
    for fault in FAULTS:
        if args.fault and fault.name not in args.fault:
            continue
        trials = args.trials or (fault.smoke if args.smoke else fault.trials)
        started = time.monotonic()
        row, bad = run(fault, seed, trials, args.only, args.smoke)
        row["wall"] = round(time.monotonic() - started)
        rows.append(row)
        failed += [(fault.name, r) for r in bad]
    text = table(rows)
    log("\n" + text + "\n\nSeed %s; `make faults SEED=%s` replays this run." % (seed, seed))
    for name, result in failed:
        log("FAILED: make faults SEED=%s FAULT=%s ONLY=%d (%s)" % (seed, name, result["trial"], result["where"]))
    if args.report:
        write_report(args.report, rows)
    return 1 if failed or any(r["lost"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
