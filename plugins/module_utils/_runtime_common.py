# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""What the container runtime config editors share: what was asked, the typed error, reading TOML."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
import traceback

from collections.abc import Mapping

try:
    import tomlkit
    from tomlkit.exceptions import ParseError as _TomlParseError, TOMLKitError as _TomlError
    TOMLKIT_IMPORT_ERROR = None
except ImportError:
    tomlkit = None
    _TomlParseError = _TomlError = None
    TOMLKIT_IMPORT_ERROR = traceback.format_exc()

try:
    import tomllib as _tomllib  # Python 3.11+: reads a few valid layouts tomlkit fails on
except ImportError:
    _tomllib = None


class RuntimeSettings(object):
    """What the caller asked for: the runtime's name and binary, whether it becomes the default, CDI."""

    def __init__(self, name="nvidia", path="/usr/bin/nvidia-container-runtime", set_as_default=True, cdi=False):
        self.name = name
        self.path = path
        self.set_as_default = set_as_default
        self.cdi = cdi

    def __repr__(self):
        return "RuntimeSettings(name=%r, path=%r, set_as_default=%r, cdi=%r)" % (self.name, self.path, self.set_as_default, self.cdi)


class ConfigError(Exception):
    """A config file that cannot be used as it is: where (file, field, line, column) and why, in one line."""

    def __init__(self, message, path=None, field=None, line=None, column=None, details=None):
        self.message = message
        self.details = details or {}
        self.path = path
        self.field = field
        self.line = line
        self.column = column
        super(ConfigError, self).__init__(self.__str__())

    def __str__(self):
        where = []
        if self.path:
            where.append(str(self.path))
        if self.line is not None:
            where.append("line %s, column %s" % (self.line, self.column))
        if self.field:
            where.append("field '%s'" % self.field)
        text = " ".join(self.message.split())  # one line, whatever the parser said
        return "%s: %s" % (": ".join(where), text) if where else text


def type_name(value):
    """The name a user knows for a parsed value's type (JSON and TOML words, not Python's)."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, Mapping):
        return "table/object"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (int, float)):
        return "number"
    return type(value).__name__


def plain(value):
    """A tomlkit item as plain Python data (dict, list, str, int, ...); plain data is returned as it is."""
    unwrap = getattr(value, "unwrap", None)
    if unwrap is not None:
        return unwrap()
    if isinstance(value, Mapping):
        return dict((k, plain(v)) for k, v in value.items())
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def without_empty_tables(value):
    """Plain data with every empty table removed, recursively (an empty TOML table means nothing to a daemon)."""
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            item = without_empty_tables(item)
            if isinstance(item, Mapping) and not item:
                continue
            out[key] = item
        return out
    if isinstance(value, list):
        return [without_empty_tables(v) for v in value]
    return value


# --- TOML text in and out -------------------------------------------------------------------------------------------

_POSITION = re.compile(r"\s+at line \d+ col \d+$")


def toml_data(text, path):
    """The plain data of a TOML text (an empty text is an empty table).

    A syntax error becomes one :class:`ConfigError` with the line and the column, counted from 1 as containerd and
    Python's JSON errors count them (tomlkit counts columns from 0). Where tomlkit refuses a valid layout (some
    orders of out-of-order tables), Python's own ``tomllib`` reads it, when there is one (3.11 and later).
    """
    if not text or not text.strip():
        return {}
    try:
        return plain(tomlkit.parse(text))
    except _TomlParseError as exc:
        error = ConfigError("invalid TOML: %s" % _POSITION.sub("", str(exc)).rstrip("."), path=path, line=exc.line,
                            column=exc.col + 1)
    except _TomlError as exc:
        error = ConfigError("invalid TOML: %s" % exc, path=path)
    except (ValueError, KeyError, AttributeError, TypeError, IndexError) as exc:  # tomlkit failing on its own
        error = ConfigError("cannot be read as TOML (%s: %s)" % (type(exc).__name__, exc), path=path)
    if _tomllib is not None:
        try:
            return _tomllib.loads(text)
        except ValueError:
            pass
    raise error


def dotted(keys):
    """A TOML dotted key for display: ``plugins."io.containerd.grpc.v1.cri".containerd``."""
    return ".".join(k if re.match(r"^[A-Za-z0-9_-]+$", k) else '"%s"' % k for k in keys)
