# SPDX-License-Identifier: GPL-3.0-or-later
"""The collection as users get it. ansible-galaxy builds a small artifact that leaves the development tree out;
installed offline (nothing fetched), it documents every module, filter and role, and every playbook parses and lists
its tasks. Also: galaxy.yml names exactly the collections the content uses, and the execution environment, the unit
test requirements and the collection agree on versions."""

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
GALAXY = yaml.safe_load((ROOT / "galaxy.yml").read_text())
FQCN = "%s.%s" % (GALAXY["namespace"], GALAXY["name"])
MAX_ARTIFACT = 2 * 1024 * 1024  # Galaxy's historical limit; the artifact is about a tenth of it
MAX_FILE = 256 * 1024  # a file this big is test data that slipped in
# Never in the artifact: local environments, caches, build output, compiled objects, and the development tree.
FORBIDDEN = re.compile(r"(^|/)(__pycache__|\.pytest_cache|\.hypothesis)(/|$)|^\.|(^|/)\.git(/|$)"
                       r"|\.(so(\.\d+)*|o|pyc|tar\.gz)$|^(tests|sandbox|molecule|tools|benchmarks|context)(/|$)"
                       r"|^(Makefile|ansible\.cfg|pytest\.ini|requirements-test\.txt|execution-environment\.yml)$"
                       r"|^changelogs/\.plugin-cache\.yaml$")
# Where the `ansible` package keeps the collections it bundles (community.general and the like).
BUNDLED = Path(sysconfig.get_paths()["purelib"])
INVENTORY = """\
gpu_nodes:
  hosts:
    gpu-1:
    gpu-2:
k8s_api:
  hosts:
    api:
      ansible_connection: local
"""


def documentation(path, name="DOCUMENTATION"):
    """A plugin's DOCUMENTATION (or EXAMPLES, RETURN) as data, read without importing it."""
    if path.suffix in (".yml", ".yaml"):
        return (yaml.safe_load(path.read_text()) or {}).get(name)
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return yaml.safe_load(ast.literal_eval(node.value))
    return None


def modules():
    """Module name to short description, from plugins/modules."""
    found = {}
    for path in sorted((ROOT / "plugins" / "modules").glob("*.py")):
        if path.name != "__init__.py":
            found[path.stem] = (documentation(path) or {}).get("short_description")
    return found


def filters():
    """Filter name to short description: the names each FilterModule returns, documented in the file of that name
    or in a YAML sidecar beside it."""
    found = {}
    folder = ROOT / "plugins" / "filter"
    for path in sorted(folder.glob("*.py")):
        if path.name == "__init__.py":
            continue
        names = []
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name == "filters":
                for ret in ast.walk(node):
                    if isinstance(ret, ast.Return) and isinstance(ret.value, ast.Dict):
                        names += [k.value for k in ret.value.keys if isinstance(k, ast.Constant)]
        for name in names or [path.stem]:
            doc = None
            for candidate in (folder / ("%s.yml" % name), folder / ("%s.yaml" % name), folder / ("%s.py" % name)):
                if candidate.is_file():
                    doc = documentation(candidate)
                    break
            found[name] = (doc or {}).get("short_description")
    return found


def roles():
    """Role name to {entry point: short description}."""
    found = {}
    for path in sorted((ROOT / "roles").iterdir()):
        spec = path / "meta" / "argument_specs.yml"
        if path.is_dir():
            specs = (yaml.safe_load(spec.read_text()) or {}).get("argument_specs", {}) if spec.is_file() else {}
            found[path.name] = dict((entry, data.get("short_description")) for entry, data in specs.items())
    return found


def playbooks():
    return sorted(p.stem for p in (ROOT / "playbooks").glob("*.y*ml"))


def pins(*paths):
    """Package name (lowercase) to its ``==`` version, over requirements files."""
    found = {}
    for path in paths:
        for line in path.read_text().splitlines():
            match = re.match(r"^\s*([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?==([^\s;#]+)", line)
            if match:
                found[match.group(1).lower()] = match.group(2)
    return found


def run(command, env=None, cwd=None, timeout=120):
    proc = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    rc, stdout, stderr = run([str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(out), str(ROOT)],
                             env=isolated_env(out))
    assert rc == 0, "ansible-galaxy collection build failed:\n%s%s" % (stdout, stderr)
    built = list(out.glob("*.tar.gz"))
    assert len(built) == 1, built
    return built[0]


