from __future__ import annotations

from typing import Any

from ..types import Shard
from .base import Worker, WorkerContext


class AttributeWorker(Worker):
    """Subject + attribute lookup; `score` is the trigram distance (0 = exact)."""

    name = "attribute"
    sql_name = "workers/attribute"
    higher_is_better = False

    def params(self, ctx: WorkerContext, shard: Shard) -> dict[str, Any]:
        return {"subject": ctx.query.subject, "attribute": ctx.query.attribute,
                "memory_type": shard.memory_type, "limit": ctx.limit}

    def score(self, row: dict[str, Any]) -> float:
        return float(row["distance"])

    def detail(self, row: dict[str, Any]) -> dict[str, Any]:
        return {"value": row["value"]}
