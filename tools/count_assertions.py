# SPDX-License-Identifier: GPL-3.0-or-later
"""Count the suite's assertions, so that folding one test into another can be shown not to lose any.

What counts as one assertion:

- Python (every ``*.py`` under ``tests/`` and ``molecule/``): each ``assert`` statement, and each ``pytest.raises``
  or ``pytest.fail`` call (an expected error is asserted too). Counted in the source, once per statement: a
  parametrized test counts once, however many cases it runs.
- YAML (every ``*.yml`` under ``molecule/`` and ``tests/``): each condition of an ``ansible.builtin.assert`` task's
  ``that`` (a list counts its items, a string counts one), and each ``ansible.builtin.fail`` task (it asserts that
  its ``when`` is false). ``assert`` and ``fail`` without the collection prefix count the same.

Only the standard library and PyYAML (the venv has it; without it the YAML part is refused, not skipped).

    python3 tools/count_assertions.py            # a table by area and the totals
    python3 tools/count_assertions.py --json     # the same as JSON
    python3 tools/count_assertions.py --root DIR # another checkout (an older commit's worktree, say)
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY_DIRS = ("tests", "molecule")
YAML_DIRS = ("molecule", "tests")
ASSERT_MODULES = {"assert", "ansible.builtin.assert", "ansible.legacy.assert"}
FAIL_MODULES = {"fail", "ansible.builtin.fail", "ansible.legacy.fail"}
PYTEST_CALLS = {"raises", "fail"}


def python_assertions(source: str) -> int:
    """Return the number of assert statements and pytest.raises/pytest.fail calls in one Python source."""
    count = 0
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assert):
            count += 1
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in PYTEST_CALLS \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "pytest":
            count += 1
    return count


def _tasks(node):
    """Yield every mapping in a YAML document that looks like a task (walks blocks, plays and nested lists)."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _tasks(value)
    elif isinstance(node, list):
        for item in node:
            yield from _tasks(item)


def yaml_assertions(documents) -> int:
    """Return the number of assert conditions and fail tasks in the parsed YAML documents."""
    count = 0
    for doc in documents:
        for task in _tasks(doc):
            for key in ASSERT_MODULES & task.keys():
                args = task[key]
                that = args.get("that") if isinstance(args, dict) else None
                count += len(that) if isinstance(that, list) else (1 if that else 0)
            if FAIL_MODULES & task.keys():
                count += 1
    return count


def _area(path: Path, root: Path) -> str:
    parts = path.relative_to(root).parts
    if parts[0] == "molecule":
        return "molecule/" + parts[1]
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0]


def count(root: Path = ROOT) -> dict:
    """Return {area: {"python": n, "yaml": n}} over the test trees."""
    try:
        import yaml  # pylint: disable=import-outside-toplevel
    except ImportError:
        sys.exit("count_assertions: PyYAML is needed to read the YAML tests (run it with the venv's python)")
    areas: dict = {}
    for top in sorted(set(PY_DIRS) | set(YAML_DIRS)):
        for path in sorted((root / top).rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            if path.suffix == ".py" and top in PY_DIRS:
                kind, n = "python", python_assertions(path.read_text(encoding="utf-8"))
            elif path.suffix in (".yml", ".yaml") and top in YAML_DIRS:
                kind, n = "yaml", yaml_assertions(yaml.safe_load_all(path.read_text(encoding="utf-8")))
            else:
                continue
            entry = areas.setdefault(_area(path, root), {"python": 0, "yaml": 0})
            entry[kind] += n
    return areas


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to count (default: this one)")
    args = parser.parse_args(argv)
    areas = count(args.root.resolve())
    total = {"python": sum(a["python"] for a in areas.values()), "yaml": sum(a["yaml"] for a in areas.values())}
    if args.json:
        print(json.dumps({"areas": areas, "total": total, "all": total["python"] + total["yaml"]}, indent=2, sort_keys=True))
        return 0
    width = max(len(a) for a in areas)
    for area in sorted(areas):
        print("%s  %6d python  %5d yaml" % (area.ljust(width), int(areas[area]["python"]), int(areas[area]["yaml"])))
    print("%s  %6d python  %5d yaml  = %d" % ("total".ljust(width), int(total["python"]), int(total["yaml"]),
                                              int(total["python"] + total["yaml"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
