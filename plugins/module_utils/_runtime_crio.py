# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""CRI-O's crio.conf (or a drop-in under crio.conf.d): register the NVIDIA runtime; and undo exactly that.

Text in, text out, through :class:`_runtime_toml.Document` (only the lines that change are touched). CRI-O merges its drop-in files key by key, so a drop-in
holds only our tables. CRI-O has no CDI switch of its own (it always reads CDI specs), so ``settings.cdi`` is unused.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime_common import toml_data, without_empty_tables
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime_toml import Document, check_tables

RUNTIME_TYPE = "oci"
_RUNTIME = ("crio", "runtime")


def _table(tree, path, where):
    check_tables(tree.data, path + ("",), where)
    return tree.get(path, {})


def _present(tree, settings, path):
    runtimes = _table(tree, _RUNTIME + ("runtimes",), path)
    ours = _RUNTIME + ("runtimes", settings.name)
    if settings.name in runtimes:
        _table(tree, ours, path)
        tree.set(ours + ("runtime_path",), settings.path)
        tree.set(ours + ("runtime_type",), RUNTIME_TYPE)
    else:
        last = list(runtimes)[-1] if runtimes else None
        tree.set(ours, {"runtime_path": settings.path, "runtime_type": RUNTIME_TYPE},
                 after=_RUNTIME + ("runtimes", last) if last else None)
    if settings.set_as_default:
        tree.set(_RUNTIME + ("default_runtime",), settings.name)


def _absent(tree, settings, path):
    if settings.name in _table(tree, _RUNTIME + ("runtimes",), path):
        tree.delete(_RUNTIME + ("runtimes", settings.name))
    if tree.get(_RUNTIME + ("default_runtime",)) == settings.name:
        tree.delete(_RUNTIME + ("default_runtime",))


def configure(text, path, settings):
    """``text`` (``None`` for a missing file) with ``[crio.runtime.runtimes.<name>]`` and, when asked,
    ``[crio.runtime] default_runtime``; the same text when nothing changes."""
    document = Document(text, path)
    _present(document, settings, path)
    return document.render()


def unconfigure(text, path, settings):
    """``text`` without our runtime table and without ``default_runtime`` when it names ours (the previous default
    is not known: CRI-O falls back to its built-in default)."""
    if not toml_data(text, path):
        return text
    document = Document(text, path)
    _absent(document, settings, path)
    return document.render()


def is_empty(text, path):
    """Whether a (drop-in) text holds no settings at all (empty tables are no settings), so that the file can go."""
    return not without_empty_tables(toml_data(text, path))
