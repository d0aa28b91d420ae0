# SPDX-License-Identifier: GPL-3.0-or-later
"""The layers of plugins/module_utils, read from the imports (``ast``), so that a layer that reaches where it must not
fails here rather than in a review:

- ``_k8s/`` (the Kubernetes client and what applies to any vendor) imports no vendor package and not ``_runtime/``;
- ``_runtime/`` (container runtime adapters) imports neither ``_k8s/`` nor a vendor package;
- a vendor package (``_nvidia/``, later ``_amd/``, ``_intel/``) never imports the ``kubernetes`` library, and its pure
  parts (all but the files that run against a cluster, :data:`LIVE`) do not even reach it through ``_k8s``;
- only ``_k8s/client.py`` imports ``kubernetes``; the product (plugins/, roles/, playbooks/) never uses ``sandbox/``.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "ansible_collections.kubegpu.cluster.plugins.module_utils."
CORE_PACKAGES = ("_k8s", "_runtime")  # the axes that are not vendors; every other package under module_utils is one
LIVE = {"deployment", "migration", "proof", "fleet"}  # vendor files that talk to a cluster (through a client they are given or make)


def imports_of(path):
    """Every module a Python file imports, absolute names (``from x import y`` gives ``x`` and ``x.y``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found.update("%s.%s" % (node.module, alias.name) for alias in node.names)
    return found


def module_utils_graph(root):
    """``{name: (path, imports)}`` for every file under ``root`` (a module_utils folder); names relative to it
    (``_k8s.client``, ``_errors``)."""
    graph = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts:
            graph[".".join(parts)] = (path, imports_of(path))
    return graph


def ours(graph, imported):
    """The module of ours an import names (the longest known prefix), or None."""
    if not imported.startswith(PREFIX):
        return None
    name = imported[len(PREFIX):]
    while name and name not in graph:
        name = name.rpartition(".")[0]
    return name or None


def reach(graph, start):
    """Every module of ours and every outside top-level package ``start`` imports, directly or through ours."""
    seen, outside, todo = set(), set(), [start]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for imported in graph[name][1]:
            target = ours(graph, imported)
            if target is not None:
                todo.append(target)
            elif not imported.startswith("ansible_collections."):
                outside.add(imported.split(".")[0])
    return seen - {start}, outside


def violations(root):
    """What breaks the layering of the module_utils folder ``root``, one line each."""
    graph = module_utils_graph(root)
    vendors = sorted(set(n.split(".")[0] for n in graph if "." in n and n.split(".")[0] not in CORE_PACKAGES))
    problems = []

    def package(name):
        return name.split(".")[0]

    for name, (path, imported) in sorted(graph.items()):
        where = path.relative_to(root)
        direct = set(filter(None, (ours(graph, i) for i in imported)))
        touches = sorted(set(package(d) for d in direct) - {package(name)})
        if package(name) == "_k8s":
            problems += ["%s imports %s (the Kubernetes layer knows no vendor and no runtime)" % (where, t)
                         for t in touches if t in vendors or t == "_runtime"]
        if package(name) == "_runtime":
            problems += ["%s imports %s (runtime adapters know no vendor and no Kubernetes)" % (where, t)
                         for t in touches if t in vendors or t == "_k8s"]
        if any(i == "kubernetes" or i.startswith("kubernetes.") for i in imported) and name != "_k8s.client":
            problems.append("%s imports the kubernetes library (only _k8s/client.py may)" % where)
        if package(name) in vendors and name.split(".")[-1] not in LIVE:
            reached, outside = reach(graph, name)
            if "kubernetes" in outside:
                problems.append("%s is a pure part of a vendor package but reaches the kubernetes library through %s"
                                % (where, ", ".join(sorted(r for r in reached if r.startswith("_k8s.")))))
    return problems


def test_module_utils_layers():
    assert violations(ROOT / "plugins" / "module_utils") == []


def test_the_product_never_uses_the_sandbox():
    found = []
    for path in sorted((ROOT / "plugins").rglob("*.py")):
        found += ["%s imports %s" % (path.relative_to(ROOT), i) for i in imports_of(path)
                  if i.split(".")[0] in ("sandbox", "tests")]
    for folder in ("roles", "playbooks"):
        for path in sorted((ROOT / folder).rglob("*.yml")):
            if "sandbox/" in path.read_text(encoding="utf-8"):
                found.append("%s names a path under sandbox/" % path.relative_to(ROOT))
    assert found == []


def _tree(tmp_path, files):
    root = tmp_path / "module_utils"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.mark.parametrize("files, words", [
    ({"_k8s/__init__.py": "", "_k8s/apply.py": "from %s_acme import constants\n" % PREFIX,
      "_acme/__init__.py": "", "_acme/constants.py": ""}, "_k8s/apply.py imports _acme"),
    ({"_runtime/__init__.py": "", "_runtime/docker.py": "from %s_k8s import client\n" % PREFIX,
      "_k8s/__init__.py": "", "_k8s/client.py": "import kubernetes\n"}, "_runtime/docker.py imports _k8s"),
    ({"_acme/__init__.py": "", "_acme/labels.py": "from kubernetes import client\n"}, "only _k8s/client.py may"),
    ({"_acme/__init__.py": "", "_acme/labels.py": "from %s_k8s.objectset import x\n" % PREFIX,
      "_k8s/__init__.py": "", "_k8s/objectset.py": "from %s_k8s import client\n" % PREFIX,
      "_k8s/client.py": "import kubernetes\n"}, "_acme/labels.py is a pure part of a vendor package"),
])
def test_the_guard_finds_each_kind_of_violation(tmp_path, files, words):
    problems = violations(_tree(tmp_path, files))
    assert any(words in p for p in problems), problems


def test_the_guard_accepts_what_the_layers_allow(tmp_path):
    root = _tree(tmp_path, {
        "_errors.py": "", "_k8s/__init__.py": "", "_k8s/client.py": "import kubernetes\nfrom %s_errors import E\n" % PREFIX,
        "_acme/__init__.py": "", "_acme/deployment.py": "from %s_k8s import client\n" % PREFIX,
        "_acme/labels.py": "from %s_errors import E\n" % PREFIX,
    })
    assert violations(root) == []
