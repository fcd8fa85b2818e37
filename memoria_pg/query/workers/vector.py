from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import psycopg

from ...core.types import Shard
from ..shards import ALL as ALL_TYPES
from ..shards import tenant_rows
from .base import FusionWeights, Statement, Worker, WorkerContext, shard_sql

_TYPE_PARAM = "%(memory_type)s"  # a typed shard's filter in shard_sql's text
# An exact search of at least BOUNDED_MIN_ROWS times its limit of vectors is bounded first by the
# nearest of BOUNDED_SAMPLE times its limit of them (sql/workers/vector_exact_bounded.sql): the same
# rows, fewer of them sorted. Side by side on the same queries (docs/measurements.md, "At 100k"): 10k
# vectors a tenant -17.5% on the statement, 2k -1% to -5% (neutral), 550 +28% (the sample is most of
# the tenant), hence the bound below which the plain form stays.
BOUNDED_MIN_ROWS = 60
BOUNDED_SAMPLE = 10


class VectorWorker(Worker):
    """Cosine search; `score` is the cosine distance (lower is better).

    Per shard, exact or approximate by the tenant's size there (its BM25 document counts): up to
    `vector_exact_max_rows` memories per memory type the statement reads (one type for a typed shard,
    every type of the tenant for the whole table) are compared one by one (workers/vector_exact:
    index-only scan of the tenant's vectors, exact order; from BOUNDED_MIN_ROWS times the limit on,
    workers/vector_exact_bounded: the same rows, fewer of them sorted); more go through the HNSW indexes
    (workers/vector). The exact cost grows with the rows, the HNSW cost with the partitions probed
    (one graph search each), hence the per-type budget. A tenant above the budget in a type searches
    its own partial HNSW index there, which `memoria-pg db vector-indexes` builds (db/vector_indexes.py);
    until it has one, the same statement searches it exactly (there is no shared HNSW index).
    `statements(ctx)`, without a transaction to read the sizes in, is the HNSW form.
    """

    name = "vector"
    sql_name = "workers/vector"
    exact_sql_name = "workers/vector_exact"
    bounded_sql_name = "workers/vector_exact_bounded"
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
        """Per shard, one statement. For the whole table of a tenant above its exact budget, that
        statement searches each memory type the tenant has as a typed shard is searched, exactly
        while the type is small, else with HNSW, where the planner takes the tenant's own index of
        that type, and keeps the nearest ctx.limit of them all (`split_search`): the same memories as
        one search of the whole table. One search of the whole table would not take those paths:
        its Merge Append picks each partition's path by start-up cost, which for a partition's exact
        scan means reading all of it first (and, when a shared HNSW index still existed, before
        migration 0016, pgvector's estimate for that one, blind to the tenant filter, was the lower:
        EXPLAIN at 800k memories)."""
        limit = ctx.config.vector_exact_max_rows
        rows = {} if limit <= 0 else ctx.tenant_rows if ctx.tenant_rows is not None else tenant_rows(conn)
        out = []
        for shard in ctx.shards:
            if limit > 0 and shard.memory_type is None and not exact(rows, shard, limit):
                parts = [(Shard(t), exact(rows, Shard(t), limit)) for t in sorted(rows) if rows[t] > 0]
                out.append(self.split_search(ctx, parts, rows))
            else:
                out.append(self._statement(ctx, shard, limit > 0 and exact(rows, shard, limit), rows))
        return out

    def parts(self, ctx: WorkerContext) -> list[tuple[Statement, bool]] | None:
        """A search of the whole table of a large tenant, split by memory type into up to
        `vector_parallel_parts` statements that the scheduler runs at the same time, each on its own
        connection (scheduler.Parts; `merge` keeps the nearest ctx.limit of their hits: the same
        memories as the one statement). One statement searches its memory types one after the other
        in one backend; at 1M memories (six HNSW searches of a tenant's own indexes) that was most of
        the query. Split when the search costs at least `vector_parallel_min_rows`, counting the
        memories of each type searched exactly and `vector_exact_max_rows` for each HNSW search (the
        bound is where the two cost the same), the types dealt to the parts largest first, each to
        the part with the least so far. Each part runs on generic plans when all its searches are
        exact (plans_generic). With cores to spare (WorkerContext.spare_cores) the bound is
        `vector_parallel_alone_min_rows` (split_bound)."""
        cfg, rows = ctx.config, ctx.tenant_rows
        bound = cfg.vector_exact_max_rows
        if cfg.vector_parallel_parts < 2 or rows is None or ctx.shards != (ALL_TYPES,):
            return None
        is_exact = {t: bound > 0 and exact(rows, Shard(t), bound) for t in sorted(rows) if rows[t] > 0}
        cost = {t: rows[t] if e else bound for t, e in is_exact.items()}
        if len(cost) < 2 or sum(cost.values()) < split_bound(ctx):
            return None
        groups: list[list[str]] = [[] for _ in range(min(cfg.vector_parallel_parts, len(cost)))]
        loads = [0] * len(groups)
        for t in sorted(cost, key=lambda t: (-cost[t], t)):
            k = loads.index(min(loads))
            groups[k].append(t)
            loads[k] += cost[t]
        return [
            (
                self.split_search(ctx, [(Shard(t), is_exact[t]) for t in sorted(group)], rows),
                all(is_exact[t] for t in group),
            )
            for group in groups
        ]

    def split_search(
        self, ctx: WorkerContext, parts: list[tuple[Shard, bool]], rows: Mapping[str, int] | None = None
    ) -> Statement:
        """One statement over typed shards (each exact or HNSW as `parts` says), UNION ALL of their
        searches, the nearest ctx.limit of them by (distance, id) (a NaN distance sorts last in
        PostgreSQL as in the worker's order). One round trip instead of one per type: the searches
        cost the server the same (benchmarks/vector_indexes.py), the client less (docs/measurements.md,
        "Scale and latency": V4 at 100k with every tenant split, client CPU 6.4 -> 5.8 ms a query).
        When its exact searches read at least BOUNDED_MIN_ROWS times the limit of vectors (`rows`:
        the tenant's memories by type), they share one bound, sampled from the largest of their types
        (sql/workers/vector_exact_bounded.sql; the nearest k of a subset of the statement's vectors are
        no nearer than the nearest k of all of them): the same rows, fewer of them sorted."""
        params = {**self.params(ctx, ALL_TYPES), "memory_type": None}
        counts = rows or {}
        exact_types = [(counts.get(shard.memory_type or "", 0), k) for k, (shard, e) in enumerate(parts) if e]
        header = select = ""
        if sample := bound_sample(ctx.limit, sum(n for n, _ in exact_types)):
            header, select = _bounded_halves()
            header = header.replace(_TYPE_PARAM, f"%(memory_type_{max(exact_types)[1]})s")
            params["sample"] = sample
        branches = []
        for k, (shard, exact_search) in enumerate(parts):
            text = select if header and exact_search else self._statement(ctx, shard, exact_search)[0]
            if _TYPE_PARAM not in text:
                raise RuntimeError(f"a vector statement lost its memory type parameter: {_TYPE_PARAM!r}")
            text = text.replace(_TYPE_PARAM, f"%(memory_type_{k})s")
            branches.append(f"(SELECT memory_id, memory_type, distance FROM (\n{text.strip()}\n) part_{k})")
            params[f"memory_type_{k}"] = shard.memory_type
        union = "\nUNION ALL\n".join(branches)
        return (
            f"{header}SELECT memory_id, memory_type, distance FROM (\n{union}\n) parts "
            "ORDER BY distance, memory_id LIMIT %(limit)s",
            params,
        )

    def _statement(
        self, ctx: WorkerContext, shard: Shard, exact_search: bool, rows: Mapping[str, int] | None = None
    ) -> Statement:
        """The shard's search: HNSW, or exact, bounded first when it reads many vectors (`rows`: the
        tenant's memories by type, BOUNDED_MIN_ROWS)."""
        if not exact_search:
            return shard_sql(self.sql_name, shard), self.params(ctx, shard)
        counts = rows or {}
        read = sum(counts.values()) if shard.memory_type is None else counts.get(shard.memory_type, 0)
        if sample := bound_sample(ctx.limit, read):
            return shard_sql(self.bounded_sql_name, shard), {**self.params(ctx, shard), "sample": sample}
        return shard_sql(self.exact_sql_name, shard), self.params(ctx, shard)

    def score(self, row: dict[str, Any]) -> float:
        return float(row["distance"])


