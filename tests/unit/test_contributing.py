# SPDX-License-Identifier: GPL-3.0-or-later
"""CONTRIBUTING.md's picture of the layers names every file and package under plugins/module_utils/, and only those:
a new file left out of it, or one it names that is gone, fails here with its path.

The picture is read as it is written: below the ``plugins/module_utils/`` line of the first code block, a line indented
by two spaces starts with a top-level file or package (``_errors.py``, ``_k8s/``), one indented by four with the files
of the package above it (``docker.py, containerd.py, crio.py``; a subpackage's as ``dra/``, ``dra/host.py``); what follows the names (two spaces or more) is the
description."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAMES = re.compile(r"^(?P<indent> {2}| {4})(?P<names>[\w.]+(?:/[\w.]+)*/?(?:, [\w.]+(?:/[\w.]+)*/?)*)(?: {2,}|$)")


def mapped(text):
    """The paths the picture names, relative to plugins/module_utils (``_k8s/``, ``_k8s/client.py``, ``_errors.py``)."""
    block = text.split("```", 2)[1]
    lines = block.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("plugins/module_utils/"))
    found, package = [], None
    for line in lines[start + 1:]:
        match = NAMES.match(line)
        if not match:
            continue
        for name in match.group("names").split(", "):
            if match.group("indent") == "  ":
                package = name if name.endswith("/") else None
                found.append(name)
            elif package is not None:
                found.append(package + name)
    return found


def on_disk(root):
    """The files and packages under a module_utils folder, as :func:`mapped` names them (no ``__init__.py``)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if path.name == "__init__.py" or "__pycache__" in relative.parts:
            continue
        found.append(relative.as_posix())
    found += sorted(set(p.parent.relative_to(root).as_posix() + "/" for p in root.rglob("*/__init__.py")))
    return found


def differences(text, root):
    """What the picture misses and what it names that is not there, one line each."""
    named, there = mapped(text), on_disk(root)
    lines = ["plugins/module_utils/%s: not in CONTRIBUTING.md's picture of the layers" % p
             for p in there if p not in named]
    lines += ["CONTRIBUTING.md names plugins/module_utils/%s, which is not there" % p for p in named if p not in there]
    lines += ["CONTRIBUTING.md names plugins/module_utils/%s twice" % p for p in sorted(set(named)) if named.count(p) > 1]
    return lines


def test_the_picture_names_every_file_and_package_of_module_utils():
    assert len(mapped((ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8"))) > 60  # the reader found the picture
    found = differences((ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8"), ROOT / "plugins" / "module_utils")
    assert found == [], "\n".join(found)


def test_a_file_left_out_or_gone_is_named(tmp_path):
    root = tmp_path / "module_utils"
    for name in ("_errors.py", "_k8s/__init__.py", "_k8s/client.py", "_k8s/proof.py", "_acme/__init__.py",
                 "_acme/constants.py"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("")
    text = ("# x\n\n```\nroles/\nplugins/module_utils/\n  _errors.py        errors\n  _k8s/             the Kubernetes side\n"
            "    client.py         connect\n    retry.py          the retry policy\n```\n")
    assert differences(text, root) == [
        "plugins/module_utils/_acme/constants.py: not in CONTRIBUTING.md's picture of the layers",
        "plugins/module_utils/_k8s/proof.py: not in CONTRIBUTING.md's picture of the layers",
        "plugins/module_utils/_acme/: not in CONTRIBUTING.md's picture of the layers",
        "CONTRIBUTING.md names plugins/module_utils/_k8s/retry.py, which is not there"]
