"""The query path, stage by stage, in the spec's order (V4), and the V3 fallback."""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from .candidates import build_candidates, filter_by_type, retrieval_order
from .db import schema_current
from .diagnostics import Diagnostics
from .errors import InputError
from .ingest import as_vector
from .query_processor import validate_tenant
from .relevance import relevance_pool
from .routing import submitted_workers
from .shards import per_shard_limit, populated, select_shards, tenant_rows
from .tracing import persist_trace
from .types import Route
from .workers import WORKERS, WorkerContext
from .workers.vector import VectorWorker

if TYPE_CHECKING:
    from .system import MemorySystem, QueryResponse


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000


def run_query(system: "MemorySystem", text: str, *, tenant: str, memory_type: str | None, top_k: int,
              embedding: Sequence[float] | None, workers: Sequence[str] | None, ranking: bool, v4: bool,
              trace: bool) -> "QueryResponse":

    cfg = system.config
    diag = Diagnostics(path="v4" if v4 else "v3", graph_backend=system.graph_backend)
    t_start = time.perf_counter()
    if memory_type is not None and memory_type not in system.memory_types:
        raise InputError(f"unknown memory_type {memory_type!r}; known types: {list(system.memory_types)}")
    unknown = [w for w in workers or () if w not in WORKERS]
    if unknown:
        raise InputError(f"unknown workers {unknown}; choose from {list(WORKERS)}")

    t0 = time.perf_counter()
    validate_tenant(tenant)  # before it becomes the transaction's setting
    with system.db.transaction(tenant) as conn:  # one round trip: entity lookup and shard sizes
        query = system.query_processor(tenant, conn).process(text, tenant=tenant, memory_type=memory_type)
        rows = tenant_rows(conn)
    diag.query_processing_ms = _ms(t0)

    t0 = time.perf_counter()
    vector = _query_vector(system, query.normalized, embedding)
    diag.embedding_ms = _ms(t0)

    if not v4:
        return _v3(system, query, vector, top_k, ranking, diag, t_start, trace, rows)

    query, route = system.router.route_query(query)
    diag.route = route.name
    if workers:
        route = Route(route.name, tuple(workers), route.graph_depth, route.signals, route.pool, route.fallback_pools)
    names = submitted_workers(route, query, fusion_enabled=cfg.enable_fusion,
                              phrase_index_enabled=cfg.enable_phrase_index, graph_enabled=cfg.enable_graph)
    ctx = worker_context(system, query, route, vector, rows)
    diag.shards = [s.memory_type or "*" for s in ctx.shards]

    t0 = time.perf_counter()
    hits: dict = {}
    pool_hits = relevance_pool(system, query, vector, route, top_k) if cfg.enable_relevance_pool else []
    diag.relevance_pool_count = len(pool_hits)
    if pool_hits:
        hits["relevance"] = pool_hits
    if len(pool_hits) >= top_k:
        diag.relevance_fast_path = True
        names = []
    tasks = {name: _bind(WORKERS[name](), ctx) for name in names}
    if tasks:
        result = system.scheduler.run(tasks, tenant=tenant, deadline_ms=cfg.retrieval_deadline_ms)
        hits.update(result.hits)
        diag.retrieval_policy = result.policy
        diag.retrieval_finish_reason = result.finish_reason
        diag.policy_satisfied = result.policy_satisfied
        diag.retrieval_wait_ms = result.wait_ms
        diag.worker_ms = result.worker_ms
        diag.worker_errors = result.errors
        diag.submitted_sources = list(result.states)
        diag.completed_sources = result.sources("completed")
        diag.pending_sources = result.sources("pending")
        diag.failed_sources = result.sources("failed")
        diag.completed_task_count = len(diag.completed_sources)
        diag.pending_task_count = len(diag.pending_sources)
        diag.failed_task_count = len(diag.failed_sources)
    else:
        diag.retrieval_policy = system.scheduler.policy.name
        diag.retrieval_finish_reason = "relevance_fast_path" if diag.relevance_fast_path else "no_workers"
        diag.policy_satisfied = True
    diag.worker_hits = {k: len(v) for k, v in hits.items()}
    diag.retrieval_ms = _ms(t0)

    t0 = time.perf_counter()
    with system.db.transaction(tenant, generic_plans=True) as conn:
        candidates = build_candidates(conn, hits, cap=cfg.ranking_candidate_limit, rrf_k=cfg.rrf_k,
                                      depth=cfg.rrf_depth, method=cfg.fusion_method)
    diag.database_ms = _ms(t0)
    diag.candidate_count = len(candidates)

    candidates = retrieval_order(candidates)
    if cfg.enable_cross_encoder and cfg.cross_encoder_model:
        from .cross_encoder import load_cross_encoder, rerank

        model = load_cross_encoder(cfg.cross_encoder_model)
        candidates = rerank(model, query, candidates, cfg.cross_encoder_top_n)
        diag.cross_encoder_applied = True
    candidates, diag.type_filter_applied = filter_by_type(candidates, query.memory_type_hint)
    return _finish(system, query, route, candidates, top_k, ranking, diag, t_start, trace,
                   submitted=diag.submitted_sources)


