# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""docker's daemon.json: register the NVIDIA runtime, make it the default, turn CDI on; and undo exactly that.

Text in, text out. Every other key keeps its value and its place. A file that needs no change is returned as it
was (not re-serialized); a changed one is written with the file's own indentation (4 spaces when it has none) and
a trailing newline.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.kubegpu.cluster.plugins.module_utils import _files
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import FileError, KubegpuError
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.base import Change, Runtime
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.common import type_name


def parse(text, path):
    """daemon.json as a dict (keys in file order); a missing or blank file is ``{}``."""
    if text is None or not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        line, column = getattr(exc, "lineno", None), getattr(exc, "colno", None)
        raise FileError("invalid JSON: %s" % getattr(exc, "msg", exc), path=path, line=line, column=column)
    if not isinstance(data, dict):
        raise FileError("the top level must be a JSON object, not %s" % type_name(data), path=path)
    return data


def _object(data, key, path, create=False):
    if key not in data:
        if not create:
            return None
        data[key] = {}
    value = data[key]
    if not isinstance(value, dict):
        raise FileError("must be a JSON object, not %s" % type_name(value), path=path, field=key)
    return value


def indentation(text):
    """The indentation a daemon.json uses (its first indented key), or 4 spaces."""
    match = re.search(r'^([ \t]+)"', text or "", re.MULTILINE)
    return match.group(1) if match else 4


def dumps(data, indent=4):
    """daemon.json text: keys in order, non-ASCII kept as it is, a trailing newline."""
    return json.dumps(data, indent=indent, ensure_ascii=False) + "\n"


def _render(text, before, after):
    if json.dumps(after) == json.dumps(before):  # strict: ``true`` is not ``1``
        return text
    return dumps(after, indentation(text))


def default_of(text, path):
    """The ``default-runtime`` a daemon.json names, or None."""
    return parse(text, path).get("default-runtime")


def _restore_default(data, settings):
    if settings.previous_default:
        data["default-runtime"] = settings.previous_default
    else:
        data.pop("default-runtime", None)


def _set_default(data, settings):
    wanted = settings.default_after(data.get("default-runtime"))
    if wanted != data.get("default-runtime"):
        if wanted:
            data["default-runtime"] = wanted
        else:
            data.pop("default-runtime", None)


def configure(text, path, settings):
    """``text`` (``None`` for a missing file) with ``runtimes.<name>``, ``default-runtime`` and ``features.cdi``."""
    before = parse(text, path)
    data = json.loads(json.dumps(before))  # a deep copy that keeps the order
    runtimes = _object(data, "runtimes", path, create=True)
    existing = runtimes.get(settings.name)
    if isinstance(existing, dict):
        existing["path"] = settings.path  # the user's runtimeArgs (docker's field for arguments) and the rest stay
    else:
        runtimes[settings.name] = {"path": settings.path, "args": []}  # what nvidia-ctk writes for a new runtime
    _set_default(data, settings)
    if settings.cdi:
        _object(data, "features", path, create=True)["cdi"] = True
    return _render(text, before, data)


def unconfigure(text, path, settings):
    """``text`` without what :func:`configure` added.

    ``runtimes.<name>`` goes, and ``runtimes`` when that empties it; ``default-runtime``, when it names our runtime,
    goes back to ``settings.previous_default`` (or goes, so that docker falls back to runc); ``features.cdi`` only
    when ``settings.cdi_added`` (ours turned it on) and it is ``true``, and ``features`` when that empties it. A file
    left holding nothing (``{}``) after that is what :func:`configure` made of a missing one: ``None``, it goes.
    """
    before = parse(text, path)
    data = json.loads(json.dumps(before))
    runtimes = _object(data, "runtimes", path)
    if runtimes is not None and settings.name in runtimes:
        del runtimes[settings.name]
        if not runtimes:
            del data["runtimes"]
    if data.get("default-runtime") == settings.name:
        _restore_default(data, settings)
    if settings.cdi_added:
        features = _object(data, "features", path)
        if features is not None and features.get("cdi") is True:
            if settings.cdi_before is None:
                del features["cdi"]
                if not features:
                    del data["features"]
            else:
                features["cdi"] = settings.cdi_before
    if before and not data:
        return None  # nothing but ours was in it: the file goes, as a containerd stub does (remove_import)
    return _render(text, before, data)


class Docker(Runtime):
    """dockerd: daemon.json, edited in place (docker has no drop-in directory)."""

    name = "docker"
    binary = "dockerd"
    service = "docker"
    config_path = "/etc/docker/daemon.json"

    def check(self, params):
        if params.get("drop_in_path"):
            raise KubegpuError("drop_in_path: docker has no drop-in directory (daemon.json is edited in place); "
                               "drop_in_path is for containerd and crio only")

    def default_of(self, text, the_plan):
        return default_of(text, the_plan.main_path)

    def cdi_of(self, text, the_plan):
        features = parse(text, the_plan.main_path).get("features")
        return features.get("cdi") if isinstance(features, dict) else None

    def plan(self, the_plan, host):
        text = _files.read_text(the_plan.main_path)
        edit = configure if the_plan.present else unconfigure
        the_plan.changes.append(Change(the_plan.main_path, text, edit(text, the_plan.main_path, the_plan.settings)))
