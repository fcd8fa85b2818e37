"""Candidate construction in one final CTE, type filtering, and retrieval-only ordering."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import psycopg
from psycopg.rows import dict_row

from .db import schema_current
from .resources import load_sql
from .types import CandidateRecord, SourceHit

# How much each source counts in the fused retrieval score (sql/final_candidates.sql), per fusion
# method. Graph and phrase are auxiliary signals (the spec): they add candidates and feed the ranking
# signals (graph_hit, phrase_hit), but do not vote in the retrieval score. Measured on the dev sets
# (LoCoMo, SciFact, HotpotQA, LongMemEval): as voters they cost 0.004-0.04 of recall/nDCG, because
# speaker names and titles make the graph fire on nearly every query with a list ordered by hops.
#
# "score" (the default): each source's scores min-max normalized within its list (the floor one step
# below the last hit, so the last of n hits keeps 1/n: a memory second of two by vector and first by
# BM25 beats the vector's first alone), vector and BM25 weighted equally. Score fusion keeps how far
# ahead a source's best hits are, which rank fusion throws away; measured on the dev sets (in process, mirrored by the eval), against RRF over the
# top 20: LoCoMo recall@10 0.733 vs 0.722, SciFact nDCG@10 0.725 vs 0.704, HotpotQA 0.832 vs 0.817,
# LongMemEval recall_any@5 0.865 vs 0.811; stable for worker lists of 30 to 100 hits.
SCORE_WEIGHTS: dict[str, float] = {
    "vector": 0.5, "bm25": 0.5, "fusion": 0.5, "attribute": 0.3, "phrase": 0.0, "graph": 0.0,
    "relevance": 0.15,
}
RRF_WEIGHTS: dict[str, float] = {
    "vector": 1.0, "bm25": 1.0, "fusion": 1.0, "attribute": 0.6, "phrase": 0.0, "graph": 0.0,
    "relevance": 0.3,
}
WEIGHTS = {"score": SCORE_WEIGHTS, "rrf": RRF_WEIGHTS}
# Sources whose score is better when lower (a distance, a hop count).
LOWER_IS_BETTER = ("vector", "attribute", "relevance", "graph")
FUSION_DEPTH = 20

# Per-source score names kept on each candidate.
SCORE_NAMES = {"vector": "vector_distance", "bm25": "bm25", "fusion": "fusion", "graph": "graph_hops",
               "attribute": "attribute_distance", "phrase": "phrase", "relevance": "relevance"}


def final_cte_params(hits: Mapping[str, Sequence[SourceHit]], *, cap: int, rrf_k: int,
                     weights: Mapping[str, float] | None = None, depth: int = FUSION_DEPTH,
                     method: str = "score") -> dict[str, Any]:
    if method not in WEIGHTS:
        raise ValueError(f"fusion method must be one of {list(WEIGHTS)}, got {method!r}")
    weights = dict(WEIGHTS[method] if weights is None else weights)
    rows = [h for source_hits in hits.values() for h in source_hits]
    return {
        "ids": [h.memory_id for h in rows],
        "types": [h.memory_type for h in rows],
        "sources": [h.source for h in rows],
        "ranks": [h.rank for h in rows],
        "scores": [_source_score(h) for h in rows],
        "weight_sources": list(weights), "weight_values": [float(v) for v in weights.values()],
        "depth": depth, "rrf_k": rrf_k, "cap": cap, "method": method, "lower_better": list(LOWER_IS_BETTER),
    }


def _source_score(hit: SourceHit) -> float:
    if hit.source == "graph":
        return float(hit.detail.get("hops", hit.score))
    return float(hit.score)


def build_candidates(conn: psycopg.Connection, hits: Mapping[str, Sequence[SourceHit]], *, cap: int,
                     rrf_k: int, weights: Mapping[str, float] | None = None,
                     depth: int = FUSION_DEPTH, method: str = "score") -> list[CandidateRecord]:
    """Merge, deduplicate, fuse (`method`: "score" or "rrf"), cap and fetch in one statement; every
    candidate keeps its per-source scores."""
    if not any(hits.values()):
        return []
    params = final_cte_params(hits, cap=cap, rrf_k=rrf_k, weights=weights, depth=depth, method=method)
    details = {(h.source, h.memory_id): h.detail for source_hits in hits.values() for h in source_hits}
    # Binary results: 200 embeddings arrive as raw float32 instead of 76,800 numbers printed and
    # parsed back (the text parse was most of this statement's time). Same values: the SQL sends
    # `importance` as text, because a binary real is its float32 value, not the decimal it prints.
    with conn.cursor(row_factory=dict_row, binary=True) as cur, schema_current():
        rows = cur.execute(load_sql("final_candidates"), params).fetchall()
    return [_candidate(row, details) for row in rows]


def _candidate(row: dict[str, Any], details: Mapping[tuple[str, int], dict[str, Any]]) -> CandidateRecord:
    scores: dict[str, float] = {}
    for source, value, rank in zip(row["sources"], row["scores"], row["ranks"], strict=True):
        scores[SCORE_NAMES.get(source, source)] = float(value)
        scores[f"{source}_rank"] = float(rank)
    for source in row["sources"]:
        for key, value in details.get((source, row["memory_id"]), {}).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                scores[f"{source}_{key}"] = float(value)
    distance = scores.get("vector_distance")
    base = 1.0 / (1.0 + distance) if distance is not None else 0.0
    embedding = row["embedding"]
    return CandidateRecord(
        memory_id=row["memory_id"], tenant=row["tenant"], memory_type=row["memory_type"],
        content=row["content"], metadata=row["metadata"], importance=float(row["importance"]),
        created_at=row["created_at"], last_accessed_at=row["last_accessed_at"],
        access_count=int(row["access_count"]),
        embedding=_vector(embedding),
        sources=list(row["sources"]), scores=scores, base_score=base,
        retrieval_score=float(row["retrieval_score"]),
    )


def _vector(value: Any) -> np.ndarray | None:
    if value is None:
        return None
    if hasattr(value, "to_numpy"):  # pgvector's binary Vector
        value = value.to_numpy()
    return np.asarray(value, dtype=np.float32)


def filter_by_type(candidates: list[CandidateRecord], hint: str | None) -> tuple[list[CandidateRecord], bool]:
    """Keep the hinted type when any candidate has it; otherwise keep everything (the spec's fallback)."""
    if not hint:
        return candidates, False
    matching = [c for c in candidates if c.memory_type == hint]
    return (matching, True) if matching else (candidates, False)


def retrieval_order(candidates: list[CandidateRecord]) -> list[CandidateRecord]:
    """Retrieval-only mode: the retrieval score, falling back to inverse distance."""
    for c in candidates:
        c.final_score = c.retrieval_score if c.retrieval_score > 0 else c.base_score * 1e-3
    return sorted(candidates, key=lambda c: (-c.final_score, -c.base_score, c.memory_id))
