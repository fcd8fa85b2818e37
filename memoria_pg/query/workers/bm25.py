from __future__ import annotations

from typing import Any

from ...config import Config
from ...core.types import ProcessedQuery, Route, Shard
from .base import FusionWeights, Worker, WorkerContext


def query_terms(query: ProcessedQuery) -> list[str]:
    """The terms BM25 reads: the expanded token set when query expansion ran (the spec's lexical path)."""
    return list(query.metadata.get("expanded_tokens") or query.tokens)


def bm25_params(ctx: WorkerContext, shard: Shard) -> dict[str, Any]:
    return {
        "terms": query_terms(ctx.query),
        "types": ctx.shard_types,
        "memory_type": shard.memory_type,
        "k1": ctx.config.bm25_k1,
        "b": ctx.config.bm25_b,
        "per_term": ctx.config.bm25_postings_per_term,
        "limit": ctx.limit,
    }


class BM25Worker(Worker):
    """Okapi BM25 computed in the database over impact-ordered postings."""

    name = "bm25"
    sql_name = "workers/bm25"
    uses_embedding = False
    generic_plans = True
    shard_filtered = True  # its postings' shard filter prunes on the generic plan (shard_sql)
    score_name = "bm25"
    weights = FusionWeights(score=0.5, rrf=1.0)

    @classmethod
    def ready(cls, query: ProcessedQuery, route: Route, config: Config) -> bool:
        return bool(query.tokens)

    def params(self, ctx: WorkerContext, shard: Shard) -> dict[str, Any]:
        return bm25_params(ctx, shard)
