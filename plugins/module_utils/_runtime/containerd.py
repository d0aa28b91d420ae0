# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""containerd's config.toml: register the NVIDIA runtime with the CRI plugin, in place or through a drop-in.

Text in, text out, through :class:`.toml.Document`: only the lines that change are touched, a value already
right is not rewritten, and every edit is checked by parsing the result back.

Config versions (what containerd itself reads):
  - no ``version`` key in a non-empty file: version 1 (refused: this module does not write v1);
  - ``version = 2``: containerd 1.x, CRI plugin ``plugins."io.containerd.grpc.v1.cri"``;
  - ``version = 3``: containerd 2.x, CRI runtime plugin ``plugins."io.containerd.cri.v1.runtime"``.

Imports: containerd loads the main file, then each ``imports`` entry in order; an entry containing ``*`` is expanded
with Go's ``filepath.Glob`` (relative to the working directory), any other relative entry is relative to the file
that imports it, a path already loaded is not loaded again, and a missing file is an error. Before containerd 2.1 a
plugin table from an import replaces the whole table loaded before it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import os
import re

from collections.abc import Mapping

from ansible_collections.kubegpu.cluster.plugins.module_utils import _files
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import FileError, ValidationError
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.base import Change, Runtime, asked, candidate_of, report
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.common import (
    dotted, restore_default, set_default, toml_data, type_name, without_empty_tables,
)
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.constants import RUNC_V2
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.toml import Document, PlainTree, check_tables, render_tree

