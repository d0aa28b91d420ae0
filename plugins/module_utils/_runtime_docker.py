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

from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime_common import ConfigError, type_name


def parse(text, path):
    """daemon.json as a dict (keys in file order); a missing or blank file is ``{}``."""
    if text is None or not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        line, column = getattr(exc, "lineno", None), getattr(exc, "colno", None)
        raise ConfigError("invalid JSON: %s" % getattr(exc, "msg", exc), path=path, line=line, column=column)
    if not isinstance(data, dict):
        raise ConfigError("the top level must be a JSON object, not %s" % type_name(data), path=path)
    return data


def _object(data, key, path, create=False):
    if key not in data:
        if not create:
            return None
        data[key] = {}
    value = data[key]
    if not isinstance(value, dict):
        raise ConfigError("must be a JSON object, not %s" % type_name(value), path=path, field=key)
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


def configure(text, path, settings):
    """``text`` (``None`` for a missing file) with ``runtimes.<name>``, ``default-runtime`` and ``features.cdi``."""
    before = parse(text, path)
    data = json.loads(json.dumps(before))  # a deep copy that keeps the order
    runtimes = _object(data, "runtimes", path, create=True)
    wanted = {"path": settings.path, "args": []}
    if runtimes.get(settings.name) != wanted:
        runtimes[settings.name] = wanted
    if settings.set_as_default:
        data["default-runtime"] = settings.name
    if settings.cdi:
        _object(data, "features", path, create=True)["cdi"] = True
    return _render(text, before, data)


def unconfigure(text, path, settings):
    """``text`` without what :func:`configure` added.

    ``runtimes.<name>`` goes, and ``runtimes`` when that empties it; ``default-runtime`` only when it names our
    runtime (the previous default is not known, so none is restored: docker falls back to runc); ``features.cdi``
    only when ``settings.cdi`` and it is ``true`` (nobody can tell who set it), and ``features`` when that empties it.
    """
    before = parse(text, path)
    data = json.loads(json.dumps(before))
    runtimes = _object(data, "runtimes", path)
    if runtimes is not None and settings.name in runtimes:
        del runtimes[settings.name]
        if not runtimes:
            del data["runtimes"]
    if data.get("default-runtime") == settings.name:
        del data["default-runtime"]
    if settings.cdi:
        features = _object(data, "features", path)
        if features is not None and features.get("cdi") is True:
            del features["cdi"]
            if not features:
                del data["features"]
    return _render(text, before, data)
