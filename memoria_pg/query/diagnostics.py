"""Per-query diagnostics: every field the spec lists, plus the route and per-worker detail."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .scheduler import COMPLETED, FAILED, PENDING, SchedulerResult


@dataclass
class Diagnostics:
    path: str = "v4"  # v4 | v3
    candidate_count: int = 0
    returned_count: int = 0
    query_processing_ms: float = 0.0
    embedding_ms: float = 0.0
    # The query was embedded while its workers that need no vector ran (Config.overlap_embedding):
    # retrieval_ms then counts from their start, so it includes the embedding.
    embedding_overlapped: bool = False
    # The query was embedded on another thread while it was processed (the entity lookup, the analysis):
    # Config.overlap_embedding, for a query the library embeds.
    embedding_beside_processing: bool = False
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
    # The route's auxiliary workers (no weight in the retrieval score) left out of a query that
    # returns only its top_k memories, because their candidates could not be among them
    # (QueryPipeline.leave_out_auxiliary).
    skipped_sources: list[str] = field(default_factory=list)
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
    # The access statistics are best effort: why a ranked query's upsert into memory_access did not
    # happen (a lock not granted in time, the budget spent, the server), None when it did or when the
    # query did not wait for it (Config.access_statistics_wait false: a later failure is logged).
    access_error: str | None = None
    # The server the query's reads ran on ("primary" or "replica N (host:port)", db/replicas.py), why not
    # a standby or why it ran again elsewhere, the time choosing it took (read-your-writes check and
    # wait included), and the tenant's last write position it had to have replayed (None: none known).
    server: str = "primary"
    server_note: str | None = None
    routing_ms: float = 0.0
    read_your_writes_lsn: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def record_scheduler(self, result: SchedulerResult, *, more: bool = False) -> None:
        """The scheduler's outcome: policy, finish reason, per-worker states, times and errors. `more`:
        a second run of the same query's (the auxiliary workers run after all): added to the first."""
        if more:
            self.policy_satisfied = bool(self.policy_satisfied) and result.policy_satisfied
            self.retrieval_wait_ms += result.wait_ms
            self.worker_ms = {**self.worker_ms, **result.worker_ms}
            self.worker_errors = {**self.worker_errors, **result.errors}
            self.submitted_sources += list(result.states)
            self.completed_sources += result.sources(COMPLETED)
            self.pending_sources += result.sources(PENDING)
            self.failed_sources += result.sources(FAILED)
        else:
            self.retrieval_policy = result.policy
            self.retrieval_finish_reason = result.finish_reason
            self.policy_satisfied = result.policy_satisfied
            self.retrieval_wait_ms = result.wait_ms
            self.worker_ms = result.worker_ms
            self.worker_errors = result.errors
            self.submitted_sources = list(result.states)
            self.completed_sources = result.sources(COMPLETED)
            self.pending_sources = result.sources(PENDING)
            self.failed_sources = result.sources(FAILED)
        self.completed_task_count = len(self.completed_sources)
        self.pending_task_count = len(self.pending_sources)
        self.failed_task_count = len(self.failed_sources)