def isolated_env(home, collections=None):
    """This process's environment with Ansible pointed at nothing of this checkout: an empty config, and only the
    given collection paths (the bundled collections are added explicitly, the sys.path scan is off)."""
    config = home / "ansible.cfg"
    config.write_text("[defaults]\n")
    env = dict((k, v) for k, v in os.environ.items() if not k.startswith("ANSIBLE_") and k != "PYTHONPATH")
    env.update(ANSIBLE_CONFIG=str(config), ANSIBLE_NOCOLOR="1", ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="false",
               ANSIBLE_COLLECTIONS_PATH=os.pathsep.join(str(p) for p in (collections or [home])),
               ANSIBLE_LOCAL_TEMP=str(home / "tmp"), ANSIBLE_HOME=str(home / "ansible-home"))
    return env


@pytest.fixture(scope="module")
def installed(artifact, tmp_path_factory):
    """The artifact installed the way a user without Galaxy does (offline, no dependencies fetched)."""
    home = tmp_path_factory.mktemp("installed")
    target = home / "collections"
    rc, stdout, stderr = run([str(BIN / "ansible-galaxy"), "collection", "install", "--offline", "--no-deps",
                              "-p", str(target), str(artifact)], env=isolated_env(home, [target]))
    assert rc == 0, "offline install failed:\n%s%s" % (stdout, stderr)
    path = target / "ansible_collections" / GALAXY["namespace"] / GALAXY["name"]
    assert (path / "MANIFEST.json").is_file()
    return home, path, isolated_env(home, [target, BUNDLED])


@pytest.fixture(scope="module")
def cli(installed):
    """Every ansible-doc and ansible-playbook run of the tests below, batched (each process takes a second or more):
    per plugin type one ansible-doc run as text and one as JSON, and one ansible-playbook run for all playbooks per
    mode, split into one result per item. Playbooks are run one by one only when their batch fails, to tell which."""
    home, _path, env = installed
    (home / "inventory.yml").write_text(INVENTORY)
    doc, playbook = str(BIN / "ansible-doc"), str(BIN / "ansible-playbook")
    names = {"module": sorted(modules()), "filter": sorted(filters()), "role": sorted(roles())}
    fqcns = dict((kind, ["%s.%s" % (FQCN, n) for n in items]) for kind, items in names.items())
    books = ["%s.%s" % (FQCN, n) for n in playbooks()]
    inventory = ["-i", str(home / "inventory.yml")]
    jobs = {}
    for kind in names:
        jobs[("text", kind)] = [doc, "-t", kind] + fqcns[kind]
        jobs[("json", kind)] = [doc, "--json", "-t", kind] + fqcns[kind]
    for mode in ("--syntax-check", "--list-tasks"):
        jobs[(mode, None)] = [playbook, mode] + inventory + books
    with ThreadPoolExecutor(max_workers=4) as pool:
        done = dict((key, pool.submit(run, command, env, str(home))) for key, command in jobs.items())
        done = dict((key, future.result()) for key, future in done.items())
        for mode in ("--syntax-check", "--list-tasks"):
            if done[(mode, None)][0] != 0:
                singles = dict((book, pool.submit(run, [playbook, mode] + inventory + [book], env, str(home)))
                               for book in books)
                done.update(((mode, book), future.result()) for book, future in singles.items())
    results = {}
    for kind in names:
        rc, out, err = done[("text", kind)]
        sections = re.split(r"^(?=> )", out, flags=re.M)
        data = json.loads(done[("json", kind)][1] or "{}")
        for name, fqcn in zip(names[kind], fqcns[kind]):
            section = [x for x in sections if re.match(r"> [A-Z]+:? \*?%s\*? \(" % re.escape(fqcn), x)]
            results[(kind, name)] = (rc if section else 1, section[0] if section else "", err, data.get(fqcn))
    for mode in ("--syntax-check", "--list-tasks"):
        rc, out, err = done[(mode, None)]
        pattern = re.compile(r"^playbook: (\S+)\n(?:(?!playbook: ).*\n?)*", re.M)
        sections = dict((m.group(1), m.group(0)) for m in pattern.finditer(out))
        for name, book in zip(playbooks(), books):
            if (mode, book) in done:  # the batch failed: this playbook's own run
                results[(mode, name)] = done[(mode, book)]
            else:
                found = [text for path, text in sections.items() if Path(path).stem == name]
                results[(mode, name)] = (rc, found[0] if found else out, err)
    return results


