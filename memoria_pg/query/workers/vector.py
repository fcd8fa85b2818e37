from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg.rows import dict_row

from ...core.types import Shard, SourceHit
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
    its own partial HNSW index there, which `memoria-pg db vector-indexes` builds (db/vector_indexes.py);
    until it has one, the same statement searches it exactly (there is no shared HNSW index).
    `statements(ctx)`, without a transaction to read the sizes in, is the HNSW form.
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
        return [statement for group in self.groups(conn, ctx) for statement in group]

    def groups(self, conn: psycopg.Connection, ctx: WorkerContext) -> list[list[Statement]]:
        """Per shard, its statements: one, or, for the whole table of a tenant above its exact budget,
        one per memory type the tenant has (run merges them and keeps the nearest ctx.limit: the same
        memories as one search of the whole table). Each type is then searched as a typed shard is:
        exactly while small, else with HNSW, where the planner takes the tenant's own index of that
        type. One statement over the whole table would not: its Merge Append picks each partition's
        path by start-up cost, which for a partition's exact scan means reading all of it first, and
        (when a shared HNSW index still existed, before migration 0016) pgvector's estimate for that
        one, blind to the tenant filter, was the lower (EXPLAIN at 800k memories)."""
        limit = ctx.config.vector_exact_max_rows
        rows = {} if limit <= 0 else ctx.tenant_rows if ctx.tenant_rows is not None else tenant_rows(conn)
        out = []
        for shard in ctx.shards:
            split = limit > 0 and shard.memory_type is None and not exact(rows, shard, limit)
            parts = [Shard(t) for t in sorted(rows) if rows[t] > 0] if split else [shard]
            out.append([self._statement(ctx, part, limit > 0 and exact(rows, part, limit)) for part in parts])
        return out

    def _statement(self, ctx: WorkerContext, shard: Shard, exact_search: bool) -> Statement:
        return shard_sql(self.exact_sql_name if exact_search else self.sql_name, shard), self.params(ctx, shard)

    def run(self, conn: psycopg.Connection, ctx: WorkerContext) -> list[SourceHit]:
        rows: list[dict[str, Any]] = []
        with conn.cursor(row_factory=dict_row) as cur:
            for group in self.groups(conn, ctx):
                found = [row for text, params in group for row in cur.execute(text, params).fetchall()]
                if len(group) > 1:  # one search split by type: the nearest ctx.limit of them (NaN last)
                    found.sort(key=lambda r: (math.isnan(d := float(r["distance"])), d, r["memory_id"]))
                    del found[ctx.limit :]
                rows.extend(found)
        return self.hits(rows)

    def score(self, row: dict[str, Any]) -> float:
        return float(row["distance"])


def exact(rows: Mapping[str, int], shard: Shard, per_type: int) -> bool:
    """Whether the shard's memories of the tenant are few enough for an exact search."""
    if shard.memory_type is not None:
        return rows.get(shard.memory_type, 0) <= per_type
    return sum(rows.values()) <= per_type * max(1, len(rows))
