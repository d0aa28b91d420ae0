# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""CRI-O's crio.conf (or a drop-in under crio.conf.d): register the NVIDIA runtime; and undo exactly that.

Text in, text out, through :class:`.toml.Document` (only the lines that change are touched). CRI-O merges its drop-in files key by key, so a drop-in
holds only our tables. CRI-O has no CDI switch of its own (it always reads CDI specs), so ``settings.cdi`` is unused.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import os

from collections.abc import Mapping

from ansible_collections.kubegpu.cluster.plugins.module_utils import _files
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import FileError
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.base import Change, Runtime, asked, real, report
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.common import (
    restore_default, set_default, toml_data, without_empty_tables,
)
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.toml import Document, PlainTree, check_tables

RUNTIME_TYPE = "oci"
# What the daemon is asked (container_runtime_facts): the configuration it runs with, merged
CONFIG = ("crio config", ["crio", "config"])
_RUNTIME = ("crio", "runtime")
DEFAULT_KEY = _RUNTIME + ("default_runtime",)


def _table(tree, path, where):
    check_tables(tree.data, path + ("",), where)
    return tree.get(path, {})


def _template(runtimes, defaults, ours):
    """(name, table) of the runtime ours copies, as nvidia-ctk picks it (NVIDIA/nvidia-container-toolkit
    pkg/config/engine/crio/crio.go, AddRuntime: the first of the default runtime, runc and crun that has a table,
    nvidia* runtimes never): so ours gets its monitor_path, runtime_root, monitor_cgroup, allowed_annotations.
    ``defaults``: the default runtimes in the order they count (the file's, the main config's under a drop-in, the
    user's previous one once ours is the default), so that the template stays the same from one run to the next."""
    candidates = [d for d in defaults if isinstance(d, str) and d] + ["runc", "crun"]
    for name in candidates:
        table = runtimes.get(name)
        if name != ours and not name.startswith("nvidia") and isinstance(table, Mapping):
            return name, table
    return None, None


def _new_runtime(template, settings):
    """Our table: the template's settings, our binary, the OCI runtime type."""
    data = dict((key, copy.deepcopy(value)) for key, value in (template or {}).items())
    data["runtime_path"] = settings.path
    data["runtime_type"] = RUNTIME_TYPE
    return data


def _present(tree, settings, path, base=None):
    """Ours in ``tree``; ``base``: the plain data of the main config under a drop-in (its runtimes and default are
    what CRI-O merges the drop-in onto, so the template comes from both)."""
    runtimes = _table(tree, _RUNTIME + ("runtimes",), path)
    ours = _RUNTIME + ("runtimes", settings.name)
    base = PlainTree(base or {}, path)
    merged = dict(_table(base, _RUNTIME + ("runtimes",), path), **runtimes)
    name, template = _template(merged, (tree.get(DEFAULT_KEY), base.get(DEFAULT_KEY), settings.previous_default),
                               settings.name)
    wanted = _new_runtime(template, settings)
    if settings.name in runtimes:
        _table(tree, ours, path)
        for key, value in wanted.items():  # refreshed from the template; keys only ours has stay
            tree.set(ours + (key,), value)
    else:
        last = list(runtimes)[-1] if runtimes else None
        tree.set(ours, wanted, after=_RUNTIME + ("runtimes", last) if last else None)
    set_default(tree, DEFAULT_KEY, settings)


def _absent(tree, settings, path):
    if settings.name in _table(tree, _RUNTIME + ("runtimes",), path):
        tree.delete(_RUNTIME + ("runtimes", settings.name))
    restore_default(tree, DEFAULT_KEY, settings)


def configure(text, path, settings, base=None):
    """``text`` (``None`` for a missing file) with ``[crio.runtime.runtimes.<name>]`` and, when asked,
    ``[crio.runtime] default_runtime``; the same text when nothing changes. ``base``: the main config's plain data
    when ``text`` is a drop-in."""
    document = Document(text, path)
    _present(document, settings, path, base)
    return document.render()


