"""The query's hot statements as the server gets them (db/native.py: converted once, comments
stripped, sent by a RawCursor; times clamped for psycopg's C loader; jsonb read by orjson), against
the same SQL files sent through psycopg's own placeholder conversion and loaders, on a real server."""

from __future__ import annotations

import datetime as dt

import psycopg
import pytest
from psycopg.rows import dict_row

import memoria_pg.query.pipeline as pipeline_module
from memoria_pg.db import load_sql
from memoria_pg.db.database import register_readable_times
from memoria_pg.query.candidates import candidate_statement

MEMORIES = [
    "Maya moved to Lisbon in 2021 and works at Tidewater Labs.",
    "Maya's sister Ines visited Lisbon in May.",
    "The Lisbon office of Tidewater Labs opened in 2019.",
    "Ines prefers green tea; Maya drinks coffee.",
    "Tidewater Labs builds tide sensors.",
]


def captured_hits(system, monkeypatch, text: str):
    """The hits and fusion settings a V4 query hands the final CTE."""
    seen = []
    real = pipeline_module.build_candidates

    def spy(conn, hits, registry, **kwargs):
        seen.append((hits, kwargs))
        return real(conn, hits, registry, **kwargs)

    monkeypatch.setattr(pipeline_module, "build_candidates", spy)
    response = system.query(text, tenant="t", ranking=False)
    monkeypatch.undo()
    (call,) = seen
    return response, call


def test_the_final_cte_returns_what_psycopgs_own_conversion_returns(system, monkeypatch):
    system.store_many([{"content": c, "tenant": "t", "metadata": {"n": i}} for i, c in enumerate(MEMORIES)])
    response, (hits, kwargs) = captured_hits(system, monkeypatch, "Where does Maya work in Lisbon?")
    text, params = candidate_statement(hits, system.pipeline.registry, **kwargs)
    assert text == load_sql("final_candidates")  # the file as it is, comments and all (for EXPLAIN)
    with system.db.transaction("t", generic_plans=True) as conn, conn.cursor(row_factory=dict_row, binary=True) as cur:
        register_readable_times(cur)
        rows = cur.execute(text, params).fetchall()
    assert len(rows) == len(response.candidates) >= 4
    for row, c in zip(rows, response.candidates, strict=True):
        assert (c.memory_id, c.content, c.metadata, c.created_at, c.retrieval_score, c.access_count) == (
            row["memory_id"], row["content"], row["metadata"], row["created_at"], row["retrieval_score"],
            row["access_count"],
        )  # fmt: skip


@pytest.mark.parametrize("v4", [True, False])
def test_metadata_keeps_integers_beyond_64_bits_and_any_json(system, v4):
    metadata = {
        "big": 123456789012345678901234567890,
        "neg": -(2**70),
        "text": "é \\ud800",
        "f": 0.1,
        "deep": [{"a": None}],
    }
    system.store("Maya keeps a ledger of big numbers.", tenant="t", metadata=metadata)
    (memory,) = system.query("Maya ledger numbers", tenant="t", ranking=False, v4=v4).memories
    assert memory.metadata == metadata
    assert type(memory.metadata["big"]) is int


@pytest.mark.parametrize("v4", [True, False])
@pytest.mark.parametrize("ranking", [True, False])
def test_legacy_times_past_either_end_read_as_the_nearest_readable_time(system, dsn, v4, ranking):
    old = system.store("Maya keeps a green notebook.", tenant="t")
    future = system.store("Maya keeps a green pen.", tenant="t")
    normal = system.store("Maya keeps a green cup.", tenant="t", created_at="2024-05-01T10:00:00+00:00")
    with psycopg.connect(dsn) as conn:  # as an older version could store them
        conn.execute("UPDATE memoria.memories SET created_at = '0001-01-01 00:00:00+14' WHERE id = %s", (old,))
        conn.execute("UPDATE memoria.memories SET created_at = '12000-06-01 00:00:00+00' WHERE id = %s", (future,))
    found = {m.memory_id: m for m in system.query("Maya green", tenant="t", ranking=ranking, v4=v4).memories}
    assert found[old].created_at == dt.datetime.min.replace(tzinfo=dt.UTC)
    assert found[future].created_at == dt.datetime.max.replace(tzinfo=dt.UTC)
    assert found[normal].created_at == dt.datetime(2024, 5, 1, 10, tzinfo=dt.UTC)