def test_artifact_is_small_and_holds_only_what_users_need(artifact):
    size = artifact.stat().st_size
    print("%s: %d bytes (%.0f KiB)" % (artifact.name, size, size / 1024.0))
    with tarfile.open(str(artifact)) as tar:
        members = dict((m.name, m) for m in tar.getmembers())
        manifest = json.load(tar.extractfile("MANIFEST.json"))
    assert size < MAX_ARTIFACT, "%s is %d bytes, over %d: check build_ignore in galaxy.yml" % (
        artifact.name, size, MAX_ARTIFACT)
    forbidden = sorted(name for name in members if FORBIDDEN.search(name))
    assert not forbidden, "development files in the artifact (add them to build_ignore in galaxy.yml): %s" % forbidden
    large = sorted("%s (%d bytes)" % (n, m.size) for n, m in members.items() if m.isfile() and m.size > MAX_FILE)
    assert not large, "files too large for the artifact: %s" % large
    wanted = ["README.md", "LICENSE", "requirements.txt", "meta/runtime.yml", "meta/execution-environment.yml",
              "changelogs/changelog.yaml", "changelogs/config.yaml"]
    wanted += ["plugins/modules/%s.py" % m for m in modules()]
    wanted += ["roles/%s/meta/argument_specs.yml" % r for r in roles()]
    wanted += [str(p.relative_to(ROOT)) for p in sorted((ROOT / "playbooks").glob("*.y*ml"))]
    wanted += [str(p.relative_to(ROOT)) for p in sorted((ROOT / "docs").glob("**/*")) if p.is_file()]
    assert not [w for w in wanted if w not in members], "missing from the artifact"
    assert manifest["collection_info"]["dependencies"] == GALAXY["dependencies"]
    assert manifest["collection_info"]["version"] == GALAXY["version"]


def test_galaxy_dependencies_are_the_collections_the_content_uses():
    """Task actions, roles, lookups and filters in roles/ and playbooks/ (comments and argument spec prose aside),
    and Python imports and doc fragments in plugins/: the collections they name besides ansible.builtin and this one
    are exactly galaxy.yml's dependencies."""
    known = set(GALAXY["dependencies"]) | set(
        "%s.%s" % (p.parent.name, p.name) for p in (BUNDLED / "ansible_collections").glob("*/*") if p.is_dir())
    name = re.compile(r"\b([a-z][a-z0-9_]*)\.([a-z][a-z0-9_]*)\.[a-z_][a-z0-9_]*")
    used = {}

    def strings(data):
        if isinstance(data, dict):
            for key, value in data.items():
                yield str(key)
                yield from strings(value)
        elif isinstance(data, list):
            for value in data:
                yield from strings(value)
        elif isinstance(data, str):
            yield data

    sources = list((ROOT / "playbooks").glob("**/*.y*ml")) + [ROOT / "meta" / "runtime.yml"]
    for sub in ("tasks", "handlers", "defaults", "vars"):
        sources += list((ROOT / "roles").glob("*/%s/**/*.y*ml" % sub))
    sources += list((ROOT / "roles").glob("*/meta/main.yml"))
    for path in sources:
        for text in strings(yaml.safe_load(path.read_text())):
            for match in name.finditer(text):
                used.setdefault("%s.%s" % match.groups(), set()).add(str(path.relative_to(ROOT)))
    for path in (ROOT / "plugins").glob("**/*.py"):
        text = path.read_text()
        found = re.findall(r"\bansible_collections\.([a-z0-9_]+)\.([a-z0-9_]+)", text)
        doc = (documentation(path) if "DOCUMENTATION" in text else None) or {}
        fragments = doc.get("extends_documentation_fragment") or [] if isinstance(doc, dict) else []
        found += [tuple(f.split(".")[:2]) for f in ([fragments] if isinstance(fragments, str) else fragments)
                  if f.count(".") >= 2]
        for ns_name in found:
            used.setdefault("%s.%s" % ns_name, set()).add(str(path.relative_to(ROOT)))
    external = dict((c, sorted(w)) for c, w in used.items() if c in known and c != FQCN)
    assert set(external) == set(GALAXY["dependencies"]), (
        "galaxy.yml dependencies %s, but the content uses %s" % (sorted(GALAXY["dependencies"]), external))


@pytest.mark.parametrize("name", sorted(modules()))
def test_module_documents_itself_from_the_installed_artifact(cli, installed, name):
    rc, out, err, data = cli[("module", name)]
    assert rc == 0 and out, "ansible-doc %s.%s failed:\n%s%s" % (FQCN, name, out, err)
    assert out.startswith("> MODULE %s.%s (%s)" % (FQCN, name, installed[1] / "plugins" / "modules" / ("%s.py" % name)))
    assert modules()[name] and data["doc"]["short_description"] == modules()[name]


