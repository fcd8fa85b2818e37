"""The vector worker's bounded exact search (sql/workers/vector_exact_bounded.sql): the same rows, in the
same order, with the same distances as the plain exact search, whatever the query, the shard and the
limit, with ties at the bound and NaN distances (zero vectors written behind the library's back); and
chosen only where the search reads at least BOUNDED_MIN_ROWS times its limit of vectors."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import psycopg
import pytest

from memoria_pg.core.types import ProcessedQuery, Shard
from memoria_pg.query.shards import ALL, tenant_rows
from memoria_pg.query.workers import WorkerContext, vector
from memoria_pg.query.workers.base import shard_sql
from memoria_pg.query.workers.vector import BOUNDED_MIN_ROWS, VectorWorker
from memoria_pg.system import MemorySystem

DIM = 384
GENERAL, FACT, EPISODIC = 330, 70, 40  # memories of tenant t by type
TOTAL = GENERAL + FACT + EPISODIC
DIRECTIONS = 24  # distinct stored vectors: most distances are tied with many others


@pytest.fixture
def stored(system: MemorySystem, dsn: str) -> tuple[MemorySystem, np.ndarray]:
    rng = np.random.default_rng(7)
    directions = rng.standard_normal((DIRECTIONS, DIM)).astype(np.float32)
    records = [
        {"content": f"note {i}", "tenant": "t", "memory_type": memory_type, "embedding": directions[i % DIRECTIONS]}
        for i, memory_type in enumerate(["general"] * GENERAL + ["fact"] * FACT + ["episodic"] * EPISODIC)
    ]
    system.store_many(records)
    with psycopg.connect(dsn, autocommit=True) as conn:  # NaN distances: zero vectors, as the library refuses them
        conn.execute(
            "UPDATE memoria.memories SET embedding = array_fill(0, ARRAY[%s])::vector WHERE id IN "
            "(SELECT id FROM memoria.memories WHERE tenant = 't' ORDER BY id LIMIT 3)",
            (DIM,),
        )
    return system, directions


def context(system: MemorySystem, embedding: np.ndarray, limit: int, shards: tuple[Shard, ...], **cfg) -> WorkerContext:
    return WorkerContext(
        query=ProcessedQuery(text="x", normalized="x", tokens=["x"], tenant="t"),
        embedding=embedding,
        shards=shards,
        limit=limit,
        graph_limit=limit,
        graph_depth=1,
        config=system.config.replace(**cfg),
    )


def rows_of(system: MemorySystem, statements) -> list[tuple]:
    """The rows, a NaN distance as None (so that two NaN compare equal)."""
    with system.db.transaction("t", generic_plans=True) as conn:
        rows = [r for text, params in statements for r in conn.execute(text, params).fetchall()]
    return [(i, t, None if math.isnan(d) else d) for i, t, d in rows]


def plain(system: MemorySystem, ctx: WorkerContext) -> list[tuple]:
    """What the plain exact search gives for each of the context's shards."""
    return rows_of(system, [(shard_sql("workers/vector_exact", s), VectorWorker().params(ctx, s)) for s in ctx.shards])


def test_the_bounded_search_is_taken_from_its_bound_and_not_below(stored) -> None:
    system, directions = stored
    shards = (ALL, Shard("general"), Shard("fact"))
    bounded = shard_sql("workers/vector_exact_bounded", ALL)
    for limit, expected in ((5, [True, True, False]), (6, [True, False, False]), (8, [False, False, False])):
        assert (BOUNDED_MIN_ROWS * limit <= TOTAL) is expected[0]
        ctx = context(system, directions[0], limit, shards)
        with system.db.transaction("t") as conn:
            statements = VectorWorker().statements_for(conn, ctx)
        assert ["sample" in params for _, params in statements] == expected
        assert (statements[0][0] == bounded) is expected[0]