# The CRI runtime plugin's table by config version (containerd's cmd/containerd/server/config/config.go: version 3
# has only plugin changes to version 2, the CRI plugin split among them; version 4 moves server properties such as
# grpc and ttrpc into plugins and leaves the CRI plugins as they are).
CRI_PLUGIN = {2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime", 4: "io.containerd.cri.v1.runtime"}
SUPPORTED_VERSIONS = (2, 3, 4)
_MIGRATE = ("containerd reads a config without 'version' as version 1, which this module does not write; "
            "migrate it first: 'containerd config migrate' (containerd 2.x) writes its current version, or rewrite it "
            "from 'containerd config default' (containerd 1.x), which writes version 2")


# --- Which config version ----------------------------------------------------------------------------------------

def file_version(text, path):
    """The ``version`` of an existing config, or ``None`` when the file is missing or holds no settings."""
    data = toml_data(text, path)
    if not data:
        return None
    if "version" not in data:
        raise FileError(_MIGRATE, path=path, field="version")
    return check_version(data["version"], path)


def check_version(version, path, field="version"):
    """``version`` as an int, when this module can write it."""
    if isinstance(version, bool) or not isinstance(version, int):
        raise FileError("must be an integer (2, 3 or 4), not %s %r" % (type_name(version), version), path=path, field=field)
    if version == 1:
        raise FileError(_MIGRATE.replace("a config without 'version'", "'version = 1'"), path=path, field=field)
    if version not in SUPPORTED_VERSIONS:
        raise FileError("unsupported config version %d: this module writes 2 (containerd 1.x), 3 (containerd 2.0 to "
                        "2.2) and 4 (containerd 2.3 and later)" % version, path=path, field=field)
    return version


def binary_version(version_output):
    """containerd's ``(major, minor)`` from ``containerd --version`` output, or ``None`` when it cannot be read.

    ``containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3`` gives ``(1, 6)``;
    ``containerd github.com/containerd/containerd/v2 2.4.2+unknown`` gives ``(2, 4)``.
    """
    for word in (version_output or "").split()[1:]:
        match = re.match(r"^v?(\d+)\.(\d+)", word)
        if match:
            return int(match.group(1)), int(match.group(2))
    return None


def binary_major(version_output):
    """containerd's major version from ``containerd --version`` output, or ``None``."""
    found = binary_version(version_output)
    return found[0] if found else None


def readable_version(binary):
    """The newest config version a containerd of version ``binary`` (``(major, minor)``) reads and writes by default:
    1.x reads 2, 2.0 to 2.2 write 3, 2.3 and later write 4 (``containerd config default``)."""
    major, minor = binary
    if major < 2:
        return 2
    return 3 if (major, minor) < (2, 3) else 4


def resolve_version(requested, text, path, ask_binary):
    """The config version to write.

    ``requested`` is ``auto``, ``2``, ``3`` or ``4``. ``auto`` takes the file's ``version``; for a missing or empty
    file it asks the installed containerd (``ask_binary()`` returns its ``(major, minor)``, a major alone, or
    ``None``) for the version it writes itself (:func:`readable_version`); no binary means 2, what nvidia-ctk
    assumes. An explicit version must agree with the file's.
    """
    found = file_version(text, path)
    if requested not in (None, "auto"):
        wanted = check_version(int(requested), path, field="config_version")
        if found is not None and found != wanted:
            raise FileError("has version = %d but config_version=%d was requested; migrate the file first "
                            "('containerd config migrate') or leave config_version=auto" % (found, wanted),
                            path=path, field="version")
        return wanted
    if found is not None:
        return found
    binary = ask_binary()
    if binary is None:
        return 2
    return readable_version(binary if isinstance(binary, tuple) else (binary, 0))


# --- The edits, on a Document (text) or a PlainTree (data) alike ---------------------------------------------------

def _table(tree, path, where):
    """The table at ``path`` as plain data (``{}`` when missing); a value that is not a table is an error."""
    check_tables(tree.data, path + ("",), where)
    return tree.get(path, {})


def _template_runtime(containerd, runtimes, ours, previous=None):
    """(name, table) of the runtime ours copies: the default runtime, then runc, then crun, as nvidia-ctk picks its
    low-level runtime (GetLowLevelRuntimes in NVIDIA/nvidia-container-toolkit pkg/config/engine: nvidia* runtimes are
    never the template), and runc shims only (another shim's options mean nothing to runc's). ``previous``: the user's
    default before ours (the engine's marker), which counts once ours is the default, so that the template stays the
    same from one run to the next."""
    defaults = (containerd.get("default_runtime_name"), previous)
    candidates = [d for d in defaults if isinstance(d, str) and d] + ["runc", "crun"]
    for name in candidates:
        runtime = runtimes.get(name)
        if (name != ours and not name.startswith("nvidia") and isinstance(runtime, Mapping)
                and runtime.get("runtime_type", RUNC_V2) == RUNC_V2):
            return name, runtime
    return None, None


def _new_runtime(template, settings):
    """Plain data for our runtime table: the template's settings, runc's shim, our binary."""
    data = {"runtime_type": RUNC_V2}
    source = {}
    if template is not None:
        data = dict((k, copy.deepcopy(v)) for k, v in template.items() if k != "options")
        data["runtime_type"] = RUNC_V2
        source = template.get("options") if isinstance(template.get("options"), Mapping) else {}
    if "BinaryName" in source:
        data["options"] = dict((k, settings.path if k == "BinaryName" else copy.deepcopy(v)) for k, v in source.items())
    else:
        data["options"] = dict([("BinaryName", settings.path)] + [(k, copy.deepcopy(v)) for k, v in source.items()])
    return data


def _present(tree, version, settings, path):
    cri = ("plugins", CRI_PLUGIN[version])
    runtimes_path = cri + ("containerd", "runtimes")
    containerd = _table(tree, cri + ("containerd",), path)
    runtimes = _table(tree, runtimes_path, path)
    ours = runtimes_path + (settings.name,)
    name, template = _template_runtime(containerd, runtimes, settings.name, settings.previous_default)
    if settings.name in runtimes:
        # refreshed from the template, key by key (SystemdCgroup follows runc's); keys only ours has stay
        _table(tree, ours, path)
        _table(tree, ours + ("options",), path)
        for key, value in _new_runtime(template, settings).items():
            if key == "options":
                for option, item in value.items():
                    tree.set(ours + ("options", option), item)
            else:
                tree.set(ours + (key,), value)
    else:
        tree.set(ours, _new_runtime(template, settings), after=runtimes_path + (name,) if name else None)
    set_default(tree, cri + ("containerd", "default_runtime_name"), settings)
    # containerd 2.x (config version 3) runs with CDI on by default, and 2.2 and later no longer have the option, so a
    # version 3 file only gets enable_cdi corrected where the user turned it off; version 2 (containerd 1.7) needs it.
    if settings.cdi and (version == 2 or tree.get(cri + ("enable_cdi",)) is not None):
        tree.set(cri + ("enable_cdi",), True)


def _absent(tree, version, settings, path):
    cri = ("plugins", CRI_PLUGIN[version])
    if settings.name in _table(tree, cri + ("containerd", "runtimes"), path):
        tree.delete(cri + ("containerd", "runtimes", settings.name))
    restore_default(tree, cri + ("containerd", "default_runtime_name"), settings)
    if settings.cdi_added and tree.get(cri + ("enable_cdi",)) is True:
        if settings.cdi_before is None:
            tree.delete(cri + ("enable_cdi",))
        else:
            tree.set(cri + ("enable_cdi",), settings.cdi_before)


def _with_version(text, version):
    """A text holding no settings gets ``version = N`` on top (its comments, if any, follow)."""
    if text and text.strip():
        return "version = %d\n\n%s" % (version, text)
    return "version = %d\n" % version


def default_of(text, path, version):
    """The ``default_runtime_name`` of the CRI plugin a config of ``version`` names, or None."""
    return PlainTree(toml_data(text, path), path).get(("plugins", CRI_PLUGIN[version], "containerd", "default_runtime_name"))


def configure(text, path, settings, version):
    """``text`` (``None`` for a missing file) with our runtime registered; the same text when nothing changes."""
    if not toml_data(text, path):
        text = _with_version(text, version)
    document = Document(text, path)
    _present(document, version, settings, path)
    return document.render()


def unconfigure(text, path, settings, version):
    """``text`` without our runtime: its table; ``default_runtime_name``, when it names ours, back to
    ``settings.previous_default`` (or gone); ``enable_cdi`` when ``settings.cdi_added`` (ours was ``true``)."""
    if not toml_data(text, path):
        return text
    document = Document(text, path)
    _absent(document, version, settings, path)
    return document.render()


# --- Drop-in ---------------------------------------------------------------------------------------------------------

def imported_cri_tables(imported, version):
    """The CRI plugin tables of the ``imported`` files (``(path, text)``, :func:`imported_files`) that have one, in
    containerd's order."""
    plugin = CRI_PLUGIN[version]
    tables = []
    for path, text in imported:
        other = PlainTree(toml_data(text, path), path)
        if other.get(("plugins", plugin)) is not None:
            tables.append(copy.deepcopy(_table(other, ("plugins", plugin), path)))
    return tables


def drop_in(main_text, main_path, settings, version, imported_tables=(), merges=False):
    """The drop-in's text: ``version``, the CRI plugin table containerd loads today, our runtime added; nothing else.

    containerd before 2.1 replaces a plugin table with the imported one, so the drop-in must carry every CRI setting
    containerd loads, or importing it would reset them to their defaults: the main file's table, and the CRI tables of
    the files it imports (``imported_tables``, :func:`imported_cri_tables`), each replacing the table before it, or,
    where the installed containerd merges plugin tables (``merges``: 2.1 and later), merged into it.
    """
    main = PlainTree(toml_data(main_text, main_path), main_path)
    plugin = CRI_PLUGIN[version]
    table = copy.deepcopy(_table(main, ("plugins", plugin), main_path))
    for imported_table in imported_tables:
        table = _deep_merge(table, imported_table) if merges else imported_table
    tree = PlainTree({"version": version, "plugins": {plugin: table}}, main_path)
    _present(tree, version, settings, main_path)
    return render_tree(tree.data, main_path)


def _deep_merge(base, other):
    """``other`` merged into ``base``: tables key by key, any other value replaced."""
    out = dict(base)
    for key, value in other.items():
        out[key] = _deep_merge(out[key], value) if isinstance(out.get(key), Mapping) and isinstance(value, Mapping) else value
    return out


def imported_files(main_text, main_path, skip):
    """The files containerd loads after the main config, as ``(path, text)`` in its order, leaving out ``skip`` (our
    drop-in) and files that are missing (containerd refuses those; its validation says so).

    containerd's LoadConfig (cmd/containerd/server/config/config.go) works through a queue: the main file, then each
    file's ``imports`` appended in order (relative entries against the importing file's directory, absolute entries
    with ``*`` expanded by ``filepath.Glob``), a path loaded once.
    """
    def entries(text, path):
        out = []
        for entry in main_imports(text, path):
            if "*" in entry and os.path.isabs(entry):
                out.extend(go_glob(entry))
            else:
                out.append(_resolve_entry(entry, path))
        return out

    loaded = set([os.path.normpath(os.path.abspath(main_path))])
    pending = entries(main_text, main_path)
    found = []
    while pending:
        path = pending.pop(0)
        if path in loaded:
            continue
        loaded.add(path)
        if path == os.path.normpath(skip):
            continue
        text = _files.read_text(path)
        if text is None:
            continue
        found.append((path, text))
        pending.extend(entries(text, path))
    return found


def _resolve_entry(entry, main_path):
    return os.path.normpath(entry if os.path.isabs(entry) else os.path.join(os.path.dirname(os.path.abspath(main_path)), entry))


def _imports(tree, path):
    imports = tree.get(("imports",))
    if imports is not None and (not isinstance(imports, list) or not all(isinstance(v, str) for v in imports)):
        raise FileError("must be an array of file paths, not %r" % (imports,), path=path, field="imports")
    return imports


def imported_by(imports, main_path, drop_in_path):
    """Whether an ``imports`` list already loads ``drop_in_path``: the same path or an absolute glob matching it."""
    target = os.path.normpath(drop_in_path)
    for entry in imports:
        if "*" in entry:
            if os.path.isabs(entry) and go_match(entry, target):
                return True
        elif _resolve_entry(entry, main_path) == target:
            return True
    return False


def add_import(main_text, main_path, drop_in_path, version):
    """The main config with ``drop_in_path`` in ``imports`` (appended, so it loads last), unless already covered."""
    text = main_text if toml_data(main_text, main_path) else _with_version(main_text, version)
    document = Document(text, main_path)
    imports = _imports(document, main_path)
    if imports is not None and imported_by(imports, main_path, drop_in_path):
        return main_text
    document.append(("imports",), drop_in_path)
    return document.render()


# The first line of a drop-in whose main config had no ``imports`` before ours: with it, removal takes the key away
# again (an emptied list otherwise stays, as ``[]``, since a user's own ``imports = []`` looks the same).
IMPORTS_ADDED = "# kubegpu.cluster: %s had no imports before this file; removing it removes the key again\n"


def had_imports(main_text, main_path):
    """Whether the main config has an ``imports`` key (a missing or blank file has none)."""
    return "imports" in (toml_data(main_text, main_path) or {})


def remove_import(main_text, main_path, drop_in_path, drop_key=False):
    """The main config without the ``imports`` entries equal to ``drop_in_path`` (an emptied list stays: ``[]``,
    unless ``drop_key``: the key was ours to add, see :data:`IMPORTS_ADDED`, and goes).

    A file left holding nothing but ``version`` and an empty ``imports``, and no comment, is the stub that adding the
    import made (or nvidia-ctk's): it goes, as nvidia-ctk simplifies it (NVIDIA/nvidia-container-toolkit
    pkg/config/engine/containerd/config_drop_in.go, simplify: a config left empty is deleted); ``None`` is returned.
    """
    if not toml_data(main_text, main_path):
        return main_text
    document = Document(main_text, main_path)
    _imports(document, main_path)
    if drop_key and all(entry == drop_in_path for entry in document.get(("imports",)) or []):
        document.delete(("imports",))
    else:
        document.remove(("imports",), drop_in_path)
    after = document.render()
    left = toml_data(after, main_path)
    stub = set(left) <= set(["version", "imports"]) and not left.get("imports")
    if stub and after != main_text and not any(line.strip().startswith("#") for line in after.splitlines()):
        return None
    return after


def main_imports(main_text, main_path):
    """The main config's ``imports`` (empty when none)."""
    return list(_imports(PlainTree(toml_data(main_text, main_path)), main_path) or [])


def with_imports(main_text, main_path, imports):
    """The main config with its ``imports`` replaced (for a validation copy)."""
    document = Document(main_text, main_path)
    document.set(("imports",), list(imports))
    return document.render()


# --- containerd's import semantics, for the validation copy ----------------------------------------------------------

def _go_pattern(pattern):
    """Go's ``filepath.Match`` pattern as a Python regex (``*`` and ``?`` never match ``/``); ``None`` if malformed."""
    out = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "\\":
            i += 1
            if i >= len(pattern):
                return None
            out.append(re.escape(pattern[i]))
        elif char == "[":
            end = i + 1
            negate = end < len(pattern) and pattern[end] == "^"
            if negate:
                end += 1
            chars = []
            first = True
            while end < len(pattern) and (pattern[end] != "]" or first):
                first = False
                if pattern[end] == "\\":
                    end += 1
                    if end >= len(pattern):
                        return None
                    chars.append(re.escape(pattern[end]))
                elif pattern[end] == "-" and chars and end + 1 < len(pattern) and pattern[end + 1] != "]":
                    chars.append("-")
                else:
                    chars.append(re.escape(pattern[end]))
                end += 1
            if end >= len(pattern) or not chars:
                return None
            out.append("(?!/)[%s%s]" % ("^" if negate else "", "".join(chars)))
            i = end
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)


