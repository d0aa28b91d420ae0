# SPDX-License-Identifier: GPL-3.0-or-later
"""Run `make test`'s stages, the independent ones side by side, and print what each cost.

Each stage is a make target of the top-level Makefile, run as ``make --no-print-directory TARGET`` with its output in
``LOG_DIR/TARGET.log``. ``--serial`` stages run first, one after the other (the set-up every lane needs); then every
``--lane`` runs at once, each lane's stages one after the other. Lanes share no containers, ports or state
directories (the Makefile's test plan says why each split is safe).

A stage that fails stops the run: the other lanes' running stages are stopped (their process groups get SIGTERM,
then SIGKILL after a grace period), nothing new starts, and the failing stage's last lines are printed. Either way the
run ends with a table of every stage (lane, result, seconds, and the seconds of the previous run where one was
recorded) and the wall time; the table is also written to ``--table`` and as JSON beside it, which the next run reads
for the "before" column.

Only the standard library: it runs before and without the venv.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

GRACE_S = 20
TAIL_LINES = 80


class Stage:
    """One make target: its lane, its log, and how it ended."""

    def __init__(self, target: str, lane: str, log_dir: Path):
        self.target = target
        self.lane = lane
        self.log = log_dir / (target + ".log")
        self.result = "not run"
        self.seconds = None
        self.proc = None


class Runner:
    """Runs the stages and keeps the shared stop flag."""

    def __init__(self, make: str, log_dir: Path, out=sys.stdout):
        self.make = make
        self.log_dir = log_dir
        self.out = out
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.failed = []
        self.start = time.monotonic()
        self.all_stages = []

    def say(self, text: str) -> None:
        with self.lock:
            self.out.write("[stages %5.0f s] %s\n" % (time.monotonic() - self.start, text))
            self.out.flush()

    def run_stage(self, stage: Stage) -> bool:
        """Run one stage to its end; return whether it passed."""
        if self.stopping.is_set():
            return False
        self.say("%s: %s started (log %s)" % (stage.lane, stage.target, stage.log))
        began = time.monotonic()
        with open(stage.log, "wb") as log:
            # a process group of its own, so that a stop reaches molecule's and pytest's children too
            stage.proc = subprocess.Popen([self.make, "--no-print-directory", stage.target], stdout=log,
                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
            rc = stage.proc.wait()
        stage.seconds = time.monotonic() - began
        if rc == 0 and _did_nothing(stage):
            rc = 3
            with open(stage.log, "a", encoding="utf-8") as log:
                log.write("stages: make ran no recipe for %s: a stage that tests nothing must not pass\n" % stage.target)
        if rc == 0:
            stage.result = "passed"
            self.say("%s: %s passed in %.0f s" % (stage.lane, stage.target, stage.seconds))
            return True
        if self.stopping.is_set():
            stage.result = "stopped"
            self.say("%s: %s stopped after %.0f s (another stage failed)" % (stage.lane, stage.target, stage.seconds))
            return False
        stage.result = "FAILED"
        self.say("%s: %s FAILED (rc %d) after %.0f s" % (stage.lane, stage.target, rc, stage.seconds))
        with self.lock:
            self.failed.append(stage)
        self.stop_all()
        return False

    def run_lane(self, stages) -> None:
        for stage in stages:
            if not self.run_stage(stage):
                return

    def stop_all(self) -> None:
        """Stop every running stage of the other lanes: SIGTERM to its group, SIGKILL after the grace period."""
        if self.stopping.is_set():
            return
        self.stopping.set()
        threading.Thread(target=self._terminate, daemon=True).start()

    def _terminate(self) -> None:
        running = [s for s in self.all_stages if s.proc is not None and s.proc.poll() is None]
        for stage in running:
            _signal_group(stage.proc, signal.SIGTERM)
        deadline = time.monotonic() + GRACE_S
        for stage in running:
            try:
                stage.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(stage.proc, signal.SIGKILL)


def _signal_group(proc, sig) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _did_nothing(stage: Stage) -> bool:
    """Whether make said it had nothing to do for the stage's target (a phony target that no rule builds, say)."""
    try:
        text = stage.log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return ("Nothing to be done for '%s'" % stage.target) in text or ("'%s' is up to date" % stage.target) in text


def _tail(path: Path, lines: int = TAIL_LINES) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as err:
        return "(cannot read %s: %s)" % (path, err)
    return "\n".join(text[-lines:])


def _previous(table_json: Path) -> dict:
    try:
        data = json.loads(table_json.read_text(encoding="utf-8"))
        return {row["stage"]: row["seconds"] for row in data.get("stages", []) if row.get("seconds") is not None}
    except (OSError, ValueError, AttributeError, TypeError):
        return {}


