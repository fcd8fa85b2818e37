from __future__ import annotations

from typing import Any

from ...config import Config
from ...core.text import normalize_entity
from ...core.types import ProcessedQuery, Route, Shard, SourceHit
from ...db import load_sql
from .base import FusionWeights, Worker, WorkerContext

# The tenant size (its memories, every type) up to which the walk of the whole table runs on its cached
# generic plan: there planning it at each query (0.38 ms of Bind at LoCoMo) cost more than the plan
# gained. Measured alternating query by query, the same candidates every time (2026-12-07): LoCoMo's
# ~700-memory tenants, the worker 1.35 -> 1.05 ms p50 and the query with its candidate list 6.86 ->
# 6.64 ms; 2.3-2.8k memories, 2.16 -> 1.99 ms; 100k's 7-14k, 2.43 -> 3.13 ms (slower: custom plans).
GENERIC_MAX_ROWS = 3_000


class GraphWorker(Worker):
    """Entity graph walk: AGE when the server has the graph (memoria.graph_walk), a recursive CTE otherwise.

    Both backends return the same rows; `score` orders by hops (fewer first) then entity hits, and
    the final CTE reads the hop count (`fused_score`). An auxiliary source: it adds candidates and
    feeds the graph_hit ranking signal, but does not vote in the retrieval score. The walk
    is bounded by Config.graph_fanout (edges followed per entity) and graph_entity_memories (memories
    offered per reached entity, the most recent first): see sql/workers/graph.sql.
    """

    name = "graph"
    sql_name = "workers/graph"
    uses_embedding = False
    score_name = "graph_hops"
    lower_is_better = True
    weights = FusionWeights(score=0.0, rrf=0.0)

    @classmethod
    def ready(cls, query: ProcessedQuery, route: Route, config: Config) -> bool:
        return config.enable_graph and bool(query.entities) and route.graph_depth > 0

    @classmethod
    def fused_score(cls, hit: SourceHit) -> float:
        return float(hit.detail.get("hops", hit.score))

    def plans_generic(self, ctx: WorkerContext) -> bool:
        """Generic plans for the recursive CTE of typed shards, and of the whole table of a tenant with at
        most GENERIC_MAX_ROWS memories. The walk of a large tenant's whole table ran slower on its generic
        plan than planned each time (the scale benchmark's custom-vs-generic phase, planning included: 2.9
        against 2.2 ms p50 at 100k, 4.8 against 2.4 at 1M), a typed walk faster (0.8 against 1.6 ms at
        100k), and so did a small tenant's whole walk (GENERIC_MAX_ROWS). AGE's cypher() call was not
        measured on generic plans, so it keeps the pool's custom ones."""
        if ctx.graph_backend != "sql":
            return False
        if all(shard.memory_type is not None for shard in ctx.shards):
            return True
        rows = ctx.tenant_rows
        return rows is not None and sum(rows.values()) <= GENERIC_MAX_ROWS

    def sql(self, ctx: WorkerContext) -> str:
        return load_sql("workers/graph_age" if ctx.graph_backend == "age" else self.sql_name)

    def params(self, ctx: WorkerContext, shard: Shard) -> dict[str, Any]:
        entities = sorted({normalize_entity(e) for e in ctx.query.entities})
        return {
            "entities": entities,
            "depth": max(1, ctx.graph_depth),
            "memory_type": shard.memory_type,
            "limit": ctx.graph_limit,
            "fanout": ctx.config.graph_fanout,
            "entity_memories": ctx.config.graph_entity_memories,
        }

    def score(self, row: dict[str, Any]) -> float:
        return float(row["hops"]) - min(float(row["entity_hits"]), 99.0) / 100.0

    def detail(self, row: dict[str, Any]) -> dict[str, Any]:
        return {"hops": int(row["hops"]), "entity_hits": int(row["entity_hits"])}
