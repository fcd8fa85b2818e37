from __future__ import annotations

from typing import Any

from ..types import Shard
from .base import Worker, WorkerContext


class VectorWorker(Worker):
    """pgvector HNSW cosine search; `score` is the cosine distance (lower is better)."""

    name = "vector"
    sql_name = "workers/vector"
    higher_is_better = False

    def params(self, ctx: WorkerContext, shard: Shard) -> dict[str, Any]:
        return {"embedding": ctx.embedding, "memory_type": shard.memory_type, "limit": ctx.limit}

    def score(self, row: dict[str, Any]) -> float:
        return float(row["distance"])
