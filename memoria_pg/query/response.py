"""QueryResponse: what a query returns - the memories, the analysed query, its route and diagnostics."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..core.types import CandidateRecord, ProcessedQuery, Route
from .diagnostics import Diagnostics


@dataclass
class QueryResponse:
    query: ProcessedQuery
    route: Route | None
    memories: list[CandidateRecord]
    diagnostics: Diagnostics
    candidates: list[CandidateRecord] = field(default_factory=list)  # the whole type-filtered set

    def as_dict(self) -> dict[str, Any]:
        return {
            "query": _query_dict(self.query),
            "route": None if self.route is None else _route_dict(self.route),
            "memories": [memory_dict(m) for m in self.memories],
            "diagnostics": self.diagnostics.as_dict(),
        }


def _query_dict(q: ProcessedQuery) -> dict[str, Any]:
    return {
        "text": q.text,
        "normalized": q.normalized,
        "tokens": q.tokens,
        "tenant": q.tenant,
        "memory_type_hint": q.memory_type_hint,
        "entities": q.entities,
        "phrases": q.phrases,
        "subject": q.subject,
        "attribute": q.attribute,
        "metadata": q.metadata,
    }


def _route_dict(r: Route) -> dict[str, Any]:
    return {
        "name": r.name,
        "workers": list(r.workers),
        "graph_depth": r.graph_depth,
        "signals": list(r.signals),
        "pool": r.pool,
        "fallback_pools": list(r.fallback_pools),
    }


def memory_dict(c: CandidateRecord) -> dict[str, Any]:
    """A returned memory as JSON-ready data."""
    return {
        "id": c.memory_id,
        "external_id": c.external_id,
        "memory_type": c.memory_type,
        "content": c.content,
        "metadata": c.metadata,
        "importance": c.importance,
        "created_at": c.created_at.isoformat(),
        "sources": c.sources,
        "scores": c.scores,
        "base_score": c.base_score,
        "retrieval_score": c.retrieval_score,
        "final_score": c.final_score,
        "explanation": c.explanation,
    }
