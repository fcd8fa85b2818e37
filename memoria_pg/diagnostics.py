"""Per-query diagnostics: every field the spec lists, plus the route and per-worker detail."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Diagnostics:
    path: str = "v4"  # v4 | v3
    candidate_count: int = 0
    returned_count: int = 0
    query_processing_ms: float = 0.0
    embedding_ms: float = 0.0
    retrieval_ms: float = 0.0
    database_ms: float = 0.0  # the final CTE (candidate construction)
    ranking_ms: float = 0.0
    response_ms: float = 0.0
    total_ms: float = 0.0
    retrieval_policy: str | None = None
    retrieval_finish_reason: str | None = None
    completed_task_count: int = 0
    pending_task_count: int = 0
    failed_task_count: int = 0
    retrieval_wait_ms: float = 0.0
    submitted_sources: list[str] = field(default_factory=list)
    completed_sources: list[str] = field(default_factory=list)
    pending_sources: list[str] = field(default_factory=list)
    failed_sources: list[str] = field(default_factory=list)
    ranking_skipped: bool = False
    policy_satisfied: bool | None = None
    route: str | None = None
    shards: list[str] = field(default_factory=list)
    worker_ms: dict[str, float] = field(default_factory=dict)
    worker_errors: dict[str, str] = field(default_factory=dict)
    worker_hits: dict[str, int] = field(default_factory=dict)
    relevance_pool_count: int = 0
    relevance_fast_path: bool = False
    type_filter_applied: bool = False
    cross_encoder_applied: bool = False
    graph_backend: str | None = None
    trace_id: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