def _seconds(value) -> str:
    """A duration for the table, right-aligned in 8 characters; "-" for none."""
    if value is None:
        return "%8s" % "-"
    return "%8.0f" % float(value)


def render(stages, wall: float, previous: dict) -> str:
    """Return the stage table as text."""
    width = max([len(s.target) for s in stages] + [5])
    lane_w = max([len(s.lane) for s in stages] + [4])
    lines = ["%-*s  %-*s  %-8s  %8s  %8s" % (width, "stage", lane_w, "lane", "result", "seconds", "before"),
             "%s  %s  %s  %s  %s" % ("-" * width, "-" * lane_w, "-" * 8, "-" * 8, "-" * 8)]
    for stage in stages:
        secs = _seconds(stage.seconds)
        before = _seconds(previous.get(stage.target))
        lines.append("%-*s  %-*s  %-8s  %s  %s" % (width, stage.target, lane_w, stage.lane, stage.result, secs, before))
    summed = sum(s.seconds or 0 for s in stages)
    lines.append("%s  %s  %s  %s  %s" % ("-" * width, "-" * lane_w, "-" * 8, "-" * 8, "-" * 8))
    lines.append("%-*s  %-*s  %-8s  %s  %s" % (width, "(wall)", lane_w, "", "", _seconds(wall), _seconds(previous.get("(wall)"))))
    lines.append("%-*s  %-*s  %-8s  %s" % (width, "(sum of stages)", lane_w, "", "", _seconds(summed)))
    return "\n".join(lines)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--make", default=os.environ.get("MAKE", "make"), help="the make to run stages with")
    parser.add_argument("--log-dir", required=True, type=Path, help="one log per stage goes here")
    parser.add_argument("--table", required=True, type=Path, help="the table's text file (its JSON beside it)")
    parser.add_argument("--serial", action="append", default=[], metavar="TARGETS",
                        help="stages run first, one after the other (space-separated targets; repeatable)")
    parser.add_argument("--lane", action="append", default=[], metavar="NAME=TARGETS",
                        help="a lane: its stages run one after the other, beside the other lanes (repeatable)")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    args.log_dir.mkdir(parents=True, exist_ok=True)
    args.table.parent.mkdir(parents=True, exist_ok=True)
    table_json = args.table.with_suffix(".json")
    previous = _previous(table_json)
    runner = Runner(args.make, args.log_dir)
    serial = [Stage(t, "setup", args.log_dir) for group in args.serial for t in group.split()]
    lanes = []
    for spec in args.lane:
        name, _sep, targets = spec.partition("=")
        if not targets.strip() or not name.strip():
            print("stages: --lane %r needs a name and targets (NAME=TARGET ...)" % spec, file=sys.stderr)
            return 2
        lanes.append([Stage(t, name.strip(), args.log_dir) for t in targets.split()])
    stages = serial + [s for lane in lanes for s in lane]
    names = [s.target for s in stages]
    if len(set(names)) != len(names):
        print("stages: a target is named twice: %s" % " ".join(sorted({n for n in names if names.count(n) > 1})),
              file=sys.stderr)
        return 2
    runner.all_stages = stages

    def interrupted(signum, _frame):
        runner.say("interrupted (signal %d): stopping every stage" % signum)
        runner.stop_all()

    signal.signal(signal.SIGINT, interrupted)
    signal.signal(signal.SIGTERM, interrupted)

    runner.run_lane(serial)
    threads = [threading.Thread(target=runner.run_lane, args=(lane,)) for lane in lanes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.monotonic() - runner.start

    for stage in runner.failed:
        print("\n===== %s failed; the last %d lines of %s =====" % (stage.target, TAIL_LINES, stage.log))
        print(_tail(stage.log))
    table = render(stages, wall, previous)
    ok = not runner.failed and not runner.stopping.is_set() and all(s.result == "passed" for s in stages)
    verdict = "all %d stages passed" % len(stages) if ok else "FAILED: %s" % (
        ", ".join(s.target for s in runner.failed) or "stopped before the end")
    print("\n" + table + "\n" + verdict)
    args.table.write_text(table + "\n" + verdict + "\n", encoding="utf-8")
    rows = [{"stage": s.target, "lane": s.lane, "result": s.result, "seconds": s.seconds} for s in stages]
    rows.append({"stage": "(wall)", "lane": "", "result": "passed" if ok else "failed", "seconds": wall})
    # the "before" column compares with the last run that got to the end, not with a stopped one
    if ok or not table_json.exists():
        table_json.write_text(json.dumps({"stages": rows}, indent=1) + "\n", encoding="utf-8")
    print("stages: table in %s, logs in %s" % (args.table, args.log_dir))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