@pytest.mark.parametrize("name", sorted(filters()))
def test_filter_documents_itself_from_the_installed_artifact(cli, installed, name):
    rc, out, err, data = cli[("filter", name)]
    assert rc == 0 and out, "ansible-doc -t filter %s.%s failed:\n%s%s" % (FQCN, name, out, err)
    assert out.startswith("> FILTER %s.%s (%s" % (FQCN, name, installed[1] / "plugins" / "filter"))
    assert filters()[name] and data["doc"]["short_description"] == filters()[name]


@pytest.mark.parametrize("name", sorted(roles()))
def test_role_documents_itself_from_the_installed_artifact(cli, installed, name):
    rc, out, err, data = cli[("role", name)]
    assert rc == 0 and out, "ansible-doc -t role %s.%s failed:\n%s%s" % (FQCN, name, out, err)
    assert re.match(r"> ROLE: \*?%s\*? \(%s\)" % (re.escape("%s.%s" % (FQCN, name)), re.escape(str(installed[1]))), out)
    assert roles()[name], "roles/%s has no entry point in meta/argument_specs.yml" % name
    for entry, short in roles()[name].items():
        assert short and re.search(r"ENTRY POINT: \*?%s\*? - %s" % (re.escape(entry), re.escape(" ".join(short.split()))),
                                   " ".join(out.split()))
        assert data["entry_points"][entry]["short_description"] == short


@pytest.mark.parametrize("name", playbooks())
def test_playbook_parses_and_lists_its_tasks_from_the_installed_artifact(cli, installed, name):
    source = installed[1] / "playbooks" / ("%s.yml" % name)
    for mode in ("--syntax-check", "--list-tasks"):
        rc, out, err = cli[(mode, name)]
        assert rc == 0, "ansible-playbook %s.%s %s failed:\n%s%s" % (FQCN, name, mode, out, err)
        assert "playbook: %s" % source in out
    plays = [p["name"] for p in yaml.safe_load((ROOT / "playbooks" / ("%s.yml" % name)).read_text())
             if "hosts" in p and "name" in p]
    listing = cli[("--list-tasks", name)][1]
    assert "play #1 (" in listing and all("): %s" % play in listing for play in plays)


def test_execution_environment_builds_a_context_with_the_collection(artifact, tmp_path):
    """ansible-builder's own schema accepts execution-environment.yml, and the build context it writes installs the
    tested ansible-core, the collection's Python requirements and galaxy.yml's dependencies, plus the artifact."""
    for name in ("execution-environment.yml", "requirements.txt"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copy(artifact, tmp_path / artifact.name)
    rc, out, err = run([str(BIN / "ansible-builder"), "create", "--file", str(tmp_path / "execution-environment.yml"),
                        "--context", str(tmp_path / "context")], cwd=str(tmp_path))
    assert rc == 0, "ansible-builder create failed:\n%s%s" % (out, err)
    context = tmp_path / "context"
    build_file = next(p for p in (context / "Containerfile", context / "Dockerfile") if p.is_file())
    tested = pins(ROOT / "requirements-test.txt")
    assert "ansible-core==%s" % tested["ansible-core"] in build_file.read_text()
    assert (context / "_build" / "requirements.txt").read_text() == (ROOT / "requirements.txt").read_text()
    galaxy = yaml.safe_load((context / "_build" / "requirements.yml").read_text())
    assert dict((c["name"], c.get("version", "*")) for c in galaxy["collections"]) == GALAXY["dependencies"]
    assert (context / "_build" / "kubegpu" / artifact.name).is_file()
    assert "collection install --offline --no-deps kubegpu/kubegpu-cluster-*.tar.gz" in build_file.read_text()


def test_collection_tells_ansible_builder_its_python_requirements(artifact):
    meta = yaml.safe_load((ROOT / "meta" / "execution-environment.yml").read_text())
    python = meta["dependencies"]["python"]
    with tarfile.open(str(artifact)) as tar:
        assert python in tar.getnames(), "meta/execution-environment.yml names %s, which is not in the artifact" % python
    assert pins(ROOT / python) == pins(ROOT / "requirements.txt")


def test_unit_test_requirements_pin_the_tested_versions():
    """tests/unit/requirements.txt (ansible-test units) pins what requirements*.txt pin, at the same versions."""
    units = pins(ROOT / "tests" / "unit" / "requirements.txt")
    tested = pins(ROOT / "requirements.txt", ROOT / "requirements-test.txt")
    differ = dict((n, (v, tested[n])) for n, v in units.items() if n in tested and tested[n] != v)
    assert not differ, "tests/unit/requirements.txt differs from requirements*.txt: %s" % differ
    assert set(pins(ROOT / "requirements.txt")) <= set(units), "a module requirement is missing for the unit tests"
