# SPDX-License-Identifier: GPL-3.0-or-later
"""The ansible-core versions the collection claims are the ones `make test` runs: meta/runtime.yml's requires_ansible
says the oldest, requirements-test.txt pins the newest (the venv's), and every minor between them has a
tests/ansible-core/<minor>.txt that the Makefile's pytest-ansible-<minor> stage installs and tests."""

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
PIN = re.compile(r"^ansible-core==(\d+)\.(\d+)\.(\d+)$", re.MULTILINE)


def _minor_files():
    found = {}
    for path in sorted((ROOT / "tests" / "ansible-core").glob("*.txt")):
        pins = PIN.findall(path.read_text(encoding="utf-8"))
        assert len(pins) == 1, "%s: pin ansible-core exactly once (ansible-core==X.Y.Z)" % path.relative_to(ROOT)
        major, minor, _patch = pins[0]
        assert path.stem == "%s.%s" % (major, minor), "%s pins ansible-core %s.%s" % (path.relative_to(ROOT), major, minor)
        assert re.search(r"^ansible==\d+\.\d+\.\d+$", path.read_text(encoding="utf-8"), re.MULTILINE), \
            "%s: pin the ansible package released for that ansible-core (its collections)" % path.relative_to(ROOT)
        found[(int(major), int(minor))] = path
    return found


def test_every_claimed_minor_is_tested():
    runtime = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text(encoding="utf-8"))
    lowest = re.fullmatch(r">=(\d+)\.(\d+)\.\d+", runtime["requires_ansible"])
    assert lowest, "meta/runtime.yml: requires_ansible is %r; this test reads '>=X.Y.Z'" % runtime["requires_ansible"]
    [newest] = PIN.findall((ROOT / "requirements-test.txt").read_text(encoding="utf-8"))
    low, high = (int(lowest.group(1)), int(lowest.group(2))), (int(newest[0]), int(newest[1]))
    files = _minor_files()
    claimed = [(low[0], minor) for minor in range(low[1], high[1] + 1)]
    missing = [c for c in claimed if c != high and c not in files]
    assert missing == [], "claimed by meta/runtime.yml but not tested: %s (add tests/ansible-core/<minor>.txt)" % missing
    unclaimed = [c for c in files if c not in claimed or c == high]
    assert unclaimed == [], "tests/ansible-core has %s, outside %s..%s or the venv's own" % (unclaimed, low, high)


def test_the_makefile_runs_a_stage_per_version():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "ANSIBLE_CORE_MINORS := $(patsubst tests/ansible-core/%.txt,%,$(wildcard tests/ansible-core/*.txt))" in makefile
    assert "$(TEST_ANSIBLE_CORE)" in makefile.split("TEST_GROUPS :=")[1].split("\n\n")[0], \
        "make test's queue (TEST_GROUPS) must run the pytest-ansible-<minor> stages"
    # and the stage names come out of the files (make test's command line: tests/unit/test_stages.py)
    assert "TEST_ANSIBLE_CORE := $(addprefix pytest-ansible-,$(ANSIBLE_CORE_MINORS))" in makefile
