from __future__ import annotations

from typing import Any

from ...config import Config
from ...core.types import ProcessedQuery, Route, Shard
from .base import FusionWeights, Worker, WorkerContext


class AttributeWorker(Worker):
    """Subject + attribute lookup; `score` is the trigram distance (0 = exact)."""

    name = "attribute"
    sql_name = "workers/attribute"
    uses_embedding = False
    generic_plans = True
    score_name = "attribute_distance"
    lower_is_better = True
    weights = FusionWeights(score=0.3, rrf=0.6)

    @classmethod
    def ready(cls, query: ProcessedQuery, route: Route, config: Config) -> bool:
        return bool(query.subject) and bool(query.attribute)

    def params(self, ctx: WorkerContext, shard: Shard) -> dict[str, Any]:
        return {
            "subject": ctx.query.subject,
            "attribute": ctx.query.attribute,
            "valid_at": ctx.as_of,
            "memory_type": shard.memory_type,
            "limit": ctx.limit,
        }

    def score(self, row: dict[str, Any]) -> float:
        return float(row["distance"])

    def detail(self, row: dict[str, Any]) -> dict[str, Any]:
        return {"value": row["value"], "current": 1.0 if row["current"] else 0.0}
