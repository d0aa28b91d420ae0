# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""What the container runtime config editors share: reading TOML, plain data out of it, the names users know for
types."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
import traceback

from collections.abc import Mapping

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import FileError

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


BOM = "\ufeff"


def without_bom(text):
    """``text`` without a leading UTF-8 byte order mark (containerd and CRI-O read a file that starts with one)."""
    return text[1:] if text and text.startswith(BOM) else text


def toml_data(text, path):
    """The plain data of a TOML text (an empty text is an empty table).

    Read with Python's own ``tomllib`` where there is one (3.11 and later): it is many times faster than tomlkit (a
    config of 10 MB of comments takes a fraction of a second instead of seconds), and it reads a few valid layouts
    (some orders of out-of-order tables) that tomlkit refuses. tomlkit reads where there is no ``tomllib``, and says
    what is wrong with a text that does not parse: one :class:`.._errors.FileError` with the line and the column,
    counted from 1 as containerd and Python's JSON errors count them (tomlkit counts columns from 0).
    """
    text = without_bom(text)
    if not text or not text.strip():
        return {}
    if _tomllib is not None:
        try:
            return _tomllib.loads(text)
        except ValueError:
            pass  # tomlkit names the line and the column the way the rest of the module does
    try:
        return plain(tomlkit.parse(text))
    except _TomlParseError as exc:
        raise FileError("invalid TOML: %s" % _POSITION.sub("", str(exc)).rstrip("."), path=path, line=exc.line,
                        column=exc.col + 1)
    except _TomlError as exc:
        raise FileError("invalid TOML: %s" % exc, path=path)
    except (ValueError, KeyError, AttributeError, TypeError, IndexError) as exc:  # tomlkit failing on its own
        raise FileError("cannot be read as TOML (%s: %s)" % (type(exc).__name__, exc), path=path)


def dotted(keys):
    """A TOML dotted key for display: ``plugins."io.containerd.grpc.v1.cri".containerd``."""
    return ".".join(k if re.match(r"^[A-Za-z0-9_-]+$", k) else '"%s"' % k for k in keys)


# --- The default runtime in a TOML tree (a toml.Document or a toml.PlainTree) -----------------------------------------

def set_default(tree, key, settings):
    """Make the default runtime at ``key`` (a path of keys) what ``settings`` asks for (see
    ``RuntimeSettings.default_after``): ours, the user's previous one again, or no setting."""
    current = tree.get(key)
    wanted = settings.default_after(current)
    if wanted == current:
        return
    if wanted:
        tree.set(key, wanted)
    else:
        tree.delete(key)


def restore_default(tree, key, settings):
    """When the default runtime at ``key`` names ours, the user's previous default again, or no setting."""
    if tree.get(key) != settings.name:
        return
    if settings.previous_default:
        tree.set(key, settings.previous_default)
    else:
        tree.delete(key)