def go_match(pattern, name):
    """Go's ``filepath.Match(pattern, name)`` on POSIX (a malformed pattern matches nothing)."""
    regex = _go_pattern(pattern)
    return bool(regex is not None and re.match("^%s$" % regex, name, re.DOTALL))


def _children(base, extra):
    """The names in directory ``base``, plus the next part of ``extra`` when ``extra`` lies under ``base``."""
    try:
        names = set(os.listdir(base))
    except OSError:
        names = set()
    prefix = base.rstrip("/") + "/"
    if extra and extra.startswith(prefix):
        names.add(extra[len(prefix):].split("/")[0])
    return names


def go_glob(pattern, extra=None, exclude=()):
    """Go's ``filepath.Glob`` for an absolute pattern, in Go's order (each directory's names sorted).

    ``extra`` is a path to treat as existing (the drop-in before it is written); ``exclude`` paths are left out.
    """
    parts = [part for part in pattern.split("/") if part]
    found = ["/"]
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        nxt = []
        for base in found:
            names = _children(base, extra)
            for name in sorted(names):
                if not go_match(part, name):
                    continue
                candidate = os.path.join(base, name)
                ancestor_of_extra = bool(extra) and extra.startswith(candidate + "/")
                if last or ancestor_of_extra or os.path.isdir(candidate):
                    nxt.append(candidate)
        found = nxt
    return [path for path in found if path not in exclude]


