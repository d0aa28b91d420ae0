# SPDX-License-Identifier: GPL-3.0-or-later
"""The TOML text editor: the scanner finds statements in any valid layout, edits touch only their own lines."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest
import tomlkit
from hypothesis import given, settings as hsettings, strategies as st

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import FileError
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime import toml
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.common import plain, toml_data, without_empty_tables

PATH = "/etc/x.toml"

TRICKY = '''# a comment with [brackets] and = signs
title = """
[not.a.header]
key = "not a key"
"""  # trailing comment
literal = \'\'\'
also [not] a header\'\'\'
"quoted.key" = 'value # not a comment'
'single' = "esc \\" quote"
array = [
  "a", # comment ]
  [1, 2],
  { x = 1 },
]
date = 1979-05-27 07:32:00Z
dotted . spaced = 1

  [ table . "with.dot" ]  # comment
  inner = { a = [1, { b = "}" }] }
  "\\u0041" = 1

[[aot]]
n = 1
[[aot]]
n = 2
'''


def test_scan_finds_statements_not_text_inside_strings():
    root, headers = toml.scan(TRICKY)
    assert [s.path for s in root.statements] == [
        ("title",), ("literal",), ("quoted.key",), ("single",), ("array",), ("date",), ("dotted", "spaced")]
    assert [(h.path, h.aot) for h in headers] == [(("table", "with.dot"), False), (("aot",), True), (("aot",), True)]
    assert [s.path for s in headers[0].statements] == [("table", "with.dot", "inner"), ("table", "with.dot", "A")]
    title = root.statements[0]
    assert TRICKY[title.value_start:title.value_end].endswith('"""') and TRICKY[title.end - 1] == "\n"


def test_set_replaces_only_the_value():
    doc = toml.Document(TRICKY, PATH)
    doc.set(("table", "with.dot", "inner"), 5)
    doc.set(("date",), "today")
    out = doc.render()
    assert out == TRICKY.replace('inner = { a = [1, { b = "}" }] }', "inner = 5").replace("date = 1979-05-27 07:32:00Z", 'date = "today"')


def test_set_adds_a_key_after_the_last_one_of_its_table_with_its_indentation():
    doc = toml.Document(TRICKY, PATH)
    doc.set(("table", "with.dot", "new"), True)
    out = doc.render()
    assert '  "\\u0041" = 1\n  new = true\n' in out


def test_new_tables_go_before_their_children_and_after_their_family():
    text = '[a.b.c]\nx = 1\n\n[z]\ny = 2\n'
    doc = toml.Document(text, PATH)
    doc.set(("a", "b", "k"), "v")
    doc.set(("a", "b", "c2"), {"q": 1})
    assert doc.render() == '[a.b]\nk = "v"\n\n[a.b.c2]\nq = 1\n\n[a.b.c]\nx = 1\n\n[z]\ny = 2\n'  # c2 joins the new [a.b]
    doc = toml.Document(text, PATH)
    doc.set(("a", "b", "c2"), {"q": 1})
    assert doc.render() == '[a.b.c]\nx = 1\n\n[a.b.c2]\nq = 1\n\n[z]\ny = 2\n'


def test_delete_a_table_with_its_sub_tables():
    text = '[a]\nx = 1\n\n[a.t]\ny = 1\n\n[a.t.options]\nz = 1\n\n# about b\n[b]\nw = 1\n'
    doc = toml.Document(text, PATH)
    doc.delete(("a", "t"))
    assert doc.render() == '[a]\nx = 1\n\n# about b\n[b]\nw = 1\n'


def test_delete_at_the_end_leaves_one_newline():
    text = '[a]\nx = 1\n\n[a.t]\ny = 1\n'
    doc = toml.Document(text, PATH)
    doc.delete(("a", "t"))
    assert doc.render() == '[a]\nx = 1\n'


def test_delete_the_last_key_of_a_header_drops_the_header():
    text = '[a]\nx = 1\n\n[b]\nk = "v"\n\n[c]\nz = 1\n'
    doc = toml.Document(text, PATH)
    doc.delete(("b", "k"))
    assert doc.render() == '[a]\nx = 1\n\n[c]\nz = 1\n'
    commented = '[b]\n# keep me\nk = "v"\n'
    doc = toml.Document(commented, PATH)
    doc.delete(("b", "k"))
    assert doc.render() == '[b]\n# keep me\n'


def test_dotted_and_inline_tables_are_edited_in_their_own_style():
    text = '[p]\nc.d = 1\nc.e.f = 2\ng = { h = 1 }\n'
    doc = toml.Document(text, PATH)
    doc.set(("p", "c", "new"), {"k": "v"})
    doc.set(("p", "g", "i"), 2)
    assert doc.render() == '[p]\nc.d = 1\nc.e.f = 2\nc.new = { k = "v" }\ng = { h = 1, i = 2 }\n'