@pytest.mark.parametrize("limit", [1, 2, 5])
def test_the_bounded_search_returns_what_the_exact_one_does(stored, limit: int) -> None:
    system, directions = stored
    rng = np.random.default_rng(limit)
    queries = [directions[3], -directions[5], np.full(DIM, 1e-3, dtype=np.float32)]
    queries += [rng.standard_normal(DIM).astype(np.float32) for _ in range(12)]
    shards = (ALL, Shard("general"), Shard("fact"))
    for query in queries:
        ctx = context(system, query, limit, shards)
        with system.db.transaction("t") as conn:
            statements = VectorWorker().statements_for(conn, ctx)
        assert any("sample" in params for _, params in statements)
        got, want = rows_of(system, statements), plain(system, ctx)
        assert got == want
        assert len(got) == sum(min(limit, n) for n in (TOTAL, GENERAL, FACT))


def test_a_split_search_shares_one_bound_and_returns_the_same_rows(stored, monkeypatch) -> None:
    """Above the exact budget the whole table is searched type by type in one statement (split_search):
    its exact searches share one bound, sampled from the largest of their types, and the statement
    returns what it returns with no bound; the types searched with HNSW are not bounded."""
    system, directions = stored
    for query in (directions[7], directions[7] + directions[8], -directions[2]):
        ctx = context(system, query, 1, (ALL,), vector_exact_max_rows=FACT + 30)  # general: HNSW
        with system.db.transaction("t") as conn:
            (statement,) = VectorWorker().statements_for(conn, ctx)
            monkeypatch.setattr(vector, "BOUNDED_MIN_ROWS", TOTAL + 1)
            (unbounded,) = VectorWorker().statements_for(conn, ctx)
            monkeypatch.undo()
        text, params = statement
        header, union = text.split("\nSELECT memory_id, memory_type, distance FROM (\n")
        episodic, fact, general = union.split("\nUNION ALL\n")  # the types in order
        assert "WITH sample AS" in header and "%(memory_type_1)s" in header  # fact, the larger exact type
        assert params["sample"] == vector.BOUNDED_SAMPLE
        assert all("FROM bound" in branch for branch in (episodic, fact)) and "FROM bound" not in general
        assert "WITH sample" not in unbounded[0] and "sample" not in unbounded[1]
        assert len(rows_of(system, [statement])) == 1
        assert rows_of(system, [statement]) == rows_of(system, [unbounded])


def test_the_parts_of_a_split_search_are_bounded_and_return_the_same_rows(stored, monkeypatch) -> None:
    """With cores to spare the search is split into statements run side by side (VectorWorker.parts):
    each part's exact searches share a bound, and each part returns what it returns with none."""
    system, directions = stored
    for query in (directions[4], -directions[9]):
        ctx = context(system, query, 1, (ALL,), vector_parallel_min_rows=0)
        with system.db.transaction("t") as conn:
            ctx = dataclasses.replace(ctx, tenant_rows=tenant_rows(conn), spare_cores=True)
        parts = VectorWorker().parts(ctx)
        monkeypatch.setattr(vector, "BOUNDED_MIN_ROWS", TOTAL + 1)
        unbounded = VectorWorker().parts(ctx)
        monkeypatch.undo()
        assert parts is not None and unbounded is not None and len(parts) == 2
        assert all("WITH sample AS" in text for (text, _), _ in parts)
        for (part, _), (plain_part, _) in zip(parts, unbounded, strict=True):
            assert rows_of(system, [part]) == rows_of(system, [plain_part])


@pytest.mark.parametrize("sample", [0, 5000])
def test_without_a_bound_every_row_is_kept_nan_distances_last(stored, sample: int) -> None:
    """Fewer rows sampled than the limit (none, or all of a tenant smaller than it): no bound, and the
    statement is the plain exact search, the zero vectors' NaN distances included after the others."""
    system, directions = stored
    limit = TOTAL + 10
    ctx = context(system, directions[1], limit, (ALL,))
    params = {**VectorWorker().params(ctx, ALL), "sample": sample}
    got = rows_of(system, [(shard_sql("workers/vector_exact_bounded", ALL), params)])
    assert got == plain(system, ctx)
    assert len(got) == TOTAL and [d for _, _, d in got[-3:]] == [None] * 3