def validation_imports(imports, main_path, drop_in_path, candidate, exclude=()):
    """The ``imports`` for a validation copy of the main config that loads exactly what containerd will load once
    the drop-in is replaced by ``candidate`` (``None``: once the drop-in is deleted).

    The entry naming the drop-in, and every absolute glob matching it (expanded here as containerd would, in its
    order), point at ``candidate`` instead; every other entry is kept as written.
    """
    target = os.path.normpath(drop_in_path)
    out = []
    for entry in imports:
        if "*" in entry and os.path.isabs(entry) and go_match(entry, target):
            for match in go_glob(entry, extra=target if candidate else None, exclude=exclude):
                if match == target:
                    if candidate:
                        out.append(candidate)
                else:
                    out.append(match)
        elif "*" not in entry and _resolve_entry(entry, main_path) == target:
            if candidate:
                out.append(candidate)
        else:
            out.append(entry)
    return out


# --- What containerd reports -----------------------------------------------------------------------------------------

def dumped_cri(dump_text, major):
    """The CRI runtime plugin table from ``containerd config dump`` output (containerd ``major``), or ``None``."""
    try:
        data = toml_data(dump_text, "containerd config dump")
    except FileError:
        return None  # an unreadable dump is simply not used
    plugin = CRI_PLUGIN[3 if major is not None and major >= 2 else 2]
    table = data.get("plugins", {}).get(plugin) if isinstance(data.get("plugins"), Mapping) else None
    return table if isinstance(table, Mapping) else None


