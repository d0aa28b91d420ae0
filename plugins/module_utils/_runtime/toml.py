# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""Edit a TOML file as text: only the lines that change are touched, everything else stays byte for byte.

tomlkit reads the file (values, errors with line and column). Writing goes through text edits, not tomlkit's
serializer, because tomlkit does not reproduce every layout it reads (indented headers under implicit tables come
back re-indented), which would make a second run rewrite an unchanged file. A small scanner finds where each
header and key/value statement sits; :class:`Document` turns ``set``/``delete`` into splices and keeps the data they
mean, and :meth:`Document.render` refuses to return a text that does not parse back to exactly that data.

:class:`PlainTree` offers the same ``get``/``set``/``delete`` on plain data, so one edit function serves both.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json
import re

from collections.abc import Mapping

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import FileError
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.common import (
    BOM, dotted, toml_data, type_name, without_bom, without_empty_tables,
)

try:
    import tomlkit
except ImportError:
    tomlkit = None  # _runtime_common reports it

_BARE = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "\\": "\\", "e": "\x1b"}


# --- Rendering values and keys ---------------------------------------------------------------------------------------

def render_key(key):
    return key if _BARE.match(key) and _BARE.match(key).end() == len(key) else json.dumps(key)


def render_path(path):
    return ".".join(render_key(k) for k in path)


def render_value(value):
    """A value as TOML text on one line (tables inline)."""
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        return "{ %s }" % ", ".join("%s = %s" % (render_key(k), render_value(v)) for k, v in value.items())
    if isinstance(value, list):
        return "[%s]" % ", ".join(render_value(v) for v in value)
    return tomlkit.item(value).as_string()


# --- Scanning --------------------------------------------------------------------------------------------------------

class Header(object):
    def __init__(self, path, start, end, indent, aot):
        self.path = path
        self.start = start  # offset of the line
        self.end = end  # offset after the header line
        self.indent = indent
        self.aot = aot
        self.statements = []


class Statement(object):
    def __init__(self, section, keys, start, key_start, value_start, value_end, end):
        self.section = section
        self.keys = keys
        self.path = section.path + keys if section is not None else keys
        self.start = start
        self.key_start = key_start
        self.value_start = value_start
        self.value_end = value_end
        self.end = end

    @property
    def indent_of(self):
        return self.key_start - self.start


def _skip_ws(text, i):
    while i < len(text) and text[i] in " \t":
        i += 1
    return i


def _line_end(text, i):
    """Offset after the end of the line at ``i`` (after spaces, a comment and the newline)."""
    i = _skip_ws(text, i)
    if i < len(text) and text[i] == "#":
        j = text.find("\n", i)
        i = len(text) if j < 0 else j
    if text.startswith("\r\n", i):
        return i + 2
    if i < len(text) and text[i] == "\n":
        return i + 1
    return i


def _basic_string_end(text, i):
    i += 1
    while i < len(text) and text[i] != '"':
        i += 2 if text[i] == "\\" else 1
    return i + 1


def _multiline_end(text, i, quote):
    j = i + 3
    while True:
        j = text.find(quote * 3, j)
        if j < 0:
            return len(text)
        backslashes = 0
        while quote == '"' and text[j - 1 - backslashes] == "\\":
            backslashes += 1
        if backslashes % 2:
            j += 1
            continue
        end = j + 3
        extra = 0
        while extra < 2 and end < len(text) and text[end] == quote:
            end += 1
            extra += 1
        return end


def _value_end(text, i):
    if text.startswith('"""', i):
        return _multiline_end(text, i, '"')
    if text.startswith("'''", i):
        return _multiline_end(text, i, "'")
    char = text[i] if i < len(text) else ""
    if char == '"':
        return _basic_string_end(text, i)
    if char == "'":
        return text.index("'", i + 1) + 1
    if char in "[{":
        depth = 0
        j = i
        while j < len(text):
            char = text[j]
            if char in "[{":
                depth += 1
                j += 1
            elif char in "]}":
                depth -= 1
                j += 1
                if depth == 0:
                    return j
            elif char in "\"'":
                j = _value_end(text, j)
            elif char == "#":
                newline = text.find("\n", j)
                j = len(text) if newline < 0 else newline
            else:
                j += 1
        return j
    j = i
    while j < len(text) and text[j] not in "\n#":
        j += 1
    while j > i and text[j - 1] in " \t\r":
        j -= 1
    return j


