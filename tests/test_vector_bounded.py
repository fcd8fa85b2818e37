"""The vector worker's bounded exact search (sql/workers/vector_exact_bounded.sql): the same rows, in the
same order, with the same distances as the plain exact search, whatever the query, the shard and the
limit, with ties at the bound and NaN distances (zero vectors written behind the library's back); and
chosen only where the search reads at least BOUNDED_MIN_ROWS times its limit of vectors."""

from __future__ import annotations

import math

import numpy as np
import psycopg
import pytest

from memoria_pg.core.types import ProcessedQuery, Shard
from memoria_pg.query.shards import ALL
from memoria_pg.query.workers import WorkerContext, vector
from memoria_pg.query.workers.base import shard_sql
from memoria_pg.query.workers.vector import BOUNDED_MIN_ROWS, VectorWorker
from memoria_pg.system import MemorySystem

DIM = 384
GENERAL, FACT = 330, 70  # memories of tenant t by type
DIRECTIONS = 24  # distinct stored vectors: most distances are tied with many others


@pytest.fixture
def stored(system: MemorySystem, dsn: str) -> tuple[MemorySystem, np.ndarray]:
    rng = np.random.default_rng(7)
    directions = rng.standard_normal((DIRECTIONS, DIM)).astype(np.float32)
    records = [
        {"content": f"note {i}", "tenant": "t", "memory_type": memory_type, "embedding": directions[i % DIRECTIONS]}
        for i, memory_type in enumerate(["general"] * GENERAL + ["fact"] * FACT)
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
    for limit, expected in ((5, [True, True, False]), (6, [True, False, False]), (7, [False, False, False])):
        assert (BOUNDED_MIN_ROWS * limit <= GENERAL + FACT) is expected[0]
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
        assert len(got) == sum(min(limit, n) for n in (GENERAL + FACT, GENERAL, FACT))


def test_a_split_search_bounds_a_large_type_and_returns_the_same_rows(stored, monkeypatch) -> None:
    """Above the exact budget the whole table is searched type by type in one statement (split_search):
    a type searched exactly that is large enough is bounded (its own sample parameter), and the
    statement returns what it returns with no branch bounded."""
    system, directions = stored
    ctx = context(system, directions[7], 1, (ALL,), vector_exact_max_rows=FACT + 30)
    with system.db.transaction("t") as conn:
        (statement,) = VectorWorker().statements_for(conn, ctx)
        monkeypatch.setattr(vector, "BOUNDED_MIN_ROWS", GENERAL + FACT + 1)
        (unbounded,) = VectorWorker().statements_for(conn, ctx)
    fact, general = statement[0].split("\nUNION ALL\n")  # the types in order
    assert "%(sample_0)s" in fact and statement[1]["sample_0"] == vector.BOUNDED_SAMPLE
    assert "%(sample_1)s" not in general and "%(sample" not in unbounded[0]
    assert len(rows_of(system, [statement])) == 1
    assert rows_of(system, [statement]) == rows_of(system, [unbounded])


@pytest.mark.parametrize("sample", [0, 5000])
def test_without_a_bound_every_row_is_kept_nan_distances_last(stored, sample: int) -> None:
    """Fewer rows sampled than the limit (none, or all of a tenant smaller than it): no bound, and the
    statement is the plain exact search, the zero vectors' NaN distances included after the others."""
    system, directions = stored
    limit = GENERAL + FACT + 10
    ctx = context(system, directions[1], limit, (ALL,))
    params = {**VectorWorker().params(ctx, ALL), "sample": sample}
    got = rows_of(system, [(shard_sql("workers/vector_exact_bounded", ALL), params)])
    assert got == plain(system, ctx)
    assert len(got) == GENERAL + FACT and [d for _, _, d in got[-3:]] == [None] * 3