def dumped_runtime_problems(cri, settings):
    """What the merged config (from :func:`dumped_cri`) lacks of ours: (problems, notes), as sentences.

    A problem means containerd would not run our runtime as asked; a note is about ``enable_cdi``, which containerd
    before 1.7 does not know (it drops the key), so CDI stays off there whatever the file says. containerd 2.2 and
    later have no such option either, but CDI is always on there (their dump lists ``cdi_spec_dirs``).
    """
    if cri is None:
        return ["the dump has no CRI runtime plugin table"], []
    problems = []
    containerd = cri.get("containerd") if isinstance(cri.get("containerd"), Mapping) else {}
    runtime = (containerd.get("runtimes") or {}).get(settings.name)
    if not isinstance(runtime, Mapping):
        problems.append("runtime '%s' is missing" % settings.name)
    elif (runtime.get("options") or {}).get("BinaryName") != settings.path:
        problems.append("runtime '%s' has BinaryName %r" % (settings.name, (runtime.get("options") or {}).get("BinaryName")))
    if settings.set_as_default and containerd.get("default_runtime_name") != settings.name:
        problems.append("default_runtime_name is %r" % containerd.get("default_runtime_name"))
    notes = []
    if settings.cdi and cri.get("enable_cdi") is not True:
        if "enable_cdi" in cri:
            problems.append("enable_cdi is %r" % cri.get("enable_cdi"))
        elif "cdi_spec_dirs" not in cri:
            # containerd 2.2 and later dropped the option (CDI is always on) but still list cdi_spec_dirs; 1.6 has neither
            notes.append("the installed containerd does not know enable_cdi (CDI needs containerd 1.7 or later): "
                         "it is written but CDI stays off until containerd is upgraded")
    return problems, notes


