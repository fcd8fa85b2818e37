"""db/native.py: statements converted once to PostgreSQL's $n placeholders, without their comments.
Pure text; tests/test_native_statements.py runs the converted statements on a server."""

from __future__ import annotations

import pytest

from memoria_pg.db import load_sql
from memoria_pg.db.native import native


def test_placeholders_become_numbered_in_first_use_order_and_repeat_their_number():
    s = native("SELECT %(b)s, %(a)s, %(b)s::int", "t.sql")
    assert s.names == ("b", "a")
    assert s.text.splitlines()[1] == "SELECT $1, $2, $1::int"
    assert s.args({"a": 1, "b": 2, "unused": 3}) == [2, 1]


def test_comments_go_and_the_first_line_names_the_source():
    text = "-- header\nSELECT 1 -- trailing\n/* block\n spanning */ + 2\n\n  -- indented\nFROM t"
    s = native(text, "sql/x.sql")
    assert s.text == "/* memoria-pg: sql/x.sql */\nSELECT 1\n  + 2\nFROM t"


def test_strings_and_identifiers_keep_what_looks_like_a_comment():
    text = """SELECT '-- not a comment', 'it''s', E'a\\'-- b', "col--name", %(yes)s"""
    s = native(text, "t.sql")
    assert s.names == ("yes",)
    assert "'-- not a comment', 'it''s', E'a\\'-- b', \"col--name\", $1" in s.text


def test_placeholders_inside_strings_are_read_as_psycopg_reads_them():
    assert native("SELECT '%(a)s %%'", "t.sql").text.endswith("'$1 %'")


def test_a_doubled_percent_is_one_percent():
    assert native("SELECT 'x' LIKE 'a' || '%%'", "t.sql").text.endswith("'a' || '%'")


@pytest.mark.parametrize("text", ["SELECT 5 % 2", "SELECT $1", "SELECT $$x$$", "SELECT '50%'"])
def test_what_it_cannot_read_is_refused_with_its_line(text):
    with pytest.raises(ValueError, match=r"^t\.sql, line 2: "):
        native("SELECT 1,\n" + text.removeprefix("SELECT "), "t.sql")


def test_a_missing_parameter_is_named():
    with pytest.raises(KeyError, match=r"\['b'\]"):
        native("SELECT %(a)s, %(b)s", "t.sql").args({"a": 1})


def test_the_hot_statements_convert_and_lose_only_comments():
    from memoria_pg.query.candidates import _v3_text

    for source, text in (("sql/final_candidates.sql", load_sql("final_candidates")), ("v3", _v3_text())):
        s = native(text, source)
        assert "--" not in s.text and "%(" not in s.text
        assert len(s.text) < len(text) * 0.8  # the comments were most of the text
        assert set(s.names) == {n for n in s.names if f"%({n})s" in text}


def test_every_shard_filtered_worker_writes_its_filter_for_the_shard():
    """A typed shard's statement keeps the equality (a generic plan prunes by it), the whole table's
    has no filter; a worker whose file lost the filter fails loudly (workers/base.py, shard_sql)."""
    from memoria_pg.core.types import Shard
    from memoria_pg.query.workers import DEFAULT_WORKERS
    from memoria_pg.query.workers.base import SHARD_FILTER, shard_sql

    filtered = [w for w in DEFAULT_WORKERS.values() if w.shard_filtered]
    assert {w.name for w in filtered} == {"vector", "bm25", "phrase", "temporal"}
    names = [w.sql_name for w in filtered] + ["workers/vector_exact", "workers/vector_exact_bounded"]
    for name in names:
        typed, whole = shard_sql(name, Shard("fact")), shard_sql(name, Shard(None))
        assert not SHARD_FILTER.search(typed) and not SHARD_FILTER.search(whole)
        assert ".memory_type = %(memory_type)s::text" in typed and "%(memory_type)s" not in whole


def test_a_worker_file_without_its_shard_filter_fails_loudly(monkeypatch):
    from memoria_pg.query.workers import base

    monkeypatch.setattr(base, "load_sql", lambda name: "SELECT 1")
    with pytest.raises(RuntimeError, match=r"sql/workers/x\.sql lost its shard filter"):
        base._shard_sql.__wrapped__("workers/x", True)
