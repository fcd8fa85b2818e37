from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import psycopg

from ...core.types import Shard
from ...db import load_sql
from ..shards import tenant_rows
from .base import FusionWeights, Statement, Worker, WorkerContext


class VectorWorker(Worker):
    """Cosine search; `score` is the cosine distance (lower is better).

    Per shard, exact or approximate by the tenant's size there (its BM25 document counts): up to
    `vector_exact_max_rows` memories per memory type the statement reads (one type for a typed shard,
    every type of the tenant for the whole table) are compared one by one (workers/vector_exact:
    index-only scan of the tenant's vectors, exact order); more go through the HNSW indexes
    (workers/vector). The exact cost grows with the rows, the HNSW cost with the partitions probed
    (one graph search each), hence the per-type budget. `statements(ctx)`, without a transaction to
    read the sizes in, is the HNSW form.
    """

    name = "vector"
    sql_name = "workers/vector"
    exact_sql_name = "workers/vector_exact"
    score_name = "vector_distance"
    lower_is_better = True
    weights = FusionWeights(score=0.5, rrf=1.0)

    def params(self, ctx: WorkerContext, shard: Shard) -> dict[str, Any]:
        return {"embedding": ctx.embedding, "memory_type": shard.memory_type, "limit": ctx.limit}

    def plans_generic(self, ctx: WorkerContext) -> bool:
        """Generic plans when every statement of the query is the exact search: its plan does not
        depend on the values, and planning it anew cost ~1 ms of server CPU, more than the search of a
        small tenant (shard_sql makes its shard filter prune on a generic plan). The HNSW form keeps
        custom plans: on a generic one the planner may take the covering index over the HNSW index."""
        limit = ctx.config.vector_exact_max_rows
        rows = ctx.tenant_rows
        return limit > 0 and rows is not None and all(exact(rows, shard, limit) for shard in ctx.shards)

    def statements(self, ctx: WorkerContext) -> list[Statement]:
        return [(shard_sql(self.sql_name, shard), self.params(ctx, shard)) for shard in ctx.shards]

    def statements_for(self, conn: psycopg.Connection, ctx: WorkerContext) -> list[Statement]:
        limit = ctx.config.vector_exact_max_rows
        rows = {} if limit <= 0 else ctx.tenant_rows if ctx.tenant_rows is not None else tenant_rows(conn)
        return [
            (
                shard_sql(self.exact_sql_name if limit > 0 and exact(rows, shard, limit) else self.sql_name, shard),
                self.params(ctx, shard),
            )
            for shard in ctx.shards
        ]

    def score(self, row: dict[str, Any]) -> float:
        return float(row["distance"])


# The shard filter of sql/workers/vector*.sql, as written for any shard. On a cached generic plan it
# prunes nothing (an OR with "IS NULL"): every partition's index would be read. shard_sql writes it
# for the shard instead: a typed shard keeps the equality, which a generic plan prunes by at executor
# start-up (and a custom one at planning); the whole table needs no filter.
SHARD_FILTER = "AND (%(memory_type)s::text IS NULL OR m.memory_type = %(memory_type)s::text)"


@functools.cache
def _shard_sql(name: str, typed: bool) -> str:
    text = load_sql(name)
    if text.count(SHARD_FILTER) != 1:
        raise RuntimeError(f"sql/{name}.sql lost its shard filter line {SHARD_FILTER!r}")
    return text.replace(SHARD_FILTER, "AND m.memory_type = %(memory_type)s::text" if typed else "")


def shard_sql(name: str, shard: Shard) -> str:
    """sql/<name>.sql with its shard filter written for `shard` (SHARD_FILTER)."""
    return _shard_sql(name, shard.memory_type is not None)


def exact(rows: Mapping[str, int], shard: Shard, per_type: int) -> bool:
    """Whether the shard's memories of the tenant are few enough for an exact search."""
    if shard.memory_type is not None:
        return rows.get(shard.memory_type, 0) <= per_type
    return sum(rows.values()) <= per_type * max(1, len(rows))
