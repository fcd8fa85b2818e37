"""Ingestion on a real server: COPY batches, idempotency, atomicity, BM25 statistics, entities,
attributes, supplied vectors, tenants; and the JSONL/CSV readers."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from pathlib import Path

import numpy as np
import psycopg
import pytest
from pgvector.psycopg import register_vector

from memoria_pg.core.embedding import CONTEXT_WEIGHT
from memoria_pg.core.text import tokenize
from memoria_pg.core.types import MemoryRecord
from memoria_pg.errors import InputError
from memoria_pg.ingest import Ingestor, RecordRules
from memoria_pg.ingest.files import read_records
from memoria_pg.system import MemorySystem

WRITTEN_TABLES = (
    "memories",
    "memory_terms",
    "entities",
    "memory_entities",
    "entity_edges",
    "memory_attributes",
    "bm25_docs",
    "bm25_terms",
)


def counts(dsn: str) -> dict[str, int]:
    """Rows per table over all tenants (the superuser bypasses row-level security)."""
    with psycopg.connect(dsn) as conn:
        return {t: conn.execute(f"SELECT count(*) FROM memoria.{t}").fetchone()[0] for t in WRITTEN_TABLES}


def rows(dsn: str, query: str, params=()) -> list[tuple]:
    with psycopg.connect(dsn) as conn:
        register_vector(conn)
        return conn.execute(query, params).fetchall()


def unit_vectors(n: int, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, 384)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


# -- store / store_many / idempotency ----------------------------------------------------------------


def test_store_returns_the_new_id_then_none_for_the_same_content(system, dsn):
    first = system.store("The sky over Lisbon was violet.", tenant="t")
    assert isinstance(first, int)
    assert system.store("The sky over Lisbon was violet.", tenant="t") is None
    assert rows(dsn, "SELECT id, content FROM memoria.memories") == [(first, "The sky over Lisbon was violet.")]


def test_store_many_is_idempotent_on_content_hash(system, dsn):
    records = [{"content": f"note number {i} about gardening", "tenant": "t"} for i in range(5)]
    first = system.store_many(records)
    assert (first.inserted, first.duplicates) == (5, 0)
    before = counts(dsn)

    second = system.store_many(records + [{"content": "note   number 0 about gardening", "tenant": "t"}])
    assert (second.inserted, second.duplicates) == (0, 6)  # whitespace differences hash the same
    assert second.ids == [None] * 6
    assert second.existing == [*first.ids, first.ids[0]]  # each duplicate names the memory it repeats
    assert counts(dsn) == before


def test_a_duplicate_names_the_memory_it_repeats(system, dsn):
    """StoreResult.existing: for a record already stored (before, or earlier in the same call), the id
    of that memory; a record of another tenant or type with the same text is not a duplicate."""
    stored = system.store("Maya's favourite colour is teal.", tenant="t")
    result = system.store_many(
        [
            {"content": "Maya's favourite colour is teal.", "tenant": "t"},  # stored before
            {"content": "Jonas lives in Porto.", "tenant": "t"},  # new
            {"content": "Jonas lives in Porto.", "tenant": "t"},  # repeats the one above
            {"content": "Maya's favourite colour is teal.", "tenant": "u"},  # another tenant: new
            {"content": "Maya's favourite colour is teal.", "tenant": "t", "memory_type": "fact"},  # another type
        ],
        batch_size=2,
    )
    jonas = result.ids[1]
    assert result.ids[0] is None and result.ids[2] is None and None not in (jonas, result.ids[3], result.ids[4])
    assert result.existing == [stored, None, jonas, None, None]
    assert (result.inserted, result.duplicates) == (3, 2)


def test_store_many_without_ids_keeps_the_counts_only(system, dsn):
    records = [{"content": f"bulk note {i} about the harbour", "tenant": "t"} for i in range(7)]
    result = system.store_many(records + records[:2], batch_size=3, return_ids=False)
    assert (result.inserted, result.duplicates, result.ids) == (7, 2, [])
    assert counts(dsn)["memories"] == 7


def test_store_many_is_idempotent_on_external_id(system, dsn):
    system.store_many([{"content": "version one", "external_id": "doc-1", "tenant": "t"}])
    result = system.store_many([{"content": "version two, edited", "external_id": "doc-1", "tenant": "t"}])
    assert (result.inserted, result.duplicates) == (0, 1)
    assert rows(dsn, "SELECT content, external_id FROM memoria.memories") == [("version one", "doc-1")]


def test_duplicates_inside_one_batch_are_stored_once(system, dsn):
    result = system.store_many([{"content": "twice"}, {"content": "twice"}, {"content": "once"}])
    assert (result.inserted, result.duplicates) == (2, 1)
    assert counts(dsn)["memories"] == 2


# -- atomicity ---------------------------------------------------------------------------------------

FUTURE = (dt.datetime.now(dt.UTC) + dt.timedelta(days=30)).isoformat()
BAD_RECORDS = {
    "unknown memory type": ({"content": "x", "memory_type": "nope"}, "unknown memory_type"),
    "importance high": ({"content": "x", "importance": "high"}, "importance"),
    "importance out of range": ({"content": "x", "importance": 1.5}, "importance"),
    "NUL in content": ({"content": "a\x00b"}, "NUL"),
    "NUL in metadata": ({"content": "x", "metadata": {"note": "a\x00b"}}, "NUL"),
    "short embedding": ({"content": "x", "embedding": [0.1] * 10}, "embedding"),
    "future created_at": ({"content": "x", "created_at": FUTURE}, "future"),
    "empty content": ({"content": "   "}, "empty"),
    "unknown field": ({"content": "x", "colour": "red"}, "unknown fields"),
}


@pytest.mark.parametrize("bad, message", BAD_RECORDS.values(), ids=BAD_RECORDS.keys())
def test_a_bad_record_fails_the_whole_batch(system, dsn, bad, message):
    batch = [
        {"content": "Alice's favourite colour is blue", "tenant": "a"},
        {"content": "Bob met Carol in Rome", "tenant": "b"},
        {**bad, "tenant": "a"},
    ]
    with pytest.raises(InputError, match=message) as info:
        system.store_many(batch)
    assert "record 3" in str(info.value)
    assert counts(dsn) == dict.fromkeys(WRITTEN_TABLES, 0)


def test_each_batch_is_all_or_nothing(system, dsn):
    records = [{"content": f"entry {i}"} for i in range(4)] + [{"content": "late", "importance": "high"}]
    with pytest.raises(InputError, match="record 5"):
        system.store_many(records, batch_size=3)
    assert counts(dsn)["memories"] == 3  # the first batch committed, the second wrote nothing


def test_a_failure_while_writing_rolls_back_every_tenant_of_the_batch(system, dsn):
    def fail_for_b(conn, tenant):  # runs inside the batch transaction, after each tenant's inserts
        if tenant == "b":
            raise RuntimeError("graph mirror unavailable")

    rules = RecordRules(
        memory_types=system.memory_types, default_type="general", default_tenant="default", dim=384, max_chars=1000
    )
    ingestor = Ingestor(system.db, embedder=system.embedder, rules=rules, k1=1.2, b=0.75, graph_writer=fail_for_b)
    with pytest.raises(RuntimeError):
        ingestor.store_batch(
            [
                {"content": "Ada Lovelace wrote notes", "tenant": "a"},
                {"content": "Grace Hopper found a bug", "tenant": "b"},
            ]
        )
    assert counts(dsn) == dict.fromkeys(WRITTEN_TABLES, 0)


# -- the COPY path and what it maintains -------------------------------------------------------------


def test_copy_rows_count_every_staged_row(system, dsn):
    result = system.store_many(
        [
            {"content": "Alice's favourite colour is blue"},
            {"content": "Bob lives in Paris with Alice"},
            {"content": "the quick brown fox jumps over the lazy dog"},
        ]
    )
    c = counts(dsn)
    assert result.inserted == 3
    assert c["memory_attributes"] >= 2 and c["memory_entities"] >= 3
    assert result.copy_rows == c["memories"] + c["memory_terms"] + c["memory_entities"] + c["memory_attributes"]


def test_bm25_statistics_follow_the_corpus(system, dsn):
    docs = ["apple banana apple", "banana cherry", "cherry cherry durian apple", "elder fig"]
    system.store_many([{"content": d, "tenant": "t"} for d in docs])
    system.store_many([{"content": "apple pie", "tenant": "other"}])

    def stats():
        n_docs, sum_len = rows(
            dsn, "SELECT n_docs, sum_len FROM memoria.bm25_docs WHERE tenant = 't' AND memory_type = 'general'"
        )[0]
        df = dict(rows(dsn, "SELECT term, df FROM memoria.bm25_terms WHERE tenant = 't'"))
        return n_docs, sum_len, df

    expected_df = Counter(term for d in docs for term in set(tokenize(d)))
    assert stats() == (4, sum(len(tokenize(d)) for d in docs), dict(expected_df))

    system.store_many([{"content": d, "tenant": "t"} for d in docs])  # duplicates change nothing
    assert stats() == (4, sum(len(tokenize(d)) for d in docs), dict(expected_df))

    system.store_many([{"content": "fig fig grape", "tenant": "t"}])
    n_docs, sum_len, df = stats()
    assert (n_docs, sum_len) == (5, sum(len(tokenize(d)) for d in docs) + 3)
    assert df["fig"] == 2 and df["grape"] == 1 and df["appl"] == 2  # Snowball: apple -> appl


def test_postings_hold_term_frequency_and_length(system, dsn):
    memory_id = system.store("cherry cherry durian apple", tenant="t")
    postings = rows(
        dsn, "SELECT term, tf, doc_len FROM memoria.memory_terms WHERE memory_id = %s ORDER BY term", (memory_id,)
    )
    assert postings == [("appl", 1, 4), ("cherri", 2, 4), ("durian", 1, 4)]  # Snowball stems


def test_entities_and_cooccurrence_edges(system, dsn):
    system.store_many(
        [
            {"content": "Alice met Bob in Paris.", "tenant": "t"},
            {"content": "Alice and Bob flew to Rome.", "tenant": "t"},
        ]
    )
    names = {r[0] for r in rows(dsn, "SELECT name FROM memoria.entities WHERE tenant = 't'")}
    assert names == {"Alice", "Bob", "Paris", "Rome"}
    stored = rows(
        dsn,
        "SELECT s.name, d.name, e.weight, e.src_id < e.dst_id FROM memoria.entity_edges e "
        "JOIN memoria.entities s ON s.id = e.src_id JOIN memoria.entities d ON d.id = e.dst_id",
    )
    assert all(once for *_, once in stored)  # one row per pair, from the smaller id (0017)
    edges = {frozenset((a, b)): w for a, b, w, _ in stored}
    assert len(edges) == len(stored)
    assert edges[frozenset(("Alice", "Bob"))] == 2
    assert edges[frozenset(("Alice", "Paris"))] == 1
    assert edges[frozenset(("Bob", "Rome"))] == 1
    assert frozenset(("Paris", "Rome")) not in edges
    mentions = rows(
        dsn,
        "SELECT count(*) FROM memoria.memory_entities me JOIN memoria.entities e "
        "ON e.id = me.entity_id WHERE e.name = 'Alice'",
    )
    assert mentions == [(2,)]


def test_supplied_entities_are_used_as_given(system, dsn):
    system.store("the meeting went fine", entities=["Project Zephyr", "Dana"], tenant="t")
    names = {r[0] for r in rows(dsn, "SELECT name FROM memoria.entities")}
    assert names == {"Project Zephyr", "Dana"}


def test_attributes_are_extracted(system, dsn):
    system.store_many(
        [
            {"content": "Alice's favourite colour is blue"},
            {"content": "Bob lives in Paris"},
            {"content": "My favourite food is sushi", "metadata": {"speaker": "Dana"}},
            {"content": "the report is due", "attributes": [["Carol", "Employer", "Acme"]]},
        ]
    )
    triples = set(rows(dsn, "SELECT subject, attribute, value FROM memoria.memory_attributes"))
    assert ("Alice", "favourite colour", "blue") in triples
    assert ("Bob", "location", "Paris") in triples
    assert ("Dana", "favourite food", "sushi") in triples
    assert ("Carol", "employer", "Acme") in triples


def test_a_context_is_indexed_with_the_content_weighted_higher(system, dsn):
    memory_id = system.store("They are a real support.", tenant="t", context="How is your family doing?")
    postings = dict(
        (term, (tf, doc_len))
        for term, tf, doc_len in rows(
            dsn, "SELECT term, tf, doc_len FROM memoria.memory_terms WHERE memory_id = %s", (memory_id,)
        )
    )
    own, context = tokenize("They are a real support."), tokenize("How is your family doing?")
    doc_len = 2 * len(own) + len(context)
    assert postings["support"] == (2, doc_len) and postings["famili"] == (1, doc_len)
    assert rows(dsn, "SELECT sum_len FROM memoria.bm25_docs WHERE tenant = 't'") == [(doc_len,)]
    # the context is indexed and kept beside the content, not part of it
    assert rows(dsn, "SELECT content, context FROM memoria.memories WHERE id = %s", (memory_id,)) == [
        ("They are a real support.", "How is your family doing?")
    ]


def test_a_memory_is_found_by_its_context_and_its_own_words_rank_first(system):
    own = system.store("I love my family, they are everything.", tenant="t")
    replied = system.store("They are a real support.", tenant="t", context="How is your family doing?")
    system.store("The weather is nice today.", tenant="t")
    response = system.query("family", tenant="t", workers=["bm25"], ranking=False)
    assert [c.memory_id for c in response.candidates] == [own, replied]


def test_a_context_changes_the_embedding_not_a_supplied_vector(system, dsn):
    plain = system.store("They are a real support.", tenant="a")
    with_context = system.store("They are a real support.", tenant="b", context="How is your family?")
    supplied = unit_vectors(1)[0]
    given = system.store("They are a real support.", tenant="c", context="How is your family?", embedding=supplied)
    stored = dict(rows(dsn, "SELECT id, embedding FROM memoria.memories"))
    own, in_context = system.embedder.embed(
        ["They are a real support.", "They are a real support. How is your family?"]
    )
    combined = own + CONTEXT_WEIGHT * in_context  # memoria_pg.embedding.embed_memories
    np.testing.assert_allclose(stored[plain].to_numpy(), own, rtol=1e-5)
    np.testing.assert_allclose(stored[with_context].to_numpy(), combined / np.linalg.norm(combined), rtol=1e-5)
    np.testing.assert_array_equal(stored[given].to_numpy(), supplied)


@pytest.mark.parametrize(
    "context, message",
    [
        (42, "context must be a string"),
        ("a\x00b", "context contains a NUL byte"),
        ("x" * 100_001, "context has 100001 characters"),
    ],
)
def test_a_bad_context_fails_the_batch_with_a_clear_error(system, dsn, context, message):
    with pytest.raises(InputError, match=message):
        system.store_many([{"content": "fine", "tenant": "t"}, {"content": "also fine", "context": context}])
    assert counts(dsn)["memories"] == 0


def test_a_blank_context_is_no_context(system, dsn):
    memory_id = system.store("cherry durian", tenant="t", context="   ")
    assert rows(dsn, "SELECT context FROM memoria.memories WHERE id = %s", (memory_id,)) == [(None,)]
    assert rows(
        dsn, "SELECT term, tf, doc_len FROM memoria.memory_terms WHERE memory_id = %s ORDER BY term", (memory_id,)
    ) == [("cherri", 1, 2), ("durian", 1, 2)]


def test_supplied_vectors_are_stored_as_their_unit_direction(config, dsn):
    vectors = np.random.default_rng(7).normal(size=(3, 384)).astype(np.float32) * 3  # not even unit length
    with MemorySystem(config) as system:  # no embedder: supplied vectors must not need one
        result = system.store_many([{"content": f"vector {i}", "embedding": v.tolist()} for i, v in enumerate(vectors)])
        assert not system.ingestor.embedder.loaded
    stored = dict(rows(dsn, "SELECT id, embedding FROM memoria.memories"))
    for memory_id, vector in zip(result.ids, vectors):  # scaled to unit length in float64 (issue 15, point 9)
        unit = (vector.astype(np.float64) / np.linalg.norm(vector.astype(np.float64))).astype(np.float32)
        np.testing.assert_array_equal(stored[memory_id].to_numpy(), unit)


def test_records_without_vectors_are_embedded_by_the_embedder(system, dsn):
    memory_id = system.store("lemon tart recipe", tenant="t")
    (stored,) = [r[0] for r in rows(dsn, "SELECT embedding FROM memoria.memories WHERE id = %s", (memory_id,))]
    np.testing.assert_allclose(stored.to_numpy(), system.embedder.embed(["lemon tart recipe"])[0], rtol=1e-6)


def test_mixed_tenants_in_one_batch(system):
    result = system.store_many(
        [
            {"content": "shared sentence", "tenant": "a"},
            {"content": "shared sentence", "tenant": "b"},
            {"content": "only for a", "tenant": "a"},
            MemoryRecord(content="only for b", tenant="b"),
        ]
    )
    assert result.inserted == 4
    for tenant, expected in (("a", {"shared sentence", "only for a"}), ("b", {"shared sentence", "only for b"})):
        with system.db.transaction(tenant) as conn:
            assert {r[0] for r in conn.execute("SELECT content FROM memoria.memories")} == expected
        response = system.query("shared sentence only", tenant=tenant, ranking=False)
        assert {m.content for m in response.candidates} == expected
        assert {m.tenant for m in response.candidates} == {tenant}


# -- JSONL and CSV files -----------------------------------------------------------------------------


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_jsonl_records_carry_their_line(tmp_path):
    path = write(tmp_path / "m.jsonl", '{"content": "one"}\n\n{"content": "two", "importance": 0.9}\n')
    assert list(read_records(path)) == [
        ("m.jsonl line 1", {"content": "one"}),
        ("m.jsonl line 3", {"content": "two", "importance": 0.9}),
    ]


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", "invalid JSON"),
        ('["a", "list"]', "expected a JSON object"),
    ],
)
def test_jsonl_malformed_line_names_its_number(tmp_path, line, message):
    path = write(tmp_path / "m.jsonl", f'{{"content": "one"}}\n{{"content": "two"}}\n{line}\n{{"content": "four"}}\n')
    with pytest.raises(InputError, match=rf"m\.jsonl line 3: {message}"):
        list(read_records(path))


def test_csv_columns_are_parsed(tmp_path):
    path = write(
        tmp_path / "m.csv",
        "content,memory_type,metadata,entities,importance,pinned\n"
        '"Hello, world",fact,"{""k"": 1}",Alice; Bob,0.7,yes\n'
        "plain,,,,,\n",
    )
    records = list(read_records(path))
    assert records == [
        (
            "m.csv line 2",
            {
                "content": "Hello, world",
                "memory_type": "fact",
                "metadata": {"k": 1},
                "entities": ["Alice", "Bob"],
                "importance": "0.7",
                "pinned": True,
            },
        ),
        ("m.csv line 3", {"content": "plain"}),
    ]


@pytest.mark.parametrize(
    "body, message",
    [
        ('content,metadata\nok,\nbad,"{oops"\n', r"m\.csv line 3: column 'metadata' is not valid JSON"),
        ("content\nok\nok,extra\n", r"m\.csv line 3: more fields"),
        ("text\nno content column\n", r"m\.csv line 1: the CSV header must name a 'content' column"),
    ],
)
def test_csv_malformed_line_names_its_number(tmp_path, body, message):
    with pytest.raises(InputError, match=message):
        list(read_records(write(tmp_path / "m.csv", body)))


def test_file_records_that_fail_validation_name_their_line(system, dsn, tmp_path):
    path = write(
        tmp_path / "m.jsonl",
        "\n".join(
            json.dumps(r)
            for r in [{"content": "fine"}, {"content": "not fine", "importance": "high"}, {"content": "fine too"}]
        )
        + "\n",
    )
    pairs = list(read_records(path))
    with pytest.raises(InputError, match=r"m\.jsonl line 2: importance"):
        system.store_many([r for _, r in pairs], wheres=[w for w, _ in pairs])
    assert counts(dsn)["memories"] == 0


def test_a_schema_older_than_the_library_asks_for_the_upgrade(admin_dsn):
    """Before 0006 memories have no context column: a batch fails with SchemaError and writes nothing."""
    from memoria_pg.config import Config
    from memoria_pg.core.embedding import HashEmbedder
    from memoria_pg.db import migrate
    from memoria_pg.errors import SchemaError

    from .conftest import create_database, drop_database

    name, dsn = create_database(admin_dsn)
    try:
        migrate.upgrade(dsn, "0005")
        with MemorySystem(
            Config(dsn=dsn, pool_min_size=1, pool_max_size=2, use_age=False), embedder=HashEmbedder()
        ) as system:
            with pytest.raises(SchemaError, match="older than this library.*memoria-pg db upgrade"):
                system.store("Alice met Bob in Paris.", tenant="A")
        assert counts(dsn)["memories"] == 0
        migrate.upgrade(dsn)
        with MemorySystem(
            Config(dsn=dsn, pool_min_size=1, pool_max_size=2, use_age=False), embedder=HashEmbedder()
        ) as system:
            assert system.store("Alice met Bob in Paris.", tenant="A") is not None
    finally:
        drop_database(admin_dsn, name)
