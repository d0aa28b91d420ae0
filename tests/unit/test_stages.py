# SPDX-License-Identifier: GPL-3.0-or-later
"""tools/stages.py, the runner of `make test`'s stages, on a small Makefile of the test's own: lanes run side by side,
a failing stage stops the others and is named with its log's tail, a stage make has nothing to do for does not pass,
and the table lists every stage with the previous passing run's seconds."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

STAGES = Path(__file__).resolve().parents[2] / "tools" / "stages.py"
MAKEFILE = """
.PHONY: quick slow fail stuck other-a
quick:
\t@echo quick ran
slow:
\t@sleep 1; echo slow ran
fail:
\t@echo the reason it failed; exit 7
stuck:
\t@sleep 60
other-%:
\t@echo never
"""


def run(tmp_path, *args):
    (tmp_path / "Makefile").write_text(MAKEFILE)
    command = [sys.executable, str(STAGES), "--log-dir", str(tmp_path / "logs"), "--table", str(tmp_path / "t.txt")]
    began = time.monotonic()
    proc = subprocess.run(command + list(args), cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    return proc, time.monotonic() - began


def rows(tmp_path):
    return {r["stage"]: r for r in json.loads((tmp_path / "t.json").read_text())["stages"]}


def test_lanes_run_side_by_side_and_the_table_has_every_stage(tmp_path):
    proc, _ = run(tmp_path, "--serial", "quick", "--lane", "a=slow", "--lane", "b=slow2")
    assert proc.returncode == 1  # slow2 has no rule: make fails, and the run with it
    proc, _ = run(tmp_path, "--lane", "a=slow", "--lane", "b=quick")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    table = (tmp_path / "t.txt").read_text()
    assert "all 2 stages passed" in table and "(wall)" in table
    assert (tmp_path / "logs" / "slow.log").read_text() == "slow ran\n"
    assert rows(tmp_path)["slow"]["lane"] == "a" and rows(tmp_path)["slow"]["seconds"] >= 1
    # the next run shows this one's seconds in its "before" column
    proc, _ = run(tmp_path, "--lane", "a=slow", "--lane", "b=quick")
    slow_line = [line for line in proc.stdout.splitlines() if line.startswith("slow ")][0]
    assert slow_line.split()[-1].isdigit() and int(slow_line.split()[-1]) >= 1, slow_line


def test_a_failing_stage_stops_the_other_lanes_and_is_named(tmp_path):
    proc, took = run(tmp_path, "--lane", "a=fail quick", "--lane", "b=stuck")
    assert proc.returncode == 1
    assert took < 40  # stuck (60 s) was stopped, not waited for
    assert "===== fail failed" in proc.stdout and "the reason it failed" in proc.stdout
    assert "FAILED: fail" in proc.stdout
    results = dict((s, r["result"]) for s, r in rows(tmp_path).items())
    assert results == {"fail": "FAILED", "quick": "not run", "stuck": "stopped", "(wall)": "failed"}


def test_a_stage_make_has_nothing_to_do_for_does_not_pass(tmp_path):
    # other-a is phony: make applies no pattern rule to it and says "Nothing to be done"
    proc, _ = run(tmp_path, "--lane", "a=quick other-a")
    assert proc.returncode == 1
    assert "make ran no recipe for other-a" in (tmp_path / "logs" / "other-a.log").read_text()


@pytest.mark.parametrize("lane", ["a=", "=quick"])
def test_a_lane_without_targets_is_refused(tmp_path, lane):
    proc, _ = run(tmp_path, "--lane", lane)
    assert proc.returncode == 2 and "NAME=TARGET" in proc.stderr, proc.stderr


def test_a_target_named_twice_is_refused(tmp_path):
    proc, _ = run(tmp_path, "--lane", "a=quick", "--lane", "b=quick")
    assert proc.returncode == 2 and "named twice: quick" in proc.stderr
