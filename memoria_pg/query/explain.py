"""`memoria-pg query --explain`: the route, each worker's SQL with its plan and time, the candidates."""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
from tabulate import tabulate

from ..core.types import ProcessedQuery, Route
from .candidates import v3_statement
from .diagnostics import Diagnostics
from .pipeline import QueryPipeline
from .response import QueryResponse
from .shards import tenant_rows


def _shown(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return f"<vector({len(value)}) {np.array2string(value[:3], precision=3)}...>"
    return value


def explain_query(pipeline: QueryPipeline, response: QueryResponse) -> str:
    """The route, each submitted worker's SQL with its parameters, plan and time, and the candidates."""
    query, route, d = response.query, response.route, response.diagnostics
    out: list[str] = []
    out.append(f"query: {query.text!r}  tenant={query.tenant}  hint={query.memory_type_hint}")
    out.append(
        f"  tokens={query.tokens} entities={query.entities} phrases={query.phrases} "
        f"subject={query.subject} attribute={query.attribute}"
    )
    if route is None:
        out.append("path: V3 (vector search only)")
        out.extend(_v3_plan(pipeline, query, d))
    else:
        out.append(
            f"route: {route.name} workers={list(route.workers)} depth={route.graph_depth} "
            f"pool={route.pool} fallback={list(route.fallback_pools)} shards={d.shards}"
        )
        out.append(
            f"submitted={d.submitted_sources} completed={d.completed_sources} "
            f"pending={d.pending_sources} failed={d.failed_sources} finish={d.retrieval_finish_reason}"
        )
        out.extend(_worker_plans(pipeline, query, route, d))
    rows = [
        (
            i + 1,
            c.memory_id,
            c.memory_type,
            "+".join(c.sources),
            " ".join(f"{k}={v:.3g}" for k, v in c.scores.items() if not k.endswith("_rank")),
            f"{c.retrieval_score:.4f}",
            f"{c.final_score:.4f}",
            c.content[:60],
        )
        for i, c in enumerate(response.candidates[:50])
    ]
    out.append(f"\ncandidates ({d.candidate_count}, first 50):")
    out.append(tabulate(rows, headers=["#", "id", "type", "sources", "scores", "retrieval", "final", "content"]))
    out.append(
        f"\nreturned {d.returned_count}; total {d.total_ms:.1f} ms (processing {d.query_processing_ms:.1f}, "
        f"embedding {d.embedding_ms:.1f}, retrieval {d.retrieval_ms:.1f}, database {d.database_ms:.1f}, "
        f"ranking {d.ranking_ms:.1f})"
    )
    return "\n".join(out)


def _v3_plan(pipeline: QueryPipeline, query: ProcessedQuery, d: Diagnostics) -> list[str]:
    """V3's one statement (candidates.v3_statement: search, final CTE, entity lookup) with its plan."""
    cfg, vector = pipeline.config, pipeline.embedder.embed_query(query.normalized)
    text, params = v3_statement(
        vector, pipeline.registry, limit=max(cfg.worker_limit, d.returned_count),
        exact_max_rows=cfg.vector_exact_max_rows, validity=query.validity, embeddings=False, **pipeline._fusion(),
    )  # fmt: skip
    head = f"\n== V3's statement ({d.database_ms:.1f} ms in the query, {d.worker_hits.get('vector', 0)} hits)"
    out = [head, *_statement_plan(pipeline, query.tenant, text, params, generic_plans=True)]
    with pipeline.db.transaction(query.tenant) as conn:
        rows = tenant_rows(conn)
        if not pipeline.v3_above_bound(rows):
            return out
        # above the exact bound the statement answers nothing: the vector worker searched the tenant
        ctx = pipeline._v3_context(query, vector, rows, d.returned_count)
        statements = pipeline.registry["vector"]().statements_for(conn, ctx)
    out.append("\n== the tenant is above vector_exact_max_rows: the vector worker's search, then the final CTE")
    for statement, statement_params in statements:
        out.extend(_statement_plan(pipeline, query.tenant, statement, statement_params))
    return out


def _statement_plan(
    pipeline: QueryPipeline, tenant: str, text: str, params: dict[str, Any], *, generic_plans: bool = False
) -> list[str]:
    """A statement, its parameters, and its plan with EXPLAIN ANALYZE in a tenant transaction of its own."""
    out = [text.strip(), "-- params: " + json.dumps({k: _shown(v) for k, v in params.items()}, default=str)]
    with pipeline.db.transaction(tenant, generic_plans=generic_plans) as conn:
        t0 = time.perf_counter()
        plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + text, params).fetchall()
        elapsed = (time.perf_counter() - t0) * 1000
    out.append(f"-- plan ({elapsed:.1f} ms):")
    out.extend("   " + row[0] for row in plan)
    return out


def _worker_plans(pipeline: QueryPipeline, query: ProcessedQuery, route: Route, d: Diagnostics) -> list[str]:
    out: list[str] = []
    with pipeline.db.transaction(query.tenant) as conn:
        rows = tenant_rows(conn)
    ctx = pipeline.context(query, route, pipeline.embedder.embed_query(query.normalized), rows)
    for name in d.submitted_sources:
        worker = pipeline.registry[name]()
        out.append(
            f"\n== worker {name} ({d.worker_ms.get(name, 0):.1f} ms in the query, {d.worker_hits.get(name, 0)} hits)"
        )
        parts = worker.parts(ctx)  # a search split to run at once on several connections
        if parts:
            out.append(f"-- in {len(parts)} parts, each on its own connection at the same time (vector_parallel_parts)")
            for (text, params), generic in parts:
                out.extend(_statement_plan(pipeline, query.tenant, text, params, generic_plans=generic))
            continue
        with pipeline.db.transaction(query.tenant) as conn:
            statements = worker.statements_for(conn, ctx)  # e.g. the vector worker's exact or HNSW form
        for text, params in statements:
            out.extend(_statement_plan(pipeline, query.tenant, text, params))
    return out