def unconfigure(text, path, settings):
    """``text`` without our runtime table; ``default_runtime``, when it names ours, back to ``settings.previous_default``
    (or gone: CRI-O falls back to its built-in default)."""
    if not toml_data(text, path):
        return text
    document = Document(text, path)
    _absent(document, settings, path)
    return document.render()


def default_of(text, path):
    """The ``default_runtime`` a crio.conf (or drop-in) names, or None."""
    return PlainTree(toml_data(text, path), path).get(DEFAULT_KEY)


def is_empty(text, path):
    """Whether a (drop-in) text holds no settings at all (empty tables are no settings), so that the file can go."""
    return not without_empty_tables(toml_data(text, path))


# CRI-O's --config-dir (the crio.conf.d(5) man page): CRI-O walks it (pkg/config/config.go, UpdateFromPath:
# filepath.Walk, every file that is not a directory, at any depth, whatever its name) after crio.conf.
CONFIG_DIR = "/etc/crio/crio.conf.d"


def config_dirs(the_plan):
    """The directories CRI-O reads every file of: its default --config-dir, the drop-in's directory (a drop-in is read
    only from there), and the main config's directory when that is a drop-in directory itself (``*.d``: a packaged
    ``crio.conf.d/10-crio.conf`` edited in place)."""
    dirs = [real(CONFIG_DIR)]
    if the_plan.drop_in_path:
        dirs.append(os.path.dirname(the_plan.drop_in_path))
    if os.path.dirname(the_plan.main_path).endswith(".d"):
        dirs.append(os.path.dirname(the_plan.main_path))
    return dirs


def crio_report(text):
    """``crio config`` as a report (:func:`.base.report`)."""
    source = CONFIG[0]
    try:
        data = toml_data(text or "", source)
    except (FileError, AttributeError) as exc:  # AttributeError: neither tomllib nor tomlkit
        return report(source, error="cannot be read as TOML: %s" % exc)
    runtime = ((data.get("crio") or {}).get("runtime") or {}) if isinstance(data.get("crio"), Mapping) else {}
    runtimes = dict((name, {"path": (spec or {}).get("runtime_path"), "type": (spec or {}).get("runtime_type")})
                    for name, spec in (runtime.get("runtimes") or {}).items() if isinstance(spec, Mapping))
    return report(source, default_runtime=runtime.get("default_runtime"), runtimes=runtimes)


class Crio(Runtime):
    """CRI-O: crio.conf, or (what NVIDIA's tools do) a drop-in that holds only our tables; the main file is then read
    (for the runtime ours copies its settings from) but never changed."""

    name = "crio"
    binary = "crio"
    service = "crio"
    config_path = "/etc/crio/crio.conf"
    drop_in_path = "/etc/crio/crio.conf.d/99-nvidia.toml"
    toml = True

    def default_of(self, text, the_plan):
        return default_of(text, the_plan.main_path)

    def report(self, binary, params, host, read, answer):
        return asked(CONFIG[0], CONFIG[1], host, crio_report)

    def reads(self, path, the_plan):
        for directory in config_dirs(the_plan):
            if path.startswith(directory.rstrip("/") + "/"):
                return "is under %s, where CRI-O reads every file, whatever its name" % directory
        return super(Crio, self).reads(path, the_plan)

    def plan(self, the_plan, host):
        settings = the_plan.settings
        if settings.cdi:
            host.warn("cdi is ignored for crio: CRI-O has no CDI switch (it reads CDI specs from /etc/cdi and /var/run/cdi)")
        path = the_plan.drop_in_path or the_plan.main_path
        text = _files.read_text(path)
        if the_plan.present:
            # a drop-in's template can come from the main config, which is read, never changed
            base = toml_data(_files.read_text(the_plan.main_path), the_plan.main_path) if the_plan.drop_in_path else None
            after = configure(text, path, settings, base)
        else:
            after = unconfigure(text, path, settings)
        if the_plan.drop_in_path and not the_plan.present and text is not None and is_empty(after, path):
            after = None  # nothing of anybody's left in our drop-in
        the_plan.changes.append(Change(path, text, after))
