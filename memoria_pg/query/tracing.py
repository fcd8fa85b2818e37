"""Persisted query traces: `SELECT` shows each query's candidates with their per-source scores."""

from __future__ import annotations

from collections.abc import Sequence

from psycopg.types.json import Jsonb

from ..core.types import CandidateRecord, ProcessedQuery, Route
from ..db import Database, scalar
from .diagnostics import Diagnostics


def persist_trace(
    db: Database,
    query: ProcessedQuery,
    route: Route | None,
    candidates: Sequence[CandidateRecord],
    returned: Sequence[CandidateRecord],
    diag: Diagnostics,
) -> int:
    """Store the query, its diagnostics and every candidate with its scores; returns the trace id."""
    returned_ids = {c.memory_id for c in returned}
    with db.transaction(query.tenant, tenant_lock="shared") as conn:  # after a delete under way (set_tenant)
        trace_id = int(
            scalar(
                conn,
                "INSERT INTO memoria.query_traces (tenant, query, route, diagnostics) "
                "VALUES (current_setting('memoria.tenant'), %s, %s, %s) RETURNING id",
                (query.text, route.name if route else None, Jsonb(diag.as_dict())),
            )
        )
        rows = [
            (
                trace_id,
                rank + 1,
                c.memory_id,
                c.memory_type,
                c.sources,
                Jsonb(c.scores),
                c.retrieval_score,
                c.final_score,
                c.memory_id in returned_ids,
            )
            for rank, c in enumerate(candidates)
        ]
        # Only the candidates that still exist: a delete that committed since the query read them
        # removed their trace rows, and the lock keeps the next one from starting before this commits.
        existing = {r[0] for r in conn.execute(
            "SELECT id FROM memoria.memories WHERE tenant = current_setting('memoria.tenant') AND id = ANY(%s)",
            ([row[2] for row in rows],),
        ).fetchall()}  # fmt: skip
        rows = [row for row in rows if row[2] in existing]
        if rows:
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO memoria.query_trace_candidates (trace_id, tenant, rank, memory_id, memory_type, "
                    "sources, scores, retrieval_score, final_score, returned) "
                    "VALUES (%s, current_setting('memoria.tenant'), %s, %s, %s, %s, %s, %s, %s, %s)",
                    rows,
                )
    return trace_id