def _flatten(value, prefix=()):
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            out.update(_flatten(item, prefix + (key,)))
        return out
    return {prefix: value}


def changed_cri_settings(before, after, settings):
    """CRI settings (dotted keys) that differ between two dumps, other than ours; for a warning."""
    if before is None or after is None:
        return []
    ours = ("containerd", "runtimes", settings.name)
    old = _flatten(without_empty_tables(before))
    new = _flatten(without_empty_tables(after))
    changed = []
    for key in sorted(set(old) | set(new)):
        if key[:3] == ours or key == ("containerd", "default_runtime_name") or key == ("enable_cdi",):
            continue
        if old.get(key) != new.get(key):
            changed.append(dotted(list(key)))
    return changed


# --- The adapter ---------------------------------------------------------------------------------------------------

VALIDATE_COMMAND = "containerd --config %s config dump"
CONFIG_DUMP = "containerd config dump"  # what the daemon is asked (container_runtime_facts), as reports name it


def cri_table(data):
    """The CRI runtime plugin table of a containerd config (any version), or None."""
    plugins = data.get("plugins") if isinstance(data, Mapping) else None
    if not isinstance(plugins, Mapping):
        return None
    for plugin in (CRI_PLUGIN[3], CRI_PLUGIN[2]):
        if isinstance(plugins.get(plugin), Mapping):
            return plugins[plugin]
    return None


def containerd_report(text, source):
    """A containerd config (``config dump`` output or a generated ``config.toml``) as a report (:func:`.base.report`)."""
    try:
        data = toml_data(text or "", source)
    except (FileError, AttributeError) as exc:  # AttributeError: neither tomllib nor tomlkit
        return report(source, error="cannot be read as TOML: %s" % exc)
    cri = cri_table(data)
    if cri is None:
        return report(source, error="no CRI runtime plugin table")
    containerd = cri.get("containerd") if isinstance(cri.get("containerd"), Mapping) else {}
    runtimes = {}
    for name, spec in (containerd.get("runtimes") or {}).items():
        spec = spec if isinstance(spec, Mapping) else {}
        options = spec.get("options") if isinstance(spec.get("options"), Mapping) else {}
        runtimes[name] = {"type": spec.get("runtime_type"), "path": options.get("BinaryName"),
                          "systemd_cgroup": options.get("SystemdCgroup")}
    return report(source, default_runtime=containerd.get("default_runtime_name"), runtimes=runtimes,
                  cdi=cri.get("enable_cdi"))


def generated_report(path, read):
    """The report of a distribution's containerd (k3s, RKE2, k0s, microk8s): the config it generated at its last start,
    at ``path`` (``read(path)`` gives its text, or None)."""
    text = read(path)
    if text is None:
        return report(path, error="%s is not there (the service writes it when it starts)" % path)
    return containerd_report(text, path)


