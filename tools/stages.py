# SPDX-License-Identifier: GPL-3.0-or-later
"""Run `make test`'s stages on both cores, and print what each cost.

Each stage is a make target of the top-level Makefile, run as ``make --no-print-directory TARGET`` with its output in
``LOG_DIR/TARGET.log``. ``--serial`` stages run first, one after the other (the set-up every other stage needs). Then
``--workers`` workers (2: this machine's cores) take ``--group``s from one queue until it is empty; a group's stages run
one after the other on one worker (stages that share files go in one group), any two groups may run side by side (the
Makefile's test plan says why that is safe). The queue is ordered longest first, by the previous passing run's
seconds (a group never timed goes first), so that the last group to start is a short one.

A stage that fails stops the run: the running stages are stopped (their process groups get SIGTERM, then SIGKILL
after a grace period), nothing new starts, and the failing stage's last lines are printed. The signals do not reach
what a stage started in a session of its own (a control plane, a molecule scenario's containers), so with
``--after-stop TARGET`` each stopped stage is followed by ``make TARGET STAGE=<stage>`` (its output appended to the
stage's log, bounded), which takes that down. A stage make had nothing to
do for fails too (a target no rule builds tests nothing). Either way the run ends with a table of every stage (worker,
result, seconds, and the seconds of the previous passing run) and the wall time; the table is also written to
``--table`` and as JSON beside it (and, for a passing run, to ``--history``, outside the clone), which the next run
reads for the "before" column and the queue's order.

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
AFTER_STOP_S = 300  # the bound of one stopped stage's clean-up


class Stage:
    """One make target: its log, the worker that ran it, and how it ended."""

    def __init__(self, target: str, log_dir: Path):
        self.target = target
        self.worker = "-"
        self.log = log_dir / (target + ".log")
        self.result = "not run"
        self.seconds = None
        self.proc = None


class Runner:
    """Runs the stages and keeps the shared queue and stop flag."""

    def __init__(self, make: str, out=sys.stdout):
        self.make = make
        self.out = out
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.failed = []
        self.queue = []
        self.start = time.monotonic()
        self.all_stages = []

    def say(self, text: str) -> None:
        with self.lock:
            self.out.write("[stages %5.0f s] %s\n" % (time.monotonic() - self.start, text))
            self.out.flush()

    def _launch(self, stage: Stage, log) -> bool:
        """Start the stage's make unless the run is stopping (checked under the lock the stop takes too, so that no
        stage starts after the stop has listed the running ones)."""
        with self.lock:
            if self.stopping.is_set():
                return False
            # a process group of its own, so that a stop reaches molecule's and pytest's children too
            stage.proc = subprocess.Popen([self.make, "--no-print-directory", stage.target], stdout=log,
                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
            return True

    def run_stage(self, stage: Stage, worker: str) -> bool:
        """Run one stage to its end; return whether it passed."""
        stage.worker = worker
        began = time.monotonic()
        with open(stage.log, "wb") as log:
            if not self._launch(stage, log):
                return False
            self.say("%s: %s started (log %s)" % (worker, stage.target, stage.log))
            rc = stage.proc.wait()
        stage.seconds = time.monotonic() - began
        if rc == 0 and _did_nothing(stage):
            rc = 3
            with open(stage.log, "a", encoding="utf-8") as log:
                log.write("stages: make ran no recipe for %s: a stage that tests nothing must not pass\n" % stage.target)
        if rc == 0:
            stage.result = "passed"
            self.say("%s: %s passed in %.0f s" % (worker, stage.target, stage.seconds))
            return True
        if self.stopping.is_set():
            stage.result = "stopped"
            self.say("%s: %s stopped after %.0f s (another stage failed)" % (worker, stage.target, stage.seconds))
            return False
        stage.result = "FAILED"
        self.say("%s: %s FAILED (rc %d) after %.0f s" % (worker, stage.target, rc, stage.seconds))
        with self.lock:
            self.failed.append(stage)
        self.stop_all()
        return False

    def run_group(self, stages, worker: str) -> bool:
        for stage in stages:
            if not self.run_stage(stage, worker):
                return False
        return True

    def work(self, worker: str) -> None:
        """One worker: take the next group from the queue until it is empty or the run stops."""
        while not self.stopping.is_set():
            with self.lock:
                if not self.queue:
                    return
                group = self.queue.pop(0)
            if not self.run_group(group, worker):
                return

    def stop_all(self) -> None:
        """Stop every running stage: SIGTERM to its process group, SIGKILL after the grace period."""
        with self.lock:
            if self.stopping.is_set():
                return
            self.stopping.set()
            running = [s for s in self.all_stages if s.proc is not None and s.proc.poll() is None]
        threading.Thread(target=self._terminate, args=(running,), daemon=True).start()

    @staticmethod
    def _terminate(running) -> None:
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


def after_stop(make: str, target: str, stage: Stage, runner: Runner) -> None:
    """``make TARGET STAGE=<stage>`` for a stage that was stopped part way, its output appended to the stage's log."""
    began = time.monotonic()
    with open(stage.log, "a", encoding="utf-8") as log:
        log.write("\n===== stopped: make %s STAGE=%s =====\n" % (target, stage.target))
        log.flush()
        try:
            rc = subprocess.run([make, "--no-print-directory", target, "STAGE=" + stage.target], stdout=log,
                                stderr=subprocess.STDOUT, timeout=AFTER_STOP_S, check=False).returncode
        except subprocess.TimeoutExpired:
            rc = "timed out after %d s" % AFTER_STOP_S
    runner.say("%s: what the stopped stage left taken down by `make %s` (rc %s, %.0f s)"
               % (stage.target, target, rc, time.monotonic() - began))


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


