from __future__ import annotations

from typing import Any

from ...config import Config
from ...core.types import ProcessedQuery, Route, Shard
from ...db import load_sql
from .base import FusionWeights, Worker, WorkerContext
from .bm25 import bm25_params


class FusionWorker(Worker):
    """Vector and BM25 fused by weighted reciprocal rank inside one statement."""

    name = "fusion"
    sql_name = "workers/fusion"
    score_name = "fusion"
    weights = FusionWeights(score=0.5, rrf=1.0)

    @classmethod
    def ready(cls, query: ProcessedQuery, route: Route, config: Config) -> bool:
        # Fusion blends the semantic and lexical scores of one statement: without BM25 in the route
        # (or tokens to score) it would only repeat the vector worker.
        return config.enable_fusion and "bm25" in route.workers and bool(query.tokens)

    def sql(self, ctx: WorkerContext) -> str:
        return load_sql(self.sql_name).format(vector=load_sql("workers/vector"), bm25=load_sql("workers/bm25"))

    def params(self, ctx: WorkerContext, shard: Shard) -> dict[str, Any]:
        params = bm25_params(ctx, shard)
        params.update(
            embedding=ctx.embedding,
            weight=ctx.config.fusion_semantic_weight,
            rrf_k=ctx.config.rrf_k,
            depth=ctx.config.rrf_depth,
            limit=ctx.config.rrf_depth,
            fusion_limit=ctx.limit,
            tenant=ctx.query.tenant,  # workers/vector's tenant, a value (VectorWorker.params)
        )
        return params

    def detail(self, row: dict[str, Any]) -> dict[str, Any]:
        return {"vector_rank": row["vector_rank"], "bm25_rank": row["bm25_rank"]}