def worker_context(system: "MemorySystem", query, route: Route, vector: np.ndarray,
                   rows: Mapping[str, int]) -> WorkerContext:
    """The selected shards and the per-shard limits every worker of this query runs with.

    `rows`: the tenant's memories per memory type (sql/tenant_rows); shards where it has none are
    not read, so the limits go to the shards that can return something."""
    cfg = system.config
    shards = populated(select_shards(route, query.memory_type_hint, system.memory_types,
                                     sharding=cfg.enable_sharding), rows)
    return WorkerContext(query=query, embedding=vector, shards=shards,
                         limit=per_shard_limit(cfg.worker_limit, shards),
                         graph_limit=per_shard_limit(cfg.graph_candidate_limit, shards),
                         graph_depth=route.graph_depth, config=cfg, graph_backend=system.graph_backend,
                         tenant_rows=rows)


def _bind(worker, ctx):
    return lambda conn: worker.run(conn, ctx)


def _query_vector(system: "MemorySystem", text: str, embedding: Sequence[float] | None) -> np.ndarray:
    if embedding is not None:
        vector = as_vector(embedding, "query embedding")
        if vector.shape != (system.config.embedding_dim,):
            raise InputError(f"query embedding has shape {vector.shape}, expected ({system.config.embedding_dim},)")
        if not np.all(np.isfinite(vector)) or not np.any(vector):
            raise InputError("query embedding must be finite and non-zero (cosine distance is undefined otherwise)")
        return vector
    return system.embed_query(text)


def _v3(system, query, vector, top_k, ranking, diag, t_start, trace, rows):
    """V3: embed -> vector search -> fetch -> candidates; no scheduler state in diagnostics."""
    cfg = system.config
    ctx = WorkerContext(query=query, embedding=vector, shards=select_shards(
        Route("v3", ("vector",)), None, system.memory_types, sharding=False),
        limit=max(cfg.worker_limit, top_k), graph_limit=0, graph_depth=0, config=cfg, tenant_rows=rows)
    t0 = time.perf_counter()
    with system.db.transaction(query.tenant) as conn:
        vector_hits = VectorWorker().run(conn, ctx)
        diag.retrieval_ms = _ms(t0)
        t1 = time.perf_counter()
        candidates = build_candidates(conn, {"vector": vector_hits}, cap=cfg.ranking_candidate_limit,
                                      rrf_k=cfg.rrf_k, depth=cfg.rrf_depth, method=cfg.fusion_method)
        diag.database_ms = _ms(t1)
    diag.submitted_sources = ["vector"]
    diag.completed_sources = ["vector"]
    diag.worker_hits = {"vector": len(vector_hits)}
    diag.candidate_count = len(candidates)
    candidates = sorted(candidates, key=lambda c: (-c.base_score, c.memory_id))
    for c in candidates:
        c.final_score = c.base_score
    return _finish(system, query, None, candidates, top_k, ranking, diag, t_start, trace, submitted=["vector"])


def _finish(system, query, route, candidates, top_k, ranking, diag, t_start, trace, submitted):
    from .system import QueryResponse

    t0 = time.perf_counter()
    if ranking and system.ranking:
        ranker = system.ranking
        if route is not None and route.signals and hasattr(ranker, "weights"):
            # The route's signals (e.g. recency for episodic queries) weigh more for this query.
            ranker = copy.copy(ranker)
            ranker.weights = ranker.weights.boosted(route.signals)
        returned = ranker.rank(query, list(candidates), top_k=top_k, submitted_sources=submitted)
        diag.ranking_skipped = False
    else:
        returned = candidates[:top_k]
        diag.ranking_skipped = True
    diag.ranking_ms = _ms(t0)

    t0 = time.perf_counter()
    diag.returned_count = len(returned)
    if returned and ranking:
        _record_access(system, query.tenant, returned)
    if trace:
        diag.total_ms = _ms(t_start)
        diag.trace_id = persist_trace(system.db, query, route, candidates, returned, diag)
    diag.response_ms = _ms(t0)
    diag.total_ms = _ms(t_start)
    return QueryResponse(query=query, route=route, memories=returned, diagnostics=diag, candidates=candidates)


def _record_access(system, tenant: str, returned) -> None:
    with system.db.transaction(tenant) as conn, schema_current():
        # An upsert into memory_access, not an update of the memories (their shards stay
        # all-visible for the vector worker's index-only scans). Rows go in id order: concurrent
        # queries returning overlapping memories in different orders would otherwise deadlock.
        conn.execute(
            "INSERT INTO memoria.memory_access AS a (memory_id, tenant, access_count, last_accessed_at) "
            "SELECT DISTINCT id, current_setting('memoria.tenant'), 1, now() FROM unnest(%s::bigint[]) AS u(id) "
            "ORDER BY id "
            "ON CONFLICT (memory_id) DO UPDATE SET access_count = a.access_count + 1, "
            "last_accessed_at = excluded.last_accessed_at",
            ([c.memory_id for c in returned],))