def longest_first(groups, previous: dict):
    """The groups in the order the queue hands them out: a group with a stage never timed first, then by the previous
    run's seconds, longest first; the command line's order among equals."""
    def key(indexed):
        index, group = indexed
        known = [previous.get(stage.target) for stage in group]
        if any(seconds is None for seconds in known):
            return (0, 0.0, index)
        return (1, -sum(known), index)
    return [group for _index, group in sorted(enumerate(groups), key=key)]


def _seconds(value) -> str:
    """A duration for the table, right-aligned in 8 characters; "-" for none."""
    if value is None:
        return "%8s" % "-"
    return "%8.0f" % float(value)


def render(stages, wall: float, previous: dict) -> str:
    """Return the stage table as text."""
    width = max([len(s.target) for s in stages] + [len("(sum of stages)")])
    rule = "%s  %s  %s  %s  %s" % ("-" * width, "-" * 6, "-" * 8, "-" * 8, "-" * 8)
    lines = ["%s  %-6s  %-8s  %8s  %8s" % ("stage".ljust(width), "worker", "result", "seconds", "before"), rule]
    for stage in stages:
        lines.append("%s  %-6s  %-8s  %s  %s" % (stage.target.ljust(width), stage.worker, stage.result,
                                                 _seconds(stage.seconds), _seconds(previous.get(stage.target))))
    lines.append(rule)
    lines.append("%s  %-6s  %-8s  %s  %s" % ("(wall)".ljust(width), "", "", _seconds(wall), _seconds(previous.get("(wall)"))))
    lines.append("%s  %-6s  %-8s  %s" % ("(sum of stages)".ljust(width), "", "", _seconds(sum(s.seconds or 0 for s in stages))))
    return "\n".join(lines)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--make", default=os.environ.get("MAKE", "make"), help="the make to run stages with")
    parser.add_argument("--log-dir", required=True, type=Path, help="one log per stage goes here")
    parser.add_argument("--table", required=True, type=Path, help="the table's text file (its JSON beside it)")
    parser.add_argument("--serial", action="append", default=[], metavar="TARGETS",
                        help="stages run first, one after the other (space-separated targets; repeatable)")
    parser.add_argument("--group", action="append", default=[], metavar="TARGETS",
                        help="stages run one after the other on one worker, beside other groups (targets separated by "
                        "spaces or +; repeatable)")
    parser.add_argument("--workers", type=int, default=2, help="groups run side by side (default 2)")
    parser.add_argument("--after-stop", metavar="TARGET",
                        help="after the run, `make TARGET STAGE=<stage>` for each stage that was stopped part way")
    parser.add_argument("--history", type=Path, help="also keep the last passing run's JSON here (outside the clone: "
                        "a fresh clone then still gets the before column and the queue's order); read before --table's")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.workers < 1:
        print("stages: --workers must be 1 or more", file=sys.stderr)
        return 2
    args.log_dir.mkdir(parents=True, exist_ok=True)
    args.table.parent.mkdir(parents=True, exist_ok=True)
    table_json = args.table.with_suffix(".json")
    previous = _previous(table_json) or (_previous(args.history) if args.history else {})
    runner = Runner(args.make)
    serial = [Stage(t, args.log_dir) for spec in args.serial for t in spec.split()]
    groups = [[Stage(t, args.log_dir) for t in spec.replace("+", " ").split()] for spec in args.group]
    if any(not group for group in groups):
        print("stages: a --group names no targets", file=sys.stderr)
        return 2
    stages = serial + [s for group in groups for s in group]
    names = [s.target for s in stages]
    if len(set(names)) != len(names):
        print("stages: a target is named twice: %s" % " ".join(sorted({n for n in names if names.count(n) > 1})),
              file=sys.stderr)
        return 2
    runner.all_stages = stages
    runner.queue = longest_first(groups, previous)

    def interrupted(signum, _frame):
        runner.say("interrupted (signal %d): stopping every stage" % signum)
        runner.stop_all()

    signal.signal(signal.SIGINT, interrupted)
    signal.signal(signal.SIGTERM, interrupted)

    if runner.run_group(serial, "setup"):
        threads = [threading.Thread(target=runner.work, args=("w%d" % (n + 1),)) for n in range(args.workers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    if args.after_stop:
        for stage in stages:
            if stage.result == "stopped":
                after_stop(args.make, args.after_stop, stage, runner)
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
    rows = [{"stage": s.target, "worker": s.worker, "result": s.result, "seconds": s.seconds} for s in stages]
    rows.append({"stage": "(wall)", "worker": "", "result": "passed" if ok else "failed", "seconds": wall})
    # "before" and the queue's order come from the last run that got to the end, not from a stopped one
    if ok or not table_json.exists():
        table_json.write_text(json.dumps({"stages": rows}, indent=1) + "\n", encoding="utf-8")
    if ok and args.history:
        args.history.parent.mkdir(parents=True, exist_ok=True)
        args.history.write_text(json.dumps({"stages": rows}, indent=1) + "\n", encoding="utf-8")
    print("stages: table in %s, logs in %s" % (args.table, args.log_dir))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
