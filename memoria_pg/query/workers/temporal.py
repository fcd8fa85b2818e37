from __future__ import annotations

from typing import Any

from ...config import Config
from ...core.types import ProcessedQuery, Route, Shard
from .base import FusionWeights, Worker, WorkerContext

# The most memories of the window one search compares (sql/workers/temporal.sql): the newest of it.
WINDOW_ROWS = 2_000


class TemporalWorker(Worker):
    """The memories stored in the time the query speaks of (ProcessedQuery.time_window), nearest
    first; `score` is the cosine distance. Ready only for a query with such an expression."""

    name = "temporal"
    sql_name = "workers/temporal"
    generic_plans = True  # one plan fits every window: the (tenant, created_at) range, then the vectors
    shard_filtered = True  # its shard filter prunes on the generic plan (shard_sql)
    score_name = "temporal_distance"
    lower_is_better = True
    # As the attribute worker's: evidence beside the two main sources, which it can lift a memory of
    # that time above their other candidates with, not outweigh them on its own.
    weights = FusionWeights(score=0.3, rrf=0.6)

    @classmethod
    def ready(cls, query: ProcessedQuery, route: Route, config: Config) -> bool:
        return query.time_window is not None

    def params(self, ctx: WorkerContext, shard: Shard) -> dict[str, Any]:
        # run without a window (called directly, not through routing's `ready`): an empty one, no hits
        start, end = ctx.query.time_window or (None, None)
        return {
            "embedding": ctx.embedding,
            "memory_type": shard.memory_type,
            "start": start,
            "end": end,
            "window_rows": WINDOW_ROWS,
            "limit": ctx.limit,
        }

    def score(self, row: dict[str, Any]) -> float:
        return float(row["distance"])