def bound_sample(limit: int, read: int) -> int:
    """How many vectors an exact search of `read` of them for `limit` hits samples for its bound
    (BOUNDED_SAMPLE times the limit), or 0: fewer than BOUNDED_MIN_ROWS times the limit, no bound."""
    return BOUNDED_SAMPLE * limit if limit > 0 and read >= BOUNDED_MIN_ROWS * limit else 0


def split_bound(ctx: WorkerContext) -> int:
    """The search cost from which VectorWorker.parts splits it: `vector_parallel_min_rows`, or with
    cores to spare the lower of it and `vector_parallel_alone_min_rows` (0: no lower bound)."""
    cfg = ctx.config
    alone = cfg.vector_parallel_alone_min_rows
    if ctx.spare_cores and alone > 0:
        return min(alone, cfg.vector_parallel_min_rows)
    return cfg.vector_parallel_min_rows


def exact(rows: Mapping[str, int], shard: Shard, per_type: int) -> bool:
    """Whether the shard's memories of the tenant are few enough for an exact search."""
    if shard.memory_type is not None:
        return rows.get(shard.memory_type, 0) <= per_type
    return sum(rows.values()) <= per_type * max(1, len(rows))


_BOUNDED_SELECT = "SELECT x.memory_id"  # where sql/workers/vector_exact_bounded.sql's search follows its bound


@functools.cache
def _bounded_halves() -> tuple[str, str]:
    """sql/workers/vector_exact_bounded.sql for a typed shard, cut where its search follows its bound:
    the WITH of the sample and the bound (to which split_search appends its searches), and the search."""
    text = shard_sql(VectorWorker.bounded_sql_name, Shard("-"))
    if text.count(_BOUNDED_SELECT) != 1:
        raise RuntimeError(
            f"sql/workers/vector_exact_bounded.sql lost the line split_search cuts at: {_BOUNDED_SELECT!r}"
        )
    cut = text.index(_BOUNDED_SELECT)
    return text[:cut], text[cut:]
