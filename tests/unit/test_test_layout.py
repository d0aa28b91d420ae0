# SPDX-License-Identifier: GPL-3.0-or-later
"""The test tree collects as one pytest session (pytest.ini: rootdir-relative imports, no packages): two test files of
one name, or a test importing a conftest by name while several conftest.py exist, break the collection of the whole
run (pytest imports the first file of a name and refuses the second), which only a run of every folder shows."""

import ast
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_files_share_a_name():
    found = defaultdict(list)
    for path in sorted(TESTS.rglob("test_*.py")):
        found[path.name].append(str(path.relative_to(TESTS)))
    assert dict((name, paths) for name, paths in found.items() if len(paths) > 1) == {}


def test_no_test_imports_a_conftest_by_name():
    offenders = []
    for path in sorted(TESTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            offenders += ["%s imports %s" % (path.relative_to(TESTS), n) for n in names if n.split(".")[0] == "conftest"]
    assert offenders == [], "import from a module (sandbox.k8s.paths, tests/*.py helpers) instead: %s" % offenders