class Containerd(Runtime):
    """containerd: config.toml in place, or (what NVIDIA's tools do since 1.19) a drop-in that config.toml imports.

    Validation is containerd's own: ``containerd --config <main> config dump`` on a copy of the main config that
    imports the candidate drop-in in place of the live one, and a look at the dump for our runtime.
    """

    name = "containerd"
    binary = "containerd"
    service = "containerd"
    config_path = "/etc/containerd/config.toml"
    drop_in_path = "/etc/containerd/conf.d/99-nvidia.toml"
    toml = True
    config_versions = SUPPORTED_VERSIONS

    def containerd(self, host):
        """The containerd binary that reads this config (its version, its validation), or None."""
        return host.get_bin_path("containerd")

    def _version(self, host, binary):
        """The installed containerd's ``(major, minor)``, or None."""
        rc, out, _err = host.run_command([binary, "--version"])
        return binary_version(out) if rc == 0 else None

    def default_of(self, text, the_plan):
        return default_of(text, the_plan.main_path, the_plan.version)

    def report(self, binary, params, host, read, answer):
        """``containerd config dump`` of the main config (container_runtime_facts' containerd_config)."""
        command = [binary, "--config", params.get("containerd_config") or self.config_path, "config", "dump"]
        return asked(CONFIG_DUMP, command, host, lambda out: containerd_report(out, CONFIG_DUMP))

    def reads(self, path, the_plan):
        """The main config, the drop-in, and whatever an ``imports`` entry of either names or matches, in the texts on
        disk and the planned ones (containerd's cmd/containerd/server/config/config.go, resolveImports: an entry
        relative to the importing file's directory, one with ``*`` expanded by filepath.Glob; before containerd 1.7 a
        relative glob was expanded against the working directory, ``/`` under systemd, so both count here)."""
        why = super(Containerd, self).reads(path, the_plan)
        if why:
            return why
        for importing, text in self._importing_texts(the_plan):
            for entry in main_imports(text, importing):
                patterns = [_resolve_entry(entry, importing)]
                if "*" in entry and not os.path.isabs(entry):
                    patterns.append(os.path.normpath(os.path.join("/", entry)))
                for pattern in patterns:
                    if pattern == path or ("*" in pattern and go_match(pattern, path)):
                        return "is matched by %s's imports entry %r" % (importing, entry)
        return None

    def _importing_texts(self, the_plan):
        """(path, text) of the main config and the drop-in, as they are and as planned."""
        out = []
        for path in (the_plan.main_path, the_plan.drop_in_path):
            if not path:
                continue
            texts = [c.after for c in the_plan.changes if c.path == path]
            try:
                texts.append(_files.read_text(path))
            except FileError:
                pass
            for text in texts:
                try:
                    if text is not None and main_imports(text, path):
                        out.append((path, text))
                except FileError:
                    pass  # a malformed file is the plan's error, not this question's
        return out

    def cdi_of(self, text, the_plan):
        return PlainTree(toml_data(text, the_plan.main_path), the_plan.main_path).get(
            ("plugins", CRI_PLUGIN[the_plan.version], "enable_cdi"))

    def plan(self, the_plan, host):
        settings, main_path, drop_path = the_plan.settings, the_plan.main_path, the_plan.drop_in_path
        main_text = _files.read_text(main_path)

        def ask_binary():
            binary = self.containerd(host)
            return self._version(host, binary) if binary else None

        version = resolve_version(str(the_plan.params.get("config_version") or "auto"), main_text, main_path, ask_binary)
        the_plan.version = version
        if not drop_path:
            after = (configure(main_text, main_path, settings, version) if the_plan.present
                     else unconfigure(main_text, main_path, settings, version))
            the_plan.changes.append(Change(main_path, main_text, after))
            return
        drop_text = _files.read_text(drop_path)
        entry = the_plan.drop_in_entry
        if the_plan.present:
            tables = imported_cri_tables(imported_files(main_text, main_path, the_plan.drop_in_entry), version)
            merges = False
            if tables:
                binary = ask_binary()  # how another file's CRI table combines with the main file's
                merges = isinstance(binary, tuple) and binary >= (2, 1)
            wanted = drop_in(main_text, main_path, settings, version, imported_tables=tables, merges=merges)
            note = IMPORTS_ADDED % main_path
            if not had_imports(main_text, main_path) or (drop_text is not None and drop_text.startswith(note)):
                wanted = note + wanted  # removal gives the main config back without the key
            if drop_text is not None and toml_data(drop_text, drop_path) == toml_data(wanted, drop_path):
                wanted = drop_text  # the same settings (written by nvidia-ctk, say): no rewrite, no restart
            # the drop-in first: the main config must never import a file that is not there yet
            the_plan.changes.append(Change(drop_path, drop_text, wanted))
            the_plan.changes.append(Change(main_path, main_text, add_import(main_text, main_path, entry, version)))
        else:
            if main_text is not None:
                ours = drop_text is not None and drop_text.startswith(IMPORTS_ADDED % main_path)
                the_plan.changes.append(Change(main_path, main_text, remove_import(main_text, main_path, entry, ours)))
            the_plan.changes.append(Change(drop_path, drop_text, None))

    def _command(self, the_plan, host):
        """(command string, containerd's major version or None when the command is the user's or the version cannot be
        read); ``(None, None)``: no validation."""
        command = the_plan.params.get("validate")
        if command is not None:
            return (command or None), None
        binary = self.containerd(host)
        if binary is None:
            return None, None
        found = self._version(host, binary)
        if found is not None and readable_version(found) < the_plan.version:
            host.warn("not validated: the installed containerd (%d.%d) cannot read config version %d; pass validate to "
                      "check with a containerd that can (version 3: 2.0 or later; version 4: 2.3 or later)"
                      % (found[0], found[1], the_plan.version))
            return None, None
        return VALIDATE_COMMAND.replace("containerd", binary, 1), found[0] if found else None

    def validate(self, the_plan, staged, host):
        """Validate what containerd will load once the staged candidates are in place; returns the validation copy
        it staged (drop-in), for the caller to discard, or None."""
        command, major = self._command(the_plan, host)
        if command is None:
            return None
        view = None
        if the_plan.drop_in_path:
            view = self._view(the_plan, dict((s.path, s) for s in staged))
            if view is None:
                return None
            target, live_path = view.tmp_path, the_plan.main_path
        elif candidate_of(the_plan, staged) is not None:
            target, live_path = candidate_of(the_plan, staged).tmp_path, the_plan.main_path
        else:
            return None  # only a deletion: there is no candidate file
        try:
            out = _files.validate(_files.command_line(command, target), host.run_command,
                                  shown=the_plan.params.get("validate") or VALIDATE_COMMAND, path=live_path)
            if major is not None:
                self._check_dump(the_plan, host, command, major, out)
        except BaseException:
            if view is not None:
                view.discard()
            raise
        return view

    def _check_dump(self, the_plan, host, command, major, out):
        """What containerd's dump of the candidate says: our runtime must be there; other CRI settings should not move."""
        after = dumped_cri(out, major)
        if the_plan.present:
            problems, notes = dumped_runtime_problems(after, the_plan.settings)
            for note in notes:
                host.warn(note)
            if problems:
                raise ValidationError(
                    "validation failed: 'containerd config dump' shows %s (does a file imported after ours replace the "
                    "CRI plugin table?); the live files were left as they were" % "; ".join(problems),
                    path=the_plan.main_path, stdout=out)
        if the_plan.drop_in_path and os.path.exists(the_plan.main_path):
            rc, before, _err = host.run_command(_files.command_line(command, the_plan.main_path))
            if rc == 0:
                changed = changed_cri_settings(dumped_cri(before, major), after, the_plan.settings)
                if changed:
                    shown = ", ".join(changed[:10]) + (" and %d more" % (len(changed) - 10) if len(changed) > 10 else "")
                    host.warn("the drop-in changes CRI settings that containerd loads today from another imported "
                              "file: %s; the drop-in carries the CRI table this module read from %s and its imports, "
                              "which containerd combines otherwise here" % (shown, the_plan.main_path))

    def _view(self, the_plan, by_path):
        """A validation copy of the main config, beside it, importing the candidate drop-in instead of the live one."""
        main = the_plan.main_path
        main_change = next((c for c in the_plan.changes if c.path == main), None)
        main_text = main_change.after if main_change is not None else _files.read_text(main)
        if main_text is None:
            return None
        drop_staged = by_path.get(the_plan.drop_in_path)
        candidate = drop_staged.tmp_path if drop_staged is not None else None
        exclude = set(s.tmp_path for s in by_path.values())
        imports = validation_imports(main_imports(main_text, main), main, the_plan.drop_in_entry, candidate,
                                     exclude=exclude)
        return _files.Staged(main, with_imports(main_text, main, imports), suffix=".validate")