def _decode_basic(body):
    out = []
    i = 0
    while i < len(body):
        char = body[i]
        if char != "\\":
            out.append(char)
            i += 1
            continue
        code = body[i + 1]
        if code in _ESCAPES:
            out.append(_ESCAPES[code])
            i += 2
        else:
            width = {"u": 4, "U": 8, "x": 2}.get(code, 0)
            out.append(chr(int(body[i + 2:i + 2 + width], 16)))
            i += 2 + width
    return "".join(out)


def _key(text, i):
    keys = []
    while True:
        i = _skip_ws(text, i)
        if text.startswith('"', i):
            end = _basic_string_end(text, i)
            keys.append(_decode_basic(text[i + 1:end - 1]))
        elif text.startswith("'", i):
            end = text.index("'", i + 1) + 1
            keys.append(text[i + 1:end - 1])
        else:
            match = _BARE.match(text, i)
            if not match:
                raise ValueError("no key at %d" % i)
            end = match.end()
            keys.append(match.group())
        i = _skip_ws(text, end)
        if i < len(text) and text[i] == ".":
            i += 1
            continue
        return tuple(keys), i


def scan(text):
    """The headers (with their statements) and the root statements of a valid TOML text."""
    root = Header((), 0, 0, "", False)
    headers = []
    section = root
    i = 0
    while i < len(text):
        start = i
        j = _skip_ws(text, i)
        if j >= len(text):
            break
        char = text[j]
        if char in "\r\n#":
            i = _line_end(text, j)
            continue
        if char == "[":
            aot = text.startswith("[[", j)
            path, k = _key(text, j + (2 if aot else 1))
            k = _skip_ws(text, k) + (2 if aot else 1)
            section = Header(path, start, _line_end(text, k), text[start:j], aot)
            headers.append(section)
            i = section.end
            continue
        keys, k = _key(text, j)
        k = _skip_ws(text, k)
        if not text.startswith("=", k):
            raise ValueError("no '=' at %d" % k)
        value_start = _skip_ws(text, k + 1)
        value_end = _value_end(text, value_start)
        statement = Statement(section if section is not root else None, keys, start, j, value_start, value_end,
                              _line_end(text, value_end))
        section.statements.append(statement)
        i = statement.end
    return root, headers


# --- Plain data ------------------------------------------------------------------------------------------------------

def get_in(tree, path):
    for key in path:
        if not isinstance(tree, Mapping) or key not in tree:
            return None
        tree = tree[key]
    return tree