@pytest.mark.parametrize("text, expected", [
    ('a = []\n', 'a = ["x"]\n'),
    ('a = ["p"]\n', 'a = ["p", "x"]\n'),
    ('a = ["p",]\n', 'a = ["p", "x"]\n'),
    ('a = [\n  "p",  # why\n  "q"\n]\n', 'a = [\n  "p",  # why\n  "q",\n  "x",\n]\n'),
    ('a = [\n    "p",\n]\n', 'a = [\n    "p",\n    "x",\n]\n'),
    ('b = 1\n', 'b = 1\na = ["x"]\n'),
    ('[t]\nk = 1\n', 'a = ["x"]\n\n[t]\nk = 1\n'),
    ('', 'a = ["x"]\n'),
])
def test_append_to_an_array(text, expected):
    doc = toml.Document(text, PATH)
    doc.append(("a",), "x")
    assert doc.render() == expected


@pytest.mark.parametrize("text, expected", [
    ('a = ["x"]\n', 'a = []\n'),
    ('a = ["p", "x", "q", "x"]\n', 'a = ["p", "q"]\n'),
    ('a = [\n  "p",\n  "x",  # ours\n]\n', 'a = [\n  "p",\n]\n'),
])
def test_remove_from_an_array(text, expected):
    doc = toml.Document(text, PATH)
    doc.remove(("a",), "x")
    assert doc.render() == expected


def test_an_edit_that_would_not_read_back_is_refused(monkeypatch):
    monkeypatch.setattr(toml, "render_value", lambda value: "2 3")  # garbage
    doc = toml.Document('[a]\nx = 1\n', PATH)
    doc.set(("a", "y"), 2)
    with pytest.raises(FileError, match="cannot be edited without changing other settings"):
        doc.render()


def test_wrong_types_on_the_way_are_named():
    doc = toml.Document('a = 1\n', PATH)
    with pytest.raises(FileError, match="field 'a'"):
        doc.set(("a", "b"), 1)


def test_render_tree_writes_a_fresh_file():
    data = {"version": 2, "plugins": {"p": {"k": 1, "t": {"u": {}}, "s": {"v": [1, 2]}}}}
    text = toml.render_tree(data, PATH)
    assert text == 'version = 2\n\n[plugins.p]\nk = 1\n\n[plugins.p.t.u]\n\n[plugins.p.s]\nv = [1, 2]\n'
    assert plain(tomlkit.parse(text)) == data


def test_plain_tree_has_the_same_calls():
    tree = toml.PlainTree({"a": {"b": 1}})
    assert tree.set(("a", "c", "d"), 2) and not tree.set(("a", "b"), 1)
    assert tree.delete(("a", "b")) and not tree.delete(("a", "zz"))
    assert tree.data == {"a": {"c": {"d": 2}}} and tree.get(("a", "c", "d")) == 2 and tree.get(("x",), 7) == 7


def test_toml_data_falls_back_to_tomllib_where_tomlkit_fails():
    text = '[a.b.c]\n\n[a]\nx = 1\n\n[a.b.c.d]\ny = 2\n'  # valid TOML that tomlkit 0.15 cannot read
    try:
        import tomllib  # noqa: F401
    except ImportError:
        pytest.skip("no tomllib before Python 3.11: the fallback cannot be exercised")
    assert toml_data(text, PATH) == {"a": {"x": 1, "b": {"c": {"d": {"y": 2}}}}}


_keys = st.sampled_from(["a", "b", "c", "x.y", "with space", "ü"])
_values = st.one_of(st.integers(0, 9), st.text(max_size=5), st.booleans(), st.lists(st.integers(0, 3), max_size=3))


@hsettings(max_examples=300, deadline=None)
@given(st.dictionaries(_keys, st.dictionaries(_keys, _values, max_size=3), max_size=3), _keys, _keys, _values)
def test_property_set_then_delete_touches_nothing_else(tree, table, key, value):
    text = toml.render_tree(tree, PATH)
    doc = toml.Document(text, PATH)
    existed = key in tree.get(table, {})
    doc.set((table, key), value)
    out = doc.render()
    assert toml_data(out, PATH) == dict(tree, **{table: dict(tree.get(table, {}), **{key: value})})
    if existed:
        return
    doc = toml.Document(out, PATH)
    doc.delete((table, key))
    back = doc.render()
    assert without_empty_tables(toml_data(back, PATH)) == without_empty_tables(tree)
    assert back.strip() == text.strip() or not tree.get(table)  # an empty [table] we wrote a key into may go
