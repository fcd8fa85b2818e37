from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg

from ...core.types import Shard
from ..shards import tenant_rows
from .base import FusionWeights, Statement, Worker, WorkerContext, shard_sql


class VectorWorker(Worker):
    """Cosine search; `score` is the cosine distance (lower is better).

    Per shard, exact or approximate by the tenant's size there (its BM25 document counts): up to
    `vector_exact_max_rows` memories per memory type the statement reads (one type for a typed shard,
    every type of the tenant for the whole table) are compared one by one (workers/vector_exact:
    index-only scan of the tenant's vectors, exact order); more go through the HNSW indexes
    (workers/vector). The exact cost grows with the rows, the HNSW cost with the partitions probed
    (one graph search each), hence the per-type budget. A tenant above the budget in a type searches
    its own partial HNSW index there when `memoria-pg db vector-indexes` has built one
    (db/vector_indexes.py), else the shard's shared one. `statements(ctx)`, without a transaction to
    read the sizes in, is the HNSW form.
    """

    name = "vector"
    sql_name = "workers/vector"
    exact_sql_name = "workers/vector_exact"
    shard_filtered = True
    score_name = "vector_distance"
    lower_is_better = True
    weights = FusionWeights(score=0.5, rrf=1.0)

    def params(self, ctx: WorkerContext, shard: Shard) -> dict[str, Any]:
        # the tenant as a value: the HNSW form's custom plan takes the tenant's own index if it has one
        tenant = ctx.query.tenant
        return {"embedding": ctx.embedding, "memory_type": shard.memory_type, "limit": ctx.limit, "tenant": tenant}

    def plans_generic(self, ctx: WorkerContext) -> bool:
        """Generic plans when every statement of the query is the exact search: its plan does not
        depend on the values, and planning it anew cost ~1 ms of server CPU, more than the search of a
        small tenant (shard_sql makes its shard filter prune on a generic plan). The HNSW form keeps
        custom plans: on a generic one the planner may take the covering index over the HNSW index."""
        limit = ctx.config.vector_exact_max_rows
        rows = ctx.tenant_rows
        return limit > 0 and rows is not None and all(exact(rows, shard, limit) for shard in ctx.shards)

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


def exact(rows: Mapping[str, int], shard: Shard, per_type: int) -> bool:
    """Whether the shard's memories of the tenant are few enough for an exact search."""
    if shard.memory_type is not None:
        return rows.get(shard.memory_type, 0) <= per_type
    return sum(rows.values()) <= per_type * max(1, len(rows))