def same(left, right):
    """Equality that tells ``true`` from ``1`` (Python does not), for deciding whether a value must be written."""
    if isinstance(left, bool) or isinstance(right, bool):
        return type(left) is type(right) and left == right
    if isinstance(left, Mapping) and isinstance(right, Mapping):
        return list(left) == list(right) and all(same(left[k], right[k]) for k in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(same(a, b) for a, b in zip(left, right))
    return type(left) is type(right) and left == right


def check_tables(tree, path, where):
    """Every step of ``path`` (but the last) must be a table where it exists."""
    for depth in range(len(path)):
        value = get_in(tree, path[:depth + 1])
        if value is None:
            return
        if depth < len(path) - 1 and not isinstance(value, Mapping):
            raise FileError("must be a table, not %s" % type_name(value), path=where, field=dotted(path[:depth + 1]))


class PlainTree(object):
    """``get``/``set``/``delete`` on plain data (a dict), the same calls :class:`Document` takes."""

    def __init__(self, data, path=None):
        self.data = data
        self.path = path

    def get(self, path, default=None):
        value = get_in(self.data, path)
        return default if value is None else value

    def set(self, path, value, after=None):  # pylint: disable=unused-argument  # placement means nothing here
        check_tables(self.data, path, self.path)
        if same(self.get(path), value):
            return False
        tree = self.data
        for key in path[:-1]:
            tree = tree.setdefault(key, {})
        tree[path[-1]] = copy.deepcopy(value)
        return True

    def delete(self, path):
        parent = get_in(self.data, path[:-1]) if path[:-1] else self.data
        if not isinstance(parent, Mapping) or path[-1] not in parent:
            return False
        del parent[path[-1]]
        return True


# --- The text editor ---------------------------------------------------------------------------------------------

class Document(object):
    """A TOML text and edits to it. ``get`` sees the edits made so far; ``render`` applies them to the text."""

    def __init__(self, text, path):
        text = text or ""
        # A byte order mark and CRLF line ends are set aside for the edit and given back by render, so that the
        # lines added end like the file's own (a file with mixed line ends is edited as it is).
        self.bom = text.startswith(BOM)
        text = without_bom(text)
        self.crlf = "\r\n" in text and "\n" not in text.replace("\r\n", "")
        self.text = text.replace("\r\n", "\n") if self.crlf else text
        self.original = text
        self.path = path
        self.data = toml_data(self.text, path)
        try:
            self.root, self.headers = scan(self.text)
        except (ValueError, IndexError):
            raise FileError("has a layout this module cannot edit safely", path=path)
        self.statements = list(self.root.statements) + [s for h in self.headers for s in h.statements]
        self._edits = []  # (start, end, text, order)
        self._blocks = {}  # table path -> pending new [header] block (a list of lines)
        self._inline = {}  # id(statement) -> statement whose inline table is re-rendered from the data

    # reading
    def get(self, path, default=None):
        value = get_in(self.data, path)
        return default if value is None else value

    # helpers on the scanned text
    def _header(self, path):
        return next((h for h in self.headers if h.path == path and not h.aot), None)

    def _statement(self, path):
        return next((s for s in self.statements if s.path == path), None)

    def _inline_owner(self, path):
        """The statement whose inline-table value holds ``path`` (a proper prefix of it is the statement's path)."""
        for statement in self.statements:
            n = len(statement.path)
            if n < len(path) and path[:n] == statement.path and self.text[statement.value_start] == "{":
                return statement
        return None

    def _dotted_owner(self, table):
        """A statement that defines ``table`` through a dotted key, e.g. ``containerd.runtimes.runc = ...``."""
        for statement in self.statements:
            base = statement.section.path if statement.section is not None else ()
            if len(table) > len(base) and statement.path[:len(table)] == table and len(statement.path) > len(table):
                return statement
        return None

    def _defined_by_dots(self, table):
        """The statement defining ``table`` or its nearest such ancestor through dotted keys, or ``None``."""
        for depth in range(len(table), 0, -1):
            owner = self._dotted_owner(table[:depth])
            if owner is not None:
                return owner
        return None

    def _edit(self, start, end, text):
        self._edits.append((start, end, text, len(self._edits)))

    # indentation the file already uses
    def _key_step(self):
        for header in self.headers:
            for statement in header.statements:
                indent = self.text[statement.start:statement.key_start]
                if indent.startswith(header.indent):
                    return indent[len(header.indent):]
        return ""

    def _header_indent(self, depth):
        """The indentation of a [header] of ``depth`` keys: as the file has it, or extrapolated from its steps."""
        known = {}
        for header in self.headers:
            known.setdefault(len(header.path), header.indent)
        if depth in known:
            return known[depth]
        below = [d for d in known if d < depth]
        if not below:
            return ""
        base = max(below)
        return known[base] + _header_step(known) * (depth - base)

    def _section_end(self, header):
        """Where a section's own content ends: after its last statement, then after blank lines."""
        end = header.statements[-1].end if header.statements else header.end
        while True:
            line_end = self.text.find("\n", end)
            line = self.text[end:] if line_end < 0 else self.text[end:line_end + 1]
            if line and not line.strip():
                end += len(line)
                continue
            return end

    def _anchor(self, table, after=None):
        """Where a new [header] block for ``table`` goes: before the first header of a table under it (a parent
        comes before its children: tomlkit cannot read some layouts that are the other way round), else after
        ``after``'s sections, else after the sections of its nearest ancestor that has any, else at the end."""
        children = [h for h in self.headers if h.path[:len(table)] == table]
        if children:
            return min(children, key=lambda h: h.start).start
        prefixes = ([after] if after else []) + [table[:d] for d in range(len(table) - 1, 0, -1)]
        for prefix in prefixes:
            family = [h for h in self.headers if h.path[:len(prefix)] == prefix]
            if family:
                return self._section_end(max(family, key=lambda h: h.start))
        return len(self.text)

    # writing
    def set(self, path, value, after=None):
        """Set ``path`` to ``value`` (a table for a new table); nothing happens when it already holds ``value``.

        ``after`` (a table path) places a new table after that table's sections, to keep related tables together.
        """
        check_tables(self.data, path, self.path)
        current = get_in(self.data, path)
        if same(current, value):
            return False
        if isinstance(current, Mapping) and isinstance(value, Mapping):
            raise ValueError("set() replaces scalars and creates tables; %s exists" % dotted(path))
        PlainTree(self.data).set(path, value)
        statement = self._statement(path)
        if statement is not None and not isinstance(value, Mapping):
            self._edit(statement.value_start, statement.value_end, render_value(value))
            return True
        owner = self._inline_owner(path)
        if owner is not None:
            self._inline[id(owner)] = owner
            return True
        table, key = path[:-1], path[-1]
        if table in self._blocks:
            self._blocks[table].append((key, value))
            return True
        header = self._header(table) if table else None
        if header is not None and not isinstance(value, Mapping):
            self._insert_key(header, header.statements, key, value)
            return True
        if not table:
            if isinstance(value, Mapping):
                self._new_block(path, value, after)
            else:
                self._insert_key(self.root, self.root.statements, key, value)
            return True
        dotted_owner = self._defined_by_dots(table)
        if dotted_owner is not None:
            base = dotted_owner.section.path if dotted_owner.section is not None else ()
            neighbours = [s for s in self.statements if s.section is dotted_owner.section and s.path[:len(table)] == table]
            last = max(neighbours or [dotted_owner], key=lambda s: s.end)
            line = "%s%s = %s\n" % (self.text[last.start:last.key_start], render_path(path[len(base):]), render_value(value))
            self._edit(last.end, last.end, self._newline_before(last.end) + line)
            return True
        if isinstance(value, Mapping):
            self._new_block(path, value, after)
        else:
            self._blocks[table] = [(key, value)]
            at = self._anchor(table)
            self._edit(at, at, ("block", table))
        return True

    def _newline_before(self, at):
        """``"\\n"`` when offset ``at`` is not at the start of a line (a last line without its newline)."""
        return "" if at == 0 or self.text[at - 1] == "\n" else "\n"

    def _insert_key(self, header, statements, key, value):
        """A new ``key = value`` line after the last statement of a section, indented like it."""
        line = "%s = %s\n" % (render_key(key), render_value(value))
        if statements:
            last = statements[-1]
            self._edit(last.end, last.end, self._newline_before(last.end) + self.text[last.start:last.key_start] + line)
        elif header.path:
            self._edit(header.end, header.end, self._newline_before(header.end) + header.indent + self._key_step() + line)
        else:  # the root table has no key yet: before the first header
            at = min([h.start for h in self.headers] or [len(self.text)])
            self._edit(at, at, self._newline_before(at) + line + ("\n" if at < len(self.text) else ""))

    def _new_block(self, path, value, after):
        self._blocks[path] = list(value.items())
        at = self._anchor(path, after)
        self._edit(at, at, ("block", path))

    def delete(self, path):
        """Delete ``path`` (a key or a whole table with its sub-tables) when present."""
        current = get_in(self.data, path)
        if current is None:
            return False
        PlainTree(self.data).delete(path)
        owner = self._inline_owner(path)
        if owner is not None:
            self._inline[id(owner)] = owner
            return True
        statement = self._statement(path)
        if statement is not None:
            self._edit(statement.start, statement.end, "")
            self._prune(statement.section, statement)
            return True
        removed = False
        for header in self.headers:
            if header.path[:len(path)] == path:
                self._edit(header.start, self._section_end(header), "")
                removed = True
        for statement in self.statements:
            if statement.path[:len(path)] == path and not (statement.section is not None and statement.section.path[:len(path)] == path):
                self._edit(statement.start, statement.end, "")
                removed = True
        if not removed:
            raise FileError("cannot find where %s is defined" % dotted(path), path=self.path)
        return True

    def _prune(self, section, deleted):
        """A [header] left with nothing in it or under it (not even a comment) by this deletion goes too."""
        if section is None or get_in(self.data, section.path) or any(s is not deleted for s in section.statements):
            return
        if any(h is not section and h.path[:len(section.path)] == section.path for h in self.headers):
            return
        end = self._section_end(section)
        rest = self.text[section.end:deleted.start] + self.text[deleted.end:end]
        if not rest.strip():
            self._edit(section.start, end, "")

    def append(self, path, item):
        """Append ``item`` to the array at ``path`` (created when missing)."""
        current = get_in(self.data, path)
        if current is None:
            return self.set(path, [item])
        if not isinstance(current, list):
            raise FileError("must be an array, not %s" % type_name(current), path=self.path, field=dotted(path))
        statement = self._statement(path)
        PlainTree(self.data).set(path, current + [item])
        if statement is None:
            owner = self._inline_owner(path)
            if owner is None:
                raise FileError("cannot find where %s is defined" % dotted(path), path=self.path)
            self._inline[id(owner)] = owner
            return True
        elements = _array_elements(self.text, statement.value_start, statement.value_end)
        close = statement.value_end - 1
        if not elements:
            self._edit(statement.value_start, statement.value_end, render_value([item]))
        elif "\n" not in self.text[statement.value_start:statement.value_end]:
            last_end, comma = elements[-1][1], elements[-1][2]
            at = comma + 1 if comma is not None else last_end
            self._edit(at, at, "%s %s" % ("" if comma is not None else ",", render_value(item)))
        else:
            first_start, last_end, comma = elements[0][0], elements[-1][1], elements[-1][2]
            line_start = self.text.rfind("\n", 0, first_start) + 1
            indent = self.text[line_start:first_start]
            if comma is None:
                self._edit(last_end, last_end, ",")
            after = self.text.find("\n", comma if comma is not None else last_end)
            after = close if after < 0 or after > close else after + 1
            self._edit(after, after, "%s%s,\n" % (indent, render_value(item)))
        return True

    def remove(self, path, item):
        """Remove every ``item`` from the array at ``path``; the array stays (maybe empty)."""
        current = get_in(self.data, path)
        if not isinstance(current, list) or item not in current:
            return False
        statement = self._statement(path)
        PlainTree(self.data).set(path, [v for v in current if v != item])
        if statement is None:
            owner = self._inline_owner(path)
            if owner is None:
                raise FileError("cannot find where %s is defined" % dotted(path), path=self.path)
            self._inline[id(owner)] = owner
            return True
        value = self.text[statement.value_start:statement.value_end]
        if "\n" in value:
            lines = value.split("\n")
            wanted = re.compile(r"^\s*%s\s*,?\s*(#.*)?$" % re.escape(render_value(item)))
            kept = [line for line in lines if not wanted.match(line)]
            if toml_data("a = %s" % "\n".join(kept), self.path).get("a") == get_in(self.data, path):
                self._edit(statement.value_start, statement.value_end, "\n".join(kept))
                return True
        self._edit(statement.value_start, statement.value_end, render_value(get_in(self.data, path)))
        return True

    # output
    def _render_block(self, path, items):
        lines = []

        def emit(table, entries):
            scalars = [(k, v) for k, v in entries if not isinstance(v, Mapping)]
            tables = [(k, v) for k, v in entries if isinstance(v, Mapping)]
            head = self._header_indent(len(table))
            if scalars or not tables:
                lines.append("%s[%s]\n" % (head, render_path(table)))
                for key, value in scalars:
                    lines.append("%s%s%s = %s\n" % (head, self._key_step(), render_key(key), render_value(value)))
            for key, value in tables:
                if lines and lines[-1] != "\n":
                    lines.append("\n")
                emit(table + (key,), list(value.items()))

        emit(path, items)
        return "".join(lines)

    def render(self):
        """The edited text; a text that would not parse back to the data the edits mean is refused."""
        edits = []
        blocks_at = set()
        ordered = sorted(self._edits, key=lambda e: (e[0], _block_path(e[2]), e[3]))
        last_block_at = dict((e[0], i) for i, e in enumerate(ordered) if isinstance(e[2], tuple))
        for index, (start, end, text, order) in enumerate(ordered):
            order = (_block_path(text), order)
            if isinstance(text, tuple):
                block = self._render_block(text[1], self._blocks[text[1]])
                before = self.text[:start]
                if start in blocks_at or (before.endswith("\n") and not before.endswith("\n\n")):
                    lead = "\n"
                elif before and not before.endswith("\n"):
                    lead = "\n\n"
                else:
                    lead = ""
                blocks_at.add(start)
                trail = "\n" if last_block_at[start] == index and start < len(self.text) and self.text[start] != "\n" else ""
                text = lead + block + trail
            edits.append((start, end, text, order))
        for statement in self._inline.values():
            edits.append((statement.value_start, statement.value_end, render_value(get_in(self.data, statement.path)), ((), len(edits))))
        edits = _merge(edits)
        out = self.text
        # From the end backwards. At one offset: replacements before insertions, then insertions last to first, new
        # tables after keys and parents before children (orders are (block path, call number)).
        for start, end, text, order in sorted(edits, key=lambda e: (e[0], e[0] != e[1], e[3]), reverse=True):
            out = out[:start] + text + out[end:]
        if any(end == len(self.text) and start < end and text == "" for start, end, text, _o in edits):
            out = out.rstrip("\n") + "\n" if out.strip() else ""
        try:
            reparsed = toml_data(out, self.path)
        except FileError:
            reparsed = None
        if reparsed is None or without_empty_tables(reparsed) != without_empty_tables(self.data):
            raise FileError("cannot be edited without changing other settings (an unusual layout of the tables "
                            "involved); edit it by hand or rewrite those tables with [table] headers", path=self.path)
        if out == self.text:
            out = self.original  # nothing changed: the text as it came
        elif self.crlf:
            out = out.replace("\n", "\r\n")
        return (BOM + out) if self.bom else out


def _block_path(text):
    """The table path of a pending [header] block edit, ``()`` for a plain text edit."""
    return text[1] if isinstance(text, tuple) else ()


def _header_step(known):
    """The indentation one more key adds to a [header], from two header depths the file uses."""
    depths = sorted(known)
    for low, high in zip(depths, depths[1:]):
        extra = len(known[high]) - len(known[low])
        if known[high].startswith(known[low]) and extra > 0 and extra % (high - low) == 0:
            width = extra // (high - low)
            return known[high][len(known[low]):len(known[low]) + width]
    return ""


def _merge(edits):
    """Overlapping deletions become one; an insertion inside a deleted range is dropped."""
    deletions = sorted((e for e in edits if e[0] != e[1]), key=lambda e: e[0])
    merged = []
    for edit in deletions:
        if merged and edit[0] < merged[-1][1] and edit[2] == "" and merged[-1][2] == "":
            last = merged[-1]
            merged[-1] = (last[0], max(last[1], edit[1]), "", last[3])
        else:
            merged.append(edit)
    inserts = [e for e in edits if e[0] == e[1] and not any(d[0] < e[0] < d[1] for d in merged)]
    return merged + inserts


def _array_elements(text, start, end):
    """(start, end, comma offset or None) of each element of the array text[start:end]."""
    elements = []
    i = start + 1
    close = end - 1
    while i < close:
        char = text[i]
        if char in " \t\r\n,":
            i += 1
            continue
        if char == "#":
            newline = text.find("\n", i)
            i = close if newline < 0 else newline
            continue
        value_end = _value_end(text, i)
        value_end = min(value_end, close)
        j = value_end
        while j < close and text[j] in " \t\r\n":
            j += 1
        comma = j if j < close and text[j] == "," else None
        elements.append((i, value_end, comma))
        i = (comma + 1) if comma is not None else j
    return elements


def render_tree(data, path):
    """TOML text for plain data (a new file, a drop-in): scalars first, then one [header] per table."""
    document = Document("", path)
    root_scalars = [(k, v) for k, v in data.items() if not isinstance(v, Mapping)]
    lines = ["%s = %s\n" % (render_key(k), render_value(v)) for k, v in root_scalars]
    for key, value in data.items():
        if isinstance(value, Mapping):
            block = document._render_block((key,), list(value.items()))  # pylint: disable=protected-access
            if block:
                lines.append("\n" + block)
    out = "".join(lines).lstrip("\n")
    reparsed = toml_data(out, path)
    if without_empty_tables(reparsed) != without_empty_tables(data):
        raise FileError("cannot be written as TOML faithfully", path=path)
    return out
