from __future__ import annotations

from typing import Any

from ..ingest import normalize_entity
from ..types import Shard
from .base import Worker, WorkerContext


class GraphWorker(Worker):
    """Entity graph walk: AGE when the server has the graph (memoria.graph_walk), a recursive CTE otherwise.

    Both backends return the same rows; `score` orders by hops (fewer first) then entity hits. The walk
    is bounded by Config.graph_fanout (edges followed per entity) and graph_entity_memories (memories
    offered per reached entity, the most recent first): see sql/workers/graph.sql.
    """

    name = "graph"
    sql_name = "workers/graph"

    def sql(self, ctx: WorkerContext) -> str:
        from ..resources import load_sql

        return load_sql("workers/graph_age" if ctx.graph_backend == "age" else self.sql_name)

    def params(self, ctx: WorkerContext, shard: Shard) -> dict[str, Any]:
        entities = sorted({normalize_entity(e) for e in ctx.query.entities})
        return {"entities": entities, "depth": max(1, ctx.graph_depth),
                "memory_type": shard.memory_type, "limit": ctx.graph_limit,
                "fanout": ctx.config.graph_fanout, "entity_memories": ctx.config.graph_entity_memories}

    def score(self, row: dict[str, Any]) -> float:
        return -float(row["hops"]) + min(float(row["entity_hits"]), 99.0) / 100.0

    def detail(self, row: dict[str, Any]) -> dict[str, Any]:
        return {"hops": int(row["hops"]), "entity_hits": int(row["entity_hits"])}
