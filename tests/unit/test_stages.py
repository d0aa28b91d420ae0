# SPDX-License-Identifier: GPL-3.0-or-later
"""tools/stages.py, the runner of `make test`'s stages, on a small Makefile of the test's own: groups run side by side
on the workers, longest first by the previous run's seconds, a failing stage stops the others and is named with its
log's tail, a stage make has nothing to do for does not pass, and the table lists every stage with the previous
passing run's seconds."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

STAGES = Path(__file__).resolve().parents[2] / "tools" / "stages.py"
MAKEFILE = """
.PHONY: quick slow fail stuck other-a after-stop
quick:
\t@echo quick ran
slow:
\t@sleep 1; echo slow ran
fail:
\t@for i in $$(seq 300); do [ -f stuck.started ] && break; sleep 0.1; done; echo the reason it failed; exit 7
stuck:
\t@touch stuck.started; sleep 60
other-%:
\t@echo never
after-stop:
\t@echo taking down what $(STAGE) left; touch $(STAGE).cleaned
"""


def run(tmp_path, *args):
    (tmp_path / "Makefile").write_text(MAKEFILE)
    command = [sys.executable, str(STAGES), "--log-dir", str(tmp_path / "logs"), "--table", str(tmp_path / "t.txt")]
    began = time.monotonic()
    proc = subprocess.run(command + list(args), cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    return proc, time.monotonic() - began


def rows(tmp_path):
    return {r["stage"]: r for r in json.loads((tmp_path / "t.json").read_text())["stages"]}


def test_a_stage_without_a_rule_fails_the_run(tmp_path):
    proc, _took = run(tmp_path, "--serial", "quick", "--group", "slow", "--group", "no-such-target")
    assert proc.returncode == 1
    assert "FAILED: no-such-target" in proc.stdout and "No rule to make target" in proc.stdout


def test_two_workers_and_the_before_column(tmp_path):
    proc, _took = run(tmp_path, "--group", "slow", "--group", "quick")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    table = (tmp_path / "t.txt").read_text()
    assert "all 2 stages passed" in table and "(wall)" in table
    assert (tmp_path / "logs" / "slow.log").read_text() == "slow ran\n"
    assert {rows(tmp_path)["slow"]["worker"], rows(tmp_path)["quick"]["worker"]} == {"w1", "w2"}  # side by side
    assert rows(tmp_path)["slow"]["seconds"] >= 1
    # the next run shows this one's seconds in its "before" column, and hands out the longest group first
    proc, _took = run(tmp_path, "--group", "quick", "--group", "slow", "--workers", "1")
    slow_line = [line for line in proc.stdout.splitlines() if line.startswith("slow ")][0]
    assert slow_line.split()[-1].isdigit() and int(slow_line.split()[-1]) >= 1, slow_line
    started = [line.split()[4] for line in proc.stdout.splitlines() if line.endswith(".log)")]
    assert started == ["slow", "quick"], proc.stdout


def test_a_failing_stage_stops_the_other_lanes_and_is_named(tmp_path):
    # fail waits (bounded) until stuck runs, so that stuck is always there to be stopped
    proc, took = run(tmp_path, "--group", "fail quick", "--group", "stuck")
    assert proc.returncode == 1
    assert took < 40  # stuck (60 s) was stopped, not waited for
    assert "===== fail failed" in proc.stdout and "the reason it failed" in proc.stdout
    assert "FAILED: fail" in proc.stdout
    results = dict((s, r["result"]) for s, r in rows(tmp_path).items())
    assert results == {"fail": "FAILED", "quick": "not run", "stuck": "stopped", "(wall)": "failed"}


def test_what_a_stopped_stage_left_is_taken_down_after_the_run(tmp_path):
    # a stopped stage's control planes and containers run in sessions of their own, which SIGTERM does not reach
    proc, took = run(tmp_path, "--group", "fail quick", "--group", "stuck", "--after-stop", "after-stop")
    assert proc.returncode == 1 and took < 40
    assert "stuck: what the stopped stage left taken down by `make after-stop` (rc 0" in proc.stdout, proc.stdout
    assert (tmp_path / "stuck.cleaned").exists() and not (tmp_path / "fail.cleaned").exists()  # stopped ones only
    assert "taking down what stuck left" in (tmp_path / "logs" / "stuck.log").read_text()


def test_a_stage_make_has_nothing_to_do_for_does_not_pass(tmp_path):
    # other-a is phony: make applies no pattern rule to it and says "Nothing to be done"
    proc, _took = run(tmp_path, "--group", "quick other-a")
    assert proc.returncode == 1
    assert "make ran no recipe for other-a" in (tmp_path / "logs" / "other-a.log").read_text()


@pytest.mark.parametrize("args, message", [(["--group", " "], "names no targets"), (["--workers", "0"], "1 or more")])
def test_bad_arguments_are_refused(tmp_path, args, message):
    proc, _took = run(tmp_path, *args)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


def test_a_target_named_twice_is_refused(tmp_path):
    proc, _took = run(tmp_path, "--group", "quick", "--group", "quick")
    assert proc.returncode == 2 and "named twice: quick" in proc.stderr


def test_make_test_runs_every_scenario_and_pytest_stage_once():
    """`make test`'s queue (the Makefile's TEST_GROUPS, in its order for a clone with no timing yet) names every
    molecule scenario and every pytest stage, each once, besides the static checks."""
    root = STAGES.parents[1]
    proc = subprocess.run(["make", "-n", "--no-print-directory", "test"], cwd=root, capture_output=True, text=True,
                          timeout=60, check=True)
    [line] = [line for line in proc.stdout.splitlines() if "stages.py" in line]
    words = line.split()
    groups = [words[i + 1] for i, word in enumerate(words) if word == "--group"]
    stages = [stage for group in groups for stage in group.split("+")]
    scenarios = sorted(p.parent.name for p in (root / "molecule").glob("*/molecule.yml"))
    wanted = ["molecule-" + name for name in scenarios]
    wanted += ["pytest-k8s-a", "pytest-k8s-b", "pytest-integration", "pytest-sandbox", "pytest-unit", "sanity", "units", "lint", "changelog", "faults-smoke"]
    wanted += ["pytest-ansible-" + p.stem for p in (root / "tests" / "ansible-core").glob("*.txt")]
    assert sorted(stages) == sorted(wanted)
    assert "sanity+units" in groups  # they share .build/sanity: never side by side
    assert words[words.index("--serial") + 1] == "test-setup"
